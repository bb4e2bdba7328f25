"""What the 16x8 kernels share: TFLite's scheme of int16 activations with int8 weights
(the converter's EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8), as TFLite
Micro's reference kernels compute it (checked bit for bit in tests/test_int16_layers.py):

- activations int16 and symmetric (zero point 0, which TFLite Micro requires), weights int8
  symmetric with a scale per output channel, products summed without an input offset;
- the bias is int64 or int32 (`bias_bits`, how the model stores it). With an int64 bias the
  accumulator is int64 and is requantised by TFLite's 64-bit MultiplyByQuantizedMultiplier:
  the multiplier rounded to 16 bits, (q + 2^15) >> 16 (0x7FFF from 0x7FFF0000 up), then
  (acc * q16 + 2^(14 - shift)) >> (15 - shift), one rounding, returned as int32 (TFLite
  truncates: a result beyond int32 wraps before the clamp). With an int32 bias TFLite Micro
  accumulates in int32 (it wraps) and requantises as the int8 kernels do: the saturating
  rounding doubling high multiply, then a rounding right shift (common/requantize.c.j2);
- the result is clamped to the fused activation's range inside [-32768, 32767].

The kernels keep the 64-bit accumulator in both cases: wrapping it to 32 bits at the end
gives what a wrapping int32 sum gives.
"""
from __future__ import annotations

import numpy as np

from ..quant import rounding_rshift, sat_rdmulh
from .base import Buffer

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
BIAS_BITS = (32, 64)
MAX_SHIFT_64 = 7  # TFLite's 64-bit MultiplyByQuantizedMultiplier takes shifts below 8
# |x| <= 2^15 and |w| <= 2^7: the 64-bit form takes accumulators below 2^47 in magnitude,
# so at most 2^25 products beside a bias below 2^46.
MAX_REDUCTION_16 = 1 << 24
MAX_BIAS_64 = 1 << 45


def int16_tensor(shape: tuple[int, ...], rng: np.random.Generator, edge: str) -> np.ndarray:
    if edge == "extreme":
        return rng.choice(np.array([INT16_MIN, INT16_MAX], dtype=np.int16), size=shape)
    return rng.integers(INT16_MIN, INT16_MAX + 1, size=shape, dtype=np.int16)


def quant16_params(channels: int, rng: np.random.Generator, edge: str,
                   bias_bits: int) -> tuple[tuple[Buffer, ...], tuple[tuple[str, int], ...]]:
    """Bias (int64 whatever `bias_bits`), multiplier and shift per channel; the activation range."""
    limit = (1 << 40) if bias_bits == 64 else (1 << 26)
    if edge == "extreme":
        bias = rng.choice(np.array([-limit, limit - 1], dtype=np.int64), size=channels)
        shift = rng.integers(-31, 1, size=channels).astype(np.int32)
    else:
        bias = rng.integers(-limit >> 8, limit >> 8, size=channels, dtype=np.int64)
        shift = rng.integers(-24, 1, size=channels).astype(np.int32)
    multiplier = rng.integers(1 << 30, (1 << 31) - 1, size=channels, dtype=np.int64).astype(np.int32)
    if rng.random() < 0.5:
        act_min, act_max = 0, INT16_MAX  # fused ReLU
    else:
        lo, hi = sorted(int(v) for v in rng.integers(INT16_MIN, INT16_MAX + 1, size=2))
        act_min, act_max = (INT16_MIN, INT16_MAX) if edge == "extreme" else (lo, hi)
    buffers = (Buffer("bias", bias, weight=True), Buffer("multiplier", multiplier, weight=True),
               Buffer("shift", shift, weight=True))
    return buffers, (("act_min", act_min), ("act_max", act_max))


def multiply_64(acc: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier(int64_t x, ...): a 16-bit multiplier, one rounding,
    the result kept in int32 as TFLite returns it (wrapped: a result beyond int32 changes sign)."""
    reduced = (multiplier + (1 << 15)) >> 16 if multiplier < 0x7FFF0000 else 0x7FFF
    total = 15 - shift
    y = (acc.astype(np.int64) * reduced + (1 << (total - 1))) >> total
    return (y & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)


def multiply_32(acc: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """The int32 form on the accumulator wrapped to 32 bits (TFLite Micro's int32 sum)."""
    x = ((acc.astype(np.int64) << max(shift, 0)) & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)
    x = sat_rdmulh(x, multiplier)
    return rounding_rshift(x, -shift) if shift < 0 else x


def requantize16(acc: np.ndarray, bias: np.ndarray, multipliers: np.ndarray, shifts: np.ndarray, bias_bits: int,
                 act_min: int, act_max: int) -> np.ndarray:
    """int64 accumulators [..., C] plus the bias -> int16, per channel (the last axis)."""
    acc = np.asarray(acc, dtype=np.int64) + np.asarray(bias, dtype=np.int64)
    multiply = multiply_64 if bias_bits == 64 else multiply_32
    out = np.empty(acc.shape, dtype=np.int16)
    for c in range(acc.shape[-1]):
        out[..., c] = np.clip(multiply(acc[..., c], int(multipliers[c]), int(shifts[c])), act_min, act_max)
    return out
