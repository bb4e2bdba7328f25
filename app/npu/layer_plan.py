"""A layer plan (`edgetune place`): for a small network (a sequence of layers), run each
layer on the CPU or on the Ethos-U NPU, whichever makes the whole sequence cheapest, counting the cost of moving
tensors between them.

Cost model (all in CPU cycles at the target's core clock; every figure comes from the HAL
or from a measurement, the assumptions are named):
  - CPU layer: the best stored trial of its C kernel, chosen by the objective and bounds
    its workload was tuned for (or place's --objective/--constraint), in instructions
    counted by QEMU. QEMU has no pipeline model, so edgetune counts one cycle per
    instruction (CPI 1: an assumption; the M55 issues at most one instruction per cycle for
    most code, so this is optimistic for the CPU); a kernel tuned for `cycles` costs the
    cost model's cycle estimate instead, which charges its buffers' regions. A layer with
    no CPU kernel in this edgetune, or none tuned in the database, can only run on the
    NPU, and the plan says so.
  - NPU layer: Vela's total_cycles estimate (NPU cycles including memory stalls) of the best
    configuration with the board's MAC configuration, scaled by cpu_clock / npu_clock, plus
    the NPU's `invoke_cycles` (driver start and completion interrupt; each NPU layer is its
    own Vela model, so one invocation each).
  - Moving a tensor: the CPU's kernels keep their activations where their best trial had
    them (`activations_in`, default `Target.place_buffers`, e.g. DTCM, which the NPU cannot reach); the NPU keeps feature
    maps in the region behind the arena port of its memory mode (e.g. SRAM on axi0). When a
    tensor's producer and consumer sit in different regions, the CPU copies it:
    ceil(bytes / copy_bytes_per_cycle) cycles. The network's input arrives in, and its output
    leaves from, CPU memory.
Layers are placed by dynamic programming over (layer, device of the previous layer), which is
exact for this model.
"""
from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgetune.errors import EdgetuneError
from edgetune.codegen import KERNELS, KernelError
from edgetune.npu import NPU_OPERATORS, PAD_SAME, NpuOperator, NpuOperatorError
from edgetune.codegen.render import render
from edgetune.hal import Npu, Target
from edgetune.targets.toolchain import MeasureError, make_folder
from edgetune.tuner import Bound, Record, TuningDatabase, Workload

from .session import NPU_OBJECTIVE, compile_config
from edgetune.export import ExportResult, export_best
from edgetune.identity import measurement_fingerprint, recompute_estimates
from edgetune.session import TuneRequest, goal_of, tune, workload_of

NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_")
PLAN_HEADER = "edgetune_plan.h"
PLAN_JSON = "plan.json"
NPU_MODELS_SOURCE = "edgetune_npu_models.c"


class NetworkError(EdgetuneError, ValueError):
    """A network file that is missing, malformed or inconsistent."""


class PlanError(EdgetuneError, RuntimeError):
    """No plan exists (a layer can run nowhere)."""


@dataclass(frozen=True)
class Layer:
    name: str
    operator: NpuOperator
    shape: dict = field(hash=False)

    @property
    def input_bytes(self) -> int:
        return self.operator.sizes(self.shape).ifm_bytes

    @property
    def output_bytes(self) -> int:
        return self.operator.sizes(self.shape).ofm_bytes


@dataclass(frozen=True)
class Network:
    name: str
    layers: tuple[Layer, ...]
    source: str


