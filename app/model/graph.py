"""A TFLite model's graph as frozen values: tensors (shape, type, quantisation, constant
data) and operators (builtin name, inputs, outputs, options), read from the flatbuffer
through the schema bindings (schema.py), never by hand.

Only what the file says is checked here (that it is a TFLite flatbuffer, that its indices
point somewhere, that it has one subgraph, that its operators run in the order they are
stored); what edgetune can run is layers.py's question.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgetune.codegen.tflite_schema import FILE_IDENTIFIER, SCHEMA_VERSION, ModelError, builtin_names, schema, tensor_type_names

# numpy types of the tensor types whose constant data edgetune reads.
NUMPY_TYPES = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
               "float32": np.float32, "float16": np.float16, "float64": np.float64, "bool": np.bool_}
# What the bindings raise on bytes that are not a whole flatbuffer: reads past the end
# (struct.error, IndexError, a short numpy view: ValueError), garbage offsets and strings.
_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError, MemoryError)


@dataclass(frozen=True)
class Quantization:
    """Affine quantisation, real = scale * (q - zero_point): one scale and zero point per
    tensor, or (per-axis) one per slice along `axis`."""

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int = 0

    @property
    def per_axis(self) -> bool:
        return len(self.scales) > 1


@dataclass(frozen=True)
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str  # "int8", "int32", "float32", ... (TensorType, lower case)
    quantization: Quantization | None = None
    data: bytes | None = field(default=None, repr=False)  # a constant's contents as stored (little-endian)
    signature: tuple[int, ...] | None = None  # shape_signature: -1 marks a dynamic dimension
    variable: bool = False  # is_variable: state an operator keeps between invocations (an LSTM's)

    @property
    def constant(self) -> bool:
        return self.data is not None

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.elements * np.dtype(NUMPY_TYPES.get(self.dtype, np.int8)).itemsize

    def array(self) -> np.ndarray:
        """A constant's data as a read-only array of its shape."""
        if self.data is None:
            raise ModelError(f"tensor {self.index} ({self.name}) has no constant data")
        values = np.frombuffer(self.data, dtype=np.dtype(NUMPY_TYPES[self.dtype]).newbyteorder("<"))
        if values.size != self.elements:
            raise ModelError(f"tensor {self.index} ({self.name}): {values.size} stored values for shape "
                             f"{list(self.shape)}")
        return values.astype(NUMPY_TYPES[self.dtype]).reshape(self.shape)


@dataclass(frozen=True)
class Operator:
    index: int  # position in subgraph 0
    op: str  # builtin name, "CONV_2D" ("CUSTOM" for custom operators)
    inputs: tuple[int, ...]  # tensor indices, -1 for an absent optional input
    outputs: tuple[int, ...]
    options_type: str = ""  # the BuiltinOptions table's name, "Conv2DOptions" ("" without options)
    options: tuple[tuple[str, object], ...] = ()  # its fields as the object API names them
    custom_code: str = ""
    custom_options: bytes = field(default=b"", repr=False)  # a CUSTOM operator's options as stored

    def option(self, name: str, default=None):
        return dict(self.options).get(name, default)


