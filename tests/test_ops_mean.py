"""MEAN (app/model/ops/mean.py): the numpy reference is TFLite Micro's output bit for bit on
random and saturating inputs over drawn shapes, axes, keep_dims and quantisations (equal and
different in and out); the generated C (host, the M55 in QEMU) is the reference."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.ops.mean import mean_params
from op_checks import activation_tensor, assert_same, draw_int8, int32_constant, one_op_graph, run_host, run_target, tflm


def _draw_case(rng):
    rank = int(rng.integers(1, 5))
    shape = tuple(int(d) for d in rng.integers(1, 9, size=rank))
    axes = sorted({int(a) for a in rng.integers(-rank, rank, size=int(rng.integers(1, rank + 1)))})
    return shape, axes, bool(rng.integers(0, 2))


def _model(tmp_path, shape, axes, keep, quant):
    (s_in, z_in), (s_out, z_out) = quant
    rank = len(shape)
    resolved = {a % rank for a in axes}
    out = tuple(1 if d in resolved else n for d, n in enumerate(shape)) if keep else \
        tuple(n for d, n in enumerate(shape) if d not in resolved)
    tensors = [activation_tensor(0, shape, s_in, z_in), int32_constant(1, axes), activation_tensor(2, out, s_out, z_out)]
    return one_op_graph(tmp_path, tensors, "MEAN", (0, 1), (2,), "ReducerOptions", {"keepDims": keep})


def _quant(rng, same: bool):
    q_in = (float(rng.uniform(0.005, 0.2)), int(rng.integers(-128, 128)))
    return q_in, q_in if same else (float(rng.uniform(0.005, 0.2)), int(rng.integers(-128, 128)))


# MobileNet's and the converter's global average pool as MEAN: [1, h, w, c] over axes 1, 2.
GLOBAL_POOL = [((1, 6, 6, 32), [1, 2], True), ((1, 3, 3, 64), [1, 2], False), ((1, 7, 5, 8), [2, 1], True)]


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("same", [True, False], ids=["same-quant", "rescaled"])
@pytest.mark.parametrize("seed", range(6))
def test_reference_is_tflite_micro(tmp_path, seed, same, edge):
    rng = np.random.default_rng(100 * seed + 2 * same + (edge == "extreme"))
    cases = [GLOBAL_POOL[seed % 3]] + [_draw_case(rng) for _ in range(4)]
    for shape, axes, keep in cases:
        data, graph = _model(tmp_path, shape, axes, keep, _quant(rng, same))
        params = mean_params(graph, graph.operators[0])
        x = draw_int8(rng, shape, edge)
        assert_same(f"{shape} axes {axes} keep_dims {keep}", params.reference(x), tflm(data, [x]))


def test_c_on_host_and_m55_is_tflite_micro(tmp_path, m55):
    rng = np.random.default_rng(5)
    for i, (shape, axes, keep) in enumerate([*GLOBAL_POOL, ((2, 3, 4, 5), [0, 3], False), ((4, 6), [-1], True)]):
        data, graph = _model(tmp_path, shape, axes, keep, _quant(rng, i % 2 == 0))
        params = mean_params(graph, graph.operators[0])
        x = draw_int8(rng, shape, "random")
        want = tflm(data, [x])
        assert_same("reference", params.reference(x), want)
        assert_same(f"C on the host, {shape} axes {axes}", run_host(params, [x], want.size, tmp_path / f"h{i}"), want)
    assert_same("C on the M55", run_target(params, m55, [x], want.shape, tmp_path / "m55"), want)


def test_refusals_name_the_operator(tmp_path):
    data, graph = _model(tmp_path, (1, 4, 4, 3), [5], False, ((0.1, 0), (0.1, 0)))
    with pytest.raises(ModelError, match=r"operator 0 \(MEAN\): axes \[5\] are not axes of a 4-D input"):
        mean_params(graph, graph.operators[0])
