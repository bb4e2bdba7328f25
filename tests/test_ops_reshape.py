"""RESHAPE and the folding of the converter's Flatten chain (app/model/ops/reshape.py, fold.py):
on the committed MLPerf Tiny models the SHAPE/STRIDED_SLICE/PACK operators fold to the shape
TFLite Micro computes, the RESHAPE takes it, and the folded tail of DS-CNN (pool, Flatten
chain) computed by the library is TFLite Micro's run of the same operators; RESHAPE's C
(host, the M55 in QEMU) copies; what cannot be folded is refused naming the operator."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Tensor, read_graph
from edgetune.model.operators import operator_params
from edgetune.model.ops import constant_value, folded_operators
from edgetune.model.ops.reshape import reshape_params
from op_checks import (activation_tensor, assert_same, draw_int8, int32_constant, one_op_graph, run_host, run_target,
                       tflm)

MODELS = Path(__file__).resolve().parent / "data" / "models"
CLASSIFIERS = {"ds_cnn_kws": 64, "mobilenet_v1_025_vww": 256, "resnet8_cifar10": 64}


@pytest.mark.parametrize("name", list(CLASSIFIERS))
def test_flatten_chain_folds_to_the_reshape_shape(name):
    graph = read_graph(MODELS / f"{name}.tflite")
    folded = folded_operators(graph)
    assert sorted(graph.operators[i].op for i in folded) == ["PACK", "SHAPE", "STRIDED_SLICE"]
    (reshape,) = [op for op in graph.operators if op.op == "RESHAPE"]
    assert constant_value(graph, reshape.inputs[1]).tolist() == [1, CLASSIFIERS[name]]
    params = reshape_params(graph, reshape)
    assert (params.elements, params.out_shape) == (CLASSIFIERS[name], (1, CLASSIFIERS[name]))


def test_autoencoder_has_nothing_to_fold():
    assert folded_operators(read_graph(MODELS / "fc_autoencoder_ad.tflite")) == frozenset()


def test_ds_cnn_tail_is_tflite_micro(tmp_path):
    """The pool and the whole Flatten chain of DS-CNN run in TFLite Micro (the model's own
    tensors and operators 9 to 13) against the library's pool then reshape."""
    graph = read_graph(MODELS / "ds_cnn_kws.tflite")
    ops = graph.operators[9:14]
    assert [op.op for op in ops] == ["AVERAGE_POOL_2D", "SHAPE", "STRIDED_SLICE", "PACK", "RESHAPE"]
    used = sorted({i for op in ops for i in (*op.inputs, *op.outputs) if i >= 0})
    renumber = {old: new for new, old in enumerate(used)}
    tensors = [Tensor(renumber[i], t.name, t.shape, t.dtype, t.quantization, t.data, None)
               for i, t in ((i, graph.tensors[i]) for i in used)]
    operators = [Operator(k, op.op, tuple(renumber[i] for i in op.inputs), tuple(renumber[i] for i in op.outputs),
                          op.options_type, op.options) for k, op in enumerate(ops)]
    data = build_model(tensors, operators, [renumber[ops[0].inputs[0]]], [renumber[ops[-1].outputs[0]]])
    pool, reshape = operator_params(graph, ops[0]), operator_params(graph, ops[-1])
    rng = np.random.default_rng(0)
    for edge in ("random", "extreme", "random"):
        x = draw_int8(rng, pool.input_shape, edge)
        want = tflm(data, [x])
        assert want.shape == reshape.out_shape
        assert_same(edge, reshape.reference(pool.reference(x)), want)


def test_c_copies_on_host_and_m55(tmp_path, m55):
    tensors = [activation_tensor(0, (1, 3, 3, 5), 0.1, 2), int32_constant(1, [-1, 15]),
               activation_tensor(2, (3, 15), 0.1, 2)]
    data, graph = one_op_graph(tmp_path, tensors, "RESHAPE", (0, 1), (2,))
    params = reshape_params(graph, graph.operators[0])
    x = draw_int8(np.random.default_rng(1), (1, 3, 3, 5), "random")
    want = tflm(data, [x])
    assert_same("reference", params.reference(x), want)
    assert_same("C on the host", run_host(params, [x], want.size, tmp_path / "host"), want)
    assert_same("C on the M55", run_target(params, m55, [x], want.shape, tmp_path / "m55"), want)