def load_network(path: Path) -> Network:
    """A network file (TOML, or JSON by extension): `name` and `[[layers]]` each with `name`,
    `op` (matmul_s8, conv2d_s8, dwconv2d_s8) and `shape` (a table of the operator's keys).
    Each layer consumes the previous layer's output: element counts must match."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except FileNotFoundError:
        raise NetworkError(f"{path}: no such network file") from None
    except (UnicodeDecodeError, ValueError) as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise NetworkError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}") from None
    if not isinstance(data, dict):
        raise NetworkError(f"{path}: expected a table at the top")
    unknown = set(data) - {"name", "layers", "description"}
    if unknown:
        raise NetworkError(f"{path}: {sorted(unknown)[0]}: unknown key (allowed: description, layers, name)")
    name = data.get("name")
    if not isinstance(name, str) or not name or not set(name) <= NAME_CHARS:
        raise NetworkError(f"{path}: name: expected lower-case letters, digits and _, got {name!r}")
    items = data.get("layers")
    if not isinstance(items, list) or not items:
        raise NetworkError(f"{path}: layers: expected a non-empty array of tables")
    layers: list[Layer] = []
    for i, item in enumerate(items):
        where = f"{path}: layers[{i}]"
        if not isinstance(item, dict):
            raise NetworkError(f"{where}: expected a table")
        unknown = set(item) - {"name", "op", "shape"}
        if unknown:
            raise NetworkError(f"{where}.{sorted(unknown)[0]}: unknown key (allowed: name, op, shape)")
        layer_name = item.get("name")
        if not isinstance(layer_name, str) or not layer_name or not set(layer_name) <= NAME_CHARS or layer_name[0].isdigit():
            raise NetworkError(f"{where}.name: expected an identifier of lower-case letters, digits and _, got {layer_name!r}")
        if layer_name in {layer.name for layer in layers}:
            raise NetworkError(f"{where}.name: duplicate layer name {layer_name!r}")
        op_name = item.get("op")
        if op_name not in NPU_OPERATORS:
            raise NetworkError(f"{where}.op: {op_name!r} is not one of {', '.join(sorted(NPU_OPERATORS))}")
        operator = NPU_OPERATORS[op_name]
        shape = item.get("shape")
        if not isinstance(shape, dict):
            raise NetworkError(f"{where}.shape: expected a table such as {{{operator.example}}}")
        try:
            parsed = operator.parse_shape(shape)
        except NpuOperatorError as exc:
            raise NetworkError(f"{where}.{exc}") from None
        layer = Layer(layer_name, operator, parsed)
        if layers and layers[-1].output_bytes != layer.input_bytes:
            prev = layers[-1]
            raise NetworkError(f"{where}.shape: consumes {layer.input_bytes} int8 elements but {prev.name} "
                               f"produces {prev.output_bytes}")
        layers.append(layer)
    return Network(name, tuple(layers), str(path))


# --- the records of a placement: a network's here, a model's in model_plan ---------------------
DEVICES = ("cpu", "npu")


@dataclass(frozen=True)
class Option:
    """One device's candidate for one layer (of a network) or operator (of a model)."""

    cycles: int | None  # CPU cycles (an NPU's scaled from its own); None: it cannot run there
    note: str  # what was measured or estimated, or why not
    region: str = ""  # where its buffers live (the CPU kernel's; the NPU's arena port's region)
    npu_cycles: int | None = None  # NPU: Vela's own cycles
    workload: Workload | None = None  # a network's layer: the workload tuned for it
    record: Record | None = None  # and its best trial
    unit: str = ""  # CPU: what `cycles` counts, "cycles" (the cost model's estimate) or instructions at CPI 1
    model: bytes = b""  # a model's NPU layer: the one-operator model given to Vela (the layer's own tensors)
    compiled: bytes = b""  # and Vela's output (with the command stream)
    basis: str = ""  # a model's operator on the CPU: where the figure comes from (model_plan.BASES)


@dataclass(frozen=True)
class LayerPlan:
    layer: object  # a network's Layer, or a model's ModelLayer
    device: str  # "cpu" or "npu"
    cpu: Option
    npu: Option
    compute_cycles: int
    invoke_cycles: int
    copy_in_bytes: int
    copy_in_cycles: int
    explanation: str


