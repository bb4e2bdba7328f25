"""QUANTIZE int8 -> int8 (app/model/ops/quantize.py): the numpy reference is TFLite Micro's
requantisation bit for bit on random and saturating inputs over drawn scales (up and down)
and zero points; the generated C (host, the M55 in QEMU) is the reference."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.graph import Tensor
from edgetune.model.ops.quantize import quantize_params
from op_checks import activation_tensor, assert_one_input_everywhere, assert_same, draw_int8, one_op_graph, tflm


def _model(tmp_path, shape, q_in, q_out):
    tensors = [activation_tensor(0, shape, *q_in), activation_tensor(1, shape, *q_out)]
    return one_op_graph(tmp_path, tensors, "QUANTIZE", (0,), (1,))


def _quant(rng):
    return float(np.exp(rng.uniform(np.log(1e-3), np.log(1.0)))), int(rng.integers(-128, 128))


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("seed", range(10))
def test_reference_is_tflite_micro(tmp_path, seed, edge):
    rng = np.random.default_rng(seed * 2 + (edge == "extreme"))
    shape = tuple(int(d) for d in rng.integers(1, 9, size=int(rng.integers(1, 5))))
    q_in = _quant(rng)
    for q_out in (_quant(rng), (q_in[0], int(rng.integers(-128, 128))), (q_in[0] * 3, q_in[1])):
        data, graph = _model(tmp_path, shape, q_in, q_out)
        params = quantize_params(graph, graph.operators[0])
        x = draw_int8(rng, shape, edge)
        assert_same(f"{q_in} -> {q_out}", params.reference(x), tflm(data, [x]))


def test_c_on_host_and_m55_is_tflite_micro(tmp_path, m55):
    rng = np.random.default_rng(4)
    data, graph = _model(tmp_path, (3, 50), (0.02, 5), (0.07, -100))
    params = quantize_params(graph, graph.operators[0])
    assert_one_input_everywhere(params, data, draw_int8(rng, (3, 50), "random"), m55, tmp_path)


def test_float_input_is_refused_naming_the_operator(tmp_path):
    tensors = [Tensor(0, "x", (1, 4), "float32"), activation_tensor(1, (1, 4), 0.1, 0)]
    _, graph = one_op_graph(tmp_path, tensors, "QUANTIZE", (0,), (1,))
    with pytest.raises(ModelError, match=r"operator 0 \(QUANTIZE\): input tensor 0 \(x\) is float32"):
        quantize_params(graph, graph.operators[0])
