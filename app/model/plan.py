"""`edgetune place MODEL.tflite`: every operator of a TFLite model on the CPU or the Ethos-U
NPU, whichever makes the whole model cheapest, counting the copies between them (the layer
plan of edgetune.npu.layer_plan, for a model instead of a hand-written network).

Costs, all in CPU cycles at the target's core clock (the assumptions named):
  - A tuned layer (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED) on the CPU: the best stored
    trial of its kernel for its shape (as `edgetune place` chooses for a network: the
    workload's own goal or --objective/--constraint), in the target's measured unit
    (instructions at one cycle each, or the cost model's cycles). A layer the database has
    no trial for costs its plain C loop nest (-O3), measured once in the target's emulator.
  - A tuned layer on the NPU: Vela's total_cycles for the layer's own one-operator model
    (edgetune.model.oracle.layer_model: the model's weights, bias, quantisation and
    options as stored, never synthetic ones), compiled with the board's MAC configuration in
    each of its memory modes (optimise=Performance, the largest arena cache that fits),
    the cheapest kept, scaled by cpu_clock / npu_clock, plus the NPU's invoke_cycles.
  - Every other operator (ADD, pooling, SOFTMAX, RESHAPE...) runs on the CPU, at its count
    measured alone in the target's emulator, in the target's measured unit, or the cost model's
    cycles with --objective cycles (as an untuned layer's plain loop; edgetune.model.op_measure:
    a one-operator model of the model's own tensors, exported and verified against TFLite
    Micro as `model export` and `model verify` do; cached). An operator the export folds into
    constants (SHAPE, STRIDED_SLICE, PACK feeding a RESHAPE) runs no code and costs 0. Only
    where it cannot be measured (no emulator, an operator the module cannot run alone) is it
    an ESTIMATE, said so in its note: one cycle per int8 element it reads or writes (its
    non-constant inputs and its outputs), a lower bound.
  - Copies: as in layer_plan, a tensor moved between the CPU's region and the NPU's arena
    region costs ceil(bytes / copy_bytes_per_cycle).
Operators are taken in the model's execution order and each one's input is taken to come
from the operator before it (the model's graph as a chain): exact for sequential models,
an approximation for branches (ResNet's skip connections are charged as if sequential).
Without an NPU (a board that has none, or --device none) every operator is on the CPU.
"""
from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np

from edgetune.codegen import get_kernel
from edgetune.model import Model
from edgetune.model.layers import ModelLayer
from edgetune.model.oracle import layer_model
from edgetune.model.ops import folded_operators
from edgetune.model.ops.float_island import absorber
from edgetune.hal import Npu, Target
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import MeasureError, ToolMissing, make_folder
from edgetune.targets.vela import VelaOptions, compile_model
from edgetune.tuner import Bound, TuningDatabase

from edgetune.identity import recompute_estimates
from edgetune.npu.layer_plan import DEVICES, LayerPlan, Option, Plan, PlanError, _copy_cycles, candidate_text, cheapest, why_text
from .session import LayerWorkload, measure_baseline
from .op_measure import measure_library_op
from edgetune.session import goal_of, workload_of

# What an operator's CPU figure is, and how the output says it: a stored trial, its plain loop
# measured, a library operator measured alone, none needed (folded at export), or an estimate.
BASES = {"tuned": "tuned (stored trials)", "plain-loop": "plain loop (measured)", "measured": "measured alone",
         "folded": "folded", "estimated": "estimated"}


def _elements(shape) -> int:
    return int(np.prod(shape)) if shape else 1


def _region(target: Target, nbytes: int) -> str:
    region = target.place_buffers(nbytes)
    return region.name if region else "cpu"


def cpu_unit(target: Target, objective: str) -> str:
    """What the figures of untuned operators count: the cost model's cycles when the plan
    chooses by them (--objective cycles) and the target has a cost model, else its own unit."""
    return "cycles" if objective == "cycles" and target.cost is not None else target.measures


