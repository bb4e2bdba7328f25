"""The tuned layers of TRANSPOSE_CONV and BATCH_MATMUL (issue 28: the heavy operators run on
kernels with a search space, not as library code).

  TRANSPOSE_CONV  tconv2d_s8  inputs (output_shape, weights OHWI, input, optional bias), as
                              TFLite orders them; the kernel reads input 2. TFLite Micro takes
                              the output size from the output tensor and its offsets from
                              SAME/VALID over that size (ComputePaddingHeightWidth with the
                              output as the "input"); the fused activation clamps as a
                              convolution's does (TFLite Micro's PyPI interpreter applies it).
"""
from __future__ import annotations

import numpy as np

from edgetune.codegen.kernels.base import Buffer
from edgetune.codegen.kernels.tconv2d_s8 import SHAPE_KEYS as TCONV_KEYS

from .arithmetic import output_size
from .graph import Graph, Operator
from .layers import ModelLayer, _check_reduction, _Reader, schema


def _tconv_geometry(r: _Reader, x, y, kh: int, kw: int) -> dict[str, int]:
    names = {v: k for k, v in vars(schema().Padding).items() if isinstance(v, int)}
    padding = names.get(int(r.op.option("padding", 0)), "")
    geometry = {}
    for axis, k, size, side in (("h", kh, y.shape[1], "pad_top"), ("w", kw, y.shape[2], "pad_left")):
        stride = int(r.op.option(f"stride{axis.upper()}", 0))
        if stride < 1 or padding not in ("SAME", "VALID"):
            raise r.fail(f"stride {stride} and padding {padding or '?'} along {axis} are not a valid transposed "
                         "convolution")
        geometry[f"stride_{axis}"] = stride
        geometry[side] = output_size(size, k, stride, 1, padding)[1]
    return geometry


def transpose_conv_layer(graph: Graph, op: Operator) -> ModelLayer:
    r = _Reader(graph, op)
    w, x, y = r.tensor(1, "weights"), r.tensor(2, "input"), r.tensor(0, "output")
    if len(w.shape) != 4 or len(x.shape) != 4 or len(y.shape) != 4 or x.shape[0] != 1 or y.shape[0] != 1:
        raise r.fail(f"weights {list(w.shape)}, input {list(x.shape)} and output {list(y.shape)}: edgetune's "
                     "transposed convolution takes weights [cout, kh, kw, cin] and tensors [1, h, w, c]")
    cout, kh, kw, cin = w.shape
    if x.shape[3] != cin or y.shape[3] != cout:
        raise r.fail(f"weights {list(w.shape)} do not match input channels {x.shape[3]} and output channels {y.shape[3]}")
    _check_reduction(r, kh * kw * cin)
    g = _tconv_geometry(r, x, y, kh, kw)
    quant, params = r.requantisation(x, w, y, cout, axis=0)
    bias = _tconv_bias(r, cout)
    shape = dict(h=x.shape[1], w=x.shape[2], cin=cin, cout=cout, kh=kh, kw=kw, oh=y.shape[1], ow=y.shape[2], **g)
    constants = (Buffer("weights", w.array().copy(), weight=True), bias, *quant)
    macs = x.shape[1] * x.shape[2] * cin * kh * kw * cout
    return ModelLayer(op.index, op.op, "tconv2d_s8", tuple((k, int(shape[k])) for k in TCONV_KEYS), macs, x.shape,
                      y.shape, op, r.operator_tensors(), constants, params, (y.shape[1], y.shape[2], cout),
                      input_dims=(x.shape[1], x.shape[2], cin), input_position=2)


def _tconv_bias(r: _Reader, channels: int) -> Buffer:
    b = r.tensor(3, "bias", dtype="int32", optional=True)
    if b is None:
        return Buffer("bias", np.zeros(channels, dtype=np.int32), weight=True)
    if b.elements != channels:
        raise r.fail(f"bias tensor {b.index} ({b.name}) has {b.elements} values for {channels} output channels")
    return Buffer("bias", b.array().reshape(channels).astype(np.int32), weight=True)
