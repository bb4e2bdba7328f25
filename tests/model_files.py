"""Small int8 .tflite models for the tests, built with edgetune's flatbuffer writer
(app/model/builder.py) from seeded random weights and quantisation: no TensorFlow.

Output shapes are computed here from TFLite's documented rules (SAME: ceil(in / stride);
VALID: ceil((in - dilation * (k - 1)) / stride)), not with edgetune's code, so a model the
reader misreads is caught by TFLite Micro rather than written to agree with the reader.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor

ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
PADDINGS = {"SAME": 0, "VALID": 1}


def f32(value: float) -> float:
    """A scale as a model stores it (float32)."""
    return float(np.float32(value))


def tflite_out(size: int, k: int, stride: int, dilation: int, padding: str) -> int:
    span = dilation * (k - 1) + 1
    return math.ceil(size / stride) if padding == "SAME" else math.ceil((size - span + 1) / stride)


@dataclass(frozen=True)
class Quant:
    """A layer's scales and zero points, drawn for a reduction of `k` products."""

    in_scale: float
    in_zero: int
    w_scales: tuple[float, ...]
    out_scale: float
    out_zero: int
    bias: np.ndarray


def draw_quant(rng: np.random.Generator, channels: int, k: int, edge: str = "random") -> Quant:
    """Scales with outputs spread over int8 ("random"), or saturating ("extreme": zero points
    at the int8 limits, an output scale far too small, large biases)."""
    in_scale = f32(rng.uniform(0.01, 0.1))
    w_scales = tuple(f32(s) for s in rng.uniform(0.002, 0.02, size=channels))
    # accumulators spread about 128 * 73 * sqrt(k): map that onto the int8 range
    typical = in_scale * float(np.mean(w_scales)) * 128 * 73 * math.sqrt(k) / 128
    if edge == "extreme":
        in_zero, out_zero = int(rng.choice([-128, 127])), int(rng.choice([-128, 127]))
        out_scale = f32(typical / 50)
        bias = rng.choice(np.array([-(1 << 20), (1 << 20) - 1], dtype=np.int32), size=channels)
    else:
        in_zero, out_zero = (int(v) for v in rng.integers(-128, 128, size=2))
        out_scale = f32(typical * rng.uniform(0.3, 3))
        bias = rng.integers(-(1 << 14), 1 << 14, size=channels, dtype=np.int32)
    return Quant(in_scale, in_zero, w_scales, out_scale, out_zero, bias.astype(np.int32))


def int8_input(rng: np.random.Generator, shape: tuple[int, ...], edge: str = "random") -> np.ndarray:
    if edge == "extreme":
        return rng.choice(np.array([-128, 127], dtype=np.int8), size=shape)
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def int8_weights(rng: np.random.Generator, shape: tuple[int, ...], edge: str = "random") -> np.ndarray:
    """Symmetric int8 weights ([-127, 127], as TFLite's converter quantises them)."""
    if edge == "extreme":
        return rng.choice(np.array([-127, 127], dtype=np.int8), size=shape)
    return rng.integers(-127, 128, size=shape, dtype=np.int8)


def _act_tensor(index: int, name: str, shape, scale: float, zero: int) -> Tensor:
    return Tensor(index, name, tuple(shape), "int8", Quantization((scale,), (zero,)))


def _weights_and_bias(q: Quant, w: np.ndarray, axis: int, per_channel: bool, with_bias: bool) -> list[Tensor]:
    scales = q.w_scales if per_channel else q.w_scales[:1]
    tensors = [constant(1, "weights", w, Quantization(scales, (0,) * len(scales), axis))]
    if with_bias:
        channels = len(q.bias)
        bias_scales = tuple(f32(q.in_scale * s) for s in (scales if per_channel else scales * channels))
        tensors.append(constant(2, "bias", q.bias, Quantization(bias_scales[:len(scales)], (0,) * len(scales), 0)))
    return tensors