def in_cycles(value: float, unit: str, target: Target) -> tuple[int, str]:
    """A CPU figure as the plan's CPU cycles, and what its note adds: a time (the host's
    time_ns) at the core clock, so it is not added up as cycles; a count as it is."""
    if unit != "time_ns":
        return math.ceil(value), ""
    cycles = math.ceil(value * target.core.clock_hz / 1e9)
    return cycles, f", {cycles} cycles at {target.core.clock_hz / 1e6:g} MHz"


def library_option(model: Model, layer: ModelLayer, target: Target, region: str, unit: str = "") -> Option:
    """A library operator on the CPU: folded (nothing runs), else measured alone on the
    target, else the element estimate of the module's docstring, saying why."""
    into = dict(model.graph.absorbed).get(layer.index)
    if into is not None:
        return Option(0, f"runs inside operator {into}'s {absorber(model.graph, into)}: no code of its own", region,
                      basis="folded")
    if layer.index in folded_operators(model.graph):
        return Option(0, "folded into a constant at export: no code runs", region, basis="folded")
    unit = unit or target.measures
    count = measure_library_op(model, layer, target, unit)
    if count.value is not None:
        how = "cached measurement" if count.cached else "measured"
        cycles, at_clock = in_cycles(count.value, unit, target)
        return Option(cycles, f"{how}: {count.value} {unit} run alone on {target.name}{at_clock}", region,
                      basis="measured")
    touched = sum(_elements(t.shape) for t in layer.tensors if t is not None and not t.constant)
    return Option(touched, f"estimate: 1 cycle per element read or written ({touched}); not measured: {count.why}",
                  region, basis="estimated")


def cpu_option(model: Model, layer: ModelLayer, target: Target, db: TuningDatabase,
               override: tuple = ("", ())) -> Option:
    """The operator on the CPU: its best stored trial, else its plain loop measured, else
    (not a tuned kind of operator) library_option."""
    io_bytes = _elements(layer.input_shape) + _elements(layer.output_shape)
    default = _region(target, io_bytes)
    unit = cpu_unit(target, override[0])
    if layer.kernel is None:
        return library_option(model, layer, target, default, unit)
    kernel = get_kernel(layer.kernel)
    shape = kernel.parse_shape(dict(layer.shape))
    workload = workload_of(kernel, target, shape)
    goal = goal_of(db, workload, target, *override)
    record = db.best(workload, goal.objective, goal.allows)
    if record is not None:
        unit = "cycles" if goal.objective == "cycles" and "cycles" in record.trial.values else target.measures
        value = math.ceil(record.trial.values[unit])
        region = record.trial.info.get("activations_region") or default
        cycles, at_clock = in_cycles(value, unit, target)
        return Option(cycles, f"tuned {layer.kernel}: {value} {unit}{at_clock} (trial {record.id})", region,
                      basis="tuned")
    try:  # the emulator (or a compiler) missing is said once, naming the operator that needs it
        runner_for(target).check_tools()
    except ToolMissing as exc:
        raise PlanError(f"operator {layer.index} ({layer.op}): {layer.kernel} has no trial in {db.path.name}, and its "
                        f"plain C loop cannot be measured on {target.name}: {exc}") from None
    plain = measure_baseline(LayerWorkload(kernel, shape, workload, (layer.index,), layer.macs), target, unit)
    if plain is None:
        why = "it has no plain loop of edgetune's (tune it first)" if layer.arguments else "its plain loop did not run"
        return Option(None, f"{layer.kernel} not tuned in {db.path.name} and {why}")
    value = math.ceil(plain)
    cycles, at_clock = in_cycles(value, unit, target)
    return Option(cycles, f"not tuned: plain C loop nest {value} {unit} (measured{at_clock})", default,
                  basis="plain-loop")


