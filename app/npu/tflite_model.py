"""One-operator int8 TFLite models, built with `flatbuffers` and the TFLite schema bindings
Vela ships (`ethosu.vela.tflite`), without TensorFlow.

A model is a list of tensors (shape, int8/int32, quantisation, optional constant data) and a
list of operators over them; `build_model` serialises it as a TFLite flatbuffer (schema
version 3, file identifier "TFL3"). Field names follow TFLite's schema.fbs as generated into
the bindings (Model, SubGraph, Tensor, Operator, OperatorCode, Buffer, QuantizationParameters).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import numpy as np

from edgetune.errors import EdgetuneError

TFLITE_SCHEMA_VERSION = 3
FILE_IDENTIFIER = b"TFL3"


class ModelBuildError(EdgetuneError, ValueError):
    """The model description is inconsistent (shapes, types, quantisation)."""


@dataclass(frozen=True)
class Quant:
    """Affine quantisation: real = scale * (q - zero_point); per-axis when len(scale) > 1."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int = 0


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # "int8" or "int32"
    quant: Quant | None = None
    data: np.ndarray | None = field(default=None, compare=False, hash=False)  # constants only


@dataclass(frozen=True)
class OperatorSpec:
    """A builtin operator: its BuiltinOperator name, options table name and option fields."""

    builtin: str  # e.g. "CONV_2D"
    inputs: tuple[int, ...]  # tensor indices (-1: optional input absent)
    outputs: tuple[int, ...]
    options: str = ""  # e.g. "Conv2DOptions"; "" for operators without options
    option_fields: tuple[tuple[str, object], ...] = ()  # ("Padding", "VALID"), ("StrideW", 1), ...