def conv_model(rng, h, w, cin, cout, kh, kw, stride=(1, 1), dilation=(1, 1), padding="SAME", activation="NONE",
               edge="random", quant: Quant | None = None) -> bytes:
    """One CONV_2D, per-channel weights, stride and dilation per axis (h, w)."""
    q = quant or draw_quant(rng, cout, kh * kw * cin, edge)
    weights = int8_weights(rng, (cout, kh, kw, cin), edge)
    oh, ow = (tflite_out(n, k, s, d, padding) for n, k, s, d in ((h, kh, stride[0], dilation[0]), (w, kw, stride[1], dilation[1])))
    tensors = [_act_tensor(0, "input", (1, h, w, cin), q.in_scale, q.in_zero),
               *_weights_and_bias(q, weights, 0, True, True),
               _act_tensor(3, "output", (1, oh, ow, cout), q.out_scale, q.out_zero)]
    options = (("padding", PADDINGS[padding]), ("strideH", stride[0]), ("strideW", stride[1]),
               ("dilationHFactor", dilation[0]), ("dilationWFactor", dilation[1]),
               ("fusedActivationFunction", ACTIVATIONS[activation]))
    return build_model(tensors, [Operator(0, "CONV_2D", (0, 1, 2), (3,), "Conv2DOptions", options)], [0], [3])


def dwconv_model(rng, h, w, c, mult, kh, kw, stride=(1, 1), dilation=(1, 1), padding="SAME", activation="NONE",
                 edge="random") -> bytes:
    """One DEPTHWISE_CONV_2D with depth multiplier `mult`, per-channel weights [1][kh][kw][c * mult]."""
    cout = c * mult
    q = draw_quant(rng, cout, kh * kw, edge)
    weights = int8_weights(rng, (1, kh, kw, cout), edge)
    oh, ow = (tflite_out(n, k, s, d, padding) for n, k, s, d in ((h, kh, stride[0], dilation[0]), (w, kw, stride[1], dilation[1])))
    tensors = [_act_tensor(0, "input", (1, h, w, c), q.in_scale, q.in_zero),
               *_weights_and_bias(q, weights, 3, True, True),
               _act_tensor(3, "output", (1, oh, ow, cout), q.out_scale, q.out_zero)]
    options = (("padding", PADDINGS[padding]), ("strideH", stride[0]), ("strideW", stride[1]), ("depthMultiplier", mult),
               ("dilationHFactor", dilation[0]), ("dilationWFactor", dilation[1]),
               ("fusedActivationFunction", ACTIVATIONS[activation]))
    return build_model(tensors, [Operator(0, "DEPTHWISE_CONV_2D", (0, 1, 2), (3,), "DepthwiseConv2DOptions", options)],
                       [0], [3])


def fc_model(rng, input_shape, n, per_channel=True, with_bias=True, keep_num_dims=False, activation="NONE",
             edge="random", quant: Quant | None = None) -> bytes:
    """One FULLY_CONNECTED on an input of `input_shape` (rows = all but the last dimension)."""
    k = input_shape[-1]
    rows = int(np.prod(input_shape[:-1]))
    q = quant or draw_quant(rng, n, k, edge)
    weights = int8_weights(rng, (n, k), edge)
    out_shape = (*input_shape[:-1], n) if keep_num_dims else (rows, n)
    tensors = [_act_tensor(0, "input", input_shape, q.in_scale, q.in_zero),
               *_weights_and_bias(q, weights, 0, per_channel, with_bias)]
    out_index = len(tensors)
    tensors.append(_act_tensor(out_index, "output", out_shape, q.out_scale, q.out_zero))
    inputs = (0, 1, 2) if with_bias else (0, 1, -1)
    options = (("fusedActivationFunction", ACTIVATIONS[activation]), ("keepNumDims", keep_num_dims))
    op = Operator(0, "FULLY_CONNECTED", inputs, (out_index,), "FullyConnectedOptions", options)
    return build_model(tensors, [op], [0], [out_index])


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _conv_op(index, inputs, output, stride=(1, 1), padding="SAME", activation="RELU", op="CONV_2D", mult=None):
    options = [("padding", PADDINGS[padding]), ("strideH", stride[0]), ("strideW", stride[1]),
               ("fusedActivationFunction", ACTIVATIONS[activation])]
    if mult is not None:
        options.append(("depthMultiplier", mult))
    table = "Conv2DOptions" if op == "CONV_2D" else "DepthwiseConv2DOptions"
    return Operator(index, op, inputs, (output,), table, tuple(options))


