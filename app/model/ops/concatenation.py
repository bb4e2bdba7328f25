"""CONCATENATION, int8, along any axis of tensors of up to 4 dimensions.

TFLite Micro concatenates int8 tensors that share the output's scale and zero point, and
refuses others ("failed to prepare"; TFLite's converter gives int8 concatenations one
quantisation). edgetune also takes inputs quantised differently: each such input is
requantised to the output's as a QUANTIZE would (quantize.py), so the result is TFLite
Micro's QUANTIZE-then-CONCATENATION of the same tensors (tests/test_ops_concatenation.py).
No fused activation (TFLite Micro's kernel has none to apply).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Operator, Tensor
from .base import OperatorReader, StaticOp, int8_input, same_quantization
from .quantize import Requantization, requantization

RANK = 4


@dataclass(frozen=True)
class ConcatenationParams(StaticOp):
    shapes: tuple[tuple[int, int, int, int], ...]  # each input, extended to 4-D with leading ones
    axis: int  # of the 4-D shapes
    requants: tuple[Requantization | None, ...]  # None: the input has the output's quantisation

    template = "concatenation.c.j2"
    op = "CONCATENATION"

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return self.shapes

    @property
    def output_shape(self) -> tuple[int, ...]:
        out = list(self.shapes[0])
        out[self.axis] = sum(s[self.axis] for s in self.shapes)
        return tuple(out)

    def variables(self) -> dict:
        outer = int(np.prod(self.shapes[0][:self.axis]))
        chunks = tuple(int(np.prod(s[self.axis:])) for s in self.shapes)
        return dict(super().variables(), outer=outer, chunks=chunks, row=sum(chunks))

    def reference(self, *inputs) -> np.ndarray:
        parts = []
        for i, (x, shape, requant) in enumerate(zip(inputs, self.shapes, self.requants)):
            x = int8_input(x, shape, f"input {i}")
            parts.append(x if requant is None else requant.apply(x))
        return np.concatenate(parts, axis=self.axis)


def concatenation_params(graph: Graph, op: Operator) -> ConcatenationParams:
    r = OperatorReader(graph, op)
    y = r.int8(0, output=True)
    inputs = [r.int8(i) for i in range(len(op.inputs))]
    shapes, axis = concatenation_geometry(r, y, inputs)
    return ConcatenationParams(op.index, shapes, axis,
                               tuple(None if same_quantization(x, y) else requantization(r, x, y) for x in inputs))


def concatenation_geometry(r: OperatorReader, y: Tensor, inputs: list[Tensor]) -> tuple[tuple[tuple[int, ...], ...], int]:
    """The inputs' shapes padded to RANK dimensions and the axis among them, checked: no fused
    activation, an axis within the output, inputs that differ from it along the axis only and
    add up to it there (int8 and int16 alike)."""
    op = r.op
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
    return tuple((1,) * pad + tuple(x.shape) for x in inputs), axis + pad
