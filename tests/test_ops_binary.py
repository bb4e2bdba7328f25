"""SUB (app/model/ops/add.py, SubParams: ADD's arithmetic with the second input subtracted),
SQUARED_DIFFERENCE (the same at TFLite's left shift of 7, squared) and MUL (app/model/ops/mul.py): the numpy reference is TFLite Micro's output bit for bit on random
and saturating inputs over drawn scales, zero points, fused activations and broadcasts, and
the generated C (host, and the M55 in QEMU, plain and Helium) is the reference. ADD's own C
is unchanged (test_ops_add.py)."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.operators import operator_params
from edgetune.model.ops.add import TABLE_MIN_ELEMENTS, SquaredDifferenceParams, SubParams
from edgetune.model.ops.mul import MulParams
from op_checks import activation_tensor, assert_same, draw_int8, one_op_graph, run_host, run_target, tflm

ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
SHAPES = [((1, 8, 8, 16), (1, 8, 8, 16)), ((1, 4, 5, 3), (1, 1, 1, 3)), ((2, 3, 7), (7,)), ((1, 6, 1, 4), (1, 1, 5, 1)),
          ((5,), (1, 3, 1, 5))]
# operator: (its options table, its parameters' class, the vector instruction its Helium loop shows)
OPS = {"SUB": ("SubOptions", SubParams, "vsubq_s32"), "MUL": ("MulOptions", MulParams, "vmulq_s32"),
       "SQUARED_DIFFERENCE": ("SquaredDifferenceOptions", SquaredDifferenceParams, "vmulq_s32(y, y)")}
FUSES_ACTIVATION = {"SUB", "MUL"}  # SQUARED_DIFFERENCE has no fused activation


def _draw(tmp_path, rng, name, shapes, activation="NONE", scales=None, zeros=None):
    sa, sb = shapes
    out = tuple(np.broadcast_shapes(sa, sb))
    if scales is None:
        scales = np.exp(rng.uniform(np.log(0.003), np.log(0.3), size=3))
        if name == "MUL":  # an output scale near the product's range, as a converter sets it
            scales[2] = scales[0] * scales[1] * float(np.exp(rng.uniform(np.log(8), np.log(300))))
        if name == "SQUARED_DIFFERENCE":  # near the square's range
            scales[2] = max(scales[:2]) ** 2 * float(np.exp(rng.uniform(np.log(20), np.log(2000))))
    zeros = rng.integers(-128, 128, size=3) if zeros is None else zeros
    tensors = [activation_tensor(0, sa, scales[0], zeros[0]), activation_tensor(1, sb, scales[1], zeros[1]),
               activation_tensor(2, out, scales[2], zeros[2])]
    options_type, kind, _ = OPS[name]
    options = {"fusedActivationFunction": ACTIVATIONS[activation]} if name in FUSES_ACTIVATION else {}
    data, graph = one_op_graph(tmp_path, tensors, name, (0, 1), (2,), options_type, options)
    params = operator_params(graph, graph.operators[0])
    assert type(params) is kind
    return data, params


def _tie_scales(name):
    """Scales whose rescaling is exact, so that rounding ties are frequent."""
    return {"SUB": (0.05, 0.05, 0.2), "MUL": (0.5, 0.25, 0.5), "SQUARED_DIFFERENCE": (0.25, 0.25, 1.0)}[name]


NAME_AND_ACTIVATION = [(name, a) for name in OPS for a in (ACTIVATIONS if name in FUSES_ACTIVATION else ["NONE"])]


@pytest.mark.matrix
@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: "-".join("x".join(map(str, x)) for x in s))
@pytest.mark.parametrize("name, activation", NAME_AND_ACTIVATION)
def test_reference_is_tflite_micro(tmp_path, name, shapes, activation, edge):
    rng = np.random.default_rng(abs(hash((name, shapes, activation, edge))) % 2**32)
    for draw in range(4):
        scales = None if draw % 2 == 0 else _tie_scales(name)
        data, params = _draw(tmp_path, rng, name, shapes, activation, scales)
        a, b = draw_int8(rng, shapes[0], edge), draw_int8(rng, shapes[1], edge)
        assert_same(f"draw {draw}", params.reference(a, b), tflm(data, [a, b]))


def test_each_computes_its_own_operation(tmp_path):
    """Guards the test above: with zero points 0 and exact scales, SUB gives (a - b) / 2,
    MUL a * b / 64 and SQUARED_DIFFERENCE (a - b)^2 / 256 (rounded), not ADD's sum."""
    rng = np.random.default_rng(3)
    a, b = (draw_int8(rng, (1, 8, 8, 16), "random").astype(int) for _ in range(2))
    _, sub = _draw(tmp_path, rng, "SUB", SHAPES[0], scales=(0.05, 0.05, 0.1), zeros=(0, 0, 0))
    _, mul = _draw(tmp_path, rng, "MUL", SHAPES[0], scales=(0.5, 0.5, 16.0), zeros=(0, 0, 0))
    assert np.abs(sub.reference(a.astype(np.int8), b.astype(np.int8)) - np.clip((a - b) / 2, -128, 127)).max() <= 0.5
    # MUL rounds twice (the high multiply, then the shift), so it may be off by a little over 1/2
    assert np.abs(mul.reference(a.astype(np.int8), b.astype(np.int8)) - np.clip(a * b / 64, -128, 127)).max() < 1
    _, square = _draw(tmp_path, rng, "SQUARED_DIFFERENCE", SHAPES[0], scales=(0.5, 0.5, 64.0), zeros=(0, 0, 0))
    want = np.clip((a - b) ** 2 / 256, -128, 127)
    assert np.abs(square.reference(a.astype(np.int8), b.astype(np.int8)) - want).max() < 1


