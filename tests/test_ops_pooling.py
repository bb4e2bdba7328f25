"""AVERAGE_POOL_2D and MAX_POOL_2D (app/model/ops/pooling.py): the numpy reference is TFLite
Micro's output bit for bit on random and saturating inputs, SAME and VALID, drawn windows,
strides and activations; the generated C (host, the M55 in QEMU) is the reference."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.ops.pooling import pool_params
from op_checks import activation_tensor, assert_same, draw_int8, one_op_graph, run_host, run_target, tflm

OPS = ["AVERAGE_POOL_2D", "MAX_POOL_2D"]
PADDING = {"SAME": 0, "VALID": 1}
ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
# (input n, h, w, c), (kh, kw), (stride_h, stride_w): DS-CNN's global pool, MobileNet's, odd windows
GEOMETRIES = [((1, 25, 5, 64), (25, 5), (25, 5)), ((1, 3, 3, 256), (3, 3), (1, 1)), ((2, 9, 7, 5), (3, 2), (2, 3)),
              ((1, 10, 11, 3), (4, 5), (3, 2)), ((1, 5, 5, 2), (2, 2), (2, 2))]


def _model(tmp_path, op, geometry, padding, activation, scale=0.05, zero=-3):
    (n, h, w, c), (kh, kw), (sh, sw) = geometry
    size = {"SAME": lambda i, k, s: -(-i // s), "VALID": lambda i, k, s: (i - k) // s + 1}[padding]
    out = (n, size(h, kh, sh), size(w, kw, sw), c)
    tensors = [activation_tensor(0, (n, h, w, c), scale, zero), activation_tensor(1, out, scale, zero)]
    return one_op_graph(tmp_path, tensors, op, (0,), (1,), "Pool2DOptions",
                        {"padding": PADDING[padding], "strideW": sw, "strideH": sh, "filterWidth": kw,
                         "filterHeight": kh, "fusedActivationFunction": ACTIVATIONS[activation]})


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("padding", list(PADDING))
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[0])) + f"k{g[1][0]}{g[1][1]}")
@pytest.mark.parametrize("op", OPS)
def test_reference_is_tflite_micro(tmp_path, op, geometry, padding, edge):
    rng = np.random.default_rng(abs(hash((op, geometry, padding, edge))) % 2**32)
    for activation in ACTIVATIONS:
        zero = int(rng.integers(-128, 100))
        data, graph = _model(tmp_path, op, geometry, padding, activation, float(rng.uniform(0.01, 0.5)), zero)
        params = pool_params(graph, graph.operators[0])
        x = draw_int8(rng, geometry[0], edge)
        assert_same(activation, params.reference(x), tflm(data, [x]))


@pytest.mark.parametrize("op", OPS)
def test_c_on_host_and_m55_is_tflite_micro(tmp_path, op, m55):
    rng = np.random.default_rng(3)
    for i, geometry in enumerate(GEOMETRIES[2:4]):
        data, graph = _model(tmp_path, op, geometry, "SAME", "RELU6")
        params = pool_params(graph, graph.operators[0])
        x = draw_int8(rng, geometry[0], "random")
        want = tflm(data, [x])
        assert_same("reference", params.reference(x), want)
        assert_same("C on the host", run_host(params, [x], want.size, tmp_path / f"host{i}"), want)
    assert_same("C on the M55", run_target(params, m55, [x], want.shape, tmp_path / "m55"), want)


def test_refusals_name_the_operator(tmp_path):
    tensors = [activation_tensor(0, (1, 8, 8, 3), 0.1, 0), activation_tensor(1, (1, 4, 4, 3), 0.1, 0)]
    _, graph = one_op_graph(tmp_path, tensors, "MAX_POOL_2D", (0,), (1,), "Pool2DOptions",
                            {"padding": 1, "strideW": 3, "strideH": 3, "filterWidth": 2, "filterHeight": 2})
    with pytest.raises(ModelError, match=r"operator 0 \(MAX_POOL_2D\): output tensor 1 .* has shape \[1, 4, 4, 3\], "
                                         r"but the pooling gives \[1, 3, 3, 3\]"):
        pool_params(graph, graph.operators[0])


@pytest.mark.parametrize("op", OPS)
def test_one_quantisation_as_tflite_micro_requires(tmp_path, op):
    """TFLite Micro pools only when the input's and output's scales are within 1e-6 and their
    zero points equal (it fails to prepare other models): scales that close run as it runs
    them; others are refused naming the operator, as TFLite Micro refuses them."""
    def model(s_out, z_out):
        tensors = [activation_tensor(0, (1, 6, 6, 4), 1e-4, -3), activation_tensor(1, (1, 3, 3, 4), s_out, z_out)]
        return one_op_graph(tmp_path, tensors, op, (0,), (1,), "Pool2DOptions",
                            {"padding": 1, "strideW": 2, "strideH": 2, "filterWidth": 2, "filterHeight": 2,
                             "fusedActivationFunction": 1})
    data, graph = model(1e-4 + 5e-7, -3)
    params = pool_params(graph, graph.operators[0])
    x = draw_int8(np.random.default_rng(0), (1, 6, 6, 4), "random")
    assert_same("scales within 1e-6", params.reference(x), tflm(data, [x]))
    for s_out, z_out in ((1e-4 + 2e-6, -3), (1e-4, 10)):
        data, graph = model(s_out, z_out)
        with pytest.raises(ModelError, match=rf"operator 0 \({op}\): input and output are quantised differently"):
            pool_params(graph, graph.operators[0])
        with pytest.raises(RuntimeError, match="TFLM failed to allocate tensors"):
            tflm(data, [x])


# The Helium loops on the M55: channel counts around the 16 lanes (tails of 1 to 15, one
# channel, several blocks), SAME windows cut to the input (counts that vary per output),
# windows of 2 values (half the odd sums rounding ties), DS-CNN's pool, a 70-value window,
# the largest window summed in int16 lanes (256 values) and one summed in int32 (272).
MVE_GEOMETRIES = [((1, 25, 5, 64), (24, 5), (2, 5)), ((1, 3, 3, 17), (3, 3), (1, 1)), ((2, 9, 7, 5), (3, 2), (2, 3)),
                  ((1, 10, 11, 3), (4, 5), (3, 2)), ((1, 6, 6, 1), (2, 2), (2, 2)), ((1, 4, 4, 33), (3, 3), (1, 1)),
                  ((1, 5, 7, 16), (5, 7), (1, 1)), ((1, 8, 4, 12), (1, 2), (1, 2)), ((1, 70, 1, 4), (70, 1), (1, 1)),
                  ((1, 2, 3, 47), (2, 3), (1, 2)), ((1, 16, 16, 1), (16, 16), (1, 1)), ((1, 17, 16, 21), (17, 16), (1, 1))]


def test_helium_path_only_on_mve(tmp_path, m55, m4, a53):
    """The vector loop is chosen by the target's units: on the M55, except for an average over
    a window too large for its exact division; everywhere else the plain loop, byte for byte."""
    for op in OPS:
        for geometry in [*GEOMETRIES[:3], ((1, 64, 64, 3), (64, 64), (1, 1))]:
            _, graph = _model(tmp_path, op, geometry, "VALID", "NONE")
            params = pool_params(graph, graph.operators[0])
            plain = params.render("et_pool")
            assert "arm_mve.h" not in plain and "vldrb" not in plain
            for target in (m4, a53):
                assert params.render("et_pool", target=target) == plain
            vector = op == "MAX_POOL_2D" or geometry[1][0] * geometry[1][1] <= 4088
            assert params.vector_division_exact == (geometry[1] != (64, 64))
            assert ("#include <arm_mve.h>" in params.render("et_pool", target=m55)) == vector


def test_helium_division_is_exact():
    """The Helium average divides by the window's count as the high word of 2a * ceil(2^31 / count)
    (VMULH.U32): floor(a / count) for every a a window of int8 values can give (exhaustively for
    counts up to 300 and around the largest count the template allows)."""
    largest = max(c for c in range(1, 5000) if (128 * c + c // 2) * (c - 1) < 2**31)
    assert largest == 4088
    for count in [*range(1, 301), largest - 1, largest]:
        m = -(-(1 << 31) // count)
        a = np.arange(128 * count + count // 2 + 1, dtype=np.uint64)
        got = ((2 * a) * np.uint64(m)) >> np.uint64(32)
        assert m < 2**32 and np.array_equal(got, a // np.uint64(count)), count


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.matrix
def test_helium_c_on_m55_is_tflite_micro(tmp_path, m55, op, compiler):
    """The MVE loops built with each of the M55's compilers, over channel counts with every
    kind of tail, SAME and VALID, every activation, random and saturating inputs: TFLite
    Micro's output bit for bit."""
    rng = np.random.default_rng(len(op) + len(compiler))
    activations = list(ACTIVATIONS)
    for case, geometry in enumerate(MVE_GEOMETRIES):
        padding = "SAME" if case % 2 else "VALID"
        activation = activations[case % len(activations)]
        zero = int(rng.integers(-100, 60))
        data, graph = _model(tmp_path, op, geometry, padding, activation, float(rng.uniform(0.02, 0.3)), zero)
        params = pool_params(graph, graph.operators[0])
        source = params.render("et_pool", target=m55)
        narrow = op == "AVERAGE_POOL_2D" and geometry[1][0] * geometry[1][1] <= 256
        assert "#include <arm_mve.h>" in source and ("int16x8_t s0" in source) == narrow
        x = draw_int8(rng, geometry[0], "extreme" if case % 3 == 2 else "random")
        want = tflm(data, [x])
        assert_same(f"{geometry} {padding}: reference", params.reference(x), want)
        got = run_target(params, m55, [x], want.shape, tmp_path / f"m{case}", compiler)
        assert_same(f"{geometry} {padding} {activation}: Helium C on the M55 ({compiler})", got, want)


@pytest.mark.parametrize("window", [(16, 16), (17, 16)])
def test_helium_average_at_the_int16_limit(tmp_path, m55, window):
    """A 256-value window of all -128 sums to -32768, the most negative int16 (and all 127 to
    32512): the int16 lanes hold both, as TFLite Micro's int32 sum does; a 272-value window
    (-34816) is summed in int32 lanes."""
    (kh, kw), c = window, 19
    data, graph = _model(tmp_path, "AVERAGE_POOL_2D", ((2, kh, kw, c), window, (1, 1)), "VALID", "NONE")
    params = pool_params(graph, graph.operators[0])
    assert params.sums_fit_int16 == (kh * kw <= 256)
    assert ("int16x8_t s0" in params.render("et_pool", target=m55)) == params.sums_fit_int16
    x = np.concatenate([np.full((1, kh, kw, c), -128, np.int8), np.full((1, kh, kw, c), 127, np.int8)])
    x[1, 3, 5, c - 1] = 126  # one value off the top: the sum less one still rounds to 127
    want = tflm(data, [x])
    assert want.reshape(-1).tolist() == [-128] * c + [127] * c
    assert_same("Helium C on the M55", run_target(params, m55, [x], want.shape, tmp_path / "m"), want)