@dataclass(frozen=True)
class Graph:
    path: str
    tensors: tuple[Tensor, ...]
    operators: tuple[Operator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    description: str = ""
    # The names its signature gives the inputs and outputs: (tensor, name), as the model
    # stores them (SignatureDef inputs/outputs; what TF's signature runner calls them).
    io_names: tuple[tuple[int, str], ...] = ()
    # (operator, the operator that does its work): a rewrite's (dilation.py: a dilated
    # convolution's SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND); no layer runs them, no C
    absorbed: tuple[tuple[int, int], ...] = ()

    @property
    def interface_bytes(self) -> int:
        """The bytes of the model's inputs and outputs as typed (an int16 value takes two)."""
        return sum(self.tensors[t].nbytes for t in (*self.inputs, *self.outputs))


def read_graph(path: str | Path) -> Graph:
    """The graph of a .tflite file; ModelError (naming the file) when it is missing, not a
    TFLite flatbuffer, truncated, or has other than one subgraph."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if not path.is_file():  # a folder, a pipe or a device: never opened
        raise ModelError(f"{path}: {'a folder' if path.is_dir() else 'not a regular file'}, not a .tflite model")
    data = path.read_bytes()
    if len(data) < 8:
        raise ModelError(f"{path}: {len(data)} bytes, too short for a TFLite model (truncated?)")
    if data[4:8] != FILE_IDENTIFIER:
        raise ModelError(f"{path}: not a TFLite model (file identifier {data[4:8]!r}, expected {FILE_IDENTIFIER!r})")
    try:
        model = schema().ModelT.InitFromPackedBuf(data, 0)
        graph = _graph(path, model, data)
    except _DECODE_ERRORS as exc:
        raise ModelError(f"{path}: truncated or corrupt TFLite flatbuffer ({type(exc).__name__}: {exc})") from None
    _check_execution_order(path, graph.operators)  # a cycle is named as one, even where a tensor has two writers
    _check_dataflow(path, graph)
    return graph


def _graph(path: Path, model, data: bytes) -> Graph:
    if model.version != SCHEMA_VERSION:
        raise ModelError(f"{path}: TFLite schema version {model.version}, edgetune reads version {SCHEMA_VERSION}")
    subgraphs = model.subgraphs or []
    if len(subgraphs) != 1:
        raise ModelError(f"{path}: {len(subgraphs)} subgraphs; edgetune reads models with exactly one "
                         "(no control flow such as IF or WHILE, no multiple signatures)")
    sub = subgraphs[0]
    buffers = model.buffers or []
    tensors = tuple(_tensor(path, i, t, buffers, data) for i, t in enumerate(sub.tensors or []))
    codes = model.operatorCodes or []
    operators = tuple(_operator(path, i, op, codes, len(tensors)) for i, op in enumerate(sub.operators or []))
    inputs, outputs = _indices(sub.inputs), _indices(sub.outputs)
    for index in (*inputs, *outputs):
        if not 0 <= index < len(tensors):
            raise ModelError(f"{path}: subgraph input/output tensor {index} does not exist ({len(tensors)} tensors)")
    description = model.description.decode("utf-8", "replace") if isinstance(model.description, bytes) else ""
    return Graph(str(path), tensors, operators, inputs, outputs, description, _io_names(model, len(tensors)))


def _check_dataflow(path: Path, graph: Graph) -> None:
    """Every tensor has one source: the caller (a model input, which holds no data), the
    file (a constant), or one operator. A tensor two operators write, an operator's input
    nothing provides, or a model input or output with no such source has no meaning a
    memory plan or generated C could follow: refused, naming the tensor and operators."""
    tensors, operators, inputs, outputs = graph.tensors, graph.operators, graph.inputs, graph.outputs

    def named(index: int) -> str:
        return f"tensor {index} ({tensors[index].name})"

    writers: dict[int, Operator] = {}
    for op in operators:
        for tensor in (t for t in op.outputs if t >= 0):
            if tensor in writers:
                first = writers[tensor]
                raise ModelError(f"{path}: {named(tensor)} is written by operator {first.index} ({first.op}) and "
                                 f"operator {op.index} ({op.op}): a tensor has one writer")
            if tensors[tensor].constant or tensor in inputs:
                what = "holds constant data" if tensors[tensor].constant else "is a model input"
                raise ModelError(f"{path}: operator {op.index} ({op.op}) writes {named(tensor)}, which {what}")
            writers[tensor] = op
    for tensor in inputs:
        if tensors[tensor].constant:
            raise ModelError(f"{path}: model input {named(tensor)} holds constant data: an input is the caller's")
    def provided(tensor: int) -> bool:  # an empty tensor stores no data: layers.py names its shape
        t = tensors[tensor]  # a variable tensor is the state its reader keeps (the registry judges the reader)
        return tensor in writers or tensor in inputs or t.constant or t.elements == 0 or t.variable

    for op in operators:
        for tensor in (t for t in op.inputs if t >= 0):
            if not provided(tensor):
                raise ModelError(f"{path}: operator {op.index} ({op.op}) reads {named(tensor)}, which no operator "
                                 "writes, is no model input and holds no data")
    for tensor in outputs:
        if not provided(tensor):
            raise ModelError(f"{path}: model output {named(tensor)} is written by no operator")


def _io_names(model, n_tensors: int) -> tuple[tuple[int, str], ...]:
    """(tensor, name) of every entry of the signatures of subgraph 0 naming a tensor that exists."""
    names = []
    for signature in model.signatureDefs or []:
        if signature.subgraphIndex != 0:
            continue
        for entry in (*(signature.inputs or []), *(signature.outputs or [])):
            if 0 <= entry.tensorIndex < n_tensors and entry.name:
                names.append((int(entry.tensorIndex), _text(entry.name)))
    return tuple(names)


def _indices(values) -> tuple[int, ...]:
    return tuple(int(v) for v in (values if values is not None else ()))


def _text(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""


def _quantization(q) -> Quantization | None:
    if q is None or q.scale is None or len(q.scale) == 0:
        return None
    scales = tuple(float(s) for s in q.scale)
    zeros = tuple(int(z) for z in (q.zeroPoint if q.zeroPoint is not None else [0] * len(scales)))  # absent: 0
    return Quantization(scales, zeros, int(q.quantizedDimension))


def _buffer_bytes(path: Path, where: str, buffer, data: bytes) -> bytes | None:
    """A buffer's contents: inline, or (models over 2 GB) at an offset in the file."""
    if buffer.offset > 1:
        end = buffer.offset + buffer.size
        if end > len(data):
            raise ModelError(f"{path}: {where}'s data ends at byte {end}, past the file's {len(data)} (truncated?)")
        return data[buffer.offset:end]
    if buffer.data is None or len(buffer.data) == 0:
        return None
    return np.asarray(buffer.data, dtype=np.uint8).tobytes()


def _tensor(path: Path, index: int, t, buffers, data: bytes) -> Tensor:
    name = _text(t.name)
    where = f"tensor {index} ({name})"
    if not 0 <= t.buffer < max(len(buffers), 1):
        raise ModelError(f"{path}: {where} refers to buffer {t.buffer}, which does not exist")
    contents = _buffer_bytes(path, where, buffers[t.buffer], data) if buffers and t.buffer else None
    dtype = tensor_type_names().get(int(t.type), f"type {int(t.type)}")
    shape = tuple(int(d) for d in (t.shape if t.shape is not None else ()))
    if any(d < 0 for d in shape):
        raise ModelError(f"{path}: {where} has shape {list(shape)}, a negative dimension")
    signature = tuple(int(d) for d in t.shapeSignature) if t.shapeSignature is not None else None
    tensor = Tensor(index, name, shape, dtype, _quantization(t.quantization), contents, signature,
                    bool(getattr(t, "isVariable", False)))
    if contents is not None and dtype in NUMPY_TYPES and len(contents) != tensor.nbytes:
        raise ModelError(f"{path}: {where} holds {len(contents)} bytes of data, but {dtype} {list(shape)} "
                         f"takes {tensor.nbytes}")
    q = tensor.quantization
    if q is not None and (len(q.zero_points) != len(q.scales) or not 0 <= q.axis < max(len(shape), 1)):
        raise ModelError(f"{path}: {where} has {len(q.scales)} scales and {len(q.zero_points)} zero points "
                         f"along axis {q.axis} of shape {list(shape)}")
    return tensor


def _options(obj) -> tuple[tuple[str, object], ...]:
    if obj is None:
        return ()
    fields = []
    for key, value in vars(obj).items():
        if isinstance(value, np.ndarray) or isinstance(value, list):
            value = tuple(value.tolist() if isinstance(value, np.ndarray) else value)
        fields.append((key, value))
    return tuple(fields)


def _operator(path: Path, index: int, op, codes, n_tensors: int) -> Operator:
    if not 0 <= op.opcodeIndex < len(codes):
        raise ModelError(f"{path}: operator {index} refers to operator code {op.opcodeIndex}, which does not exist")
    code = codes[op.opcodeIndex]
    number = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
    name = builtin_names().get(number, f"builtin {number}")
    inputs, outputs = _indices(op.inputs), _indices(op.outputs)
    for tensor in (*inputs, *outputs):
        if not -1 <= tensor < n_tensors:
            raise ModelError(f"{path}: operator {index} ({name}) refers to tensor {tensor}, which does not exist")
    options_names = {v: k for k, v in vars(schema().BuiltinOptions).items() if isinstance(v, int)}
    return Operator(index, name, inputs, outputs, options_names.get(int(op.builtinOptionsType), "") if op.builtinOptions else "",
                    _options(op.builtinOptions), _text(code.customCode), _custom_options(op))


def _custom_options(op) -> bytes:
    values = op.customOptions
    return b"" if values is None else np.asarray(values, dtype=np.uint8).tobytes()


def _check_execution_order(path: Path, operators: tuple[Operator, ...]) -> None:
    """TFLite runs a subgraph's operators in the order they are stored, each once, so every
    tensor an operator reads that some operator writes must be written by an earlier one.
    An operator reading its own output, a cycle, or a reader stored before its writer would
    be run (and exported as C) reading a tensor nothing wrote yet: refused, naming them."""
    writers: dict[int, list[int]] = {}
    for op in operators:
        for tensor in op.outputs:
            if tensor >= 0:
                writers.setdefault(tensor, []).append(op.index)
    for op in operators:
        for tensor in op.inputs:
            late = [w for w in writers.get(tensor, ()) if w >= op.index]
            if not late:
                continue
            if late[0] == op.index:
                raise ModelError(f"{path}: operator {op.index} ({op.op}) reads tensor {tensor}, its own output: "
                                 "an operator cannot run before itself")
            writer = operators[late[0]]
            cycle = _cycle_through(operators, writers, op.index)
            if cycle:
                ring = " -> ".join(f"operator {i} ({operators[i].op})" for i in (*cycle, cycle[0]))
                raise ModelError(f"{path}: the operators form a cycle ({ring}: each reads an output of the next): "
                                 "a graph runs each operator once, in order")
            raise ModelError(f"{path}: operator {op.index} ({op.op}) reads tensor {tensor}, written by operator "
                             f"{writer.index} ({writer.op}), which is stored after it: the operators are out of "
                             "execution order (TFLite runs them as stored)")


def _cycle_through(operators: tuple[Operator, ...], writers: dict[int, list[int]], start: int) -> tuple[int, ...]:
    """Operators (start, a, b, ...) where each reads an output of the next and the last an
    output of start, or () when start lies on no cycle: a depth-first walk from start
    along "reads an output of"."""
    def feeding(index: int):
        return iter(sorted({w for t in operators[index].inputs for w in writers.get(t, ())}))

    path, seen, stack = [start], {start}, [feeding(start)]
    while stack:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            path.pop()
            continue
        if step == start:
            return tuple(path)
        if step not in seen:  # an operator already walked leads back to start through no new path
            seen.add(step)
            path.append(step)
            stack.append(feeding(step))
    return ()
