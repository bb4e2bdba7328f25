"""TFLite models: reading a .tflite file into layers edgetune tunes (load_model), and the
TFLite Micro oracle each layer is checked against (oracle.py). docs/models.md."""
from __future__ import annotations

from .fit import check_fits
from .graph import Graph, Operator, Quantization, Tensor
from .layers import ModelLayer
from .model import Model, Workload, load_model
from .operators import SUPPORTED, TUNED, UNTUNED
from edgetune.codegen.tflite_schema import ModelError

__all__ = ["Graph", "Model", "ModelError", "ModelLayer", "Operator", "Quantization", "SUPPORTED", "TUNED", "Tensor",
           "UNTUNED", "Workload", "check_fits", "load_model"]
