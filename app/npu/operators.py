"""The operators edgetune can offload to an Ethos-U NPU, described by shape alone.

Each operator parses its own shape keys (`matmul_s8`: m,n,k; `conv2d_s8`:
h,w,cin,cout,kh,kw,stride,pad,dilation; `dwconv2d_s8`: h,w,c,kh,kw,stride,pad,dilation): the
shorthand form of the CPU kernels of the same name, which take TFLite's full geometry (per-side
padding, per-axis stride and dilation) and read these keys as shorthands
(edgetune.npu.layer_plan.cpu_shape turns pad=-1 into pad=same). It knows its output shape, MAC
count and tensor sizes, and
builds a one-operator int8 TFLite model of the workload for Vela. None of this needs the CPU
kernel to exist: Vela compiles the model, not our C.

Padding (`pad`): an integer p >= 0 pads p rows/columns on every side (0 is TFLite VALID);
-1 is TFLite SAME (the text form also accepts `pad=same` and `pad=valid`). Explicit padding
that TFLite's SAME rule does not produce becomes a PAD operator in front of the convolution,
which Vela fuses into it where it can.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from edgetune.errors import EdgetuneError
from .tflite_model import ModelSpec, OperatorSpec, Quant, TensorSpec

PAD_SAME = -1
# The CPU kernels' limit too (codegen/kernels/base.py): no dimension, padding or step beyond 2^24.
MAX_SHAPE_VALUE = 1 << 24
SHAPE_ITEM = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*=\s*(-?\d+|same|valid)\s*$")


class NpuOperatorError(EdgetuneError, ValueError):
    """An unknown NPU operator or a malformed shape."""


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    extent = dilation * (kernel - 1) + 1
    if pad == PAD_SAME:
        return -(-size // stride)
    return (size + 2 * pad - extent) // stride + 1


def _same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TFLite's SAME rule: total padding, the extra row/column going after (bottom/right)."""
    extent = dilation * (kernel - 1) + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + extent - size, 0)
    return total // 2, total - total // 2


def _quant_scales(rng: np.random.Generator, channels: int, per_channel: bool) -> tuple[float, ...]:
    # Typical post-training-quantised weights: scales of 1e-3..2e-2 per output channel.
    count = channels if per_channel else 1
    return tuple(float(s) for s in rng.uniform(1e-3, 2e-2, size=count))


@dataclass(frozen=True)
class TensorSizes:
    ifm_bytes: int
    ofm_bytes: int
    weight_bytes: int
    bias_bytes: int


