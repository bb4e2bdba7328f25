"""TFLite's int32 fixed-point arithmetic in numpy, element-wise on int64 arrays that hold
int32 values (each result is an int32 value again, as the C computes it):

- saturating rounding doubling high multiply: round(a * b / 2^31), ties toward +infinity,
  the one overflow (INT32_MIN * INT32_MIN) saturated (gemmlowp's SaturatingRoundingDoublingHighMul);
- rounding divide by 2^e: to nearest, ties away from zero (gemmlowp's RoundingDivideByPOT);
- multiply by a quantised multiplier (q, shift): x * 2^max(shift, 0), the high multiply, then
  the rounding divide by 2^max(-shift, 0) (TFLite's MultiplyByQuantizedMultiplier, with the
  two roundings TFLite Micro's reference kernels use).

The C twins are codegen/templates/common/requantize.c.j2 and codegen/templates/ops/*.j2.
"""
from __future__ import annotations

import numpy as np

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def c_divide(a, b) -> np.ndarray:
    """Integer division truncating toward zero, as C's `/` (b > 0)."""
    a = np.asarray(a, dtype=np.int64)
    return np.where(a >= 0, a // b, -((-a) // b))


def wrap32(x) -> np.ndarray:
    """The int32 value of an integer (two's complement wrap), as int64."""
    return ((np.asarray(x, dtype=np.int64) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def sat_rdmulh(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    product = a * b  # |a * b| <= 2^62: exact in int64
    nudge = np.where(product >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    total = product + nudge
    high = c_divide(total, 1 << 31)
    return np.where((a == INT32_MIN) & (b == INT32_MIN), np.int64(INT32_MAX), high)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    x, exponent = np.asarray(x, dtype=np.int64), np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def saturating_left_shift(x, exponent: int) -> np.ndarray:
    """x * 2^exponent clamped to int32 (gemmlowp's SaturatingRoundingMultiplyByPOT, e > 0)."""
    return np.clip(np.asarray(x, dtype=np.int64) << exponent, INT32_MIN, INT32_MAX)


def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    shift = np.asarray(shift, dtype=np.int64)
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    return rounding_divide_by_pot(sat_rdmulh(wrap32(np.asarray(x, dtype=np.int64) << left), multiplier), right)
