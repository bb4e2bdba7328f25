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
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from edgetune.codegen.kernels.base import KernelIO

from .builder import build_model
from .graph import Operator
from .layers import ModelLayer
from edgetune.codegen.tflite_schema import EXTRA_HINT, ModelError
from .user_layers import REFERENCE

ARENA_MARGIN = 1 << 20  # bytes beyond the tensors for the interpreter's own allocations
# The smallest arena asked for: above glibc's largest mmap threshold (32 MiB), so every arena is
# fresh zeroed pages. TFLite Micro reads memory it never wrote (SPACE_TO_BATCH_ND's pad value,
# ops/space_batch.py), which in a heap block reused from an earlier interpreter is whatever that
# one left; zeroed, it reads 0 as a firmware whose arena is zeroed at start does. Pages the
# interpreter never touches cost nothing.
FRESH_ARENA = 33 << 20


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
    arena = max(arena_size or len(model) + 4 * sum(x.nbytes for x in inputs) + ARENA_MARGIN, FRESH_ARENA)
    interpreter = runtime.Interpreter.from_bytes(model, arena_size=arena)
    for index, x in enumerate(inputs):
        interpreter.set_input(x, index)
    interpreter.invoke()
    return [np.array(interpreter.get_output(index)) for index in range(n_outputs)]


CHILD = Path(__file__).with_name("tflm_child.py")
CHILD_TIMEOUT_S = 600  # one child's cases on the host: far above any model's


@dataclass(frozen=True)
class OracleCase:
    """TFLite Micro's outputs for one case (the model's inputs), or why it has none."""
    outputs: tuple[np.ndarray, ...] | None
    failure: str = ""  # "its interpreter aborted (SIGABRT)", the interpreter's own message...


def _died(proc: subprocess.CompletedProcess) -> str:
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        return f"its interpreter aborted ({name})"
    last = (proc.stderr or "").strip().splitlines()
    return f"its interpreter exited with status {proc.returncode}" + (f": {last[-1][:300]}" if last else "")


def _collect(folder: Path, n: int) -> OracleCase | None:
    out, err = folder / f"out{n}.npz", folder / f"err{n}.txt"
    if out.exists():
        with np.load(out) as saved:
            return OracleCase(tuple(saved[f"arr_{k}"] for k in range(len(saved.files))))
    if err.exists():
        return OracleCase(None, f"its interpreter refused it: {err.read_text(encoding='utf-8')}")
    return None


def run_tflm_isolated(model: bytes, cases: list[list[np.ndarray]], n_outputs: int = 1) -> list[OracleCase]:
    """TFLite Micro's outputs for each case, its interpreter run in a child process: a case on
    which it aborts (SIGABRT: some inputs of a SOFTMAX over 600 classes) or hangs is named in
    its OracleCase, and the cases after it run in a new child (tflm_child.py)."""
    _runtime()  # tflite-micro missing: one line saying how to install it, here, not in the child
    arena = len(model) + 4 * max((sum(x.nbytes for x in xs) for xs in cases), default=0) + ARENA_MARGIN
    results: list[OracleCase] = []
    with tempfile.TemporaryDirectory(prefix="edgetune-oracle-") as tmp:
        folder = Path(tmp)
        (folder / "model.tflite").write_bytes(model)
        for n, xs in enumerate(cases):
            np.savez(folder / f"case{n}.npz", *[np.asarray(x) for x in xs])
        while len(results) < len(cases):
            start = len(results)
            try:
                proc = subprocess.run([sys.executable, str(CHILD), str(folder), str(start), str(len(cases)),
                                       str(n_outputs), str(arena)], capture_output=True, text=True,
                                      timeout=CHILD_TIMEOUT_S)
                failure = _died(proc)
            except subprocess.TimeoutExpired:
                failure = f"its interpreter did not finish in {CHILD_TIMEOUT_S} s"
            while len(results) < len(cases) and (case := _collect(folder, len(results))) is not None:
                results.append(case)
            if len(results) < len(cases):  # the case the child died on
                results.append(OracleCase(None, failure))
    return results


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
