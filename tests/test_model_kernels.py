"""The kernels against TFLite Micro on drawn layers (tests/kernel_checks.py: tflm_case,
run_against_tflm): real TFLite quantisation and weights, the layer as a one-operator model
(a PAD first where the drawn padding is not TFLite's SAME or VALID). The numpy references
and compiled variants, on the host and in QEMU, must equal TFLite Micro bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from kernel_checks import draw_conv_shape, run_against_tflm, tflm_case
from kernel_runs import assert_ok, complete


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("name", ["conv", "dw"])
def test_drawn_references_equal_tflite_micro(request, name, edge):
    kernel = request.getfixturevalue(name)
    rng = np.random.default_rng(15 if edge == "random" else 16)
    for _ in range(25):
        shape = draw_conv_shape(kernel, rng)
        io, expected = tflm_case(kernel.name, shape, rng, edge)
        got = kernel.reference(shape, io)[0]
        assert np.array_equal(got, expected), f"{shape}: {int((got != expected).sum())} of {got.size} differ"


HOST_CONV = ({"algo": "im2col", "tile_p": 4, "tile_oc": 4, "unroll": 4, "compiler": "gcc", "opt": "O3", "fusion": "unfused"},
             {"algo": "direct", "tile_oc": 2, "compiler": "clang", "opt": "O2", "fusion": "fused", "layout": "packed"})
HOST_DW = ({"tile_c": 8, "tile_p": 2, "compiler": "gcc", "opt": "O3"},
           {"tile_c": 4, "tile_p": 1, "compiler": "clang", "layout": "packed"})


@pytest.mark.parametrize("name, variants", [("conv", HOST_CONV), ("dw", HOST_DW)])
def test_host_variants_equal_tflite_micro(request, host, tmp_path, name, variants):
    kernel = request.getfixturevalue(name)
    rng = np.random.default_rng(7)
    for index, values in enumerate(variants):
        shape = draw_conv_shape(kernel, rng)
        space = kernel.space(host, shape)
        config = complete(space, {k: v for k, v in values.items() if any(c[k] == v for c in space)})
        assert_ok(run_against_tflm(kernel, host, shape, config, tmp_path, rng, edge=("random", "extreme")[index % 2]))


@pytest.mark.qemu
@pytest.mark.parametrize("name", ["conv", "dw"])
def test_helium_variants_equal_tflite_micro(request, m55, tmp_path, name):
    kernel = request.getfixturevalue(name)
    rng = np.random.default_rng(55)
    for edge in ("random", "extreme"):
        shape = draw_conv_shape(kernel, rng)
        space = kernel.space(m55, shape)
        config = complete(space, {"vector": "mve"})
        assert_ok(run_against_tflm(kernel, m55, shape, config, tmp_path, rng, edge=edge))


def test_the_trial_is_judged_by_tflite_micro(conv, host, tmp_path, monkeypatch):
    """run_against_tflm compares with TFLite Micro's output, not the numpy reference: with
    one expected value changed, the same variant fails."""
    import kernel_checks

    def changed_case(*args, **kwargs):
        io, expected = tflm_case(*args, **kwargs)
        expected = expected.copy()
        expected.flat[0] ^= 1
        return io, expected

    rng = np.random.default_rng(3)
    shape = draw_conv_shape(conv, rng)
    config = complete(conv.space(host, shape), {})
    assert_ok(run_against_tflm(conv, host, shape, config, tmp_path, np.random.default_rng(4)))
    monkeypatch.setattr(kernel_checks, "tflm_case", changed_case)
    trial = run_against_tflm(conv, host, shape, config, tmp_path, np.random.default_rng(4))
    assert trial.outcome.value == "wrong_answer" and "first at (0, 0, 0)" in trial.error, trial