class NpuOperator:
    """An operator by shape: parsing, sizes, and its one-operator TFLite model."""

    name: str = ""
    builtin: str = ""
    shape_keys: tuple[str, ...] = ()
    example: str = ""
    description: str = ""
    signed_keys: tuple[str, ...] = ()  # keys that may be 0 or -1 (pad)

    # --- shapes -------------------------------------------------------------------------
    def parse_shape(self, shape: str | Mapping[str, object]) -> dict[str, int]:
        if isinstance(shape, str):
            items: dict[str, object] = {}
            for part in filter(None, (p.strip() for p in shape.split(","))):
                match = SHAPE_ITEM.fullmatch(part)
                if not match:
                    raise NpuOperatorError(f"shape: {part!r} is not NAME=INTEGER (e.g. {self.example})")
                if match.group(1) in items:
                    raise NpuOperatorError(f"shape: {match.group(1)!r} is given twice")
                items[match.group(1)] = match.group(2)
        else:
            items = dict(shape)
        for key in items:
            if key not in self.shape_keys:
                raise NpuOperatorError(f"shape: unknown key {key!r} for {self.name} (keys: {', '.join(self.shape_keys)})")
        result = {}
        for key in self.shape_keys:
            if key not in items:
                raise NpuOperatorError(f"shape: missing {key!r} for {self.name} (e.g. {self.example})")
            result[key] = self._value(key, items[key])
        self.check_shape(result)
        sizes = self.sizes(result)
        for tensor, nbytes in (("input", sizes.ifm_bytes), ("output", sizes.ofm_bytes), ("weight", sizes.weight_bytes)):
            if nbytes > MAX_SHAPE_VALUE:  # int8 tensors: bytes are elements
                raise NpuOperatorError(f"shape: the {tensor} tensor has {nbytes} elements, more than {MAX_SHAPE_VALUE}")
        return result

    def _value(self, key: str, raw: object) -> int:
        if key in self.signed_keys and raw in ("same", "valid"):
            return PAD_SAME if raw == "same" else 0
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise NpuOperatorError(f"shape: {key}={raw!r} must be an integer")
        try:
            value = int(raw)
        except ValueError:
            raise NpuOperatorError(f"shape: {key}={raw!r} must be an integer") from None
        low = -1 if key in self.signed_keys else 1
        if value > MAX_SHAPE_VALUE:  # 2**70 would reach numpy and TFLite's int32 fields
            raise NpuOperatorError(f"shape: {key}={value} is too large (at most {MAX_SHAPE_VALUE})")
        if value < low:
            kind = "an integer >= 0, same or valid" if key in self.signed_keys else "a positive integer"
            raise NpuOperatorError(f"shape: {key}={raw!r} must be {kind}")
        return value

    def check_shape(self, shape: dict[str, int]) -> None:
        """Operator-specific limits; raise NpuOperatorError naming the key."""

    def shape_text(self, shape: Mapping[str, int]) -> str:
        """The text form parse_shape reads back (pad=-1 is written `same`)."""
        return ",".join(f"{k}={'same' if k in self.signed_keys and v == PAD_SAME else v}" for k, v in shape.items())

    # --- to be provided -----------------------------------------------------------------
    def output_shape(self, shape: Mapping[str, int]) -> tuple[int, ...]:
        raise NotImplementedError

    def macs(self, shape: Mapping[str, int]) -> int:
        raise NotImplementedError

    def sizes(self, shape: Mapping[str, int]) -> TensorSizes:
        raise NotImplementedError

    def model(self, shape: Mapping[str, int], rng: np.random.Generator) -> ModelSpec:
        raise NotImplementedError


def _io_quant(rng: np.random.Generator) -> tuple[Quant, Quant]:
    """Activation quantisation as a post-training quantiser would give it: scales around
    0.01-0.1, zero points near the middle of the int8 range."""
    s_in, s_out = (float(s) for s in rng.uniform(0.01, 0.1, size=2))
    z_in, z_out = (int(z) for z in rng.integers(-32, 32, size=2))
    return Quant((s_in,), (z_in,)), Quant((s_out,), (z_out,))


def _output_scale(s_in: float, w_scales: tuple[float, ...], reduction: int) -> float:
    # Map about three standard deviations of a random int8 dot product of this length onto
    # the int8 range, so the requantisation multiplier Vela derives is a realistic one.
    accumulator_std = math.sqrt(reduction) * 74.0 * 74.0  # uniform int8 values: std ~74
    return s_in * float(np.mean(w_scales)) * 3.0 * accumulator_std / 127.0


class FullyConnected(NpuOperator):
    name = "matmul_s8"
    builtin = "FULLY_CONNECTED"
    shape_keys = ("m", "n", "k")
    example = "m=16,n=16,k=32"
    description = "FULLY_CONNECTED: int8 A[MxK] x W[KxN] + bias, per-tensor requantisation"

    def output_shape(self, shape):
        return (shape["m"], shape["n"])

    def macs(self, shape):
        return shape["m"] * shape["n"] * shape["k"]

    def sizes(self, shape):
        m, n, k = shape["m"], shape["n"], shape["k"]
        return TensorSizes(ifm_bytes=m * k, ofm_bytes=m * n, weight_bytes=n * k, bias_bytes=4 * n)

    def model(self, shape, rng):
        m, n, k = shape["m"], shape["n"], shape["k"]
        q_in, _ = _io_quant(rng)
        w_scales = _quant_scales(rng, n, per_channel=False)
        q_out = Quant((_output_scale(q_in.scale[0], w_scales, k),), (int(rng.integers(-32, 32)),))
        weights = rng.integers(-127, 128, size=(n, k), dtype=np.int8)  # TFLite layout [out, in]
        bias = rng.integers(-(1 << 12), 1 << 12, size=n, dtype=np.int32)
        tensors = (
            TensorSpec("input", (m, k), "int8", q_in),
            TensorSpec("weights", (n, k), "int8", Quant(w_scales, (0,)), weights),
            TensorSpec("bias", (n,), "int32", Quant((q_in.scale[0] * w_scales[0],), (0,)), bias),
            TensorSpec("output", (m, n), "int8", q_out),
        )
        op = OperatorSpec("FULLY_CONNECTED", (0, 1, 2), (3,), "FullyConnectedOptions",
                          (("FusedActivationFunction", "NONE"),))
        return ModelSpec(tensors, (op,), inputs=(0,), outputs=(3,), description=f"edgetune {self.name} {self.shape_text(shape)}")


