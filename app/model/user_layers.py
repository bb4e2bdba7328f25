"""Model operators served by kernels of the user's own (docs/own-kernel.md, "Serve a model's
operator"). A UserKernel whose definition declares `operators={"LEAKY_RELU": adapt}` (or
"CUSTOM:<custom code>") serves every such operator of a model read while it is registered:
its adapter gets the operator (OperatorView: tensors with shape, type, quantisation and
constant data, options, custom code and options) and returns a Binding (the workload shape,
which buffers take the operator's input and output tensors, the other buffers' constants,
scalar values). The layer is then tuned, exported and checked like a shipped kernel's.

Who judges it: for a builtin operator, TFLite Micro (the oracle of every layer: where the
user's kernel and TFLite Micro differ, TFLite Micro is right); for a CUSTOM operator, which
TFLite Micro cannot run, the kernel's own numpy reference (oracle.py, reference_model.py).

Everything the adapter returns is checked here, its mistakes named with the model file, the
operator and its index, and the kernel: one line, exit 2.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from edgetune.codegen.kernels import KERNELS
from edgetune.codegen.kernels.base import Buffer, KernelError
from edgetune.codegen.kernels.user import DTYPES, Binding, UserKernel, where_raised

from .graph import Graph, Operator, Tensor
from edgetune.codegen.tflite_schema import ModelError

REFERENCE = "reference"  # a layer judged by its kernel's reference (a CUSTOM operator)
TFLM = "tflm"


@dataclass(frozen=True)
class OperatorView:
    """One operator as an adapter sees it. `inputs` and `outputs` are the model's tensors
    (app/model/graph.py Tensor: shape, dtype, quantization.scales/zero_points,
    constant, array()), None for an absent optional input; `options`: its builtin options
    by the schema's field names (LeakyReluOptions: {"alpha": 0.1}); `custom_options`: a
    CUSTOM operator's option bytes as stored (often a flexbuffer: flatbuffers.flexbuffers.Loads)."""

    index: int
    op: str
    custom_code: str
    inputs: tuple[Tensor | None, ...]
    outputs: tuple[Tensor | None, ...]
    options: Mapping[str, object] = field(default_factory=dict)
    custom_options: bytes = b""

    def option(self, name: str, default=None):
        return self.options.get(name, default)


def operator_key(op: Operator) -> str:
    """The key a kernel's `operators` names this operator by."""
    return f"CUSTOM:{op.custom_code}" if op.op == "CUSTOM" else op.op


def operator_name(op: Operator) -> str:
    return f"CUSTOM ({op.custom_code})" if op.op == "CUSTOM" else op.op


def servers(graph: Graph, op: Operator) -> list[UserKernel]:
    """The registered kernels that declare they serve this operator; two is an error."""
    key = operator_key(op)
    found = [k for k in KERNELS.values() if isinstance(k, UserKernel) and key in k.operators]
    if len(found) > 1:
        raise ModelError(f"{graph.path}: operator {op.index} ({operator_name(op)}) is claimed by "
                         f"{len(found)} kernels ({', '.join(sorted(k.name for k in found))}): load only one of them")
    return found


def declared_operators() -> str:
    """What the registered kernels of the user's own declare they serve, for an error about an
    operator none serves (a typo'd key shows beside the operator's real one); "" for none."""
    served = sorted(f"{key} ({k.name})" for k in KERNELS.values() if isinstance(k, UserKernel) for key in k.operators)
    return f"; the kernels loaded serve {', '.join(served)}" if served else ""


def view_of(graph: Graph, op: Operator) -> OperatorView:
    def tensors(indices):
        return tuple(graph.tensors[i] if i >= 0 else None for i in indices)

    return OperatorView(op.index, op.op, op.custom_code, tensors(op.inputs), tensors(op.outputs), dict(op.options),
                        op.custom_options)


class _Check:
    """Errors naming the file, the operator and the kernel."""

    def __init__(self, graph: Graph, op: Operator, kernel: UserKernel):
        self.graph, self.op, self.kernel = graph, op, kernel

    def fail(self, what: str) -> ModelError:
        return ModelError(f"{self.graph.path}: operator {self.op.index} ({operator_name(self.op)}), kernel "
                          f"{self.kernel.name}: {what}")


def _binding(c: _Check, view: OperatorView) -> Binding:
    adapter = c.kernel.operators[operator_key(c.op)]
    try:
        binding = adapter(view)
    except Exception as exc:  # noqa: BLE001 - the user's adapter: one line, never a traceback
        raise c.fail(f"its adapter raised {type(exc).__name__}: {exc}{where_raised(adapter, exc)}") from None
    if not isinstance(binding, Binding):
        raise c.fail(f"its adapter returned {type(binding).__name__}, not an edgetune.Binding")
    keys = c.kernel.shape_keys
    given = list(binding.shape) if isinstance(binding.shape, Mapping) else []
    missing, extra = [k for k in keys if k not in given], [k for k in given if k not in keys]
    if missing or extra:
        raise c.fail(f"its adapter's shape has {'no key ' + repr(missing[0]) if missing else 'unknown key ' + repr(extra[0])}"
                     f" (the kernel's shape keys: {', '.join(keys)})")
    return binding


