"""CONCATENATION on int16: TFLite Micro copies int16 values as they are, whatever the
inputs' and output's quantisation (checked bit for bit in tests/test_int16_ops.py), along
any axis of tensors of up to 4 dimensions; no fused activation."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Operator
from .base import OperatorReader
from .concatenation import ConcatenationParams, concatenation_geometry
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
    shapes, axis = concatenation_geometry(r, y, inputs)
    return Concatenation16Params(op.index, shapes, axis, (None,) * len(inputs))