@dataclass(frozen=True)
class Plan:
    source: object  # the Network, or the Model (model_plan)
    target: Target
    npu: Npu | None  # None: a model planned all on the CPU
    macs: int | None
    layers: tuple[LayerPlan, ...]
    copy_out_bytes: int
    copy_out_cycles: int
    total_cycles: int
    all_npu_cycles: int | None  # a model's: every tuned layer on the NPU, the rest on the CPU
    all_cpu_cycles: int | None
    objective: str = ""  # the override the CPU kernels were chosen by ("": each workload's own goal)
    bounds: tuple[Bound, ...] = ()

    @property
    def accelerator(self) -> str:
        return self.npu.accelerator(self.macs) if self.npu else "no NPU"


def _copy_cycles(npu: Npu, nbytes: int, source: str, destination: str) -> tuple[int, int]:
    """(bytes copied, CPU cycles) to move a tensor between two regions; free within one."""
    if source == destination:
        return 0, 0
    return nbytes, math.ceil(nbytes / npu.copy_bytes_per_cycle)


def cpu_shape(layer: Layer) -> dict:
    """The layer's shape in its CPU kernel's terms. The NPU operators keep one symmetric `pad`
    (or -1 for SAME); the CPU convolutions read the same geometry through their shorthands
    (pad=P on every side, pad=same with TFLite's asymmetric offsets), so both devices
    compute the same layer."""
    shape = dict(layer.shape)
    if shape.get("pad") == PAD_SAME:
        shape["pad"] = "same"
    return shape


def _cpu_option(layer: Layer, target: Target, db: TuningDatabase, override: tuple = ("", ())) -> Option:
    kernel = KERNELS.get(layer.operator.name)
    if kernel is None:
        return Option(None, f"no CPU kernel {layer.operator.name} in this edgetune: NPU-only")
    try:
        shape = kernel.parse_shape(cpu_shape(layer))
    except KernelError as exc:
        return Option(None, f"the CPU kernel refuses this shape ({exc}): NPU-only")
    workload = workload_of(kernel, target, shape)
    goal = goal_of(db, workload, target, *override)
    record = db.best(workload, goal.objective, goal.allows)
    if record is None:
        within = f" within {', '.join(b.text() for b in goal.bounds)}" if goal.bounds else ""
        return Option(None, f"{layer.operator.name} not tuned on {target.name} in {db.path.name}{within} "
                               f"(edgetune tune {layer.operator.name} --shape {layer.operator.shape_text(shape)}): NPU-only")
    # Where the best variant kept its activations (tunable placement; older trials: the default).
    io_bytes = kernel.make_io(shape, np.random.default_rng(0)).nbytes
    default = target.place_buffers(io_bytes)
    region = record.trial.info.get("activations_region") or (default.name if default else "cpu")
    unit = "cycles" if goal.objective == "cycles" and "cycles" in record.trial.values else target.measures
    value = math.ceil(record.trial.values[unit])
    chosen = f", best by {goal.text()}" if goal.objective != unit or goal.bounds else ""
    return Option(value, f"{value} {unit} (trial {record.id}{chosen})", region, workload=workload, record=record,
                  unit=unit)


def _best_with_macs(db: TuningDatabase, workload: Workload, macs: int) -> Record | None:
    best = None
    for record in db.records(workload):
        value = record.trial.value(NPU_OBJECTIVE)
        if value is None or record.trial.config["macs"] != macs:
            continue
        if best is None or value < best.trial.value(NPU_OBJECTIVE):
            best = record
    return best


def _npu_option(layer: Layer, target: Target, npu: Npu, macs: int, db: TuningDatabase, budget: int, seed: int,
                jobs: int) -> Option:
    request = TuneRequest(layer.operator, target, layer.shape, "random", budget=budget, jobs=jobs, seed=seed,
                          device=npu.name, macs=macs)
    summary = tune(request, db)  # measures only what the database does not hold yet
    workload = summary.workload
    record = _best_with_macs(db, workload, macs)
    if record is None:
        errors = sorted({trial.error for trial in db.trials(workload) if trial.outcome.failed and trial.config["macs"] == macs})
        return Option(None, f"Vela refused every configuration: {'; '.join(errors[:2]) or 'no trials'}", workload=workload)
    npu_cycles = int(record.trial.values[NPU_OBJECTIVE])
    cycles = math.ceil(npu_cycles * target.core.clock_hz / npu.clock_hz)
    config = record.trial.config.as_dict()
    mode = npu.memory_mode(str(config["memory_mode"]))
    port = npu.port(mode.arena_port)
    note = (f"Vela: {npu_cycles} NPU cycles at {npu.clock_hz / 1e6:g} MHz with {npu.accelerator(macs)}, "
            f"{config['memory_mode']}, {config['optimise']}, arena {config['arena_cache_size']}, "
            f"{config['tensor_allocator']}; trial {record.id}")
    return Option(cycles, note, port.region or f"{npu.name}.{port.name}", npu_cycles, workload=workload, record=record)


