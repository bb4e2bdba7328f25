"""What every operator of the library shares: reading an operator's tensors and options
from the model reader's Graph with errors that name the file, the operator and its index,
and rendering an operator's C from its template.

Each operator module gives a frozen dataclass of the operator's static parameters (shapes,
zero points, multipliers, clamps: everything the C bakes in as constants), a function
`<op>_params(graph, operator)` deriving it from the model, the numpy reference
(`params.reference(*inputs)`, TFLite Micro's int8 arithmetic) and the template that renders
it as a C function `void fn(const int8_t *input0, ..., int8_t *output)`. An operator of several
outputs (SPLIT, UNPACK: MultiOutput) writes `int8_t *output0, ..., int8_t *outputN`, and its
reference returns one array per output.
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from edgetune.hal import Target
from edgetune.codegen.kernels.base import comment_safe
from ..arithmetic import INT8_MAX, INT8_MIN, activation_range
from ..graph import Graph, Operator, Tensor
from edgetune.codegen.tflite_schema import ModelError, schema
from ..templates import render

C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
TEMPLATE_VERSION = 1
ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


class OperatorReader:
    """One operator's tensors and options, each refusal naming the operator."""

    def __init__(self, graph: Graph, op: Operator):
        self.graph, self.op = graph, op

    def fail(self, what: str) -> ModelError:
        return ModelError(f"{self.graph.path}: operator {self.op.index} ({self.op.op}): {what}")

    def tensor(self, position: int, output: bool = False) -> Tensor:
        indices = self.op.outputs if output else self.op.inputs
        role = "output" if output else "input"
        if position >= len(indices) or indices[position] < 0:
            raise self.fail(f"has no {role} {position}")
        return self.graph.tensors[indices[position]]

    def int8(self, position: int, output: bool = False) -> Tensor:
        """An int8 activation tensor with one scale and zero point and a static shape."""
        t = self.tensor(position, output)
        role = "output" if output else f"input {position}"
        if t.dtype != "int8":
            raise self.fail(f"{role} tensor {t.index} ({t.name}) is {t.dtype}; edgetune runs int8 operators")
        q = t.quantization
        if q is None or q.per_axis or not q.scales[0] > 0:
            raise self.fail(f"{role} tensor {t.index} ({t.name}) needs one positive scale and one zero point")
        if not -128 <= q.zero_points[0] <= 127:
            raise self.fail(f"{role} tensor {t.index} ({t.name}) has zero point {q.zero_points[0]}, outside int8")
        if t.signature is not None and any(d < 0 for d in t.signature[1:]):
            raise self.fail(f"{role} tensor {t.index} ({t.name}) has a dynamic shape {list(t.signature)}")
        if any(d < 1 for d in t.shape):
            raise self.fail(f"{role} tensor {t.index} ({t.name}) has shape {list(t.shape)}")
        return t

    def constant(self, position: int) -> np.ndarray:
        t = self.tensor(position)
        if not t.constant:
            raise self.fail(f"input {position} (tensor {t.index}, {t.name}) must be a constant")
        return t.array()

    def activation(self) -> str:
        code = int(self.op.option("fusedActivationFunction", 0))
        names = {v: k for k, v in vars(schema().ActivationFunctionType).items() if isinstance(v, int)}
        name = names.get(code, f"activation {code}")
        if name not in ACTIVATIONS:
            raise self.fail(f"fused activation {name} is not one edgetune runs ({', '.join(ACTIVATIONS)})")
        return name

    def clamp(self, y: Tensor, lo: int = INT8_MIN, hi: int = INT8_MAX, zero: int | None = None) -> tuple[int, int]:
        """The output's [act_min, act_max] for the fused activation (TFLite's
        CalculateActivationRangeQuantized) within the type's [lo, hi] (int16: its bounds), at
        the output's zero point unless `zero` is given."""
        zero = zero_point(y) if zero is None else zero
        act_min, act_max = activation_range(self.activation(), scale(y), zero, lo, hi)
        if act_min > act_max:
            raise self.fail(f"the fused activation's range [{act_min}, {act_max}] is empty at the output's scale")
        return act_min, act_max

    def padding(self) -> str:
        names = {v: k for k, v in vars(schema().Padding).items() if isinstance(v, int)}
        name = names.get(int(self.op.option("padding", 0)), "")
        if name not in ("SAME", "VALID"):
            raise self.fail(f"padding {self.op.option('padding')!r} is neither SAME nor VALID")
        return name


def scale(t: Tensor) -> float:
    return t.quantization.scales[0]


