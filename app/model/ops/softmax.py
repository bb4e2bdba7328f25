"""SOFTMAX, int8 in and int8 out (scale 1/256, zero point -128, as TFLite requires), over the
last axis, with TFLite's integer algorithm (its quantised softmax, gemmlowp's fixed point):

1. Per row, d = x - max(row) <= 0. Values with d below diff_min give exactly 0 (-128 out).
2. d is scaled by beta * s_in: the real multiplier beta * s_in * 2^26 (capped at 2^31 - 1)
   quantised as (m, left shift >= 0); d * 2^left times m (high multiply) is a fixed-point
   number with 5 integer bits. diff_min = -floor(31 * 2^26 / 2^left), the most negative d
   whose scaled value still fits.
3. exp of that non-positive number, in Q0.31: its remainder modulo 1/4 gives exp on
   [-1/4, 0) by a Taylor expansion around -1/8 (to the x^4 term), then a barrel shifter
   multiplies by exp(-1/4), exp(-1/2), exp(-1), ..., exp(-16) for each set bit of the
   rest; exp(0) is 1 (INT32_MAX).
4. The exps, each rounded to 12 integer bits, summed; the sum normalised to [1, 2) by its
   leading zeros, and 1 / (1 + x) computed by three Newton-Raphson steps from 48/17 -
   32/17 * (1 + x) / 2 (in Q2.29).
5. out = (1/sum * exp) >> (31 - 8 + the sum's bits above one), rounded, minus 128, saturated.

Every constant is what it says (exp(-2^k) and 1/3 in Q0.31, 48/17 and -32/17 in Q2.29),
computed below. Checked bit for bit against TFLite Micro (tests/test_ops_softmax.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..arithmetic import quantize_multiplier
from ..graph import Graph, Operator
from .base import OperatorReader, StaticOp, int8_input, scale, zero_point
from .fixedpoint import (INT32_MAX, rounding_divide_by_pot, sat_rdmulh, saturating_left_shift, wrap32)

DIFF_INTEGER_BITS = 5  # the scaled differences' integer bits
ACCUMULATOR_INTEGER_BITS = 12  # the sum of exps' integer bits (up to 4096 values of 1)
OUTPUT_SCALE, OUTPUT_ZERO = 1.0 / 256, -128
OUTPUT_BITS = 8


def q31(value: float) -> int:
    """A real in [-1, 1) in Q0.31, rounded to nearest."""
    return int(round(value * (1 << 31)))


# exp(-2^k) for the bits of the input above the quarter, k = -2 .. 4 (the barrel shifter).
BARREL = tuple((k, q31(math.exp(-(2.0 ** k)))) for k in range(-2, 5))
EXP_MINUS_EIGHTH = q31(math.exp(-1 / 8))  # the Taylor expansion's centre
ONE_THIRD = q31(1 / 3)
FORTY_EIGHT_SEVENTEENTHS = int(round(48 / 17 * (1 << 29)))  # Q2.29
MINUS_THIRTY_TWO_SEVENTEENTHS = int(round(-32 / 17 * (1 << 29)))
NEWTON_STEPS = 3


def rescale(x, source_bits: int, target_bits: int) -> np.ndarray:
    """A fixed-point value with `source_bits` integer bits as one with `target_bits`."""
    shift = source_bits - target_bits
    if shift > 0:
        return saturating_left_shift(x, shift)
    return rounding_divide_by_pot(x, -shift) if shift < 0 else np.asarray(x, dtype=np.int64)


def exp_on_quarter(a) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), Q0.31 in and out: the Taylor series around -1/8."""
    x = wrap32(a + (1 << 28))  # a + 1/8
    x2 = sat_rdmulh(x, x)
    x3 = sat_rdmulh(x2, x)
    x4_over_4 = rounding_divide_by_pot(sat_rdmulh(x2, x2), 2)
    series = rounding_divide_by_pot(wrap32(sat_rdmulh(wrap32(x4_over_4 + x3), ONE_THIRD) + x2), 1)
    return wrap32(EXP_MINUS_EIGHTH + sat_rdmulh(EXP_MINUS_EIGHTH, wrap32(x + series)))


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """exp(a) in Q0.31 for a <= 0 held with `integer_bits` integer bits."""
    a = np.asarray(a, dtype=np.int64)
    fraction_bits = 31 - integer_bits
    quarter = 1 << (fraction_bits - 2)
    offset = wrap32((a & (quarter - 1)) - quarter)  # a modulo 1/4, minus 1/4: in [-1/4, 0)
    result = exp_on_quarter(rescale(offset, integer_bits, 0))
    remainder = wrap32(offset - a)
    for k, multiplier in BARREL:
        if integer_bits > k:
            bit = (remainder >> (fraction_bits + k)) & 1
            result = np.where(bit == 1, sat_rdmulh(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)  # exp(-32) is below Q0.31's resolution
    return np.where(a == 0, INT32_MAX, result)


def one_over_one_plus_x(x) -> np.ndarray:
    """1 / (1 + x) for x in [0, 1) in Q0.31, by Newton-Raphson on the half denominator."""
    total = np.asarray(x, dtype=np.int64) + INT32_MAX
    half = np.where(total >= 0, (total + 1) // 2, -((-total + 1) // 2))  # rounded half sum, C division
    y = wrap32(FORTY_EIGHT_SEVENTEENTHS + sat_rdmulh(half, MINUS_THIRTY_TWO_SEVENTEENTHS))  # Q2.29
    for _ in range(NEWTON_STEPS):
        error = wrap32((1 << 29) - sat_rdmulh(half, y))  # 1 - half * y, Q2.29
        y = wrap32(y + rescale(sat_rdmulh(y, error), 4, 2))
    return rescale(y, 1, 0)  # y / 2 read as Q1.30, to Q0.31


def reciprocal(total: int) -> tuple[int, int]:
    """(1 / total normalised to Q0.31, the bits of total above one) for a positive sum with
    ACCUMULATOR_INTEGER_BITS integer bits."""
    leading = 32 - int(total).bit_length()  # count of leading zeros of a positive int32
    shifted = wrap32(((int(total) << leading) & 0xFFFFFFFF) - (1 << 31))
    return int(one_over_one_plus_x(shifted)), ACCUMULATOR_INTEGER_BITS - leading


@dataclass(frozen=True)
class SoftmaxParams(StaticOp):
    rows: int
    depth: int
    multiplier: int
    left_shift: int
    diff_min: int

    template = "softmax.c.j2"
    op = "SOFTMAX"

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return ((self.rows, self.depth),)

    @property
    def in_place(self) -> tuple[int, ...]:
        return (0,)  # a row's max and sum are taken before its outputs are written, each after its input

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.rows, self.depth)

    def variables(self) -> dict:
        return dict(super().variables(), barrel=BARREL, exp_minus_eighth=EXP_MINUS_EIGHTH, one_third=ONE_THIRD,
                    c48_17=FORTY_EIGHT_SEVENTEENTHS, c_neg32_17=MINUS_THIRTY_TWO_SEVENTEENTHS,
                    newton_steps=NEWTON_STEPS, diff_bits=DIFF_INTEGER_BITS, acc_bits=ACCUMULATOR_INTEGER_BITS,
                    output_bits=OUTPUT_BITS, exp_table=self.exp_table())

    def exp_table(self) -> tuple[int, ...]:
        """exp of each difference from the row's maximum, -255 .. 0, in Q0.31 as `reference`
        computes it (the Helium path gathers them); 0 below diff_min, where the sum takes
        nothing and the output is -128, as the scalar form's skip gives."""
        diff = np.arange(-255, 1, dtype=np.int64)
        exps = exp_on_negative_values(sat_rdmulh(wrap32(diff << self.left_shift), self.multiplier), DIFF_INTEGER_BITS)
        return tuple(int(v) for v in np.where(diff >= self.diff_min, exps, 0))

    def reference(self, x) -> np.ndarray:
        x = int8_input(x, (self.rows, self.depth), "input").astype(np.int64)
        out = np.full(x.shape, -128, dtype=np.int64)
        for row, values in enumerate(x):
            diff = values - values.max()
            inside = diff >= self.diff_min
            scaled = sat_rdmulh(wrap32(diff << self.left_shift), self.multiplier)
            exps = exp_on_negative_values(scaled, DIFF_INTEGER_BITS)
            total = int(wrap32(rescale(exps, 0, ACCUMULATOR_INTEGER_BITS)[inside].sum()))
            inverse, bits = reciprocal(total)
            y = rounding_divide_by_pot(sat_rdmulh(inverse, exps), bits + 31 - OUTPUT_BITS) - 128
            out[row] = np.where(inside, np.clip(y, -128, 127), -128)
        return out.astype(np.int8)


def softmax_multiplier(beta: float, input_scale: float) -> tuple[int, int, int] | None:
    """(multiplier, left shift, diff_min); None when beta * scale is too small (< 2^-27)."""
    real = min(beta * input_scale * (1 << (31 - DIFF_INTEGER_BITS)), float((1 << 31) - 1))
    if real < 1.0:
        return None
    multiplier, shift = quantize_multiplier(real)
    radius = ((1 << DIFF_INTEGER_BITS) - 1) * (1 << (31 - DIFF_INTEGER_BITS)) / (1 << shift)
    return multiplier, shift, -math.floor(radius)


def softmax_params(graph: Graph, op: Operator) -> SoftmaxParams:
    r = OperatorReader(graph, op)
    x, y = r.int8(0), r.int8(0, output=True)
    if abs(scale(y) - OUTPUT_SCALE) > 1e-6 * OUTPUT_SCALE or zero_point(y) != OUTPUT_ZERO:
        raise r.fail(f"output tensor {y.index} ({y.name}) has scale {scale(y):g} and zero point {zero_point(y)}; "
                     "TFLite's int8 softmax writes scale 1/256 and zero point -128")
    if tuple(y.shape) != tuple(x.shape) or not x.shape:
        raise r.fail(f"output shape {list(y.shape)} is not the input's {list(x.shape)}")
    beta = float(op.option("beta", 1.0))
    found = softmax_multiplier(beta, scale(x)) if beta > 0 and math.isfinite(beta) else None
    if found is None:
        raise r.fail(f"beta {beta:g} times the input scale {scale(x):g} is too small or not positive")
    depth = x.shape[-1]
    return SoftmaxParams(op.index, x.elements // depth, depth, *found)
