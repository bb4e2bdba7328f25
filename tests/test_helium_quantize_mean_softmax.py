"""The Helium (MVE) paths of QUANTIZE (int8 <-> int16, int16 -> int16, int8 -> int8), SOFTMAX
(int16 with TFLite Micro's lookup tables; int8 with its exps as a table of the 256
differences) and MEAN (int16 and int8; templates quantize_helium.c.j2, softmax16.c.j2,
softmax.c.j2, mean_helium.c.j2) equal TFLite Micro's outputs on the M55 in QEMU: value counts
and rows that are no multiple of the vector width (tails), the int16 and int8 extremes mixed
into drawn inputs, scalings shifting left and right, zero points, GCC and Clang, and the
operators that may run in place run in place on the M55 too. Default tier: one case per
path; the slow tier sweeps. A target without MVE, and a MEAN over axes not next to each
other, keep the scalar loop."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model.graph import Quantization, Tensor
from edgetune.model.operators import operator_params
from edgetune.model.oracle import run_tflm

from int16_models import InPlace, f32, int16_tensor, run_target_typed
from op_checks import assert_same, int32_constant, one_op_graph


def _drawn(rng, shape, dtype: str, low: int | None = None, high: int | None = None) -> np.ndarray:
    """Values drawn over [low, high] (the type's range by default) with a fifth of them the
    type's extremes."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min if low is None else low, (info.max if high is None else high) + 1, size=shape,
                     dtype=dtype)
    extremes = rng.random(shape) < 0.2
    x[extremes] = rng.choice(np.array([info.min, info.max], dtype=dtype), size=int(extremes.sum()))
    return x


def _check(params, data, xs, m55, work, compiler="gcc", in_place=False, marker="arm_mve.h") -> None:
    assert marker in params.render("et_op", target=m55), "the Helium path was not taken"
    (want,) = run_tflm(data, xs)
    assert len(np.unique(want)) > 1, "a constant output checks little"
    got = run_target_typed(params, m55, xs, want.shape, str(want.dtype), work / compiler, compiler)
    assert_same(f"{params.op} on the M55 ({compiler})", got, want)
    if in_place:
        assert params.in_place == (0,)
        got = run_target_typed(InPlace(params), m55, xs, want.shape, str(want.dtype), work / f"{compiler}-in-place",
                               compiler)
        assert_same(f"{params.op} in place on the M55 ({compiler})", got, want)


# --- QUANTIZE ---------------------------------------------------------------------------------
def _quantize(tmp_path, source, target, ratio, zero_in, zero_out, n):
    """QUANTIZE of n values, s_in / s_out = ratio."""
    s_in = f32(0.01 / 256 if source == "int16" else 0.01)
    t = [Tensor(0, "x", (n,), source, Quantization((s_in,), (zero_in,))),
         Tensor(1, "y", (n,), target, Quantization((f32(s_in / ratio),), (zero_out,)))]
    data, graph = one_op_graph(tmp_path, t, "QUANTIZE", (0,), (1,))
    return data, operator_params(graph, graph.operators[0])


# (source, target, s_in / s_out, zero_in, zero_out): right and left shifts, zero points
QUANTIZE_PATHS = [("int8", "int16", 256 * 0.37, 5, 0), ("int16", "int8", 1 / 256 / 0.61, 0, -3),
                  ("int16", "int16", 0.43, 0, 0), ("int16", "int16", 3.7, 7, -9), ("int8", "int8", 1.7, -5, 20)]


@pytest.mark.parametrize("source, target, ratio, zero_in, zero_out", QUANTIZE_PATHS)
def test_quantize_helium_on_m55_is_tflite_micro(tmp_path, m55, source, target, ratio, zero_in, zero_out):
    """4 * 10 + 3 values (a tail); in place when the output is no wider than the input."""
    data, params = _quantize(tmp_path, source, target, ratio, zero_in, zero_out, 43)
    rng = np.random.default_rng(len(source + target) + zero_in)
    in_place = np.dtype(target).itemsize <= np.dtype(source).itemsize
    _check(params, data, [_drawn(rng, (43,), source)], m55, tmp_path, in_place=in_place)