def npu_option(layer: ModelLayer, target: Target, npu: Npu | None, macs: int | None) -> Option:
    """The operator on the NPU: Vela on the layer's own one-operator model, in each memory mode."""
    if npu is None:
        return Option(None, "no NPU")
    if layer.kernel is None:
        return Option(None, f"{layer.op} is planned on the CPU only")
    if layer.arguments:  # a kernel of the user's own (or bmm_s8's two operands) serves it: its C runs on the CPU
        whose = "a kernel of your own, on the CPU" if get_kernel(layer.kernel).definition else "on the CPU only"
        return Option(None, f"{layer.op} is served by {layer.kernel}, {whose}")
    model = layer_model(layer)
    best, errors = None, []
    with tempfile.TemporaryDirectory(prefix="edgetune-place-") as tmp:
        for mode in npu.memory_modes:
            port = npu.port(mode.cache_port)
            capacity = target.region(port.region).size if port.region else None
            sizes = [s for s in npu.arena_cache_sizes if capacity is None or s <= capacity] or [min(npu.arena_cache_sizes)]
            options = VelaOptions(macs, mode.name, "Performance", max(sizes), "HillClimb")
            try:
                result = compile_model(model, f"op{layer.index}", target, npu, options, Path(tmp) / mode.name)
            except MeasureError as exc:
                errors.append(exc.message)
                continue
            total = int(result.values["total_cycles"])
            if best is None or total < best[0]:
                best = (total, mode, result.compiled.read_bytes())
    if best is None:
        return Option(None, f"Vela refused it: {'; '.join(errors[:2])}", model=model)
    npu_cycles, mode, compiled = best
    port = npu.port(mode.arena_port)
    cycles = math.ceil(npu_cycles * target.core.clock_hz / npu.clock_hz)
    note = f"Vela on the layer's own weights: {npu_cycles} NPU cycles at {npu.clock_hz / 1e6:g} MHz, {mode.name}"
    return Option(cycles, note, port.region or f"{npu.name}.{port.name}", npu_cycles, model=model, compiled=compiled)


def plan_model(model: Model, target: Target, npu: Npu | None, db: TuningDatabase, macs: int | None = None,
               objective: str = "", bounds: tuple[Bound, ...] = ()) -> Plan:
    """The plan of the module's docstring: `plan.source` is the model, `plan.layers` its operators."""
    if npu is not None:
        macs = macs if macs is not None else max(npu.macs_per_cycle)
        if macs not in npu.macs_per_cycle:
            raise PlanError(f"--macs: {npu.name} comes with {', '.join(map(str, npu.macs_per_cycle))} MACs per cycle")
    recompute_estimates(db, target)
    layers = model.layers
    measured: dict[tuple, Option] = {}  # identical tuned layers (kernel, shape) cost the same on the CPU
    cpu = []
    for layer in layers:
        key = (layer.kernel, layer.shape) if layer.kernel else ("", layer.index)
        if key not in measured:
            measured[key] = cpu_option(model, layer, target, db, (objective, bounds))
        cpu.append(measured[key])
    npus = [npu_option(layer, target, npu, macs) for layer in layers]
    for layer, c, n in zip(layers, cpu, npus):
        if c.cycles is None and n.cycles is None:
            raise PlanError(f"operator {layer.index} ({layer.op}) can run nowhere: CPU: {c.note}; NPU: {n.note}")
    options = [{"cpu": c, "npu": n} for c, n in zip(cpu, npus)]
    usable = [[d for d in DEVICES if o[d].cycles is not None] for o in options]
    app_in = _region(target, _elements(layers[0].input_shape))
    app_out = _region(target, _elements(layers[-1].output_shape))

    def copy(nbytes: int, source: str, destination: str) -> tuple[int, int]:
        return (0, 0) if npu is None else _copy_cycles(npu, nbytes, source, destination)

    def step(i: int, device: str, previous: str | None) -> tuple[int, int, int, int, int]:
        source = app_in if previous is None else options[i - 1][previous].region
        copied, cycles = copy(_elements(layers[i].input_shape), source, options[i][device].region)
        invoke = npu.invoke_cycles if device == "npu" else 0
        compute = options[i][device].cycles
        return compute + invoke + cycles, compute, invoke, copied, cycles

    def out(device: str) -> tuple[int, int]:
        return copy(_elements(layers[-1].output_shape), options[-1][device].region, app_out)

    chosen, total = cheapest(usable, step, out)
    ops = []
    for i, (layer, device) in enumerate(zip(layers, chosen)):
        costs = {d: step(i, d, chosen[i - 1] if i else None) for d in usable[i]}
        _, compute, invoke, copied, cycles = costs[device]
        ops.append(LayerPlan(layer, device, cpu[i], npus[i], compute, invoke, copied, cycles,
                          _explain(layer, device, options[i], costs)))

    def uniform(device: str) -> int | None:
        """Every operator on `device` where it can run there, the others on the CPU."""
        if npu is None and device == "npu" or any("cpu" not in u and device not in u for u in usable):
            return None
        seq = [device if device in u else "cpu" for u in usable]
        return sum(step(i, d, seq[i - 1] if i else None)[0] for i, d in enumerate(seq)) + out(seq[-1])[1]

    copy_out_bytes, copy_out_cycles = out(chosen[-1])
    return Plan(model, target, npu, macs, tuple(ops), copy_out_bytes, copy_out_cycles, total,
                all_npu_cycles=uniform("npu"), all_cpu_cycles=uniform("cpu"))


