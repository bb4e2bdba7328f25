"""LEAKY_RELU on int16: ops/lookup.py's arithmetic computed per value instead of through a
table (x - z_in scaled by s_in / s_out where it is >= 0, by s_in * alpha / s_out below, plus
z_out), saturated to int16, as TFLite Micro computes it (checked bit for bit in
tests/test_int16_ops.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Operator
from .base import ElementWise, OperatorReader
from .fixedpoint import multiply_by_quantized_multiplier
from .lookup import leaky_relu_params
from .sixteen import INT16_MAX, INT16_MIN, Int16Types, activation_of, typed_input


@dataclass(frozen=True)
class LeakyRelu16Params(Int16Types, ElementWise):
    zero_in: int
    zero_out: int
    identity_multiplier: int
    identity_shift: int
    alpha_multiplier: int
    alpha_shift: int

    template = "leaky_relu16.c.j2"
    op = "LEAKY_RELU"

    def reference(self, x) -> np.ndarray:
        d = typed_input(x, "int16", (self.elements,), "input").astype(np.int64) - self.zero_in
        identity = multiply_by_quantized_multiplier(d, self.identity_multiplier, self.identity_shift)
        alpha = multiply_by_quantized_multiplier(d, self.alpha_multiplier, self.alpha_shift)
        return np.clip(np.where(d >= 0, identity, alpha) + self.zero_out, INT16_MIN, INT16_MAX).astype(np.int16)


def leaky_relu16_params(graph: Graph, op: Operator) -> LeakyRelu16Params:
    r = OperatorReader(graph, op)
    x, y = activation_of(r, 0), activation_of(r, 0, output=True)
    if x.elements != y.elements:
        raise r.fail(f"output tensor {y.index} ({y.name}) has {y.elements} values, the input {x.elements}")
    p = leaky_relu_params(graph, op, reader=r)
    return LeakyRelu16Params(op.index, x.elements, p.zero_in, p.zero_out, p.identity_multiplier, p.identity_shift,
                             p.alpha_multiplier, p.alpha_shift)
