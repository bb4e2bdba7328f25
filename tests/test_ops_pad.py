"""PAD (app/model/ops/pad.py): the numpy reference is TFLite Micro's output bit for bit on
random and saturating inputs over drawn ranks, paddings and zero points; the generated C
(host, the M55 in QEMU) is the reference."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.ops.pad import pad_params
from op_checks import activation_tensor, assert_same, draw_int8, int32_constant, one_op_graph, run_host, run_target, tflm


def _model(tmp_path, shape, pads, zero_in=3, zero_out=-5, scale=0.1):
    out = tuple(n + b + a for n, (b, a) in zip(shape, pads))
    tensors = [activation_tensor(0, shape, scale, zero_in), int32_constant(1, pads), activation_tensor(2, out, scale, zero_out)]
    return one_op_graph(tmp_path, tensors, "PAD", (0, 1), (2,), "PadOptions", {})


def _draw(rng):
    shape = tuple(int(d) for d in rng.integers(1, 7, size=int(rng.integers(1, 5))))
    return shape, [[int(v) for v in rng.integers(0, 4, size=2)] for _ in shape]


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("seed", range(8))
def test_reference_is_tflite_micro(tmp_path, seed, edge):
    rng = np.random.default_rng(seed * 2 + (edge == "extreme"))
    # MobileNet-style explicit padding before a stride-2 convolution, then drawn cases
    for shape, pads in [((1, 8, 8, 4), [[0, 0], [0, 1], [0, 1], [0, 0]]), *(_draw(rng) for _ in range(4))]:
        zero = int(rng.integers(-128, 128))
        data, graph = _model(tmp_path, shape, pads, zero, zero)
        params = pad_params(graph, graph.operators[0])
        x = draw_int8(rng, shape, edge)
        assert_same(f"{shape} pads {pads}", params.reference(x), tflm(data, [x]))


def test_values_are_copied_and_the_padding_is_the_output_zero_point(tmp_path):
    """TFLite Micro does not rescale a PAD whose zero points differ: neither does edgetune."""
    data, graph = _model(tmp_path, (1, 2, 2, 3), [[0, 0], [1, 0], [0, 2], [0, 0]], zero_in=3, zero_out=5)
    params = pad_params(graph, graph.operators[0])
    x = np.arange(12, dtype=np.int8).reshape(1, 2, 2, 3)
    assert params.value == 5
    assert_same("zero points differ", params.reference(x), tflm(data, [x]))


def test_c_on_host_and_m55_is_tflite_micro(tmp_path, m55):
    rng = np.random.default_rng(9)
    for i, (shape, pads) in enumerate([((1, 5, 6, 3), [[0, 0], [2, 1], [1, 3], [0, 0]]), ((4, 3), [[1, 2], [0, 3]])]):
        data, graph = _model(tmp_path, shape, pads)
        params = pad_params(graph, graph.operators[0])
        x = draw_int8(rng, shape, "random")
        want = tflm(data, [x])
        assert_same("reference", params.reference(x), want)
        assert_same("C on the host", run_host(params, [x], want.size, tmp_path / f"h{i}"), want)
    assert_same("C on the M55", run_target(params, m55, [x], want.shape, tmp_path / "m55"), want)


def test_refusals_name_the_operator(tmp_path):
    tensors = [activation_tensor(0, (1, 4), 0.1, 0), int32_constant(1, [[0, 0]]), activation_tensor(2, (1, 4), 0.1, 0)]
    _, graph = one_op_graph(tmp_path, tensors, "PAD", (0, 1), (2,), "PadOptions", {})
    with pytest.raises(ModelError, match=r"operator 0 \(PAD\): paddings tensor 1 has shape \[1, 2\]"):
        pad_params(graph, graph.operators[0])
