"""STRIDED_SLICE of an activation (a converter's GRU slices its recurrent gates out of one
FULLY_CONNECTED this way), int8: values moved, not changed, so it is one more index map
(index_map.py). A STRIDED_SLICE of constants is folded at export instead (fold.py).

Per input axis the indices taken are TFLite's (strided_slice.cc, its StartForAxis and
StopForAxis): the begin, or the first index of the stride's direction under the begin mask; a
negative index counted from the end; clamped to the axis; the end likewise under the end
mask; a shrunk axis takes its one begin index and leaves the output's shape. Ellipsis and
new-axis masks and the `offset` option are refused, as fold.py refuses them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..graph import Graph, Operator
from .base import OperatorReader
from .index_map import IndexMapParams, _checked, _copying, _int_constant, _strides


@dataclass(frozen=True)
class StridedSliceParams(IndexMapParams):
    op = "STRIDED_SLICE"


def _taken(r: OperatorReader, axis: int, dim: int, bounds: tuple[int, int, int], masks: dict[str, int]) -> list[int]:
    """The input indices one axis takes, in order."""
    begin, end, stride = bounds
    if stride == 0:
        raise r.fail(f"stride 0 along axis {axis}")
    if masks["beginMask"] >> axis & 1:
        begin = 0 if stride > 0 else dim - 1
    if masks["shrinkAxisMask"] >> axis & 1:
        index = begin + dim if begin < 0 else begin
        if not 0 <= index < dim:
            raise r.fail(f"index {bounds[0]} shrinks axis {axis} of {dim} to nothing")
        return [index]
    # Python's slice of a range clamps as TFLite does (to [0, dim] going up, [-1, dim - 1] going down).
    return list(range(dim)[slice(begin, None if masks["endMask"] >> axis & 1 else end, stride)])


def strided_slice_params(graph: Graph, op: Operator) -> IndexMapParams:
    r, x, y = _copying(graph, op)
    if int(op.option("ellipsisMask", 0) or 0) or int(op.option("newAxisMask", 0) or 0) or op.option("offset", False):
        raise r.fail("ellipsis and new-axis masks and offsets are not supported")
    begin, end, strides = (_int_constant(r, k, what) for k, what in ((1, "begin"), (2, "end"), (3, "strides")))
    rank = len(x.shape)
    if not len(begin) == len(end) == len(strides) == rank:
        raise r.fail(f"begin, end and strides of {len(begin)}, {len(end)}, {len(strides)} values for a {rank}-D input")
    masks = {name: int(op.option(name, 0) or 0) for name in ("beginMask", "endMask", "shrinkAxisMask")}
    stride = _strides(tuple(x.shape))
    kept, fixed = [], 0
    for axis, dim in enumerate(x.shape):
        taken = _taken(r, axis, dim, (int(begin[axis]), int(end[axis]), int(strides[axis])), masks)
        if not taken:
            raise r.fail(f"takes nothing along axis {axis}")
        if masks["shrinkAxisMask"] >> axis & 1:
            fixed += taken[0] * stride[axis]
        else:
            kept.append(tuple(i * stride[axis] for i in taken))
    if not kept:  # every axis shrunk: one value
        kept = [(0,)]
    kept[0] = tuple(o + fixed for o in kept[0])  # the shrunk axes' offset, added once
    out = tuple(len(o) for o in kept)
    return _checked(r, StridedSliceParams(op.index, x.elements, out, tuple(kept)), y)
