"""ADD (app/model/ops/add.py): the numpy reference is TFLite Micro's output bit for bit on
random and saturating inputs over drawn scales, zero points, activations and broadcasts, and
the generated C (host, and the M55 in QEMU) is the reference."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.ops.add import TABLE_MIN_ELEMENTS, add_params
from op_checks import activation_tensor, assert_same, draw_int8, one_op_graph, run_host, run_target, tflm

ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
SHAPES = [((1, 8, 8, 16), (1, 8, 8, 16)), ((1, 4, 5, 3), (1, 1, 1, 3)), ((2, 3, 7), (7,)), ((1, 6, 1, 4), (1, 1, 5, 1))]


def _draw(tmp_path, rng, shapes, activation="NONE", scales=None, zeros=None):
    sa, sb = shapes
    out = tuple(np.broadcast_shapes(sa, sb))
    scales = np.exp(rng.uniform(np.log(0.003), np.log(0.3), size=3)) if scales is None else scales
    zeros = rng.integers(-128, 128, size=3) if zeros is None else zeros
    tensors = [activation_tensor(0, sa, scales[0], zeros[0]), activation_tensor(1, sb, scales[1], zeros[1]),
               activation_tensor(2, out, scales[2], zeros[2])]
    return one_op_graph(tmp_path, tensors, "ADD", (0, 1), (2,), "AddOptions",
                        {"fusedActivationFunction": ACTIVATIONS[activation]})


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: "+".join("x".join(map(str, x)) for x in s))
def test_reference_is_tflite_micro(tmp_path, shapes, activation, edge):
    rng = np.random.default_rng(hash((shapes, activation, edge)) % 2**32)
    for draw in range(3):
        data, graph = _draw(tmp_path, rng, shapes, activation)
        params = add_params(graph, graph.operators[0])
        a, b = draw_int8(rng, shapes[0], edge), draw_int8(rng, shapes[1], edge)
        assert_same(f"draw {draw}", params.reference(a, b), tflm(data, [a, b]))


@pytest.mark.parametrize("shapes", [*SHAPES[:2], ((1, 16, 16, 8), (1, 1, 1, 8))], ids=["same", "broadcast", "table-broadcast"])
def test_c_on_host_is_reference_and_tflite_micro(tmp_path, shapes):
    rng = np.random.default_rng(7)
    data, graph = _draw(tmp_path, rng, shapes, "RELU")
    params = add_params(graph, graph.operators[0])
    a, b = draw_int8(rng, shapes[0], "random"), draw_int8(rng, shapes[1], "random")
    want = tflm(data, [a, b])
    assert_same("reference", params.reference(a, b), want)
    source = params.render("et_add")
    # Inputs of 512 values or more are rescaled through a table of 256 constants.
    assert [f"et_add_table_{x}[256]" in source for x in "ab"] == [a.size >= 512, b.size >= 512]
    assert_same("C on the host", run_host(params, [a, b], want.size, tmp_path / "c"), want)
    assert params.in_place == ((0, 1) if shapes[0] == shapes[1] else (0,))
    for alias in params.in_place:
        assert_same(f"in place of input {alias}", run_host(params, [a, b], want.size, tmp_path / f"a{alias}", alias=alias), want)


def test_c_on_m55_is_tflite_micro(tmp_path, m55):
    rng = np.random.default_rng(8)
    data, graph = _draw(tmp_path, rng, SHAPES[1], "RELU6")
    params = add_params(graph, graph.operators[0])
    a, b = draw_int8(rng, SHAPES[1][0], "random"), draw_int8(rng, SHAPES[1][1], "random")
    want = tflm(data, [a, b])
    assert_same("C on the M55", run_target(params, m55, [a, b], want.shape, tmp_path / "m55"), want)


def test_refusals_name_the_operator(tmp_path):
    tensors = [activation_tensor(0, (1, 4, 4, 3), 0.1, 0), activation_tensor(1, (1, 4, 2, 3), 0.1, 0),
               activation_tensor(2, (1, 4, 4, 3), 0.1, 0)]
    _, graph = one_op_graph(tmp_path, tensors, "ADD", (0, 1), (2,), "AddOptions", {})
    with pytest.raises(ModelError, match=r"operator 0 \(ADD\): inputs of shapes \[1, 4, 4, 3\] and \[1, 4, 2, 3\]"):
        add_params(graph, graph.operators[0])
    tensors[1:] = [activation_tensor(1, (1, 4, 4, 3), 0.1, 0), activation_tensor(2, (1, 4, 4, 3), 1e-9, 0)]
    _, graph = one_op_graph(tmp_path, tensors, "ADD", (0, 1), (2,), "AddOptions", {})
    with pytest.raises(ModelError, match=r"operator 0 \(ADD\): the output rescaling factor"):
        add_params(graph, graph.operators[0])


# Same-shape element counts around the Helium loop's four lanes: tails of 1 to 3, one value;
# the last two of at least TABLE_MIN_ELEMENTS, rescaled by gathers from tables (one with a tail).
MVE_SHAPES = [(1, 4, 4, 17), (37,), (3, 5, 7), (1, 1, 1, 1), (2, 2), (1, 8, 8, 16), (1, 9, 9, 7)]


def _mve_scales(rng, case: int) -> tuple[float, float, float]:
    """Drawn scales; some cases hit the exponents a drawn scale rarely gives: equal input
    scales (an input multiplier of exactly 1/2, no right shift) and an output factor in
    [1/2, 1) (no right shift after the sum's high multiply)."""
    s = np.exp(rng.uniform(np.log(0.003), np.log(0.3), size=3))
    if case % 4 == 1:
        s[1] = s[0]
    if case % 4 == 2:
        s[2] = 2 * max(s[0], s[1]) / (1 << 20) / rng.uniform(0.5, 0.99)
    if case % 4 == 3:
        # Equal input scales and an output scale of four times theirs: every rescaling is
        # exact and the output is (sum of the differences) / 4, half the odd sums a tie,
        # so rounding ties up instead of away from zero would show.
        s[1], s[2] = s[0], 4 * s[0]
    return float(s[0]), float(s[1]), float(s[2])


def test_helium_path_only_for_same_shapes_and_per_channel_inputs_on_mve(tmp_path, m55, m4, a53):
    """The vector loop is chosen by the shapes and the target's units: same shapes, and one
    input of one value per channel against a full one, on the M55; other broadcasts there,
    and everything on targets without MVE, are the plain loop, byte for byte."""
    rng = np.random.default_rng(11)
    for shapes, vector in ((SHAPES[0], True), (SHAPES[1], True), (SHAPES[2], True), (SHAPES[3], False)):
        _, graph = _draw(tmp_path, rng, shapes)
        params = add_params(graph, graph.operators[0])
        plain = params.render("et_add")
        assert "vldrbq_z_s32" not in plain and "arm_mve.h" not in plain
        for target in (m4, a53):
            assert params.render("et_add", target=target) == plain
        on_m55 = params.render("et_add", target=m55)
        assert (on_m55 != plain) == vector and ("#include <arm_mve.h>" in on_m55) == vector, shapes


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.matrix
def test_helium_c_on_m55_is_tflite_micro(tmp_path, m55, activation, compiler):
    """The MVE loop built with each of the M55's compilers, over drawn scales and zero
    points, both input orders, every tail, and random and saturating values: TFLite Micro's
    output bit for bit."""
    rng = np.random.default_rng(len(activation))
    for case, shape in enumerate(MVE_SHAPES):
        scales = _mve_scales(rng, case + len(activation))
        edge = "extreme" if case % 3 == 2 else "random"
        zeros = [int(z) for z in rng.integers(-128, 128, size=3)]
        a, b = draw_int8(rng, shape, edge), draw_int8(rng, shape, edge)
        for order in (0, 1):  # the same sum with the inputs (values, scales, zero points) swapped
            swap = (lambda v: (v[1], v[0], v[2])) if order else tuple
            data, graph = _draw(tmp_path, rng, (shape, shape), activation, swap(scales), swap(zeros))
            params = add_params(graph, graph.operators[0])
            source = params.render("et_add", target=m55)
            assert "#include <arm_mve.h>" in source and ("vctp32q" in source) == (a.size % 4 != 0)
            assert ("vldrwq_gather_shifted_offset_s32" in source) == (a.size >= TABLE_MIN_ELEMENTS)
            xs = [b, a] if order else [a, b]
            want = tflm(data, xs)
            assert_same(f"{shape} order {order}: reference", params.reference(*xs), want)
            got = run_target(params, m55, xs, want.shape, tmp_path / f"m{case}_{order}", compiler)
            assert_same(f"{shape} order {order}: Helium C on the M55 ({compiler})", got, want)
