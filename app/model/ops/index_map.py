"""Operators that move int8 values without changing them: TRANSPOSE, GATHER (constant indices)
and RESIZE_NEAREST_NEIGHBOR. TFLite Micro copies their bytes whatever the tensors'
quantisation, so each output element is one input element, and where it comes from is a sum
over the output's axes: output[i0, ..., in] = input[offsets_0[i0] + ... + offsets_n[in]].
The offsets are computed here, once, from the operator's constants; the C holds them as
small tables (one entry per output index along each axis, not per element) and copies.

- TRANSPOSE: output axis k walks input axis perm[k]: offsets_k[i] = i * stride(perm[k]).
- GATHER along `axis` with constant indices: that axis takes the indices (several index
  dimensions are one axis of the output, laid out alike); offsets = index * stride(axis).
- RESIZE_NEAREST_NEIGHBOR: each output row and column takes TFLite's nearest input one
  (computed in float32 as TFLite does, with align_corners and half_pixel_centers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..graph import Graph, Operator
from .base import OperatorReader, StaticOp
from .fold import constant_value

RANK = 5  # TFLite Micro's TRANSPOSE takes up to 5 dimensions


@dataclass(frozen=True)
class IndexMapParams(StaticOp):
    in_elements: int
    out_shape: tuple[int, ...]
    offsets: tuple[tuple[int, ...], ...]  # per output axis, the input offset of each index
    dtype: str = "int8"  # the values moved: int8, or int16 (a 16x8 model's)

    template = "index_map.c.j2"

    @property
    def input_ctypes(self) -> tuple[str, ...]:
        return (f"{self.dtype}_t",)

    @property
    def output_ctype(self) -> str:
        return f"{self.dtype}_t"

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return ((self.in_elements,),)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.out_shape

    def sources(self) -> np.ndarray:
        """The input index of every output element, in the output's order."""
        grids = np.meshgrid(*[np.asarray(o, dtype=np.int64) for o in self.offsets], indexing="ij")
        return sum(grids, np.zeros(self.out_shape, dtype=np.int64)).reshape(-1)

    def reference(self, x) -> np.ndarray:
        x = np.asarray(x)
        if x.dtype != np.dtype(self.dtype) or x.size != self.in_elements:
            raise ValueError(f"input must be {self.dtype} with {self.in_elements} elements, got {x.dtype} {list(x.shape)}")
        return x.reshape(-1)[self.sources()].reshape(self.out_shape)

    def describe(self) -> str:
        return f"{self.in_elements} values -> {'x'.join(map(str, self.out_shape))}"

    def variables(self) -> dict:
        # The innermost axis copies a run when its offsets are consecutive (a row of channels).
        inner = self.offsets[-1]
        run = len(inner) > 1 and all(b == a + 1 for a, b in zip(inner, inner[1:]))
        return dict(super().variables(), run=run, rank=len(self.out_shape), ctype=f"{self.dtype}_t")


@dataclass(frozen=True)
class TransposeParams(IndexMapParams):
    op = "TRANSPOSE"


@dataclass(frozen=True)
class GatherParams(IndexMapParams):
    op = "GATHER"


@dataclass(frozen=True)
class ResizeNearestParams(IndexMapParams):
    op = "RESIZE_NEAREST_NEIGHBOR"


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    steps, step = [], 1
    for d in reversed(shape):
        steps.append(step)
        step *= d
    return tuple(reversed(steps))


def _int_constant(r: OperatorReader, position: int, what: str) -> np.ndarray:
    value = constant_value(r.graph, r.op.inputs[position]) if position < len(r.op.inputs) else None
    if value is None:
        t = r.tensor(position)
        raise r.fail(f"its {what} (tensor {t.index}, {t.name}) must be a constant")
    return np.asarray(value).astype(np.int64).reshape(-1)


def _copying(graph: Graph, op: Operator):
    """The reader, the int8 (or int16) input and output, checked to have a static shape of at most RANK."""
    r = OperatorReader(graph, op)
    if r.tensor(0).dtype == "int16":  # a 16x8 model's: the values are moved alike
        from .sixteen import activation_of

        x, y = activation_of(r, 0), activation_of(r, 0, output=True)
    else:
        x, y = r.int8(0), r.int8(0, output=True)
    if max(len(x.shape), len(y.shape)) > RANK:
        raise r.fail(f"shapes of more than {RANK} dimensions ({list(x.shape)} -> {list(y.shape)})")
    return r, x, y


