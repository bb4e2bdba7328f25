"""SOFTMAX (app/model/ops/softmax.py): the numpy reference of TFLite's integer softmax is TFLite
Micro's output bit for bit on random and saturating inputs over drawn input scales, zero
points, betas and row lengths; the generated C (host, the M55 in QEMU) is the reference."""
from __future__ import annotations

import math

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.ops import softmax
from edgetune.model.ops.softmax import softmax_params
from op_checks import activation_tensor, assert_same, draw_int8, one_op_graph, run_host, run_target, tflm


def _model(tmp_path, shape, s_in, z_in, beta, out=(1 / 256, -128)):
    tensors = [activation_tensor(0, shape, s_in, z_in), activation_tensor(1, shape, *out)]
    return one_op_graph(tmp_path, tensors, "SOFTMAX", (0,), (1,), "SoftmaxOptions", {"beta": beta})


def _draw(rng):
    shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(0, 3)))) + (int(rng.integers(1, 300)),)
    s_in = float(np.exp(rng.uniform(np.log(0.001), np.log(2.0))))
    beta = float(rng.choice([1.0, 0.5, 2.0, float(rng.uniform(0.05, 4.0))]))
    return shape, s_in, int(rng.integers(-128, 128)), beta


def test_constants_are_what_they_say():
    # exp(-2^k) in Q0.31 as TFLite's quantised softmax uses them, from math, not copied.
    assert dict(softmax.BARREL)[0] == round(math.exp(-1) * 2**31) == 790015084
    assert softmax.EXP_MINUS_EIGHTH == 1895147668 and softmax.ONE_THIRD == 715827883
    assert (softmax.FORTY_EIGHT_SEVENTEENTHS, softmax.MINUS_THIRTY_TWO_SEVENTEENTHS) == (1515870810, -1010580540)


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("seed", range(8))
def test_reference_is_tflite_micro(tmp_path, seed, edge):
    rng = np.random.default_rng(seed * 2 + (edge == "extreme"))
    # DS-CNN's classifier: 12 classes from scale 0.0357, zero point -4
    cases = [((1, 12), 0.035720717161893845, -4, 1.0)] + [_draw(rng) for _ in range(6)]
    for shape, s_in, z_in, beta in cases:
        data, graph = _model(tmp_path, shape, s_in, z_in, beta)
        params = softmax_params(graph, graph.operators[0])
        x = draw_int8(rng, shape, edge)
        assert_same(f"{shape} scale {s_in:g} beta {beta:g}", params.reference(x), tflm(data, [x]))


def test_c_on_host_and_m55_is_tflite_micro(tmp_path, m55):
    rng = np.random.default_rng(11)
    for i in range(4):
        shape, s_in, z_in, beta = ((2, 12), 0.0357, -4, 1.0) if i == 0 else _draw(rng)
        data, graph = _model(tmp_path, shape, s_in, z_in, beta)
        params = softmax_params(graph, graph.operators[0])
        x = draw_int8(rng, shape, "extreme" if i == 3 else "random")
        want = tflm(data, [x])
        assert_same("reference", params.reference(x), want)
        assert_same(f"C on the host, {shape}", run_host(params, [x], want.size, tmp_path / f"h{i}"), want)
        assert_same(f"C on the host in place, {shape}", run_host(params, [x], want.size, tmp_path / f"a{i}", alias=0), want)
        if i < 2:
            assert_same("C on the M55", run_target(params, m55, [x], want.shape, tmp_path / f"m55_{i}"), want)


def test_refusals_name_the_operator(tmp_path):
    _, graph = _model(tmp_path, (1, 10), 0.1, 0, 1.0, out=(0.1, 0))
    with pytest.raises(ModelError, match=r"operator 0 \(SOFTMAX\): output tensor 1 .* TFLite's int8 softmax"):
        softmax_params(graph, graph.operators[0])
    _, graph = _model(tmp_path, (1, 10), 1e-9, 0, 1.0)
    with pytest.raises(ModelError, match=r"operator 0 \(SOFTMAX\): beta 1 times the input scale 1e-09 is too small"):
        softmax_params(graph, graph.operators[0])


def test_rows_tflite_micro_cannot_run_give_the_reference_in_c(tmp_path):
    """A row whose exps sum to 512 or more needs a rounding shift over 31 bits, where TFLite
    Micro's interpreter aborts (so no oracle here). Every output is then under half a step
    (at most 1/512 = 0.5/256, and exp(0) is just below one): -128, in the C as in numpy."""
    for depth in (512, 1500):
        shape = (1, depth)
        _, graph = _model(tmp_path, shape, 0.01, 0, 1.0)
        params = softmax_params(graph, graph.operators[0])
        x = np.full(shape, 5, dtype=np.int8)
        want = params.reference(x)
        assert set(want.reshape(-1).tolist()) == {-128}
        assert_same(f"{depth} values", run_host(params, [x], x.size, tmp_path / f"long{depth}"), want)
