"""LOGISTIC and TANH on int16 (TFLite's 16x8 scheme: zero points 0, output scale 1/32768),
as TFLite Micro's reference kernels compute them (checked bit for bit in
tests/test_int16_ops.py): one table of sigmoid(i / 24) in 0.16 fixed point (256 entries,
tanh(x) = 2 sigmoid(2x) - 1 reads it too), linear interpolation between entries.

- The input is brought to the table's scale: for an input scale of 2^-12 (logistic; tanh
  also 2^-11) by 3 << shift; otherwise by the integer part of s_in * 4096 * 3 doubled until
  it exceeds 16383.5, with as many bits shifted out, rounded: d = (x * m + 2^(k-1)) >> k.
- Logistic: |d| >> 9 indexes the table, the low 9 bits interpolate, (a << 9) + t (b - a),
  saturated from index 255; mirrored for d < 0; +2^9 and >> 10. Tanh: |d| >> 8 and the low 8
  bits, centred by 2^23 and shifted >> 8.
- The table: sigmoid(i / 24) * 65536 less half the error linear interpolation makes at the
  step's midpoint, rounded (in double); the last entry, read only as the slope's end below
  saturation, is 65535. TFLite Micro's outputs fit this form at every entry (the plain
  rounding differs at 43 of them, and a last entry of 65534 at inputs near saturation).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..graph import Graph, Operator
from .base import ElementWise, OperatorReader, scale, zero_point
from .sixteen import Int16Types, activation_of, typed_input

F32 = np.float32
TABLE_SIZE = 256
INPUT_INTEGER_BITS = 3
MAX_MULTIPLIER = 1 << 16  # x * m stays inside int32 below it


def _round(value: float) -> int:
    return int(math.floor(abs(value) + 0.5)) * (1 if value >= 0 else -1)


@lru_cache(maxsize=1)
def sigmoid_table() -> tuple[int, ...]:
    def f(i: float) -> float:
        return 65536.0 / (1.0 + math.exp(-i / 24.0))

    return tuple(min(65535, _round(f(i) - ((f(i + 1) + f(i)) / 2 - f(i + 0.5)) / 2)) for i in range(TABLE_SIZE - 1)) + (65535,)


def checked_log2(x: float) -> tuple[bool, int]:
    """TFLite's CheckedLog2 in float: (is x a power of two within 1e-3 of its log, the rounded log)."""
    log2 = F32(F32(math.log(F32(x))) * F32(1.0 / math.log(2.0)))
    rounded = F32(_round(float(log2)))
    return bool(abs(F32(log2 - rounded)) < F32(1e-3)), int(rounded)


def input_scaling(s_in: float, tanh: bool) -> tuple[int, int]:
    """(multiplier, shift) of d = (x * m + round) >> shift, as TFLite Micro prepares them."""
    pot, log2 = checked_log2(s_in)
    shift = (15 - INPUT_INTEGER_BITS) + log2
    if pot and shift in ((0, 1) if tanh else (0,)):
        return 3 << shift, 0
    multiplier, shift = float(F32(s_in)) * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and shift <= 30:
        shift, multiplier = shift + 1, multiplier * 2.0
    return int(multiplier), shift


@dataclass(frozen=True)
class Sigmoid16Params(Int16Types, ElementWise):
    multiplier: int
    shift: int
    tanh: bool

    template = "sigmoid16.c.j2"

    @property
    def op(self) -> str:  # type: ignore[override]
        return "TANH" if self.tanh else "LOGISTIC"

    def describe(self) -> str:
        return f"elements={self.elements}, multiplier={self.multiplier}, shift={self.shift}"

    def variables(self) -> dict:
        return dict(super().variables(), table=sigmoid_table())

    def reference(self, x) -> np.ndarray:
        x = typed_input(x, "int16", (self.elements,), "input")
        return sigmoid_or_tanh16(x, self.multiplier, self.shift, self.tanh)


def sigmoid_or_tanh16(x, multiplier: int, shift: int, tanh: bool) -> np.ndarray:
    """TFLite's int16 LOGISTIC or TANH of int16 values `x` brought to the table's scale by
    d = (x * multiplier + round) >> shift (the LSTM's gates use it too: ops/lstm.py)."""
    table = np.asarray(sigmoid_table() + (sigmoid_table()[-1],), dtype=np.int64)
    x = np.asarray(x, dtype=np.int64)
    d = (x * multiplier + ((1 << (shift - 1)) if shift else 0)) >> shift
    a = np.abs(d)
    bits = 8 if tanh else 9
    high, low = np.minimum(a >> bits, TABLE_SIZE - 1), a & ((1 << bits) - 1)
    interpolated = (table[high] << bits) + low * (table[high + 1] - table[high])
    if tanh:
        value = np.where(a >> bits >= 255, 0xFFFF << 8, interpolated)
        value = np.where(d >= 0, value - (1 << 23) + (1 << 7), -value + (1 << 23) + (1 << 7) - 1)
        return (value >> 8).astype(np.int16)
    value = np.where(a >> bits >= 255, 0x7FFF << 10, interpolated)
    value = np.where(d >= 0, value + (1 << 9), (1 << 25) - value + (1 << 9) - 1)
    return (value >> 10).astype(np.int16)


def sigmoid16_params(graph: Graph, op: Operator) -> Sigmoid16Params:
    r = OperatorReader(graph, op)
    x, y = activation_of(r, 0), activation_of(r, 0, output=True)
    if x.elements != y.elements:
        raise r.fail(f"output tensor {y.index} ({y.name}) has {y.elements} values, the input {x.elements}")
    pot, log2 = checked_log2(scale(y))
    if zero_point(x) != 0 or zero_point(y) != 0 or not pot or log2 != -15:
        raise r.fail(f"input zero point {zero_point(x)}, output scale {scale(y):g} and zero point {zero_point(y)}; "
                     f"TFLite's int16 {op.op} takes zero points 0 and writes scale 1/32768")
    multiplier, shift = input_scaling(scale(x), op.op == "TANH")
    if multiplier >= MAX_MULTIPLIER:
        raise r.fail(f"input scale {scale(x):g} is too large (the product with an int16 value would overflow int32)")
    return Sigmoid16Params(op.index, x.elements, multiplier, shift, op.op == "TANH")
