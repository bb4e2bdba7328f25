"""A patch plan in the model module (app/model/patches.py has the geometry): the stage's
layers leave the schedule for one step (op PATCHES) whose C, `<name>_stage<k>.c`, calls each
layer's kernel band by band on row windows of the tensors and of its work buffers; each
distinct band shape (top band padded at the top, bottom band at the bottom, middle bands
unpadded, a shorter last band) is its own instance of the layer's kernel, rendered with the
layer's variant (or, where that variant does not serve a band's shape, the kernel's default
configuration) and the layer's constants, so the module stays one AOT C module.

Plans are written `FIRST-LAST[:ROWS[:HALO]]`, stages separated by commas: operator indices
of the stage's first and last layer, output rows per band (1), halo handling (cache) and, with
`:default`, the band instances on their kernels' default configuration (no arena scratch)
instead of the layers' variants."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from edgetune.codegen.export import ExportEntry, ExportError
from edgetune.hal import Target

from .memory_plan import Allocation, MemoryPlan, TensorLife, aligned, plan_memory
from .patches import HALOS, PatchError, RowGeometry, StageSchedule, overwrite_problem, row_geometry, stage_schedule

PATCH_OP = "PATCHES"
BANDED_KERNELS = ("conv2d_s8", "dwconv2d_s8")
STAGE_RE = re.compile(r"(\d+)-(\d+)(?::(\d+))?(?::([a-z]+))?(?::(default))?")


@dataclass(frozen=True)
class StagePlan:
    first: int  # operator index of the stage's first layer
    last: int  # and of its last
    band_rows: int = 1
    halo: str = "cache"
    default_variants: bool = False  # the band instances on their kernels' default configuration

    @property
    def text(self) -> str:
        return f"{self.first}-{self.last}:{self.band_rows}:{self.halo}" + (":default" if self.default_variants else "")


@dataclass(frozen=True)
class PatchPlan:
    stages: tuple[StagePlan, ...]

    @property
    def text(self) -> str:
        return ",".join(s.text for s in self.stages)


def parse_patch_plan(text: str) -> PatchPlan:
    if not text.strip():
        raise PatchError("--patch '': an empty plan (give stages FIRST-LAST[:ROWS[:HALO[:default]]], or auto, "
                         "or leave --patch out)")
    stages = []
    for n, part in enumerate(text.split(",")):
        if not part.strip():
            raise PatchError(f"--patch {text!r}: an empty stage {'before' if n == 0 else 'after'} a comma")
        found = STAGE_RE.fullmatch(part.strip())
        if not found:
            raise PatchError(f"--patch {part!r}: a stage is FIRST-LAST[:ROWS[:HALO[:default]]] (operator indices, "
                             f"rows per band, halo {'|'.join(HALOS)})")
        first, last, rows, halo, default = found.groups()
        if halo is not None and halo not in HALOS:
            raise PatchError(f"--patch {part!r}: halo {halo!r} is not one of {', '.join(HALOS)}")
        stages.append(StagePlan(int(first), int(last), int(rows or 1), halo or "cache", default is not None))
    check_disjoint(stages)
    return PatchPlan(tuple(stages))


def check_disjoint(stages: Sequence[StagePlan]) -> None:
    """Each operator in one stage at most: a layer runs once (and one stage's work buffers
    cannot stand in for a tensor another stage reads whole)."""
    for k, a in enumerate(stages):
        for b in stages[k + 1:]:
            if (a.first, a.last) == (b.first, b.last):
                raise PatchError(f"--patch: stages {a.first}-{a.last} and {b.first}-{b.last} are the same operators "
                                 "twice (give each stage once)")
            if a.first <= b.last and b.first <= a.last:
                raise PatchError(f"--patch: stages {a.first}-{a.last} and {b.first}-{b.last} overlap (an operator "
                                 "runs in one stage at most)")


def _channels(shape: Mapping[str, int]) -> tuple[int, int]:
    if "cin" in shape:
        return shape["cin"], shape["cout"]
    return shape["c"], shape["c"] * shape["mult"]


def stage_layers(model, stage: StagePlan) -> tuple:
    """The stage's layers, checked: consecutive int8 convolutions of one chain (each reads
    the one before it, which nothing else reads), none a model output but the last."""
    graph = model.graph
    if stage.last < stage.first:
        raise PatchError(f"--patch stage {stage.text}: its last operator is before its first")
    layers = [layer for layer in model.layers if stage.first <= layer.index <= stage.last]
    for k, layer in enumerate(layers):
        if layer.kernel not in BANDED_KERNELS or layer.op == "FULLY_CONNECTED" or layer.dtype != "int8":
            raise PatchError(f"--patch stage {stage.text}: operator {layer.index} ({layer.op}) is not an int8 "
                             "convolution (CONV_2D, DEPTHWISE_CONV_2D)")
        if k and layer.input_tensor != layers[k - 1].operator.outputs[0]:
            raise PatchError(f"--patch stage {stage.text}: operator {layer.index} does not read operator "
                             f"{layers[k - 1].index}'s output")
        out = layer.operator.outputs[0]
        readers = [op.index for op in graph.operators if out in op.inputs]
        if k < len(layers) - 1 and (readers != [layers[k + 1].index] or out in graph.outputs):
            raise PatchError(f"--patch stage {stage.text}: operator {layer.index}'s output is read by "
                             f"{readers or 'no operator'}, not only by operator {layers[k + 1].index}")
    return tuple(layers)


def stage_geometry(layers) -> tuple[RowGeometry, ...]:
    return tuple(row_geometry(layer.shape_dict, *_channels(layer.shape_dict)) for layer in layers)


@dataclass(frozen=True)
class PlannedStage:
    stage: StagePlan
    layers: tuple
    geometry: tuple[RowGeometry, ...]
    schedule: StageSchedule
    overwrites: bool  # its output may be written over its input (patches.overwrite_problem)


def plan_stage(model, stage: StagePlan) -> PlannedStage:
    layers = stage_layers(model, stage)
    geometry = stage_geometry(layers)
    try:
        schedule = stage_schedule(geometry, stage.band_rows, stage.halo)
    except PatchError as e:  # the geometry's own words, with the flag and stage they are about
        raise PatchError(f"--patch stage {stage.text}: {e}") from None
    in_bytes = geometry[0].h * geometry[0].in_row_bytes
    return PlannedStage(stage, layers, geometry, schedule, not overwrite_problem(schedule, geometry, in_bytes))


def patched_steps(model, steps: Sequence, plan: PatchPlan, name: str, step_type) -> tuple[tuple, dict[int, PlannedStage]]:
    """The schedule with each stage's layers replaced by one PATCHES step (at the first
    layer's place), and step position -> its planned stage."""
    check_disjoint(plan.stages)
    planned = [plan_stage(model, s) for s in plan.stages]
    covered = {layer.index: k for k, p in enumerate(planned) for layer in p.layers}
    out, stages = [], {}
    for step in steps:
        k = covered.get(step.index)
        if k is None:
            out.append(step)
            continue
        p = planned[k]
        if step.index != p.layers[0].index:
            continue
        source, result = p.layers[0].input_tensor, p.layers[-1].operator.outputs[0]
        stages[len(out)] = p
        out.append(step_type(step.index, PATCH_OP, f"{name}_stage{k}", (source,), (result,), None,
                             (source,) if p.overwrites else ()))
    missing = [s.text for k, s in enumerate(plan.stages) if k not in {covered[i] for i in covered}]
    if missing:
        raise PatchError(f"--patch stage {missing[0]}: no layer of the model in it")
    return tuple(out), stages