@pytest.mark.parametrize("shapes", [SHAPES[0], SHAPES[1], ((1, 16, 16, 8), (1, 1, 1, 8))], ids=["same", "broadcast", "large"])
@pytest.mark.parametrize("name", list(OPS))
def test_c_on_host_is_tflite_micro(tmp_path, name, shapes):
    rng = np.random.default_rng(7)
    data, params = _draw(tmp_path, rng, name, shapes, "RELU" if name in FUSES_ACTIVATION else "NONE")
    a, b = draw_int8(rng, shapes[0], "random"), draw_int8(rng, shapes[1], "random")
    want = tflm(data, [a, b])
    assert f"{name}, int8" in params.render("et_op")
    assert_same("C on the host", run_host(params, [a, b], want.size, tmp_path / "c"), want)
    assert params.in_place == ((0, 1) if shapes[0] == shapes[1] else (0,))
    for alias in params.in_place:
        assert_same(f"in place of input {alias}", run_host(params, [a, b], want.size, tmp_path / f"a{alias}", alias=alias), want)


@pytest.mark.matrix
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("shape", [(1, 4, 4, 17), (37,), (1, 1, 1, 1)])
@pytest.mark.parametrize("name", list(OPS))
def test_helium_c_on_m55_is_tflite_micro(tmp_path, m55, name, shape, compiler):
    rng = np.random.default_rng(sum(shape))
    for case, (activation, edge) in enumerate([("NONE", "random"), ("RELU6", "extreme"), ("RELU_N1_TO_1", "random")]):
        activation = activation if name in FUSES_ACTIVATION else "NONE"
        scales = _tie_scales(name) if case == 0 else None
        data, params = _draw(tmp_path, rng, name, (shape, shape), activation, scales)
        source = params.render("et_op", target=m55)
        assert OPS[name][2] in source and "arm_mve.h" in source
        a, b = draw_int8(rng, shape, edge), draw_int8(rng, shape, edge)
        want = tflm(data, [a, b])
        assert_same(f"{activation} {edge} ({compiler})", run_target(params, m55, [a, b], want.shape,
                                                                   tmp_path / f"m{case}", compiler), want)


@pytest.mark.parametrize("name", list(OPS))
def test_broadcast_c_on_m55_and_m4_is_tflite_micro(tmp_path, m55, m4, name):
    rng = np.random.default_rng(9)
    data, params = _draw(tmp_path, rng, name, SHAPES[3], "RELU" if name in FUSES_ACTIVATION else "NONE")
    a, b = draw_int8(rng, SHAPES[3][0], "random"), draw_int8(rng, SHAPES[3][1], "random")
    want = tflm(data, [a, b])
    for target in (m55, m4):
        assert_same(f"broadcast on {target.name}", run_target(params, target, [a, b], want.shape, tmp_path / target.name), want)


def test_a_mul_whose_product_would_overflow_is_refused_naming_it(tmp_path):
    rng = np.random.default_rng(1)
    with pytest.raises(ModelError, match=r"operator 0 \(MUL\): the rescaling factor .* too large"):
        _draw(tmp_path, rng, "MUL", SHAPES[0], scales=(0.5, 0.5, 1e-6))


# One input of one value per channel against a full one (a squeeze-excite gate, a bias), either
# input, with and without a tail of the four lanes: the Helium per-channel loop. The last two
# full inputs hold at least TABLE_MIN_ELEMENTS values: SUB rescales them by gathers from a table.
PER_CHANNEL = [((1, 5, 3, 12), (1, 1, 1, 12)), ((1, 1, 1, 7), (1, 4, 2, 7)), ((2, 3, 3, 5), (1, 1, 1, 5)),
               ((1, 1, 1, 13), (1, 8, 5, 13)), ((1, 8, 8, 16), (1, 1, 1, 16))]


@pytest.mark.matrix
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("shapes", PER_CHANNEL, ids=lambda s: "-".join("x".join(map(str, x)) for x in s))
@pytest.mark.parametrize("name", ["MUL", "SUB"])
def test_helium_per_channel_c_on_m55_is_tflite_micro(tmp_path, m55, name, shapes, compiler):
    rng = np.random.default_rng(sum(shapes[0]) + len(name))
    for case, edge in enumerate(("random", "extreme")):
        data, params = _draw(tmp_path, rng, name, shapes, "RELU" if case else "NONE")
        source = params.render("et_op", target=m55)
        assert "one value per channel" in source and params.per_channel == (0 if shapes[0][:3] == (1, 1, 1) else 1)
        assert ("vctp32q" in source) == (shapes[0][3] % 4 != 0)
        full = max(int(np.prod(shape)) for shape in shapes)
        assert ("vldrwq_gather" in source) == (name == "SUB" and full >= TABLE_MIN_ELEMENTS)
        a, b = draw_int8(rng, shapes[0], edge), draw_int8(rng, shapes[1], edge)
        want = tflm(data, [a, b])
        assert_same(f"{edge} ({compiler})", run_target(params, m55, [a, b], want.shape, tmp_path / f"p{case}", compiler), want)
