"""What the int8 convolutions share: output geometry, shape limits, the static scratch
memory a variant may use, and per-channel quantised inputs.

Conventions (TFLite / CMSIS-NN int8): activations NHWC with batch 1, asymmetric (a zero
point per tensor); weights symmetric (zero point 0) with a multiplier and a shift per output
channel; bias int32 per output channel; the result clamped to [act_min, act_max] (a fused
ReLU is act_min = out_zero). Multipliers lie in [2^30, 2^31) and shifts in [-31, 30], as
TFLite's per-channel quantisation produces them. Padding is symmetric (`pad` rows/columns of
the input zero point on every side); stride and dilation apply to both spatial axes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from edgetune.hal import Target

from .base import MAX_ELEMENTS, Buffer, KernelError, check_elements  # noqa: F401 - re-exported

# |x - in_zero| <= 255 and |w| <= 128, so each product is at most 32640 in magnitude; a
# reduction of 32767 products stays below 1.07e9, and bias is limited to 2^30 (make_io and
# the documented contract), so every accumulator fits in int32 with the bias added.
MAX_REDUCTION = 32767
MAX_BIAS = 1 << 30
# Bytes of the harness's own .data/.bss (newlib state, the harness's statics) kept out of
# the scratch budget on firmware targets; the linker script's ASSERT still guards the rest.
HARNESS_STATIC_RESERVE = 4096
# On targets without a firmware image (the host) static buffers live in the process's .bss;
# edgetune caps them to keep a variant's footprint modest.
HOSTED_SCRATCH_LIMIT = 16 << 20


def stack_budget(target: Target) -> int:
    """Bytes a variant may keep in local arrays: a quarter of the stack the HAL gives the
    harness (firmware.stack_size), leaving the rest to the harness and the kernel's frames."""
    fw = target.firmware
    return HOSTED_SCRATCH_LIMIT // 16 if fw is None else fw.stack_size // 4


def scratch_capacity(target: Target) -> int:
    """Bytes a variant may place in static buffers (.bss). On firmware targets .bss shares
    the data region's reserved area with .data and the stack (HAL: firmware.data_reserved,
    firmware.stack_size), so that area minus the stack minus the harness's own statics."""
    fw = target.firmware
    if fw is None:
        return HOSTED_SCRATCH_LIMIT
    return max(0, fw.data_reserved - fw.stack_size - HARNESS_STATIC_RESERVE)


@dataclass(frozen=True)
class Geometry:
    """Spatial geometry of a convolution: input h x w, kernel kh x kw, and the output."""

    h: int
    w: int
    kh: int
    kw: int
    stride: int
    pad: int
    dilation: int

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.pad - self.dilation * (self.kh - 1) - 1) // self.stride + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pad - self.dilation * (self.kw - 1) - 1) // self.stride + 1

    def check(self) -> None:
        for axis, size, k in (("h", self.h, self.kh), ("w", self.w, self.kw)):
            span = self.dilation * (k - 1) + 1
            if span > size + 2 * self.pad:
                raise KernelError(f"shape: the kernel spans {span} along {axis} (k{axis}={k}, dilation={self.dilation}), "
                                  f"more than {axis}={size} plus 2*pad={2 * self.pad}")

    def padded_input(self, x: np.ndarray, zero: int) -> np.ndarray:
        """x [h, w, c] surrounded by `pad` rows and columns of the zero point."""
        p = self.pad
        out = np.full((self.h + 2 * p, self.w + 2 * p, x.shape[-1]), zero, dtype=np.int64)
        out[p:p + self.h, p:p + self.w] = x
        return out

    def patches(self, x: np.ndarray, zero: int) -> np.ndarray:
        """[oh, ow, kh, kw, c] windows of the zero-point-padded input (numpy reference)."""
        xp = self.padded_input(x, zero)
        s, d = self.stride, self.dilation
        out = np.empty((self.oh, self.ow, self.kh, self.kw, x.shape[-1]), dtype=np.int64)
        for ky in range(self.kh):
            for kx in range(self.kw):
                y0, x0 = ky * d, kx * d
                out[:, :, ky, kx, :] = xp[y0:y0 + s * (self.oh - 1) + 1:s, x0:x0 + s * (self.ow - 1) + 1:s, :]
        return out


def geometry_of(shape: Mapping[str, int]) -> Geometry:
    return Geometry(shape["h"], shape["w"], shape["kh"], shape["kw"], shape["stride"], shape["pad"], shape["dilation"])


def quant_params(channels: int, rng: np.random.Generator, edge: str) -> tuple[tuple[Buffer, ...], tuple[tuple[str, int], ...]]:
    """Per-channel bias, multiplier, shift buffers and the scalar zero points and activation
    range. "extreme" picks the saturating corners: zero points at the int8 limits, the
    largest shifts and bias magnitudes, a wide or a ReLU range."""
    if edge == "extreme":
        in_zero = int(rng.choice([-128, 127]))
        out_zero = int(rng.choice([-128, 127]))
        bias = rng.choice(np.array([-(1 << 20), (1 << 20) - 1], dtype=np.int32), size=channels)
        shift = rng.integers(-31, 1, size=channels).astype(np.int32)
    else:
        in_zero, out_zero = (int(v) for v in rng.integers(-128, 128, size=2))
        bias = rng.integers(-(1 << 16), 1 << 16, size=channels, dtype=np.int32)
        shift = rng.integers(-20, 2, size=channels).astype(np.int32)
    multiplier = rng.integers(1 << 30, (1 << 31) - 1, size=channels, dtype=np.int64).astype(np.int32)
    if rng.random() < 0.5:
        act_min, act_max = max(out_zero, -128), 127  # fused ReLU
    else:
        lo, hi = sorted(int(v) for v in rng.integers(-128, 128, size=2))
        act_min, act_max = (-128, 127) if edge == "extreme" else (lo, hi)
    buffers = (Buffer("bias", bias.astype(np.int32), weight=True), Buffer("multiplier", multiplier, weight=True),
               Buffer("shift", shift, weight=True))
    params = (("in_zero", in_zero), ("out_zero", out_zero), ("act_min", act_min), ("act_max", act_max))
    return buffers, params


def int8_tensor(shape: tuple[int, ...], rng: np.random.Generator, edge: str) -> np.ndarray:
    if edge == "extreme":
        return rng.choice(np.array([-128, 127], dtype=np.int8), size=shape)
    return rng.integers(-128, 128, size=shape, dtype=np.int8)
