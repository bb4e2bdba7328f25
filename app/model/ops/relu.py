"""RELU and RELU6 as operators of their own (not fused into the layer before), int8, as
TFLite Micro computes them (activations.cc; checked in tests/test_ops_relu.py):

  RELU   y = clamp(z_out + (x - z_in) scaled by (m, e), max(-128, z_out), 127), with
         (m, e) = quantised s_in / s_out (in double): a requantisation, then the clamp
  RELU6  y = clamp(x, z_in, q6), q6 = z_in + roundf(6.0f / s_in) saturated to int8: the
         input clamped in its own quantisation; TFLite Micro does not rescale, even when the
         output is quantised otherwise (as the converter writes a RELU6 after a CONCATENATION),
         and neither does edgetune
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arithmetic import round_half_away
from ..graph import Graph, Operator
from .base import ElementWise, OperatorReader, int8_input, one_to_one, scale, zero_point
from .quantize import Requantization, requantization


@dataclass(frozen=True)
class ReluParams(ElementWise):
    requant: Requantization | None  # RELU6 clamps without rescaling
    lower: int
    upper: int

    template = "relu.c.j2"
    op = "RELU"

    def reference(self, x) -> np.ndarray:
        x = int8_input(x, (self.elements,), "input")
        y = self.requant.apply(x) if self.requant is not None else x
        return np.clip(y, self.lower, self.upper).astype(np.int8)


@dataclass(frozen=True)
class Relu6Params(ReluParams):
    op = "RELU6"


def relu_params(graph: Graph, op: Operator) -> ReluParams:
    r = OperatorReader(graph, op)
    x, y = one_to_one(r)
    if op.op == "RELU":
        return ReluParams(op.index, x.elements, requantization(r, x, y), max(-128, zero_point(y)), 127)
    six = float(np.float32(6.0) / np.float32(scale(x)))  # roundf of a float quotient: halves away from zero
    upper = min(127, zero_point(x) + round_half_away(six))
    return Relu6Params(op.index, x.elements, None, zero_point(x), upper)
