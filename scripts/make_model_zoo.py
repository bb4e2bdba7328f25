"""Build the model zoo: small Keras models through TensorFlow's converter, as users make theirs.

Every model is small (reduced widths, small inputs: a few KB to about 100 KB) and has seeded
random weights. Together they cover the operators and architectures users' edge models contain
(issue 28): whole architectures (a MobileNetV2 and a MobileNetV3-small with small inputs and
widths, a squeeze-excite block, unrolled GRU and LSTM cells, a fused LSTM (tf-keras: one
UNIDIRECTIONAL_SEQUENCE_LSTM), a Conv1D audio model with a dynamic
batch, a dilated SAME network, a transpose-convolution decoder, an attention block with
LayerNorm, an int16x8 keyword-spotting model) and models of one or a few operators each (MUL,
LOGISTIC, TANH, HARD_SWISH, SPLIT, SUB, SPACE_TO_BATCH_ND, UNPACK, EXPAND_DIMS, TRANSPOSE, TILE,
RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR, LEAKY_RELU, standalone RELU and RELU6, GATHER, NEG,
SQUARED_DIFFERENCE, RSQRT, an internal DEQUANTIZE, a float operator inside an int8 graph, a
SOFTMAX over 600 classes). This converter writes every ``tf.squeeze`` with static shapes as a
RESHAPE, so no model has a SQUEEZE. Where TFLite Micro cannot run the dynamic-batch form (a
FILL or RESHAPE whose shape is computed at run time: recurrent cells, dense layers on 3-D
tensors), the model's input has a fixed batch of 1.

Conversion is full-integer post-training quantisation (``Optimize.DEFAULT``) calibrated on a
seeded random representative dataset with int8 input and output (``TFLITE_BUILTINS_INT8``), as
``scripts/make_mlperf_tiny_models.py`` does; the 16x8 model uses int16 activations with int8
weights (``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``, int16 input and
output); the models with a float part also allow ``TFLITE_BUILTINS``, so that the converter
keeps an operator without an int8 kernel in float between DEQUANTIZE and QUANTIZE. What the
converter emits is kept as it comes.

Beside each ``NAME.tflite`` goes ``NAME.npz``: seeded inputs (``input0``, ... stacked over the
cases: three uniform over the input type's range, one of only its extremes, one at the input's
zero point, which on ``softmax_600`` gives 600 nearly equal logits) and the outputs
TFLite Micro's interpreter (the ``tflite-micro`` package) computes for them (``output0``, ...).
The interpreter runs in a child process per case, since it aborts (SIGABRT) on some inputs of
some models (a SOFTMAX over 600 classes). TFLite Micro allocates the tensors' shapes as
stored and writes past one stored too small (SPACE_TO_BATCH_ND on a dynamic batch): where
TensorFlow Lite's interpreter, which resizes tensors as it runs, computes a shape otherwise,
the model has no TFLite Micro outputs. ``tflm_ok`` marks the cases with TFLite Micro's
outputs (the others' are zeros) and ``tflm_failure`` says why not. ``README.md`` lists the models (file, architecture, operators, bytes,
SHA-256).

TensorFlow is not a dependency of edgetune: the test suite reads the committed files. To
regenerate them, use a virtual environment outside the repository::

    python3 -m venv /tmp/tfvenv
    /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0 tflite-micro
    /tmp/tfvenv/bin/python scripts/make_model_zoo.py                 # writes tests/data/models/zoo/
    /tmp/tfvenv/bin/python scripts/make_model_zoo.py --out DIR --only gru_unrolled
    /tmp/tfvenv/bin/python scripts/make_model_zoo.py --large        # tests/data/models/large/

The committed files were made with tensorflow-cpu 2.21.0 (Keras 3.15, numpy 2.4) and seed 28;
``lstm_fused`` with tf-keras 2.21.0 (Keras 2: the converter fuses only its LSTM).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# Deterministic float kernels during calibration: oneDNN's fused kernels may reorder sums.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from keras import layers, ops  # noqa: E402

from make_mlperf_tiny_models import fan_in  # noqa: E402  (this folder: run as scripts/make_model_zoo.py)

SEED = 28
CALIBRATION_SAMPLES = 32
RANDOM_CASES = 3  # then one of the input type's extremes, one at the input's zero point (a real 0.0)
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "models" / "zoo"
INT8, INT16X8, WITH_FLOAT = "int8", "16x8", "int8 with float"


# --- building blocks ---------------------------------------------------------------------------

def _conv_bn(x, filters, kernel, strides=1, name="", activation=None, groups=False):
    if groups:
        x = layers.DepthwiseConv2D(kernel, strides=strides, padding="same", name=f"{name}_dw")(x)
    else:
        x = layers.Conv2D(filters, kernel, strides=strides, padding="same", name=f"{name}_conv")(x)
    x = layers.BatchNormalization(name=f"{name}_bn")(x)
    return x if activation is None else activation(x, name)


def _relu6(x, name):
    return layers.ReLU(6.0, name=f"{name}_relu6")(x)


def _relu(x, name):
    return layers.ReLU(name=f"{name}_relu")(x)


def _hard_sigmoid(x, name):
    """Keras MobileNetV3's: relu6(x + 3) / 6, which the converter keeps as ADD, RELU6, MUL."""
    return layers.Rescaling(1.0 / 6.0, name=f"{name}_hs_div")(layers.ReLU(6.0, name=f"{name}_hs_relu6")(
        layers.Rescaling(1.0, offset=3.0, name=f"{name}_hs_add")(x)))


