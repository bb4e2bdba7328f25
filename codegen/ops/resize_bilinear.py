"""RESIZE_BILINEAR, int8: TFLite Micro's integer bilinear resize (its ResizeBilinearInteger).
Positions are in 1/1024ths: the scale per axis is round(1024 * in / out) (with
align_corners, round(1024 * (in - 1) / (out - 1))); output index i maps to
p = i * scale (half_pixel_centers: i * scale + scale / 2 - 512), between the rows
floor(p / 1024) (at least 0) and ceil(p / 1024) (at most in - 1), with weight p - 1024 * lower
on the upper one. The raw int8 values (no zero point: input and output share a quantisation)
are weighted by both axes' weights, summed in 2^20ths and rounded to nearest, ties away from
zero. Every term fits int32: 128 * 1024 * 1024 * 4 < 2^31."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.graph import Graph, Operator
from .base import OperatorReader, StaticOp, int8_input
from .fixedpoint import c_divide
from .fold import constant_value

ONE = 1 << 10  # positions and weights in 1/1024ths


@dataclass(frozen=True)
class AxisTaps:
    """Along one axis, for each output index: the lower and upper input index and the upper
    one's weight in 1/1024ths."""

    lower: tuple[int, ...]
    upper: tuple[int, ...]
    weight: tuple[int, ...]


def _c_div(a: int, b: int) -> int:
    return int(c_divide(a, b))


def axis_taps(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> AxisTaps:
    scale = _c_div(ONE * in_size + out_size // 2, out_size)
    if align_corners and out_size > 1:
        scale = _c_div(ONE * (in_size - 1) + (out_size - 1) // 2, out_size - 1)
    lower, upper, weight = [], [], []
    for i in range(out_size):
        position = i * scale + _c_div(scale, 2) - (1 << 9) if half_pixel else i * scale
        low = max(_c_div(position, ONE), 0)
        lower.append(low)
        upper.append(min(_c_div(position + ONE - 1, ONE), in_size - 1))
        weight.append(position - ONE * low)
    return AxisTaps(tuple(lower), tuple(upper), tuple(weight))


@dataclass(frozen=True)
class ResizeBilinearParams(StaticOp):
    in_shape: tuple[int, int, int, int]  # NHWC
    out_h: int
    out_w: int
    rows: AxisTaps
    columns: AxisTaps

    template = "resize_bilinear.c.j2"
    op = "RESIZE_BILINEAR"

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return (self.in_shape,)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.in_shape[0], self.out_h, self.out_w, self.in_shape[3])

    def describe(self) -> str:
        return f"{'x'.join(map(str, self.in_shape))} -> {self.out_h}x{self.out_w}"

    def reference(self, x) -> np.ndarray:
        x = int8_input(x, self.in_shape, "input").astype(np.int64)
        r, c = self.rows, self.columns
        wy = np.asarray(r.weight, dtype=np.int64)[None, :, None, None]
        wx = np.asarray(c.weight, dtype=np.int64)[None, None, :, None]
        def at(rows, cols):
            return x[:, list(rows)][:, :, list(cols)]
        total = (at(r.lower, c.lower) * (ONE - wy) * (ONE - wx) + at(r.upper, c.lower) * wy * (ONE - wx)
                 + at(r.lower, c.upper) * (ONE - wy) * wx + at(r.upper, c.upper) * wy * wx)
        rounded = np.where(total > 0, total + (1 << 19), total - (1 << 19))
        quotient = c_divide(rounded, 1 << 20)
        return quotient.astype(np.int8)


def resize_bilinear_params(graph: Graph, op: Operator) -> ResizeBilinearParams:
    r = OperatorReader(graph, op)
    x, y = r.int8(0), r.int8(0, output=True)
    if len(x.shape) != 4:
        raise r.fail(f"input of shape {list(x.shape)} is not 4-D (NHWC)")
    size = constant_value(graph, op.inputs[1]) if len(op.inputs) > 1 else None
    if size is None:
        raise r.fail("its size input must be a constant")
    out_h, out_w = (int(s) for s in np.asarray(size).reshape(-1)[:2])
    if min(out_h, out_w) < 1 or tuple(y.shape) != (x.shape[0], out_h, out_w, x.shape[3]):
        raise r.fail(f"size {[out_h, out_w]} does not give output tensor {y.index}'s shape {list(y.shape)}")
    align, half = bool(op.option("alignCorners", False)), bool(op.option("halfPixelCenters", False))
    _, h, w, _ = x.shape
    return ResizeBilinearParams(op.index, tuple(x.shape), out_h, out_w, axis_taps(h, out_h, align, half),
                                axis_taps(w, out_w, align, half))
