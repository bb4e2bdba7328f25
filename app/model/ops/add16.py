"""ADD, SUB and SQUARED_DIFFERENCE on int16 (TFLite's 16x8 scheme): ADD's arithmetic
(ops/add.py) with TFLite Micro's left shift of 15 for int16 (20 for int8) before the inputs
are brought to twice the larger scale, the result saturated to the fused activation's range
in int16; SQUARED_DIFFERENCE with no left shift (7 for int8: TFLite Micro's outputs fit no
other), the difference squared and requantised by (2 max(s1, s2))^2 / s_out; broadcasting up
to 4-D (checked bit for bit in tests/test_int16_ops.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Operator
from ..arithmetic import quantize_multiplier
from .add import AddParams, SquaredDifferenceParams, SubParams, broadcast_shapes, multiplier_below_one
from .base import OperatorReader, scale, zero_point
from .fixedpoint import multiply_by_quantized_multiplier
from .sixteen import INT16_MAX, INT16_MIN, Int16Types, activation_of, typed_input

LEFT_SHIFT_16 = 15


class Add16:
    template = "add16.c.j2"
    left_shift = LEFT_SHIFT_16

    @property
    def in_place(self) -> tuple[int, ...]:
        return tuple(i for i, shape in enumerate(self.input_shapes) if shape == self.out_shape)

    def variables(self) -> dict:
        return dict(super(AddParams, self).variables(), left_shift=self.left_shift, subtract=self.subtract,
                    squared=self.squared)

    def reference(self, a, b) -> np.ndarray:
        a = typed_input(a, "int16", self.shape_a, "input 0")
        b = typed_input(b, "int16", self.shape_b, "input 1")
        ra, rb = self.rescaled(a, 0), self.rescaled(b, 1)
        total = ra - rb if self.subtract else ra + rb
        if self.squared:
            total = total * total  # |difference| <= 2^15: the square fits int32
        y = multiply_by_quantized_multiplier(total, self.mult_out, self.shift_out) + self.zero_out
        return np.clip(y, self.act_min, self.act_max).astype(np.int16)


@dataclass(frozen=True)
class Add16Params(Add16, Int16Types, AddParams):
    template = "add16.c.j2"
    left_shift = LEFT_SHIFT_16


@dataclass(frozen=True)
class Sub16Params(Add16, Int16Types, SubParams):
    template = "add16.c.j2"
    left_shift = LEFT_SHIFT_16


@dataclass(frozen=True)
class SquaredDifference16Params(Add16, Int16Types, SquaredDifferenceParams):
    template = "add16.c.j2"
    left_shift = 0


def squared_difference16_params(graph: Graph, op: Operator) -> SquaredDifference16Params:
    r = OperatorReader(graph, op)
    a, b, y = activation_of(r, 0), activation_of(r, 1), activation_of(r, 0, output=True)
    shape_a, shape_b, out_shape = broadcast_shapes(r, a.shape, b.shape, y.shape)
    twice_max = 2 * max(float(scale(a)), float(scale(b)))
    mult_a, shift_a = multiplier_below_one(r, scale(a) / twice_max, "input 0")
    mult_b, shift_b = multiplier_below_one(r, scale(b) / twice_max, "input 1")
    real_out = twice_max * twice_max / float(scale(y))
    mult_out, shift_out = quantize_multiplier(real_out)
    if shift_out > 0:  # the square of a difference of up to 2^15 shifted left would overflow int32
        raise r.fail(f"the output rescaling factor {real_out:g} is 1 or more (an output scale too small for the inputs')")
    return SquaredDifference16Params(op.index, shape_a, shape_b, out_shape, zero_point(a), zero_point(b),
                                     zero_point(y), mult_a, shift_a, mult_b, shift_b, mult_out, shift_out,
                                     INT16_MIN, INT16_MAX)


def add16_params(graph: Graph, op: Operator) -> AddParams:
    r = OperatorReader(graph, op)
    a, b, y = activation_of(r, 0), activation_of(r, 1), activation_of(r, 0, output=True)
    shape_a, shape_b, out_shape = broadcast_shapes(r, a.shape, b.shape, y.shape)
    twice_max = 2 * max(scale(a), scale(b))
    mult_a, shift_a = multiplier_below_one(r, scale(a) / twice_max, "input 0")
    mult_b, shift_b = multiplier_below_one(r, scale(b) / twice_max, "input 1")
    mult_out, shift_out = multiplier_below_one(r, twice_max / ((1 << LEFT_SHIFT_16) * scale(y)), "output")
    act_min, act_max = r.clamp(y, INT16_MIN, INT16_MAX)
    kind = Sub16Params if op.op == "SUB" else Add16Params
    return kind(op.index, shape_a, shape_b, out_shape, zero_point(a), zero_point(b), zero_point(y),
                mult_a, shift_a, mult_b, shift_b, mult_out, shift_out, act_min, act_max)