def over_input(plan: MemoryPlan, input_tensor: int) -> MemoryPlan:
    """The split of `plan` (_split), or of a plan of the tensors after the input's death made
    again for the input's bytes alone (_replanned), whichever leaves the smaller arena."""
    split = _split(plan, input_tensor)
    again = _replanned(plan, input_tensor)
    return again if again is not None and again.arena_bytes < split.arena_bytes else split


def _replanned(plan: MemoryPlan, input_tensor: int) -> MemoryPlan | None:
    """Every allocation first alive after the input's last read planned again by itself, with
    the one written over the input in place (pinned at 0) and the in-place pairs the plan kept;
    None unless all of them then fit in the input's bytes. The planner knows no pool end, so
    a plan of the whole schedule can leave a tensor across it where this one fits."""
    by = plan.by_tensor()
    dead, limit = by[input_tensor].last, by[input_tensor].nbytes
    carried = [a for a in plan.allocations if a.shares == input_tensor and a.offset == 0 and a.last > dead]
    later = [a for a in plan.allocations if a.first > dead]
    if len(carried) > 1:
        return None
    lives = [TensorLife(a.tensor, a.nbytes, a.first, a.last) for a in (*carried, *later)]
    pairs = {a.tensor: a.shares for a in later if a.shares in {x.tensor for x in (*carried, *later)}}
    ends = {t for t, src in pairs.items() if by[t].end == by[src].end and by[t].offset != by[src].offset}
    lags = {t: by[src].offset - by[t].offset for t, src in pairs.items()
            if t not in ends and by[t].offset < by[src].offset}  # written ahead of its input (a lag)
    pairs = {t: src for t, src in pairs.items() if t in ends or t in lags or by[t].offset == by[src].offset}
    grows = {t for t, src in pairs.items() if t not in ends and t not in lags and by[t].nbytes > by[src].nbytes}
    again = plan_memory(lives, pairs, plan.alignment, grows=grows, ends=ends, lags=lags,
                        pinned=carried[0].tensor if carried else None)
    if again.arena_bytes > limit or (carried and again.offset(carried[0].tensor) != 0):
        return None
    keep = {a.tensor for a in (*carried, *later)}
    rest = _split(MemoryPlan(tuple(a for a in plan.allocations if a.tensor not in keep), plan.arena_bytes,
                             plan.alignment), input_tensor)
    placed = tuple(a for a in again.allocations if a.end <= limit)
    return MemoryPlan(rest.allocations, rest.arena_bytes, plan.alignment, tuple(sorted(
        (*rest.over_input, *placed), key=lambda a: a.tensor)))