def zero_point(t: Tensor) -> int:
    return int(t.quantization.zero_points[0])


def same_quantization(a: Tensor, b: Tensor) -> bool:
    return scale(a) == scale(b) and zero_point(a) == zero_point(b)


def typed_input(x, dtype: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    """An input of a numpy reference, checked: of `dtype` with the operator's elements."""
    x = np.asarray(x)
    if x.dtype != np.dtype(dtype) or x.size != int(np.prod(shape)):
        raise ValueError(f"{what} must be {dtype} with {int(np.prod(shape))} elements, got {x.dtype} {list(x.shape)}")
    return x.reshape(shape)


def int8_input(x, shape: tuple[int, ...], what: str) -> np.ndarray:
    return typed_input(x, "int8", shape, what)


@dataclass(frozen=True)
class StaticOp(ABC):
    """Base of the operators' parameter classes: where it came from, and its C."""

    index: int  # the operator's index in subgraph 0
    template: ClassVar[str]
    op: ClassVar[str]

    @property
    def n_inputs(self) -> int:
        return len(self.input_shapes)

    @property
    def input_positions(self) -> tuple[int, ...]:
        """Which of the operator's inputs the C reads, in its argument order (SPLIT's data is its
        second input, after the axis); by default the first `n_inputs`."""
        return tuple(range(self.n_inputs))

    def input_tensors(self, op: Operator) -> tuple[int, ...]:
        """The tensors the C reads, in its argument order: the operator's inputs at
        `input_positions` (a float island's table reads the int8 tensor before the island)."""
        return tuple(op.inputs[i] for i in self.input_positions)

    @property
    def in_place(self) -> tuple[int, ...]:
        """The inputs the output may share memory with (a memory plan may then give both one
        address): the C reads each element of such an input before it writes the output
        positions at or after it, and no later read needs an overwritten one."""
        return ()

    @property
    @abstractmethod
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        """The inputs' shapes as the C reads them (row-major; their element counts are the
        buffers' sizes)."""

    @property
    @abstractmethod
    def output_shape(self) -> tuple[int, ...]:
        """The output's shape as the C writes it."""

    @property
    def output_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Every output's shape as the C writes it, in the function's argument order."""
        return (self.output_shape,)

    @property
    def n_outputs(self) -> int:
        return len(self.output_shapes)

    @abstractmethod
    def reference(self, *inputs) -> np.ndarray:
        """TFLite Micro's output for int8 inputs (any shapes with the inputs' element counts)."""

    def outputs(self, *inputs) -> tuple[np.ndarray, ...]:
        """TFLite Micro's outputs, one array per output, in order."""
        return (self.reference(*inputs),)

    def describe(self) -> str:
        """The parameters in one line, for the generated C's header comment."""
        return ", ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self) if f.name != "index")

    def variables(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def render(self, fn: str, provenance: tuple[str, ...] = (), target: Target | None = None) -> str:
        """The C source of `void fn(const int8_t *input0, ..., int8_t *output)`; an operator
        with a vector path uses it when `target` has the unit (without a target: plain C)."""
        if not C_IDENTIFIER.fullmatch(fn):
            raise ModelError(f"operator {self.index} ({self.op}): {fn!r} is not a C function name")
        lines = (f"operator {self.index} ({self.op})", *provenance)
        units = frozenset(u.name for u in target.vector_units) if target is not None else frozenset()
        return render(f"ops/{self.template}", dict(
            self.variables(), vector_units=units, fn=fn, prefix=fn, provenance=tuple(map(comment_safe, lines)),
            config_text=comment_safe(self.describe()), kernel_name=self.op.lower(), version=TEMPLATE_VERSION,
            build_hint=f"cc -std=c99 -O2 -c {fn}.c", n_inputs=self.n_inputs, n_outputs=self.n_outputs,
            parameters=self.parameters(), output_names=self.output_names(), clamped_only=True))

    @property
    def scratch_bytes(self) -> int:
        """Bytes of working memory the C takes as its last argument, `uint8_t *scratch` (the
        module plans them in the arena for the step's run: ops/lstm.py's state); 0: none."""
        return 0

    def output_names(self) -> tuple[str, ...]:
        """The C names of the outputs: `output`, or `output0`, `output1`... when there are several."""
        return ("output",) if self.n_outputs == 1 else tuple(f"output{k}" for k in range(self.n_outputs))

    def parameters(self) -> str:
        """The C function's parameters: the inputs, then the outputs."""
        inputs = [f"const {ctype} *input{i}" for i, ctype in enumerate(self.input_ctypes)]
        scratch = ["uint8_t *scratch"] if self.scratch_bytes else []
        return ", ".join([*inputs, *(f"{self.output_ctype} *{name}" for name in self.output_names()), *scratch])

    @property
    def input_ctypes(self) -> tuple[str, ...]:
        """The C types of the inputs (int8; an int16 operator names its own)."""
        return ("int8_t",) * self.n_inputs

    @property
    def output_ctype(self) -> str:
        return "int8_t"

    def declaration(self, fn: str) -> str:
        return f"void {fn}({self.parameters()})"


@dataclass(frozen=True)
class MultiOutput(StaticOp):
    """An operator of several outputs (SPLIT, SPLIT_V, UNPACK): `output_shapes` and a reference
    returning a tuple; it has no one output shape."""

    @property
    def output_shape(self) -> tuple[int, ...]:
        raise TypeError(f"operator {self.index} ({self.op}) has {self.n_outputs} outputs: read output_shapes")

    @property
    @abstractmethod
    def output_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Every output's shape as the C writes it, in order."""

    @abstractmethod
    def reference(self, *inputs) -> tuple[np.ndarray, ...]:
        """TFLite Micro's outputs, one array per output, in order."""

    def outputs(self, *inputs) -> tuple[np.ndarray, ...]:
        return tuple(self.reference(*inputs))


@dataclass(frozen=True)
class ElementWise(StaticOp):
    """An operator of one input and one output of as many values, element i read before it
    is written at i (so the two may share an address)."""

    elements: int

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return ((self.elements,),)

    @property
    def in_place(self) -> tuple[int, ...]:
        return (0,)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.elements,)


