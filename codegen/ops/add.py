"""ADD and SUB, int8: both inputs brought to a common scale before the sum (difference), the
result requantised to the output's, a fused activation as a clamp, numpy-style broadcasting
(up to 4-D).

TFLite's integer scheme (documented in TFLite's quantization spec and its add kernel's
parameters; checked bit for bit against TFLite Micro in tests/test_ops_add.py):
  twice_max = 2 * max(s1, s2)
  (m1, e1) = quantised s1 / twice_max,  (m2, e2) = quantised s2 / twice_max   (both <= 1/2)
  (mo, eo) = quantised twice_max / (2^20 * s_out)
  a = (x1 - z1) * 2^20 scaled by (m1, e1);  b = (x2 - z2) * 2^20 scaled by (m2, e2)
  y = clamp(z_out + (a + b) scaled by (mo, eo), act_min, act_max)
where "scaled by (m, e)" is the high multiply and rounding shift of fixedpoint.py. SUB is the
same with a - b (TFLite Micro's SUB prepares the same multipliers; checked bit for bit in
tests/test_ops_sub.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..model.arithmetic import quantize_multiplier
from ..model.graph import Graph, Operator
from .base import OperatorReader, StaticOp, int8_input, scale, zero_point
from .fixedpoint import multiply_by_quantized_multiplier

LEFT_SHIFT = 20  # the headroom TFLite gives int8 inputs before rescaling them
RANK = 4
# An input of at least this many values is rescaled through a table of its 256 possible
# results (1 KB of constants) instead of two multiplies per value: measured on the M55,
# ResNet-8's ADDs take 0.77 M, 0.39 M and 0.20 M instructions instead of 1.09 M, 0.76 M and 0.36 M
# (docs/operators-m55.md).
TABLE_MIN_ELEMENTS = 512
INT8_VALUES = np.arange(-128, 128, dtype=np.int64)


def broadcast_shapes(r: OperatorReader, a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...]) -> tuple:
    """The three shapes extended to 4-D (leading ones), checked to broadcast to the output."""
    if max(len(a), len(b), len(out)) > RANK:
        raise r.fail(f"shapes {list(a)} and {list(b)} have more than {RANK} dimensions")
    a4, b4, o4 = ((1,) * (RANK - len(s)) + tuple(s) for s in (a, b, out))
    for da, db, do in zip(a4, b4, o4):
        if max(da, db) != do or da not in (1, do) or db not in (1, do):
            raise r.fail(f"inputs of shapes {list(a)} and {list(b)} do not broadcast to the output's {list(out)}")
    return a4, b4, o4


def strides(shape: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a 4-D tensor read at the output's indices (0 along broadcast axes)."""
    steps, step = [], 1
    for d in reversed(shape):
        steps.append(step)
        step *= d
    return tuple(0 if d == 1 and o > 1 else s for d, o, s in zip(shape, out, reversed(steps)))


def multiplier_below_one(r: OperatorReader, real: float, what: str) -> tuple[int, int]:
    if not 0 < real < 1:
        raise r.fail(f"the {what} rescaling factor {real:g} is not in (0, 1) (TFLite's {r.op.op} needs it there)")
    return quantize_multiplier(real)


@dataclass(frozen=True)
class Broadcast(StaticOp):
    """An operator of two inputs broadcast to the output's shape, all extended to 4-D (ADD,
    SUB, SQUARED_DIFFERENCE, MUL)."""

    shape_a: tuple[int, int, int, int]
    shape_b: tuple[int, int, int, int]
    out_shape: tuple[int, int, int, int]

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return (self.shape_a, self.shape_b)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.out_shape

    @property
    def in_place(self) -> tuple[int, ...]:
        # An input of the output's shape is read at the output's own position (broadcast
        # inputs are read again later, so they cannot be overwritten).
        return tuple(i for i, shape in enumerate(self.input_shapes) if shape == self.out_shape)

    def variables(self) -> dict:
        # How the C walks the inputs: element strides at the output's indices, or one flat loop.
        return dict(super().variables(), strides_a=strides(self.shape_a, self.out_shape), strides_b=strides(self.shape_b, self.out_shape),
                    flat=self.shape_a == self.shape_b == self.out_shape, elements=int(np.prod(self.out_shape)),
                    per_channel=self.per_channel, channels=self.out_shape[3],
                    pixels=int(np.prod(self.out_shape[:3])))

    @property
    def per_channel(self) -> int | None:
        """The input holding one value per channel for every pixel (a squeeze-excite gate, a
        bias), when the other has the output's shape: 0 or 1; None otherwise."""
        channels_only = (1, 1, 1, self.out_shape[3])
        for which, (mine, other) in enumerate(((self.shape_a, self.shape_b), (self.shape_b, self.shape_a))):
            if mine == channels_only and other == self.out_shape and mine != self.out_shape:
                return which
        return None


