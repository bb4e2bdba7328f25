"""Float islands: DEQUANTIZE -> one-input float operators -> QUANTIZE inside an int8 graph.

TensorFlow's converter keeps an operator without an integer kernel (NEG, SIN...) in float
between a DEQUANTIZE of an int8 tensor and a QUANTIZE back to int8. Such a chain reads one
int8 tensor and writes one, value by value: each output value depends on one input value, so
the whole chain is a table of 256 results, computed at export with TFLite Micro's own
arithmetic in float32, and the C looks it up (lookup.c.j2, a Helium gather on the M55). The
chain's DEQUANTIZE and float operators run inside the QUANTIZE's table (Graph.absorbed): no
float C runs on the target, so the result does not depend on the target's libm (newlib's
sinf, or software double on a Cortex-M4), only on the arithmetic below, checked bit for bit
against TFLite Micro on all 256 values (tests/test_float_island.py).

TFLite Micro's arithmetic (its reference kernels), per step:
  DEQUANTIZE  (float)(double(s_in) * (x - z_in)): the product is exact in double (a float
              scale times at most 9 bits), so this is float32(s_in * (x - z_in)) rounded once;
  NEG -x, ABS |x|, SQUARE x * x, SQRT sqrt(x), RSQRT 1 / sqrt(x): IEEE float32 operations,
              correctly rounded, the same on every machine;
  SIN, COS, EXP, LOG: the C library's sinf, cosf, expf, logf, which TFLite Micro's kernels
              call: the table calls the same functions of this machine's C library (ctypes),
              as the host oracle does;
  QUANTIZE    (int32)roundf(x / (float)s_out) + z_out, saturated to int8: a float32
              division, rounded half away from zero. A value that is NaN, infinite or beyond
              int32 converts as x86's cvttss2si converts it in the host oracle (INT32_MIN), then
              adds z_out wrapping (C++ leaves both undefined: a domain error, SQRT or LOG of a
              negative value, has no portable result; the table follows the oracle's).

The residual risk is the transcendental functions: sinf, cosf, expf and logf are not
correctly rounded, and another C library (newlib in a TFLite Micro firmware, musl, macOS) may
differ from glibc's by an ulp, which changes an int8 result only where the float lands within
an ulp of a rounding boundary (docs/operators.md, "Float islands").
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..graph import Graph, Operator, Tensor
from .base import OperatorReader, scale, zero_point
from .lookup import LookupOp

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _libm(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """A float32 function of the C library's libm, applied value by value."""
    def apply(x: np.ndarray) -> np.ndarray:
        library = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        fn = getattr(library, name)
        fn.restype, fn.argtypes = ctypes.c_float, (ctypes.c_float,)
        return np.array([fn(float(v)) for v in x], dtype=np.float32)
    return apply


