"""edgetune's numpy reference on a model layer (kernel.reference on ModelLayer.io) against
TFLite Micro's reference kernels (tflite_micro.runtime.Interpreter) on the same layer, bit
for bit, on random and saturating inputs: CONV_2D, DEPTHWISE_CONV_2D (multipliers 1, 2, 3),
FULLY_CONNECTED (per-tensor, per-channel, without bias, batch rows, keep_num_dims), every
fused activation, SAME and VALID, strides and dilations per axis, and the corners of
TFLite's multiplier quantisation. The models are built here (tests/model_files.py)."""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

from edgetune.model import load_model
from edgetune.model.arithmetic import activation_range, output_size, quantize_multiplier
from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor
from edgetune.model.oracle import layer_model, oracle_output, run_tflm
from edgetune.codegen.quant import requantize
from kernel_checks import layer_reference
from model_files import (ACTIVATIONS, Quant, conv_model, draw_quant, dwconv_model, f32, fc_model, int8_input, write)

EDGES = ("random", "extreme")


def seed_of(*parts) -> int:
    """A seed fixed by a test case's parameters (Python's hash() of strings varies per run)."""
    return zlib.crc32(repr(parts).encode())


def assert_exact(tmp_path, data: bytes, rng, edge: str, runs: int = 2):
    """The model's one layer: edgetune's reference equals TFLite Micro on `runs` inputs, and
    the oracle's one-operator copy of the layer gives what the whole file gives."""
    layer = load_model(write(tmp_path, "layer.tflite", data)).layers[0]
    for _ in range(runs):
        x = int8_input(rng, layer.input_shape, edge)
        want = oracle_output(layer, x)
        got = layer_reference(layer, layer.io(x))
        assert got.shape == want.shape
        bad = got != want
        assert not bad.any(), f"{layer.shape_text}: {int(bad.sum())} of {want.size} outputs differ from TFLite Micro"
        assert np.array_equal(run_tflm(data, [x])[0].reshape(want.shape), want)
    return layer


CONV_GEOMETRIES = [  # h, w, cin, cout, kh, kw, stride (h, w), dilation (h, w), padding
    (9, 10, 3, 5, 3, 3, (2, 2), (1, 1), "SAME"),
    (12, 11, 2, 3, 3, 2, (2, 1), (1, 2), "SAME"),
    (12, 11, 2, 3, 3, 2, (1, 3), (2, 1), "VALID"),
    (8, 7, 4, 6, 1, 1, (1, 1), (1, 1), "VALID"),
    (10, 9, 3, 4, 5, 3, (3, 2), (1, 1), "SAME"),
    (7, 7, 5, 2, 2, 2, (1, 1), (3, 2), "VALID"),
]


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("geometry", CONV_GEOMETRIES, ids=lambda g: "x".join(map(str, g[:6])) + f"-s{g[6]}-d{g[7]}-{g[8]}")
def test_conv2d_matches_tflite_micro(tmp_path, geometry, activation, edge):
    *dims, stride, dilation, padding = geometry
    rng = np.random.default_rng(seed_of(geometry, activation, edge))
    assert_exact(tmp_path, conv_model(rng, *dims, stride=stride, dilation=dilation, padding=padding,
                                      activation=activation, edge=edge), rng, edge)


@pytest.mark.parametrize("edge", EDGES)
def test_mobilenet_stride2_same_pads_only_bottom_and_right(tmp_path, edge):
    """MobileNetV1's first layer: 96x96x3, 3x3, stride 2, SAME pads 0 top/left, 1 bottom/right."""
    rng = np.random.default_rng(96)
    layer = assert_exact(tmp_path, conv_model(rng, 96, 96, 3, 8, 3, 3, stride=(2, 2), activation="RELU6", edge=edge),
                         rng, edge, runs=1)
    s = layer.shape_dict
    assert (s["pad_top"], s["pad_bottom"], s["pad_left"], s["pad_right"]) == (0, 1, 0, 1)