@dataclass(frozen=True)
class AddParams(Broadcast):
    zero_a: int
    zero_b: int
    zero_out: int
    mult_a: int
    shift_a: int
    mult_b: int
    shift_b: int
    mult_out: int
    shift_out: int
    act_min: int
    act_max: int

    template = "add.c.j2"
    op = "ADD"
    subtract: ClassVar[bool] = False  # SubParams: input 0 less input 1
    squared: ClassVar[bool] = False  # SquaredDifferenceParams: the difference squared
    left_shift: ClassVar[int] = LEFT_SHIFT

    def variables(self) -> dict:
        tables = [tuple(int(v) for v in self.rescaled(INT8_VALUES, i)) if int(np.prod(shape)) >= TABLE_MIN_ELEMENTS
                  else None for i, shape in enumerate(self.input_shapes)]
        return dict(super().variables(), left_shift=self.left_shift,
                    table_a=tables[0], table_b=tables[1], subtract=self.subtract, squared=self.squared)

    def rescaled(self, x: np.ndarray, which: int) -> np.ndarray:
        """Input `which` (0 or 1) brought to the common scale, as int32 values."""
        zero, multiplier, shift = ((self.zero_a, self.mult_a, self.shift_a) if which == 0 else
                                   (self.zero_b, self.mult_b, self.shift_b))
        return multiply_by_quantized_multiplier((x.astype(np.int64) - zero) << self.left_shift, multiplier, shift)

    def reference(self, a, b) -> np.ndarray:
        a = int8_input(a, self.shape_a, "input 0")
        b = int8_input(b, self.shape_b, "input 1")
        total = self.rescaled(a, 0) - self.rescaled(b, 1) if self.subtract else self.rescaled(a, 0) + self.rescaled(b, 1)
        if self.squared:
            total = total * total  # |difference| < 2^15 at a left shift of 7: fits int32
        y = multiply_by_quantized_multiplier(total, self.mult_out, self.shift_out) + self.zero_out
        return np.clip(y, self.act_min, self.act_max).astype(np.int8)


@dataclass(frozen=True)
class SubParams(AddParams):
    """SUB: the parameters of ADD, the second input subtracted."""

    op = "SUB"
    subtract = True


@dataclass(frozen=True)
class SquaredDifferenceParams(AddParams):
    """SQUARED_DIFFERENCE: SUB's rescaling at a left shift of 7, the difference squared, the
    square requantised by twice_max^2 / (2^14 * s_out) (TFLite Micro's scheme)."""

    op = "SQUARED_DIFFERENCE"
    subtract = True
    squared = True
    left_shift = 7


def squared_difference_params(graph: Graph, op: Operator) -> SquaredDifferenceParams:
    r = OperatorReader(graph, op)
    a, b, y = r.int8(0), r.int8(1), r.int8(0, output=True)
    shape_a, shape_b, out_shape = broadcast_shapes(r, a.shape, b.shape, y.shape)
    twice_max = 2 * max(float(scale(a)), float(scale(b)))
    shift = SquaredDifferenceParams.left_shift
    mult_a, shift_a = multiplier_below_one(r, scale(a) / twice_max, "input 0")
    mult_b, shift_b = multiplier_below_one(r, scale(b) / twice_max, "input 1")
    real_out = twice_max * twice_max / ((1 << (2 * shift)) * float(scale(y)))
    mult_out, shift_out = quantize_multiplier(real_out)
    if shift_out > 0:
        # the square of a difference of up to 2^15 shifted left would overflow int32
        raise r.fail(f"the output rescaling factor {real_out:g} is 1 or more (an output scale too small for the inputs')")
    return SquaredDifferenceParams(op.index, shape_a, shape_b, out_shape, zero_point(a), zero_point(b), zero_point(y),
                                   mult_a, shift_a, mult_b, shift_b, mult_out, shift_out, -128, 127)


def add_params(graph: Graph, op: Operator) -> AddParams:
    """ADD's or SUB's parameters (the operator's name decides which)."""
    r = OperatorReader(graph, op)
    a, b, y = r.int8(0), r.int8(1), r.int8(0, output=True)
    shape_a, shape_b, out_shape = broadcast_shapes(r, a.shape, b.shape, y.shape)
    twice_max = 2 * max(scale(a), scale(b))
    mult_a, shift_a = multiplier_below_one(r, scale(a) / twice_max, "input 0")
    mult_b, shift_b = multiplier_below_one(r, scale(b) / twice_max, "input 1")
    mult_out, shift_out = multiplier_below_one(r, twice_max / ((1 << LEFT_SHIFT) * scale(y)), "output")
    act_min, act_max = r.clamp(y)
    kind = SubParams if op.op == "SUB" else AddParams
    return kind(op.index, shape_a, shape_b, out_shape, zero_point(a), zero_point(b), zero_point(y),
                     mult_a, shift_a, mult_b, shift_b, mult_out, shift_out, act_min, act_max)
