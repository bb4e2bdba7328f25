"""SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND, int8: values moved between the spatial axes and
the batch, not changed (TFLite Micro copies the bytes whatever the tensors' quantisation).
TensorFlow's converter writes every dilated convolution as SPACE_TO_BATCH_ND -> CONV_2D ->
BATCH_TO_SPACE_ND; a model's such chain runs as one dilated convolution instead
(app/model/dilation.py), and these are the operators on their own.

TFLite Micro takes 3-D [n, h, c] and 4-D [n, h, w, c] tensors (a 3-D one is 4-D with w = 1)
and blocks of one or two spatial axes. With block (bh, bw):

- SPACE_TO_BATCH_ND pads the spatial axes (paddings [[top, bottom], [left, right]]) with 0,
  then output batch
  (sh * bw + sw) * n + b holds the padded input's pixels at rows oh * bh + sh and columns
  ow * bw + sw of batch b: a template of its own (the padding is not a sum of per-axis terms).
- BATCH_TO_SPACE_ND is the inverse without padding, then crops [[top, bottom], [left, right]]:
  output (b, h, w) is input batch ((h + top) % bh * bw + (w + left) % bw) * n + b at row
  (h + top) // bh and column (w + left) // bw, a sum of one term per output axis: an index map
  (index_map.py).

The pad value is TFLite Micro's, not TFLite's: TFLite pads an int8 SPACE_TO_BATCH_ND with the
output's zero point, but TFLite Micro's kernel never sets its pad value (`output_offset` of
its parameters, a buffer of fresh arena memory), so it pads with whatever the arena held
there: 0 in an arena zeroed at start (a firmware's static arena, and the oracle's: oracle.py)
and the raw value 0 is what edgetune writes. A model's dilated convolution whose input zero
point is not 0 reads that padding at its edges (dilation.py keeps it so).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Operator, Tensor
from .base import OperatorReader, StaticOp, int8_input
from .index_map import IndexMapParams, _strides


@dataclass(frozen=True)
class SpaceToBatchParams(StaticOp):
    shape: tuple[int, int, int, int]  # the input as [n, h, w, c] (w = 1 for a 3-D one)
    block: tuple[int, int]  # (bh, bw)
    pads: tuple[tuple[int, int], tuple[int, int]]  # (top, bottom), (left, right)
    value: int = 0  # what the padding holds (TFLite Micro's, above)

    template = "space_to_batch.c.j2"
    op = "SPACE_TO_BATCH_ND"

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return (self.shape,)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.out_shape

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        n, h, w, c = self.shape
        (bh, bw), ((top, bottom), (left, right)) = self.block, self.pads
        return n * bh * bw, (h + top + bottom) // bh, (w + left + right) // bw, c

    def columns(self) -> tuple[tuple[int, int], ...]:
        """Per column offset sw in the block, the output columns [first, end) that read the
        input (ow * bw + sw - left inside it): the rest of a row is padding."""
        _, _, w, _ = self.shape
        bw, left, out = self.block[1], self.pads[1][0], self.out_shape[2]
        spans = []
        for sw in range(bw):
            inside = [ow for ow in range(out) if 0 <= ow * bw + sw - left < w]
            spans.append((inside[0], inside[-1] + 1) if inside else (0, 0))
        return tuple(spans)

    def variables(self) -> dict:
        return dict(super().variables(), out_shape=self.out_shape, columns=self.columns())

    def reference(self, x) -> np.ndarray:
        x = int8_input(x, self.shape, "input")
        n, h, w, c = self.shape
        (bh, bw), ((top, bottom), (left, right)) = self.block, self.pads
        padded = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=self.value)
        _, oh, ow, _ = self.out_shape
        # padded[b, oh * bh + sh, ow * bw + sw, c] lands in batch (sh * bw + sw) * n + b
        blocks = padded.reshape(n, oh, bh, ow, bw, c).transpose(2, 4, 0, 1, 3, 5)
        return blocks.reshape(self.out_shape).copy()


@dataclass(frozen=True)
class BatchToSpaceParams(IndexMapParams):
    op = "BATCH_TO_SPACE_ND"


def _as_4d(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """TFLite Micro's view of a 3-D [n, h, c] tensor: [n, h, 1, c]."""
    return (shape[0], shape[1], 1, shape[2]) if len(shape) == 3 else tuple(shape)


