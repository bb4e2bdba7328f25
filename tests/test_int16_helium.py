"""The Helium (MVE) paths of the int16 ADD, SUB, SQUARED_DIFFERENCE and MUL (templates
add16.c.j2, mul16.c.j2): same-shape inputs and one input of one value per channel (either
input), four int16 values a step (VLDRH.S32/VSTRH.32), tail-predicated, equal to TFLite
Micro's output on the M55 in QEMU: every fused activation, element and channel counts with
every tail, drawn scales, random and int16-extreme inputs, GCC and Clang (slow tier: the
sweep; default tier: one case per operator). A target without MVE keeps the scalar loop.
Below, those of RELU, RELU6, LEAKY_RELU, and LOGISTIC and TANH on every int16 value."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model.operators import operator_params
from edgetune.model.oracle import run_tflm

from int16_models import InPlace, draw_int16, f32, int16_tensor, run_target_typed
from op_checks import assert_same, one_op_graph

OPTIONS = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions",
           "SQUARED_DIFFERENCE": "SquaredDifferenceOptions"}


def _scales(rng, op: str) -> tuple[float, float, float]:
    s_a, s_b = f32(rng.uniform(1e-4, 1e-3)), f32(rng.uniform(1e-4, 1e-3))
    if op == "MUL":
        return s_a, s_b, f32(s_a * s_b * 32768 * rng.uniform(0.2, 2))
    if op == "SQUARED_DIFFERENCE":
        return s_a, s_b, f32(max(s_a, s_b) ** 2 * 32768 * rng.uniform(0.1, 4))
    return s_a, s_b, f32(rng.uniform(1e-4, 2e-3))


def _params(tmp_path, rng, op, shape_a, shape_b, act):
    out = tuple(np.broadcast_shapes(shape_a, shape_b))
    s_a, s_b, s_out = _scales(rng, op)
    t = [int16_tensor(0, shape_a, s_a), int16_tensor(1, shape_b, s_b), int16_tensor(2, out, s_out)]
    options = {} if op == "SQUARED_DIFFERENCE" else dict(fusedActivationFunction=act)
    data, graph = one_op_graph(tmp_path, t, op, (0, 1), (2,), OPTIONS[op], options)
    return data, operator_params(graph, graph.operators[0])


def _check_on_m55(tmp_path, m55, op, shape_a, shape_b, act, edge, compiler, seed):
    rng = np.random.default_rng(seed)
    data, params = _params(tmp_path, rng, op, shape_a, shape_b, act)
    source = params.render("et_op", target=m55)
    assert "vldrhq_s32" in source and "vstrhq_s32" in source, "the Helium path was not taken"
    xs = [draw_int16(rng, shape_a, edge), draw_int16(rng, shape_b, edge)]
    (want,) = run_tflm(data, xs)
    got = run_target_typed(params, m55, xs, want.shape, "int16", tmp_path / f"{op}-{act}-{edge}-{compiler}", compiler)
    assert_same(f"{op} {shape_a} {shape_b} act {act} {edge} ({compiler})", got, want)


# (shape_a, shape_b): same shapes with 0..3 values past a multiple of four, and a per-channel
# input, either one, with 0..3 channels past a multiple of four
SHAPES = [((2, 3, 8), (2, 3, 8)), ((1, 37), (1, 37)), ((3, 2, 5, 6), (3, 2, 5, 6)), ((1, 7), (1, 7)),
          ((1, 4, 3, 9), (1, 1, 1, 9)), ((1, 1, 1, 12), (1, 2, 5, 12)), ((1, 3, 3, 3), (1, 1, 1, 3))]


@pytest.mark.parametrize("op", list(OPTIONS))
def test_helium_on_m55_is_tflite_micro(tmp_path, m55, op):
    """One per-channel case with a channel tail, per operator (GCC, random inputs, RELU)."""
    _check_on_m55(tmp_path, m55, op, (1, 2, 3, 7), (1, 1, 1, 7), 1, "random", "gcc", len(op))


@pytest.mark.slow
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("op", list(OPTIONS))
def test_helium_sweep_on_m55_is_tflite_micro(tmp_path, m55, op, compiler):
    for k, (shape_a, shape_b) in enumerate(SHAPES):
        act = k % 4  # NONE, RELU, RELU_N1_TO_1, RELU6 in turn
        edge = "extreme" if k % 3 == 2 else "random"
        (tmp_path / str(k)).mkdir()
        _check_on_m55(tmp_path / str(k), m55, op, shape_a, shape_b, act, edge, compiler, 100 * k + len(op))


def test_a_target_without_mve_and_a_broadcast_shape_keep_the_scalar_loop(tmp_path, m55, m4):
    rng = np.random.default_rng(2)
    _, params = _params(tmp_path, rng, "ADD", (1, 4, 3, 6), (1, 1, 1, 6), 0)
    assert "arm_mve.h" not in params.render("f", target=m4) and params.render("f", target=m4) == params.render("f")
    _, broadcast = _params(tmp_path, rng, "MUL", (3, 1), (1, 7), 0)  # neither same-shape nor per-channel
    assert "arm_mve.h" not in broadcast.render("f", target=m55)


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("op, ratio, zero", [("RELU", 0.3, 0), ("RELU", 2.7, 0), ("RELU6", 1.0, -100)])
def test_relu_and_relu6_helium_on_m55_is_tflite_micro(tmp_path, m55, op, ratio, zero, compiler):
    """RELU requantising down and up (a negative and a positive shift), RELU6 with a zero
    point; 8 * 5 + 3 values (tails of both the 4- and 8-lane steps), random and extreme."""
    rng = np.random.default_rng(int(ratio * 10) + len(compiler))
    s_in = f32(rng.uniform(1e-4, 1e-3))
    t = [int16_tensor(0, (43,), s_in, zero=zero), int16_tensor(1, (43,), f32(s_in / ratio), zero=zero)]
    data, graph = one_op_graph(tmp_path, t, op, (0,), (1,))
    params = operator_params(graph, graph.operators[0])
    assert "vldrhq" in params.render("et_op", target=m55) or "vld1q_s16" in params.render("et_op", target=m55)
    for edge in ("random", "extreme"):
        x = draw_int16(rng, (43,), edge)
        (want,) = run_tflm(data, [x])
        assert len(np.unique(want)) > 1 or edge == "extreme"
        got = run_target_typed(params, m55, [x], want.shape, "int16", tmp_path / f"{edge}", compiler)
        assert_same(f"{op} x{ratio} {edge} ({compiler})", got, want)


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("alpha, ratio, zero_in, zero_out", [(0.2, 0.5, 0, 0), (0.01, 3.0, 0, 0), (2.5, 1.7, -50, 20)])
def test_leaky_relu_helium_on_m55_is_tflite_micro(tmp_path, m55, alpha, ratio, zero_in, zero_out, compiler):
    """Both scalings shifting right and left (scale ratios below and above one, alpha above
    one), zero points; 4 * 10 + 3 values (a tail), random and extreme inputs."""
    rng = np.random.default_rng(int(alpha * 100) + len(compiler))
    s_in = f32(rng.uniform(1e-4, 1e-3))
    t = [int16_tensor(0, (43,), s_in, zero=zero_in), int16_tensor(1, (43,), f32(s_in / ratio), zero=zero_out)]
    data, graph = one_op_graph(tmp_path, t, "LEAKY_RELU", (0,), (1,), "LeakyReluOptions", dict(alpha=alpha))
    params = operator_params(graph, graph.operators[0])
    assert "vpselq_s32" in params.render("et_op", target=m55)
    for edge in ("random", "extreme"):
        x = draw_int16(rng, (43,), edge)
        (want,) = run_tflm(data, [x])
        got = run_target_typed(params, m55, [x], want.shape, "int16", tmp_path / f"{edge}", compiler)
        assert_same(f"LEAKY_RELU alpha {alpha} x{ratio} {edge} ({compiler})", got, want)


def _sigmoid(tmp_path, op, s_in, n):
    t = [int16_tensor(0, (n,), f32(s_in)), int16_tensor(1, (n,), 1 / 32768)]
    data, graph = one_op_graph(tmp_path, t, op, (0,), (1,))
    return data, operator_params(graph, graph.operators[0])


EVERY_INT16 = np.arange(-32768, 32767, dtype=np.int16)  # all but 32767: 65,535 values, a tail of 3


@pytest.mark.parametrize("op, s_in", [("LOGISTIC", 2.0 ** -12), ("TANH", 1 / 3000)])
def test_logistic_and_tanh_helium_on_m55_is_tflite_micro_on_every_int16(tmp_path, m55, op, s_in):
    """Every int16 value but one in one call (and every 61st in place): a power-of-two scale
    (3 << shift, no rounding) and another (a rounded shift), saturation on both sides."""
    data, params = _sigmoid(tmp_path, op, s_in, EVERY_INT16.size)
    assert "vldrhq_gather_shifted_offset_u32" in params.render("et_op", target=m55)
    (want,) = run_tflm(data, [EVERY_INT16])
    got = run_target_typed(params, m55, [EVERY_INT16], want.shape, "int16", tmp_path / "m55")
    assert_same(f"{op} on every int16 ({s_in:g})", got, want)
    some = EVERY_INT16[::61]  # 1,075 values, both ends near
    data, params = _sigmoid(tmp_path, op, s_in, some.size)
    got = run_target_typed(InPlace(params), m55, [some], some.shape, "int16", tmp_path / "in-place")
    assert_same(f"{op} in place ({s_in:g})", got, run_tflm(data, [some])[0])


@pytest.mark.slow
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
def test_logistic_and_tanh_helium_sweep_on_m55_is_tflite_micro(tmp_path, m55, op, compiler):
    """Every int16 value at input scales from TFLite Micro's special powers of two (2^-12,
    TANH's 2^-11) to small and large ones."""
    for k, s_in in enumerate((2.0 ** -12, 2.0 ** -11, 2.0 ** -13, 2.0 ** -15, 1 / 20000, 0.001, 0.01, 1.7e-7)):
        work = tmp_path / str(k)
        work.mkdir()
        data, params = _sigmoid(work, op, s_in, EVERY_INT16.size)
        (want,) = run_tflm(data, [EVERY_INT16])
        got = run_target_typed(params, m55, [EVERY_INT16], want.shape, "int16", work / "m55", compiler)
        assert_same(f"{op} on every int16 ({s_in:g}, {compiler})", got, want)


