"""SUB (codegen/ops/add.py, SubParams: ADD's arithmetic with the second input subtracted): the
numpy reference is TFLite Micro's output bit for bit on random and saturating inputs over
drawn scales, zero points, fused activations and broadcasts, and the generated C (host, and
the M55 in QEMU, plain and Helium) is the reference. ADD's own C is unchanged (test_ops_add.py)."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.codegen.ops import operator_params
from edgetune.codegen.ops.add import SubParams
from op_checks import activation_tensor, assert_same, draw_int8, one_op_graph, run_host, run_target, tflm

ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
SHAPES = [((1, 8, 8, 16), (1, 8, 8, 16)), ((1, 4, 5, 3), (1, 1, 1, 3)), ((2, 3, 7), (7,)), ((1, 6, 1, 4), (1, 1, 5, 1)),
          ((5,), (1, 3, 1, 5))]


def _draw(tmp_path, rng, shapes, activation="NONE", scales=None, zeros=None):
    sa, sb = shapes
    out = tuple(np.broadcast_shapes(sa, sb))
    scales = np.exp(rng.uniform(np.log(0.003), np.log(0.3), size=3)) if scales is None else scales
    zeros = rng.integers(-128, 128, size=3) if zeros is None else zeros
    tensors = [activation_tensor(0, sa, scales[0], zeros[0]), activation_tensor(1, sb, scales[1], zeros[1]),
               activation_tensor(2, out, scales[2], zeros[2])]
    data, graph = one_op_graph(tmp_path, tensors, "SUB", (0, 1), (2,), "SubOptions",
                               {"fusedActivationFunction": ACTIVATIONS[activation]})
    params = operator_params(graph, graph.operators[0])
    assert isinstance(params, SubParams)
    return data, params


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: "-".join("x".join(map(str, x)) for x in s))
def test_reference_is_tflite_micro(tmp_path, shapes, activation, edge):
    rng = np.random.default_rng(abs(hash((shapes, activation, edge))) % 2**32)
    for draw in range(4):
        # every other draw with equal scales: exact rescaling, so rounding ties are frequent
        scales = None if draw % 2 == 0 else (0.05, 0.05, 0.2)
        data, params = _draw(tmp_path, rng, shapes, activation, scales)
        a, b = draw_int8(rng, shapes[0], edge), draw_int8(rng, shapes[1], edge)
        assert_same(f"draw {draw}", params.reference(a, b), tflm(data, [a, b]))


def test_the_difference_is_not_the_sum(tmp_path):
    """Guards the test above: SUB's output differs from ADD's on the same inputs."""
    rng = np.random.default_rng(3)
    data, params = _draw(tmp_path, rng, SHAPES[0], scales=(0.05, 0.05, 0.1), zeros=(0, 0, 0))
    a, b = draw_int8(rng, SHAPES[0][0], "random"), draw_int8(rng, SHAPES[0][1], "random")
    got = params.reference(a, b).astype(int)
    want = np.clip(np.round((a.astype(int) - b.astype(int)) / 2), -128, 127)
    assert np.abs(got - want).max() <= 1 and not np.array_equal(got, np.clip(np.round((a + b.astype(int)) / 2), -128, 127))


@pytest.mark.parametrize("shapes", [SHAPES[0], SHAPES[1], ((1, 16, 16, 8), (1, 1, 1, 8))], ids=["same", "broadcast", "table"])
def test_c_on_host_is_tflite_micro(tmp_path, shapes):
    rng = np.random.default_rng(7)
    data, params = _draw(tmp_path, rng, shapes, "RELU")
    a, b = draw_int8(rng, shapes[0], "random"), draw_int8(rng, shapes[1], "random")
    want = tflm(data, [a, b])
    source = params.render("et_sub")
    assert "SUB, int8" in source and " - " in source
    assert_same("C on the host", run_host(params, [a, b], want.size, tmp_path / "c"), want)
    for alias in params.in_place:
        assert_same(f"in place of input {alias}", run_host(params, [a, b], want.size, tmp_path / f"a{alias}", alias=alias), want)


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("shape", [(1, 4, 4, 17), (37,), (1, 1, 1, 1)])
def test_helium_c_on_m55_is_tflite_micro(tmp_path, m55, shape, compiler):
    rng = np.random.default_rng(sum(shape))
    for case, (activation, edge) in enumerate([("NONE", "random"), ("RELU6", "extreme"), ("RELU_N1_TO_1", "random")]):
        scales = (0.05, 0.05, 0.2) if case == 0 else None
        data, params = _draw(tmp_path, rng, (shape, shape), activation, scales)
        source = params.render("et_sub", target=m55)
        assert "vsubq_s32" in source and "arm_mve.h" in source
        a, b = draw_int8(rng, shape, edge), draw_int8(rng, shape, edge)
        want = tflm(data, [a, b])
        assert_same(f"{activation} {edge} ({compiler})", run_target(params, m55, [a, b], want.shape,
                                                                   tmp_path / f"m{case}", compiler), want)


def test_broadcast_c_on_m55_is_tflite_micro(tmp_path, m55):
    rng = np.random.default_rng(9)
    data, params = _draw(tmp_path, rng, SHAPES[3], "RELU")
    a, b = draw_int8(rng, SHAPES[3][0], "random"), draw_int8(rng, SHAPES[3][1], "random")
    want = tflm(data, [a, b])
    assert_same("broadcast on the M55", run_target(params, m55, [a, b], want.shape, tmp_path / "b"), want)