def _blocked(graph: Graph, op: Operator, what: str):
    """The reader, the int8 input and output (3-D or 4-D), the block (bh, bw) and the
    paddings or crops as ((top, bottom), (left, right)), all checked."""
    r = OperatorReader(graph, op)
    x, y = r.int8(0), r.int8(0, output=True)
    rank = len(x.shape)
    if rank not in (3, 4) or len(y.shape) != rank:
        raise r.fail(f"input of shape {list(x.shape)} and output {list(y.shape)}: TFLite Micro takes 3-D "
                     "[n, h, c] or 4-D [n, h, w, c] tensors")
    spatial = rank - 2
    block, edges = r.constant(1), r.constant(2)
    if block.shape != (spatial,) or edges.shape != (spatial, 2) or any(
            r.tensor(k).dtype != "int32" for k in (1, 2)):
        raise r.fail(f"block shape {list(block.shape)} ({r.tensor(1).dtype}) and {what} {list(edges.shape)} "
                     f"({r.tensor(2).dtype}) must be int32 [{spatial}] and [{spatial}, 2] for a {rank}-D input")
    if min(block) < 1:
        raise r.fail(f"block shape {block.tolist()} is not positive")
    if edges.min() < 0:
        raise r.fail(f"negative {what} {edges.tolist()}")
    pairs = [(int(a), int(b)) for a, b in edges] + [(0, 0)] * (2 - spatial)
    return r, x, y, (int(block[0]), int(block[1]) if spatial == 2 else 1), (pairs[0], pairs[1])


def _check_output(r: OperatorReader, y: Tensor, shape: tuple[int, int, int, int]) -> None:
    """The output tensor's stored shape is the operator's (TFLite Micro sizes it by the stored
    one: a model converted with a dynamic batch stores batch 1 for SPACE_TO_BATCH_ND's blocks,
    and TFLite Micro then moves one block only)."""
    if _as_4d(tuple(y.shape)) != shape:
        given = list(y.shape)
        dynamic = (" (the model was converted with a dynamic batch; TFLite Micro sizes tensors by the stored shape: "
                   "convert it with a fixed batch of 1)" if y.signature and y.signature[0] < 0 else "")
        raise r.fail(f"output tensor {y.index} ({y.name}) has shape {given}, but the operator gives "
                     f"{list(shape if len(given) == 4 else (shape[0], shape[1], shape[3]))}{dynamic}")


def space_to_batch_params(graph: Graph, op: Operator) -> SpaceToBatchParams:
    r, x, y, block, pads = _blocked(graph, op, "paddings")
    n, h, w, c = _as_4d(tuple(x.shape))
    for size, (before, after), b, axis in ((h, pads[0], block[0], "height"), (w, pads[1], block[1], "width")):
        if (size + before + after) % b:
            raise r.fail(f"the padded {axis} {size} + {before} + {after} is not a multiple of the block's {b}")
    params = SpaceToBatchParams(op.index, (n, h, w, c), block, pads)
    _check_output(r, y, params.out_shape)
    return params


def batch_to_space_params(graph: Graph, op: Operator) -> BatchToSpaceParams:
    r, x, y, (bh, bw), ((top, bottom), (left, right)) = _blocked(graph, op, "crops")
    batches, h, w, c = _as_4d(tuple(x.shape))
    if batches % (bh * bw):
        raise r.fail(f"input batch {batches} is not a multiple of the block's {bh} x {bw}")
    n = batches // (bh * bw)
    out = (n, h * bh - top - bottom, w * bw - left - right, c)
    if min(out[1:3]) < 1:
        raise r.fail(f"crops {[[top, bottom], [left, right]]} leave no output of {h * bh} x {w * bw}")
    _check_output(r, y, out)
    stride_b, stride_h, stride_w, _ = _strides((batches, h, w, c))
    offsets = (tuple(b * stride_b for b in range(n)),
               tuple((i + top) % bh * bw * n * stride_b + (i + top) // bh * stride_h for i in range(out[1])),
               tuple((j + left) % bw * n * stride_b + (j + left) // bw * stride_w for j in range(out[2])),
               tuple(range(c)))
    return BatchToSpaceParams(op.index, x.elements, out, offsets)
