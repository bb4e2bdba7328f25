"""The int16 library operators (app/model/ops/sixteen.py, softmax16.py, add16.py) bit for bit
with TFLite Micro: RESHAPE, the pools, QUANTIZE between int8 and int16, SOFTMAX with its
lookup tables, ADD and SUB; the numpy reference over drawn cases (every fused activation,
broadcast shapes, odd sizes, the int16 extremes), the C on the host (apart and in place)
and on the M55 in QEMU."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.graph import Quantization, Tensor
from edgetune.model.operators import operator_params
from edgetune.model.oracle import run_tflm
from edgetune.targets import get_target

from int16_models import draw_int16, f32, int16_tensor, run_host_typed, run_target_typed
from op_checks import assert_same, int32_constant, one_op_graph

ACTIVATIONS = (0, 1, 2, 3)  # NONE, RELU, RELU_N1_TO_1, RELU6


def _everywhere(params, data, xs, work, in_place: bool = True, m55: bool = True) -> None:
    """Reference, host C (apart, and in place when the operator allows it) and M55 C (unless
    `m55` is False: a variant of a case another test runs there) give TFLite Micro's output."""
    (want,) = run_tflm(data, xs)
    dtype = str(want.dtype)
    assert_same("reference", params.reference(*xs), want)
    assert_same("C on the host", run_host_typed(params, xs, want.shape, dtype, work / "host"), want)
    if in_place and params.in_place:
        alias = params.in_place[0]
        assert_same("C in place", run_host_typed(params, xs, want.shape, dtype, work / "alias", alias=alias), want)
    if m55:
        assert_same("C on the M55", run_target_typed(params, get_target("cortex-m55"), xs, want.shape, dtype,
                                                     work / "m55"), want)


def _reference_only(params, data, xs) -> np.ndarray:
    (want,) = run_tflm(data, xs)
    assert_same("reference", params.reference(*xs), want)
    return want


