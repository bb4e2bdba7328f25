"""One-operator int8 TFLite models for Vela, without TensorFlow.

A model is a list of tensors (shape, int8/int32, quantisation, optional constant data) and a
list of operators over them, option fields named as in TFLite's schema.fbs (`Padding`,
`StrideW`; enum values by name, "VALID"). `build_model` checks it and writes it with
edgetune's one TFLite writer, the model's (edgetune.model.builder: TFLite Micro's schema
bindings, object API).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgetune.codegen.tflite_schema import ModelError, schema
from edgetune.errors import EdgetuneError
from edgetune.model.builder import build_model as write_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor

_DTYPES = {"int8": np.int8, "int32": np.int32}


class ModelBuildError(EdgetuneError, ValueError):
    """The model description is inconsistent (shapes, types, quantisation)."""


@dataclass(frozen=True)
class Quant:
    """Affine quantisation: real = scale * (q - zero_point); per-axis when len(scale) > 1."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int = 0


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # "int8" or "int32"
    quant: Quant | None = None
    data: np.ndarray | None = field(default=None, compare=False, hash=False)  # constants only


@dataclass(frozen=True)
class OperatorSpec:
    """A builtin operator: its BuiltinOperator name, options table name and option fields."""

    builtin: str  # e.g. "CONV_2D"
    inputs: tuple[int, ...]  # tensor indices (-1: optional input absent)
    outputs: tuple[int, ...]
    options: str = ""  # e.g. "Conv2DOptions"; "" for operators without options
    option_fields: tuple[tuple[str, object], ...] = ()  # ("Padding", "VALID"), ("StrideW", 1), ...


@dataclass(frozen=True)
class ModelSpec:
    tensors: tuple[TensorSpec, ...]
    operators: tuple[OperatorSpec, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    description: str = "edgetune"


def _check(spec: ModelSpec) -> None:
    count = len(spec.tensors)
    for t in spec.tensors:
        if t.dtype not in _DTYPES:
            raise ModelBuildError(f"tensor {t.name}: dtype {t.dtype!r} is not int8 or int32")
        if t.data is not None and tuple(t.data.shape) != tuple(t.shape):
            raise ModelBuildError(f"tensor {t.name}: data shape {t.data.shape} is not {t.shape}")
        if t.quant is not None and len(t.quant.scale) != len(t.quant.zero_point):
            raise ModelBuildError(f"tensor {t.name}: {len(t.quant.scale)} scales but {len(t.quant.zero_point)} zero points")
    for op in spec.operators:
        for index in (*op.inputs, *op.outputs):
            if not -1 <= index < count:
                raise ModelBuildError(f"operator {op.builtin}: tensor index {index} out of range")


def _quantization(quant: Quant | None) -> Quantization | None:
    if quant is None:
        return None
    return Quantization(tuple(map(float, quant.scale)), tuple(map(int, quant.zero_point)), int(quant.axis))


def _tensor(index: int, t: TensorSpec) -> Tensor:
    if t.data is None:
        return Tensor(index, t.name, tuple(t.shape), t.dtype, _quantization(t.quant))
    return constant(index, t.name, np.asarray(t.data, dtype=_DTYPES[t.dtype]), _quantization(t.quant))


def _option(field_name: str, value) -> tuple[str, object]:
    """A schema.fbs field (`StrideW`, `Padding` "VALID") as the object API names and stores
    it (`strideW`, the enum's integer). An enum field is named after its enum, except the
    activation, whose enum is ActivationFunctionType."""
    if isinstance(value, str):
        enum = "ActivationFunctionType" if field_name == "FusedActivationFunction" else field_name
        try:
            value = int(getattr(getattr(schema(), enum), value))
        except AttributeError:
            raise ModelBuildError(f"TFLite schema has no {enum}.{value}") from None
    return field_name[0].lower() + field_name[1:], value


def build_model(spec: ModelSpec) -> bytes:
    """Serialise `spec` as a TFLite flatbuffer; the same spec always gives the same bytes."""
    _check(spec)
    try:
        schema()
        import flatbuffers  # noqa: F401 (the writer's; a dependency of tflite-micro)
    except (ModelError, ImportError) as exc:
        raise ModelBuildError(f"the NPU support needs tflite-micro and flatbuffers (pip install 'edgetune[npu]'): "
                              f"{exc}") from None
    tensors = [_tensor(i, t) for i, t in enumerate(spec.tensors)]
    operators = [Operator(i, op.builtin, tuple(op.inputs), tuple(op.outputs), op.options,
                          tuple(_option(name, value) for name, value in op.option_fields))
                 for i, op in enumerate(spec.operators)]
    try:
        return write_model(tensors, operators, spec.inputs, spec.outputs, spec.description)
    except ModelError as exc:
        raise ModelBuildError(str(exc)) from None