def plan_network(network: Network, target: Target, npu: Npu, db: TuningDatabase, macs: int | None = None,
                 npu_budget: int = 12, seed: int = 0, jobs: int = 2, objective: str = "",
                 bounds: tuple[Bound, ...] = ()) -> Plan:
    """`objective`/`bounds` choose the CPU kernels instead of their workloads' own goals."""
    macs = macs if macs is not None else max(npu.macs_per_cycle)
    recompute_estimates(db, target)
    if macs not in npu.macs_per_cycle:
        raise PlanError(f"--macs: {npu.name} comes with {', '.join(map(str, npu.macs_per_cycle))} MACs per cycle")
    cpu = [_cpu_option(layer, target, db, (objective, bounds)) for layer in network.layers]
    npus = [_npu_option(layer, target, npu, macs, db, npu_budget, seed, jobs) for layer in network.layers]
    for layer, c, n in zip(network.layers, cpu, npus):
        if c.cycles is None and n.cycles is None:
            raise PlanError(f"layer {layer.name} can run nowhere: CPU: {c.note}; NPU: {n.note}")

    first = network.layers[0]
    app_in = _app_region(target, first.input_bytes)
    app_out = _app_region(target, network.layers[-1].output_bytes)

    def region(i: int, device: str) -> str:
        return cpu[i].region if device == "cpu" else npus[i].region

    def step(i: int, device: str, previous: str | None) -> tuple[int, int, int, int, int]:
        """(total, compute, invoke, copy bytes, copy cycles) of layer i on device after previous."""
        option = cpu[i] if device == "cpu" else npus[i]
        source = app_in if previous is None else region(i - 1, previous)
        copied, copy = _copy_cycles(npu, network.layers[i].input_bytes, source, region(i, device))
        invoke = npu.invoke_cycles if device == "npu" else 0
        return option.cycles + invoke + copy, option.cycles, invoke, copied, copy

    usable = [[d for d in DEVICES if (cpu[i] if d == "cpu" else npus[i]).cycles is not None]
              for i in range(len(network.layers))]
    last = len(network.layers) - 1
    out_cost = {d: _copy_cycles(npu, network.layers[-1].output_bytes, region(last, d), app_out) for d in usable[last]}
    chosen, total = cheapest(usable, step, lambda d: out_cost[d])

    layer_plans = []
    for i, (layer, device) in enumerate(zip(network.layers, chosen)):
        previous = chosen[i - 1] if i else None
        costs = {d: step(i, d, previous) for d in usable[i]}
        _, compute, invoke, copied, copy = costs[device]
        layer_plans.append(LayerPlan(layer, device, cpu[i], npus[i], compute, invoke, copied, copy,
                                     _explain(layer, device, cpu[i], npus[i], costs, target)))
    copy_out_bytes, copy_out_cycles = out_cost[chosen[-1]]

    def uniform(device: str) -> int | None:
        if any(device not in u for u in usable):
            return None
        seq_total = sum(step(i, device, device if i else None)[0] for i in range(len(network.layers)))
        return seq_total + out_cost[device][1]

    return Plan(network, target, npu, macs, tuple(layer_plans), copy_out_bytes, copy_out_cycles, total,
                uniform("npu"), uniform("cpu"), objective, bounds)