def test_reshape_copies_int16_values(tmp_path):
    t = [int16_tensor(0, (1, 3, 5), 0.01), int32_constant(1, [5, -1]), int16_tensor(2, (5, 3), 0.01)]
    data, graph = one_op_graph(tmp_path, t, "RESHAPE", (0, 1), (2,))
    params = operator_params(graph, graph.operators[0])
    assert params.input_ctypes == ("int16_t",) and params.output_ctype == "int16_t"
    _everywhere(params, data, [draw_int16(np.random.default_rng(0), (1, 3, 5))], tmp_path)


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
def test_pools_over_drawn_windows(tmp_path, op):
    rng = np.random.default_rng(1)
    for n in range(8):
        h, w, c = (int(v) for v in rng.integers(1, 8, size=3))
        kh, kw, sh, sw = (int(v) for v in rng.integers(1, 4, size=4))
        padding = int(rng.integers(0, 2))
        oh = -(-h // sh) if padding == 0 else (h - kh) // sh + 1
        ow = -(-w // sw) if padding == 0 else (w - kw) // sw + 1
        if oh < 1 or ow < 1:
            continue
        scale = f32(rng.uniform(1e-4, 1e-2))
        t = [int16_tensor(0, (1, h, w, c), scale), int16_tensor(1, (1, oh, ow, c), scale)]
        options = dict(padding=padding, strideH=sh, strideW=sw, filterHeight=kh, filterWidth=kw,
                       fusedActivationFunction=ACTIVATIONS[n % 4])
        data, graph = one_op_graph(tmp_path, t, op, (0,), (1,), "Pool2DOptions", options)
        params = operator_params(graph, graph.operators[0])
        for edge in ("random", "extreme"):
            _reference_only(params, data, [draw_int16(rng, (1, h, w, c), edge)])
    t = [int16_tensor(0, (1, 5, 7, 3), 0.001), int16_tensor(1, (1, 3, 4, 3), 0.001)]
    data, graph = one_op_graph(tmp_path, t, op, (0,), (1,), "Pool2DOptions",
                               dict(padding=0, strideH=2, strideW=2, filterHeight=2, filterWidth=3,
                                    fusedActivationFunction=1))
    _everywhere(operator_params(graph, graph.operators[0]), data, [draw_int16(rng, (1, 5, 7, 3), "extreme")], tmp_path)


@pytest.mark.parametrize("source,target,zero_in,zero_out", [
    ("int8", "int16", 5, 0), ("int8", "int16", -128, 0), ("int16", "int8", 0, -3), ("int16", "int8", 0, 127),
    ("int16", "int16", 0, 0), ("int16", "int16", 7, -9)])
def test_quantize_between_int8_and_int16(tmp_path, source, target, zero_in, zero_out):
    rng = np.random.default_rng(2)
    for n in range(4):
        s_in, s_out = f32(rng.uniform(1e-3, 0.1)), f32(rng.uniform(1e-3, 0.1))
        s_in, s_out = f32(s_in / 256) if source == "int16" else s_in, f32(s_out / 256) if target == "int16" else s_out
        t = [Tensor(0, "x", (3, 7), source, Quantization((s_in,), (zero_in,))),
             Tensor(1, "y", (3, 7), target, Quantization((s_out,), (zero_out,)))]
        data, graph = one_op_graph(tmp_path, t, "QUANTIZE", (0,), (1,))
        params = operator_params(graph, graph.operators[0])
        info = np.iinfo(source)
        extremes = rng.choice(np.array([info.min, info.max], dtype=source), size=(3, 7))
        drawn = rng.integers(info.min, info.max + 1, size=(3, 7), dtype=source)
        for x in (drawn, extremes):
            _reference_only(params, data, [x])
    assert params.in_place == ((0,) if np.dtype(target).itemsize <= np.dtype(source).itemsize else ())
    _everywhere(params, data, [drawn], tmp_path)


def _softmax_model(tmp_path, shape, s_in, beta=1.0):
    t = [int16_tensor(0, shape, s_in), int16_tensor(1, shape, 1 / 32768)]
    data, graph = one_op_graph(tmp_path, t, "SOFTMAX", (0,), (1,), "SoftmaxOptions", dict(beta=beta))
    return data, operator_params(graph, graph.operators[0])


def test_softmax_over_drawn_rows(tmp_path):
    rng = np.random.default_rng(3)
    for n in range(12):
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 50)))
        data, params = _softmax_model(tmp_path, shape, f32(2.0 ** rng.uniform(-14, -5)), float(rng.choice([0.5, 1, 2])))
        for x in (draw_int16(rng, shape), draw_int16(rng, shape, "extreme"),
                  rng.integers(-400, 400, size=shape, dtype=np.int16)):
            _reference_only(params, data, [x])
    _everywhere(params, data, [draw_int16(rng, shape)], tmp_path)


def test_softmax_tables_are_tflite_micros_float_ones(tmp_path):
    """The reciprocal table computed in float differs from the double one at entries 160 and
    294; rows whose sums land there tell which TFLite Micro uses."""
    from edgetune.model.ops.softmax16 import tables

    s_in = f32(2.0 ** -10)
    rows = np.array([[0, -k] for k in range(0, 32768, 7)], dtype=np.int16)
    data, params = _softmax_model(tmp_path, rows.shape, s_in)
    reciprocal = np.asarray(tables()[1])
    assert reciprocal[160] == 24966 and reciprocal[294] == 20816  # the double tables hold 24967 and 20815
    _reference_only(params, data, [rows])


