"""numpy references for integer requantisation, bit-exact with common/requantize.c.j2."""
from __future__ import annotations

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def _trunc_div_pow2(x: np.ndarray, bits: int) -> np.ndarray:
    """Integer division by 2^bits rounding toward zero (C's `/`)."""
    return np.where(x >= 0, x >> bits, -((-x) >> bits))


def sat_rdmulh(x: np.ndarray, multiplier) -> np.ndarray:
    """The saturating rounding doubling high multiply of x by `multiplier` (a scalar, or
    an array broadcast against x: one multiplier per channel on the last axis)."""
    x = np.asarray(x).astype(np.int64)
    multiplier = np.asarray(multiplier, dtype=np.int64)
    product = x * multiplier
    nudge = np.where(product >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    result = _trunc_div_pow2(product + nudge, 31)
    # The one product that overflows: INT32_MIN * INT32_MIN saturates.
    return np.where((x == INT32_MIN) & (multiplier == INT32_MIN), INT32_MAX, result)


def rounding_rshift(x: np.ndarray, exponent) -> np.ndarray:
    """x / 2^exponent rounded half away from zero; `exponent` a scalar or an array broadcast
    against x (0 leaves x as it is)."""
    x = np.asarray(x).astype(np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0).astype(np.int64)
    return (x >> exponent) + (remainder > threshold).astype(np.int64)


def requantize(acc: np.ndarray, multiplier, shift, out_zero: int,
               lo: int = -128, hi: int = 127) -> np.ndarray:
    """int32 accumulators -> int8, per-tensor multiplier and shift (TFLite convention); an
    array of multipliers and one of shifts broadcast on the last axis give the per-channel
    scheme in one pass."""
    acc = np.asarray(acc, dtype=np.int64)
    if acc.size and (acc.min() < INT32_MIN or acc.max() > INT32_MAX):
        raise OverflowError("accumulator outside int32: the kernel's limits are exceeded")
    shift = np.asarray(shift, dtype=np.int64)
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    # Left shift wraps modulo 2^32 in the kernels; mirror that.
    x = ((acc << left) & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)
    x = rounding_rshift(sat_rdmulh(x, multiplier), right)
    return np.clip(x + out_zero, lo, hi).astype(np.int8)


def requantize_per_channel(acc: np.ndarray, multipliers: np.ndarray, shifts: np.ndarray, out_zero: int,
                           act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int32 accumulators [..., C] -> int8, one multiplier and shift per channel (the last
    axis), clamped to the activation range [act_min, act_max] (TFLite per-channel scheme)."""
    acc = np.asarray(acc, dtype=np.int64)
    channels = acc.shape[-1] if acc.ndim else 0
    multipliers = np.asarray(multipliers, dtype=np.int64)[:channels]
    shifts = np.asarray(shifts, dtype=np.int64)[:channels]
    return requantize(acc, multipliers, shifts, out_zero, act_min, act_max)


def requant_form(shifts: np.ndarray, out_zero: int, act_min: int, act_max: int) -> int:
    """The form the Helium per-channel requantisation takes for these parameters, as
    common/requantize_mve.c.j2's `_requant_form` chooses it once per call: 0 the general
    form; with every shift <= 0 and an int8 out_zero and activation range, 1 every shift < 0,
    2 that with a clamp narrower than int8 (a fused ReLU), 3 shifts of 0 among them."""
    most = int(np.max(shifts))
    if most > 0 or not -128 <= out_zero <= 127 or act_min < -128 or act_max > 127:
        return 0
    if most == 0:
        return 3
    return 1 if (act_min, act_max) == (-128, 127) else 2
