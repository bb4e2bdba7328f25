"""Constant folding of the shape arithmetic converters emit: Keras 3's Flatten on a dynamic
batch becomes SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE (tests/data/models/README.md), a new
shape computed at run time from a shape that is static once the batch is 1. At export these
operators are evaluated in Python and dropped; the RESHAPE gets the folded shape as a
constant. No C.

Folded: SHAPE (of a tensor's static shape), STRIDED_SLICE (constant input, begin, end and
strides; begin, end and shrink-axis masks; no ellipsis or new axes), PACK (of constants).
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Operator
from edgetune.codegen.tflite_schema import ModelError

FOLDABLE = ("SHAPE", "STRIDED_SLICE", "PACK")
SHAPE_TYPES = {2: np.int32, 4: np.int64}  # ShapeOptions.outType: TensorType INT32, INT64


def _fail(graph: Graph, op: Operator, what: str) -> ModelError:
    return ModelError(f"{graph.path}: operator {op.index} ({op.op}): {what}")


def producers(graph: Graph) -> dict[int, Operator]:
    """Which operator writes each tensor."""
    return {t: op for op in graph.operators for t in op.outputs if t >= 0}


def constant_value(graph: Graph, index: int) -> np.ndarray | None:
    """A tensor's value when it is known at export: stored data, or the output of a chain of
    foldable operators over such values; None otherwise."""
    t = graph.tensors[index]
    if t.constant:
        return t.array()
    op = producers(graph).get(index)
    if op is None or op.op not in FOLDABLE:
        return None
    inputs = [constant_value(graph, i) if op.op != "SHAPE" else None for i in op.inputs]
    if op.op != "SHAPE" and any(v is None for v in inputs):
        return None
    value = {"SHAPE": _shape, "STRIDED_SLICE": _strided_slice, "PACK": _pack}[op.op](graph, op, inputs)
    out = graph.tensors[op.outputs[0]]
    if value.size != out.elements:
        raise _fail(graph, op, f"folds to {value.size} values, but output tensor {out.index} holds {out.elements}")
    return value.reshape(out.shape)


def _shape(graph: Graph, op: Operator, _inputs) -> np.ndarray:
    source = graph.tensors[op.inputs[0]]
    dtype = SHAPE_TYPES.get(int(op.option("outType", 2)))
    if dtype is None:
        raise _fail(graph, op, f"output type {op.option('outType')} is not int32 or int64")
    return np.array(source.shape, dtype=dtype)


def _strided_slice(graph: Graph, op: Operator, inputs) -> np.ndarray:
    value, begin, end, strides = inputs
    if int(op.option("ellipsisMask", 0)) or int(op.option("newAxisMask", 0)) or op.option("offset", False):
        raise _fail(graph, op, "ellipsis and new-axis masks and offsets are not folded")
    masks = {name: int(op.option(name, 0)) for name in ("beginMask", "endMask", "shrinkAxisMask")}
    index = []
    for axis, (b, e, s) in enumerate(zip(begin.reshape(-1), end.reshape(-1), strides.reshape(-1))):
        if s == 0:
            raise _fail(graph, op, f"stride 0 along axis {axis}")
        if masks["shrinkAxisMask"] >> axis & 1:
            index.append(int(b))
            continue
        index.append(slice(None if masks["beginMask"] >> axis & 1 else int(b),
                           None if masks["endMask"] >> axis & 1 else int(e), int(s)))
    try:
        return np.asarray(value[tuple(index)])
    except IndexError as exc:
        raise _fail(graph, op, f"slice out of range ({exc})") from None


def _pack(graph: Graph, op: Operator, inputs) -> np.ndarray:
    if int(op.option("valuesCount", len(inputs))) != len(inputs):
        raise _fail(graph, op, f"valuesCount {op.option('valuesCount')} for {len(inputs)} inputs")
    try:
        return np.stack(inputs, axis=int(op.option("axis", 0)))
    except (ValueError, np.exceptions.AxisError) as exc:
        raise _fail(graph, op, f"cannot pack its inputs ({exc})") from None


def folded_operators(graph: Graph) -> frozenset[int]:
    """The indices of the operators evaluated at export, and of those another operator does the
    work of (Graph.absorbed: a dilated convolution's copies), so not in the generated C."""
    return frozenset(op.index for op in graph.operators
                     if op.op in FOLDABLE and all(constant_value(graph, t) is not None for t in op.outputs)
                     ) | frozenset(index for index, _ in graph.absorbed)
