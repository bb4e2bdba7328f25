"""The 16x8 layers (int16 activations, int8 weights): CONV_2D, DEPTHWISE_CONV_2D and
FULLY_CONNECTED as edgetune reads them (app/model/layers16.py) and runs them
(conv2d_s16, dwconv2d_s16), bit for bit with TFLite Micro: the numpy reference over drawn
layers (int64, int32 and absent biases, per-channel and per-tensor scales, every fused
activation, odd sizes, strides, VALID padding, the int16 extremes), the kernels' plain C on
the host and their Helium paths on the M55 against TFLite Micro's outputs, and the
refusals of what TFLite Micro itself cannot run."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.evaluate import Evaluator
from edgetune.model import ModelError
from edgetune.model.oracle import oracle_output
from edgetune.targets import get_target
from edgetune.tuner import Outcome

from int16_models import draw_int16, layer16_model, read_layer
from kernel_checks import layer_reference
from kernel_runs import complete

ACTS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")
CASES = [
    ("CONV_2D", dict(bias="int64")), ("CONV_2D", dict(bias="int32")), ("CONV_2D", dict(bias="none")),
    ("CONV_2D", dict(bias="int64", per_channel=False, stride=2, padding="VALID", h=7, w=6, cin=5, cout=3)),
    ("CONV_2D", dict(bias="int32", k=1, cin=17, cout=9)),
    ("DEPTHWISE_CONV_2D", dict(bias="int64")), ("DEPTHWISE_CONV_2D", dict(bias="int64", mult=2, cin=3, stride=2)),
    ("DEPTHWISE_CONV_2D", dict(bias="int64", per_channel=False, padding="VALID", cin=7, h=6, w=5)),
    ("FULLY_CONNECTED", dict(bias="int64", cin=13, cout=7)), ("FULLY_CONNECTED", dict(bias="int32", rows=3)),
    ("FULLY_CONNECTED", dict(bias="none", per_channel=False, cin=9, cout=2)),
]


@pytest.mark.parametrize("op,options", CASES)
def test_the_reference_is_tflite_micro(tmp_path, op, options):
    rng = np.random.default_rng(abs(hash((op, tuple(options.items())))) % 2**32)
    for n, activation in enumerate(ACTS):
        data, index = layer16_model(rng, op, activation=activation, **options)
        layer = read_layer(data, tmp_path, index)
        assert layer.dtype == "int16" and layer.kernel in ("conv2d_s16", "dwconv2d_s16")
        for edge in ("random", "extreme"):
            x = draw_int16(rng, layer.input_shape, edge)
            want = oracle_output(layer, x)
            got = layer_reference(layer, layer.io(x))
            assert np.array_equal(got, want), f"{op} {options} {activation} {edge}: {int((got != want).sum())} differ"
            if n == 0 and edge == "random":
                assert len(np.unique(want)) > 1  # a layer that only saturates would check little


def _variant_against_tflm(tmp_path, target, layer, values: dict, seed: int, edge: str):
    from edgetune.codegen import get_kernel

    kernel = get_kernel(layer.kernel)
    shape = kernel.parse_shape(layer.shape_dict)
    space = kernel.space(target, shape)
    x = draw_int16(np.random.default_rng(seed), layer.input_shape, edge)
    evaluator = Evaluator(kernel, target, shape, space, layer.io(x), tmp_path)
    evaluator.expected = [oracle_output(layer, x)]  # TFLite Micro is the spec
    return evaluator(complete(space, values))


@pytest.mark.parametrize("op,options,values", [
    ("CONV_2D", dict(bias="int64", cin=5, cout=7), dict(vector="c", tile_oc=3, unroll=4)),
    ("CONV_2D", dict(bias="int32", cin=3, cout=4, stride=2), dict(vector="c", tile_oc=4, unroll=2)),
    ("FULLY_CONNECTED", dict(bias="int64", cin=11, cout=5, rows=2), dict(vector="c", tile_oc=2, unroll=1)),
    ("DEPTHWISE_CONV_2D", dict(bias="int64", cin=6, mult=2), dict(vector="c", tile_c=8)),
])
def test_plain_c_variants_on_the_host_write_tflite_micros_output(tmp_path, op, options, values):
    rng = np.random.default_rng(7)
    layer = read_layer(layer16_model(rng, op, activation="RELU", **options)[0], tmp_path)
    for seed, edge in ((1, "random"), (2, "extreme")):
        trial = _variant_against_tflm(tmp_path, get_target("host"), layer, values, seed, edge)
        assert trial.outcome is Outcome.OK, f"{values} {edge}: {trial.outcome.value}: {trial.error}"


@pytest.mark.parametrize("op,options,values", [
    ("CONV_2D", dict(bias="int64", cin=19, cout=5, stride=2), dict(vector="mve", tile_oc=4)),
    ("CONV_2D", dict(bias="int32", cin=8, cout=3), dict(vector="mve", tile_oc=2)),
    ("FULLY_CONNECTED", dict(bias="int64", cin=21, cout=6), dict(vector="mve", tile_oc=3)),
    ("DEPTHWISE_CONV_2D", dict(bias="int64", cin=11, h=6, w=5, stride=2), dict(vector="mve", tile_c=8)),
    ("DEPTHWISE_CONV_2D", dict(bias="int64", cin=3, mult=3), dict(vector="mve", tile_c=4)),
])
def test_m55_variants_write_tflite_micros_output(tmp_path, op, options, values):
    rng = np.random.default_rng(11)
    layer = read_layer(layer16_model(rng, op, activation="NONE", **options)[0], tmp_path)
    for seed, edge in ((3, "random"), (4, "extreme")):
        trial = _variant_against_tflm(tmp_path, get_target("cortex-m55"), layer, values, seed, edge)
        assert trial.outcome is Outcome.OK, f"{values} {edge}: {trial.outcome.value}: {trial.error}"


def test_the_helium_paths_are_offered_where_they_apply():
    from edgetune.codegen import get_kernel

    m55, m4 = get_target("cortex-m55"), get_target("cortex-m4")
    conv, dw = get_kernel("conv2d_s16"), get_kernel("dwconv2d_s16")
    shape = conv.parse_shape("h=4,w=4,cin=8,cout=8,kh=3,kw=3,pad=same")
    assert "mve" in conv.space(m55, shape).param("vector").values
    assert conv.space(m4, shape).param("vector").values == ("c",)
    wide = dw.parse_shape("h=30,w=30,c=4,mult=1,kh=23,kw=23,pad=same")  # 529 taps overflow an int32 lane
    space = dw.space(m55, wide)
    assert not any(space.config_at(int(i))["vector"] == "mve" for i in space.legal_indices())


@pytest.mark.parametrize("options,words", [
    (dict(bias="int32"), "a 16x8 depthwise convolution needs an int64 bias"),
    (dict(bias="none"), "a 16x8 depthwise convolution needs an int64 bias"),
])
def test_a_depthwise_layer_tflite_micro_misreads_is_refused(tmp_path, options, words):
    data, _ = layer16_model(np.random.default_rng(0), "DEPTHWISE_CONV_2D", **options)
    with pytest.raises(ModelError, match=f"operator 0 \\(DEPTHWISE_CONV_2D\\): {words}"):
        read_layer(data, tmp_path)


def test_an_asymmetric_int16_activation_is_refused_naming_the_tensor(tmp_path):
    from dataclasses import replace

    from edgetune.model.builder import build_model
    from edgetune.model.graph import Quantization, read_graph

    data, _ = layer16_model(np.random.default_rng(0), "CONV_2D")
    path = tmp_path / "asym.tflite"
    path.write_bytes(data)
    graph = read_graph(path)
    tensors = list(graph.tensors)
    tensors[0] = replace(tensors[0], quantization=Quantization(tensors[0].quantization.scales, (5,)))
    path.write_bytes(build_model(tensors, graph.operators, graph.inputs, graph.outputs))
    with pytest.raises(ModelError, match=r"input tensor 0 \(input\) is int16 with zero point 5"):
        read_layer(path.read_bytes(), tmp_path)
