"""NPU operators described by shape, their one-operator TFLite models, and Vela's options as
a search space. Needs no C kernel: Vela compiles the model."""
from .operators import NPU_OPERATORS, PAD_SAME, NpuOperator, NpuOperatorError, get_npu_operator
from .space import NPU_MODEL_VERSION, npu_space
from .tflite_model import ModelBuildError, ModelSpec, OperatorSpec, Quant, TensorSpec, build_model

__all__ = ["ModelBuildError", "ModelSpec", "NPU_MODEL_VERSION", "NPU_OPERATORS", "NpuOperator", "NpuOperatorError",
           "OperatorSpec", "PAD_SAME", "Quant", "TensorSpec", "build_model", "get_npu_operator", "npu_space"]
