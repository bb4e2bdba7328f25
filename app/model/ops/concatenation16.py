"""CONCATENATION on int16: TFLite Micro copies int16 values as they are, whatever the
inputs' and output's quantisation (checked bit for bit in tests/test_int16_ops.py), along
any axis of tensors of up to 4 dimensions; no fused activation."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Operator
from .base import OperatorReader
from .concatenation import RANK, ConcatenationParams
from .sixteen import Int16Types, activation_of, typed_input


@dataclass(frozen=True)
class Concatenation16Params(Int16Types, ConcatenationParams):
    template = "concatenation16.c.j2"

    @property
    def input_ctypes(self) -> tuple[str, ...]:
        return ("int16_t",) * len(self.shapes)

    def reference(self, *inputs) -> np.ndarray:
        return np.concatenate([typed_input(x, "int16", shape, f"input {i}")
                               for i, (x, shape) in enumerate(zip(inputs, self.shapes))], axis=self.axis)


def concatenation16_params(graph: Graph, op: Operator) -> Concatenation16Params:
    r = OperatorReader(graph, op)
    y = activation_of(r, 0, output=True)
    inputs = [activation_of(r, i) for i in range(len(op.inputs))]
    if r.activation() != "NONE":
        raise r.fail(f"fused activation {r.activation()} on a concatenation is not supported")
    rank = len(y.shape)
    axis = int(op.option("axis", 0))
    if not -rank <= axis < rank or rank > RANK:
        raise r.fail(f"axis {axis} of a {rank}-D output is not supported (up to {RANK}-D)")
    axis %= rank
    for x in inputs:
        if len(x.shape) != rank or any(a != b for d, (a, b) in enumerate(zip(x.shape, y.shape)) if d != axis):
            raise r.fail(f"input tensor {x.index} ({x.name}) of shape {list(x.shape)} does not concatenate into "
                         f"{list(y.shape)} along axis {axis}")
    if sum(x.shape[axis] for x in inputs) != y.shape[axis]:
        raise r.fail(f"the inputs' sizes along axis {axis} do not add up to the output's {y.shape[axis]}")
    pad = RANK - rank
    return Concatenation16Params(op.index, tuple((1,) * pad + tuple(x.shape) for x in inputs), axis + pad,
                                 (None,) * len(inputs))
