"""One-operator TFLite models: read back with the schema bindings, shapes and quantisation
as TFLite expects them; shape parsing of the NPU operators."""
from __future__ import annotations

import numpy as np
import pytest
from ethosu.vela.tflite.BuiltinOperator import BuiltinOperator
from ethosu.vela.tflite.Model import Model
from ethosu.vela.tflite.Padding import Padding
from ethosu.vela.tflite.TensorType import TensorType
from ethosu.vela.tflite.Conv2DOptions import Conv2DOptions

from edgetune.npu import NPU_OPERATORS, PAD_SAME, NpuOperatorError, build_model, get_npu_operator


def read(op_name: str, shape: str, seed: int = 0):
    op = get_npu_operator(op_name)
    parsed = op.parse_shape(shape)
    data = build_model(op.model(parsed, np.random.default_rng(seed)))
    model = Model.GetRootAsModel(data, 0)
    return op, parsed, data, model, model.Subgraphs(0)


def tensor_shape(graph, index):
    return tuple(graph.Tensors(index).ShapeAsNumpy())


def builtins(model, graph):
    return [model.OperatorCodes(graph.Operators(i).OpcodeIndex()).BuiltinCode() for i in range(graph.OperatorsLength())]


def test_fully_connected_model():
    op, shape, data, model, graph = read("matmul_s8", "m=3,n=5,k=7")
    assert data[4:8] == b"TFL3" and model.Version() == 3
    assert builtins(model, graph) == [BuiltinOperator.FULLY_CONNECTED]
    fc = graph.Operators(0)
    inputs = list(fc.InputsAsNumpy())
    assert [tensor_shape(graph, i) for i in inputs] == [(3, 7), (5, 7), (5,)]
    assert tensor_shape(graph, fc.Outputs(0)) == (3, 5) == op.output_shape(shape)
    weights, bias = graph.Tensors(inputs[1]), graph.Tensors(inputs[2])
    assert weights.Type() == TensorType.INT8 and bias.Type() == TensorType.INT32
    assert len(model.Buffers(weights.Buffer()).DataAsNumpy()) == 5 * 7
    assert len(model.Buffers(bias.Buffer()).DataAsNumpy()) == 5 * 4
    # Bias scale = input scale x weight scale (TFLite's int8 convention), zero point 0.
    s_in = graph.Tensors(inputs[0]).Quantization().Scale(0)
    s_w = weights.Quantization().Scale(0)
    assert bias.Quantization().Scale(0) == pytest.approx(s_in * s_w, rel=1e-6)
    assert weights.Quantization().ZeroPoint(0) == 0


def test_conv_model_is_per_channel():
    op, shape, _, model, graph = read("conv2d_s8", "h=9,w=7,cin=3,cout=6,kh=3,kw=3,stride=2,pad=same,dilation=1")
    assert shape["pad"] == PAD_SAME
    assert builtins(model, graph) == [BuiltinOperator.CONV_2D]
    conv = graph.Operators(0)
    inputs = list(conv.InputsAsNumpy())
    assert tensor_shape(graph, inputs[1]) == (6, 3, 3, 3)
    quant = graph.Tensors(inputs[1]).Quantization()
    assert quant.ScaleLength() == 6 and quant.QuantizedDimension() == 0
    assert graph.Tensors(inputs[2]).Quantization().ScaleLength() == 6
    assert tensor_shape(graph, conv.Outputs(0)) == (1, 5, 4, 6) == op.output_shape(shape)
    options = Conv2DOptions()
    table = conv.BuiltinOptions()
    options.Init(table.Bytes, table.Pos)
    assert options.Padding() == Padding.SAME and options.StrideH() == 2


def test_depthwise_weights_and_explicit_padding_become_a_pad_operator():
    op, shape, _, model, graph = read("dwconv2d_s8", "h=8,w=8,c=5,kh=3,kw=3,stride=1,pad=2,dilation=1")
    # pad=2 around a 3x3 kernel is not what SAME gives: a PAD operator goes first.
    assert builtins(model, graph) == [BuiltinOperator.PAD, BuiltinOperator.DEPTHWISE_CONV_2D]
    dw = graph.Operators(1)
    inputs = list(dw.InputsAsNumpy())
    assert tensor_shape(graph, inputs[0]) == (1, 12, 12, 5)
    assert tensor_shape(graph, inputs[1]) == (1, 3, 3, 5)
    assert graph.Tensors(inputs[1]).Quantization().QuantizedDimension() == 3
    assert tensor_shape(graph, dw.Outputs(0)) == (1, 10, 10, 5) == op.output_shape(shape)
    # pad=1 with a 3x3 stride-1 kernel is exactly SAME: no PAD operator.
    _, _, _, model, graph = read("dwconv2d_s8", "h=8,w=8,c=5,kh=3,kw=3,stride=1,pad=1,dilation=1")
    assert builtins(model, graph) == [BuiltinOperator.DEPTHWISE_CONV_2D]


def test_models_are_seeded():
    _, _, a, _, _ = read("conv2d_s8", NPU_OPERATORS["conv2d_s8"].example, seed=1)
    _, _, b, _, _ = read("conv2d_s8", NPU_OPERATORS["conv2d_s8"].example, seed=1)
    _, _, c, _, _ = read("conv2d_s8", NPU_OPERATORS["conv2d_s8"].example, seed=2)
    assert a == b and a != c


@pytest.mark.parametrize("op, shape, culprit", [
    ("conv2d_s8", "h=8,w=8,cin=3,cout=4,kh=3,kw=3,stride=1,pad=1", "'dilation'"),
    ("conv2d_s8", "h=8,w=8,cin=3,cout=4,kh=3,kw=3,stride=1,pad=-2,dilation=1", "pad='-2'"),
    ("conv2d_s8", "h=2,w=8,cin=3,cout=4,kh=3,kw=3,stride=1,pad=0,dilation=1", "kh=3"),
    ("dwconv2d_s8", "h=8,w=8,c=0,kh=3,kw=3,stride=1,pad=0,dilation=1", "c='0'"),
    ("matmul_s8", "m=1,n=1,k=1,q=2", "'q'"),
    ("matmul_s8", "m=1,n=same,k=1", "n='same'"),
])
def test_bad_shapes_name_the_key(op, shape, culprit):
    with pytest.raises(NpuOperatorError, match=culprit.replace("(", r"\(")):
        get_npu_operator(op).parse_shape(shape)


def test_unknown_operator():
    with pytest.raises(NpuOperatorError, match="softmax"):
        get_npu_operator("softmax")
