"""The library operators on int16 activations (TFLite's 16x8 scheme), as TFLite Micro's
reference kernels compute them (checked bit for bit in tests/test_int16_ops.py):

- RESHAPE, EXPAND_DIMS, SQUEEZE: the values copied under the output's shape (two bytes each);
- AVERAGE_POOL_2D, MAX_POOL_2D: the int8 pooling's arithmetic (ops/pooling.py) on int16
  values, the int32 sum divided by the window's count with halves away from zero, clamped to
  the fused activation's range in int16;
- PAD: the input copied into a larger tensor, the added positions holding 0 (TFLite Micro's
  int16 pad, whatever the output's zero point: the int8 one pads with the zero point);
- QUANTIZE between int8 and int16 (either way) and int16 to int16, the requantisation
  between the parts of a graph: (x - z_in) by the multiplier of s_in / s_out (TFLite's
  32-bit MultiplyByQuantizedMultiplier, two roundings), plus z_out, saturated to the output's type.

Each is the int8 operator's parameters with the types of its tensors: `input_ctypes` and
`output_ctype` give the C function's signature, the template reads `ctype_in`/`ctype_out`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..arithmetic import MAX_SHIFT, quantize_multiplier
from ..graph import Graph, Operator, Tensor
from .base import OperatorReader, StaticOp, scale, typed_input, zero_point
from .fixedpoint import multiply_by_quantized_multiplier
from .pad import PadParams, pad_params
from .pooling import AveragePoolParams, MaxPoolParams, PoolParams, read_pooling
from .reshape import ExpandDimsParams, ReshapeParams, SqueezeParams, _new_shape

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
CTYPES = {"int8": "int8_t", "int16": "int16_t"}


def activation_of(r: OperatorReader, position: int, output: bool = False, dtypes=("int16",)) -> Tensor:
    """An activation tensor of one of `dtypes` with one positive scale and a zero point in its type."""
    t = r.tensor(position, output)
    role = "output" if output else f"input {position}"
    if t.dtype not in dtypes:
        raise r.fail(f"{role} tensor {t.index} ({t.name}) is {t.dtype}; expected {' or '.join(dtypes)}")
    q = t.quantization
    if q is None or q.per_axis or not q.scales[0] > 0:
        raise r.fail(f"{role} tensor {t.index} ({t.name}) needs one positive scale and one zero point")
    info = np.iinfo(t.dtype)
    if not info.min <= q.zero_points[0] <= info.max:
        raise r.fail(f"{role} tensor {t.index} ({t.name}) has zero point {q.zero_points[0]}, outside {t.dtype}")
    if any(d < 1 for d in t.shape):
        raise r.fail(f"{role} tensor {t.index} ({t.name}) has shape {list(t.shape)}")
    return t


class Int16Types:
    """Mixed into an int8 operator's parameters: int16 input(s) and output."""

    @property
    def input_ctypes(self) -> tuple[str, ...]:
        return ("int16_t",) * self.n_inputs

    @property
    def output_ctype(self) -> str:
        return "int16_t"

    def variables(self) -> dict:
        return dict(super().variables(), ctype_in="int16_t", ctype_out="int16_t")


# --- RESHAPE, EXPAND_DIMS, SQUEEZE ------------------------------------------------------------
@dataclass(frozen=True)
class Reshape16Params(Int16Types, ReshapeParams):
    template = "reshape16.c.j2"

    def reference(self, x) -> np.ndarray:
        return typed_input(x, "int16", (self.elements,), "input").reshape(self.out_shape).copy()


@dataclass(frozen=True)
class ExpandDims16Params(Int16Types, ExpandDimsParams):
    template = "reshape16.c.j2"
    reference = Reshape16Params.reference


@dataclass(frozen=True)
class Squeeze16Params(Int16Types, SqueezeParams):
    template = "reshape16.c.j2"
    reference = Reshape16Params.reference


def reshape16_params(graph: Graph, op: Operator) -> Reshape16Params:
    r = OperatorReader(graph, op)
    x, y = activation_of(r, 0), activation_of(r, 0, output=True)
    if x.elements != y.elements:
        raise r.fail(f"output tensor {y.index} ({y.name}) has {y.elements} values, the input {x.elements}")
    if op.op == "RESHAPE":
        shape = _new_shape(r, x.elements)
        if shape is not None and shape != tuple(y.shape):
            raise r.fail(f"the new shape {list(shape)} is not the output tensor's {list(y.shape)}")
    kind = {"RESHAPE": Reshape16Params, "EXPAND_DIMS": ExpandDims16Params, "SQUEEZE": Squeeze16Params}[op.op]
    return kind(op.index, x.elements, tuple(y.shape))