@pytest.mark.parametrize("edge", EDGES)
def test_ds_cnn_10x4_stride2_same_pads_4_5_and_1_1(tmp_path, edge):
    """DS-CNN's first layer: 49x10x1, a 10x4 filter, stride 2, SAME: pads 4/5 rows, 1/1 columns."""
    rng = np.random.default_rng(49)
    layer = assert_exact(tmp_path, conv_model(rng, 49, 10, 1, 8, 10, 4, stride=(2, 2), activation="RELU", edge=edge),
                         rng, edge, runs=1)
    s = layer.shape_dict
    assert (s["pad_top"], s["pad_bottom"], s["pad_left"], s["pad_right"]) == (4, 5, 1, 1)
    assert layer.kernel_output == (25, 5, 8)


DW_GEOMETRIES = [  # h, w, c, mult, kh, kw, stride, dilation, padding
    (10, 9, 4, 1, 3, 3, (2, 2), (1, 1), "SAME"),
    (10, 9, 3, 2, 3, 3, (1, 2), (2, 1), "SAME"),
    (11, 8, 2, 3, 3, 2, (2, 1), (1, 1), "VALID"),
    (6, 6, 5, 2, 1, 1, (1, 1), (1, 1), "VALID"),
]


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("geometry", DW_GEOMETRIES, ids=lambda g: "x".join(map(str, g[:6])) + f"-s{g[6]}-d{g[7]}-{g[8]}")
def test_depthwise_matches_tflite_micro(tmp_path, geometry, activation, edge):
    *dims, stride, dilation, padding = geometry
    rng = np.random.default_rng(seed_of(geometry, activation, edge))
    layer = assert_exact(tmp_path, dwconv_model(rng, *dims, stride=stride, dilation=dilation, padding=padding,
                                                activation=activation, edge=edge), rng, edge)
    assert layer.kernel == "dwconv2d_s8" and layer.shape_dict["mult"] == dims[3]


FC_CASES = [  # input shape, n, per_channel, with_bias, keep_num_dims
    ((1, 64), 10, False, True, False),
    ((1, 64), 10, True, True, False),
    ((3, 32), 7, True, False, False),
    ((4, 20), 6, False, False, False),
    ((2, 3, 16), 5, True, True, True),
    ((2, 3, 16), 5, False, True, False),
]


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("case", FC_CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}-n{c[1]}-"
                         f"{'channel' if c[2] else 'tensor'}-{'bias' if c[3] else 'nobias'}{'-keep' if c[4] else ''}")
def test_fully_connected_matches_tflite_micro(tmp_path, case, activation, edge):
    input_shape, n, per_channel, with_bias, keep = case
    rng = np.random.default_rng(seed_of(case, activation, edge))
    layer = assert_exact(tmp_path, fc_model(rng, input_shape, n, per_channel=per_channel, with_bias=with_bias,
                                            keep_num_dims=keep, activation=activation, edge=edge), rng, edge)
    rows = int(np.prod(input_shape[:-1]))
    assert layer.kernel == "conv2d_s8" and layer.kernel_output == (1, rows, n)
    assert layer.macs == rows * n * input_shape[-1]


def _one_by_one_fc(ins: float, ws: float, outs: float, bias: int) -> bytes:
    """FULLY_CONNECTED 1 -> 1, weight 1, input 0: the accumulator is `bias` exactly."""
    tensors = [Tensor(0, "x", (1, 1), "int8", Quantization((ins,), (0,))),
               constant(1, "w", np.ones((1, 1), dtype=np.int8), Quantization((ws,), (0,))),
               constant(2, "b", np.array([bias], dtype=np.int32), Quantization((f32(ins * ws),), (0,))),
               Tensor(3, "y", (1, 1), "int8", Quantization((outs,), (0,)))]
    return build_model(tensors, [Operator(0, "FULLY_CONNECTED", (0, 1, 2), (3,), "FullyConnectedOptions", ())], [0], [3])