def one_to_one(r: OperatorReader) -> tuple[Tensor, Tensor]:
    """The int8 input and output of an element-wise operator, checked to hold as many values."""
    x, y = r.int8(0), r.int8(0, output=True)
    if x.elements != y.elements:
        raise r.fail(f"output tensor {y.index} ({y.name}) has {y.elements} values, the input {x.elements}")
    return x, y


@dataclass(frozen=True)
class WithConstants:
    """An operator with some inputs fixed to constant values (argument position -> value): its C
    as one function of the other inputs (argument k: the k-th of them) and the outputs, which
    calls the operator's function (`fn`_op) with the constants as static arrays, as a module
    passes its constants; and its reference on the other inputs. For a harness of few buffers
    (an LSTM's eight weight matrices: tests/test_ops_lstm.py, bench/ops.py)."""

    params: StaticOp
    constants: dict[int, np.ndarray]

    @property
    def op(self) -> str:
        return self.params.op

    def render(self, fn: str, provenance: tuple[str, ...] = (), target: Target | None = None) -> str:
        arrays, args, run_time = [], [], 0
        for k, ctype in enumerate(self.params.input_ctypes):
            if k in self.constants:
                values = np.asarray(self.constants[k]).reshape(-1)
                arrays.append(f"static const {ctype} {fn}_c{k}[{max(values.size, 1)}] = "
                              f"{{{', '.join(str(int(v)) for v in values) or '0'}}};")
                args.append(f"{fn}_c{k}")
            else:
                args.append(f"input{run_time}")
                run_time += 1
        scratch = self.params.scratch_bytes
        if scratch:  # the module's arena would hold it: here a static area of its own
            arrays.append(f"static uint8_t {fn}_scratch[{scratch}] __attribute__((aligned(16)));")
        call = ", ".join([*args, *self.params.output_names(), *([f"{fn}_scratch"] if scratch else [])])
        return (self.params.render(f"{fn}_op", provenance, target) + "\n" + "\n".join(arrays) +
                f"\n{self.declaration(fn)}\n{{\n    {fn}_op({call});\n}}\n")

    def declaration(self, fn: str) -> str:
        ctypes = [c for k, c in enumerate(self.params.input_ctypes) if k not in self.constants]
        outputs = [f"{self.params.output_ctype} *{name}" for name in self.params.output_names()]
        return f"void {fn}({', '.join([*(f'const {c} *input{k}' for k, c in enumerate(ctypes)), *outputs])})"

    def _all(self, inputs) -> list:
        given = iter(inputs)
        return [self.constants[k] if k in self.constants else next(given) for k in range(self.params.n_inputs)]

    def reference(self, *inputs):
        return self.params.reference(*self._all(inputs))

    def outputs(self, *inputs) -> tuple[np.ndarray, ...]:
        return self.params.outputs(*self._all(inputs))
