"""RSQRT on int16 (TFLite Micro's int16 kernel: zero points 0): ops/lookup.py's RSQRT
arithmetic per value instead of through a table (65,536 entries would not pay): the input's
inverse-square-root multiplier (five Newton-Raphson steps in Q3.28 on the value normalised by
pairs of bits) applied to 1 at TFLite Micro's 2^20, requantised by 1 / (sqrt(s_in) s_out),
saturated to int16; 0 gives 32767. TFLite Micro fails on a negative input (RSQRT of a negative
number): any result is its; the largest is kept, as the int8 form does. Checked bit for bit in
tests/test_int16_rsqrt.py."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Operator
from .base import ElementWise, OperatorReader, scale, zero_point
from .fixedpoint import multiply_by_quantized_multiplier
from .lookup import RSQRT_SHIFT, inverse_sqrt_multiplier, rsqrt_multiplier
from .sixteen import INT16_MAX, Int16Types, activation_of, typed_input


@dataclass(frozen=True)
class Rsqrt16Params(Int16Types, ElementWise):
    multiplier: int  # 1 / (sqrt(s_in) * s_out)
    shift: int

    template = "rsqrt16.c.j2"
    op = "RSQRT"

    def reference(self, x) -> np.ndarray:
        values = typed_input(x, "int16", (self.elements,), "input").astype(np.int64)
        results = {int(v): self._one(int(v)) for v in np.unique(values)}
        return np.array([results[int(v)] for v in values], dtype=np.int16)

    def _one(self, value: int) -> int:
        if value <= 0:
            return INT16_MAX
        m, e = inverse_sqrt_multiplier(value)
        data = int(multiply_by_quantized_multiplier(1, m, e + RSQRT_SHIFT))
        y = int(multiply_by_quantized_multiplier(data, self.multiplier, self.shift - RSQRT_SHIFT))
        return min(max(y, -INT16_MAX - 1), INT16_MAX)

    def variables(self) -> dict:
        return dict(super().variables(), rsqrt_shift=RSQRT_SHIFT)


def rsqrt16_params(graph: Graph, op: Operator) -> Rsqrt16Params:
    r = OperatorReader(graph, op)
    x, y = activation_of(r, 0), activation_of(r, 0, output=True)
    if x.elements != y.elements:
        raise r.fail(f"output tensor {y.index} ({y.name}) has {y.elements} values, the input {x.elements}")
    for t, role in ((x, "input"), (y, "output")):
        if zero_point(t) != 0:
            raise r.fail(f"{role} tensor {t.index} ({t.name}) is int16 with zero point {zero_point(t)}; TFLite Micro's "
                         "int16 RSQRT takes zero point 0")
    multiplier, shift = rsqrt_multiplier(r, scale(x), scale(y))
    return Rsqrt16Params(op.index, x.elements, multiplier, shift)
