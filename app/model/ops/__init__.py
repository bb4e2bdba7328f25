"""The operators of a TFLite model that edgetune runs without tuning them, with TFLite Micro's
exact int8 semantics: per operator a frozen dataclass of its static parameters derived from
the model (`operator_params(graph, op)`: the registry, operators.py), a numpy reference and a
C template (templates/ops/). The shape arithmetic converters emit (SHAPE, STRIDED_SLICE, PACK
feeding a RESHAPE) is folded at export (fold.py). docs/operators.md."""
from __future__ import annotations

from .add import AddParams, SquaredDifferenceParams, SubParams
from .base import ElementWise, MultiOutput, StaticOp
from .concatenation import ConcatenationParams
from .fold import FOLDABLE, constant_value, folded_operators
from .index_map import GatherParams, IndexMapParams, ResizeNearestParams, TransposeParams
from .lookup import HardSwishParams, LeakyReluParams, LogisticParams, LookupOp, RsqrtParams, TanhParams
from .mean import MeanParams
from .mul import MulParams
from .pad import PadParams
from .pooling import AveragePoolParams, MaxPoolParams
from .quantize import QuantizeParams
from .relu import Relu6Params, ReluParams
from .resize_bilinear import ResizeBilinearParams
from .reshape import ExpandDimsParams, ReshapeParams, SqueezeParams
from .softmax import SoftmaxParams
from .split import PackParams, SplitParams, SplitVParams, UnpackParams
from .strided_slice import StridedSliceParams

__all__ = ["AddParams", "AveragePoolParams", "ConcatenationParams", "ElementWise", "ExpandDimsParams", "FOLDABLE",
           "GatherParams", "HardSwishParams", "IndexMapParams", "LeakyReluParams", "LogisticParams", "LookupOp",
           "MaxPoolParams", "MeanParams", "MulParams", "MultiOutput", "PackParams", "PadParams", "QuantizeParams", "Relu6Params", "ReluParams",
           "ResizeBilinearParams", "ReshapeParams", "ResizeNearestParams", "RsqrtParams", "SoftmaxParams",
           "SplitParams", "SplitVParams", "SqueezeParams", "StridedSliceParams", "SquaredDifferenceParams", "StaticOp", "SubParams", "TanhParams",
           "TransposeParams", "UnpackParams",
           "constant_value", "folded_operators"]