class _Convolution(NpuOperator):
    """What CONV_2D and DEPTHWISE_CONV_2D share: spatial geometry and padding."""

    signed_keys = ("pad",)

    def _channels(self, shape) -> tuple[int, int]:
        raise NotImplementedError

    def check_shape(self, shape):
        for axis, kernel in (("h", "kh"), ("w", "kw")):
            if _conv_out(shape[axis], shape[kernel], shape["stride"], shape["pad"], shape["dilation"]) < 1:
                raise NpuOperatorError(f"shape: {kernel}={shape[kernel]} with dilation={shape['dilation']} and "
                                       f"pad={shape['pad']} does not fit {axis}={shape[axis]} (no output)")

    def output_hw(self, shape) -> tuple[int, int]:
        return (_conv_out(shape["h"], shape["kh"], shape["stride"], shape["pad"], shape["dilation"]),
                _conv_out(shape["w"], shape["kw"], shape["stride"], shape["pad"], shape["dilation"]))

    def output_shape(self, shape):
        oh, ow = self.output_hw(shape)
        return (1, oh, ow, self._channels(shape)[1])

    def _padding(self, shape) -> tuple[str, tuple[tuple[int, int], tuple[int, int]] | None]:
        """TFLite padding mode, plus explicit (top, bottom), (left, right) for a PAD operator."""
        pad = shape["pad"]
        if pad == PAD_SAME:
            return "SAME", None
        if pad == 0:
            return "VALID", None
        same = tuple(_same_padding(shape[a], shape[k], shape["stride"], shape["dilation"]) for a, k in (("h", "kh"), ("w", "kw")))
        if same == ((pad, pad), (pad, pad)):
            return "SAME", None
        return "VALID", ((pad, pad), (pad, pad))

    def _geometry_options(self, shape, mode: str) -> tuple[tuple[str, object], ...]:
        return (("Padding", mode), ("StrideW", shape["stride"]), ("StrideH", shape["stride"]),
                ("DilationWFactor", shape["dilation"]), ("DilationHFactor", shape["dilation"]),
                ("FusedActivationFunction", "NONE"))

    def _build(self, shape, rng, weights_shape, weight_axis, options_name, extra_options) -> ModelSpec:
        h, w = shape["h"], shape["w"]
        cin, cout = self._channels(shape)
        q_in, _ = _io_quant(rng)
        w_scales = _quant_scales(rng, cout, per_channel=True)
        reduction = self.macs(shape) // (math.prod(self.output_shape(shape)))  # MACs per output element
        q_out = Quant((_output_scale(q_in.scale[0], w_scales, reduction),), (int(rng.integers(-32, 32)),))
        weights = rng.integers(-127, 128, size=weights_shape, dtype=np.int8)
        bias = rng.integers(-(1 << 12), 1 << 12, size=cout, dtype=np.int32)
        mode, explicit = self._padding(shape)
        tensors = [TensorSpec("input", (1, h, w, cin), "int8", q_in)]
        operators = []
        conv_input = 0
        if explicit is not None:
            (top, bottom), (left, right) = explicit
            paddings = np.array([[0, 0], [top, bottom], [left, right], [0, 0]], dtype=np.int32)
            tensors.append(TensorSpec("paddings", (4, 2), "int32", None, paddings))
            tensors.append(TensorSpec("padded", (1, h + top + bottom, w + left + right, cin), "int8", q_in))
            operators.append(OperatorSpec("PAD", (0, 1), (2,)))
            conv_input = 2
        base = len(tensors)
        tensors += [
            TensorSpec("weights", weights_shape, "int8", Quant(w_scales, (0,) * cout, weight_axis), weights),
            TensorSpec("bias", (cout,), "int32", Quant(tuple(q_in.scale[0] * s for s in w_scales), (0,) * cout), bias),
            TensorSpec("output", self.output_shape(shape), "int8", q_out),
        ]
        operators.append(OperatorSpec(self.builtin, (conv_input, base, base + 1), (base + 2,), options_name,
                                      self._geometry_options(shape, mode) + extra_options))
        return ModelSpec(tuple(tensors), tuple(operators), inputs=(0,), outputs=(base + 2,),
                         description=f"edgetune {self.name} {self.shape_text(shape)}")


