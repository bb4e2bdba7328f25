"""SPLIT, SPLIT_V, UNPACK (one input, several outputs) and PACK (several inputs, one output):
values moved, not changed. TFLite Micro's kernels (split.cc, split_v.cc, unpack.cc, pack.cc)
copy the bytes whatever the tensors' scales and zero points (it checks none of them: an
output quantised unlike the input gets the input's raw values), for int8 and int16 alike,
so edgetune does the same.

All four are one copy pattern. The input is seen as `outer` rows (the product of the
dimensions before the axis); along the axis each output takes a run of `sizes[k]` slices of
`inner` values (the product of the dimensions after it), so row r of output k is a run of
`chunks[k] = sizes[k] * inner` values starting at r * row + (the chunks before k) of the input.

- SPLIT (inputs: axis, data; `num_splits` equal parts), SPLIT_V (inputs: data, size_splits,
  axis): the sizes are the outputs' own extents along the axis, as TFLite Micro reads them
  (split_v.cc takes the output tensors' shapes, not the size_splits values).
- UNPACK (`num`, `axis`): every size 1, the axis dropped from the outputs' shapes.
- PACK (`values_count`, `axis` of the output): the inverse, row r of the output is the r-th
  run of every input in turn.

With Helium each run is copied 16 bytes a step (VLDRB/VSTRB, the last step tail-predicated:
templates/ops/copy_bytes.c.j2): GCC 12 at -O2 leaves the plain loop one byte per iteration,
and bench/moves.py measures the Helium copy at 0.14 to 0.38 of its instructions on the M55.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Operator, Tensor
from .base import MultiOutput, OperatorReader, StaticOp
from .fold import constant_value

ITEM_BYTES = {"int8": 1, "int16": 2}  # the types TFLite Micro's four kernels move (beside float and int32)


def moved_tensor(r: OperatorReader, position: int, output: bool = False) -> Tensor:
    """An int8 or int16 tensor of a static shape: the values are moved as bytes, so its
    quantisation is not read (TFLite Micro reads none)."""
    t = r.tensor(position, output)
    role = f"output {position}" if output else f"input {position}"
    if t.dtype not in ITEM_BYTES:
        raise r.fail(f"{role} tensor {t.index} ({t.name}) is {t.dtype}; edgetune moves int8 and int16 values")
    if t.signature is not None and any(d < 0 for d in t.signature[1:]):
        raise r.fail(f"{role} tensor {t.index} ({t.name}) has a dynamic shape {list(t.signature)}")
    if any(d < 1 for d in t.shape):  # a scalar (UNPACK of a vector) is one value
        raise r.fail(f"{role} tensor {t.index} ({t.name}) has shape {list(t.shape)}")
    return t


def _as_moved(x, shape: tuple[int, ...], item_bytes: int, what: str) -> np.ndarray:
    dtype = np.int8 if item_bytes == 1 else np.int16
    x = np.asarray(x)
    if x.dtype != dtype or x.size != math.prod(shape):
        raise ValueError(f"{what} must be {np.dtype(dtype).name} with {math.prod(shape)} elements, "
                         f"got {x.dtype} {list(x.shape)}")
    return x.reshape(shape)


def _byte_shape(shape: tuple[int, ...], item_bytes: int) -> tuple[int, ...]:
    """A tensor's shape as the C reads it: bytes, so an int16 tensor gains a last axis of 2."""
    return shape if item_bytes == 1 else (*shape, item_bytes)


@dataclass(frozen=True)
class SplitParams(MultiOutput):
    in_shape: tuple[int, ...]
    axis: int  # in [0, rank)
    sizes: tuple[int, ...]  # each output's extent along the axis
    squeeze: bool  # UNPACK: the outputs have no axis
    item_bytes: int  # 1 (int8) or 2 (int16)
    data_input: int = 0  # the operator's input holding the values (SPLIT's second, after the axis)

    template = "split.c.j2"
    op = "SPLIT"

    @property
    def input_positions(self) -> tuple[int, ...]:
        return (self.data_input,)

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return (_byte_shape(self.in_shape, self.item_bytes),)

    def _shape_of(self, size: int) -> tuple[int, ...]:
        before, after = self.in_shape[:self.axis], self.in_shape[self.axis + 1:]
        return (*before, *after) if self.squeeze else (*before, size, *after)

    @property
    def output_shapes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(_byte_shape(self._shape_of(size), self.item_bytes) for size in self.sizes)

    def reference(self, x) -> tuple[np.ndarray, ...]:
        x = _as_moved(x, self.in_shape, self.item_bytes, "input")
        cuts = np.cumsum(self.sizes)[:-1]
        return tuple(part.reshape(self._shape_of(size)).copy()
                     for part, size in zip(np.split(x, cuts, axis=self.axis), self.sizes))

    def variables(self) -> dict:
        inner = math.prod(self.in_shape[self.axis + 1:]) * self.item_bytes
        return dict(super().variables(), outer=math.prod(self.in_shape[:self.axis]),
                    chunks=tuple(size * inner for size in self.sizes))

    def describe(self) -> str:
        return (f"{'x'.join(map(str, self.in_shape))} along axis {self.axis} into {list(self.sizes)}"
                f"{', axis dropped' if self.squeeze else ''}, {8 * self.item_bytes}-bit values")


@dataclass(frozen=True)
class SplitVParams(SplitParams):
    op = "SPLIT_V"


@dataclass(frozen=True)
class UnpackParams(SplitParams):
    op = "UNPACK"