def _checked(r: OperatorReader, params: IndexMapParams, y) -> IndexMapParams:
    if tuple(params.out_shape) != tuple(y.shape) and int(np.prod(params.out_shape)) != y.elements:
        raise r.fail(f"computes a {list(params.out_shape)} output, but output tensor {y.index} is {list(y.shape)}")
    return params if y.dtype == "int8" else replace(params, dtype=y.dtype)


def transpose_params(graph: Graph, op: Operator) -> IndexMapParams:
    r, x, y = _copying(graph, op)
    perm = [int(p) for p in _int_constant(r, 1, "permutation")]
    if sorted(perm) != list(range(len(x.shape))):
        raise r.fail(f"permutation {perm} is not one of the input's {len(x.shape)} axes")
    stride = _strides(tuple(x.shape))
    offsets = tuple(tuple(i * stride[p] for i in range(x.shape[p])) for p in perm)
    out = tuple(x.shape[p] for p in perm)
    return _checked(r, TransposeParams(op.index, x.elements, out, offsets), y)


def gather_params(graph: Graph, op: Operator) -> IndexMapParams:
    r, x, y = _copying(graph, op)
    if x.dtype == "int16":  # TFLite Micro's GATHER fails to prepare on int16 values: no spec to be exact with
        raise r.fail(f"input tensor {x.index} ({x.name}) is int16; TFLite Micro's GATHER takes no int16 values")
    if int(op.option("batchDims", 0) or 0) != 0:
        raise r.fail(f"batch_dims {op.option('batchDims')} (edgetune gathers with batch_dims 0)")
    rank = len(x.shape)
    axis = int(op.option("axis", 0) or 0)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise r.fail(f"axis {op.option('axis')} is not one of the input's {rank} axes")
    indices = [int(i) for i in _int_constant(r, 1, "indices")]
    bad = [i for i in indices if not 0 <= i < x.shape[axis]]
    if bad:
        raise r.fail(f"index {bad[0]} is outside the input's axis {axis} of {x.shape[axis]} (TFLite Micro fails on it)")
    stride = _strides(tuple(x.shape))
    shape = [*x.shape[:axis], len(indices), *x.shape[axis + 1:]]
    offsets = [tuple(i * stride[k] for i in range(d)) for k, d in enumerate(x.shape)]
    offsets[axis] = tuple(i * stride[axis] for i in indices)
    return _checked(r, GatherParams(op.index, x.elements, tuple(shape), tuple(offsets)), y)


def nearest(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> list[int]:
    """TFLite's GetNearestNeighbor for each output index, in float32 as TFLite computes it."""
    f32 = np.float32
    scale = f32(in_size - 1) / f32(out_size - 1) if align_corners and out_size > 1 else f32(in_size) / f32(out_size)
    offset = f32(0.5) if half_pixel else f32(0.0)
    found = []
    for i in range(out_size):
        value = float(f32(f32(i) + offset) * scale)
        # TfLiteRound rounds halves away from zero; the value is never negative here, and
        # value + 1/2 is exact in double for a float32 value
        picked = math.floor(value + 0.5) if align_corners else math.floor(value)
        picked = min(picked, in_size - 1)
        found.append(max(picked, 0) if half_pixel else picked)
    return found


def resize_nearest_params(graph: Graph, op: Operator) -> IndexMapParams:
    r, x, y = _copying(graph, op)
    if len(x.shape) != 4:
        raise r.fail(f"input of shape {list(x.shape)} is not 4-D (NHWC)")
    size = [int(s) for s in _int_constant(r, 1, "size")]
    if len(size) != 2 or min(size) < 1:
        raise r.fail(f"size {size} is not two positive numbers")
    align, half = bool(op.option("alignCorners", False)), bool(op.option("halfPixelCenters", False))
    n, h, w, c = x.shape
    stride = _strides(tuple(x.shape))
    offsets = (tuple(i * stride[0] for i in range(n)),
               tuple(i * stride[1] for i in nearest(h, size[0], align, half)),
               tuple(i * stride[2] for i in nearest(w, size[1], align, half)),
               tuple(range(c)))
    out = (n, size[0], size[1], c)
    return _checked(r, ResizeNearestParams(op.index, x.elements, out, offsets), y)