@pytest.mark.slow
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_quantize_helium_sweep_on_m55_is_tflite_micro(tmp_path, m55, compiler):
    rng = np.random.default_rng(7 + len(compiler))
    cases = [(s, t) for s in ("int8", "int16") for t in ("int8", "int16")]
    for k in range(16):
        source, target = cases[k % 4]
        n = int(rng.integers(1, 70))
        widen = 256.0 if (source, target) == ("int8", "int16") else 1 / 256 if (source, target) == ("int16", "int8") \
            else 1.0
        ratio = widen * float(2.0 ** rng.uniform(-3, 3))
        zero_in = int(rng.integers(-100, 100))
        zero_out = int(rng.integers(-100, 100))
        work = tmp_path / str(k)
        work.mkdir()
        data, params = _quantize(work, source, target, ratio, zero_in, zero_out, n)
        x = _drawn(rng, (n,), source)
        if len(np.unique(run_tflm(data, [x])[0])) < 2:
            continue  # a value or two saturating alike: nothing to compare
        _check(params, data, [x], m55, work, compiler, in_place=np.dtype(target).itemsize <= np.dtype(source).itemsize)




# --- MEAN -------------------------------------------------------------------------------------
def _mean(tmp_path, dtype, shape, axes, keep, ratio, zero_in, zero_out):
    rank = len(shape)
    out = tuple(1 if d in axes else n for d, n in enumerate(shape)) if keep else \
        tuple(n for d, n in enumerate(shape) if d not in axes)
    s_in = f32(0.01 / 256 if dtype == "int16" else 0.01)
    t = [Tensor(0, "x", shape, dtype, Quantization((s_in,), (zero_in,))), int32_constant(1, axes),
         Tensor(2, "y", out, dtype, Quantization((f32(s_in / ratio),), (zero_out,)))]
    assert all(0 <= a < rank for a in axes)
    data, graph = one_op_graph(tmp_path, t, "MEAN", (0, 1), (2,), "ReducerOptions", {"keepDims": keep})
    return data, operator_params(graph, graph.operators[0])


# (dtype, shape, axes, keep_dims, s_in / s_out, zero_in, zero_out): a global average pool
# (columns summed four at once, 7 and 21 channels: tails) and a mean over the last axis
# (rows summed across the vector, 37 int16 and 35 int8 values: tails)
MEAN_PATHS = [("int16", (1, 5, 3, 7), [1, 2], False, 0.8, 0, 0), ("int16", (2, 3, 37), [2], True, 1.9, 0, 0),
              ("int8", (1, 3, 3, 21), [1, 2], True, 1.3, -7, 4), ("int8", (2, 5, 35), [2], False, 0.6, 12, -128)]


@pytest.mark.parametrize("dtype, shape, axes, keep, ratio, zero_in, zero_out", MEAN_PATHS)
def test_mean_helium_on_m55_is_tflite_micro(tmp_path, m55, dtype, shape, axes, keep, ratio, zero_in, zero_out):
    data, params = _mean(tmp_path, dtype, shape, axes, keep, ratio, zero_in, zero_out)
    rng = np.random.default_rng(len(shape) + abs(zero_in))
    marker = "vaddvaq" if axes == [len(shape) - 1] else "vaddq_s32"
    _check(params, data, [_drawn(rng, shape, dtype)], m55, tmp_path, marker=marker)