def test_a_shape_computed_at_run_time_is_refused_naming_the_operator(tmp_path):
    tensors = [activation_tensor(0, (1, 4, 4), 0.1, 0), Tensor(1, "new_shape", (2,), "int32"),
               activation_tensor(2, (1, 16), 0.1, 0)]
    _, graph = one_op_graph(tmp_path, tensors, "RESHAPE", (0, 1), (2,))
    with pytest.raises(ModelError, match=r"operator 0 \(RESHAPE\): its shape input \(tensor 1, new_shape\) is computed "
                                         r"at run time"):
        reshape_params(graph, graph.operators[0])


def test_a_shape_that_is_not_the_output_is_refused(tmp_path):
    tensors = [activation_tensor(0, (1, 4, 4), 0.1, 0), int32_constant(1, [2, -1]), activation_tensor(2, (1, 16), 0.1, 0)]
    _, graph = one_op_graph(tmp_path, tensors, "RESHAPE", (0, 1), (2,))
    with pytest.raises(ModelError, match=r"operator 0 \(RESHAPE\): the new shape \[2, 8\] is not the output tensor's"):
        reshape_params(graph, graph.operators[0])


# STRIDED_SLICE on a shape: (begin, end, strides, begin mask, end mask, shrink-axis mask)
SLICES = [([0], [1], [1], 0, 0, 1), ([1], [0], [1], 0, 1, 0), ([-3], [-1], [1], 0, 0, 0), ([0], [4], [2], 0, 0, 0),
          ([3], [0], [-1], 0, 1, 0), ([2], [3], [1], 1, 0, 0), ([-1], [0], [1], 0, 0, 1)]


@pytest.mark.parametrize("begin,end,strides,begin_mask,end_mask,shrink", SLICES)
def test_folded_shape_slices_are_tflite_micro(tmp_path, begin, end, strides, begin_mask, end_mask, shrink):
    """SHAPE then STRIDED_SLICE then PACK with a constant, run in TFLite Micro (the model's
    output is the packed int32 tensor), against the folded value."""
    if shrink:
        sliced, other, packed = (), constant(6, "seven", np.array(7, dtype=np.int32)), (2,)
    else:
        picked = range(4)[slice(None if begin_mask else begin[0], None if end_mask else end[0], strides[0])]
        sliced, other, packed = (len(picked),), int32_constant(6, [7] * len(picked)), (2, len(picked))
    tensors = [activation_tensor(0, (1, 6, 5, 3), 0.1, 0), Tensor(1, "shape", (4,), "int32"), int32_constant(2, begin),
               int32_constant(3, end), int32_constant(4, strides), Tensor(5, "sliced", sliced, "int32"), other,
               Tensor(7, "packed", packed, "int32")]
    operators = [Operator(0, "SHAPE", (0,), (1,), "ShapeOptions", (("outType", 2),)),
                 Operator(1, "STRIDED_SLICE", (1, 2, 3, 4), (5,), "StridedSliceOptions",
                          (("beginMask", begin_mask), ("endMask", end_mask), ("shrinkAxisMask", shrink))),
                 Operator(2, "PACK", (5, 6), (7,), "PackOptions", (("valuesCount", 2), ("axis", 0)))]
    data = build_model(tensors, operators, [0], [7])
    path = tmp_path / "chain.tflite"
    path.write_bytes(data)
    graph = read_graph(path)
    assert folded_operators(graph) == frozenset({0, 1, 2})
    want = tflm(data, [np.zeros((1, 6, 5, 3), dtype=np.int8)])
    assert constant_value(graph, 7).tolist() == want.tolist()
