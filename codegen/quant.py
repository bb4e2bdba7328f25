"""numpy references for integer requantisation, bit-exact with common/requantize.c.j2."""
from __future__ import annotations

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def _trunc_div_pow2(x: np.ndarray, bits: int) -> np.ndarray:
    """Integer division by 2^bits rounding toward zero (C's `/`)."""
    return np.where(x >= 0, x >> bits, -((-x) >> bits))


def sat_rdmulh(x: np.ndarray, multiplier: int) -> np.ndarray:
    x = x.astype(np.int64)
    product = x * np.int64(multiplier)
    nudge = np.where(product >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    result = _trunc_div_pow2(product + nudge, 31)
    if multiplier == INT32_MIN:
        result = np.where(x == INT32_MIN, INT32_MAX, result)
    return result


def rounding_rshift(x: np.ndarray, exponent: int) -> np.ndarray:
    x = x.astype(np.int64)
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0).astype(np.int64)
    return (x >> exponent) + (remainder > threshold).astype(np.int64)


def requantize(acc: np.ndarray, multiplier: int, shift: int, out_zero: int,
               lo: int = -128, hi: int = 127) -> np.ndarray:
    """int32 accumulators -> int8, per-tensor multiplier and shift (TFLite convention)."""
    acc = np.asarray(acc, dtype=np.int64)
    if acc.size and (acc.min() < INT32_MIN or acc.max() > INT32_MAX):
        raise OverflowError("accumulator outside int32: the kernel's limits are exceeded")
    left, right = max(shift, 0), max(-shift, 0)
    # Left shift wraps modulo 2^32 in the kernels; mirror that.
    x = ((acc << left) & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)
    x = sat_rdmulh(x, multiplier)
    if right > 0:
        x = rounding_rshift(x, right)
    return np.clip(x + out_zero, lo, hi).astype(np.int8)


def requantize_per_channel(acc: np.ndarray, multipliers: np.ndarray, shifts: np.ndarray, out_zero: int,
                           act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int32 accumulators [..., C] -> int8, one multiplier and shift per channel (the last
    axis), clamped to the activation range [act_min, act_max] (TFLite per-channel scheme)."""
    acc = np.asarray(acc, dtype=np.int64)
    out = np.empty(acc.shape, dtype=np.int8)
    for c in range(acc.shape[-1]):
        out[..., c] = requantize(acc[..., c], int(multipliers[c]), int(shifts[c]), out_zero, act_min, act_max)
    return out
