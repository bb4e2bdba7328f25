"""RELU and RELU6 as operators of their own on int16: ops/relu.py's arithmetic with int16
bounds (RELU: a requantisation then the clamp at the output's zero point; RELU6: the input
clamped to [z_in, z_in + round(6 / s_in)] in its own quantisation), as TFLite Micro computes
them (checked bit for bit in tests/test_int16_ops.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arithmetic import MAX_SHIFT, quantize_multiplier, round_half_away
from ..graph import Graph, Operator
from .base import OperatorReader, same_quantization, scale, zero_point
from .fixedpoint import multiply_by_quantized_multiplier
from .relu import ReluParams
from .sixteen import INT16_MAX, INT16_MIN, Int16Types, activation_of, typed_input


@dataclass(frozen=True)
class Relu16Params(Int16Types, ReluParams):
    """`requant`: (zero_in, zero_out, multiplier, shift) for RELU, None for RELU6."""

    template = "relu16.c.j2"

    @property
    def op(self) -> str:  # type: ignore[override]
        return "RELU" if self.requant is not None else "RELU6"

    def reference(self, x) -> np.ndarray:
        y = typed_input(x, "int16", (self.elements,), "input").astype(np.int64)
        if self.requant is not None:
            zero_in, zero_out, multiplier, shift = self.requant
            y = multiply_by_quantized_multiplier(y - zero_in, multiplier, shift) + zero_out
        return np.clip(y, self.lower, self.upper).astype(np.int16)


def relu16_params(graph: Graph, op: Operator) -> Relu16Params:
    r = OperatorReader(graph, op)
    x, y = activation_of(r, 0), activation_of(r, 0, output=True)
    if x.elements != y.elements:
        raise r.fail(f"output tensor {y.index} ({y.name}) has {y.elements} values, the input {x.elements}")
    if op.op == "RELU":
        if zero_point(x) != 0 or zero_point(y) != 0:  # TFLite Micro fails to prepare it otherwise
            raise r.fail(f"zero points {zero_point(x)} and {zero_point(y)}; TFLite Micro's int16 RELU takes zero "
                         "points 0")
        multiplier, shift = quantize_multiplier(scale(x) / scale(y))
        if shift > MAX_SHIFT:
            raise r.fail(f"the rescaling factor {scale(x) / scale(y):g} is too large")
        return Relu16Params(op.index, x.elements, (zero_point(x), zero_point(y), multiplier, shift),
                            max(INT16_MIN, zero_point(y)), INT16_MAX)
    if not same_quantization(x, y):
        raise r.fail(f"output tensor {y.index} ({y.name}) is quantised unlike the input (TFLite Micro's RELU6 "
                     "does not rescale)")
    six = float(np.float32(6.0) / np.float32(scale(x)))
    return Relu16Params(op.index, x.elements, None, zero_point(x), min(INT16_MAX, zero_point(x) + round_half_away(six)))