def _hard_swish(x, name):
    """x * hard_sigmoid(x), MobileNetV3's form, which the converter fuses into HARD_SWISH."""
    return layers.Multiply(name=f"{name}_hswish")([x, _hard_sigmoid(x, name)])


def _squeeze_excite(x, name, ratio=4, gate=None):
    channels = x.shape[-1]
    s = layers.GlobalAveragePooling2D(keepdims=True, name=f"{name}_se_pool")(x)
    s = layers.Conv2D(max(channels // ratio, 4), 1, activation="relu", name=f"{name}_se_reduce")(s)
    s = layers.Conv2D(channels, 1, name=f"{name}_se_expand")(s)
    s = gate(s, name) if gate is not None else layers.Activation("sigmoid", name=f"{name}_se_sigmoid")(s)
    return layers.Multiply(name=f"{name}_se_mul")([x, s])


def _inverted_residual(x, name, expand, filters, strides, kernel=3, activation=_relu6, se=False, gate=None):
    inputs = x
    if expand != x.shape[-1]:
        x = _conv_bn(x, expand, 1, name=f"{name}_expand", activation=activation)
    x = _conv_bn(x, None, kernel, strides, name=f"{name}_depthwise", activation=activation, groups=True)
    if se:
        x = _squeeze_excite(x, name, gate=gate)
    x = _conv_bn(x, filters, 1, name=f"{name}_project")
    if strides == 1 and inputs.shape[-1] == filters:
        x = layers.Add(name=f"{name}_add")([inputs, x])
    return x


def _model(inputs, outputs, name):
    return keras.Model(inputs, outputs, name=name)


# --- whole architectures -----------------------------------------------------------------------

# MobileNetV2 (Sandler et al. 2018) at width 0.35 on 32x32: (expansion, channels, stride) of the
# blocks kept (one per stage but the stage's first where the paper repeats it).
MOBILENET_V2_BLOCKS = ((1, 8, 1), (6, 8, 2), (6, 8, 1), (6, 16, 2), (6, 16, 1), (6, 24, 2), (6, 32, 1), (6, 56, 2))


def mobilenet_v2():
    inputs = keras.Input((32, 32, 3), name="image")
    x = _conv_bn(inputs, 16, 3, 2, "stem", _relu6)
    for n, (t, c, s) in enumerate(MOBILENET_V2_BLOCKS):
        x = _inverted_residual(x, f"b{n}", x.shape[-1] * t, c, s)
    x = _conv_bn(x, 128, 1, name="head", activation=_relu6)
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    return _model(inputs, layers.Dense(10, activation="softmax", name="classifier")(x), "mobilenet_v2")


# MobileNetV3-small (Howard et al. 2019), width about 0.5, 48x48: (kernel, expansion, channels,
# squeeze-excite, activation, stride) per bneck block.
MOBILENET_V3_BLOCKS = ((3, 8, 8, True, "relu", 2), (3, 36, 12, False, "relu", 2), (3, 44, 12, False, "relu", 1),
                       (5, 48, 20, True, "hswish", 2), (5, 120, 20, True, "hswish", 1), (5, 72, 24, True, "hswish", 1))


def mobilenet_v3_small():
    inputs = keras.Input((48, 48, 3), name="image")
    x = _conv_bn(inputs, 8, 3, 2, "stem", _hard_swish)
    for n, (k, e, c, se, act, s) in enumerate(MOBILENET_V3_BLOCKS):
        x = _inverted_residual(x, f"b{n}", e, c, s, k, _relu if act == "relu" else _hard_swish, se, _hard_sigmoid)
    x = _conv_bn(x, 72, 1, name="head", activation=_hard_swish)
    x = layers.GlobalAveragePooling2D(keepdims=True, name="pool")(x)
    x = _hard_swish(layers.Conv2D(128, 1, name="head_fc")(x), "head_fc")
    x = layers.Flatten(name="flatten")(layers.Conv2D(10, 1, name="classifier")(x))
    return _model(inputs, layers.Activation("softmax", name="softmax")(x), "mobilenet_v3_small")


def squeeze_excite():
    inputs = keras.Input((16, 16, 8), name="features")
    x = _conv_bn(inputs, 16, 3, 1, "conv", _relu)
    x = _squeeze_excite(x, "se")
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    return _model(inputs, layers.Dense(4, name="logits")(x), "squeeze_excite")


def gru_unrolled():
    inputs = keras.Input((8, 12), name="sequence", batch_size=1)
    x = layers.GRU(16, unroll=True, name="gru")(inputs)
    return _model(inputs, layers.Dense(4, name="logits")(x), "gru_unrolled")


def lstm_unrolled():
    inputs = keras.Input((8, 12), name="sequence", batch_size=1)
    x = layers.LSTM(16, unroll=True, name="lstm")(inputs)
    return _model(inputs, layers.Dense(4, name="logits")(x), "lstm_unrolled")


def lstm_fused():
    """A Keras 2 (tf-keras) LSTM on a fixed batch of 1, which the converter fuses into one
    UNIDIRECTIONAL_SEQUENCE_LSTM (Keras 3's LSTM it never fuses: docs/model-zoo.md); the last
    step's hidden state (a STRIDED_SLICE) into a dense layer."""
    import tf_keras  # Keras 2, a development dependency beside TensorFlow (the docstring above)

    inputs = tf_keras.Input((12, 10), name="sequence", batch_size=1)
    x = tf_keras.layers.LSTM(16, name="lstm")(inputs)
    return tf_keras.Model(inputs, tf_keras.layers.Dense(6, name="logits")(x), name="lstm_fused")


def conv1d_audio():
    """Conv1D on a dynamic batch: the converter wraps each in EXPAND_DIMS ... RESHAPE."""
    inputs = keras.Input((64, 10), name="mfcc")
    x = layers.Conv1D(16, 5, strides=2, padding="same", activation="relu", name="conv1")(inputs)
    x = layers.Conv1D(16, 3, padding="same", activation="relu", name="conv2")(x)
    x = layers.MaxPooling1D(2, name="pool1")(x)
    x = layers.Conv1D(24, 3, padding="same", activation="relu", name="conv3")(x)
    x = layers.GlobalAveragePooling1D(name="pool")(x)
    return _model(inputs, layers.Dense(8, activation="softmax", name="classifier")(x), "conv1d_audio")


def _dilated_same(batch, name):
    inputs = keras.Input((16, 16, 4), name="image", batch_size=batch)
    x = layers.Conv2D(8, 3, padding="same", activation="relu", name="conv")(inputs)
    x = layers.Conv2D(8, 3, padding="same", dilation_rate=2, activation="relu", name="dilated2")(x)
    x = layers.Conv2D(8, 3, padding="same", dilation_rate=4, activation="relu", name="dilated4")(x)
    return _model(inputs, layers.Conv2D(4, 1, name="head")(x), name)


def dilated_same():
    """Dilated SAME convolutions on a dynamic batch: SPACE_TO_BATCH_ND + CONV_2D +
    BATCH_TO_SPACE_ND. The converter stores SPACE_TO_BATCH_ND's output with batch 1, not the
    dilation's 4 (and 16), and TFLite Micro, which allocates the stored shape, writes past it:
    its outputs are wrong, so no case has TFLite Micro's outputs."""
    return _dilated_same(None, "dilated_same")


def dilated_same_static():
    """The same network on a fixed batch of 1: the converter writes dilated CONV_2Ds."""
    return _dilated_same(1, "dilated_same_static")


def dilated_depthwise():
    """A dilated depthwise convolution on a dynamic batch (SPACE_TO_BATCH_ND form, as above)."""
    inputs = keras.Input((12, 12, 8), name="image")
    x = layers.DepthwiseConv2D(3, padding="same", dilation_rate=2, activation="relu", name="dilated_dw")(inputs)
    return _model(inputs, layers.Conv2D(8, 1, name="pointwise")(x), "dilated_depthwise")


def tconv_decoder():
    inputs = keras.Input((4, 4, 16), name="code")
    x = layers.Conv2DTranspose(12, 3, strides=2, padding="same", activation="relu", name="up1")(inputs)
    x = layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu", name="up2")(x)
    return _model(inputs, layers.Conv2D(3, 3, padding="same", name="out")(x), "tconv_decoder")


def attention_layernorm():
    """One self-attention head with a residual and LayerNorm: BATCH_MATMUL, SOFTMAX, and the
    LayerNorm's MEAN, SQUARED_DIFFERENCE, RSQRT, MUL, SUB."""
    inputs = keras.Input((8, 16), name="tokens", batch_size=1)
    q = layers.Dense(16, name="query")(inputs)
    k = layers.Dense(16, name="key")(inputs)
    v = layers.Dense(16, name="value")(inputs)
    scores = layers.Lambda(lambda t: tf.matmul(t[0], t[1], transpose_b=True) * 0.25, name="scores")([q, k])
    weights = layers.Softmax(name="attention")(scores)
    context = layers.Lambda(lambda t: tf.matmul(t[0], t[1]), name="context")([weights, v])
    x = layers.Add(name="residual")([inputs, layers.Dense(16, name="project")(context)])
    x = layers.LayerNormalization(name="norm")(x)
    return _model(inputs, layers.Dense(4, name="logits")(layers.GlobalAveragePooling1D(name="pool")(x)),
                  "attention_layernorm")


def kws_int16x8():
    """A small DS-CNN for keyword spotting, quantised 16x8 (int16 activations, int8 weights)."""
    inputs = keras.Input((25, 10, 1), name="mfcc")
    x = _conv_bn(inputs, 16, (5, 3), 2, "stem", _relu)
    for n in range(2):
        x = _conv_bn(x, None, 3, 1, f"ds{n}_a", _relu, groups=True)
        x = _conv_bn(x, 16, 1, 1, f"ds{n}_b", _relu)
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    return _model(inputs, layers.Dense(6, activation="softmax", name="classifier")(x), "kws_int16x8")


def softmax_600():
    inputs = keras.Input((32,), name="embedding")
    return _model(inputs, layers.Dense(600, activation="softmax", name="classifier")(inputs), "softmax_600")


def gru_float_part():
    """An unrolled GRU whose dense head passes through a SIN, which has no int8 kernel: the
    converter keeps it float between DEQUANTIZE and QUANTIZE (with TFLITE_BUILTINS allowed)."""
    inputs = keras.Input((6, 8), name="sequence", batch_size=1)
    x = layers.GRU(8, unroll=True, name="gru")(inputs)
    x = layers.Lambda(tf.math.sin, name="sin")(layers.Dense(8, name="dense")(x))
    return _model(inputs, layers.Dense(4, name="logits")(x), "gru_float_part")


def float_internal():
    """A float operator (SIN, which has no int8 kernel) between two int8 convolutions:
    DEQUANTIZE, SIN in float, QUANTIZE inside an int8 graph."""
    inputs = keras.Input((8, 8, 4), name="image")
    x = layers.Conv2D(8, 3, padding="same", name="conv1")(inputs)
    x = layers.Lambda(tf.math.sin, name="sin")(x)
    return _model(inputs, layers.Conv2D(4, 1, name="conv2")(x), "float_internal")


# --- models of one or a few operators ----------------------------------------------------------

def _conv_in(shape=(8, 8, 8), filters=8, name="conv", batch=None):
    """An input and a convolution in front of the operator under test, so its input is a
    computed int8 tensor with a quantisation of its own."""
    inputs = keras.Input(shape, name="x", batch_size=batch)
    return inputs, layers.Conv2D(filters, 3, padding="same", name=name)(inputs)


def op_mul():
    inputs, x = _conv_in()
    y = layers.Conv2D(8, 1, name="gate_conv")(inputs)
    return _model(inputs, layers.Multiply(name="mul")([x, y]), "op_mul")


def op_mul_broadcast():
    inputs, x = _conv_in(batch=1)
    scale = layers.Dense(8, name="scale")(layers.GlobalAveragePooling2D(keepdims=True, name="pool")(x))
    return _model(inputs, layers.Multiply(name="mul")([x, scale]), "op_mul_broadcast")


def op_sub():
    inputs, x = _conv_in()
    y = layers.Conv2D(8, 1, name="other")(inputs)
    return _model(inputs, layers.Subtract(name="sub")([x, y]), "op_sub")


def op_logistic():
    inputs, x = _conv_in()
    return _model(inputs, layers.Activation("sigmoid", name="sigmoid")(x), "op_logistic")


def op_tanh():
    inputs, x = _conv_in()
    return _model(inputs, layers.Activation("tanh", name="tanh")(x), "op_tanh")


def op_hard_swish():
    inputs, x = _conv_in()
    return _model(inputs, _hard_swish(x, "act"), "op_hard_swish")


def op_leaky_relu():
    inputs, x = _conv_in()
    return _model(inputs, layers.LeakyReLU(negative_slope=0.2, name="leaky")(x), "op_leaky_relu")


def op_relu_relu6():
    """RELU and RELU6 the converter cannot fuse: on the model's input, and after a CONCATENATION."""
    inputs = keras.Input((8, 8, 4), name="x")
    r = layers.ReLU(name="relu")(inputs)
    a = layers.Conv2D(4, 1, name="conv_a")(r)
    b = layers.Conv2D(4, 3, padding="same", name="conv_b")(r)
    x = layers.ReLU(6.0, name="relu6")(layers.Concatenate(name="concat")([a, b]))
    return _model(inputs, layers.Conv2D(4, 1, name="head")(x), "op_relu_relu6")


def op_split():
    inputs, x = _conv_in(filters=12)
    a, b, c = layers.Lambda(lambda t: tf.split(t, 3, axis=-1), name="split")(x)
    return _model(inputs, layers.Add(name="add")([layers.Multiply(name="mul")([a, b]), c]), "op_split")


def op_split_v():
    inputs, x = _conv_in(filters=12)
    a, b = layers.Lambda(lambda t: tf.split(t, [4, 8], axis=-1), name="split_v")(x)
    return _model(inputs, [layers.Conv2D(4, 1, name="head_a")(a), layers.Conv2D(4, 1, name="head_b")(b)], "op_split_v")


def op_unpack():
    inputs = keras.Input((4, 16), name="x", batch_size=1)
    x = layers.Dense(16, name="dense")(inputs)
    parts = layers.Lambda(lambda t: tf.unstack(t, axis=1), name="unstack")(x)
    return _model(inputs, layers.Add(name="add")([parts[0], parts[3]]), "op_unpack")


def op_pack():
    inputs = keras.Input((16,), name="x")
    a = layers.Dense(8, name="a")(inputs)
    b = layers.Dense(8, name="b")(inputs)
    x = layers.Lambda(lambda t: tf.stack(t, axis=1), name="stack")([a, b])
    return _model(inputs, layers.Dense(4, name="head")(layers.Flatten(name="flatten")(x)), "op_pack")


def op_expand_dims():
    """EXPAND_DIMS in front of a Conv1D; the tf.squeeze after it the converter writes as a
    RESHAPE (it does so for every squeeze with static shapes)."""
    inputs = keras.Input((16,), name="x")
    x = layers.Dense(24, name="dense")(inputs)
    x = layers.Lambda(lambda t: tf.expand_dims(t, 1), name="expand")(x)
    x = layers.Conv1D(8, 1, name="conv")(x)
    return _model(inputs, layers.Lambda(lambda t: tf.squeeze(t, 1), name="squeeze")(x), "op_expand_dims")


def op_transpose():
    inputs, x = _conv_in(shape=(6, 8, 4), filters=5)
    return _model(inputs, layers.Permute((3, 1, 2), name="permute")(x), "op_transpose")


def op_tile():
    inputs = keras.Input((4, 6), name="x", batch_size=1)
    x = layers.Dense(6, name="dense")(inputs)
    return _model(inputs, layers.Lambda(lambda t: tf.tile(t, [1, 3, 2]), name="tile")(x), "op_tile")


def op_resize_bilinear():
    inputs, x = _conv_in(shape=(6, 6, 4), filters=4)
    return _model(inputs, layers.UpSampling2D(2, interpolation="bilinear", name="up")(x), "op_resize_bilinear")


def op_resize_nearest():
    inputs, x = _conv_in(shape=(6, 6, 4), filters=4)
    return _model(inputs, layers.Resizing(12, 12, interpolation="nearest", name="up")(x), "op_resize_nearest")


def mobilenet_v2_035_96():
    """Keras's own MobileNetV2 (keras.applications, alpha 0.35, 96x96 input) with a 32-class
    head: all 17 inverted residual blocks and the 1280-channel last convolution. Its code and
    constants (528 KB as exported; with 2 classes 489 KB) exceed the M55's 512 KiB ITCM
    (issue 28, "code that does not fit the ITCM")."""
    return keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35, weights=None, classes=32,
                                          classifier_activation="softmax", name="mobilenet_v2_035_96")


def op_gather():
    inputs = keras.Input((10, 8), name="x", batch_size=1)
    x = layers.Dense(8, name="dense")(inputs)
    picked = layers.Lambda(lambda t: tf.gather(t, [7, 0, 3, 3, 9], axis=1), name="gather")(x)
    return _model(inputs, picked, "op_gather")


def op_neg():
    inputs, x = _conv_in()
    return _model(inputs, layers.Lambda(tf.math.negative, name="neg")(x), "op_neg")


def op_squared_difference():
    inputs, x = _conv_in()
    y = layers.Conv2D(8, 1, name="other")(inputs)
    return _model(inputs, layers.Lambda(lambda t: tf.math.squared_difference(t[0], t[1]), name="sqdiff")([x, y]),
                  "op_squared_difference")


def op_rsqrt():
    """RSQRT of a positive tensor (relu + 0.5: TFLite Micro's RSQRT is undefined below zero)."""
    inputs, x = _conv_in()
    x = layers.Rescaling(1.0, offset=0.5, name="shift")(layers.ReLU(name="relu")(x))
    return _model(inputs, layers.Lambda(tf.math.rsqrt, name="rsqrt")(x), "op_rsqrt")


def op_mean_pad_maxpool():
    """Operators edgetune ran before the zoo, in one model: PAD, MAX_POOL_2D, MEAN."""
    inputs, x = _conv_in(shape=(10, 10, 4))
    x = layers.ZeroPadding2D(((1, 2), (0, 1)), name="pad")(x)
    x = layers.MaxPooling2D(2, name="maxpool")(x)
    return _model(inputs, layers.GlobalAveragePooling2D(name="mean")(x), "op_mean_pad_maxpool")


def op_batch_matmul():
    inputs = keras.Input((6, 8), name="x", batch_size=1)
    a = layers.Dense(8, name="a")(inputs)
    b = layers.Dense(5, name="b")(inputs)
    return _model(inputs, layers.Lambda(lambda t: tf.matmul(t[0], t[1], transpose_a=True), name="matmul")([a, b]),
                  "op_batch_matmul")


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo: its name (NAME.tflite), builder, what it is, how its calibration
    inputs are drawn ("unit": uniform [0, 1); "normal") and how it is quantised."""
    name: str
    build: Callable[[], keras.Model]
    architecture: str
    calibration: str = "normal"
    quantisation: str = INT8
    bias_scale: float = 0.1  # the spread of the biases (tiny: equal logits on a zero input)


ZOO = (
    ZooModel("mobilenet_v2", mobilenet_v2, "MobileNetV2, width 0.35, 32x32, 8 inverted residual blocks", "unit"),
    ZooModel("mobilenet_v3_small", mobilenet_v3_small, "MobileNetV3-small, width ~0.5, 48x48, hard-swish, SE", "unit"),
    ZooModel("squeeze_excite", squeeze_excite, "a convolution and a squeeze-excite block"),
    ZooModel("gru_unrolled", gru_unrolled, "GRU(16), unroll=True, 8 steps"),
    ZooModel("lstm_unrolled", lstm_unrolled, "LSTM(16), unroll=True, 8 steps"),
    ZooModel("conv1d_audio", conv1d_audio, "Conv1D audio classifier, dynamic batch"),
    ZooModel("dilated_same", dilated_same, "dilated SAME convolutions (rates 2 and 4), dynamic batch"),
    ZooModel("dilated_depthwise", dilated_depthwise, "a dilated SAME depthwise convolution"),
    ZooModel("tconv_decoder", tconv_decoder, "transpose-convolution decoder (2 upsamplings)"),
    ZooModel("attention_layernorm", attention_layernorm, "self-attention head, residual, LayerNorm"),
    ZooModel("kws_int16x8", kws_int16x8, "DS-CNN keyword spotting, 16x8 quantisation", quantisation=INT16X8),
    ZooModel("softmax_600", softmax_600, "dense layer and SOFTMAX over 600 classes", bias_scale=1e-4),
    ZooModel("gru_float_part", gru_float_part, "unrolled GRU with one float operator (SIN)", quantisation=WITH_FLOAT),
    ZooModel("float_internal", float_internal, "float SIN between int8 convolutions", quantisation=WITH_FLOAT),
    ZooModel("op_mul", op_mul, "MUL of two feature maps"),
    ZooModel("op_mul_broadcast", op_mul_broadcast, "MUL by a per-channel vector (broadcast)"),
    ZooModel("op_sub", op_sub, "SUB of two feature maps"),
    ZooModel("op_logistic", op_logistic, "LOGISTIC"),
    ZooModel("op_tanh", op_tanh, "TANH"),
    ZooModel("op_hard_swish", op_hard_swish, "HARD_SWISH"),
    ZooModel("op_leaky_relu", op_leaky_relu, "LEAKY_RELU (alpha 0.2)"),
    ZooModel("op_relu_relu6", op_relu_relu6, "standalone RELU and RELU6"),
    ZooModel("op_split", op_split, "SPLIT into 3"),
    ZooModel("op_split_v", op_split_v, "SPLIT_V into 4 and 8, two outputs"),
    ZooModel("op_unpack", op_unpack, "UNPACK"),
    ZooModel("op_pack", op_pack, "PACK"),
    ZooModel("op_expand_dims", op_expand_dims, "EXPAND_DIMS (a squeeze after it becomes RESHAPE)"),
    ZooModel("op_transpose", op_transpose, "TRANSPOSE (Permute)"),
    ZooModel("op_tile", op_tile, "TILE"),
    ZooModel("op_resize_bilinear", op_resize_bilinear, "RESIZE_BILINEAR (UpSampling2D)"),
    ZooModel("op_resize_nearest", op_resize_nearest, "RESIZE_NEAREST_NEIGHBOR (Resizing)"),
    ZooModel("op_gather", op_gather, "GATHER with constant indices"),
    ZooModel("op_neg", op_neg, "NEG"),
    ZooModel("op_squared_difference", op_squared_difference, "SQUARED_DIFFERENCE"),
    ZooModel("op_rsqrt", op_rsqrt, "RSQRT of a positive tensor"),
    ZooModel("op_mean_pad_maxpool", op_mean_pad_maxpool, "PAD, MAX_POOL_2D, MEAN"),
    ZooModel("op_batch_matmul", op_batch_matmul, "BATCH_MATMUL of two computed tensors"),
    # Added later: at the end, so that the models before keep their seeds (and bytes).
    ZooModel("dilated_same_static", dilated_same_static, "dilated SAME convolutions on a fixed batch: dilated CONV_2D"),
    ZooModel("lstm_fused", lstm_fused, "tf-keras LSTM(16), 12 steps of 10: one UNIDIRECTIONAL_SEQUENCE_LSTM"),
)

# Models too large for the zoo's folder (each over 160 KB): tests/data/models/large/, made with
# --large. Their seeds follow the zoo's indexes (len(ZOO) + n), so adding one changes no other.
LARGE = (
    ZooModel("mobilenet_v2_035_96", mobilenet_v2_035_96, "Keras MobileNetV2, alpha 0.35, 96x96, 32 classes", "unit"),
)
LARGE_OUT = DEFAULT_OUT.parent / "large"


# --- seeded weights ----------------------------------------------------------------------------

def _draw(layer, variable, rng: np.random.Generator, bias_scale: float) -> np.ndarray:
    """A seeded value for one variable: He-normal kernels (recurrent ones too), batch-norm
    statistics away from (0, 1) so that folding them is visible, small biases."""
    shape = tuple(variable.shape)
    name = variable.name.split("/")[-1].split(":")[0]  # tf-keras names "lstm/lstm_cell/bias:0"
    if "kernel" in name and len(shape) >= 2:
        return rng.normal(0.0, np.sqrt(2.0 / max(fan_in(layer, shape), 1)), shape)
    if name == "gamma":
        return rng.uniform(0.5, 1.5, shape)
    if name == "moving_mean":
        return rng.normal(0.0, 0.2, shape)
    if name == "moving_variance":
        return rng.uniform(0.5, 2.0, shape)
    return rng.normal(0.0, bias_scale if name == "bias" else 0.1, shape)  # biases, beta


def set_seeded_weights(model: keras.Model, rng: np.random.Generator, bias_scale: float) -> None:
    for layer in model.layers:
        if layer.weights:
            layer.set_weights([_draw(layer, v, rng, bias_scale).astype(np.float32) for v in layer.weights])


# --- conversion --------------------------------------------------------------------------------

def calibration_inputs(model: keras.Model, kind: str, rng: np.random.Generator) -> np.ndarray:
    shape = (CALIBRATION_SAMPLES, 1) + tuple(model.input_shape[1:])
    data = rng.uniform(0.0, 1.0, shape) if kind == "unit" else rng.normal(0.0, 1.0, shape)
    return data.astype(np.float32)


def convert(model: keras.Model, samples: np.ndarray, quantisation: str) -> bytes:
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([sample] for sample in samples)
    if quantisation == INT16X8:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
        io_type = tf.int16
    elif quantisation == WITH_FLOAT:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8, tf.lite.OpsSet.TFLITE_BUILTINS]
        io_type = tf.int8
    else:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        io_type = tf.int8
    converter.inference_input_type = io_type
    converter.inference_output_type = io_type
    with contextlib.redirect_stdout(io.StringIO()):  # Keras prints the whole exported signature
        return converter.convert()


def build(spec: ZooModel, index: int, seed: int) -> bytes:
    keras.backend.clear_session()
    rng = np.random.default_rng([seed, index])  # one per model: its bytes do not depend on the others
    model = spec.build()
    set_seeded_weights(model, rng, spec.bias_scale)
    return convert(model, calibration_inputs(model, spec.calibration, rng), spec.quantisation)


# --- TFLite Micro's outputs, one child process per case ----------------------------------------

_CHILD = """
import sys, numpy as np
from tflite_micro import runtime
data = np.load(sys.argv[1])
interpreter = runtime.Interpreter.from_file(sys.argv[2], arena_size=int(sys.argv[3]))
for k in sorted(k for k in data.files if k.startswith("input")):
    interpreter.set_input(data[k], int(k[len("input"):]))
interpreter.invoke()
np.savez(sys.argv[4], **{f"output{i}": np.array(interpreter.get_output(i)) for i in range(int(sys.argv[5]))})
"""


def _zero_point(tensor) -> int:
    q = tensor.quantization
    return int(q.zeroPoint[0]) if q is not None and q.zeroPoint is not None and len(q.zeroPoint) else 0


def _io_details(data: bytes):
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    model = schema.ModelT.InitFromPackedBuf(data, 0)
    graph = model.subgraphs[0]
    types = {v: k.lower() for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    def details(indices):
        return [(tuple(int(d) for d in graph.tensors[i].shape), np.dtype(types[graph.tensors[i].type]),
                 _zero_point(graph.tensors[i])) for i in indices]
    return details(graph.inputs), details(graph.outputs)


def draw_cases(inputs, rng: np.random.Generator) -> list[list[np.ndarray]]:
    cases = []
    for _ in range(RANDOM_CASES):
        cases.append([rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1, size=s, dtype=t) for s, t, _ in inputs])
    cases.append([rng.choice(np.array([np.iinfo(t).min, np.iinfo(t).max], dtype=t), size=s) for s, t, _ in inputs])
    cases.append([np.full(s, z, dtype=t) for s, t, z in inputs])
    return cases


def tflm_outputs(path: Path, xs: list[np.ndarray], n_outputs: int) -> tuple[list[np.ndarray] | None, str]:
    """TFLite Micro's outputs for one case, or None and why not: its interpreter died
    (SIGABRT) or refused the model."""
    with tempfile.TemporaryDirectory() as tmp:
        given, got = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(given, **{f"input{k}": x for k, x in enumerate(xs)})
        arena = path.stat().st_size + (1 << 20)
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(given), str(path), str(arena), str(got),
                               str(n_outputs)], capture_output=True, text=True)
        if proc.returncode < 0:
            return None, f"aborted ({signal.Signals(-proc.returncode).name})"
        if proc.returncode != 0:
            last = proc.stderr.strip().splitlines()
            return None, f"refused: {last[0] if last else proc.returncode}"
        with np.load(got) as saved:
            return [saved[f"output{k}"] for k in range(n_outputs)], ""


def stored_too_small(data: bytes) -> str:
    """The first tensor whose shape TensorFlow Lite's interpreter (which resizes tensors as it
    runs) computes otherwise than the model stores it, or "": TFLite Micro allocates the stored
    shapes and writes past such a tensor (SPACE_TO_BATCH_ND on a dynamic batch)."""
    interpreter = tf.lite.Interpreter(model_content=data)
    interpreter.allocate_tensors()
    interpreter.invoke()
    stored = _tensors(data)
    for detail in interpreter.get_tensor_details():
        index = detail["index"]
        if index < len(stored) and tuple(int(d) for d in detail["shape"]) != stored[index]:
            return (f"wrong: TFLite Micro allocates tensor {index} as stored, {list(stored[index])}, where the "
                    f"operator computes {[int(d) for d in detail['shape']]}")
    return ""


def _tensors(data: bytes) -> list[tuple[int, ...]]:
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    graph = schema.ModelT.InitFromPackedBuf(data, 0).subgraphs[0]
    return [tuple(int(d) for d in (t.shape if t.shape is not None else ())) for t in graph.tensors]


def save_reference(path: Path, data: bytes, rng: np.random.Generator) -> None:
    """NAME.npz beside NAME.tflite."""
    inputs, outputs = _io_details(data)
    cases = draw_cases(inputs, rng)
    arrays = {f"input{k}": np.stack([c[k] for c in cases]) for k in range(len(inputs))}
    wrong = stored_too_small(data)
    found = [(None, wrong) if wrong else tflm_outputs(path, c, len(outputs)) for c in cases]
    results = [r for r, _ in found]
    for k, (shape, dtype, _) in enumerate(outputs):
        arrays[f"output{k}"] = np.stack([r[k].reshape(shape).astype(dtype) if r is not None else np.zeros(shape, dtype)
                                         for r in results])
    arrays["tflm_ok"] = np.array([r is not None for r in results])
    arrays["tflm_failure"] = np.array([why for _, why in found])  # "" where it ran
    with open(path.with_suffix(".npz"), "wb") as f:  # np.savez into a file object: no timestamps in the zip
        np.savez(f, **arrays)


# --- the README ---------------------------------------------------------------------------------

def operator_counts(data: bytes) -> dict[str, int]:
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    model = schema.ModelT.InitFromPackedBuf(data, 0)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    counts: dict[str, int] = {}
    for op in model.subgraphs[0].operators:
        code = model.operatorCodes[op.opcodeIndex]
        name = names[max(code.builtinCode, code.deprecatedBuiltinCode)]
        counts[name] = counts.get(name, 0) + 1
    return counts


README_HEAD = """# The model zoo (small models, seeded random weights)