def _activation(c: _Check, tensor: Tensor | None, role: str, buffer: str, dims: tuple[int, ...], dtype: str) -> Tensor:
    if tensor is None:
        raise c.fail(f"has no {role} tensor for buffer {buffer!r}")
    if tensor.constant:
        raise c.fail(f"{role} tensor {tensor.index} ({tensor.name}) is a constant; bind it in constants")
    if tensor.dtype != dtype or tensor.elements != int(np.prod(dims)):
        raise c.fail(f"{role} tensor {tensor.index} ({tensor.name}) is {tensor.dtype}{list(tensor.shape)}, but buffer "
                     f"{buffer!r} is {dtype}{list(dims)}")
    return tensor


def _buffer(c: _Check, name: str, roles: tuple[str, ...]) -> str:
    buffers = {a.name: a for a in c.kernel.buffers}
    if not isinstance(name, str) or name not in buffers or buffers[name].role not in roles:
        wanted = [a.name for a in c.kernel.buffers if a.role in roles]
        raise c.fail(f"its adapter binds {name!r} to the operator's {roles[0]}, but the kernel's "
                     f"{roles[0]} buffers are {', '.join(wanted) or 'none'}")
    return name


def _constants(c: _Check, binding: Binding, shape: dict, bound: tuple[str, str]) -> dict[str, np.ndarray]:
    k = c.kernel
    wanted = [a for a in k.buffers if a.name not in bound]
    given = dict(binding.constants) if isinstance(binding.constants, Mapping) else None
    if given is None or set(given) != {a.name for a in wanted}:
        names = sorted(given or ())
        absent = [a.name for a in wanted if a.name not in names]
        what = f"no constant for buffer {absent[0]!r}" if absent else \
            f"a constant for {sorted(set(names) - {a.name for a in wanted})[0]!r}, which is not a constant buffer"
        raise c.fail(f"its adapter gives {what} (constants: {', '.join(a.name for a in wanted) or 'none'})")
    arrays = {}
    for a in wanted:
        dims, dtype = k._dims[a.name](shape), np.dtype(DTYPES[a.dtype])
        data = np.asarray(given[a.name])
        if data.dtype != dtype or data.size != int(np.prod(dims)):
            raise c.fail(f"constant {a.name!r} is {data.dtype}{list(data.shape)}, expected {dtype}{list(dims)}")
        arrays[a.name] = np.ascontiguousarray(data).reshape(dims).copy()
    return arrays


def _scalars(c: _Check, binding: Binding, shape: dict) -> tuple[tuple[str, int], ...]:
    k = c.kernel
    given = dict(binding.scalars) if isinstance(binding.scalars, Mapping) else {None: None}
    unknown = [name for name in given if name not in {s.name for s in k.scalars}]
    if unknown:
        raise c.fail(f"its adapter sets scalar {unknown[0]!r}, which the kernel does not have "
                     f"(scalars: {', '.join(s.name for s in k.scalars) or 'none'})")
    values = []
    for s in k.scalars:
        value = given.get(s.name, None)
        if value is None:
            value = k._scalar(s, shape)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not -2**31 <= value < 2**31:
            raise c.fail(f"scalar {s.name!r} is {value!r}, not an int32")
        values.append((s.name, int(value)))
    return tuple(values)


def user_layer(graph: Graph, op: Operator, kernel: UserKernel):
    """The ModelLayer of an operator a user kernel serves (layers.py), checked."""
    from .layers import ModelLayer  # layers.py asks this module who serves an operator

    c = _Check(graph, op, kernel)
    binding = _binding(c, view_of(graph, op))
    try:
        shape = kernel.parse_shape(dict(binding.shape))
    except KernelError as exc:
        raise c.fail(f"its adapter's shape: {exc}") from None
    x_name = _buffer(c, binding.input, ("input",))
    y_name = _buffer(c, binding.output, ("output",))
    args = {a.name: a for a in kernel.buffers}
    position = binding.input_tensor
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < len(op.inputs):
        raise c.fail(f"input_tensor {position!r}: the operator has {len(op.inputs)} inputs")
    x_dims, y_dims = kernel._dims[x_name](shape), kernel._dims[y_name](shape)
    x = _activation(c, graph.tensors[op.inputs[position]] if op.inputs[position] >= 0 else None, "input", x_name,
                    x_dims, args[x_name].dtype)
    y = _activation(c, graph.tensors[op.outputs[0]] if op.outputs and op.outputs[0] >= 0 else None, "output", y_name,
                    y_dims, args[y_name].dtype)
    arrays = _constants(c, binding, shape, (x_name, y_name))
    constants = tuple(Buffer(a.name, arrays[a.name], weight=True) for a in kernel.buffers if a.name in arrays)
    macs = binding.macs if isinstance(binding.macs, int) and binding.macs > 0 else y.elements
    tensors = tuple(graph.tensors[i] if i >= 0 else None for i in (*op.inputs, *op.outputs))
    return ModelLayer(op.index, op.op, kernel.name, tuple((k, int(shape[k])) for k in kernel.shape_keys), int(macs),
                      x.shape, y.shape, op, tensors, constants, _scalars(c, binding, shape), y_dims,
                      arguments=tuple(a.name for a in kernel.buffers), input_name=x_name, output_name=y_name,
                      input_dims=x_dims, input_position=position,
                      oracle=REFERENCE if op.op == "CUSTOM" else TFLM)
