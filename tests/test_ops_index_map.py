"""TRANSPOSE, GATHER and RESIZE_NEAREST_NEIGHBOR (codegen/ops/index_map.py), and
RESIZE_BILINEAR (codegen/ops/resize_bilinear.py): the numpy reference is TFLite Micro's output
bit for bit over their constants' cases, and the generated C (host, M55 in QEMU) is too."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.codegen.model import ModelError
from edgetune.codegen.model.builder import constant
from edgetune.codegen.ops import operator_params
from edgetune.codegen.ops.index_map import IndexMapParams
from op_checks import activation_tensor, assert_same, one_op_graph, run_host, run_target, tflm

# (operator, input shape, the constant (input 1), options type, options, output shape)
CASES = [
    ("TRANSPOSE", (1, 4, 5, 6), [0, 3, 1, 2], "TransposeOptions", {}, (1, 6, 4, 5)),
    ("TRANSPOSE", (2, 3, 4), [2, 0, 1], "TransposeOptions", {}, (4, 2, 3)),
    ("TRANSPOSE", (1, 7, 3, 2), [0, 2, 1, 3], "TransposeOptions", {}, (1, 3, 7, 2)),
    ("TRANSPOSE", (2, 3, 2, 2, 3), [4, 3, 2, 1, 0], "TransposeOptions", {}, (3, 2, 2, 3, 2)),
    ("GATHER", (4, 6), [3, 0, 3, 1], "GatherOptions", {"axis": 0}, (4, 6)),
    ("GATHER", (2, 5, 3), [4, 4, 0], "GatherOptions", {"axis": 1}, (2, 3, 3)),
    ("GATHER", (2, 5, 3), [2, 1], "GatherOptions", {"axis": -1}, (2, 5, 2)),
    ("RESIZE_NEAREST_NEIGHBOR", (1, 3, 4, 5), [6, 8], "ResizeNearestNeighborOptions", {}, (1, 6, 8, 5)),
    ("RESIZE_NEAREST_NEIGHBOR", (1, 5, 5, 2), [7, 3], "ResizeNearestNeighborOptions", {"halfPixelCenters": True}, (1, 7, 3, 2)),
    ("RESIZE_NEAREST_NEIGHBOR", (1, 4, 6, 3), [7, 11], "ResizeNearestNeighborOptions", {"alignCorners": True}, (1, 7, 11, 3)),
    ("RESIZE_NEAREST_NEIGHBOR", (2, 3, 3, 1), [5, 5], "ResizeNearestNeighborOptions",
     {"alignCorners": True, "halfPixelCenters": True}, (2, 5, 5, 1)),
]


def _graph(tmp_path, case, in_quant=(0.05, 3), out_quant=(0.05, 3)):
    name, shape, values, options_type, options, out_shape = case
    tensors = [activation_tensor(0, shape, *in_quant), constant(1, "c", np.asarray(values, dtype=np.int32)),
               activation_tensor(2, out_shape, *out_quant)]
    data, graph = one_op_graph(tmp_path, tensors, name, (0, 1), (2,), options_type, options)
    params = operator_params(graph, graph.operators[0])
    assert isinstance(params, IndexMapParams) and params.op == name
    return data, params


def _id(case):
    return f"{case[0]}-{'x'.join(map(str, case[1]))}-{'-'.join(map(str, case[2]))}-{len(case[4])}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_reference_is_tflite_micro(tmp_path, case):
    rng = np.random.default_rng(len(case[1]))
    # the bytes are copied whatever the quantisation: an output quantised otherwise copies too
    for quant in ((0.05, 3), (0.2, -100)):
        data, params = _graph(tmp_path, case, out_quant=quant)
        x = rng.integers(-128, 128, size=case[1], dtype=np.int8)
        want = tflm(data, [x])
        assert want.shape == case[5]
        assert_same(f"{case[0]} {quant}", params.reference(x), want)


def test_the_maps_move_values():
    """Guards the test above: against numpy's own transpose."""
    x = np.arange(120, dtype=np.int64).astype(np.int8).reshape(1, 4, 5, 6)
    moved = IndexMapParams(0, 120, (1, 6, 4, 5), ((0,), (0, 1, 2, 3, 4, 5), (0, 30, 60, 90), (0, 6, 12, 18, 24)))
    assert np.array_equal(moved.reference(x.reshape(-1)), np.transpose(x, (0, 3, 1, 2)))


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[5], CASES[9]], ids=_id)
def test_c_on_host_and_m55_is_tflite_micro(tmp_path, case, m55):
    rng = np.random.default_rng(4)
    data, params = _graph(tmp_path, case)
    x = rng.integers(-128, 128, size=case[1], dtype=np.int8)
    want = tflm(data, [x])
    assert_same("C on the host", run_host(params, [x], want.size, tmp_path / "c"), want)
    assert_same("C on the M55", run_target(params, m55, [x], want.shape, tmp_path / "m55"), want)


