"""Whether a model's tensors can fit a board, decided before anything is tuned or stored.

Two questions, both from the target file's memory regions (hal/model.py):
- every tuned layer is measured alone, its buffers in the regions the harness may place
  them in (`[firmware] io_regions`), as a kernel's own workload is (codegen/placement.py,
  fit_problem): a layer whose weights and activations fit no placement can never run;
- deployed, the model keeps all its constants somewhere on the board and, while one
  operator runs, its non-constant inputs and outputs live at once in writable memory: the
  largest such set must fit one writable region, and everything must fit the board;
- the module's code and constants must fit some arrangement of the regions that may hold
  them (app/model/code_plan.py: the code region, then the others by speed).
Targets without a firmware image (the host) place nothing and hold any model.
"""
from __future__ import annotations

import numpy as np

from edgetune.codegen.code_placement import FIRMWARE_CODE_RESERVE
from edgetune.codegen.placement import fit_problem
from edgetune.hal import Target

from .code_plan import code_fit_problem
from .model import Model
from edgetune.codegen.tflite_schema import ModelError


def peak_activations(model: Model) -> tuple[int, int]:
    """(bytes, operator index) of the largest set of non-constant tensors one operator
    reads and writes at once: the smallest arena any execution order needs."""
    best, where = 0, -1
    absorbed = dict(model.graph.absorbed)
    for op in (op for op in model.operators if op.index not in absorbed):
        live = {i for i in (*op.inputs, *op.outputs) if i >= 0 and not model.tensors[i].constant}
        total = sum(model.tensors[i].nbytes for i in live)
        if total > best:
            best, where = total, op.index
    return best, where


def constant_bytes(model: Model) -> int:
    return sum(t.nbytes for t in model.tensors if t.constant)


def check_fits(model: Model, target: Target, code_reserve: int = FIRMWARE_CODE_RESERVE) -> None:
    """Raise ModelError (naming the file, the layer or the sizes) when the model cannot
    run on the target."""
    if target.firmware is None:
        return
    for layer in model.tuned:
        io = layer.io(np.zeros(layer.kernel_input, dtype=layer.dtype))
        problem = fit_problem(target, io, f"operator {layer.index} ({layer.op}, {layer.kernel} {layer.shape_text})")
        if problem:
            raise ModelError(f"{model.path}: {problem}")
    peak, where = peak_activations(model)
    writable = [r for r in target.memory if "w" in r.access]
    largest = max((target.io_capacity(r.name) for r in writable), default=0)
    if peak > largest:
        raise ModelError(f"{model.path}: operator {where} needs {peak} bytes of activations at once, more than the "
                         f"largest writable region of {target.name} holds ({largest} bytes)")
    weights = constant_bytes(model)
    total = sum(target.io_capacity(r.name) for r in target.memory)
    if weights + peak > total:
        raise ModelError(f"{model.path}: {weights} bytes of constants and {peak} bytes of activations exceed the "
                         f"{total} bytes of memory {target.name} has")
    problem = code_fit_problem(model, target, code_reserve)
    if problem:
        raise ModelError(f"{model.path}: {problem}")
