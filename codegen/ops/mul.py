"""MUL, int8: the product of the two inputs less their zero points, requantised by
s1 * s2 / s_out to the output's scale, plus its zero point, a fused activation as a clamp,
numpy-style broadcasting (up to 4-D). TFLite Micro's scheme (its MUL prepares one multiplier
from the three scales, in double, and multiplies the offset values in int32; checked bit for
bit in tests/test_ops_mul.py):
  (m, e) = quantised s1 * s2 / s_out
  y = clamp(z_out + ((x1 - z1) * (x2 - z2)) scaled by (m, e), act_min, act_max)
|x - z| <= 255, so the product fits int32 with room for the left shift a multiplier of up to
2^14 takes; a larger factor is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.arithmetic import quantize_multiplier
from ..model.graph import Graph, Operator
from .add import Broadcast, broadcast_shapes
from .base import OperatorReader, int8_input, scale, zero_point
from .fixedpoint import multiply_by_quantized_multiplier

MAX_LEFT_SHIFT = 14  # 255 * 255 * 2^14 < 2^31: the shifted product never wraps


@dataclass(frozen=True)
class MulParams(Broadcast):
    zero_a: int
    zero_b: int
    zero_out: int
    multiplier: int
    shift: int
    act_min: int
    act_max: int

    template = "mul.c.j2"
    op = "MUL"

    def reference(self, a, b) -> np.ndarray:
        a = int8_input(a, self.shape_a, "input 0").astype(np.int64) - self.zero_a
        b = int8_input(b, self.shape_b, "input 1").astype(np.int64) - self.zero_b
        y = multiply_by_quantized_multiplier(a * b, self.multiplier, self.shift) + self.zero_out
        return np.clip(y, self.act_min, self.act_max).astype(np.int8)


def mul_params(graph: Graph, op: Operator) -> MulParams:
    r = OperatorReader(graph, op)
    a, b, y = r.int8(0), r.int8(1), r.int8(0, output=True)
    shape_a, shape_b, out_shape = broadcast_shapes(r, a.shape, b.shape, y.shape)
    real = float(np.float64(scale(a)) * np.float64(scale(b)) / np.float64(scale(y)))
    multiplier, shift = quantize_multiplier(real)
    if shift > MAX_LEFT_SHIFT:
        raise r.fail(f"the rescaling factor {real:g} (input scales {scale(a):g} x {scale(b):g} over the output's "
                     f"{scale(y):g}) is too large: the product would overflow int32")
    act_min, act_max = r.clamp(y)
    return MulParams(op.index, shape_a, shape_b, out_shape, zero_point(a), zero_point(b), zero_point(y),
                     multiplier, shift, act_min, act_max)
