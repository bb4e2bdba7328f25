"""RESHAPE, int8: the same bytes under a new shape (TFLite Micro copies them; an exporter
may run it in place). The new shape comes from the shape input (a constant, or the folded
SHAPE/STRIDED_SLICE/PACK chain: fold.py) or the newShape option, with one -1 inferred, and
must be the output tensor's.

EXPAND_DIMS (a Keras Conv1D's first operator) and SQUEEZE are the same copy: TFLite Micro
copies their bytes whatever the tensors' quantisation, so the output is the input's bytes
under the output tensor's shape (the axes they add or remove change no value)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..graph import Graph, Operator
from .base import ElementWise, OperatorReader, int8_input, one_to_one
from .fold import constant_value


@dataclass(frozen=True)
class ReshapeParams(ElementWise):
    out_shape: tuple[int, ...]

    template = "reshape.c.j2"
    op = "RESHAPE"

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.out_shape

    def reference(self, x) -> np.ndarray:
        return int8_input(x, (self.elements,), "input").reshape(self.out_shape).copy()


def _new_shape(r: OperatorReader, elements: int) -> tuple[int, ...] | None:
    op = r.op
    if len(op.inputs) > 1 and op.inputs[1] >= 0:
        value = constant_value(r.graph, op.inputs[1])
        if value is None:
            t = r.tensor(1)
            raise r.fail(f"its shape input (tensor {t.index}, {t.name}) is computed at run time; edgetune folds "
                         "constants and SHAPE/STRIDED_SLICE/PACK chains only")
        shape = [int(v) for v in value.reshape(-1)]
    elif op.option("newShape") is not None:
        shape = [int(v) for v in op.option("newShape")]
    else:
        return None
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise r.fail(f"new shape {shape} is not a shape")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1]))
        if known == 0 or elements % known:
            raise r.fail(f"new shape {shape} does not fit {elements} values")
        shape[shape.index(-1)] = elements // known
    return tuple(shape)


def reshape_params(graph: Graph, op: Operator) -> ReshapeParams:
    r = OperatorReader(graph, op)
    x, y = r.int8(0), r.int8(0, output=True)
    shape = _new_shape(r, x.elements)
    if shape is not None and shape != tuple(y.shape):
        raise r.fail(f"the new shape {list(shape)} is not the output tensor's {list(y.shape)}")
    one_to_one(r)
    return ReshapeParams(op.index, x.elements, tuple(y.shape))


@dataclass(frozen=True)
class ExpandDimsParams(ReshapeParams):
    op: ClassVar[str] = "EXPAND_DIMS"


@dataclass(frozen=True)
class SqueezeParams(ReshapeParams):
    op: ClassVar[str] = "SQUEEZE"


def same_bytes_params(graph: Graph, op: Operator) -> ReshapeParams:
    """EXPAND_DIMS or SQUEEZE: the output tensor's shape holds what the axes did; the values
    must be as many."""
    r = OperatorReader(graph, op)
    x, y = one_to_one(r)
    kind = ExpandDimsParams if op.op == "EXPAND_DIMS" else SqueezeParams
    return kind(op.index, x.elements, tuple(y.shape))