def _pool(tmp_path, op, h, w, c, kh, kw, stride, padding, act):
    oh = -(-h // stride) if padding == 0 else (h - kh) // stride + 1
    ow = -(-w // stride) if padding == 0 else (w - kw) // stride + 1
    t = [int16_tensor(0, (1, h, w, c), 1e-3), int16_tensor(1, (1, oh, ow, c), 1e-3)]
    options = dict(padding=padding, strideH=stride, strideW=stride, filterHeight=kh, filterWidth=kw,
                   fusedActivationFunction=act)
    data, graph = one_op_graph(tmp_path, t, op, (0,), (1,), "Pool2DOptions", options)
    return data, operator_params(graph, graph.operators[0])


def _check_pool_on_m55(tmp_path, m55, rng, case, compiler="gcc"):
    data, params = _pool(tmp_path, *case)
    assert "vldrhq" in params.render("et_op", target=m55), "the Helium path was not taken"
    x = draw_int16(rng, params.input_shape)
    x[rng.random(x.shape) < 0.3] = -32768 if case[0] == "MAX_POOL_2D" else 32767  # runs of the extremes
    (want,) = run_tflm(data, [x])
    got = run_target_typed(params, m55, [x], want.shape, "int16", tmp_path / compiler, compiler)
    assert_same(f"{case} ({compiler})", got, want)


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
def test_pools_helium_on_m55_is_tflite_micro(tmp_path, m55, op):
    """37 channels (tails of the 16- and 8-channel steps), SAME padding (windows cut at the
    edges: counts of 4, 6 and 9), a fused RELU."""
    _check_pool_on_m55(tmp_path, m55, np.random.default_rng(len(op)), (op, 5, 6, 37, 3, 3, 2, 0, 1))


@pytest.mark.slow
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
def test_pools_helium_sweep_on_m55_is_tflite_micro(tmp_path, m55, op, compiler):
    """Drawn windows, strides, paddings, activations and channel counts, and the largest window
    the exact vector division covers (16x16: 256 values)."""
    rng = np.random.default_rng(len(op + compiler))
    cases = [(op, 16, 16, 5, 16, 16, 1, 1, 0)]
    while len(cases) < 8:
        h, w = (int(v) for v in rng.integers(1, 10, size=2))
        c = int(rng.integers(1, 40))
        kh, kw, stride = (int(v) for v in rng.integers(1, 4, size=3))
        padding = int(rng.integers(0, 2))
        if padding == 1 and (kh > h or kw > w):
            continue
        cases.append((op, h, w, c, kh, kw, stride, padding, int(rng.integers(0, 4))))
    for k, case in enumerate(cases):
        (tmp_path / str(k)).mkdir()
        _check_pool_on_m55(tmp_path / str(k), m55, rng, case, compiler)
