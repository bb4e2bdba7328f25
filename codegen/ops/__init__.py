"""The operators of a TFLite model that edgetune runs without tuning them, with TFLite Micro's
exact int8 semantics: per operator a frozen dataclass of its static parameters derived from
the model (`operator_params(graph, op)`), a numpy reference and a C template
(codegen/templates/ops/). The shape arithmetic converters emit (SHAPE, STRIDED_SLICE, PACK
feeding a RESHAPE) is folded at export (fold.py). docs/operators.md."""
from __future__ import annotations

from typing import Callable

from ..model.graph import Graph, Operator
from ..model.schema import ModelError
from .add import AddParams, add_params, squared_difference_params
from .base import StaticOp
from .concatenation import ConcatenationParams, concatenation_params
from .fold import FOLDABLE, constant_value, folded_operators
from .index_map import gather_params, resize_nearest_params, transpose_params
from .lookup import (HardSwishParams, LeakyReluParams, LogisticParams, RsqrtParams, TanhParams, hard_swish_params,
                     leaky_relu_params, logistic_params, rsqrt_params, tanh_params)
from .mean import MeanParams, mean_params
from .mul import MulParams, mul_params
from .pad import PadParams, pad_params
from .pooling import AveragePoolParams, MaxPoolParams, pool_params
from .quantize import QuantizeParams, quantize_params
from .resize_bilinear import ResizeBilinearParams, resize_bilinear_params
from .reshape import ReshapeParams, reshape_params, same_bytes_params
from .softmax import SoftmaxParams, softmax_params

OPERATORS: dict[str, Callable[[Graph, Operator], StaticOp]] = {
    "ADD": add_params, "SUB": add_params, "AVERAGE_POOL_2D": pool_params, "MAX_POOL_2D": pool_params, "MEAN": mean_params,
    "RESHAPE": reshape_params, "SOFTMAX": softmax_params, "PAD": pad_params,
    "CONCATENATION": concatenation_params, "QUANTIZE": quantize_params, "LOGISTIC": logistic_params,
    "TANH": tanh_params, "HARD_SWISH": hard_swish_params, "LEAKY_RELU": leaky_relu_params, "MUL": mul_params,
    "EXPAND_DIMS": same_bytes_params, "SQUEEZE": same_bytes_params, "TRANSPOSE": transpose_params,
    "GATHER": gather_params, "RESIZE_NEAREST_NEIGHBOR": resize_nearest_params,
    "SQUARED_DIFFERENCE": squared_difference_params, "RSQRT": rsqrt_params,
    "RESIZE_BILINEAR": resize_bilinear_params,
}


def operator_params(graph: Graph, op: Operator) -> StaticOp:
    """The static parameters of one library operator; ModelError naming the operator and
    its index for one the library does not run (tuned and folded operators included)."""
    build = OPERATORS.get(op.op)
    if build is None:
        what = "is folded at export" if op.op in FOLDABLE else "is not in the operator library"
        raise ModelError(f"{graph.path}: operator {op.index} ({op.op}) {what} (the library runs "
                         f"{', '.join(OPERATORS)})")
    return build(graph, op)


__all__ = ["AddParams", "AveragePoolParams", "ConcatenationParams", "FOLDABLE", "HardSwishParams", "LeakyReluParams",
           "LogisticParams", "MaxPoolParams", "MeanParams", "MulParams", "ResizeBilinearParams", "RsqrtParams", "TanhParams",
           "OPERATORS", "PadParams", "QuantizeParams", "ReshapeParams", "SoftmaxParams", "StaticOp", "constant_value",
           "folded_operators", "operator_params"]
