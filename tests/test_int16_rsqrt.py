"""RSQRT on int16 (app/model/ops/rsqrt16.py): TFLite Micro has an int16 RSQRT (zero points
0); the numpy reference equals it bit for bit on every positive int16 value and 0, over drawn
scales; the C (the inverse-square-root multiplier per value) on the host, on the M55 and on
the M4; zero points other than 0 are refused as TFLite Micro refuses them."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.operators import operator_params
from edgetune.model.ops.rsqrt16 import Rsqrt16Params
from edgetune.model.oracle import run_tflm
from edgetune.targets import get_target

from int16_models import int16_tensor, run_host_typed, run_target_typed
from op_checks import assert_same, one_op_graph

DEFINED = np.arange(0, 1 << 15, dtype=np.int16)  # TFLite Micro fails below 0


def _graph(tmp_path, shape, s_in, s_out, z_in=0, z_out=0):
    t = [int16_tensor(0, shape, s_in, zero=z_in), int16_tensor(1, shape, s_out, zero=z_out)]
    data, graph = one_op_graph(tmp_path, t, "RSQRT", (0,), (1,))
    return data, graph


def _params(tmp_path, shape, s_in, s_out) -> tuple[bytes, Rsqrt16Params]:
    data, graph = _graph(tmp_path, shape, s_in, s_out)
    params = operator_params(graph, graph.operators[0])
    assert isinstance(params, Rsqrt16Params)
    return data, params


@pytest.mark.slow
def test_every_defined_value_is_tflite_micro(tmp_path):
    """All 32,768 values from 0 (TFLite Micro's largest output) to 32767, at one scale pair."""
    data, params = _params(tmp_path, (DEFINED.size,), 1 / 4096, 1 / 512)
    (want,) = run_tflm(data, [DEFINED])
    assert len(set(want.tolist())) > 1000  # a real function, not saturated
    assert_same("every value", params.reference(DEFINED), want)


def test_drawn_scales_are_tflite_micro(tmp_path):
    """Scales over five decades, each on the extremes (0, 1, 2, 32767) and drawn values."""
    rng = np.random.default_rng(16)
    for k in range(10):
        s_in = float(np.exp(rng.uniform(np.log(1e-5), np.log(1.0))))
        s_out = float(np.exp(rng.uniform(np.log(1e-4), np.log(0.1))))
        x = np.concatenate([[0, 1, 2, 3, 32766, 32767], rng.integers(0, 1 << 15, size=400)]).astype(np.int16)
        data, params = _params(tmp_path, (x.size,), s_in, s_out)
        (want,) = run_tflm(data, [x])
        assert_same(f"draw {k} ({s_in:g} -> {s_out:g})", params.reference(x), want)


def _cases(rng, n):
    x = np.concatenate([[0, 1, 2, 32767, -1, -32768], rng.integers(0, 1 << 15, size=n - 6)]).astype(np.int16)
    return x, np.maximum(x, 0)  # the C's input; what TFLite Micro takes (it fails below 0)


def test_c_on_host_is_tflite_micro(tmp_path):
    rng = np.random.default_rng(3)
    x, defined = _cases(rng, 3 * 7 * 5)
    data, params = _params(tmp_path, (3, 7, 5), 0.0007, 0.003)
    (want,) = run_tflm(data, [defined.reshape(3, 7, 5)])
    want = np.where(x.reshape(want.shape) < 0, np.int16(32767), want)  # below 0: the largest, as at 0
    assert_same("C on the host", run_host_typed(params, [x.reshape(3, 7, 5)], want.shape, "int16", tmp_path / "h"),
                want)
    assert_same("in place", run_host_typed(params, [x.reshape(3, 7, 5)], want.shape, "int16", tmp_path / "a", alias=0),
                want)


@pytest.mark.parametrize("target_name", ["cortex-m55", "cortex-m4"])
def test_c_on_targets_is_tflite_micro(tmp_path, target_name, request):
    request.getfixturevalue("m55" if target_name == "cortex-m55" else "m4")
    rng = np.random.default_rng(4)
    x, defined = _cases(rng, 203)
    data, params = _params(tmp_path, (203,), 0.0002, 0.01)
    (want,) = run_tflm(data, [defined])
    want = np.where(x < 0, np.int16(32767), want)
    got = run_target_typed(params, get_target(target_name), [x], want.shape, "int16", tmp_path / target_name)
    assert_same(f"C on the {target_name}", got, want)


@pytest.mark.parametrize("z_in, z_out, role", [(5, 0, "input"), (0, -7, "output")])
def test_zero_points_other_than_0_are_refused_as_tflite_micro_refuses_them(tmp_path, z_in, z_out, role):
    _, graph = _graph(tmp_path, (1, 8), 0.001, 0.002, z_in, z_out)
    with pytest.raises(ModelError, match=rf"operator 0 \(RSQRT\): {role} tensor .* zero point"):
        operator_params(graph, graph.operators[0])
