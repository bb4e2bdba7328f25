"""CONCATENATION (app/model/ops/concatenation.py): with one quantisation, the numpy reference is
TFLite Micro's concatenation bit for bit; with inputs quantised unlike the output (which
TFLite Micro's kernel refuses), it is TFLite Micro's QUANTIZE of each such input followed by
the concatenation. The generated C (host, the M55 in QEMU) is the reference."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.builder import build_model
from edgetune.model.graph import Operator
from edgetune.model.ops.concatenation import concatenation_params
from op_checks import activation_tensor, assert_same, draw_int8, one_op_graph, run_host, run_target, tflm


def _draw(rng, same: bool):
    rank = int(rng.integers(1, 5))
    base = [int(d) for d in rng.integers(1, 6, size=rank)]
    axis = int(rng.integers(-rank, rank))
    shapes = []
    for _ in range(int(rng.integers(1, 5))):
        shape = list(base)
        shape[axis] = int(rng.integers(1, 6))
        shapes.append(tuple(shape))
    q_out = (float(rng.uniform(0.01, 0.5)), int(rng.integers(-128, 128)))
    quants = [q_out if same or rng.integers(0, 2) else (float(rng.uniform(0.01, 0.5)), int(rng.integers(-128, 128)))
              for _ in shapes]
    return shapes, axis, quants, q_out


def _out_shape(shapes, axis):
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return tuple(out)


def _concat_model(tmp_path, shapes, axis, quants, q_out):
    n = len(shapes)
    tensors = [activation_tensor(i, s, *q) for i, (s, q) in enumerate(zip(shapes, quants))]
    tensors.append(activation_tensor(n, _out_shape(shapes, axis), *q_out))
    return one_op_graph(tmp_path, tensors, "CONCATENATION", tuple(range(n)), (n,), "ConcatenationOptions", {"axis": axis})


def _oracle_model(shapes, axis, quants, q_out) -> bytes:
    """TFLite Micro's QUANTIZE of every input quantised unlike the output, then CONCATENATION."""
    n = len(shapes)
    tensors = [activation_tensor(i, s, *q) for i, (s, q) in enumerate(zip(shapes, quants))]
    operators, concat_inputs = [], []
    for i, (shape, q) in enumerate(zip(shapes, quants)):
        if q == q_out:
            concat_inputs.append(i)
            continue
        tensors.append(activation_tensor(len(tensors), shape, *q_out))
        operators.append(Operator(len(operators), "QUANTIZE", (i,), (len(tensors) - 1,)))
        concat_inputs.append(len(tensors) - 1)
    tensors.append(activation_tensor(len(tensors), _out_shape(shapes, axis), *q_out))
    operators.append(Operator(len(operators), "CONCATENATION", tuple(concat_inputs), (len(tensors) - 1,),
                              "ConcatenationOptions", (("axis", axis),)))
    return build_model(tensors, operators, list(range(n)), [len(tensors) - 1])


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("same", [True, False], ids=["one-quantisation", "rescaled"])
@pytest.mark.parametrize("seed", range(6))
def test_reference_is_tflite_micro(tmp_path, seed, same, edge):
    rng = np.random.default_rng(seed * 4 + 2 * same + (edge == "extreme"))
    for _ in range(4):
        shapes, axis, quants, q_out = _draw(rng, same)
        _, graph = _concat_model(tmp_path, shapes, axis, quants, q_out)
        params = concatenation_params(graph, graph.operators[0])
        xs = [draw_int8(rng, s, edge) for s in shapes]
        assert_same(f"{shapes} axis {axis}", params.reference(*xs), tflm(_oracle_model(shapes, axis, quants, q_out), xs))


def test_c_on_host_and_m55_is_tflite_micro(tmp_path, m55):
    rng = np.random.default_rng(21)
    shapes, axis = [(1, 4, 4, 8), (1, 4, 4, 3), (1, 4, 4, 5)], 3
    quants, q_out = [(0.1, 3), (0.05, -20), (0.1, 3)], (0.1, 3)
    _, graph = _concat_model(tmp_path, shapes, axis, quants, q_out)
    params = concatenation_params(graph, graph.operators[0])
    xs = [draw_int8(rng, s, "random") for s in shapes]
    want = tflm(_oracle_model(shapes, axis, quants, q_out), xs)
    assert_same("reference", params.reference(*xs), want)
    assert_same("C on the host", run_host(params, xs, want.size, tmp_path / "host"), want)
    assert_same("C on the M55", run_target(params, m55, xs, want.shape, tmp_path / "m55"), want)
    shapes, axis = [(2, 3, 4), (2, 1, 4)], 1
    _, graph = _concat_model(tmp_path, shapes, axis, [q_out, q_out], q_out)
    params = concatenation_params(graph, graph.operators[0])
    xs = [draw_int8(rng, s, "extreme") for s in shapes]
    want = tflm(_oracle_model(shapes, axis, [q_out, q_out], q_out), xs)
    assert_same("C on the host, one quantisation", run_host(params, xs, want.size, tmp_path / "host2"), want)


def test_refusals_name_the_operator(tmp_path):
    _, graph = _concat_model(tmp_path, [(1, 2, 3), (1, 3, 3)], 2, [(0.1, 0)] * 2, (0.1, 0))
    with pytest.raises(ModelError, match=r"operator 0 \(CONCATENATION\): input tensor 1 .* does not concatenate"):
        concatenation_params(graph, graph.operators[0])