@pytest.mark.parametrize("op", ["ADD", "SUB"])
@pytest.mark.parametrize("shape_a,shape_b", [((2, 3, 5), (2, 3, 5)), ((1, 4, 3, 6), (1, 1, 1, 6)), ((3, 1), (1, 7))])
def test_add_and_sub(tmp_path, op, shape_a, shape_b):
    rng = np.random.default_rng(4)
    out = tuple(np.broadcast_shapes(shape_a, shape_b))
    for act in ACTIVATIONS:
        t = [int16_tensor(0, shape_a, f32(rng.uniform(1e-4, 1e-3))), int16_tensor(1, shape_b, f32(rng.uniform(1e-4, 1e-3))),
             int16_tensor(2, out, f32(rng.uniform(1e-4, 2e-3)))]
        data, graph = one_op_graph(tmp_path, t, op, (0, 1), (2,), "AddOptions" if op == "ADD" else "SubOptions",
                                   dict(fusedActivationFunction=act))
        params = operator_params(graph, graph.operators[0])
        for edge in ("random", "extreme"):
            _reference_only(params, data, [draw_int16(rng, shape_a, edge), draw_int16(rng, shape_b, edge)])
    _everywhere(params, data, [draw_int16(rng, shape_a), draw_int16(rng, shape_b)], tmp_path, m55=shape_a == (2, 3, 5))


def test_an_int16_softmax_quantised_otherwise_is_refused(tmp_path):
    t = [int16_tensor(0, (1, 4), 0.01), int16_tensor(1, (1, 4), 1 / 256)]
    _, graph = one_op_graph(tmp_path, t, "SOFTMAX", (0,), (1,), "SoftmaxOptions", dict(beta=1.0))
    with pytest.raises(ModelError, match=r"operator 0 \(SOFTMAX\): .*writes scale 1/32768"):
        operator_params(graph, graph.operators[0])


@pytest.mark.parametrize("shape_a,shape_b", [((2, 3, 5), (2, 3, 5)), ((1, 4, 3, 6), (1, 1, 1, 6)), ((3, 1), (1, 7))])
def test_mul(tmp_path, shape_a, shape_b):
    rng = np.random.default_rng(5)
    out = tuple(np.broadcast_shapes(shape_a, shape_b))
    for act in ACTIVATIONS:
        s_a, s_b = f32(rng.uniform(1e-4, 1e-3)), f32(rng.uniform(1e-4, 1e-3))
        t = [int16_tensor(0, shape_a, s_a), int16_tensor(1, shape_b, s_b),
             int16_tensor(2, out, f32(s_a * s_b * 32768 * rng.uniform(0.2, 2)))]
        data, graph = one_op_graph(tmp_path, t, "MUL", (0, 1), (2,), "MulOptions", dict(fusedActivationFunction=act))
        params = operator_params(graph, graph.operators[0])
        for edge in ("random", "extreme"):
            want = _reference_only(params, data, [draw_int16(rng, shape_a, edge), draw_int16(rng, shape_b, edge)])
            if edge == "random" and act == 0:
                assert len(np.unique(want)) > 2
    _everywhere(params, data, [draw_int16(rng, shape_a), draw_int16(rng, shape_b)], tmp_path, m55=shape_a == (2, 3, 5))


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
def test_logistic_and_tanh_over_power_of_two_and_other_scales(tmp_path, op):
    rng = np.random.default_rng(6)
    scales = (2.0 ** -12, 2.0 ** -11, 2.0 ** -13, 2.0 ** -15, 1 / 3000, 1 / 20000, 0.001, 0.01)
    for s_in in scales:
        t = [int16_tensor(0, (4, 33), f32(s_in)), int16_tensor(1, (4, 33), 1 / 32768)]
        data, graph = one_op_graph(tmp_path, t, op, (0,), (1,))
        params = operator_params(graph, graph.operators[0])
        for edge in ("random", "extreme"):
            _reference_only(params, data, [draw_int16(rng, (4, 33), edge)])
    _everywhere(params, data, [draw_int16(rng, (4, 33))], tmp_path)
    t = [int16_tensor(0, (4, 33), f32(2.0 ** -12)), int16_tensor(1, (4, 33), 1 / 32768)]
    data, graph = one_op_graph(tmp_path, t, op, (0,), (1,))
    _everywhere(operator_params(graph, graph.operators[0]), data, [draw_int16(rng, (4, 33))], tmp_path)


