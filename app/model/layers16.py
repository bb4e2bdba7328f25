"""The 16x8 layers: CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED on int16 activations
with int8 weights (TFLite's 16x8 scheme), served by conv2d_s16 and dwconv2d_s16
(codegen/kernels/sixteen.py has the arithmetic), with the buffers and parameters those
kernels take: weights, an int64 bias (an int32 one widened; `bias_bits` keeps which the
model stores, since TFLite Micro requantises the two differently), multiplier, shift, and
the activation range in int16.

TFLite Micro runs int16 convolutions only on symmetric activations (zero points 0): others
are refused, naming the tensor. A layer whose input is int8 is the int8 one (layers.py).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from edgetune.codegen.kernels.base import Buffer
from edgetune.codegen.kernels.sixteen import INT16_MAX, INT16_MIN, MAX_BIAS_64, MAX_REDUCTION_16, MAX_SHIFT_64

from .arithmetic import MAX_SHIFT, activation_range
from .graph import Graph, Operator, Tensor
from .layers import CONV_KEYS, DWCONV_KEYS, ModelLayer, _Reader, _spatial, conv_weights, dense_rows

INT16 = "int16"


def activation_type(graph: Graph, op: Operator) -> str:
    """The type of an operator's first input ("" when it has none)."""
    return graph.tensors[op.inputs[0]].dtype if op.inputs and op.inputs[0] >= 0 else ""


def by_activation(int8_layer: Callable[[Graph, Operator], ModelLayer],
                  int16_layer: Callable[[Graph, Operator], ModelLayer]) -> Callable[[Graph, Operator], ModelLayer]:
    """A layer builder choosing the 16x8 layer for an int16 input, the int8 one otherwise."""
    def layer(graph: Graph, op: Operator) -> ModelLayer:
        return (int16_layer if activation_type(graph, op) == INT16 else int8_layer)(graph, op)
    layer.__name__ = int8_layer.__name__
    return layer


def _symmetric(r: _Reader, t: Tensor, role: str) -> float:
    scale, zero = r.scale_zero(t, role)
    if zero != 0:
        raise r.fail(f"{role} tensor {t.index} ({t.name}) is int16 with zero point {zero}; TFLite's 16x8 scheme "
                     "takes symmetric int16 activations (zero point 0)")
    return scale


def _bias(r: _Reader, channels: int, default_bits: int) -> tuple[Buffer, int]:
    """The bias as int64 and the bits the model stores it in (absent: `default_bits`; TFLite
    Micro's 16x8 CONV_2D and FULLY_CONNECTED without a bias requantise in the 64-bit form)."""
    index = r.op.inputs[2] if len(r.op.inputs) > 2 else -1
    if index < 0:
        return Buffer("bias", np.zeros(channels, dtype=np.int64), weight=True), default_bits
    dtype = r.graph.tensors[index].dtype
    b = r.tensor(2, "bias", dtype=dtype if dtype in ("int32", "int64") else "int64")
    if b.elements != channels:
        raise r.fail(f"bias tensor {b.index} ({b.name}) has {b.elements} values for {channels} output channels")
    values = b.array().reshape(channels).astype(np.int64)
    if np.abs(values).max(initial=0) > MAX_BIAS_64:
        raise r.fail(f"bias tensor {b.index} ({b.name}) holds values beyond 2^45, outside the 64-bit requantisation's range")
    return Buffer("bias", values, weight=True), 64 if dtype == "int64" else 32


def _requantisation(r: _Reader, x: Tensor, w: Tensor, y: Tensor, channels: int, axis: int,
                    bias_bits: int) -> tuple[tuple[Buffer, ...], tuple[tuple[str, int], ...]]:
    in_scale, out_scale = _symmetric(r, x, "input"), _symmetric(r, y, "output")
    limit = MAX_SHIFT_64 if bias_bits == 64 else MAX_SHIFT
    multipliers, shifts = r.channel_multipliers(in_scale, out_scale, w, channels, axis, limit,
                                                f" with an int{bias_bits} bias")
    act_min, act_max = activation_range(r.activation(), out_scale, 0, INT16_MIN, INT16_MAX)
    if act_min > act_max:
        raise r.fail(f"the fused activation's range [{act_min}, {act_max}] is empty at the output's scale")
    return ((Buffer("multiplier", np.array(multipliers, dtype=np.int32), weight=True),
             Buffer("shift", np.array(shifts, dtype=np.int32), weight=True)),
            (("act_min", act_min), ("act_max", act_max)))