# --- AVERAGE_POOL_2D, MAX_POOL_2D ----------------------------------------------------------------
class Pool16:
    """The int8 pooling's arithmetic (PoolParams.reference) on int16 values."""
    template = "pool16.c.j2"
    value_type = "int16"

    @property
    def vector_division_exact(self) -> bool:
        """PoolParams.vector_division_exact for int16 sums: a = 32768 * count + count / 2."""
        count = self.kh * self.kw
        return (32768 * count + count // 2) * (count - 1) < 2**31

    @property
    def sums_fit_int16(self) -> bool:
        return False  # int16 values are summed in int32 lanes


@dataclass(frozen=True)
class AveragePool16Params(Pool16, Int16Types, AveragePoolParams):
    template = "pool16.c.j2"


@dataclass(frozen=True)
class MaxPool16Params(Pool16, Int16Types, MaxPoolParams):
    template = "pool16.c.j2"


def pool16_params(graph: Graph, op: Operator) -> PoolParams:
    r = OperatorReader(graph, op)
    x, y = activation_of(r, 0), activation_of(r, 0, output=True)
    return read_pooling(r, x, y, (AveragePool16Params, MaxPool16Params), lambda t: r.clamp(t, INT16_MIN, INT16_MAX),
                        max_window=1 << 16)  # an int32 sum of int16 values


# --- PAD -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pad16Params(Int16Types, PadParams):
    template = "pad.c.j2"  # with ctype_out int16_t (Int16Types)

    def reference(self, x) -> np.ndarray:
        return np.pad(typed_input(x, "int16", self.shape, "input"), self.pads, constant_values=self.value)


def pad16_params(graph: Graph, op: Operator) -> Pad16Params:
    r = OperatorReader(graph, op)
    activation_of(r, 0), activation_of(r, 0, output=True)
    p = pad_params(graph, op, reader=r)
    return Pad16Params(p.index, p.shape, p.pads, 0)  # TFLite Micro pads int16 with 0, whatever the zero point


# --- QUANTIZE between int8 and int16 ------------------------------------------------------------
@dataclass(frozen=True)
class Requantize16Params(StaticOp):
    """QUANTIZE from `dtype_in` to `dtype_out` (int8 or int16, not both int8)."""

    elements: int
    dtype_in: str
    dtype_out: str
    zero_in: int
    zero_out: int
    multiplier: int
    shift: int

    template = "quantize16.c.j2"
    op = "QUANTIZE"

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return ((self.elements,),)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.elements,)

    @property
    def in_place(self) -> tuple[int, ...]:
        """Element i is read before it is written, at a position no wider than the input's:
        in place only when the output's values are no wider than the input's."""
        return (0,) if np.dtype(self.dtype_out).itemsize <= np.dtype(self.dtype_in).itemsize else ()

    @property
    def input_ctypes(self) -> tuple[str, ...]:
        return (CTYPES[self.dtype_in],)

    @property
    def output_ctype(self) -> str:
        return CTYPES[self.dtype_out]

    def variables(self) -> dict:
        info = np.iinfo(self.dtype_out)
        return dict(super().variables(), ctype_in=CTYPES[self.dtype_in], ctype_out=CTYPES[self.dtype_out],
                    out_min=int(info.min), out_max=int(info.max))

    def reference(self, x) -> np.ndarray:
        x = typed_input(x, self.dtype_in, (self.elements,), "input").astype(np.int64)
        y = multiply_by_quantized_multiplier(x - self.zero_in, self.multiplier, self.shift) + self.zero_out
        info = np.iinfo(self.dtype_out)
        return np.clip(y, info.min, info.max).astype(self.dtype_out)


def quantize16_params(graph: Graph, op: Operator) -> Requantize16Params:
    r = OperatorReader(graph, op)
    x, y = activation_of(r, 0, dtypes=("int8", "int16")), activation_of(r, 0, output=True, dtypes=("int8", "int16"))
    if x.elements != y.elements:
        raise r.fail(f"output tensor {y.index} ({y.name}) has {y.elements} values, the input {x.elements}")
    real = scale(x) / scale(y)
    multiplier, shift = quantize_multiplier(real)
    if shift > MAX_SHIFT:
        raise r.fail(f"the rescaling factor {real:g} from tensor {x.index} to tensor {y.index} is too large")
    return Requantize16Params(op.index, x.elements, x.dtype, y.dtype, zero_point(x), zero_point(y), multiplier, shift)


# --- choosing the int16 form -------------------------------------------------------------------
def uses_int16(graph: Graph, op: Operator) -> bool:
    """Whether an operator's first input or first output is int16."""
    first = [t for t in (op.inputs[:1] + op.outputs[:1]) if t >= 0]
    return any(graph.tensors[t].dtype == "int16" for t in first)


def by_type(int8_params: Callable[[Graph, Operator], StaticOp],
            int16_params: Callable[[Graph, Operator], StaticOp]) -> Callable[[Graph, Operator], StaticOp]:
    """An operator's parameters: the int16 form when it reads or writes int16, else the int8 one."""
    def params(graph: Graph, op: Operator) -> StaticOp:
        return (int16_params if uses_int16(graph, op) else int8_params)(graph, op)
    params.__name__ = int8_params.__name__
    return params