def test_per_tensor_multiplier_is_derived_in_double_precision(tmp_path):
    """Scales whose product rounded to float gives a different multiplier than the double
    product, and an accumulator where that changes the output: TFLite Micro uses the double
    product (so does edgetune)."""
    rng = np.random.default_rng(7)
    for _ in range(200_000):
        ins, ws, outs = f32(rng.uniform(0.01, 0.1)), f32(rng.uniform(0.001, 0.02)), f32(rng.uniform(0.01, 1))
        rounded = quantize_multiplier(f32(np.float32(ins) * np.float32(ws)) / outs)
        exact = quantize_multiplier(ins * ws / outs)
        if rounded == exact:
            continue
        accs = np.arange(-200_000, 200_000)
        differ = accs[requantize(accs, *rounded, 0) != requantize(accs, *exact, 0)]
        if differ.size:
            break
    else:
        pytest.fail("no scales found where the float and the double product differ")
    acc = int(differ[0])
    layer = load_model(write(tmp_path, "fc.tflite", _one_by_one_fc(ins, ws, outs, acc))).layers[0]
    x = np.zeros((1, 1), dtype=np.int8)
    tflm = int(oracle_output(layer, x).ravel()[0])
    assert tflm == int(requantize(np.array([acc]), *exact, 0)[0]) != int(requantize(np.array([acc]), *rounded, 0)[0])
    assert int(layer_reference(layer, layer.io(x)).ravel()[0]) == tflm


def test_a_multiplier_rounding_up_to_2_pow_31_is_halved(tmp_path):
    """in * w / out = (1 - 2^-46) * 2^-7: the fraction rounds to 2^31, so q = 2^30 and the
    shift grows by one (-6), and TFLite Micro agrees."""
    ins, ws, outs = (1 + 2.0**-23) * 2.0**-5, (1 - 2.0**-23) * 2.0**-6, 2.0**-4
    assert quantize_multiplier(ins * ws / outs) == (1 << 30, -6)
    rng = np.random.default_rng(31)
    quant = Quant(ins, 3, (ws,) * 4, outs, -5, rng.integers(-3000, 3000, size=4, dtype=np.int32))
    layer = assert_exact(tmp_path, conv_model(rng, 5, 5, 2, 4, 3, 3, quant=quant), rng, "random")
    assert [int(v) for v in layer.constants[2].data] == [1 << 30] * 4
    assert [int(v) for v in layer.constants[3].data] == [-6] * 4


def test_a_multiplier_below_2_pow_minus_32_is_zero(tmp_path):
    """in * w / out = 2^-40: TFLite's multiplier is 0 (shift 0), every output the zero point."""
    rng = np.random.default_rng(40)
    quant = Quant(2.0**-20, 0, (2.0**-20,) * 3, 1.0, 9, np.zeros(3, dtype=np.int32))
    layer = assert_exact(tmp_path, fc_model(rng, (1, 8), 3, per_channel=True, quant=quant), rng, "extreme")
    assert [int(v) for v in layer.constants[2].data] == [0, 0, 0]
    assert np.all(oracle_output(layer, int8_input(rng, (1, 8))) == 9)


def test_quantize_multiplier_corners():
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.75) == (3 << 29, 0)
    assert quantize_multiplier(0.3) == (1288490189, -1)  # 0.6 * 2^31 = 1288490188.8 rounds up
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(2.0**-31) == (1 << 30, -30)
    assert quantize_multiplier(2.0**-33) == (0, 0)  # shift -32 < -31


def test_activation_bounds_round_half_away_from_zero():
    # 6 / 0.8 = 7.5 -> 8 (away from zero, not to even), within int8
    assert activation_range("RELU6", 0.8, -3) == (-3, 5)
    assert activation_range("RELU_N1_TO_1", f32(0.4), 0) == (-3, 3)  # +-2.5 -> +-3
    assert activation_range("RELU", 0.1, 120) == (120, 127)
    assert activation_range("RELU6", 0.001, 0) == (0, 127)  # clamped to int8
    assert activation_range("NONE", 0.5, 4) == (-128, 127)


