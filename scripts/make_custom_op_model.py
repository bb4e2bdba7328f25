"""Build the example model with a CUSTOM operator: examples/kernels/leaky_relu_s8/leaky_net.tflite.

    CONV_2D 3x3 (8x8x4 -> 8x8x8) -> LeakyRelu (alpha 0.1) -> DEPTHWISE_CONV_2D 3x3 (8x8x8)
    -> LeakyRelu (alpha 0.25)

The two LeakyRelu operators are CUSTOM operators (custom code "LeakyRelu", alpha in a
flexbuffer map of their custom options), as a team's own converter writes an operator
TFLite Micro has no kernel for; each has its own output scale and zero point. With
`--builtin` they are TFLite's builtin LEAKY_RELU instead (LeakyReluOptions alpha), the same
model otherwise: what the tests use to check a user kernel serving a builtin operator
against TFLite Micro.

TensorFlow is not needed (nor installed in edgetune's environment): the model is written
with the flatbuffer object API of the TFLite schema bindings that the `tflite-micro`
package ships (edgetune's app/model/builder.py). Every weight, bias, scale and zero
point is drawn from numpy's generator with the seed given (default 17, the committed file's):

    .venv/bin/python scripts/make_custom_op_model.py                  # writes the example's model
    .venv/bin/python scripts/make_custom_op_model.py --builtin --out X.tflite
"""
from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np
from flatbuffers import flexbuffers

from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "examples" / "kernels" / "leaky_relu_s8" / "leaky_net.tflite"
SAME, NONE = 0, 0  # Padding.SAME, ActivationFunctionType.NONE


def f32(value: float) -> float:
    return float(np.float32(value))


def _activation(index: int, name: str, shape, scale: float, zero: int) -> Tensor:
    return Tensor(index, name, tuple(shape), "int8", Quantization((f32(scale),), (int(zero),)))


def _leaky(index: int, x: int, y: int, alpha: float, builtin: bool) -> Operator:
    if builtin:
        return Operator(index, "LEAKY_RELU", (x,), (y,), "LeakyReluOptions", (("alpha", f32(alpha)),))
    return Operator(index, "CUSTOM", (x,), (y,), custom_code="LeakyRelu",
                    custom_options=bytes(flexbuffers.Dumps({"alpha": alpha})))


def _filter(rng, tensors: list[Tensor], name: str, shape, axis: int, in_scale: float) -> tuple[int, int]:
    """Per-channel int8 weights along `axis` and their int32 bias; their tensor indices."""
    channels = shape[axis]
    scales = tuple(f32(s) for s in rng.uniform(0.004, 0.02, size=channels))
    w = constant(len(tensors), name, rng.integers(-127, 128, size=shape, dtype=np.int8),
                 Quantization(scales, (0,) * channels, axis))
    tensors.append(w)
    b = constant(len(tensors), name + "_bias", rng.integers(-2000, 2000, size=channels, dtype=np.int32),
                 Quantization(tuple(f32(in_scale * s) for s in scales), (0,) * channels, 0))
    tensors.append(b)
    return w.index, b.index


def leaky_net(seed: int = 17, builtin: bool = False) -> bytes:
    rng = np.random.default_rng(seed)
    tensors = [_activation(0, "input", (1, 8, 8, 4), 0.05, -3)]
    w, b = _filter(rng, tensors, "conv", (8, 3, 3, 4), 0, 0.05)
    tensors.append(_activation(len(tensors), "conv_out", (1, 8, 8, 8), rng.uniform(0.1, 0.2), rng.integers(-20, 20)))
    conv_out = len(tensors) - 1
    tensors.append(_activation(len(tensors), "leaky1", (1, 8, 8, 8), rng.uniform(0.05, 0.1), rng.integers(-90, -60)))
    leaky1 = len(tensors) - 1
    dw, db = _filter(rng, tensors, "dwconv", (1, 3, 3, 8), 3, tensors[leaky1].quantization.scales[0])
    tensors.append(_activation(len(tensors), "dw_out", (1, 8, 8, 8), rng.uniform(0.1, 0.2), rng.integers(-20, 20)))
    dw_out = len(tensors) - 1
    tensors.append(_activation(len(tensors), "output", (1, 8, 8, 8), rng.uniform(0.05, 0.1), rng.integers(-90, -60)))
    output = len(tensors) - 1
    conv_options = (("padding", SAME), ("strideH", 1), ("strideW", 1), ("fusedActivationFunction", NONE))
    operators = [Operator(0, "CONV_2D", (0, w, b), (conv_out,), "Conv2DOptions", conv_options),
                 _leaky(1, conv_out, leaky1, 0.1, builtin),
                 Operator(2, "DEPTHWISE_CONV_2D", (leaky1, dw, db), (dw_out,), "DepthwiseConv2DOptions",
                          (*conv_options, ("depthMultiplier", 1))),
                 _leaky(3, dw_out, output, 0.25, builtin)]
    return build_model(tensors, operators, [0], [output], description="edgetune example: a CUSTOM LeakyRelu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--builtin", action="store_true", help="builtin LEAKY_RELU operators instead of CUSTOM")
    args = parser.parse_args()
    data = leaky_net(args.seed, args.builtin)
    args.out.write_bytes(data)
    print(f"{args.out}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
