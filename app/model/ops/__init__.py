"""The operators of a TFLite model that edgetune runs without tuning them, with TFLite Micro's
exact int8 semantics: per operator a frozen dataclass of its static parameters derived from
the model (`operator_params(graph, op)`: the registry, operators.py), a numpy reference and a
C template (templates/ops/). The shape arithmetic converters emit (SHAPE, STRIDED_SLICE, PACK
feeding a RESHAPE) is folded at export (fold.py). docs/operators.md."""
from __future__ import annotations

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
from .relu import Relu6Params, ReluParams, relu_params
from .resize_bilinear import ResizeBilinearParams, resize_bilinear_params
from .reshape import ReshapeParams, reshape_params, same_bytes_params
from .softmax import SoftmaxParams, softmax_params

__all__ = ["AddParams", "AveragePoolParams", "ConcatenationParams", "FOLDABLE", "HardSwishParams", "LeakyReluParams",
           "LogisticParams", "MaxPoolParams", "MeanParams", "MulParams", "PadParams", "QuantizeParams", "Relu6Params",
           "ReluParams", "ResizeBilinearParams", "ReshapeParams", "RsqrtParams", "SoftmaxParams", "StaticOp", "TanhParams", "constant_value", "folded_operators"]