def _with_errors_ignored(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    def apply(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(x).astype(np.float32)
    return apply


# The one-input float operators a float island runs: name -> its float32 arithmetic.
FLOAT_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "NEG": _with_errors_ignored(np.negative),
    "ABS": _with_errors_ignored(np.abs),
    "SQUARE": _with_errors_ignored(lambda x: x * x),
    "SQRT": _with_errors_ignored(np.sqrt),
    "RSQRT": _with_errors_ignored(lambda x: np.float32(1) / np.sqrt(x)),
    "SIN": _libm("sinf"),
    "COS": _libm("cosf"),
    "EXP": _libm("expf"),
    "LOG": _libm("logf"),
}


@dataclass(frozen=True)
class Island:
    """One chain: the int8 tensor its DEQUANTIZE reads, its operators in order (DEQUANTIZE,
    the float ones, QUANTIZE) and the QUANTIZE's int8 output."""

    source: int
    operators: tuple[int, ...]
    output: int

    @property
    def absorbed(self) -> tuple[int, ...]:
        """The operators whose work the QUANTIZE's table does."""
        return self.operators[:-1]

    @property
    def quantize(self) -> int:
        return self.operators[-1]


def _is_float(t: Tensor) -> bool:
    return t.dtype == "float32"


def _island_ending_at(graph: Graph, quantize: Operator, readers: dict[int, list[int]],
                      writer: dict[int, Operator]) -> Island | None:
    """The chain from a DEQUANTIZE of an int8 tensor to this QUANTIZE of float32 into int8,
    through one-input float operators whose results nothing else reads; None for another shape."""
    if len(quantize.inputs) != 1 or len(quantize.outputs) != 1:
        return None
    if graph.tensors[quantize.outputs[0]].dtype != "int8":
        return None
    chain, t = [quantize.index], quantize.inputs[0]
    while True:
        tensor = graph.tensors[t]
        op = writer.get(t)
        if not _is_float(tensor) or op is None or readers.get(t) != [chain[-1]] or t in graph.outputs:
            return None
        chain.append(op.index)
        if op.op == "DEQUANTIZE":
            source = graph.tensors[op.inputs[0]] if len(op.inputs) == 1 and op.inputs[0] >= 0 else None
            if source is None or source.dtype != "int8" or source.quantization is None or source.quantization.per_axis:
                return None
            return Island(source.index, tuple(reversed(chain)), quantize.outputs[0])
        if op.op not in FLOAT_UNARY or len(op.inputs) != 1 or len(op.outputs) != 1:
            return None
        t = op.inputs[0]


def float_islands(graph: Graph) -> tuple[Island, ...]:
    """Every float island of the graph, in the order of their QUANTIZEs."""
    readers: dict[int, list[int]] = {}
    writer: dict[int, Operator] = {}
    for op in graph.operators:
        for t in dict.fromkeys(i for i in op.inputs if i >= 0):
            readers.setdefault(t, []).append(op.index)
        for t in op.outputs:
            writer[t] = op
    found = []
    for op in graph.operators:
        if op.op == "QUANTIZE" and op.inputs and op.inputs[0] >= 0 and _is_float(graph.tensors[op.inputs[0]]):
            island = _island_ending_at(graph, op, readers, writer)
            if island is not None:
                found.append(island)
    return tuple(found)


def absorb_float_islands(graph: Graph) -> Graph:
    """The graph with each island's DEQUANTIZE and float operators absorbed into its
    QUANTIZE (Graph.absorbed: no layer runs them, no C; the QUANTIZE's table does their work)."""
    absorbed = [(index, island.quantize) for island in float_islands(graph) for index in island.absorbed]
    return replace(graph, absorbed=(*graph.absorbed, *absorbed)) if absorbed else graph


def island_tensors(graph: Graph) -> frozenset[int]:
    """The float tensors inside float islands (the tables compute them; nothing stores them)."""
    return frozenset(t for island in float_islands(graph) for index in island.operators[:-1]
                     for t in graph.operators[index].outputs)


@dataclass(frozen=True)
class FloatIslandParams(LookupOp):
    """A float island as the table of its 256 results (the island's QUANTIZE runs it)."""

    source: int  # the int8 tensor the island's DEQUANTIZE reads
    scale_in: float
    zero_in: int
    steps: tuple[str, ...]  # the float operators, in order
    scale_out: float
    zero_out: int

    op = "QUANTIZE"

    def input_tensors(self, op: Operator) -> tuple[int, ...]:
        return (self.source,)

    def values(self, x: np.ndarray) -> np.ndarray:
        real = (np.float64(np.float32(self.scale_in)) * (np.asarray(x, dtype=np.int64) - self.zero_in)).astype(np.float32)
        for step in self.steps:
            real = FLOAT_UNARY[step](real)
        return affine_quantize(real, self.scale_out, self.zero_out, -128, 127)

    def variables(self) -> dict:
        return dict(super().variables(), op_name=f"DEQUANTIZE, {', '.join(self.steps)}, QUANTIZE (a float island)")


def affine_quantize(real: np.ndarray, out_scale: float, zero: int, lo: int, hi: int) -> np.ndarray:
    """TFLite Micro's QUANTIZE from float32: (int32)roundf(x / (float)scale) + zero, saturated;
    a value NaN, infinite or beyond int32 as the host oracle's conversion gives it (INT32_MIN)."""
    with np.errstate(all="ignore"):
        q = np.asarray(real, dtype=np.float32) / np.float32(out_scale)
        rounded = np.sign(q) * np.floor(np.abs(q) + np.float32(0.5))  # roundf: halves away from zero
    fits = np.isfinite(rounded) & (rounded >= INT32_MIN) & (rounded <= INT32_MAX)
    as_int = np.where(fits, np.nan_to_num(rounded), INT32_MIN).astype(np.int64)
    wrapped = (as_int + zero + (1 << 31)) % (1 << 32) - (1 << 31)  # int32 addition, wrapping
    return np.clip(wrapped, lo, hi)


def float_island_params(graph: Graph, op: Operator) -> FloatIslandParams:
    r = OperatorReader(graph, op)
    island = next((i for i in float_islands(graph) if i.quantize == op.index), None)
    if island is None:
        raise r.fail(f"input tensor {op.inputs[0]} is float32 outside a float island (edgetune runs float only as "
                     f"DEQUANTIZE of an int8 tensor, one-input float operators ({', '.join(FLOAT_UNARY)}), QUANTIZE "
                     "to int8)")
    x, y = graph.tensors[island.source], r.int8(0, output=True)
    if x.elements != y.elements:
        raise r.fail(f"output tensor {y.index} ({y.name}) has {y.elements} values, the island's input {x.elements}")
    if not (scale(x) > 0 and math.isfinite(scale(x))):
        raise r.fail(f"the island's input tensor {x.index} ({x.name}) needs one positive scale")
    steps = tuple(graph.operators[i].op for i in island.operators[1:-1])
    return FloatIslandParams(op.index, x.elements, x.index, float(scale(x)), zero_point(x), steps,
                             float(scale(y)), zero_point(y))


def in_island_only(graph: Graph, op: Operator) -> FloatIslandParams:
    """DEQUANTIZE and the float operators run only inside a float island, absorbed into its
    QUANTIZE (never asked for parameters there): anywhere else, refused naming the operator."""
    raise OperatorReader(graph, op).fail(
        f"edgetune runs {op.op} only in float32 inside a float island (DEQUANTIZE of an int8 tensor, one-input "
        f"float operators ({', '.join(FLOAT_UNARY)}), QUANTIZE to int8), as one table at export")


def absorber(graph: Graph, into: int) -> str:
    """What does an absorbed operator's work (Graph.absorbed): the QUANTIZE of a float island
    (its table) or a dilated convolution (dilation.py)."""
    return "float island's table" if graph.operators[into].op == "QUANTIZE" else "dilated convolution"