@dataclass(frozen=True)
class PackParams(StaticOp):
    in_shape: tuple[int, ...]  # every input's
    count: int
    axis: int  # of the output, in [0, rank of the output)
    item_bytes: int

    template = "pack.c.j2"
    op = "PACK"

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return (_byte_shape(self.in_shape, self.item_bytes),) * self.count

    @property
    def output_shape(self) -> tuple[int, ...]:
        return _byte_shape((*self.in_shape[:self.axis], self.count, *self.in_shape[self.axis:]), self.item_bytes)

    def reference(self, *inputs) -> np.ndarray:
        xs = [_as_moved(x, self.in_shape, self.item_bytes, f"input {i}") for i, x in enumerate(inputs)]
        return np.stack(xs, axis=self.axis)

    def variables(self) -> dict:
        return dict(super().variables(), outer=math.prod(self.in_shape[:self.axis]),
                    chunk=math.prod(self.in_shape[self.axis:]) * self.item_bytes)

    def describe(self) -> str:
        return f"{self.count} x {'x'.join(map(str, self.in_shape))} stacked on axis {self.axis}, " \
               f"{8 * self.item_bytes}-bit values"


def _axis(r: OperatorReader, value: int, rank: int) -> int:
    if not -rank <= value < rank:
        raise r.fail(f"axis {value} is outside a {rank}-D tensor")
    return value % rank


def _constant_axis(r: OperatorReader, position: int, rank: int) -> int:
    value = constant_value(r.graph, r.op.inputs[position]) if position < len(r.op.inputs) else None
    if value is None or np.asarray(value).size != 1:
        t = r.tensor(position)
        raise r.fail(f"its axis (input {position}, tensor {t.index}, {t.name}) must be one constant value "
                     "(TFLite Micro takes no other)")
    return _axis(r, int(np.asarray(value).reshape(-1)[0]), rank)


def _same_types(r: OperatorReader, tensors: list[Tensor]) -> int:
    kinds = {t.dtype for t in tensors}
    if len(kinds) > 1:
        raise r.fail(f"its tensors are of types {', '.join(sorted(kinds))}: the values are moved, so they are one type")
    return ITEM_BYTES[kinds.pop()]


def _split_sizes(r: OperatorReader, x: Tensor, outputs: list[Tensor], axis: int, squeeze: bool) -> tuple[int, ...]:
    """Each output's extent along the axis, checked against the input's shape."""
    sizes = []
    for k, y in enumerate(outputs):
        kept = (*x.shape[:axis], *x.shape[axis + 1:])
        given = tuple(y.shape) if squeeze else (*y.shape[:axis], *y.shape[axis + 1:])
        if given != kept or (not squeeze and len(y.shape) != len(x.shape)):
            raise r.fail(f"output {k} (tensor {y.index}, {y.name}) of shape {list(y.shape)} is not a part of the "
                         f"input's {list(x.shape)} along axis {axis}")
        sizes.append(1 if squeeze else y.shape[axis])
    if sum(sizes) != x.shape[axis]:
        raise r.fail(f"the outputs' sizes along axis {axis} add up to {sum(sizes)}, not the input's {x.shape[axis]}")
    return tuple(sizes)


def split_params(graph: Graph, op: Operator) -> SplitParams:
    """SPLIT (axis, data), SPLIT_V (data, size_splits, axis) or UNPACK (data)."""
    r = OperatorReader(graph, op)
    data = 1 if op.op == "SPLIT" else 0
    x = moved_tensor(r, data)
    outputs = [moved_tensor(r, k, output=True) for k in range(len(op.outputs))]
    item_bytes = _same_types(r, [x, *outputs])
    rank = len(x.shape)
    if op.op == "UNPACK":
        axis, count = _axis(r, int(op.option("axis", 0)), rank), int(op.option("num", len(outputs)))
    else:
        axis, count = _constant_axis(r, 0 if op.op == "SPLIT" else 2, rank), int(op.option("numSplits", len(outputs)))
    if count != len(outputs) or not outputs:
        raise r.fail(f"{'num' if op.op == 'UNPACK' else 'num_splits'} is {count} for {len(outputs)} outputs")
    sizes = _split_sizes(r, x, outputs, axis, op.op == "UNPACK")
    if op.op == "SPLIT" and len(set(sizes)) > 1:
        raise r.fail(f"its outputs' sizes {list(sizes)} along axis {axis} are not equal parts")
    kind = {"SPLIT": SplitParams, "SPLIT_V": SplitVParams, "UNPACK": UnpackParams}[op.op]
    return kind(op.index, tuple(x.shape), axis, sizes, op.op == "UNPACK", item_bytes, data)


def pack_params(graph: Graph, op: Operator) -> PackParams:
    r = OperatorReader(graph, op)
    inputs = [moved_tensor(r, i) for i in range(len(op.inputs))]
    y = moved_tensor(r, 0, output=True)
    item_bytes = _same_types(r, [*inputs, y])
    count = int(op.option("valuesCount", len(inputs)))
    if count != len(inputs) or not inputs:
        raise r.fail(f"values_count is {count} for {len(inputs)} inputs")
    axis = _axis(r, int(op.option("axis", 0)), len(y.shape))
    for i, x in enumerate(inputs):
        stacked = (*x.shape[:axis], count, *x.shape[axis:])
        if tuple(x.shape) != tuple(inputs[0].shape) or stacked != tuple(y.shape):
            raise r.fail(f"input {i} (tensor {x.index}, {x.name}) of shape {list(x.shape)}: {count} of them do not "
                         f"stack into the output's {list(y.shape)} along axis {axis}")
    return PackParams(op.index, tuple(inputs[0].shape), count, axis, item_bytes)