Small Keras models converted by TensorFlow's converter as users convert theirs, covering the
operators and architectures of issue 28. Made by `scripts/make_model_zoo.py` (its docstring
says how to run it and with which TensorFlow); do not edit by hand. Beside each `NAME.tflite`,
`NAME.npz` holds seeded inputs (`input0`, ... stacked over the cases: three random, one of the
type's extremes, one at the input's zero point) and TFLite Micro's outputs for them (`output0`,
...); `tflm_ok` is false for a case TFLite Micro has no output for, and `tflm_failure` says why
(its interpreter aborted, refused the model, or the model stores a tensor's shape smaller
than it is computed, and TFLite Micro writes past it). docs/model-zoo.md says which models edgetune runs.

| file | architecture | quantisation | operators (count) | bytes | SHA-256 | TFLM cases |
|---|---|---|---|---|---|---|
"""


def readme_row(spec: ZooModel, folder: Path) -> str:
    data = (folder / f"{spec.name}.tflite").read_bytes()
    with np.load(folder / f"{spec.name}.npz") as saved:
        finished = f"{int(saved['tflm_ok'].sum())} of {len(saved['tflm_ok'])}"
        why = sorted({str(w) for w in saved["tflm_failure"] if str(w)})
    if why:
        finished += f" ({'; '.join(w.split(':')[0] if w.startswith('refused') else w for w in why)})"
    ops_text = ", ".join(f"{k} {v}" for k, v in operator_counts(data).items())
    return (f"| `{spec.name}.tflite` | {spec.architecture} | {spec.quantisation} | {ops_text} | {len(data):,} | "
            f"`{hashlib.sha256(data).hexdigest()}` | {finished} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder to write to")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--only", nargs="*", default=None, help="build only these models")
    parser.add_argument("--large", action="store_true", help=f"build the large models (default folder {LARGE_OUT})")
    args = parser.parse_args(argv)
    models, first = (LARGE, len(ZOO)) if args.large else (ZOO, 0)
    if args.large and args.out == DEFAULT_OUT:
        args.out = LARGE_OUT
    args.out.mkdir(parents=True, exist_ok=True)
    tf.config.experimental.enable_op_determinism()
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}, numpy {np.__version__}, seed {args.seed}")
    for index, spec in enumerate(models, start=first):
        if args.only is not None and spec.name not in args.only:
            continue
        data = build(spec, index, args.seed)
        path = args.out / f"{spec.name}.tflite"
        path.write_bytes(data)
        save_reference(path, data, np.random.default_rng([args.seed, index, 1]))
        print(readme_row(spec, args.out), flush=True)
    # The README lists every model in the folder (with --only, those made before too).
    rows = [readme_row(spec, args.out) for spec in models if (args.out / f"{spec.name}.npz").exists()]
    head = README_HEAD.replace("# The model zoo (small models,", "# The zoo's large models (over 160 KB each,", 1) \
        if args.large else README_HEAD
    (args.out / "README.md").write_text(head + "\n".join(rows) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