@dataclass(frozen=True)
class ModelSpec:
    tensors: tuple[TensorSpec, ...]
    operators: tuple[OperatorSpec, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    description: str = "edgetune"


def _binding(name: str):
    """One module of the TFLite schema bindings shipped with Vela (an optional dependency)."""
    try:
        return importlib.import_module(f"ethosu.vela.tflite.{name}")
    except ImportError as exc:
        raise ModelBuildError(f"the NPU support needs ethos-u-vela (pip install 'edgetune[npu]'): {exc}") from None


_DTYPES = {"int8": (np.int8, "INT8"), "int32": (np.int32, "INT32")}


def _enum(module: str, member: str) -> int:
    enum_class = getattr(_binding(module), module)
    try:
        return int(getattr(enum_class, member))
    except AttributeError:
        raise ModelBuildError(f"TFLite schema has no {module}.{member}") from None


def _check(spec: ModelSpec) -> None:
    count = len(spec.tensors)
    for t in spec.tensors:
        if t.dtype not in _DTYPES:
            raise ModelBuildError(f"tensor {t.name}: dtype {t.dtype!r} is not int8 or int32")
        if t.data is not None and tuple(t.data.shape) != tuple(t.shape):
            raise ModelBuildError(f"tensor {t.name}: data shape {t.data.shape} is not {t.shape}")
        if t.quant is not None and len(t.quant.scale) != len(t.quant.zero_point):
            raise ModelBuildError(f"tensor {t.name}: {len(t.quant.scale)} scales but {len(t.quant.zero_point)} zero points")
    for op in spec.operators:
        for index in (*op.inputs, *op.outputs):
            if not -1 <= index < count:
                raise ModelBuildError(f"operator {op.builtin}: tensor index {index} out of range")


def _scalar_vector(builder, start_fn, values, prepend: str = "PrependInt32") -> int:
    start_fn(builder, len(values))
    for value in reversed(values):
        getattr(builder, prepend)(value)
    return builder.EndVector()


def _offset_vector(builder, start_fn, offsets) -> int:
    start_fn(builder, len(offsets))
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def _buffers(builder, spec: ModelSpec) -> tuple[list[int], list[int]]:
    """The model's buffers and, per tensor, the index of its buffer. Index 0 is the empty
    sentinel every TFLite file starts with; each constant tensor's data follows."""
    Buffer = _binding("Buffer")
    buffer_data: list[bytes] = [b""]
    tensor_buffer: list[int] = []
    for t in spec.tensors:
        if t.data is None:
            tensor_buffer.append(0)
        else:
            np_type = _DTYPES[t.dtype][0]
            # TFLite buffers are little-endian.
            buffer_data.append(np.ascontiguousarray(t.data, dtype=np.dtype(np_type).newbyteorder("<")).tobytes())
            tensor_buffer.append(len(buffer_data) - 1)
    buffers = []
    for data in buffer_data:
        data_vec = builder.CreateByteVector(data) if data else None
        Buffer.BufferStart(builder)
        if data_vec is not None:
            Buffer.BufferAddData(builder, data_vec)
        buffers.append(Buffer.BufferEnd(builder))
    return buffers, tensor_buffer


def _quantization(builder, quant: Quant) -> int:
    QP = _binding("QuantizationParameters")
    scale = _scalar_vector(builder, QP.QuantizationParametersStartScaleVector, list(map(float, quant.scale)),
                           "PrependFloat32")
    zero = _scalar_vector(builder, QP.QuantizationParametersStartZeroPointVector, list(map(int, quant.zero_point)),
                          "PrependInt64")
    QP.QuantizationParametersStart(builder)
    QP.QuantizationParametersAddScale(builder, scale)
    QP.QuantizationParametersAddZeroPoint(builder, zero)
    QP.QuantizationParametersAddQuantizedDimension(builder, quant.axis)
    return QP.QuantizationParametersEnd(builder)


def _tensor(builder, t: TensorSpec, buffer_index: int) -> int:
    Tensor = _binding("Tensor")
    name = builder.CreateString(t.name)
    shape = _scalar_vector(builder, Tensor.TensorStartShapeVector, list(t.shape))
    quant = _quantization(builder, t.quant) if t.quant is not None else None
    Tensor.TensorStart(builder)
    Tensor.TensorAddShape(builder, shape)
    Tensor.TensorAddType(builder, _enum("TensorType", _DTYPES[t.dtype][1]))
    Tensor.TensorAddBuffer(builder, buffer_index)
    Tensor.TensorAddName(builder, name)
    if quant is not None:
        Tensor.TensorAddQuantization(builder, quant)
    return Tensor.TensorEnd(builder)


def _operator_code(builder, builtin: str) -> int:
    OperatorCode = _binding("OperatorCode")
    code = _enum("BuiltinOperator", builtin)
    OperatorCode.OperatorCodeStart(builder)
    # Codes below 127 also go into the deprecated int8 field, which older readers use.
    OperatorCode.OperatorCodeAddDeprecatedBuiltinCode(builder, min(code, 127))
    OperatorCode.OperatorCodeAddBuiltinCode(builder, code)
    OperatorCode.OperatorCodeAddVersion(builder, 1)
    return OperatorCode.OperatorCodeEnd(builder)


def _operator_options(builder, op: OperatorSpec) -> int:
    """The options table of `op` (its `options` names the table, e.g. Conv2DOptions)."""
    module = _binding(op.options)
    getattr(module, f"{op.options}Start")(builder)
    for field_name, value in op.option_fields:
        if isinstance(value, str):
            # An enum member: the field is named after its enum (Padding VALID), except
            # the activation, whose enum is ActivationFunctionType.
            enum = "ActivationFunctionType" if field_name == "FusedActivationFunction" else field_name
            value = _enum(enum, value)
        add = getattr(module, f"{op.options}Add{field_name}", None)
        if add is None:
            raise ModelBuildError(f"{op.options} has no field {field_name}")
        add(builder, value)
    return getattr(module, f"{op.options}End")(builder)


def _operator(builder, op: OperatorSpec, opcode_index: int) -> int:
    Operator = _binding("Operator")
    options = _operator_options(builder, op) if op.options else None
    inputs = _scalar_vector(builder, Operator.OperatorStartInputsVector, list(op.inputs))
    outputs = _scalar_vector(builder, Operator.OperatorStartOutputsVector, list(op.outputs))
    Operator.OperatorStart(builder)
    Operator.OperatorAddOpcodeIndex(builder, opcode_index)
    Operator.OperatorAddInputs(builder, inputs)
    Operator.OperatorAddOutputs(builder, outputs)
    if options is not None:
        Operator.OperatorAddBuiltinOptionsType(builder, _enum("BuiltinOptions", op.options))
        Operator.OperatorAddBuiltinOptions(builder, options)
    return Operator.OperatorEnd(builder)


def _subgraph(builder, spec: ModelSpec, tensors: list[int], operators: list[int]) -> int:
    SubGraph = _binding("SubGraph")
    tensor_vec = _offset_vector(builder, SubGraph.SubGraphStartTensorsVector, tensors)
    input_vec = _scalar_vector(builder, SubGraph.SubGraphStartInputsVector, list(spec.inputs))
    output_vec = _scalar_vector(builder, SubGraph.SubGraphStartOutputsVector, list(spec.outputs))
    op_vec = _offset_vector(builder, SubGraph.SubGraphStartOperatorsVector, operators)
    sg_name = builder.CreateString("main")
    SubGraph.SubGraphStart(builder)
    SubGraph.SubGraphAddTensors(builder, tensor_vec)
    SubGraph.SubGraphAddInputs(builder, input_vec)
    SubGraph.SubGraphAddOutputs(builder, output_vec)
    SubGraph.SubGraphAddOperators(builder, op_vec)
    SubGraph.SubGraphAddName(builder, sg_name)
    return SubGraph.SubGraphEnd(builder)


def _model(builder, spec: ModelSpec, codes: list[int], subgraph: int, buffers: list[int]) -> int:
    Model = _binding("Model")
    code_vec = _offset_vector(builder, Model.ModelStartOperatorCodesVector, codes)
    sg_vec = _offset_vector(builder, Model.ModelStartSubgraphsVector, [subgraph])
    buf_vec = _offset_vector(builder, Model.ModelStartBuffersVector, buffers)
    description = builder.CreateString(spec.description)
    Model.ModelStart(builder)
    Model.ModelAddVersion(builder, TFLITE_SCHEMA_VERSION)
    Model.ModelAddOperatorCodes(builder, code_vec)
    Model.ModelAddSubgraphs(builder, sg_vec)
    Model.ModelAddDescription(builder, description)
    Model.ModelAddBuffers(builder, buf_vec)
    return Model.ModelEnd(builder)


def build_model(spec: ModelSpec) -> bytes:
    """Serialise `spec` as a TFLite flatbuffer. The tables are written in a fixed order
    (buffers, tensors, operator codes, operators, the subgraph, the model), so the same spec
    always gives the same bytes."""
    _check(spec)
    try:
        import flatbuffers
    except ImportError as exc:
        raise ModelBuildError(f"the NPU support needs flatbuffers (pip install 'edgetune[npu]'): {exc}") from None
    builder = flatbuffers.Builder(4096)
    buffers, tensor_buffer = _buffers(builder, spec)
    tensors = [_tensor(builder, t, buffer_index) for t, buffer_index in zip(spec.tensors, tensor_buffer)]
    builtins = list(dict.fromkeys(op.builtin for op in spec.operators))
    codes = [_operator_code(builder, builtin) for builtin in builtins]
    operators = [_operator(builder, op, builtins.index(op.builtin)) for op in spec.operators]
    subgraph = _subgraph(builder, spec, tensors, operators)
    builder.Finish(_model(builder, spec, codes, subgraph, buffers), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())
