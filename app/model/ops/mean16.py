"""MEAN on int16 (a 16x8 model's global average pooling, as Keras' GlobalAveragePooling2D
converts): ops/mean.py's arithmetic (the int32 sum of x - z_in, the count folded into the
multiplier) saturated to int16 (checked bit for bit in tests/test_int16_ops.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Operator
from .base import OperatorReader
from .fixedpoint import multiply_by_quantized_multiplier
from .mean import MeanParams, mean_params
from .sixteen import INT16_MAX, INT16_MIN, Int16Types, activation_of, typed_input

MAX_COUNT = 1 << 16  # int16 values an int32 sum holds


@dataclass(frozen=True)
class Mean16Params(Int16Types, MeanParams):
    template = "mean16.c.j2"

    def reference(self, x) -> np.ndarray:
        x = typed_input(x, "int16", self.shape, "input").astype(np.int64)
        acc = (x - self.zero_in).sum(axis=self.axes)
        y = multiply_by_quantized_multiplier(acc, self.multiplier, self.shift) + self.zero_out
        return np.clip(y, INT16_MIN, INT16_MAX).astype(np.int16)


def mean16_params(graph: Graph, op: Operator) -> Mean16Params:
    r = OperatorReader(graph, op)
    activation_of(r, 0), activation_of(r, 0, output=True)
    p = mean_params(graph, op, reader=r)
    if p.count > MAX_COUNT:
        raise r.fail(f"a mean of {p.count} int16 values: the int32 sum holds at most {MAX_COUNT}")
    return Mean16Params(p.index, p.shape, p.axes, p.zero_in, p.zero_out, p.multiplier, p.shift)
