"""RELU and RELU6 on their own (app/model/ops/relu.py, the registry's worked example in
docs/extending.md): the numpy reference is TFLite Micro's output bit for bit over drawn
scales and zero points, random and saturating inputs; the C on the host and on the M55 in
QEMU is the reference; a model of them exports and verifies bit-exact on the M55."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError, load_model
from edgetune.model.builder import build_model, constant
from edgetune.model.export import export_model
from edgetune.model.graph import Operator, Quantization, Tensor
from edgetune.model.operators import operator_params
from edgetune.model.verify import verify_model
from model_files import write
from op_checks import activation_tensor, assert_one_input_everywhere, assert_same, draw_int8, one_op_graph, tflm


def _model(tmp_path, op, shape, q_in, q_out):
    tensors = [activation_tensor(0, shape, *q_in), activation_tensor(1, shape, *q_out)]
    return one_op_graph(tmp_path, tensors, op, (0,), (1,))


def _quant(rng):
    return float(np.exp(rng.uniform(np.log(1e-3), np.log(1.0)))), int(rng.integers(-128, 128))


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("seed", range(8))
def test_relu_reference_is_tflite_micro(tmp_path, seed, edge):
    rng = np.random.default_rng(seed * 2 + (edge == "extreme"))
    shape = tuple(int(d) for d in rng.integers(1, 9, size=int(rng.integers(1, 5))))
    q_in = _quant(rng)
    for q_out in (_quant(rng), q_in, (q_in[0] / 3, 127), (q_in[0] * 2, -128)):
        data, graph = _model(tmp_path, "RELU", shape, q_in, q_out)
        params = operator_params(graph, graph.operators[0])
        x = draw_int8(rng, shape, edge)
        assert_same(f"RELU {q_in} -> {q_out}", params.reference(x), tflm(data, [x]))


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("seed", range(8))
def test_relu6_reference_is_tflite_micro(tmp_path, seed, edge):
    """Scales from 6/255 (six inside int8) to 12 (six is half a step: roundf takes it away
    from zero, to 1, where round-half-to-even would give 0), zero points that put the clamp
    at either end."""
    rng = np.random.default_rng(100 + seed * 2 + (edge == "extreme"))
    shape = tuple(int(d) for d in rng.integers(1, 9, size=int(rng.integers(1, 5))))
    for q in (_quant(rng), (6.0 / 255, -128), (6.0 / 200 + 1e-7, 100), (0.5, -3), (12.0, 5)):
        data, graph = _model(tmp_path, "RELU6", shape, q, q)
        params = operator_params(graph, graph.operators[0])
        x = draw_int8(rng, shape, edge)
        assert_same(f"RELU6 {q}", params.reference(x), tflm(data, [x]))


@pytest.mark.parametrize("op", ["RELU", "RELU6"])
def test_c_on_host_and_m55_is_tflite_micro(tmp_path, m55, op):
    rng = np.random.default_rng(7)
    q_out = (0.03, -20) if op == "RELU" else (0.04, 9)
    data, graph = _model(tmp_path, op, (3, 50), (0.04, 9), q_out)
    params = operator_params(graph, graph.operators[0])
    assert_one_input_everywhere(params, data, draw_int8(rng, (3, 50), "random"), m55, tmp_path)


@pytest.mark.parametrize("edge", ["random", "extreme"])
def test_relu6_between_two_quantisations_clamps_in_the_inputs_as_tflite_micro(tmp_path, edge):
    """TensorFlow's converter writes such a RELU6 after a CONCATENATION (the model zoo's
    op_relu_relu6); TFLite Micro runs it, clamping in the input's quantisation without
    rescaling, and so does edgetune."""
    rng = np.random.default_rng(5)
    for q_in, q_out in (((0.1, 0), (0.2, 0)), ((0.05, -20), (0.02, 30)), ((0.3, 100), (0.03, -128))):
        data, graph = _model(tmp_path, "RELU6", (2, 40), q_in, q_out)
        params = operator_params(graph, graph.operators[0])
        x = draw_int8(rng, (2, 40), edge)
        assert_same(f"RELU6 {q_in} -> {q_out}", params.reference(x), tflm(data, [x]))


def test_a_model_of_them_loads_as_library_layers(tmp_path):
    _, graph = _model(tmp_path, "RELU", (2, 8), (0.1, 3), (0.05, -128))
    model = load_model(graph.path)
    assert [(layer.op, layer.kernel) for layer in model.layers] == [("RELU", None)]


@pytest.mark.qemu
def test_a_model_with_them_exports_and_verifies_bit_exact_on_the_m55(tmp_path, m55):
    """FULLY_CONNECTED -> RELU (requantising) -> RELU6: the module is TFLite Micro's, whole
    and layer by layer, on the M55 in QEMU."""
    rng = np.random.default_rng(11)
    q_fc, q_relu = Quantization((0.08,), (-5,)), Quantization((0.05,), (-128,))
    tensors = [Tensor(0, "x", (1, 16), "int8", Quantization((0.02,), (3,))),
               constant(1, "w", rng.integers(-127, 128, (8, 16)).astype(np.int8), Quantization((0.01,), (0,))),
               constant(2, "b", rng.integers(-500, 500, 8).astype(np.int32), Quantization((0.0002,), (0,))),
               Tensor(3, "fc", (1, 8), "int8", q_fc), Tensor(4, "relu", (1, 8), "int8", q_relu),
               Tensor(5, "relu6", (1, 8), "int8", q_relu)]
    ops = [Operator(0, "FULLY_CONNECTED", (0, 1, 2), (3,), "FullyConnectedOptions"),
           Operator(1, "RELU", (3,), (4,)), Operator(2, "RELU6", (4,), (5,))]
    path = write(tmp_path, "relus.tflite", build_model(tensors, ops, [0], [5]))
    export_model(path, m55, None, tmp_path / "module")
    outcome = verify_model(tmp_path / "module", m55, 3, seed=2, layers=True)
    assert outcome.ok, [i.problem for i in outcome.inferences if i.problem]
    assert len(outcome.inferences) == 4  # three random inputs and the saturating one
