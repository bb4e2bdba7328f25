"""Writing .tflite flatbuffers with the schema bindings' object API (ModelT, SubGraphT,
TensorT, OperatorT, BufferT, QuantizationParametersT, `Pack`, file identifier "TFL3").

The same frozen values the reader returns (graph.Tensor, graph.Operator) describe what to
write, so a layer read from a model can be written back as a one-operator model (the
oracle, oracle.py), and tests build small models without TensorFlow.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .graph import Operator, Tensor
from edgetune.codegen.tflite_schema import FILE_IDENTIFIER, SCHEMA_VERSION, ModelError, builtin_code, schema, tensor_type_code

# The largest builtin code the deprecated int8 field can hold (schema.fbs: codes above it
# are written as PLACEHOLDER_FOR_GREATER_OP_CODES there and in full in builtin_code).
DEPRECATED_CODE_LIMIT = 127


def constant(index: int, name: str, array: np.ndarray, quantization=None) -> Tensor:
    """A constant tensor holding `array` (its dtype and shape), as graph.Tensor."""
    return Tensor(index, name, tuple(int(d) for d in array.shape), np.dtype(array.dtype).name, quantization,
                  np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes())


def _tensor(s, t: Tensor, buffer: int):
    out = s.TensorT()
    out.name = t.name
    out.shape = list(t.shape)
    out.type = tensor_type_code(t.dtype)
    out.buffer = buffer
    if t.signature is not None:
        out.shapeSignature = list(t.signature)
    out.isVariable = bool(t.variable)
    if t.quantization is not None:
        q = s.QuantizationParametersT()
        q.scale = [float(v) for v in t.quantization.scales]
        q.zeroPoint = [int(v) for v in t.quantization.zero_points]
        q.quantizedDimension = int(t.quantization.axis)
        out.quantization = q
    return out


def _options(s, op: Operator):
    if not op.options_type:
        return 0, None
    try:
        options = getattr(s, op.options_type + "T")()
        kind = int(getattr(s.BuiltinOptions, op.options_type))
    except AttributeError:
        raise ModelError(f"operator {op.index} ({op.op}): unknown options table {op.options_type!r}") from None
    for key, value in op.options:
        if not hasattr(options, key):
            raise ModelError(f"operator {op.index} ({op.op}): {op.options_type} has no field {key!r}")
        setattr(options, key, list(value) if isinstance(value, tuple) else value)
    return kind, options


def _buffer(s, data: bytes | None):
    buffer = s.BufferT()
    if data:
        buffer.data = np.frombuffer(data, dtype=np.uint8)
    return buffer


def _signature(s, names: Sequence[str], inputs: Sequence[int], outputs: Sequence[int]):
    """The "serving_default" signature naming the inputs, then the outputs, in order."""
    maps = []
    for name, tensor in zip(names, (*inputs, *outputs)):
        entry = s.TensorMapT()
        entry.name, entry.tensorIndex = name, int(tensor)
        maps.append(entry)
    signature = s.SignatureDefT()
    signature.signatureKey, signature.subgraphIndex = "serving_default", 0
    signature.inputs, signature.outputs = maps[:len(inputs)], maps[len(inputs):]
    return signature


def build_model(tensors: Sequence[Tensor], operators: Sequence[Operator], inputs: Sequence[int],
                outputs: Sequence[int], description: str = "edgetune", io_names: Sequence[str] = ()) -> bytes:
    """A single-subgraph TFLite model. Tensors are written in the order given (their
    `index` fields are not read); each constant gets its own buffer after the empty
    buffer 0 the format reserves. `io_names`, one per input then output: a signature
    naming them, as the converter writes one."""
    s = schema()
    buffers = [s.BufferT()]
    written = []
    for t in tensors:
        if t.constant:
            buffers.append(_buffer(s, t.data))
        written.append(_tensor(s, t, len(buffers) - 1 if t.constant else 0))
    names = list(dict.fromkeys((op.op, op.custom_code if op.op == "CUSTOM" else "") for op in operators))
    codes = []
    for name, custom in names:
        code = s.OperatorCodeT()
        code.builtinCode = builtin_code(name)
        code.deprecatedBuiltinCode = min(code.builtinCode, DEPRECATED_CODE_LIMIT)
        code.version = 1
        if custom:
            code.customCode = custom
        codes.append(code)
    ops = []
    for op in operators:
        o = s.OperatorT()
        o.opcodeIndex = names.index((op.op, op.custom_code if op.op == "CUSTOM" else ""))
        o.inputs, o.outputs = list(op.inputs), list(op.outputs)
        o.builtinOptionsType, o.builtinOptions = _options(s, op)
        if op.op == "CUSTOM" and op.custom_options:
            o.customOptions = list(op.custom_options)  # customOptionsFormat FLEXBUFFERS (0), the only one
        ops.append(o)
    sub = s.SubGraphT()
    sub.tensors, sub.operators, sub.inputs, sub.outputs = written, ops, list(inputs), list(outputs)
    sub.name = "main"
    model = s.ModelT()
    model.version, model.operatorCodes, model.subgraphs = SCHEMA_VERSION, codes, [sub]
    model.buffers, model.description = buffers, description
    if io_names:
        model.signatureDefs = [_signature(s, io_names, inputs, outputs)]
    import flatbuffers  # a dependency of tflite-micro, there whenever the schema is

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())
