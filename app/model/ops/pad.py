"""PAD, int8, up to 4-D: the input copied into a larger tensor, every added position holding
the output's zero point (the quantised 0.0), as TFLite Micro pads without a constant input.
Values are copied as they are: TFLite Micro does not rescale a PAD (tests/test_ops_pad.py).
PADV2 (an explicit constant) is not this operator."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Operator
from .base import OperatorReader, StaticOp, int8_input, zero_point

RANK = 4


@dataclass(frozen=True)
class PadParams(StaticOp):
    shape: tuple[int, int, int, int]  # the input, extended to 4-D with leading ones
    pads: tuple[tuple[int, int], ...]  # (before, after) per axis of the 4-D shape
    value: int

    template = "pad.c.j2"
    op = "PAD"

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return (self.shape,)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.out_shape

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(n + b + a for n, (b, a) in zip(self.shape, self.pads))

    def variables(self) -> dict:
        return dict(super().variables(), out_shape=self.out_shape)

    def reference(self, x) -> np.ndarray:
        return np.pad(int8_input(x, self.shape, "input"), self.pads, constant_values=self.value)


def pad_params(graph: Graph, op: Operator, reader: OperatorReader | None = None) -> PadParams:
    """PAD's parameters; with `reader`, whose caller checked the tensors' types (sixteen.py: int16), any type."""
    r = reader or OperatorReader(graph, op)
    x, y = (r.tensor(0), r.tensor(0, output=True)) if reader else (r.int8(0), r.int8(0, output=True))
    rank = len(x.shape)
    if rank > RANK:
        raise r.fail(f"input tensor {x.index} ({x.name}) has {rank} dimensions, at most {RANK} are supported")
    paddings = r.constant(1)
    if paddings.shape != (rank, 2) or r.tensor(1).dtype not in ("int32", "int64"):
        raise r.fail(f"paddings tensor {r.tensor(1).index} has shape {list(paddings.shape)} ({r.tensor(1).dtype}); "
                     f"expected [{rank}, 2] int32")
    pads = tuple((0, 0) for _ in range(RANK - rank)) + tuple((int(b), int(a)) for b, a in paddings)
    if any(b < 0 or a < 0 for b, a in pads):
        raise r.fail(f"negative paddings {paddings.tolist()}")
    expected = tuple(n + b + a for n, (b, a) in zip(x.shape, pads[RANK - rank:]))
    if tuple(y.shape) != expected:
        raise r.fail(f"output tensor {y.index} ({y.name}) has shape {list(y.shape)}, but the padding gives {list(expected)}")
    return PadParams(op.index, (1,) * (RANK - rank) + tuple(x.shape), pads, zero_point(y))