@pytest.mark.slow
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_mean_helium_sweep_on_m55_is_tflite_micro(tmp_path, m55, dtype, compiler):
    """Drawn shapes whose reduced axes are next to each other (ones between them too), keep_dims
    or not, scale ratios around one (left and right shifts), zero points; drawn and only
    extreme inputs."""
    rng = np.random.default_rng(11 + len(dtype + compiler))
    zeros = (-100, 100) if dtype == "int8" else (-300, 300)
    k = 0
    while k < 10:
        rank = int(rng.integers(2, 5))
        shape = tuple(int(d) for d in rng.integers(1, 12, size=rank))
        first = int(rng.integers(0, rank))
        axes = list(range(first, int(rng.integers(first + 1, rank + 1))))
        work = tmp_path / str(k)
        work.mkdir(exist_ok=True)
        data, params = _mean(work, dtype, shape, axes, bool(rng.integers(0, 2)), float(2.0 ** rng.uniform(-2, 2)),
                             int(rng.integers(*zeros)), int(rng.integers(*zeros)))
        info = np.iinfo(dtype)
        x = _drawn(rng, shape, dtype) if k % 3 else rng.choice(np.array([info.min, info.max], dtype=dtype), shape)
        if params.blocks is None or len(np.unique(run_tflm(data, [x])[0])) < 2:
            continue
        _check(params, data, [x], m55, work, compiler)
        k += 1


def test_a_mean_over_axes_apart_keeps_the_scalar_loop(tmp_path, m55):
    _, params = _mean(tmp_path, "int16", (2, 3, 4, 5), [1, 3], False, 1.0, 0, 0)
    assert params.blocks is None and "arm_mve.h" not in params.render("f", target=m55)
    _, ones_between = _mean(tmp_path, "int8", (2, 3, 1, 5), [1, 3], False, 1.0, 0, 0)
    assert ones_between.blocks == (2, 15, 1) and "arm_mve.h" in ones_between.render("f", target=m55)


# --- SOFTMAX (int16) ----------------------------------------------------------------------------
def _softmax(tmp_path, shape, s_in, beta):
    t = [int16_tensor(0, shape, s_in), int16_tensor(1, shape, 1 / 32768)]
    data, graph = one_op_graph(tmp_path, t, "SOFTMAX", (0,), (1,), "SoftmaxOptions", dict(beta=beta))
    return data, operator_params(graph, graph.operators[0])


def _logits(rng, shape, s_in) -> np.ndarray:
    """Rows spanning about 12 in real terms (past the exp table's 10), a fifth of the values
    the int16 extremes, one row only extremes when there are several."""
    reach = min(32767, int(6 / s_in))
    x = _drawn(rng, shape, "int16", -reach, reach)
    if shape[0] > 1:
        x[-1] = rng.choice(np.array([-32768, 32767], dtype=np.int16), shape[-1])
    return x


# (shape, s_in, beta): scalings shifting left (s_in * beta above 10 / 65535) and right; rows of
# 21 (tails of both the 8- and 4-value steps) and of 3 (no full step)
SOFTMAX_PATHS = [((3, 21), 2.0 ** -10, 1.0), ((4, 3), 2.0 ** -14, 0.5)]


@pytest.mark.parametrize("shape, s_in, beta", SOFTMAX_PATHS)
def test_softmax_helium_on_m55_is_tflite_micro(tmp_path, m55, shape, s_in, beta):
    data, params = _softmax(tmp_path, shape, s_in, beta)
    assert (params.shift > 0) == (s_in * beta > 10 / 65535)
    rng = np.random.default_rng(shape[1])
    _check(params, data, [_logits(rng, shape, s_in)], m55, tmp_path, in_place=True, marker="vldrhq_gather")


# --- SOFTMAX (int8) -----------------------------------------------------------------------------
def _softmax8(tmp_path, shape, s_in, zero_in, beta):
    t = [Tensor(0, "x", shape, "int8", Quantization((f32(s_in),), (zero_in,))),
         Tensor(1, "y", shape, "int8", Quantization((f32(1 / 256),), (-128,)))]
    data, graph = one_op_graph(tmp_path, t, "SOFTMAX", (0,), (1,), "SoftmaxOptions", dict(beta=beta))
    return data, operator_params(graph, graph.operators[0])


