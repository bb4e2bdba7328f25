"""Quantised leaky ReLU, int8 to int8, with TFLite's arithmetic (its LEAKY_RELU operator):

    v = x - in_zero
    y = clamp(out_zero + v * M_identity, -128, 127)   for v >= 0
    y = clamp(out_zero + v * M_alpha, -128, 127)      for v < 0

where M_identity = in_scale / out_scale and M_alpha = alpha * in_scale / out_scale are
applied as TFLite's fixed-point multipliers (a Q31 multiplier and a shift: rounding
doubling high multiply, then a rounding right shift).

It serves two model operators: the builtin LEAKY_RELU (TFLite Micro judges it), and a
CUSTOM operator "LeakyRelu" whose alpha is a flexbuffer map in its custom options, as a
team's own converter writes it (TFLite Micro cannot run that one: this kernel's reference
judges it). The parameters: how many elements (plain C) or vectors (Helium, where the
target has MVE) one loop step handles, and whether plain C chooses the slope by a branch
or computes both and selects.
"""
import numpy as np
from flatbuffers import flexbuffers

import edgetune as et

ONE = (1 << 30, 1)  # the multiplier 1.0 as (Q31 multiplier, shift)
TENTH = (1717986918, -3)  # 0.1


def _high_mul(v, multiplier):
    """round(v * multiplier / 2^31), ties toward +infinity (saturating: only -2^31 * -2^31 overflows)."""
    product = v.astype(np.int64) * np.int64(multiplier)
    nudge = np.where(product >= 0, 1 << 30, 1 - (1 << 30))
    total = product + nudge
    return np.where(total >= 0, total >> 31, -((-total) >> 31))


def _scale(v, multiplier, shift):
    """v times a fixed-point multiplier (TFLite's MultiplyByQuantizedMultiplier)."""
    x = _high_mul(v << max(shift, 0), multiplier)
    right = max(-shift, 0)
    if right == 0:
        return x
    mask = (1 << right) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> right) + ((x & mask) > threshold)


def reference(shape, inputs):
    v = inputs["x"].astype(np.int64) - inputs["in_zero"]
    up = _scale(v, inputs["mult_identity"], inputs["shift_identity"])
    down = _scale(v, inputs["mult_alpha"], inputs["shift_alpha"])
    return np.clip(inputs["out_zero"] + np.where(v >= 0, up, down), -128, 127).astype(np.int8)


def _binding(op, alpha):
    """The operator as a call of this kernel: its tensors' scales and zero points become the scalars."""
    x, y = op.inputs[0], op.outputs[0]
    in_scale, in_zero = x.quantization.scales[0], x.quantization.zero_points[0]
    out_scale, out_zero = y.quantization.scales[0], y.quantization.zero_points[0]
    # TFLite Micro computes both multipliers in float32 before quantising them.
    identity = float(np.float32(in_scale) / np.float32(out_scale))
    slope = float(np.float32(in_scale) * np.float32(alpha) / np.float32(out_scale))
    mult_identity, shift_identity = et.quantize_multiplier(identity)
    mult_alpha, shift_alpha = et.quantize_multiplier(slope)
    return et.Binding(shape={"n": x.elements}, input="x", output="y",
                      scalars=dict(in_zero=in_zero, out_zero=out_zero, mult_identity=mult_identity,
                                   shift_identity=shift_identity, mult_alpha=mult_alpha, shift_alpha=shift_alpha))


def builtin_leaky_relu(op):
    return _binding(op, op.option("alpha"))


def custom_leaky_relu(op):
    options = flexbuffers.Loads(op.custom_options)
    return _binding(op, options["alpha"])


KERNEL = et.KernelDef(
    name="leaky_relu_s8",
    shape=("n",),
    source="leaky_relu_s8.c.j2",
    args=[et.Input("x", "int8", "n"), et.Output("y", "int8", "n"),
          et.Scalar("in_zero", 0), et.Scalar("out_zero", 0),
          et.Scalar("mult_identity", ONE[0]), et.Scalar("shift_identity", ONE[1]),
          et.Scalar("mult_alpha", TENTH[0]), et.Scalar("shift_alpha", TENTH[1])],
    params={"unroll": [1, 2, 4], "select": {"branch", "both"}},
    vectors=[et.Vector("c"),
             et.Vector("mve", requires="mve", restrictions=['select == "branch"'])],
    reference=reference,
    operators={"LEAKY_RELU": builtin_leaky_relu, "CUSTOM:LeakyRelu": custom_leaky_relu},
    example_shape="n=256",
    description="quantised int8 leaky ReLU (TFLite's arithmetic)",
)