def cheapest(usable: list[list[str]], step, out) -> tuple[list[str], int]:
    """Dynamic programming over (layer, device of the previous one), exact for this cost
    model: the devices and the total. `step(i, device, previous)[0]` is layer i's cost,
    `out(device)[1]` the copy of the last layer's output."""
    n = len(usable)
    # cost[i][d]: cheapest cost of layers 0..i with layer i on d; back[i][d]: device of i-1.
    cost: list[dict[str, int]] = [{} for _ in range(n)]
    back: list[dict[str, str | None]] = [{} for _ in range(n)]
    for d in usable[0]:
        cost[0][d], back[0][d] = step(0, d, None)[0], None
    for i in range(1, n):
        for d in usable[i]:
            cost[i][d], back[i][d] = min((cost[i - 1][p] + step(i, d, p)[0], p) for p in usable[i - 1])
    end = min(usable[-1], key=lambda d: (cost[-1][d] + out(d)[1], d))
    chosen = [end]
    for i in range(n - 1, 0, -1):
        chosen.append(back[i][chosen[-1]])
    chosen.reverse()
    return chosen, cost[-1][end] + out(end)[1]


def candidate_text(name: str, note: str, costs: dict) -> str:
    """One device's part of an explanation: its cost and what it is made of, or why it is impossible."""
    if name not in costs:
        return f"{name.upper()} impossible ({note})"
    total, compute, invoke, copied, copy = costs[name]
    parts = [f"{compute} compute"] + ([f"{invoke} invoke"] if invoke else []) + \
            ([f"{copy} to copy its {copied}-byte input"] if copy else [])
    return f"{name.upper()} {total} cycles = {' + '.join(parts)} ({note})"


def why_text(device: str, costs: dict) -> str:
    if len(costs) == 1:
        return "the only device that can run it"
    other = "npu" if device == "cpu" else "cpu"
    return f"{costs[other][0] - costs[device][0]} cycles cheaper than the {other.upper()}, transfers counted"


def _app_region(target: Target, nbytes: int) -> str:
    region = target.place_buffers(nbytes)
    return region.name if region else "cpu"


def _explain(layer: Layer, device: str, cpu: Option, npu: Option, costs: dict, target: Target) -> str:
    """One sentence per layer: where it runs, why, and both candidates' costs in CPU cycles
    (given where the previous layer runs)."""
    per_instruction = "" if cpu.unit == "cycles" else "; 1 cycle per instruction assumed"
    cpu_detail = cpu.note if "cpu" not in costs else f"best {layer.operator.name} variant: {cpu.note}{per_instruction}"
    texts = [candidate_text("cpu", cpu_detail, costs), candidate_text("npu", npu.note, costs)]
    return (f"{layer.name} ({layer.operator.name} {layer.operator.shape_text(layer.shape)}) -> {device.upper()}: "
            f"{why_text(device, costs)}. " + "; ".join(texts) + ".")


# --- export ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanExport:
    folder: Path
    header: Path
    plan_json: Path
    npu_models: tuple[Path, ...]
    cpu_export: ExportResult | None