def _reduction(r: _Reader, products: int) -> None:
    if products > MAX_REDUCTION_16:
        raise r.fail(f"each output sums {products} products, more than edgetune's 16x8 kernels take ({MAX_REDUCTION_16})")


def _layer(r: _Reader, kernel: str, keys: tuple[str, ...], shape: dict, macs: int, x: Tensor, y: Tensor,
           constants: tuple[Buffer, ...], params, output: tuple[int, ...]) -> ModelLayer:
    return ModelLayer(r.op.index, r.op.op, kernel, tuple((k, int(shape[k])) for k in (*keys, "bias_bits")), macs,
                      x.shape, y.shape, r.op, r.operator_tensors(), constants, params, output, dtype=INT16)


def conv16_layer(graph: Graph, op: Operator) -> ModelLayer:
    r = _Reader(graph, op)
    x, w, y = r.tensor(0, "input", INT16), r.tensor(1, "weights"), r.tensor(0, "output", INT16)
    cout, kh, kw, cin = conv_weights(r, x, w)
    _reduction(r, kh * kw * cin)
    g = _spatial(r, x, y, kh, kw, cout)
    bias, bits = _bias(r, cout, 64)
    quant, params = _requantisation(r, x, w, y, cout, 0, bits)
    shape = dict(h=x.shape[1], w=x.shape[2], cin=cin, cout=cout, kh=kh, kw=kw, bias_bits=bits,
                 **{k: g[k] for k in CONV_KEYS[6:]})
    return _layer(r, "conv2d_s16", CONV_KEYS, shape, g["oh"] * g["ow"] * cout * kh * kw * cin, x, y,
                  (Buffer("weights", w.array().copy(), weight=True), bias, *quant), params, (g["oh"], g["ow"], cout))


def dwconv16_layer(graph: Graph, op: Operator) -> ModelLayer:
    r = _Reader(graph, op)
    x, w, y = r.tensor(0, "input", INT16), r.tensor(1, "weights"), r.tensor(0, "output", INT16)
    if len(w.shape) != 4 or w.shape[0] != 1 or len(x.shape) != 4:
        raise r.fail(f"weights tensor {w.index} ({w.name}) has shape {list(w.shape)}, expected [1, kh, kw, c * mult]")
    _, kh, kw, cout = w.shape
    c = x.shape[3]
    if cout % c:
        raise r.fail(f"{cout} output channels are not a multiple of the input's {c} (depth multiplier)")
    _reduction(r, kh * kw)
    g = _spatial(r, x, y, kh, kw, cout)
    bias, bits = _bias(r, cout, 32)
    if bits != 64 or r.op.inputs[2] < 0:
        # TFLite Micro's 16x8 depthwise reads its bias as int64 whatever the model stores (an
        # int32 one is misread) and crashes without one: no output to be exact with.
        raise r.fail("a 16x8 depthwise convolution needs an int64 bias (TFLite Micro reads the bias as int64, and "
                     "fails without one)")
    quant, params = _requantisation(r, x, w, y, cout, 3, bits)
    shape = dict(h=x.shape[1], w=x.shape[2], c=c, mult=cout // c, kh=kh, kw=kw, bias_bits=bits,
                 **{k: g[k] for k in DWCONV_KEYS[6:]})
    return _layer(r, "dwconv2d_s16", DWCONV_KEYS, shape, g["oh"] * g["ow"] * cout * kh * kw, x, y,
                  (Buffer("weights", w.array().reshape(kh, kw, cout).copy(), weight=True), bias, *quant), params,
                  (g["oh"], g["ow"], cout))


def fully_connected16_layer(graph: Graph, op: Operator) -> ModelLayer:
    """A 16x8 dense layer as conv2d_s16 1x1: every row of the input is one output pixel."""
    r = _Reader(graph, op)
    x, w, y = r.tensor(0, "input", INT16), r.tensor(1, "weights"), r.tensor(0, "output", INT16)
    n, k, rows = dense_rows(r, x, w, y, _reduction)
    bias, bits = _bias(r, n, 64)
    quant, params = _requantisation(r, x, w, y, n, 0, bits)
    shape = dict(h=1, w=rows, cin=k, cout=n, kh=1, kw=1, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1,
                 pad_top=0, pad_bottom=0, pad_left=0, pad_right=0, bias_bits=bits)
    return _layer(r, "conv2d_s16", CONV_KEYS, shape, rows * n * k, x, y,
                  (Buffer("weights", w.array().reshape(n, 1, 1, k).copy(), weight=True), bias, *quant), params,
                  (1, rows, n))
