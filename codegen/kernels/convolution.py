"""What the int8 convolutions share: output geometry, shape limits, the static scratch
memory a variant may use, and per-channel quantised inputs.

Conventions (TFLite / CMSIS-NN int8): activations NHWC with batch 1, asymmetric (a zero
point per tensor); weights symmetric (zero point 0) with a multiplier and a shift per output
channel; bias int32 per output channel; the result clamped to [act_min, act_max] (a fused
ReLU is act_min = out_zero). Multipliers lie in [2^30, 2^31) and shifts in [-31, 30], as
TFLite's per-channel quantisation produces them.

Geometry is TFLite's (Conv2D / DepthwiseConv2D): padding per side (pad_top, pad_bottom,
pad_left, pad_right rows/columns of the input zero point), stride and dilation per axis. The
window of output (oy, ox) starts at input row oy*stride_h - pad_top and column
ox*stride_w - pad_left; bottom and right padding only decide the output size and which taps
fall outside: oh = (h + pad_top + pad_bottom - dilation_h*(kh-1) - 1) // stride_h + 1.
TFLite's SAME padding puts total//2 rows on top and the extra one at the bottom (likewise
left/right): see `same_padding`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from edgetune.hal import Target

from .base import MAX_ELEMENTS, MAX_SHAPE_VALUE, Buffer, KernelError, check_elements  # noqa: F401 - re-exported

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


GEOMETRY_KEYS = ("stride_h", "stride_w", "dilation_h", "dilation_w", "pad_top", "pad_bottom", "pad_left", "pad_right")
PAD_KEYS = ("pad_top", "pad_bottom", "pad_left", "pad_right")
# Text-shape shorthands and the full keys each one sets (`pad` also takes same/valid).
SHORTHANDS = {"stride": ("stride_h", "stride_w"), "dilation": ("dilation_h", "dilation_w"), "pad": PAD_KEYS}
PAD_MODES = ("same", "valid")


@dataclass(frozen=True)
class Geometry:
    """Spatial geometry of a convolution: input h x w, kernel kh x kw, TFLite's per-axis
    strides and dilations, per-side padding, and the output."""

    h: int
    w: int
    kh: int
    kw: int
    stride_h: int = 1
    stride_w: int = 1
    dilation_h: int = 1
    dilation_w: int = 1
    pad_top: int = 0
    pad_bottom: int = 0
    pad_left: int = 0
    pad_right: int = 0

    @property
    def oh(self) -> int:
        return (self.h + self.pad_top + self.pad_bottom - self.dilation_h * (self.kh - 1) - 1) // self.stride_h + 1

    @property
    def ow(self) -> int:
        return (self.w + self.pad_left + self.pad_right - self.dilation_w * (self.kw - 1) - 1) // self.stride_w + 1

    @property
    def padded(self) -> bool:
        """Some tap may fall outside the input (any side padded); without padding every tap
        of every output lies inside (the output size guarantees it)."""
        return any((self.pad_top, self.pad_bottom, self.pad_left, self.pad_right))

    def check(self) -> None:
        for axis, size, k, d, pads in (("h", self.h, self.kh, self.dilation_h, (self.pad_top, self.pad_bottom)),
                                       ("w", self.w, self.kw, self.dilation_w, (self.pad_left, self.pad_right))):
            span = d * (k - 1) + 1
            if span > size + sum(pads):
                raise KernelError(f"shape: the kernel spans {span} along {axis} (k{axis}={k}, dilation_{axis}={d}), "
                                  f"more than {axis}={size} plus padding {pads[0]}+{pads[1]}")

    def padded_input(self, x: np.ndarray, zero: int) -> np.ndarray:
        """x [h, w, c] with pad_top rows of the zero point above, pad_bottom below, and
        pad_left / pad_right columns on either side."""
        t, l = self.pad_top, self.pad_left
        out = np.full((self.h + t + self.pad_bottom, self.w + l + self.pad_right, x.shape[-1]), zero, dtype=np.int64)
        out[t:t + self.h, l:l + self.w] = x
        return out

    def patches(self, x: np.ndarray, zero: int) -> np.ndarray:
        """[oh, ow, kh, kw, c] windows of the zero-point-padded input (numpy reference)."""
        xp = self.padded_input(x, zero)
        sh, sw = self.stride_h, self.stride_w
        out = np.empty((self.oh, self.ow, self.kh, self.kw, x.shape[-1]), dtype=np.int64)
        for ky in range(self.kh):
            for kx in range(self.kw):
                y0, x0 = ky * self.dilation_h, kx * self.dilation_w
                out[:, :, ky, kx, :] = xp[y0:y0 + sh * (self.oh - 1) + 1:sh, x0:x0 + sw * (self.ow - 1) + 1:sw, :]
        return out


def geometry_of(shape: Mapping[str, int]) -> Geometry:
    return Geometry(shape["h"], shape["w"], shape["kh"], shape["kw"], *(shape[key] for key in GEOMETRY_KEYS))


def geometry_text(shape: Mapping[str, int]) -> str:
    """The geometry in words, for comments and documentation: 'stride 2x2, dilation 1x1,
    padding top 0 bottom 1 left 0 right 1' (strides and dilations as h x w)."""
    return (f"stride {shape['stride_h']}x{shape['stride_w']}, dilation {shape['dilation_h']}x{shape['dilation_w']}, "
            f"padding top {shape['pad_top']} bottom {shape['pad_bottom']} left {shape['pad_left']} right {shape['pad_right']}")