class Conv2D(_Convolution):
    name = "conv2d_s8"
    builtin = "CONV_2D"
    shape_keys = ("h", "w", "cin", "cout", "kh", "kw", "stride", "pad", "dilation")
    example = "h=16,w=16,cin=16,cout=32,kh=3,kw=3,stride=1,pad=1,dilation=1"
    description = "CONV_2D: NHWC int8 convolution, per-output-channel weight scales, int32 bias"

    def _channels(self, shape):
        return shape["cin"], shape["cout"]

    def macs(self, shape):
        oh, ow = self.output_hw(shape)
        return oh * ow * shape["cout"] * shape["kh"] * shape["kw"] * shape["cin"]

    def sizes(self, shape):
        oh, ow = self.output_hw(shape)
        return TensorSizes(ifm_bytes=shape["h"] * shape["w"] * shape["cin"], ofm_bytes=oh * ow * shape["cout"],
                           weight_bytes=shape["cout"] * shape["kh"] * shape["kw"] * shape["cin"],
                           bias_bytes=4 * shape["cout"])

    def model(self, shape, rng):
        # TFLite CONV_2D weights are [cout, kh, kw, cin], per-channel along axis 0.
        return self._build(shape, rng, (shape["cout"], shape["kh"], shape["kw"], shape["cin"]), 0, "Conv2DOptions", ())


class DepthwiseConv2D(_Convolution):
    name = "dwconv2d_s8"
    builtin = "DEPTHWISE_CONV_2D"
    shape_keys = ("h", "w", "c", "kh", "kw", "stride", "pad", "dilation")
    example = "h=16,w=16,c=32,kh=3,kw=3,stride=1,pad=1,dilation=1"
    description = "DEPTHWISE_CONV_2D: NHWC int8 depthwise convolution (multiplier 1), per-channel scales"

    def _channels(self, shape):
        return shape["c"], shape["c"]

    def macs(self, shape):
        oh, ow = self.output_hw(shape)
        return oh * ow * shape["c"] * shape["kh"] * shape["kw"]

    def sizes(self, shape):
        oh, ow = self.output_hw(shape)
        return TensorSizes(ifm_bytes=shape["h"] * shape["w"] * shape["c"], ofm_bytes=oh * ow * shape["c"],
                           weight_bytes=shape["c"] * shape["kh"] * shape["kw"], bias_bytes=4 * shape["c"])

    def model(self, shape, rng):
        # TFLite DEPTHWISE_CONV_2D weights are [1, kh, kw, c], per-channel along axis 3.
        return self._build(shape, rng, (1, shape["kh"], shape["kw"], shape["c"]), 3, "DepthwiseConv2DOptions",
                           (("DepthMultiplier", 1),))


NPU_OPERATORS: dict[str, NpuOperator] = {op.name: op for op in (FullyConnected(), Conv2D(), DepthwiseConv2D())}


def get_npu_operator(name: str) -> NpuOperator:
    try:
        return NPU_OPERATORS[name]
    except KeyError:
        raise NpuOperatorError(f"no NPU operator for {name!r} (known: {', '.join(sorted(NPU_OPERATORS))})") from None
