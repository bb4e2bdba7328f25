"""AVERAGE_POOL_2D and MAX_POOL_2D, int8, NHWC: SAME or VALID padding with TFLite's offsets
(padded positions are left out of the window, not counted as zeros), strides, any batch, a
fused activation as a clamp.

As TFLite Micro's reference kernels compute them (checked bit for bit in
tests/test_ops_pooling.py):
- the window of output (y, x) starts at (y * stride_h - pad_top, x * stride_w - pad_left)
  and is cut to the input;
- average: the int32 sum of the window's values divided by the number of values in it,
  rounded to nearest with halves away from zero; max: the largest value;
- then clamped to the activation range. No rescaling: TFLite Micro pools only tensors whose
  scales differ by at most 1e-6 and whose zero points are equal (it refuses others when it
  prepares the model), and so does edgetune.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..arithmetic import output_size
from ..graph import Graph, Operator, Tensor
from .base import OperatorReader, StaticOp, scale, typed_input, zero_point
from .fixedpoint import c_divide

SCALE_TOLERANCE = 1e-6  # TFLite Micro's: |s_in - s_out| in float, at most this


@dataclass(frozen=True)
class PoolParams(StaticOp):
    batch: int
    h: int
    w: int
    c: int
    oh: int
    ow: int
    kh: int
    kw: int
    stride_h: int
    stride_w: int
    pad_top: int
    pad_left: int
    act_min: int
    act_max: int

    template = "pool.c.j2"

    @property
    def average(self) -> bool:
        return self.op == "AVERAGE_POOL_2D"

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.h, self.w, self.c)

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return (self.input_shape,)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.oh, self.ow, self.c)

    @property
    def vector_division_exact(self) -> bool:
        """Whether the Helium average's division (a high multiply by ceil(2^31 / count), see
        ops/pool.c.j2) is exact for every window: a * (count - 1) < 2^31 for the largest
        a = |sum| + count / 2 = 128 * count + count / 2; the count is at most kh * kw."""
        count = self.kh * self.kw
        return (128 * count + count // 2) * (count - 1) < 2**31

    @property
    def sums_fit_int16(self) -> bool:
        """Whether every window's sum fits an int16 lane (the Helium average then sums eight
        channels per vector): -128 * count >= -32768 and 127 * count <= 32767."""
        return self.kh * self.kw <= 256

    def variables(self) -> dict:
        return dict(super().variables(), average=self.average, vector_division_exact=self.vector_division_exact,
                    sums_fit_int16=self.sums_fit_int16)

    def window(self, y: int, x: int) -> tuple[slice, slice]:
        y0, x0 = y * self.stride_h - self.pad_top, x * self.stride_w - self.pad_left
        return (slice(max(y0, 0), min(y0 + self.kh, self.h)), slice(max(x0, 0), min(x0 + self.kw, self.w)))

    value_type = "int8"  # of the activations (a class attribute, not a field: Pool16 has int16)

    def reference(self, x) -> np.ndarray:
        x = typed_input(x, self.value_type, self.input_shape, "input").astype(np.int64)
        out = np.empty(self.output_shape, dtype=np.int64)
        for y in range(self.oh):
            for xo in range(self.ow):
                rows, cols = self.window(y, xo)
                patch = x[:, rows, cols, :]
                if self.average:
                    count = patch.shape[1] * patch.shape[2]
                    total = patch.sum(axis=(1, 2))
                    # C's division truncates; the half is added away from zero first.
                    half = np.where(total > 0, count // 2, -(count // 2))
                    out[:, y, xo, :] = c_divide(total + half, count)
                else:
                    out[:, y, xo, :] = patch.max(axis=(1, 2))
        return np.clip(out, self.act_min, self.act_max).astype(self.value_type)


@dataclass(frozen=True)
class AveragePoolParams(PoolParams):
    op = "AVERAGE_POOL_2D"


@dataclass(frozen=True)
class MaxPoolParams(PoolParams):
    op = "MAX_POOL_2D"


def pool_params(graph: Graph, op: Operator) -> PoolParams:
    r = OperatorReader(graph, op)
    return read_pooling(r, r.int8(0), r.int8(0, output=True), (AveragePoolParams, MaxPoolParams), r.clamp)


def read_pooling(r: OperatorReader, x: Tensor, y: Tensor, kinds: tuple[type, type],
                 clamp: Callable[[Tensor], tuple[int, int]], max_window: int | None = None) -> PoolParams:
    """The pooling's parameters from its options and tensors, checked (int8 and int16 alike):
    a 4-D input, a window and strides of at least 1 (at most `max_window` values, where the
    sum's type bounds it), the output shape TFLite's geometry gives, one quantisation on both
    sides, no window wholly in the padding. `kinds`: the (average, max) parameter classes;
    `clamp`: the output's fused-activation range (OperatorReader.clamp, with the type's bounds)."""
    op = r.op
    if len(x.shape) != 4:
        raise r.fail(f"input tensor {x.index} ({x.name}) has shape {list(x.shape)}, expected [n, h, w, c]")
    kh, kw = int(op.option("filterHeight", 0)), int(op.option("filterWidth", 0))
    sh, sw = int(op.option("strideH", 0)), int(op.option("strideW", 0))
    if min(kh, kw, sh, sw) < 1:
        raise r.fail(f"filter {kh}x{kw} with strides {sh}, {sw} is not a valid pooling window")
    if max_window is not None and kh * kw > max_window:
        raise r.fail(f"a {kh}x{kw} window sums more int16 values than an int32 holds")
    padding = r.padding()
    n, h, w, c = x.shape
    oh, pad_top, _ = output_size(h, kh, sh, 1, padding)
    ow, pad_left, _ = output_size(w, kw, sw, 1, padding)
    if oh < 1 or ow < 1 or tuple(y.shape) != (n, oh, ow, c):
        raise r.fail(f"output tensor {y.index} ({y.name}) has shape {list(y.shape)}, but the pooling gives "
                     f"{[n, oh, ow, c]}")
    if abs(float(np.float32(scale(x)) - np.float32(scale(y)))) > SCALE_TOLERANCE or zero_point(x) != zero_point(y):
        raise r.fail(f"input and output are quantised differently (scales {scale(x):g} and {scale(y):g}, zero points "
                     f"{zero_point(x)} and {zero_point(y)}); TFLite Micro pools only in one quantisation")
    cls = kinds[0] if op.op == "AVERAGE_POOL_2D" else kinds[1]
    act_min, act_max = clamp(y)
    params = cls(op.index, n, h, w, c, oh, ow, kh, kw, sh, sw, pad_top, pad_left, act_min, act_max)
    for oy, ox in ((oy, ox) for oy in range(oh) for ox in range(ow)):
        rows, cols = params.window(oy, ox)
        if rows.stop <= rows.start or cols.stop <= cols.start:
            raise r.fail(f"the window of output ({oy}, {ox}) lies wholly in the padding")
    return params
