"""QUANTIZE, int8 -> int8: a requantisation from the input's scale and zero point to the
output's, as TFLite Micro computes it (checked in tests/test_ops_quantize.py):
  (m, e) = quantised s_in / s_out (in double)
  y = clamp(z_out + (x - z_in) scaled by (m, e), -128, 127)
CONCATENATION uses the same step for inputs whose quantisation is not the output's.
A QUANTIZE from float (a model's float input) is not an int8 operator and is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arithmetic import MAX_SHIFT, quantize_multiplier
from ..graph import Graph, Operator, Tensor
from .base import ElementWise, OperatorReader, int8_input, one_to_one, scale, zero_point
from .fixedpoint import multiply_by_quantized_multiplier


@dataclass(frozen=True)
class Requantization:
    """From one int8 quantisation to another."""

    zero_in: int
    zero_out: int
    multiplier: int
    shift: int

    def apply(self, x: np.ndarray) -> np.ndarray:
        y = multiply_by_quantized_multiplier(x.astype(np.int64) - self.zero_in, self.multiplier, self.shift)
        return np.clip(y + self.zero_out, -128, 127).astype(np.int8)


def requantization(r: OperatorReader, x: Tensor, y: Tensor) -> Requantization:
    real = scale(x) / scale(y)
    multiplier, shift = quantize_multiplier(real)
    if shift > MAX_SHIFT:
        raise r.fail(f"the rescaling factor {real:g} from tensor {x.index} to tensor {y.index} is too large")
    return Requantization(zero_point(x), zero_point(y), multiplier, shift)


@dataclass(frozen=True)
class QuantizeParams(ElementWise):
    requant: Requantization

    template = "quantize.c.j2"
    op = "QUANTIZE"

    def reference(self, x) -> np.ndarray:
        return self.requant.apply(int8_input(x, (self.elements,), "input"))


def quantize_params(graph: Graph, op: Operator) -> QuantizeParams:
    r = OperatorReader(graph, op)
    source = r.tensor(0)
    if source.dtype != "int8":
        raise r.fail(f"input tensor {source.index} ({source.name}) is {source.dtype}; edgetune runs QUANTIZE from "
                     "int8 to int8 only (quantise float inputs before calling the model)")
    x, y = one_to_one(r)
    return QuantizeParams(op.index, x.elements, requantization(r, x, y))