def _explain(layer: ModelLayer, device: str, options: dict, costs: dict) -> str:
    served = f" {layer.kernel} {layer.shape_text}" if layer.kernel else ""
    return f"op {layer.index} {layer.op}{served} -> {device.upper()}: {why_text(device, costs)}. " + \
        "; ".join(candidate_text(d, options[d].note, costs) for d in DEVICES) + "."


def figures_line(plan: Plan) -> str:
    """How many CPU figures are stored trials, measurements, folded, estimates; the estimated
    operators named (their notes say why)."""
    counts = {basis: [op for op in plan.layers if op.cpu.basis == basis] for basis in BASES}
    line = "CPU figures: " + ", ".join(f"{len(ops)} {BASES[basis]}" for basis, ops in counts.items() if ops)
    if counts["estimated"]:
        line += " (" + ", ".join(f"op {op.layer.index} {op.layer.op}" for op in counts["estimated"]) + \
            ": 1 cycle per element, not measured)"
    return line


def write_model_plan(plan: Plan, out_dir: Path) -> tuple[Path, tuple[Path, ...]]:
    """plan.json (every operator: device, costs, explanation) and, per NPU layer, the
    Vela-compiled one-operator model (npu/op<index>_vela.tflite). The CPU part's C is
    `edgetune model export`'s."""
    import json
    import time

    from edgetune import __version__

    out_dir = Path(out_dir)
    make_folder(out_dir, str(out_dir), PlanError)  # a file in its place, or a folder that cannot be made: one line
    rows, models = [], []
    for op in plan.layers:
        row = {"index": op.layer.index, "op": op.layer.op, "kernel": op.layer.kernel, "shape": op.layer.shape_text,
               "device": op.device, "compute_cycles": op.compute_cycles, "invoke_cycles": op.invoke_cycles,
               "copy_in_bytes": op.copy_in_bytes, "copy_in_cycles": op.copy_in_cycles, "cpu_cycles": op.cpu.cycles,
               "npu_cycles": op.npu.npu_cycles, "cpu_note": op.cpu.note, "npu_note": op.npu.note,
               "cpu_basis": op.cpu.basis,
               "explanation": op.explanation}
        if op.device == "npu":
            path = out_dir / "npu" / f"op{op.layer.index}_vela.tflite"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(op.npu.compiled)
            models.append(path)
            row["model"] = f"npu/{path.name}"
        rows.append(row)
    summary = {"model": plan.source.path, "target": plan.target.name, "npu": plan.npu.name if plan.npu else None,
               "accelerator": plan.accelerator, "cycles_unit": f"CPU cycles at {plan.target.core.clock_hz} Hz",
               "total_cycles": plan.total_cycles, "all_cpu_cycles": plan.all_cpu_cycles,
               "all_npu_cycles": plan.all_npu_cycles, "copy_out_bytes": plan.copy_out_bytes,
               "copy_out_cycles": plan.copy_out_cycles, "operators": rows, "edgetune_version": __version__,
               "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    plan_json = out_dir / "plan.json"
    plan_json.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return plan_json, tuple(models)
