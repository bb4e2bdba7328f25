"""LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU and RSQRT (codegen/ops/lookup.py): the numpy
arithmetic is TFLite Micro's output bit for bit on every one of the 256 input values (RSQRT:
every one at or above the zero point, where it is defined), over drawn input
scales and zero points (and alphas); the generated C, a table of those 256 results, runs on
the host and on the M55 in QEMU (scalar and the Helium gather), equal to TFLite Micro."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.codegen.model import ModelError
from edgetune.codegen.ops import operator_params
from edgetune.codegen.ops.lookup import LookupOp
from op_checks import activation_tensor, assert_same, one_op_graph, run_host, run_target, tflm

ALL_VALUES = np.arange(-128, 128, dtype=np.int8)
# operator, its options table and options, and the output quantisation TFLite requires (None: drawn)
OPERATORS = {
    "LOGISTIC": ("", {}, (1 / 256, -128)),
    "TANH": ("", {}, (1 / 128, 0)),
    "HARD_SWISH": ("HardSwishOptions", {}, None),
    "LEAKY_RELU": ("LeakyReluOptions", {"alpha": 0.2}, None),
    "RSQRT": ("", {}, None),
}


def valid(name, x, zero):
    """The inputs TFLite Micro takes: RSQRT fails below its input's zero point (a negative
    number), so those are raised to it."""
    return np.maximum(x, np.int8(zero)) if name == "RSQRT" else x


def _graph(tmp_path, name, shape, in_scale, in_zero, out=None, options=None):
    options_type, default_options, fixed_out = OPERATORS[name]
    out_scale, out_zero = out or fixed_out or (in_scale * 1.3, -7)
    tensors = [activation_tensor(0, shape, in_scale, in_zero), activation_tensor(1, shape, out_scale, out_zero)]
    data, graph = one_op_graph(tmp_path, tensors, name, (0,), (1,), options_type,
                               default_options if options is None else options)
    params = operator_params(graph, graph.operators[0])
    assert isinstance(params, LookupOp) and params.op == name
    return data, params


def _draws(rng, name, n):
    """Input quantisations a converter gives (scales over three decades, any zero point),
    plus the edges: zero point -128 and 127, a scale so small nothing saturates, one so
    large almost everything does."""
    for k in range(n):
        scale = float(np.exp(rng.uniform(np.log(0.002), np.log(0.5))))
        zero = int(rng.integers(-128, 128))
        if k == 0:
            scale, zero = 0.0009, -128
        if k == 1:
            scale, zero = 0.9, 127
        out = None
        if OPERATORS[name][2] is None:  # drawn output quantisation
            out = (scale * float(np.exp(rng.uniform(np.log(0.25), np.log(4)))), int(rng.integers(-128, 128)))
            if name == "HARD_SWISH":  # its output multiplier must stay below one: s_out >= s_in / 128
                out = (max(out[0], scale / 100), out[1])
        yield scale, zero, out


@pytest.mark.parametrize("name", list(OPERATORS))
def test_every_input_value_is_tflite_micro(tmp_path, name):
    rng = np.random.default_rng(len(name))
    for k, (scale, zero, out) in enumerate(_draws(rng, name, 12)):
        options = {"alpha": float(rng.choice([0.01, 0.1, 0.3, 1.0, 2.5]))} if name == "LEAKY_RELU" else None
        data, params = _graph(tmp_path, name, (1, 256), scale, zero, out, options)
        x = valid(name, ALL_VALUES, zero)
        assert_same(f"{name} draw {k} (scale {scale:g}, zero {zero}, out {out}, {options})",
                    params.reference(x), tflm(data, [x.reshape(1, 256)]))


def test_the_operators_are_not_the_identity(tmp_path):
    """Guards the test above: each table is a real function of its input (not all saturated,
    not the input copied), shaped as its operator is."""
    x = ALL_VALUES.astype(float)
    for name in OPERATORS:
        _, params = _graph(tmp_path, name, (1, 256), 0.05, 0, out=(0.05, 0) if OPERATORS[name][2] is None else None)
        y = np.array(params.table())
        assert len(set(y.tolist())) > 25, name
        real_in = 0.05 * x
        real_out = {"LOGISTIC": 1 / (1 + np.exp(-real_in)), "TANH": np.tanh(real_in),
                    "HARD_SWISH": real_in * np.clip(real_in + 3, 0, 6) / 6,
                    "LEAKY_RELU": np.where(real_in >= 0, real_in, 0.2 * real_in),
                    "RSQRT": 1 / np.sqrt(np.maximum(real_in, 1e-9))}[name]
        if name == "RSQRT":
            y, real_out = y[x > 0], real_out[x > 0]  # defined above zero; 0 gives the largest output
        scale, zero = OPERATORS[name][2] or (0.05, 0)
        representable = np.clip(real_out, (-128 - zero) * scale, (127 - zero) * scale)
        assert np.abs((y - zero) * scale - representable).max() <= 1.01 * scale, name


@pytest.mark.parametrize("name", list(OPERATORS))
def test_c_on_host_is_tflite_micro(tmp_path, name):
    rng = np.random.default_rng(5)
    shape = (3, 7, 5)
    scale, zero, out = next(_draws(rng, name, 3))
    data, params = _graph(tmp_path, name, shape, 0.04, 3, out)
    x = valid(name, rng.integers(-128, 128, size=shape, dtype=np.int8), 3)
    want = tflm(data, [x])
    assert_same("C on the host", run_host(params, [x], want.size, tmp_path / "c"), want)
    assert_same("in place", run_host(params, [x], want.size, tmp_path / "p", alias=0), want)


@pytest.mark.matrix
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("name", list(OPERATORS))
def test_helium_c_on_m55_is_tflite_micro(tmp_path, m55, name, compiler):
    """Every value, in element counts with and without a tail of the 16-lane step."""
    rng = np.random.default_rng(len(name) + len(compiler))
    for elements in (256, 16 * 9 + 7, 5):
        data, params = _graph(tmp_path, name, (elements,), 0.03, -9, (0.05, 4) if OPERATORS[name][2] is None else None)
        source = params.render("et_lut", target=m55)
        assert "vldrbq_gather_offset_u8" in source and ("vctp8q" in source) == (elements % 16 != 0)
        x = valid(name, ALL_VALUES if elements == 256 else rng.integers(-128, 128, size=elements, dtype=np.int8), -9)
        want = tflm(data, [x])
        got = run_target(params, m55, [x], want.shape, tmp_path / f"m{elements}", compiler)
        assert_same(f"{name}, {elements} values, Helium ({compiler})", got, want)


def test_plain_c_on_targets_without_helium(tmp_path, m55, m4):
    _, params = _graph(tmp_path, "TANH", (40,), 0.03, 0)
    plain = params.render("et_lut")
    assert params.render("et_lut", target=m4) == plain and "arm_mve.h" not in plain
    assert "arm_mve.h" in params.render("et_lut", target=m55)


def test_c_on_m4_is_tflite_micro(tmp_path, m4):
    data, params = _graph(tmp_path, "LOGISTIC", (1, 256), 0.06, 10)
    x = ALL_VALUES.reshape(1, 256)
    want = tflm(data, [x])
    assert_same("LOGISTIC on the M4", run_target(params, m4, [x], want.shape, tmp_path / "m4"), want)


@pytest.mark.parametrize("name, out, culprit", [
    ("LOGISTIC", (1 / 128, 0), "needs 0.00390625 and -128"),
    ("TANH", (1 / 256, -128), "needs 0.0078125 and 0"),
    ("HARD_SWISH", (0.0001, 0), "output multiplier below one"),
])
def test_refusals_name_the_operator_and_what_it_needs(tmp_path, name, out, culprit):
    with pytest.raises(ModelError, match=rf"operator 0 \({name}\):.*{culprit}"):
        _graph(tmp_path, name, (1, 8), 0.05, 0, out)
