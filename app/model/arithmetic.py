"""TFLite's integer arithmetic for int8 layers, as its documentation and its reference
kernels' behaviour define it (checked bit for bit against TFLite Micro in
tests/test_model_oracle.py):

- a real multiplier M > 0 becomes (q, shift) with M = q * 2^(shift - 31), q in [2^30, 2^31):
  frexp gives M = f * 2^e with f in [0.5, 1), q = round(f * 2^31) (half away from zero),
  a q that rounds up to 2^31 is halved (shift + 1), and a multiplier below 2^-32 (shift
  under -31) is zero (TFLite quantization_util: QuantizeMultiplier);
- a fused activation is a clamp whose bounds are the real bounds quantised with the output's
  scale and zero point (float arithmetic, rounded half away from zero), within int8;
- SAME padding gives out = ceil(in / stride) and pads total = max((out - 1) * stride +
  dilation * (k - 1) + 1 - in, 0), total // 2 before and the rest after (TFLite's
  padding.h); VALID pads nothing.
"""
from __future__ import annotations

import math

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
Q31 = 1 << 31
MAX_SHIFT = 30  # the kernels' (and TFLite's) largest left shift: shifts lie in [-31, 30]


def round_half_away(x: float) -> int:
    """std::round: to the nearest integer, halves away from zero."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(int32 multiplier, shift) of a real multiplier, TFLite's QuantizeMultiplier. The
    shift may exceed MAX_SHIFT for absurd scales (>= 2^30); the caller refuses those."""
    if real < 0 or not math.isfinite(real):
        raise ValueError(f"multiplier {real!r} is not a finite non-negative number")
    if real == 0.0:
        return 0, 0
    fraction, exponent = math.frexp(real)
    q = round_half_away(fraction * Q31)  # exact: scaling by a power of two
    if q == Q31:
        q, exponent = q // 2, exponent + 1
    if exponent < -31:
        return 0, 0
    return q, exponent


def _quantized(value: float, scale: float, zero_point: int) -> int:
    """value / scale in float32 (TFLite computes the activation bounds in float), rounded."""
    return zero_point + round_half_away(float(np.float32(value) / np.float32(scale)))


# Fused activations (ActivationFunctionType) edgetune runs: the real range they clamp to.
ACTIVATION_RANGES = {"NONE": (None, None), "RELU": (0.0, None), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}


def activation_range(activation: str, scale: float, zero_point: int, lo: int = INT8_MIN,
                     hi: int = INT8_MAX) -> tuple[int, int]:
    """[act_min, act_max] of an int8 output (or one of the type [lo, hi]: int16) with a fused activation."""
    low, high = ACTIVATION_RANGES[activation]
    act_min = lo if low is None else max(lo, _quantized(low, scale, zero_point))
    act_max = hi if high is None else min(hi, _quantized(high, scale, zero_point))
    return act_min, act_max


def output_size(size: int, k: int, stride: int, dilation: int, padding: str) -> tuple[int, int, int]:
    """(output size, pad before, pad after) along one axis, for padding "SAME" or "VALID"."""
    span = dilation * (k - 1) + 1
    if padding == "VALID":
        return (size - span + stride) // stride if size >= span else 0, 0, 0
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + span - size, 0)
    return out, total // 2, total - total // 2
