"""bench/requant.py without running a tune: the layers it measures, and the inputs it gives
them (each MLPerf Tiny layer's own constants and quantisation; TFLite-like quantisation for
the issue's shape)."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from edgetune.codegen import get_kernel

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_requant", ROOT / "bench" / "requant.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_layers_are_every_depthwise_and_the_small_k_convolutions(bench):
    layers = bench.model_layers()
    labels = [label for label, _, _ in layers]
    assert len(set(labels)) == len(labels)
    depthwise = [layer for _, kernel, layer in layers if kernel == "dwconv2d_s8"]
    assert len(depthwise) == 10  # DS-CNN's one distinct shape, MobileNetV1-0.25's nine
    for _, kernel, layer in layers:
        s = layer.shape_dict
        if kernel == "conv2d_s8":
            assert s["cin"] * s["kh"] * s["kw"] <= bench.SMALL_K and s["h"] * s["w"] > 1
    assert any(kernel == "conv2d_s8" and layer.shape_dict["cin"] == 8 and layer.shape_dict["kh"] == 1
               for _, kernel, layer in layers)  # MobileNet's 48x48x8 -> 16 1x1, the worst


def test_layer_inputs_are_the_layers_own_quantisation(bench):
    for _, name, layer in bench.model_layers():
        kernel = get_kernel(name)
        io = bench.layer_inputs(kernel, layer).make_io(layer.shape_dict, np.random.default_rng(0))
        given = {b.name: b.data for b in io.buffers}
        for constant in layer.constants:
            assert np.array_equal(given[constant.name], constant.data)
        assert dict(io.params) == dict(layer.params)
        assert given["shift"].max() < 0  # TFLite's converter wrote right shifts only


def test_tflite_quantisation_has_right_shifts_and_the_whole_int8_range(bench, dw):
    shape = dw.parse_shape(bench.ISSUE_SHAPE)
    io = bench.tflite_quant(dw).make_io(shape, np.random.default_rng(3))
    shift = next(b.data for b in io.buffers if b.name == "shift")
    assert shift.min() >= -10 and shift.max() <= -5
    params = dict(io.params)
    assert (params["act_min"], params["act_max"]) == (-128, 127)
