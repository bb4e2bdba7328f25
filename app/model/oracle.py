"""The oracle, which is not edgetune's: one layer as a one-operator TFLite model (its real
weights, bias, quantisation and options, copied from the model as stored) run through the
TFLite Micro interpreter from PyPI (`tflite_micro.runtime.Interpreter`, TFLite Micro's
reference kernels compiled for the host). Where edgetune and TFLite Micro disagree, TFLite
Micro is right.

Nothing edgetune derives (padding, multipliers, activation bounds) goes into the oracle's
model: it gets the operator's own tensors and options, so it checks that derivation too.
TFLite's own interpreter is not used: its optimised kernels round differently from TFLite
Micro's on some layers, and firmware runs TFLite Micro's arithmetic.
"""
from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np

from edgetune.codegen.kernels.base import KernelIO

from .builder import build_model
from .graph import Operator
from .layers import ModelLayer
from edgetune.codegen.tflite_schema import EXTRA_HINT, ModelError
from .user_layers import REFERENCE

ARENA_MARGIN = 1 << 20  # bytes beyond the tensors for the interpreter's own allocations


def layer_model(layer: ModelLayer) -> bytes:
    """The layer's operator alone in a model: its tensors (constants with their data),
    inputs and outputs renumbered, the non-constant inputs as the model's inputs."""
    present = [t for t in layer.tensors if t is not None]
    order = list(dict.fromkeys(t.index for t in present))
    by_index = {t.index: t for t in present}
    stand_ins = {b.name: b.data for b in layer.constants}
    for name, position in layer.extra_inputs:  # a second run-time input: the layer's stand-in values
        t = by_index[layer.operator.inputs[position]]
        by_index[t.index] = replace(t, data=np.ascontiguousarray(stand_ins[name]).astype("<i1").tobytes())
    tensors = [replace(by_index[i], index=n) for n, i in enumerate(order)]
    renumber = {old: new for new, old in enumerate(order)}
    op = layer.operator
    single = Operator(0, op.op, tuple(renumber.get(i, -1) for i in op.inputs), tuple(renumber[i] for i in op.outputs),
                      op.options_type, op.options)
    inputs = [renumber[i] for i in dict.fromkeys(op.inputs) if i >= 0 and not by_index[i].constant]
    return build_model(tensors, [single], inputs, list(single.outputs), description=f"edgetune oracle: {op.op}")


def _runtime():
    try:
        return importlib.import_module("tflite_micro").runtime
    except ImportError as exc:
        raise ModelError(f"the TFLite Micro oracle needs tflite-micro: {EXTRA_HINT} ({exc})") from None


def run_tflm(model: bytes, inputs: list[np.ndarray], n_outputs: int = 1, arena_size: int | None = None) -> list[np.ndarray]:
    """Run a model in TFLite Micro's host interpreter; its first n_outputs outputs."""
    runtime = _runtime()
    arena = arena_size or len(model) + 4 * sum(x.nbytes for x in inputs) + ARENA_MARGIN
    interpreter = runtime.Interpreter.from_bytes(model, arena_size=arena)
    for index, x in enumerate(inputs):
        interpreter.set_input(x, index)
    interpreter.invoke()
    return [np.array(interpreter.get_output(index)) for index in range(n_outputs)]


def reference_output(layer: ModelLayer, x: np.ndarray) -> np.ndarray:
    """A CUSTOM operator's output: its kernel's numpy reference on the layer's buffers
    (TFLite Micro cannot run a custom operator; user_layers.py)."""
    from edgetune.codegen.kernels import get_kernel

    kernel = get_kernel(layer.kernel)
    io = layer.io(np.asarray(x, dtype=np.int8))
    outputs = kernel.reference(layer.shape_dict, io)
    return outputs[[b.name for b in io.outputs()].index(layer.output_name)].reshape(layer.kernel_output)


def oracle_name(layer: ModelLayer) -> str:
    return f"{layer.kernel}'s reference" if layer.oracle == REFERENCE else "TFLite Micro"


def oracle_output(layer: ModelLayer, x: np.ndarray) -> np.ndarray:
    """The oracle's output for one tuned layer on int8 input `x` (any shape with the
    input's elements), in the shape of the kernel's output buffer: TFLite Micro's, or for
    a CUSTOM operator its kernel's reference."""
    if layer.kernel is None:
        raise ModelError(f"operator {layer.index} ({layer.op}) is not a tuned layer")
    if layer.oracle == REFERENCE:
        return reference_output(layer, x)
    x = np.asarray(x, dtype=np.int8).reshape(layer.input_shape)
    model = layer_model(layer)
    arena = len(model) + 4 * (x.nbytes + int(np.prod(layer.output_shape))) + ARENA_MARGIN
    (out,) = run_tflm(model, [x], arena_size=arena)
    return out.reshape(layer.kernel_output)


def layer_case(layer: ModelLayer, rng: np.random.Generator, edge: str = "random") -> tuple[KernelIO, np.ndarray]:
    """A check of one tuned layer: the kernel's buffers on a drawn input (uniform int8, or
    "extreme": only -128 and 127, which saturate) with the layer's real constants, and
    TFLite Micro's output for that input: what a variant's output must equal."""
    shape = layer.input_shape
    if edge == "extreme":
        x = rng.choice(np.array([-128, 127], dtype=np.int8), size=shape)
    else:
        x = rng.integers(-128, 128, size=shape, dtype=np.int8)
    return layer.io(x), oracle_output(layer, x)