def chain_model(rng, edge: str = "random") -> bytes:
    """CONV_2D 3x3 (8x8x4 -> 8x8x8), CONV_2D 3x3 stride 2 (-> 4x4x8), DEPTHWISE_CONV_2D 3x3
    (-> 4x4x8): each layer's output quantisation is the next one's input quantisation."""
    tensors, scale, zero = [], f32(0.05), -3
    tensors.append(Tensor(0, "input", (1, 8, 8, 4), "int8", Quantization((scale,), (zero,))))
    operators, previous = [], 0
    layers = (("CONV_2D", (8, 3, 3, 4), (1, 1), (1, 8, 8, 8)), ("CONV_2D", (8, 3, 3, 8), (2, 2), (1, 4, 4, 8)),
              ("DEPTHWISE_CONV_2D", (1, 3, 3, 8), (1, 1), (1, 4, 4, 8)))
    for n, (op, wshape, stride, out_shape) in enumerate(layers):
        channels, axis = (wshape[0], 0) if op == "CONV_2D" else (wshape[3], 3)
        q = draw_quant(rng, channels, int(np.prod(wshape[1:])) if op == "CONV_2D" else 9, edge)
        q = Quant(scale, zero, q.w_scales, q.out_scale, q.out_zero, q.bias)
        base = len(tensors)
        tensors.append(constant(base, f"w{n}", int8_weights(rng, wshape, edge), Quantization(q.w_scales, (0,) * channels, axis)))
        tensors.append(constant(base + 1, f"b{n}", q.bias, Quantization(tuple(f32(scale * s) for s in q.w_scales),
                                                                       (0,) * channels, 0)))
        tensors.append(_act_tensor(base + 2, f"act{n}", out_shape, q.out_scale, q.out_zero))
        operators.append(_conv_op(n, (previous, base, base + 1), base + 2, stride, op=op, mult=1 if op != "CONV_2D" else None))
        previous, scale, zero = base + 2, q.out_scale, q.out_zero
    return build_model(tensors, operators, [0], [previous])


def network_model(rng) -> bytes:
    """A small keyword-spotting-like network: CONV_2D, two identical CONV_2D (one workload),
    DEPTHWISE_CONV_2D stride 2, AVERAGE_POOL_2D, RESHAPE, FULLY_CONNECTED, SOFTMAX."""
    q = Quantization((f32(0.05),), (0,))
    act = lambda i, shape: Tensor(i, f"t{i}", shape, "int8", q)
    wq = lambda channels, axis: Quantization((f32(0.01),) * channels, (0,) * channels, axis)
    bias = lambda i, n: constant(i, f"bias{i}", np.arange(n, dtype=np.int32), Quantization((f32(0.0005),) * n, (0,) * n))
    tensors = [act(0, (1, 10, 8, 1)),
               constant(1, "w1", int8_weights(rng, (8, 3, 3, 1)), wq(8, 0)), bias(2, 8), act(3, (1, 10, 8, 8)),
               constant(4, "w2", int8_weights(rng, (8, 3, 3, 8)), wq(8, 0)), bias(5, 8), act(6, (1, 10, 8, 8)),
               act(7, (1, 10, 8, 8)),
               constant(8, "w4", int8_weights(rng, (1, 3, 3, 8)), wq(8, 3)), bias(9, 8), act(10, (1, 5, 4, 8)),
               act(11, (1, 1, 1, 8)),
               constant(12, "shape", np.array([1, 8], dtype=np.int32)), act(13, (1, 8)),
               constant(14, "w7", int8_weights(rng, (4, 8)), wq(4, 0)), bias(15, 4), act(16, (1, 4)),
               Tensor(17, "probabilities", (1, 4), "int8", Quantization((1 / 256,), (-128,)))]
    operators = [_conv_op(0, (0, 1, 2), 3), _conv_op(1, (3, 4, 5), 6), _conv_op(2, (6, 4, 5), 7),
                 _conv_op(3, (7, 8, 9), 10, stride=(2, 2), op="DEPTHWISE_CONV_2D", mult=1),
                 Operator(4, "AVERAGE_POOL_2D", (10,), (11,), "Pool2DOptions",
                          (("padding", 1), ("strideH", 1), ("strideW", 1), ("filterHeight", 5), ("filterWidth", 4))),
                 Operator(5, "RESHAPE", (11, 12), (13,), "ReshapeOptions", (("newShape", (1, 8)),)),
                 Operator(6, "FULLY_CONNECTED", (13, 14, 15), (16,), "FullyConnectedOptions", ()),
                 Operator(7, "SOFTMAX", (16,), (17,), "SoftmaxOptions", (("beta", 1.0),))]
    return build_model(tensors, operators, [0], [17])


