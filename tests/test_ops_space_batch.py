"""SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND on their own (app/model/ops/space_batch.py): the
numpy reference is TFLite Micro's output bit for bit over blocks, paddings, crops, 3-D and 4-D
tensors, batches and odd sizes, on random and saturating inputs; the generated C on the host,
the M55, the M4 and the A53 is too; bad constants are refused naming the operator."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.operators import operator_params
from edgetune.model.ops import BatchToSpaceParams, SpaceToBatchParams
from op_checks import (activation_tensor, assert_same, draw_int8, int32_constant, one_op_graph, run_host, run_target,
                       tflm)

# (operator, input shape, block, paddings or crops, output shape)
CASES = [
    ("SPACE_TO_BATCH_ND", (1, 5, 7, 3), [2, 3], [[1, 2], [3, 2]], (6, 4, 4, 3)),
    ("SPACE_TO_BATCH_ND", (2, 5, 7, 3), [2, 3], [[1, 2], [3, 2]], (12, 4, 4, 3)),
    ("SPACE_TO_BATCH_ND", (1, 9, 9, 5), [2, 2], [[2, 3], [2, 3]], (4, 7, 7, 5)),  # a dilated 3x3 SAME conv's
    ("SPACE_TO_BATCH_ND", (1, 6, 4, 1), [3, 1], [[0, 0], [0, 0]], (3, 2, 4, 1)),
    ("SPACE_TO_BATCH_ND", (2, 7, 5), [3], [[1, 1]], (6, 3, 5)),
    ("SPACE_TO_BATCH_ND", (1, 3, 2, 2), [2, 4], [[1, 0], [3, 3]], (8, 2, 2, 2)),  # a block column with no input
    ("BATCH_TO_SPACE_ND", (6, 4, 4, 3), [2, 3], [[1, 2], [3, 2]], (1, 5, 7, 3)),
    ("BATCH_TO_SPACE_ND", (12, 4, 4, 3), [2, 3], [[0, 1], [1, 0]], (2, 7, 11, 3)),
    ("BATCH_TO_SPACE_ND", (4, 5, 5, 7), [2, 2], [[0, 1], [0, 1]], (1, 9, 9, 7)),
    ("BATCH_TO_SPACE_ND", (6, 3, 5), [3], [[1, 1]], (2, 7, 5)),
    ("SPACE_TO_BATCH_ND", (1, 5, 4, 3), [1, 1], [[2, 1], [0, 3]], (1, 8, 7, 3)),  # the rewrite's padding copy
]
OPTIONS = {"SPACE_TO_BATCH_ND": "SpaceToBatchNDOptions", "BATCH_TO_SPACE_ND": "BatchToSpaceNDOptions"}


def _graph(tmp_path, case, in_quant=(0.05, 3), out_quant=(0.05, 3)):
    op, shape, block, edges, out = case
    tensors = [activation_tensor(0, shape, *in_quant), int32_constant(1, block), int32_constant(2, edges),
               activation_tensor(3, out, *out_quant)]
    return one_op_graph(tmp_path, tensors, op, (0, 1, 2), (3,), OPTIONS[op], {})


def _id(case):
    return f"{case[0][:5]}-{'x'.join(map(str, case[1]))}-b{'x'.join(map(str, case[2]))}-{np.ravel(case[3]).tolist()}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_reference_is_tflite_micro(tmp_path, case):
    rng = np.random.default_rng(len(case[1]) + sum(case[1]))
    # the bytes are moved whatever the quantisation; the padding is TFLite Micro's 0 whatever the zero point
    for quant in ((0.05, 3), (0.2, -128), (0.1, 127)):
        data, graph = _graph(tmp_path, case, in_quant=quant, out_quant=quant)
        params = operator_params(graph, graph.operators[0])
        assert isinstance(params, (SpaceToBatchParams, BatchToSpaceParams)) and params.op == case[0]
        for edge in ("random", "extreme"):
            x = draw_int8(rng, case[1], edge)
            want = tflm(data, [x])
            assert want.shape == case[4]
            assert_same(f"{case[0]} {quant} {edge}", params.reference(x), want)


def test_space_to_batch_moves_strided_pixels():
    """Guards the test above: batch sh * bw + sw holds rows sh::bh and columns sw::bw."""
    x = np.arange(-60, 60, dtype=np.int8).reshape(1, 4, 6, 5)
    moved = SpaceToBatchParams(0, (1, 4, 6, 5), (2, 3), ((0, 0), (0, 0))).reference(x)
    assert moved.shape == (6, 2, 2, 5)
    for sh in range(2):
        for sw in range(3):
            assert np.array_equal(moved[sh * 3 + sw], x[0, sh::2, sw::3])


@pytest.mark.parametrize("case", [CASES[n] for n in (1, 2, 3, 4, 5, 7, 9, 10)], ids=_id)
def test_c_on_host_is_tflite_micro(tmp_path, case):
    rng = np.random.default_rng(5)
    data, graph = _graph(tmp_path, case, (0.05, -128), (0.05, -128))
    params = operator_params(graph, graph.operators[0])
    x = draw_int8(rng, case[1], "random")
    want = tflm(data, [x])
    assert_same("C on the host", run_host(params, [x], want.size, tmp_path / "c"), want)


ON_TARGETS = [pytest.param(case, target, id=f"{target}-{_id(case)}",
                            marks=() if (n, target) == (0, "m55") else pytest.mark.slow)  # one in the default tier
              for n, case in enumerate([CASES[2], CASES[8], CASES[10]]) for target in ("m55", "m4", "a53")]


@pytest.mark.parametrize("case, target", ON_TARGETS)
def test_c_on_m55_m4_and_a53_is_tflite_micro(tmp_path, case, target, request):
    rng = np.random.default_rng(6)
    data, graph = _graph(tmp_path, case, (0.05, 17), (0.05, 17))
    params = operator_params(graph, graph.operators[0])
    x = draw_int8(rng, case[1], "random")
    want = tflm(data, [x])
    core = request.getfixturevalue(target)
    assert_same(f"C on the {core.name}", run_target(params, core, [x], want.shape, tmp_path / target), want)


@pytest.mark.parametrize("case, culprit", [
    (("SPACE_TO_BATCH_ND", (1, 5, 7, 3), [2, 3], [[1, 1], [3, 2]], (6, 4, 4, 3)), r"padded height 5 \+ 1 \+ 1"),
    (("SPACE_TO_BATCH_ND", (1, 5, 7, 3), [2, 3], [[1, 2], [3, 2]], (6, 4, 5, 3)), r"has shape \[6, 4, 5, 3\]"),
    (("SPACE_TO_BATCH_ND", (1, 5, 7, 3), [0, 3], [[1, 2], [3, 2]], (6, 4, 4, 3)), r"block shape \[0, 3\]"),
    (("BATCH_TO_SPACE_ND", (5, 4, 4, 3), [2, 3], [[0, 0], [0, 0]], (1, 8, 12, 3)), r"batch 5 is not a multiple"),
    (("BATCH_TO_SPACE_ND", (6, 4, 4, 3), [2, 3], [[-1, 0], [0, 0]], (1, 9, 12, 3)), r"negative crops"),
    (("BATCH_TO_SPACE_ND", (6, 4, 4, 3), [2, 3], [[4, 4], [0, 0]], (1, 1, 12, 3)), r"leave no output"),
    (("BATCH_TO_SPACE_ND", (6, 4, 4, 3), [2, 3], [[0, 0]], (1, 8, 12, 3)), r"must be int32 \[2\] and \[2, 2\]"),
])
def test_refusals_name_the_operator(tmp_path, case, culprit):
    _, graph = _graph(tmp_path, case)
    with pytest.raises(ModelError, match=rf"operator 0 \({case[0]}\): .*{culprit}"):
        operator_params(graph, graph.operators[0])