def export_plan(plan: Plan, db: TuningDatabase, out_dir: Path) -> PlanExport:
    """Write the plan: CPU kernels as baked C (cpu/, the standard export), each NPU layer as
    its Vela-compiled model with the command stream (npu/<layer>_vela.tflite), a header
    saying which layer runs where, and plan.json."""
    from edgetune import __version__

    out_dir = Path(out_dir)
    make_folder(out_dir, str(out_dir), PlanError)  # a file in its place, or a folder that cannot be made: one line
    target = plan.target
    cpu_layers = [lp for lp in plan.layers if lp.device == "cpu"]
    cpu_export = None
    if cpu_layers:
        # Chosen exactly as the plan chose them: each workload's goal, or the plan's override.
        cpu_export = export_best(db, target, out_dir / "cpu", plan.objective, bounds=plan.bounds,
                                 toolchain=measurement_fingerprint(target), only=[lp.cpu.workload for lp in cpu_layers])
    functions = {e.kernel + str(e.shape): e.function for e in (cpu_export.entries if cpu_export else ())}
    npu_dir = out_dir / "npu"
    models = []
    rows = []
    for index, lp in enumerate(plan.layers):
        row = {"index": index, "name": lp.layer.name, "op": lp.layer.operator.name, "device": lp.device,
               "shape": lp.layer.operator.shape_text(lp.layer.shape), "compute_cycles": lp.compute_cycles,
               "invoke_cycles": lp.invoke_cycles, "copy_in_bytes": lp.copy_in_bytes, "copy_in_cycles": lp.copy_in_cycles,
               "explanation": lp.explanation, "cpu_cycles": lp.cpu.cycles, "npu_cycles": lp.npu.npu_cycles}
        if lp.device == "npu":
            npu_dir.mkdir(exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="edgetune-plan-") as tmp:
                try:
                    result = compile_config(lp.layer.operator, target, plan.npu, lp.npu.workload,
                                            lp.npu.record.trial.config, Path(tmp))
                except MeasureError as exc:
                    raise PlanError(f"layer {lp.layer.name}: Vela no longer compiles its best configuration: "
                                         f"{exc.message}") from None
                model = npu_dir / f"{lp.layer.name}_vela.tflite"
                shutil.copyfile(result.compiled, model)
            models.append(model)
            row.update(model=f"npu/{model.name}", model_symbol=f"et_npu_model_{lp.layer.name}",
                       model_size=model.stat().st_size, config=lp.npu.record.trial.config.as_dict(),
                       npu_values=lp.npu.record.trial.values)
        else:
            row.update(function=functions[lp.cpu.workload.kernel + str(lp.cpu.workload.shape)],
                       config=lp.cpu.record.trial.config.as_dict())
        rows.append(row)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    summary = {"network": plan.source.name, "network_file": plan.source.source, "target": target.name,
               "npu": plan.npu.name, "accelerator": plan.accelerator, "cycles_unit": f"CPU cycles at {target.core.clock_hz} Hz",
               "total_cycles": plan.total_cycles, "all_npu_cycles": plan.all_npu_cycles,
               "all_cpu_cycles": plan.all_cpu_cycles, "copy_out_bytes": plan.copy_out_bytes,
               "copy_out_cycles": plan.copy_out_cycles, "layers": rows, "edgetune_version": __version__, "created": date}
    plan_json = out_dir / PLAN_JSON
    plan_json.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    header_text = render("plan_header.h.j2", dict(
        summary, header=PLAN_HEADER, guard="EDGETUNE_PLAN_" + plan.source.name.upper() + "_H",
        prefix="ET_PLAN_", n_layers=len(rows), cpu_header=("cpu/edgetune_kernels.h" if cpu_export else ""),
        models_source=NPU_MODELS_SOURCE,
        layers=[dict(r, model=r.get("model", ""), function=r.get("function", ""),
                     explanation=_comment(r["explanation"])) for r in rows]))
    header = out_dir / PLAN_HEADER
    header.write_text(header_text, encoding="utf-8")
    if models:
        arrays = [{"file": row["model"], "symbol": row["model_symbol"], "size": row["model_size"],
                   "lines": _hex_lines((out_dir / row["model"]).read_bytes())} for row in rows if row["device"] == "npu"]
        (npu_dir / NPU_MODELS_SOURCE).write_text(render("plan_npu_models.c.j2", dict(
            summary, source=NPU_MODELS_SOURCE, header=f"../{PLAN_HEADER}", models=arrays)), encoding="utf-8")
    return PlanExport(out_dir, header, plan_json, tuple(models), cpu_export)


def _hex_lines(data: bytes, per_line: int = 16) -> list[str]:
    return [" ".join(f"0x{b:02x}," for b in data[i:i + per_line]) for i in range(0, len(data), per_line)]


def _comment(text: str) -> str:
    return " ".join(str(text).split()).replace("*/", "* /").replace("/*", "/ *")