def test_the_int8_softmax_exp_table_is_the_reference_exp(tmp_path):
    """Entry d + 255 is exp(d) as the reference computes it, 0 below diff_min; its top is 1."""
    from edgetune.model.ops.softmax import DIFF_INTEGER_BITS, exp_on_negative_values
    from edgetune.model.ops.fixedpoint import sat_rdmulh, wrap32

    _, params = _softmax8(tmp_path, (1, 8), 0.1, 0, 1.0)
    table = np.asarray(params.exp_table())
    diff = np.arange(-255, 1)
    exps = exp_on_negative_values(sat_rdmulh(wrap32(diff << params.left_shift), params.multiplier), DIFF_INTEGER_BITS)
    assert params.diff_min > -255 and table[-1] == 2 ** 31 - 1
    assert np.array_equal(table, np.where(diff >= params.diff_min, exps, 0)) and (table[:10] == 0).all()


# (shape, s_in, zero_in, beta): rows of 21 (tails of the 16- and 4-value steps) and of 3; an
# input scale whose diff_min cuts the table (differences below it give -128)
SOFTMAX8_PATHS = [((3, 21), 0.05, -3, 1.0), ((4, 3), 0.1, 10, 2.0)]


@pytest.mark.parametrize("shape, s_in, zero_in, beta", SOFTMAX8_PATHS)
def test_int8_softmax_helium_on_m55_is_tflite_micro(tmp_path, m55, shape, s_in, zero_in, beta):
    data, params = _softmax8(tmp_path, shape, s_in, zero_in, beta)
    rng = np.random.default_rng(shape[1] + 1)
    x = _drawn(rng, shape, "int8")
    x[0] = rng.integers(-20, 20, shape[1])  # a row of close values: outputs between -128 and 127
    _check(params, data, [x], m55, tmp_path, in_place=True, marker="vldrwq_gather")


@pytest.mark.slow
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_softmax_helium_sweep_on_m55_is_tflite_micro(tmp_path, m55, dtype, compiler):
    """Drawn rows (1 to 70 values), input scales, betas (int8: zero points; close values and
    drawn ones), in place and apart."""
    rng = np.random.default_rng(len(dtype + compiler))
    for k in range(10):
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 71)))
        work = tmp_path / str(k)
        work.mkdir()
        beta = float(rng.choice([0.5, 1.0, 2.0]))
        if dtype == "int16":
            s_in = f32(2.0 ** rng.uniform(-15, -8))
            data, params = _softmax(work, shape, s_in, beta)
            x = _logits(rng, shape, s_in)
        else:
            s_in = float(np.exp(rng.uniform(np.log(0.005), np.log(1.0))))
            data, params = _softmax8(work, shape, s_in, int(rng.integers(-128, 128)), beta)
            x = _drawn(rng, shape, "int8") if k % 2 else rng.integers(-30, 30, shape).astype(np.int8)
        if len(np.unique(run_tflm(data, [x])[0])) < 2:
            continue  # rows of one value
        marker = "vldrhq_gather" if dtype == "int16" else "vldrwq_gather"
        _check(params, data, [x], m55, work, compiler, in_place=k % 2 == 0, marker=marker)


def test_a_target_without_mve_keeps_the_scalar_loops(tmp_path, m4):
    """The M4's C is the target-less C, byte for byte, for every operator here."""
    cases = [_quantize(tmp_path, "int16", "int8", 1 / 256, 0, 0, 43), _quantize(tmp_path, "int8", "int8", 1.7, 0, 0, 43),
             _softmax(tmp_path, (3, 21), 2.0 ** -10, 1.0),
             _softmax8(tmp_path, (3, 21), 0.05, -3, 1.0), *(_mean(tmp_path, *case) for case in MEAN_PATHS)]
    for _, params in cases:
        assert "arm_mve.h" not in params.render("f", target=m4) and params.render("f", target=m4) == params.render("f")
