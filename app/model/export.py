"""`edgetune model export`: a TFLite model as one ahead-of-time C module (docs/model-export.md).

Each tuned layer runs its workload's best trial in the database, chosen by the goal stored
with the workload (or --objective/--constraint), as the kernel export chooses; a layer whose
workload has no successful trial runs the kernel's default configuration (said in the output
and the manifest). app/model/module.py renders the module; edgetune.publish puts the
folder in place atomically. TFLite Micro's arena for the same model is read from its
interpreter's allocation report, to print beside the memory plan's peak.
"""
from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgetune.codegen import KERNELS
from edgetune.codegen.export import ExportEntry, ExportError
from edgetune.codegen.code_placement import FIRMWARE_CODE_RESERVE, check_code_reserve
from edgetune.model import Graph, Model, ModelError, check_fits, load_model
from edgetune.model.graph import read_graph
from edgetune.model.oracle import ARENA_MARGIN
from edgetune.model.ram_fit import RamFit, fit_ram
from edgetune.model.module import RenderedModel, check_model_name, default_config, model_name, render_model_module
from edgetune.hal import Target
from edgetune.tuner import Bound, TuningDatabase, check_names, resolve_goal

from edgetune import __version__
from edgetune.publish import check_destination, publish
from edgetune.session import check_compilers, compiled_by, workload_of

ARENA_TOTAL = re.compile(r"Arena allocation total (\d+) bytes")


@dataclass(frozen=True)
class ModelExport:
    folder: Path
    rendered: RenderedModel
    untuned: tuple[str, ...]  # workloads run with the kernel's default configuration
    tflm_arena: int | None  # TFLite Micro's arena for the model (None: unknown, `tflm_unknown` says why)
    tflm_unknown: str = "tflite-micro not installed"
    ram_fit: RamFit | None = None  # --max-ram: the choice under the bound beside the fastest one


def _default_entry(kernel, target: Target, shape: dict, objective: str, compilers: tuple[str, ...] = ()) -> ExportEntry:
    config = default_config(kernel, target, shape, compilers)
    return ExportEntry(kernel=kernel.name, kernel_version=kernel.version, shape=tuple(shape.items()),
                       config=config.items, objective=objective, value=0.0, values=(), trial_id=0, created="",
                       trials=0, chosen_by="untuned")


def _workload_goal(w, target: Target, db: TuningDatabase | None, objective: str, bounds: tuple[Bound, ...]):
    """(kernel, shape, workload, the goal stored with it or None, the goal to choose by) of a
    model workload `w`: the stored goal unless --objective/--constraint override it, its
    names checked against what the target measures (--objective cycles on the host)."""
    kernel = KERNELS[w.kernel]
    shape = kernel.parse_shape(dict(w.shape))
    workload = workload_of(kernel, target, shape)
    stored = db.goal(workload) if db is not None else None
    goal = resolve_goal(stored, objective, bounds, target.measures)
    check_names(goal.objective, goal.bounds, target.measured_values, target.name)
    return kernel, shape, workload, stored, goal


def choose_layers(model: Model, target: Target, db: TuningDatabase | None, objective: str = "",
                  bounds: tuple[Bound, ...] = (), compilers: tuple[str, ...] = ()
                  ) -> tuple[dict[tuple, ExportEntry], tuple[str, ...]]:
    """Each tuned workload's variant: (kernel, shape) -> entry, and the workloads without a
    trial (run with the kernel's default configuration); with `compilers`, only variants
    they build (a firmware built with one toolchain)."""
    chosen, untuned = {}, []
    for w in model.workloads():
        kernel, shape, workload, stored, goal = _workload_goal(w, target, db, objective, bounds)
        record = db.best(workload, goal.objective,
                         lambda t: goal.allows(t) and compiled_by(t, compilers)) if db is not None else None
        if record is None:
            chosen[(w.kernel, w.shape)] = _default_entry(kernel, target, shape, goal.objective, compilers)
            kept = len(db.trials(workload)) if db is not None and goal.bounds else 0
            within = f" within {', '.join(b.text() for b in goal.bounds)} (of its {kept} trial{'s' if kept > 1 else ''})" if kept else ""
            untuned.append(f"{w.kernel} {w.shape_text}{within}")
            continue
        chosen[(w.kernel, w.shape)] = record_entry(kernel, target, shape, record, goal, len(db.trials(workload)),
                                                   "override" if objective or bounds else
                                                   "tuned" if stored is not None else "default")
    return chosen, tuple(untuned)