def test_same_and_valid_output_sizes():
    assert output_size(96, 3, 2, 1, "SAME") == (48, 0, 1)
    assert output_size(49, 10, 2, 1, "SAME") == (25, 4, 5)
    assert output_size(10, 4, 2, 1, "SAME") == (5, 1, 1)
    assert output_size(7, 3, 1, 2, "SAME") == (7, 2, 2)
    assert output_size(7, 3, 1, 2, "VALID") == (3, 0, 0)
    assert output_size(12, 3, 3, 1, "VALID") == (4, 0, 0)


def test_the_oracle_model_is_the_layer_alone(tmp_path):
    """The oracle's model holds the layer's own tensors, options and constants, and the
    draw of quantisation spreads outputs (not all saturated) in the random case."""
    rng = np.random.default_rng(5)
    data = conv_model(rng, 8, 8, 3, 4, 3, 3, stride=(2, 1), activation="RELU")
    layer = load_model(write(tmp_path, "c.tflite", data)).layers[0]
    copy = load_model(write(tmp_path, "copy.tflite", layer_model(layer))).layers[0]
    assert copy.shape == layer.shape and copy.params == layer.params
    for a, b in zip(copy.constants, layer.constants):
        assert np.array_equal(a.data, b.data)
    out = oracle_output(layer, int8_input(rng, layer.input_shape))
    assert np.unique(out).size > 10
    assert draw_quant(rng, 4, 27).out_scale > 0


MODELS = Path(__file__).parent / "data" / "models"  # the MLPerf Tiny models (scripts of branch mlperf)
MLPERF = ("ds_cnn_kws", "mobilenet_v1_025_vww", "resnet8_cifar10", "fc_autoencoder_ad")


@pytest.mark.skipif(not MODELS.is_dir(), reason="tests/data/models/ (the MLPerf Tiny models) is not in this checkout")
@pytest.mark.parametrize("name", MLPERF)
def test_every_tuned_layer_of_the_mlperf_tiny_models_matches_tflite_micro(name):
    model = load_model(MODELS / f"{name}.tflite")
    assert model.tuned
    rng = np.random.default_rng(len(name))
    for layer in model.tuned:
        for edge in EDGES:
            x = int8_input(rng, layer.input_shape, edge)
            want = oracle_output(layer, x)
            got = layer_reference(layer, layer.io(x))
            assert np.array_equal(got, want), f"{name} operator {layer.index} ({layer.op}, {edge}): " \
                                              f"{int((got != want).sum())} of {want.size} differ"
    first = model.tuned[0].shape_dict
    pads = (first["pad_top"], first["pad_bottom"], first["pad_left"], first["pad_right"])
    if name == "ds_cnn_kws":  # the 10x4 stride-2 SAME conv on 49x10 of issue 15
        assert (first["kh"], first["kw"], first["stride_h"], pads) == (10, 4, 2, (4, 5, 1, 1))
    if name == "mobilenet_v1_025_vww":  # 96x96 stride-2 3x3 SAME
        assert (first["h"], first["stride_h"], pads) == (96, 2, (0, 1, 0, 1))


@pytest.mark.parametrize("edge", EDGES)
def test_layer_case_pairs_the_kernel_io_with_tflite_micro(tmp_path, edge):
    from edgetune.model.oracle import layer_case

    rng = np.random.default_rng(21)
    layer = load_model(write(tmp_path, "dw.tflite", dwconv_model(rng, 9, 9, 4, 2, 3, 3, stride=(2, 2)))).layers[0]
    io, expected = layer_case(layer, rng, edge)
    assert expected.shape == io.outputs()[0].data.shape == (5, 5, 8)
    assert np.array_equal(layer_reference(layer, io), expected)
    if edge == "extreme":
        assert set(np.unique(io.buffers[0].data)) == {-128, 127}
