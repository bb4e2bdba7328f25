"""SOFTMAX on int16 (TFLite's 16x8 scheme): input zero point 0, output scale 1/32768 and zero
point 0, over the last axis, as TFLite Micro's reference kernel computes it with two lookup
tables of 513 int16 values (checked bit for bit in tests/test_int16_ops.py):

1. Per row, d = x - max(row) <= 0 is scaled by beta * s_in / (10 / 65535) (TFLite's 32-bit
   MultiplyByQuantizedMultiplier), so that [-10, 0] in real terms spans [-65535, 0], and
   shifted by 32767 into [-32768, 32767] (saturated);
2. exp of it from the table of exp on [-10, 0]; the table's entry at the top 9 bits (256 +
   v >> 7) plus the slope to the next entry times the low 7 bits, (slope * low + 64) >> 7;
3. the exps summed (Q16.15); the sum normalised by its leading zeros (h): ((sum << (h - 1)) +
   2^13) >> 14, minus 98304 (1.5 * 2^16), looked up in the table of 1 / (1 + x) on [0, 1];
4. out = (exp * reciprocal + 2^(30 - h)) >> (31 - h), clamped to [0, 32767].

The tables are TFLite's gen_lut in float: 512 steps over the range, each sample
round(f(a) * 32768) less half the error of the linear interpolation at the step's midpoint
(rounded), saturated, and a last entry f(max) for the slope; float32 arithmetic throughout,
exp from the C library's expf (as TFLite Micro, compiled for this host, evaluates it). The
same tables computed in double differ from TFLite Micro's in entries 160 and 294 of the
reciprocal's, which real inputs reach: a test checks both the tables and the outputs there.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..arithmetic import MAX_SHIFT, quantize_multiplier
from ..graph import Graph, Operator
from .base import OperatorReader, StaticOp, scale, zero_point
from .fixedpoint import multiply_by_quantized_multiplier
from .sixteen import Int16Types, activation_of, typed_input

F32 = np.float32
LUT_STEPS = 512
OUTPUT_SCALE = 1.0 / 32768
EXP_RANGE = 10.0  # exp is tabulated on [-10, 0]: exp(-10) adds nothing a Q0.15 sum keeps
MAX_DEPTH = 1 << 16  # values a row's int32 sum of Q0.15 exps holds


def _round(value: F32) -> F32:
    """std::round on a float: to nearest, halves away from zero."""
    return F32(math.floor(abs(float(value)) + 0.5) * (1 if value >= 0 else -1))


@lru_cache(maxsize=1)
def _expf():
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    return lambda v: F32(libm.expf(float(v)))


def lookup_table(func, low: float, high: float) -> tuple[int, ...]:
    """TFLite's gen_lut<float, int16_t, int16_t>(func, low, high, -1, 1): 513 int16 values."""
    low, high = F32(low), F32(high)
    step = F32((high - low) / F32(LUT_STEPS))
    half = F32(step / F32(2))
    scaling = F32(F32(65536) / F32(2))  # the int16 range over the output's [-1, 1]
    table = []
    for i in range(LUT_STEPS):
        start = F32(low + F32(F32(i) * step))
        value, middle = func(start), func(F32(start + half))
        following = func(F32(low + F32(F32(i + 1) * step)))
        sample = _round(F32(value * scaling))
        interpolated = _round(F32(F32(F32(following * scaling) + _round(F32(value * scaling))) / F32(2)))
        bias = _round(F32(F32(interpolated - _round(F32(middle * scaling))) / F32(2)))
        table.append(int(min(max(F32(sample - bias), -32768.0), 32767.0)))
    table.append(int(min(max(_round(F32(func(high) * scaling)), -32768.0), 32767.0)))
    return tuple(table)


@lru_cache(maxsize=1)
def tables() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(exp on [-10, 0], 1 / (1 + x) on [0, 1])."""
    return (lookup_table(_expf(), -EXP_RANGE, 0.0),
            lookup_table(lambda v: F32(F32(1) / F32(F32(1) + v)), 0.0, 1.0))


def table_lookup(values: np.ndarray, table: tuple[int, ...]) -> np.ndarray:
    """TFLite's lut_lookup_with_interpolation on int16 values (as int64)."""
    lut = np.asarray(table, dtype=np.int64)
    v = np.asarray(values, dtype=np.int64)
    index, low = 256 + (v >> 7), v & 0x7F
    base = lut[index]
    return base + (((lut[index + 1] - base) * low + 64) >> 7)


@dataclass(frozen=True)
class Softmax16Params(Int16Types, StaticOp):
    rows: int
    depth: int
    multiplier: int
    shift: int

    template = "softmax16.c.j2"
    op = "SOFTMAX"

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return ((self.rows, self.depth),)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.rows, self.depth)

    @property
    def in_place(self) -> tuple[int, ...]:
        return (0,)  # a row is read whole (its max, its exps) before any of it is written

    def describe(self) -> str:
        return f"rows={self.rows}, depth={self.depth}, multiplier={self.multiplier}, shift={self.shift}"

    def variables(self) -> dict:
        exp_table, reciprocal_table = tables()
        return dict(super().variables(), exp_table=exp_table, reciprocal_table=reciprocal_table)

    def reference(self, x) -> np.ndarray:
        exp_table, reciprocal_table = tables()
        x = typed_input(x, "int16", self.input_shapes[0], "input").astype(np.int64)
        out = np.empty(x.shape, dtype=np.int16)
        for r, row in enumerate(x):
            scaled = multiply_by_quantized_multiplier(row - row.max(), self.multiplier, self.shift) + 32767
            exps = table_lookup(np.clip(scaled, -32768, 32767), exp_table)
            total = int(exps.sum())
            headroom = 32 - total.bit_length()  # leading zeros of the int32 sum
            shifted = ((total << (headroom - 1)) + (1 << 13)) >> 14
            reciprocal = int(table_lookup(np.clip(shifted - ((1 << 15) + (1 << 16)), -32768, 32767),
                                          reciprocal_table))
            right = 31 - headroom
            out[r] = np.clip((exps * reciprocal + (1 << (right - 1))) >> right, 0, 32767)
        return out


def softmax16_params(graph: Graph, op: Operator) -> Softmax16Params:
    r = OperatorReader(graph, op)
    x, y = activation_of(r, 0), activation_of(r, 0, output=True)
    if zero_point(x) != 0 or zero_point(y) != 0 or abs(scale(y) - OUTPUT_SCALE) > 1e-3 * OUTPUT_SCALE:
        raise r.fail(f"input zero point {zero_point(x)}, output scale {scale(y):g} and zero point {zero_point(y)}; "
                     "TFLite's int16 softmax takes zero points 0 and writes scale 1/32768")
    if tuple(y.shape) != tuple(x.shape) or not x.shape:
        raise r.fail(f"output shape {list(y.shape)} is not the input's {list(x.shape)}")
    depth = x.shape[-1]
    if depth > MAX_DEPTH:
        raise r.fail(f"rows of {depth} values: the int32 sum of their exps holds at most {MAX_DEPTH}")
    beta = float(op.option("beta", 1.0))
    real = scale(x) * float(F32(beta)) / (EXP_RANGE / 65535.0)
    if not (beta > 0 and math.isfinite(real)):
        raise r.fail(f"beta {beta:g} is not a positive number")
    multiplier, shift = quantize_multiplier(real)
    if shift > MAX_SHIFT or multiplier == 0:
        raise r.fail(f"beta {beta:g} times the input scale {scale(x):g} is out of range")
    return Softmax16Params(op.index, x.elements // depth, depth, multiplier, shift)
