"""MEAN, int8, over any axes of a tensor of up to 4 dimensions, keep_dims or not, from the
input's quantisation to the output's.

TFLite Micro's arithmetic, as its behaviour shows (tests/test_ops_mean.py checks it bit for
bit; a plain division by the count, or the count folded into the real multiplier, each
differ from it in a few outputs per hundred):
  acc  = sum over the reduced axes of (x - z_in)                       (int32)
  (m, e) = quantised s_in / s_out;  k = min(floor(log2 n), 32, 31 + e)
  m' = floor(m * 2^k / n),  e' = e - k                  (n = the number of values reduced)
  y = clamp(z_out + acc scaled by (m', e'), -128, 127)
so the division by n is folded into the integer multiplier, truncating, k bits deep.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..arithmetic import quantize_multiplier
from ..graph import Graph, Operator
from .base import OperatorReader, StaticOp, int8_input, scale, zero_point
from .fixedpoint import multiply_by_quantized_multiplier

RANK = 4


def mean_multiplier(real: float, count: int) -> tuple[int, int] | None:
    """(m', e') for a mean of `count` values rescaled by `real`; None when the scale ratio
    is too small to fold the count in (e < -31)."""
    multiplier, shift = quantize_multiplier(real)
    depth = min(count.bit_length() - 1, 32, 31 + shift)
    if depth < 0:
        return None
    return (multiplier << depth) // count, shift - depth


@dataclass(frozen=True)
class MeanParams(StaticOp):
    shape: tuple[int, int, int, int]  # the input, extended to 4-D with leading ones
    axes: tuple[int, ...]  # reduced axes of the 4-D shape, sorted
    zero_in: int
    zero_out: int
    multiplier: int
    shift: int

    template = "mean.c.j2"
    op = "MEAN"

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return (self.shape,)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return tuple(1 if d in self.axes else n for d, n in enumerate(self.shape))

    @property
    def count(self) -> int:
        return int(np.prod([self.shape[a] for a in self.axes]))

    @property
    def blocks(self) -> tuple[int, int, int] | None:
        """(outer, count, inner): the input as [outer][count][inner], each output the sum over
        the middle index, when the reduced axes (bar those of one value) are next to each
        other (a global average pooling, a mean over the last axis); else None, the general
        case only the scalar loop takes."""
        dims = [(n, d in self.axes) for d, n in enumerate(self.shape) if n > 1]
        reduced = [k for k, (_, is_reduced) in enumerate(dims) if is_reduced]
        first, end = (reduced[0], reduced[-1] + 1) if reduced else (0, 0)
        if end - first != len(reduced):
            return None
        sizes = [n for n, _ in dims]
        return math.prod(sizes[:first]), math.prod(sizes[first:end]), math.prod(sizes[end:])

    def variables(self) -> dict:
        kept = tuple(1 if d in self.axes else n for d, n in enumerate(self.shape))
        reduced = tuple(n if d in self.axes else 1 for d, n in enumerate(self.shape))
        steps = tuple(int(np.prod(self.shape[d + 1:])) for d in range(RANK))
        return dict(super().variables(), kept=kept, reduced=reduced, steps=steps, count=self.count,
                    blocks=self.blocks)

    def reference(self, x) -> np.ndarray:
        x = int8_input(x, self.shape, "input").astype(np.int64)
        acc = (x - self.zero_in).sum(axis=self.axes)
        y = multiply_by_quantized_multiplier(acc, self.multiplier, self.shift) + self.zero_out
        return np.clip(y, -128, 127).astype(np.int8)


def mean_params(graph: Graph, op: Operator, reader: OperatorReader | None = None) -> MeanParams:
    """MEAN's parameters; with `reader`, whose caller checked the tensors' types (mean16.py: int16), any type."""
    r = reader or OperatorReader(graph, op)
    x, y = (r.tensor(0), r.tensor(0, output=True)) if reader else (r.int8(0), r.int8(0, output=True))
    if len(x.shape) > RANK:
        raise r.fail(f"input tensor {x.index} ({x.name}) has {len(x.shape)} dimensions, at most {RANK} are supported")
    axis_tensor = r.tensor(1)
    if axis_tensor.dtype not in ("int32", "int64"):
        raise r.fail(f"axis tensor {axis_tensor.index} ({axis_tensor.name}) is {axis_tensor.dtype}, not int32")
    rank = len(x.shape)
    axes = sorted({int(a) % rank if -rank <= int(a) < rank else -1 for a in r.constant(1).reshape(-1)})
    if not axes or axes[0] < 0:
        raise r.fail(f"axes {r.constant(1).reshape(-1).tolist()} are not axes of a {rank}-D input")
    keep = bool(op.option("keepDims", False))
    expected = tuple(1 if d in axes else n for d, n in enumerate(x.shape)) if keep else \
        tuple(n for d, n in enumerate(x.shape) if d not in axes)
    if tuple(y.shape) != expected and not y.elements == int(np.prod(expected)) == 1:
        raise r.fail(f"output tensor {y.index} ({y.name}) has shape {list(y.shape)}, but the mean gives {list(expected)}")
    pad = RANK - rank
    params = mean_multiplier(scale(x) / scale(y), int(np.prod([x.shape[a] for a in axes])))
    if params is None:
        raise r.fail(f"the rescaling factor {scale(x) / scale(y):g} is too small (below 2^-31)")
    return MeanParams(op.index, (1,) * pad + tuple(x.shape), tuple(a + pad for a in axes), zero_point(x),
                      zero_point(y), *params)
