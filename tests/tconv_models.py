"""One-operator TRANSPOSE_CONV models for the tests (tests/test_tconv2d.py), written with the
model writer: TFLite's input order (output_shape, weights OHWI, input, optional bias)."""
from __future__ import annotations

import numpy as np

from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor

from model_files import ACTIVATIONS, draw_quant, f32, int8_weights

PADDING = {"SAME": 0, "VALID": 1}


def tconv_out(size: int, k: int, stride: int, padding: str) -> int:
    """The output size Keras gives a transposed convolution (no output padding)."""
    return size * stride if padding == "SAME" else (size - 1) * stride + max(k, stride)


def tconv_model(rng, h, w, cin, cout, kh, kw, stride=(2, 2), padding="SAME", with_bias=True, per_channel=True,
                edge="random", activation="NONE", out_hw=None) -> bytes:
    q = draw_quant(rng, cout, kh * kw * cin, edge)
    oh, ow = out_hw or (tconv_out(h, kh, stride[0], padding), tconv_out(w, kw, stride[1], padding))
    scales = q.w_scales if per_channel else q.w_scales[:1]
    tensors = [constant(0, "output_shape", np.array([1, oh, ow, cout], dtype=np.int32)),
               constant(1, "weights", int8_weights(rng, (cout, kh, kw, cin), edge),
                        Quantization(scales, (0,) * len(scales), 0)),
               Tensor(2, "input", (1, h, w, cin), "int8", Quantization((q.in_scale,), (q.in_zero,))),
               Tensor(3, "output", (1, oh, ow, cout), "int8", Quantization((q.out_scale,), (q.out_zero,)))]
    inputs = [0, 1, 2]
    if with_bias:
        bias_scales = tuple(f32(q.in_scale * s) for s in scales)
        tensors.append(constant(4, "bias", q.bias, Quantization(bias_scales, (0,) * len(scales), 0)))
        inputs.append(4)
    options = (("padding", PADDING[padding]), ("strideH", stride[0]), ("strideW", stride[1]),
               ("fusedActivationFunction", ACTIVATIONS[activation]))
    op = Operator(0, "TRANSPOSE_CONV", tuple(inputs), (3,), "TransposeConvOptions", options)
    return build_model(tensors, [op], [2], [3])