def record_entry(kernel, target: Target, shape: dict, record, goal, trials: int, chosen_by: str) -> ExportEntry:
    """The export entry of a stored trial (`record`), chosen by `goal` (`trials`: how many the
    workload holds; `chosen_by`: ExportEntry's)."""
    config = kernel.tuning_space(target, shape).make(record.trial.config.as_dict())
    return ExportEntry(kernel=kernel.name, kernel_version=kernel.version, shape=tuple(shape.items()),
                       config=config.items, objective=goal.objective, value=float(record.trial.values[goal.objective]),
                       values=tuple(sorted(record.trial.values.items())), trial_id=record.id, created=record.created,
                       trials=trials, toolchain=record.workload.toolchain, bounds=goal.bounds, chosen_by=chosen_by)


def layer_variants(model: Model, target: Target, db: TuningDatabase | None, objective: str = "",
                   bounds: tuple[Bound, ...] = (), compilers: tuple[str, ...] = ()) -> dict[tuple, tuple[ExportEntry, ...]]:
    """Every variant each tuned workload could run, (kernel, shape) -> entries: each distinct
    configuration's best successful trial within the goal (as choose_layers chooses among
    them), the fastest first, and the kernel's default configuration when no trial measured
    it (value 0, trial_id 0: not measured). What a choice under a RAM bound picks from
    (ram_fit.py)."""
    found = {}
    for w in model.workloads():
        kernel, shape, workload, _, goal = _workload_goal(w, target, db, objective, bounds)
        records = [r for r in (db.proposals(workload) if db is not None else ())
                   if r.trial.value(goal.objective) is not None and goal.allows(r.trial) and compiled_by(r.trial, compilers)]
        records.sort(key=lambda r: r.trial.value(goal.objective))  # stable: ties keep the proposal order
        by_config = {}
        for r in records:
            by_config.setdefault(r.trial.config.key(), r)
        entries = [record_entry(kernel, target, shape, r, goal, len(records), "max_ram") for r in by_config.values()]
        default = _default_entry(kernel, target, shape, goal.objective, compilers)
        if all(dict(e.config) != dict(default.config) for e in entries):
            entries.append(default)
        found[(w.kernel, w.shape)] = tuple(entries)
    return found


def _io_problem(graph: Graph, kind: str, k: int, t: int) -> str:
    """What is wrong with input or output k (tensor t) for the module, or ""."""
    tensor = graph.tensors[t]
    where = f"{graph.path}: {kind} {k} (tensor {t}, {tensor.name})"
    if tensor.dtype not in ("int8", "int16"):  # int16: a 16x8 model's activations
        # A float interface is a QUANTIZE (or DEQUANTIZE) at the model's edge: the
        # module runs int8 operators only, QUANTIZE from int8 to int8 (app/model/ops/quantize.py).
        edge = [op for op in graph.operators if op.op in ("QUANTIZE", "DEQUANTIZE")
                and (t in op.inputs if kind == "input" else t in op.outputs)]
        if edge:
            return (f"{where} is {tensor.dtype}, converted by {edge[0].op} (operator {edge[0].index}); the module "
                    f"runs int8 operators only (QUANTIZE from int8 to int8), not from or to {tensor.dtype}: convert "
                    "the model with int8 inputs and outputs (the converter's inference_input_type and "
                    "inference_output_type)")
        return (f"{where} is {tensor.dtype}; the module's inputs and outputs are int8 (a full-integer quantised "
                "model: int8 activations)")
    if kind == "output" and t in graph.inputs:
        return f"{where} is also an input of the model; the module computes its outputs"
    return ""


def _check_io(graph: Graph) -> None:
    """The model's inputs and outputs as the module's arguments: at least one of each, each
    tensor once, every one int8 or int16 (checked before the model reader's own dtype check, so a
    float interface is named by its input or output)."""
    for kind, tensors in (("input", graph.inputs), ("output", graph.outputs)):
        if not tensors:
            raise ModelError(f"{graph.path}: the model has no {kind}; the module takes at least one input and output")
        twice = [t for t in dict.fromkeys(tensors) if tensors.count(t) > 1]
        if twice:
            raise ModelError(f"{graph.path}: tensor {twice[0]} is listed twice among the model's {kind}s")
        for k, t in enumerate(tensors):
            problem = _io_problem(graph, kind, k, t)
            if problem:
                raise ModelError(problem)