def test_the_sigmoid_table_is_tflite_micros(tmp_path):
    """An input scale of 2 / (3 * 4096) makes TANH read entry i exactly at x = 128 i: its
    output there is the entry less 32768, for every entry but the saturated last."""
    from edgetune.model.ops.sigmoid16 import sigmoid_table

    s_in = np.float32(2 / 12288)
    while float(s_in) * 12288 < 2:
        s_in = np.nextafter(s_in, np.float32(1))
    t = [int16_tensor(0, (1, 255), float(s_in)), int16_tensor(1, (1, 255), 1 / 32768)]
    data, graph = one_op_graph(tmp_path, t, "TANH", (0,), (1,))
    x = np.array([[min(128 * i, 32767) for i in range(255)]], dtype=np.int16)
    (want,) = run_tflm(data, [x])
    assert np.array_equal(want.reshape(-1)[:255].astype(np.int64) + 32768, np.asarray(sigmoid_table()[:255]))


@pytest.mark.parametrize("shapes,axis", [(((2, 3), (2, 5)), 1), (((1, 2, 3, 4), (1, 1, 3, 4), (1, 3, 3, 4)), 1),
                                         (((3, 2), (1, 2)), -2)])
def test_concatenation_copies_int16_values_whatever_their_scales(tmp_path, shapes, axis):
    rng = np.random.default_rng(7)
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    t = [int16_tensor(i, s, f32(rng.uniform(1e-4, 1e-3))) for i, s in enumerate(shapes)]
    t.append(int16_tensor(len(shapes), out, f32(rng.uniform(1e-4, 1e-3))))
    data, graph = one_op_graph(tmp_path, t, "CONCATENATION", tuple(range(len(shapes))), (len(shapes),),
                               "ConcatenationOptions", dict(axis=axis))
    params = operator_params(graph, graph.operators[0])
    xs = [draw_int16(rng, s) for s in shapes]
    _reference_only(params, data, [draw_int16(rng, s, "extreme") for s in shapes])
    _everywhere(params, data, xs, tmp_path)


def test_pad_fills_int16_with_zero_whatever_the_zero_point(tmp_path):
    rng = np.random.default_rng(8)
    paddings = np.array([[0, 0], [1, 2], [0, 3], [2, 0]], dtype=np.int32)
    for zero in (0, -7):
        t = [int16_tensor(0, (1, 3, 4, 2), 0.001, zero=zero), int32_constant(1, paddings),
             int16_tensor(2, (1, 6, 7, 4), 0.001, zero=zero)]
        data, graph = one_op_graph(tmp_path, t, "PAD", (0, 1), (2,), "PadOptions", {})
        params = operator_params(graph, graph.operators[0])
        _reference_only(params, data, [draw_int16(rng, (1, 3, 4, 2), "extreme")])
    _everywhere(params, data, [draw_int16(rng, (1, 3, 4, 2))], tmp_path)


@pytest.mark.parametrize("op", ["RELU", "RELU6"])
def test_relu_and_relu6(tmp_path, op):
    rng = np.random.default_rng(9)
    for zero_in, zero_out in ((0, 0), (0, 0) if op == "RELU" else (-100, -100)):
        s_in = f32(rng.uniform(1e-4, 1e-3))
        s_out = s_in if op == "RELU6" else f32(rng.uniform(1e-4, 1e-3))
        t = [int16_tensor(0, (3, 11), s_in, zero=zero_in), int16_tensor(1, (3, 11), s_out, zero=zero_out)]
        data, graph = one_op_graph(tmp_path, t, op, (0,), (1,))
        params = operator_params(graph, graph.operators[0])
        for edge in ("random", "extreme"):
            _reference_only(params, data, [draw_int16(rng, (3, 11), edge)])
    _everywhere(params, data, [draw_int16(rng, (3, 11))], tmp_path)


def test_an_int16_relu_with_a_zero_point_is_refused_as_tflite_micro_refuses_it(tmp_path):
    t = [int16_tensor(0, (3, 11), 0.001, zero=5), int16_tensor(1, (3, 11), 0.001)]
    _, graph = one_op_graph(tmp_path, t, "RELU", (0,), (1,))
    with pytest.raises(ModelError, match=r"operator 0 \(RELU\): zero points 5 and 0"):
        operator_params(graph, graph.operators[0])