@pytest.mark.parametrize("case, culprit", [
    (("TRANSPOSE", (2, 3), [0, 0], "TransposeOptions", {}, (2, 3)), r"permutation \[0, 0\]"),
    (("GATHER", (4, 6), [4], "GatherOptions", {"axis": 0}, (1, 6)), r"index 4 is outside"),
])
def test_refusals_name_the_operator(tmp_path, case, culprit):
    with pytest.raises(ModelError, match=rf"operator 0 \({case[0]}\): .*{culprit}"):
        _graph(tmp_path, case)


def test_tile_is_refused_as_tflite_micro_runs_no_tile(tmp_path):
    """TFLite Micro has no TILE kernel (its interpreter refuses the model), so no deployment
    runs one and edgetune has no oracle for it: refused, naming it."""
    tensors = [activation_tensor(0, (2, 3), 0.05, 0), constant(1, "m", np.array([2, 1], dtype=np.int32)),
               activation_tensor(2, (4, 3), 0.05, 0)]
    _, graph = one_op_graph(tmp_path, tensors, "TILE", (0, 1), (2,), "TileOptions", {})
    with pytest.raises(ModelError, match=r"operator 0 \(TILE\)"):
        operator_params(graph, graph.operators[0])


# --- RESIZE_BILINEAR (codegen/ops/resize_bilinear.py): TFLite Micro's integer interpolation ---
BILINEAR = [((1, 3, 4, 5), (6, 8), {}), ((1, 5, 5, 2), (7, 3), {"halfPixelCenters": True}),
            ((1, 4, 6, 3), (7, 11), {"alignCorners": True}), ((2, 3, 3, 1), (5, 5), {"halfPixelCenters": True}),
            ((1, 8, 8, 4), (3, 5), {}), ((1, 6, 4, 2), (2, 9), {"alignCorners": True}), ((1, 1, 1, 3), (4, 4), {})]


@pytest.mark.parametrize("shape, size, options", BILINEAR, ids=lambda v: str(v).replace(" ", ""))
def test_resize_bilinear_reference_is_tflite_micro(tmp_path, shape, size, options):
    rng = np.random.default_rng(sum(shape) + sum(size))
    out_shape = (shape[0], *size, shape[3])
    tensors = [activation_tensor(0, shape, 0.05, 3), constant(1, "size", np.asarray(size, dtype=np.int32)),
               activation_tensor(2, out_shape, 0.05, 3)]
    data, graph = one_op_graph(tmp_path, tensors, "RESIZE_BILINEAR", (0, 1), (2,), "ResizeBilinearOptions", options)
    params = operator_params(graph, graph.operators[0])
    for edge in ("random", "extreme"):
        x = (rng.integers(-128, 128, size=shape) if edge == "random" else rng.choice([-128, 127], size=shape)).astype(np.int8)
        want = tflm(data, [x])
        assert_same(f"reference ({edge})", params.reference(x), want)
        if edge == "random" and shape[0] == 1:
            assert_same("C on the host", run_host(params, [x], want.size, tmp_path / "c"), want)


def test_resize_bilinear_on_m55_is_tflite_micro(tmp_path, m55):
    shape, size, options = BILINEAR[1]
    rng = np.random.default_rng(6)
    tensors = [activation_tensor(0, shape, 0.05, 3), constant(1, "size", np.asarray(size, dtype=np.int32)),
               activation_tensor(2, (shape[0], *size, shape[3]), 0.05, 3)]
    data, graph = one_op_graph(tmp_path, tensors, "RESIZE_BILINEAR", (0, 1), (2,), "ResizeBilinearOptions", options)
    params = operator_params(graph, graph.operators[0])
    x = rng.integers(-128, 128, size=shape, dtype=np.int8)
    want = tflm(data, [x])
    assert_same("C on the M55", run_target(params, m55, [x], want.shape, tmp_path / "m55"), want)