def tflm_arena_bytes(model_bytes: bytes, *input_shapes: tuple[int, ...], dtypes=None) -> int | None:
    """The arena TFLite Micro's interpreter used for the model ("Arena allocation total" of
    its allocation report, which it prints on the process's stderr); one shape per input of
    the model, in its order (of `dtypes`, int8 by default)."""
    try:
        from tflite_micro import runtime
    except ImportError:
        return None
    interpreter = runtime.Interpreter.from_bytes(model_bytes, arena_size=len(model_bytes) + ARENA_MARGIN * 4)
    for index, shape in enumerate(input_shapes):
        interpreter.set_input(np.zeros(shape, dtypes[index] if dtypes else np.int8), index)
    interpreter.invoke()
    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        try:
            os.dup2(capture.fileno(), 2)
            interpreter.print_allocations()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        found = ARENA_TOTAL.search(capture.read().decode("utf-8", "replace"))
    return int(found[1]) if found else None


def export_model(model_path: Path, target: Target, db: TuningDatabase | None, out_dir: Path, name: str = "",
                 objective: str = "", bounds: tuple[Bound, ...] = (), compilers: tuple[str, ...] = (),
                 max_ram: int | None = None, patch=None, code_ram_room: int | None = None,
                 code_reserve: int = FIRMWARE_CODE_RESERVE) -> ModelExport:
    """Render and publish the module of `model_path` for `target` (its variants built by
    `compilers` only, when given; with `max_ram`, the fastest whose RAM stays within it:
    ram_fit.py); `patch` (patch_module.PatchPlan): its first layers run band by band, over
    the input buffer; `code_ram_room`: without `max_ram`, the most bytes of code and constants
    the code plan may copy into RAM (what a --patch auto bound leaves)."""
    _check_io(read_graph(model_path))
    model = load_model(model_path)
    check_code_reserve(target, code_reserve)
    check_fits(model, target, code_reserve)
    out_dir = Path(out_dir)
    check_destination(out_dir, model=True)
    check_compilers(target, compilers)
    chosen, untuned = choose_layers(model, target, db, objective, bounds, compilers)
    fit = None
    if max_ram is not None:
        fit = fit_ram(model, target, layer_variants(model, target, db, objective, bounds, compilers), max_ram)
        chosen.update({key: fit.chosen()[key] for key in fit.changed()})
    data = Path(model_path).read_bytes()
    rendered = render_model_module(model, target, chosen, name=name or model_name(str(model_path)),
                                   database=str(db.path) if db is not None else "",
                                   date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), version=__version__,
                                   model_bytes=data, patch=patch, code_reserve=code_reserve,
                                   code_ram_room=fit.max_ram - fit.fitted.total if fit is not None else code_ram_room)
    m = rendered.manifest.model
    if fit is not None and m.arena_bytes != fit.fitted.arena_bytes:  # the same planner on the same variants
        raise ExportError(f"{model_path}: the module's arena ({m.arena_bytes} bytes) is not the one planned under "
                          f"--max-ram ({fit.fitted.arena_bytes} bytes): a bug, please report it")
    if m.arena_region and m.arena_bytes > target.io_capacity(m.arena_region):
        raise ExportError(f"{model_path}: the arena takes {m.arena_bytes} bytes, more than any buffer region of "
                          f"{target.name} holds ({m.arena_region}: {target.io_capacity(m.arena_region)} bytes)")
    # The model itself goes in too (bytes, which publish's text files are not): verify runs
    # TFLite Micro on it, and its checksum is in the manifest.
    publish(out_dir, rendered.files, rendered.manifest,
            lambda staging: (staging / rendered.manifest.model.file).write_bytes(data))
    if any(layer.op == "CUSTOM" for layer in model.layers):  # TFLite Micro's interpreter refuses the model
        return ModelExport(out_dir, rendered, untuned, None, "TFLite Micro cannot run its CUSTOM operators", fit)
    dtypes = [model.graph.tensors[t].dtype for t in model.graph.inputs]
    return ModelExport(out_dir, rendered, untuned, tflm_arena_bytes(data, *m.input_shapes, dtypes=dtypes), ram_fit=fit)


__all__ = ["ExportError", "ModelExport", "check_model_name", "choose_layers", "export_model", "tflm_arena_bytes"]