def _split(plan: MemoryPlan, input_tensor: int) -> MemoryPlan:
    """A plan of one arena that holds the model's input from offset 0 (memory_plan with the
    inputs inside) split in two: the allocations inside the input's bytes go over the input
    buffer (the caller's, written over once read), the rest into the arena, shifted down; one
    that would lie across the input's end (the planner knows no such end) moves to the lowest
    place over the input free while it lives, else above everything else in the arena (a
    larger arena, never an overlap)."""
    by = plan.by_tensor()
    if by[input_tensor].offset != 0:
        raise PatchError("the memory plan did not put the model's input at the start of its pool")
    size, limit = aligned(by[input_tensor].nbytes), by[input_tensor].nbytes
    others = [a for a in plan.allocations if a.tensor != input_tensor]
    inside = [a for a in others if a.end <= limit]
    rest = [replace(a, offset=a.offset - size) for a in others if a.offset >= size]
    top = aligned(max((a.end for a in rest), default=0))
    for a in sorted((a for a in others if a.end > limit and a.offset < size), key=lambda a: -a.nbytes):
        spot = _free_spot(a, inside, limit, plan.alignment)
        if spot is not None:
            inside.append(replace(a, offset=spot, shares=None))
            continue
        rest.append(replace(a, offset=top, shares=None))
        top += aligned(a.nbytes)
    rest.sort(key=lambda a: a.tensor)
    return MemoryPlan(tuple(rest), aligned(max((a.end for a in rest), default=0)), plan.alignment,
                      tuple(sorted(inside, key=lambda a: a.tensor)))


def _free_spot(a: Allocation, placed: Sequence[Allocation], limit: int, alignment: int) -> int | None:
    """The lowest aligned offset where `a` fits below `limit` beside every placed allocation
    alive at the same time, or None."""
    busy = [(p.offset, p.end) for p in placed if p.first <= a.last and a.first <= p.last]
    for start in sorted({0, *(aligned(end, alignment) for _, end in busy)}):
        if start + a.nbytes <= limit and all(start + a.nbytes <= lo or hi <= start for lo, hi in busy):
            return start
    return None


def stage_config(kernel, target: Target, entry: ExportEntry, shapes: Sequence[dict], default, tuned: bool = True):
    """The configuration every band instance of a layer takes: the layer's variant (`tuned`)
    when it is legal for each band's shape, else the kernel's default configuration (of the
    first band shape) when that one is; one for all, as they share the layer's packed constants."""
    spaces = [kernel.tuning_space(target, kernel.parse_shape(s)) for s in shapes]
    own = (dict(entry.config),) if tuned else ()
    for values in (*own, dict(default(kernel, target, kernel.parse_shape(shapes[0])).items)):
        try:
            configs = [space.make(values) for space in spaces]
        except (KeyError, ValueError):
            continue
        if all(space.is_legal(c) for space, c in zip(spaces, configs)):
            return configs[0]
    raise ExportError(f"{kernel.name}: no configuration serves every band shape of its layer")