def same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TFLite's SAME padding along one axis, (before, after): the output is ceil(size/stride)
    and the total padding max((out-1)*stride + dilation*(kernel-1) + 1 - size, 0), split with
    the odd row or column after (bottom/right)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + dilation * (kernel - 1) + 1 - size, 0)
    return total // 2, total - total // 2


def _set(items: dict, key: str, value: object, source: str) -> None:
    """Give `key` the value a shorthand implies; refuse a different explicit value."""
    if key in items and items[key] != value:
        raise KernelError(f"shape: {key}={items[key]!r} contradicts {source} (which sets {key}={value!r})")
    items[key] = value


def expand_geometry(items: Mapping[str, object]) -> dict[str, object]:
    """The shorthands of a convolution shape expanded to the full keys: stride=S (both
    strides), dilation=D (both), pad=P (all four sides), pad=same / pad=valid (TFLite's
    padding, from h, w, kh, kw and the strides and dilations). Strides and dilations left
    out are 1 (TFLite's defaults); padding must be given. An explicit full key that
    disagrees with its shorthand is refused, naming it."""
    out = {key: value for key, value in items.items() if key not in SHORTHANDS}
    for short, least in (("stride", 1), ("dilation", 1), ("pad", 0)):
        value = items.get(short, least)
        word = isinstance(value, str) and short == "pad"
        if not word and (not isinstance(value, int) or isinstance(value, bool) or value < least):
            raise KernelError(f"shape: {short}={value!r} must be {'a positive' if least else 'a non-negative'} integer"
                              + (", same or valid" if short == "pad" else ""))
        if not word and value > MAX_SHAPE_VALUE:
            raise KernelError(f"shape: {short}={value} is too large (at most {MAX_SHAPE_VALUE})")
    for short in ("stride", "dilation"):
        if short in items:
            for key in SHORTHANDS[short]:
                _set(out, key, items[short], f"{short}={items[short]!r}")
        for key in SHORTHANDS[short]:  # TFLite's defaults: stride 1, dilation 1
            out.setdefault(key, 1)
    if "pad" not in items:
        return out
    pad = items["pad"]
    if isinstance(pad, str):
        if pad not in PAD_MODES:
            raise KernelError(f"shape: pad={pad!r} must be a non-negative integer, same or valid")
        for key in ("h", "w", "kh", "kw", "stride_h", "stride_w", "dilation_h", "dilation_w"):
            if not isinstance(out.get(key), int) or isinstance(out.get(key), bool) or out[key] < 1:
                raise KernelError(f"shape: pad={pad} needs a positive integer {key}")
        sides = ((0, 0), (0, 0)) if pad == "valid" else tuple(
            same_padding(out[axis], out[f"k{axis}"], out[f"stride_{axis}"], out[f"dilation_{axis}"]) for axis in "hw")
        values = dict(zip(PAD_KEYS, (*sides[0], *sides[1])))
    else:
        values = dict.fromkeys(PAD_KEYS, pad)
    for key, value in values.items():
        _set(out, key, value, f"pad={pad}")
    return out


def quant_params(channels: int, rng: np.random.Generator, edge: str) -> tuple[tuple[Buffer, ...], tuple[tuple[str, int], ...]]:
    """Per-channel bias, multiplier, shift buffers and the scalar zero points and activation
    range. "random" draws any of them (every requantisation form: a positive shift, narrow
    clamps); "tflite" draws what TensorFlow's converter gives (TFLITE_CONVENTION); "extreme"
    picks the saturating corners: zero points at the int8 limits, the largest shifts and
    bias magnitudes, a wide or a ReLU range."""
    if edge == "tflite":
        return tflite_quant_params(channels, rng)
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


# What the tuning inputs of an int8 kernel follow (Kernel.tuning_io): TensorFlow's converter's
# int8 quantisation, which every MLPerf Tiny model in tests/data/models has in each of its 38
# tuned workloads: weights symmetric (zero point 0), every per-channel shift negative (scales
# below 0.5) and the whole int8 range as the clamp (a fused ReLU folded into the output's
# range), so the Helium requantisation takes its fast form. Drawn at random, 31 of the 38 took
# the general form instead: tuning measured a branch the deployment never runs.
TFLITE_CONVENTION = "symmetric weights, shifts in [-20, -1], activation range [-128, 127]"


def tflite_quant_params(channels: int, rng: np.random.Generator) -> tuple[tuple[Buffer, ...], tuple[tuple[str, int], ...]]:
    """quant_params under TFLITE_CONVENTION: any activation zero points, negative shifts, the int8 range."""
    in_zero, out_zero = (int(v) for v in rng.integers(-128, 128, size=2))
    bias = rng.integers(-(1 << 16), 1 << 16, size=channels, dtype=np.int32)
    shift = rng.integers(-20, 0, size=channels).astype(np.int32)
    multiplier = rng.integers(1 << 30, (1 << 31) - 1, size=channels, dtype=np.int64).astype(np.int32)
    buffers = (Buffer("bias", bias, weight=True), Buffer("multiplier", multiplier, weight=True),
               Buffer("shift", shift, weight=True))
    return buffers, (("in_zero", in_zero), ("out_zero", out_zero), ("act_min", -128), ("act_max", 127))


def int8_tensor(shape: tuple[int, ...], rng: np.random.Generator, edge: str) -> np.ndarray:
    if edge == "extreme":
        return rng.choice(np.array([-128, 127], dtype=np.int8), size=shape)
    return rng.integers(-128, 128, size=shape, dtype=np.int8)
