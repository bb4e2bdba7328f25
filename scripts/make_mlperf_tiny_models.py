"""Build the four MLPerf Tiny reference models as int8 .tflite files with seeded random weights.

The architectures are those of MLPerf Tiny v0.5 (Banbury et al. 2021, "MLPerf Tiny Benchmark",
arXiv:2106.07597), as the benchmark's reference training code defines them:

- ``ds_cnn_kws``: DS-CNN for keyword spotting. 49x10x1 MFCC input; a 10x4 stride-2 SAME
  convolution with 64 filters, four depthwise-separable blocks (3x3 depthwise + 1x1 pointwise,
  64 channels), each convolution followed by batch norm and ReLU; a 24x5 average pool (the
  reference's ``(49//2, 10//2)``), flatten, a 12-way dense layer and softmax.
- ``mobilenet_v1_025_vww``: MobileNetV1 with width multiplier 0.25 for visual wake words.
  96x96x3 input; a 3x3 stride-2 SAME convolution with 8 filters, 13 depthwise-separable blocks
  (strides 1,2,1,2,1,2,1,1,1,1,1,2,1; channels 16..256), batch norm and ReLU after every
  convolution; a 3x3 average pool over the last feature map, flatten, 2-way dense, softmax.
- ``resnet8_cifar10``: the ResNet-8 (ResNet v1, three stacks) for CIFAR-10. 32x32x3 input;
  a 3x3 convolution with 16 filters, three residual stacks of two 3x3 convolutions (16, 32, 64
  filters; the second and third start with stride 2 and take a 1x1 stride-2 convolution on the
  shortcut), residual ADD then ReLU; an 8x8 average pool, flatten, 10-way dense, softmax.
- ``fc_autoencoder_ad``: the fully connected autoencoder for anomaly detection (ToyADMOS).
  640 inputs; dense layers 128, 128, 128, 128, 8, 128, 128, 128, 128 each followed by batch norm
  and ReLU, and a linear dense layer back to 640.

Every weight, bias and batch-norm statistic (gamma, beta, moving mean, moving variance) is drawn
from a seeded ``numpy.random.Generator``, so that folding the batch norms into the layers before
them changes the numbers. The models go through TensorFlow's converter the way users convert
theirs: full-integer post-training quantisation (``Optimize.DEFAULT``, builtin int8 ops only)
calibrated on a seeded random representative dataset, with int8 input and output. Whatever the
converter emits (folded batch norms, per-channel dense weights, Keras 3's ``Flatten`` as a
SHAPE/STRIDED_SLICE/PACK/RESHAPE chain) is kept as it comes.

TensorFlow is not a dependency of edgetune: the test suite reads the committed files. To
regenerate them, install TensorFlow and the TFLM schema bindings in a separate virtual
environment outside the repository, and run this script with it::

    python3 -m venv /tmp/tfvenv
    /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 tflite-micro
    /tmp/tfvenv/bin/python scripts/make_mlperf_tiny_models.py            # writes tests/data/models/
    /tmp/tfvenv/bin/python scripts/make_mlperf_tiny_models.py --out DIR  # elsewhere

The committed files were made with tensorflow-cpu 2.21.0 (Keras 3.15.1, numpy 2.4.6) and seed 15.
The script prints, per model, its size, SHA-256, operators, parameters, MACs per operator type and
the per-side pads of every SAME convolution, read back from the .tflite with the schema bindings
that the ``tflite-micro`` package ships.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# Deterministic float kernels during calibration: oneDNN's fused kernels may reorder sums.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

SEED = 15
CALIBRATION_SAMPLES = 32
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "models"


# --- the architectures ------------------------------------------------------------------------

def _conv_bn_relu(x, name: str, filters: int, kernel, strides=1):
    x = layers.Conv2D(filters, kernel, strides=strides, padding="same", name=f"{name}_conv")(x)
    x = layers.BatchNormalization(name=f"{name}_bn")(x)
    return layers.Activation("relu", name=f"{name}_relu")(x)


def _depthwise_separable(x, name: str, filters: int, strides=1):
    x = layers.DepthwiseConv2D(3, strides=strides, padding="same", name=f"{name}_dw")(x)
    x = layers.BatchNormalization(name=f"{name}_dw_bn")(x)
    x = layers.Activation("relu", name=f"{name}_dw_relu")(x)
    return _conv_bn_relu(x, f"{name}_pw", filters, 1)


def _classifier_head(x, classes: int):
    x = layers.Flatten(name="flatten")(x)
    return layers.Dense(classes, activation="softmax", name="classifier")(x)


def ds_cnn_kws() -> keras.Model:
    inputs = keras.Input(shape=(49, 10, 1), name="mfcc")
    x = _conv_bn_relu(inputs, "stem", 64, (10, 4), strides=2)
    x = layers.Dropout(0.2, name="stem_dropout")(x)
    for block in range(1, 5):
        x = _depthwise_separable(x, f"ds{block}", 64)
    x = layers.Dropout(0.4, name="head_dropout")(x)
    x = layers.AveragePooling2D(pool_size=(49 // 2, 10 // 2), name="pool")(x)
    return keras.Model(inputs, _classifier_head(x, 12), name="ds_cnn_kws")


# (output channels, stride) of MobileNetV1's 13 depthwise-separable blocks at width 0.25.
MOBILENET_BLOCKS = ((16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2),
                    (128, 1), (128, 1), (128, 1), (128, 1), (128, 1), (256, 2), (256, 1))


def mobilenet_v1_025_vww() -> keras.Model:
    inputs = keras.Input(shape=(96, 96, 3), name="image")
    x = _conv_bn_relu(inputs, "stem", 8, 3, strides=2)
    for block, (filters, strides) in enumerate(MOBILENET_BLOCKS, start=1):
        x = _depthwise_separable(x, f"ds{block}", filters, strides)
    x = layers.AveragePooling2D(pool_size=tuple(x.shape[1:3]), name="pool")(x)
    return keras.Model(inputs, _classifier_head(x, 2), name="mobilenet_v1_025_vww")


def _residual_stack(x, name: str, filters: int, strides: int):
    y = _conv_bn_relu(x, f"{name}_a", filters, 3, strides)
    y = layers.Conv2D(filters, 3, padding="same", name=f"{name}_b_conv")(y)
    y = layers.BatchNormalization(name=f"{name}_b_bn")(y)
    if strides != 1:
        # The reference's projection shortcut: a 1x1 strided convolution, no batch norm.
        x = layers.Conv2D(filters, 1, strides=strides, padding="same", name=f"{name}_shortcut")(x)
    x = layers.Add(name=f"{name}_add")([x, y])
    return layers.Activation("relu", name=f"{name}_relu")(x)


def resnet8_cifar10() -> keras.Model:
    inputs = keras.Input(shape=(32, 32, 3), name="image")
    x = _conv_bn_relu(inputs, "stem", 16, 3)
    for stack, (filters, strides) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
        x = _residual_stack(x, f"stack{stack}", filters, strides)
    x = layers.AveragePooling2D(pool_size=tuple(x.shape[1:3]), name="pool")(x)
    return keras.Model(inputs, _classifier_head(x, 10), name="resnet8_cifar10")


def fc_autoencoder_ad() -> keras.Model:
    inputs = keras.Input(shape=(640,), name="log_mel")
    x = inputs
    for index, units in enumerate((128, 128, 128, 128, 8, 128, 128, 128, 128), start=1):
        x = layers.Dense(units, name=f"dense{index}")(x)
        x = layers.BatchNormalization(name=f"dense{index}_bn")(x)
        x = layers.Activation("relu", name=f"dense{index}_relu")(x)
    outputs = layers.Dense(640, name="reconstruction")(x)
    return keras.Model(inputs, outputs, name="fc_autoencoder_ad")


@dataclass(frozen=True)
class ModelSpec:
    """One model to build: its file name, builder and how its calibration inputs are drawn."""
    file_name: str
    build: Callable[[], keras.Model]
    # Images are normalised to [0, 1) in the reference pipelines; audio features are centred.
    calibration: str  # "unit" (uniform [0, 1)) or "normal" (standard normal)


MODELS = (
    ModelSpec("ds_cnn_kws.tflite", ds_cnn_kws, "normal"),
    ModelSpec("mobilenet_v1_025_vww.tflite", mobilenet_v1_025_vww, "unit"),
    ModelSpec("resnet8_cifar10.tflite", resnet8_cifar10, "unit"),
    ModelSpec("fc_autoencoder_ad.tflite", fc_autoencoder_ad, "normal"),
)


# --- seeded weights ---------------------------------------------------------------------------

def fan_in(layer, kernel_shape) -> int:
    """The inputs one output of `layer` sums over, for He-normal kernels (scripts/make_model_zoo.py
    draws its kernels with this one too)."""
    if isinstance(layer, layers.DepthwiseConv2D):
        return int(np.prod(kernel_shape[:2]))  # each output channel reads one input channel
    if isinstance(layer, layers.Conv2DTranspose):
        return int(np.prod(kernel_shape[:2])) * kernel_shape[-1]  # kernel (h, w, out, in)
    return int(np.prod(kernel_shape[:-1]))


def _draw(layer, variable, rng: np.random.Generator) -> np.ndarray:
    """A seeded value for one variable: He-normal kernels keep activations O(1) through the
    depth; batch-norm statistics far from (0, 1) so that folding them is visible."""
    shape = tuple(variable.shape)
    name = variable.name
    if name in ("kernel", "depthwise_kernel"):
        return rng.normal(0.0, np.sqrt(2.0 / fan_in(layer, shape)), shape)
    if name == "bias":
        return rng.normal(0.0, 0.05, shape)
    if name == "gamma":
        return rng.uniform(0.5, 1.5, shape)
    if name == "beta":
        return rng.normal(0.0, 0.1, shape)
    if name == "moving_mean":
        return rng.normal(0.0, 0.2, shape)
    if name == "moving_variance":
        return rng.uniform(0.5, 2.0, shape)
    raise ValueError(f"no rule to draw variable {variable.path!r}")


def set_seeded_weights(model: keras.Model, rng: np.random.Generator) -> None:
    for layer in model.layers:
        if layer.weights:
            layer.set_weights([_draw(layer, v, rng).astype(np.float32) for v in layer.weights])


# --- conversion -------------------------------------------------------------------------------

def calibration_inputs(model: keras.Model, kind: str, rng: np.random.Generator) -> np.ndarray:
    shape = (CALIBRATION_SAMPLES, 1) + tuple(model.input_shape[1:])
    data = rng.uniform(0.0, 1.0, shape) if kind == "unit" else rng.normal(0.0, 1.0, shape)
    return data.astype(np.float32)


def convert_int8(model: keras.Model, samples: np.ndarray) -> bytes:
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([sample] for sample in samples)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    with contextlib.redirect_stdout(io.StringIO()):  # Keras prints the whole exported signature
        return converter.convert()


def build_model(spec: ModelSpec, index: int, seed: int) -> tuple[keras.Model, bytes]:
    keras.backend.clear_session()
    # One generator per model, so a model's bytes do not depend on which others were built.
    rng = np.random.default_rng([seed, index])
    model = spec.build()
    set_seeded_weights(model, rng)
    return model, convert_int8(model, calibration_inputs(model, spec.calibration, rng))


# --- the summary, read back from the flatbuffer ------------------------------------------------

def _schema():
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    return schema


def _operator_names(schema) -> dict[int, str]:
    return {value: name for name, value in vars(schema.BuiltinOperator).items()
            if not name.startswith("_")}


def same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TFLite's SAME padding: out = ceil(in / stride); the odd pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + dilation * (kernel - 1) + 1 - size, 0)
    return total // 2, total - total // 2


def _layer_facts(schema, op_name, op, tensors) -> tuple[int, int, str | None]:
    """(parameters, MACs, SAME-padding note) of one operator."""
    shape = [list(tensors[i].shape) for i in op.inputs if i >= 0]
    params = sum(int(np.prod(s)) for s in shape[1:])  # weights and bias (constants)
    out = list(tensors[op.outputs[0]].shape)
    if op_name == "FULLY_CONNECTED":
        return params, int(np.prod(out)) * shape[1][1], None
    if op_name not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        return 0, 0, None
    _, kh, kw, kin = shape[1]
    per_output = kh * kw * (kin if op_name == "CONV_2D" else 1)
    opts = op.builtinOptions
    note = None
    if opts.padding == schema.Padding.SAME:
        top, bottom = same_pads(shape[0][1], kh, opts.strideH, opts.dilationHFactor)
        left, right = same_pads(shape[0][2], kw, opts.strideW, opts.dilationWFactor)
        note = (f"{op_name} {shape[0][1]}x{shape[0][2]}x{shape[0][3]} k{kh}x{kw} "
                f"s{opts.strideH}x{opts.strideW}: pads t/b/l/r {top}/{bottom}/{left}/{right}")
    return params, int(np.prod(out)) * per_output, note


def summarise(name: str, data: bytes) -> str:
    schema = _schema()
    model = schema.ModelT.InitFromPackedBuf(data, 0)
    names = _operator_names(schema)
    graph = model.subgraphs[0]
    counts: dict[str, int] = {}
    macs: dict[str, int] = {}
    params, same = 0, []
    for op in graph.operators:
        code = model.operatorCodes[op.opcodeIndex]
        op_name = names[max(code.builtinCode, code.deprecatedBuiltinCode)]
        counts[op_name] = counts.get(op_name, 0) + 1
        p, m, note = _layer_facts(schema, op_name, op, graph.tensors)
        params += p
        if m:
            macs[op_name] = macs.get(op_name, 0) + m
        if note and note not in same:
            same.append(note)
    lines = [f"{name}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}",
             "  operators: " + ", ".join(f"{k} x{v}" for k, v in counts.items()),
             f"  parameters (int8 weights + int32 biases): {params}",
             f"  MACs: {sum(macs.values())} (" + ", ".join(f"{k} {v}" for k, v in macs.items()) + ")"]
    lines += [f"  SAME: {note}" for note in same]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder to write to")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    tf.config.experimental.enable_op_determinism()
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}, numpy {np.__version__}, "
          f"seed {args.seed}")
    for index, spec in enumerate(MODELS):
        model, data = build_model(spec, index, args.seed)
        (args.out / spec.file_name).write_bytes(data)
        print(summarise(spec.file_name, data))
        print(f"  keras parameters: {model.count_params()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
