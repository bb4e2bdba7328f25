"""STRIDED_SLICE of an activation (app/model/ops/strided_slice.py): the numpy reference is
TFLite Micro's output bit for bit over begin/end/stride cases with every mask, negative
indices and strides, clamping and shrunk axes; the C is too on the host and on the M55; the
converter's GRU (tests/data/models/zoo/gru_unrolled.tflite), which slices its recurrent gates
this way, exports and verifies."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.builder import constant
from edgetune.model.export import export_model
from edgetune.model.operators import operator_params
from edgetune.model.ops import StridedSliceParams
from edgetune.model.verify import verify_model
from edgetune.targets import get_target
from op_checks import activation_tensor, assert_same, draw_int8, one_op_graph, run_host, run_target, tflm

ZOO = Path(__file__).resolve().parent / "data" / "models" / "zoo"

# (input shape, begin, end, strides, options)
CASES = [
    ((1, 48), [0, 16], [1, 32], [1, 1], {}),  # a GRU's middle gate
    ((1, 48), [0, 32], [1, 48], [1, 1], {"beginMask": 1, "endMask": 1}),
    ((3, 5, 7), [0, 1, -3], [3, 5, 7], [1, 2, 1], {}),
    ((3, 5, 7), [2, 4, 6], [0, 0, 0], [-1, -2, -3], {"endMask": 7}),
    ((3, 5, 7), [1, -10, 2], [2, 99, 5], [1, 1, 2], {"shrinkAxisMask": 1}),
    ((2, 3, 4, 5), [0, 0, 1, 0], [2, 3, 3, 5], [1, 1, 1, 2], {"beginMask": 2, "endMask": 8}),
    ((4, 6), [-1, 2], [0, 0], [1, 1], {"shrinkAxisMask": 3}),  # one value
    ((5, 3), [4, 0], [-6, 3], [-1, 1], {}),  # down to the clamp at -1
]


def _graph(tmp_path, case, out_quant=(0.05, 3)):
    shape, begin, end, strides, options = case
    x = np.arange(int(np.prod(shape))).reshape(shape)
    out_shape = _numpy_slice(x, begin, end, strides, options).shape
    tensors = [activation_tensor(0, shape, 0.05, 3), *(constant(k + 1, n, np.asarray(v, dtype=np.int32))
                                                       for k, (n, v) in enumerate((("b", begin), ("e", end), ("s", strides)))),
               activation_tensor(4, out_shape, *out_quant)]
    data, graph = one_op_graph(tmp_path, tensors, "STRIDED_SLICE", (0, 1, 2, 3), (4,), "StridedSliceOptions", options)
    return data, graph, out_shape


def _numpy_slice(x, begin, end, strides, options):
    """The slice in numpy's terms (what the output tensor's shape must be)."""
    index = []
    for axis, (b, e, s) in enumerate(zip(begin, end, strides)):
        if options.get("shrinkAxisMask", 0) >> axis & 1:
            index.append(b)
        else:
            index.append(slice(None if options.get("beginMask", 0) >> axis & 1 else b,
                               None if options.get("endMask", 0) >> axis & 1 else e, s))
    return x[tuple(index)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}-{c[1]}-{c[3]}-{sorted(c[4].items())}")
def test_reference_and_host_c_are_tflite_micro(tmp_path, case):
    rng = np.random.default_rng(len(case[0]) + sum(map(abs, case[3])))
    data, graph, out_shape = _graph(tmp_path, case, out_quant=(0.3, -40))  # bytes copied whatever the quantisation
    params = operator_params(graph, graph.operators[0])
    assert isinstance(params, StridedSliceParams)
    for edge in ("random", "extreme"):
        x = draw_int8(rng, case[0], edge)
        want = tflm(data, [x])
        assert want.shape == out_shape
        assert_same(f"reference ({edge})", params.reference(x), want)
        assert_same(f"numpy's slice ({edge})", _numpy_slice(x, *case[1:]), want)  # guards the oracle's case
        if edge == "random":
            assert_same("C on the host", run_host(params, [x], want.size, tmp_path / "c"), want)


def test_c_on_the_m55_is_tflite_micro(tmp_path, m55):
    rng = np.random.default_rng(30)
    for n, case in enumerate((CASES[3], CASES[5])):
        (tmp_path / str(n)).mkdir()
        data, graph, _ = _graph(tmp_path / str(n), case)
        params = operator_params(graph, graph.operators[0])
        x = draw_int8(rng, case[0], "random")
        want = tflm(data, [x])
        assert_same("C on the M55", run_target(params, m55, [x], want.shape, tmp_path / f"m55-{n}"), want)


@pytest.mark.parametrize("case, culprit", [
    (((3, 5), [0, 0], [3, 5], [1, 0], {}), "stride 0 along axis 1"),
    (((3, 5), [0, 4], [3, 2], [1, 1], {}), "takes nothing along axis 1"),
    (((3, 5), [0, 0], [3, 5], [1, 1], {"ellipsisMask": 1}), "ellipsis"),
])
def test_refusals_name_the_operator(tmp_path, case, culprit):
    shape, begin, end, strides, options = case
    tensors = [activation_tensor(0, shape, 0.05, 3), *(constant(k + 1, n, np.asarray(v, dtype=np.int32))
                                                       for k, (n, v) in enumerate((("b", begin), ("e", end), ("s", strides)))),
               activation_tensor(4, (3, 1), 0.05, 3)]
    _, graph = one_op_graph(tmp_path, tensors, "STRIDED_SLICE", (0, 1, 2, 3), (4,), "StridedSliceOptions", options)
    with pytest.raises(ModelError, match=rf"operator 0 \(STRIDED_SLICE\): .*{culprit}"):
        operator_params(graph, graph.operators[0])