def _conv_layer(rng, tensors: list[Tensor], source: int, wshape, out_shape, name: str) -> Operator:
    """A CONV_2D on tensor `source` (per-channel weights drawn for it), its output appended last."""
    x = tensors[source]
    q = draw_quant(rng, wshape[0], int(np.prod(wshape[1:])))
    scale = x.quantization.scales[0]
    base = len(tensors)
    tensors.append(constant(base, f"{name}_w", int8_weights(rng, wshape), Quantization(q.w_scales, (0,) * wshape[0], 0)))
    tensors.append(constant(base + 1, f"{name}_b", q.bias, Quantization(tuple(f32(scale * s) for s in q.w_scales),
                                                                       (0,) * wshape[0], 0)))
    tensors.append(_act_tensor(base + 2, name, out_shape, q.out_scale, q.out_zero))
    return _conv_op(len(tensors), (source, base, base + 1), base + 2, activation="NONE")


def _edge_tensor(int8: Tensor, index: int, dtype: str) -> Tensor:
    """The float32 (unquantised) or int16 (scale of the int8 tensor, zero point 0) tensor at a model's edge."""
    q = None if dtype.startswith("float") else Quantization(int8.quantization.scales, (0,))
    return replace(int8, index=index, name=f"{int8.name}_{dtype}", dtype=dtype, quantization=q)


def two_headed_model(rng, io_dtypes: tuple[str, str, str, str] = ("int8",) * 4, order: str = "pooled-first") -> bytes:
    """Two inputs and two outputs: "image" (8x8x3) -> CONV_2D 3x3 and "state" (8x8x4) ->
    CONV_2D 1x1, both to 8x8x8, -> ADD -> "sum" (an output, also read further) ->
    AVERAGE_POOL_2D 8x8 -> "pooled" (1x1x8, the other output). The outputs are listed
    pooled first (the later tensor first: graph order is not tensor order), or with
    `order="sum-first"` sum first. `io_dtypes` (image, state, pooled, sum) other than int8 put
    a QUANTIZE (into the model, or out to int16) or DEQUANTIZE (out to float) at that edge, as
    a converter does for a float or int16 interface."""
    tensors = [_act_tensor(0, "image", (1, 8, 8, 3), f32(0.04), -5), _act_tensor(1, "state", (1, 8, 8, 4), f32(0.02), 3)]
    operators = []
    conv_a = _conv_layer(rng, tensors, 0, (8, 3, 3, 3), (1, 8, 8, 8), "image_conv")
    conv_b = _conv_layer(rng, tensors, 1, (8, 1, 1, 4), (1, 8, 8, 8), "state_conv")
    a, b = conv_a.outputs[0], conv_b.outputs[0]
    sum_scale = f32(tensors[a].quantization.scales[0] + tensors[b].quantization.scales[0])
    tensors.append(_act_tensor(len(tensors), "sum", (1, 8, 8, 8), sum_scale, int(rng.integers(-20, 20))))
    total = len(tensors) - 1
    tensors.append(_act_tensor(len(tensors), "pooled", (1, 1, 1, 8), sum_scale, tensors[total].quantization.zero_points[0]))
    pooled = len(tensors) - 1
    operators += [conv_a, conv_b, Operator(0, "ADD", (a, b), (total,), "AddOptions", (("fusedActivationFunction", 0),)),
                  Operator(0, "AVERAGE_POOL_2D", (total,), (pooled,), "Pool2DOptions",
                           (("padding", 1), ("strideH", 1), ("strideW", 1), ("filterHeight", 8), ("filterWidth", 8)))]
    inputs, outputs = [0, 1], [pooled, total] if order == "pooled-first" else [total, pooled]
    edges = dict(zip((0, 1, pooled, total), io_dtypes))
    for k, t in enumerate(inputs):  # a float or int16 interface: QUANTIZE from it into the int8 tensor
        if edges[t] != "int8":
            tensors.append(_edge_tensor(tensors[t], len(tensors), edges[t]))
            operators.insert(0, Operator(0, "QUANTIZE", (len(tensors) - 1,), (t,)))
            inputs[k] = len(tensors) - 1
    for k, t in enumerate(outputs):
        if edges[t] != "int8":
            tensors.append(_edge_tensor(tensors[t], len(tensors), edges[t]))
            operators.append(Operator(0, "DEQUANTIZE" if edges[t].startswith("float") else "QUANTIZE", (t,),
                                      (len(tensors) - 1,)))
            outputs[k] = len(tensors) - 1
    operators = [replace(op, index=n) for n, op in enumerate(operators)]
    return build_model(tensors, operators, inputs, outputs, description="edgetune test: two inputs, two outputs")