def test_leaky_relu(tmp_path):
    rng = np.random.default_rng(10)
    for alpha, zero_in, zero_out in ((0.2, 0, 0), (0.01, 0, 0), (0.5, -50, 20)):
        t = [int16_tensor(0, (2, 17), f32(rng.uniform(1e-4, 1e-3)), zero=zero_in),
             int16_tensor(1, (2, 17), f32(rng.uniform(1e-4, 1e-3)), zero=zero_out)]
        data, graph = one_op_graph(tmp_path, t, "LEAKY_RELU", (0,), (1,), "LeakyReluOptions", dict(alpha=alpha))
        params = operator_params(graph, graph.operators[0])
        for edge in ("random", "extreme"):
            _reference_only(params, data, [draw_int16(rng, (2, 17), edge)])
    _everywhere(params, data, [draw_int16(rng, (2, 17))], tmp_path)


def test_transpose_and_resize_nearest_move_int16_values(tmp_path):
    rng = np.random.default_rng(11)
    x = draw_int16(rng, (1, 3, 4, 5))
    cases = [
        ("TRANSPOSE", [int16_tensor(0, (1, 3, 4, 5), 0.001), int32_constant(1, [0, 3, 1, 2]),
                       int16_tensor(2, (1, 5, 3, 4), 0.001)], (0, 1), "TransposeOptions", {}),
        ("RESIZE_NEAREST_NEIGHBOR", [int16_tensor(0, (1, 3, 4, 5), 0.001), int32_constant(1, [5, 7]),
                                     int16_tensor(2, (1, 5, 7, 5), 0.001)], (0, 1), "ResizeNearestNeighborOptions", {}),
    ]
    for n, (op, tensors, inputs, options_type, options) in enumerate(cases):
        data, graph = one_op_graph(tmp_path, tensors, op, inputs, (2,), options_type, options)
        params = operator_params(graph, graph.operators[0])
        assert params.input_ctypes == ("int16_t",)
        _everywhere(params, data, [x], tmp_path / op, m55=n == 0)


def test_an_int16_gather_is_refused_as_tflite_micro_cannot_prepare_it(tmp_path):
    t = [int16_tensor(0, (1, 3, 4, 5), 0.001), int32_constant(1, [4, 0, 2]), int16_tensor(2, (1, 3, 4, 3), 0.001)]
    data, graph = one_op_graph(tmp_path, t, "GATHER", (0, 1), (2,), "GatherOptions", dict(axis=3))
    with pytest.raises(RuntimeError, match="failed to allocate"):  # the spec has no int16 GATHER
        run_tflm(data, [draw_int16(np.random.default_rng(0), (1, 3, 4, 5))])
    with pytest.raises(ModelError, match=r"operator 0 \(GATHER\): .*int16"):
        operator_params(graph, graph.operators[0])


@pytest.mark.parametrize("shape_a,shape_b", [((2, 9), (2, 9)), ((1, 3, 4, 5), (1, 1, 1, 5))])
def test_squared_difference(tmp_path, shape_a, shape_b):
    rng = np.random.default_rng(12)
    out = tuple(np.broadcast_shapes(shape_a, shape_b))
    for n in range(4):
        s_a, s_b = f32(rng.uniform(1e-4, 1e-3)), f32(rng.uniform(1e-4, 1e-3))
        t = [int16_tensor(0, shape_a, s_a), int16_tensor(1, shape_b, s_b),
             int16_tensor(2, out, f32(max(s_a, s_b) ** 2 * 32768 * rng.uniform(0.1, 4)))]
        data, graph = one_op_graph(tmp_path, t, "SQUARED_DIFFERENCE", (0, 1), (2,), "SquaredDifferenceOptions", {})
        params = operator_params(graph, graph.operators[0])
        for edge in ("random", "extreme"):
            _reference_only(params, data, [draw_int16(rng, shape_a, edge), draw_int16(rng, shape_b, edge)])
    _everywhere(params, data, [draw_int16(rng, shape_a), draw_int16(rng, shape_b)], tmp_path, m55=shape_a == (2, 9))
