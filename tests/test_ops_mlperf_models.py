"""The operator library on the committed MLPerf Tiny models (in tests/test_ops_models.py until
that file took the issue 28 models): every operator of the four models
is tuned (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED), folded at export, or in the library;
each library operator, with its real tensors and options, is TFLite Micro bit for bit in the
numpy reference and in its C compiled on the host."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetune.model import TUNED, ModelError
from edgetune.model.graph import read_graph
from edgetune.model.operators import LIBRARY, names, operator_params
from edgetune.model.ops import constant_value, folded_operators
from op_checks import assert_same, draw_int8, operator_model, run_host, tflm

MODELS = Path(__file__).resolve().parent / "data" / "models"
OPERATORS = names(LIBRARY)
NAMES = ["ds_cnn_kws", "mobilenet_v1_025_vww", "resnet8_cifar10", "fc_autoencoder_ad"]


@pytest.mark.parametrize("name", NAMES)
def test_every_operator_is_tuned_folded_or_in_the_library(name):
    graph = read_graph(MODELS / f"{name}.tflite")
    folded = folded_operators(graph)
    left = [f"{op.index} {op.op}" for op in graph.operators
            if op.op not in TUNED and op.op not in OPERATORS and op.index not in folded]
    assert left == []


@pytest.mark.parametrize("name", NAMES[:3])
def test_library_operators_are_tflite_micro(tmp_path, name):
    graph = read_graph(MODELS / f"{name}.tflite")
    rng = np.random.default_rng(len(name))
    checked = 0
    for op in graph.operators:
        if op.op not in OPERATORS or op.index in folded_operators(graph):  # PACK: folded over the Flatten's shape
            continue
        params = operator_params(graph, op)
        values = {i: constant_value(graph, i) for i in op.inputs if i >= 0 and not graph.tensors[i].constant}
        folded = {i: v for i, v in values.items() if v is not None}  # the Flatten chain's shape
        data = operator_model(graph, op, folded)
        shapes = [graph.tensors[i].shape for i in op.inputs if i >= 0 and i not in folded and not graph.tensors[i].constant]
        for edge in ("random", "extreme"):
            xs = [draw_int8(rng, s, edge) for s in shapes]
            want = tflm(data, xs)
            assert_same(f"operator {op.index} ({op.op}), {edge}", params.reference(*xs), want)
        assert [int(np.prod(s)) for s in params.input_shapes] == [x.size for x in xs]
        assert int(np.prod(params.output_shape)) == want.size
        got = run_host(params, xs, want.size, tmp_path / f"op{op.index}")
        assert_same(f"operator {op.index} ({op.op}) in C", got, want)
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("name", NAMES[:3])
def test_operators_run_in_place_where_they_say_they_can(tmp_path, name):
    """An operator whose parameters allow the output to share an input's memory writes TFLite
    Micro's output when it does (its C run with one buffer for both)."""
    graph = read_graph(MODELS / f"{name}.tflite")
    rng = np.random.default_rng(3)
    ran = []
    for op in graph.operators:
        if op.op not in OPERATORS or op.index in folded_operators(graph) or not operator_params(graph, op).in_place:
            continue
        params = operator_params(graph, op)
        values = {i: constant_value(graph, i) for i in op.inputs if i >= 0 and not graph.tensors[i].constant}
        folded = {i: v for i, v in values.items() if v is not None}
        shapes = [graph.tensors[i].shape for i in op.inputs if i >= 0 and i not in folded and not graph.tensors[i].constant]
        xs = [draw_int8(rng, s, "random") for s in shapes]
        want = tflm(operator_model(graph, op, folded), xs)
        for alias in params.in_place:
            got = run_host(params, xs, want.size, tmp_path / f"op{op.index}_{alias}", alias=alias)
            assert_same(f"operator {op.index} ({op.op}) in place of input {alias}", got, want)
        ran.append(op.op)
    assert {"RESHAPE", "SOFTMAX"} <= set(ran)


def test_operators_outside_the_library_are_refused_naming_them():
    graph = read_graph(MODELS / "ds_cnn_kws.tflite")
    with pytest.raises(ModelError, match=r"ds_cnn_kws.tflite: operator 0 \(CONV_2D\) is not in the operator library"):
        operator_params(graph, graph.operators[0])
    with pytest.raises(ModelError, match=r"operator 10 \(SHAPE\) is folded at export"):
        operator_params(graph, graph.operators[10])
