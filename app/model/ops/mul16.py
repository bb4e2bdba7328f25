"""MUL on int16 (TFLite's 16x8 scheme): ops/mul.py's arithmetic, the product of the two
inputs (zero points 0) requantised by s1 * s2 / s_out, clamped to the fused activation's
range in int16; broadcasting up to 4-D (checked bit for bit in tests/test_int16_ops.py).
|x| <= 2^15, so the product fits int32 only unshifted: a factor of 1 or more is refused."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arithmetic import quantize_multiplier
from ..graph import Graph, Operator
from .add import broadcast_shapes
from .base import OperatorReader, scale, zero_point
from .fixedpoint import multiply_by_quantized_multiplier
from .mul import MulParams
from .sixteen import INT16_MAX, INT16_MIN, Int16Types, activation_of, typed_input


@dataclass(frozen=True)
class Mul16Params(Int16Types, MulParams):
    template = "mul16.c.j2"

    def reference(self, a, b) -> np.ndarray:
        a = typed_input(a, "int16", self.shape_a, "input 0").astype(np.int64)
        b = typed_input(b, "int16", self.shape_b, "input 1").astype(np.int64)
        y = multiply_by_quantized_multiplier(a * b, self.multiplier, self.shift) + self.zero_out
        return np.clip(y, self.act_min, self.act_max).astype(np.int16)


def mul16_params(graph: Graph, op: Operator) -> Mul16Params:
    r = OperatorReader(graph, op)
    a, b, y = activation_of(r, 0), activation_of(r, 1), activation_of(r, 0, output=True)
    for t, role in ((a, "input 0"), (b, "input 1"), (y, "output")):
        if zero_point(t) != 0:
            raise r.fail(f"{role} tensor {t.index} ({t.name}) is int16 with zero point {zero_point(t)}; TFLite's "
                         "16x8 MUL takes symmetric int16 (zero point 0)")
    shape_a, shape_b, out_shape = broadcast_shapes(r, a.shape, b.shape, y.shape)
    real = float(np.float64(scale(a)) * np.float64(scale(b)) / np.float64(scale(y)))
    multiplier, shift = quantize_multiplier(real)
    if shift > 0:
        raise r.fail(f"the rescaling factor {real:g} is 1 or more: the int16 product shifted left would overflow int32")
    act_min, act_max = r.clamp(y, INT16_MIN, INT16_MAX, zero=0)
    return Mul16Params(op.index, shape_a, shape_b, out_shape, 0, 0, 0, multiplier, shift, act_min, act_max)
