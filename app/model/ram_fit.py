"""Each tuned layer's variant chosen under a bound on the module's RAM (`model export
--max-ram BYTES`, and what `model tune --max-ram` reports; docs/model-ram.md).

The RAM is what `model verify` counts: the arena (tensors and the layers' scratch, planned by
app/model/memory_plan.py), the static scratch area some templates keep beside it (as large as
the largest such need), the static pointer of each variant with scratch in the arena, and the
inputs and outputs. A variant changes it three ways: its scratch in the arena (alive during
its layer's step), its static scratch, and whether it writes its output over its input.

The choice minimises the model's cost (the objective of every measured variant, weighted by
how many layers run it) subject to that RAM <= the bound. The bound is on a peak, a maximum
over the schedule, not a sum: a layer's variant weighs only at the steps it runs, beside the
tensors alive there. So the options are ordered by a lower bound of the peak they force (the
bytes alive at their layers' steps with their scratch, less what writing in place saves, plus
their static scratch), and for each threshold T of those bounds every workload takes its
fastest option whose bound is <= T: a family of choices from the fastest to the leanest,
each planned by the real planner (fragmentation, in-place chains). The cheapest that fits is
kept, then each workload is moved to a faster option while the plan still fits. The
threshold family is exact where the planner reaches the lower bound (it usually does: the
largest tensors alive together set the peak); the upgrade pass recovers most of the rest.

A bound below every plan found is refused in one line: the bound, the smallest RAM reached
(with the leanest options) and the operator at whose step that peak is set.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from edgetune.codegen import KERNELS
from edgetune.codegen.export import ExportEntry
from edgetune.errors import EdgetuneError
from edgetune.hal import Target

from . import Model
from .memory_plan import ALIGN, MemoryPlan, aligned
from .module import Step, arena_tensors, plan_variants, schedule, scratch_symbol, scratch_pointer

Key = tuple  # (kernel, shape): a tuned workload of the model, as export.choose_layers keys it


class RamBoundError(EdgetuneError):
    """A RAM bound no choice of the measured variants meets (one line: the bound, the
    smallest RAM reached, the operator that sets it)."""


@dataclass(frozen=True)
class VariantRam:
    """What one variant adds to the module's RAM (codegen/scratch.py's layout of its render)."""
    arena_scratch: int  # bytes in the arena while its layer runs
    static_scratch: int  # bytes of the static area beside the arena
    in_place: str  # KernelBase.in_place_mode: "", "start", "end" or "lag"
    lag: int = 0  # mode "lag": bytes the output starts before the input (KernelBase.in_place_lag)


@dataclass(frozen=True)
class Option:
    entry: ExportEntry
    ram: VariantRam

    @property
    def cost(self) -> float | None:
        """The objective's value measured (None: the default configuration, never measured)."""
        return self.entry.value if self.entry.trial_id else None


@dataclass(frozen=True)
class PlannedRam:
    """The RAM of one choice of options (one per workload), as `model verify` will count it."""
    choice: tuple[int, ...]
    plan: MemoryPlan
    steps: tuple[Step, ...]
    static_scratch: int
    pointers: int  # bytes of the static scratch pointers
    io_bytes: int

    @property
    def arena_bytes(self) -> int:
        return max(self.plan.arena_bytes, ALIGN)  # the module's arena is never empty

    @property
    def total(self) -> int:
        return self.arena_bytes + self.static_scratch + self.pointers + self.io_bytes


@dataclass(frozen=True)
class RamFit:
    """The choice under the bound beside the fastest one."""
    max_ram: int
    keys: tuple[Key, ...]
    options: tuple[tuple[Option, ...], ...]  # per workload, as `keys`
    weights: tuple[int, ...]  # layers per workload
    fastest: PlannedRam
    fitted: PlannedRam

    def chosen(self) -> dict[Key, ExportEntry]:
        return {key: self.options[w][o].entry for w, (key, o) in enumerate(zip(self.keys, self.fitted.choice))}

    def cost(self, planned: PlannedRam) -> float:
        """The model's cost of a choice: each workload's measured value times its layers (an
        unmeasured default counts 0, `unmeasured` names it)."""
        return sum(w * (self.options[n][o].cost or 0.0) for n, (w, o) in enumerate(zip(self.weights, planned.choice)))

    def changed(self) -> tuple[Key, ...]:
        return tuple(k for k, a, b in zip(self.keys, self.fastest.choice, self.fitted.choice) if a != b)

    def unmeasured(self) -> tuple[Key, ...]:
        return tuple(k for n, (k, o) in enumerate(zip(self.keys, self.fitted.choice)) if self.options[n][o].cost is None)


def pointer_bytes(target: Target) -> int:
    """A data pointer's size: 4 on the M-profile cores (armv7e-m, armv8.1-m), 8 elsewhere
    (AArch64, x86-64)."""
    return 4 if "-m" in target.core.isa.split("+")[0] else 8


def variant_ram(target: Target, entry: ExportEntry) -> VariantRam:
    """A variant's scratch as a module lays it out (rendered as the module renders it, in the
    arena where its template allows) and its in-place mode."""
    kernel = KERNELS[entry.kernel]
    shape = dict(entry.shape)
    config = kernel.tuning_space(target, shape).make(dict(entry.config))
    rendered = kernel.render(target, shape, config, header="ram_fit.h", fn="ram_fit",
                             shared_scratch=scratch_symbol("ram_fit"), scratch_pointer=scratch_pointer("ram_fit"))
    return VariantRam(rendered.arena_scratch_bytes, rendered.scratch_bytes, kernel.in_place_mode(shape, config),
                      kernel.in_place_lag(shape, config))


def lean_front(options: Sequence[Option]) -> tuple[Option, ...]:
    """The options not dominated: none other is as fast (measured) and needs no more RAM in
    every respect (arena scratch, static scratch, and in place where this one is). The
    fastest first; an unmeasured default counts as slower than any measured option."""
    def speed(o: Option) -> float:
        return float("inf") if o.cost is None else o.cost

    def no_worse(a: VariantRam, b: VariantRam) -> bool:
        return a.arena_scratch <= b.arena_scratch and a.static_scratch <= b.static_scratch and \
            (a.in_place == b.in_place or not b.in_place)

    ordered = sorted(options, key=speed)  # stable: ties keep the given order
    kept: list[Option] = []
    for o in ordered:
        if not any(no_worse(k.ram, o.ram) for k in kept):
            kept.append(o)
    return tuple(kept)


class _Planner:
    """Plans choices of options (memoised), and each option's lower bound of the peak."""

    def __init__(self, model: Model, target: Target, keys: Sequence[Key], options: Sequence[Sequence[Option]],
                 weights: Sequence[int]):
        self.model, self.keys, self.options, self.weights = model, tuple(keys), options, tuple(weights)
        self.steps = schedule(model, "ram_fit")
        key_of = {s.function: (s.kernel, model.layers[s.index].shape) for s in self.steps if s.kernel is not None}
        self.functions = {key: tuple(fn for fn, k in key_of.items() if k == key) for key in self.keys}
        self.io_bytes = model.graph.interface_bytes
        self.pointer = pointer_bytes(target)
        self.cache: dict[tuple[int, ...], PlannedRam] = {}
        self._lives = self._tensor_lives()

    def _tensor_lives(self) -> dict[int, tuple[int, int, int]]:
        """Arena tensor -> (aligned bytes, first step, last step)."""
        plan = plan_variants(self.model, self.steps, {}, {})[1]
        return {a.tensor: (aligned(a.nbytes), a.first, a.last) for a in plan.tensors}

    def plan(self, choice: tuple[int, ...]) -> PlannedRam:
        if choice not in self.cache:
            modes, scratch, lags, static, pointers = {}, {}, {}, 0, 0
            for key, options, o in zip(self.keys, self.options, choice):
                ram = options[o].ram
                static = max(static, ram.static_scratch)
                for fn in self.functions[key]:
                    modes[fn], scratch[fn], lags[fn] = ram.in_place, ram.arena_scratch, ram.lag
                    pointers += self.pointer if ram.arena_scratch else 0
            steps, plan = plan_variants(self.model, self.steps, modes, scratch, lags)
            self.cache[choice] = PlannedRam(choice, plan, steps, static, pointers, self.io_bytes)
        return self.cache[choice]

    def cost(self, choice: tuple[int, ...]) -> float:
        """The search's cost of a choice: weighted values, an unmeasured option as slower than any."""
        return sum(w * _speed(options[o]) for w, options, o in zip(self.weights, self.options, choice))

    def alive(self, n: int) -> int:
        return sum(size for size, first, last in self._lives.values() if first <= n <= last)

    def lower_bound(self, key: Key, ram: VariantRam) -> int:
        """The least peak this option forces: at each step its workload runs, the tensors
        alive there and its scratch, less its input's bytes when it writes over them (the
        input is in the arena and dies there), plus its static scratch."""
        worst = 0
        inside = arena_tensors(self.model, self.steps)
        for n, step in enumerate(self.steps):
            if step.kernel is None or step.function not in self.functions[key]:
                continue
            source, out = step.inputs[0], step.outputs[0]
            saved = 0
            if ram.in_place and source in inside and out in inside and self._lives[source][2] == n:
                saved = max(0, min(self._lives[source][0], self._lives[out][0]) - aligned(ram.lag))
            worst = max(worst, self.alive(n) - saved + aligned(ram.arena_scratch))
        return worst + ram.static_scratch


def _thresholds(planner: _Planner, bounds: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """For each distinct lower bound T, every workload's fastest option whose bound is <= T
    (or its leanest, when none is): from the fastest choice to the leanest."""
    choices = []
    for t in sorted({b for per in bounds for b in per}, reverse=True):
        choice = []
        for per in bounds:
            within = [o for o, b in enumerate(per) if b <= t]
            choice.append(within[0] if within else min(range(len(per)), key=lambda o: (per[o], o)))
        choices.append(tuple(choice))
    return list(dict.fromkeys(choices))


def _upgrade(planner: _Planner, choice: tuple[int, ...], max_ram: int) -> tuple[int, ...]:
    """Each workload moved to a faster option (the options are fastest first) while the plan
    still fits, the largest saving first, until none moves."""
    while True:
        moves = sorted((planner.cost(c), c) for w, o in enumerate(choice) for faster in range(o)
                       for c in (choice[:w] + (faster,) + choice[w + 1:],))
        fits = next((c for cost, c in moves if cost < planner.cost(choice) and planner.plan(c).total <= max_ram), None)
        if fits is None:
            return choice
        choice = fits


def _speed(option: Option) -> float:
    """An option's cost for the search: an unmeasured default as slower than any measured one."""
    return UNMEASURED if option.cost is None else option.cost


UNMEASURED = 1e300


def fit_ram(model: Model, target: Target, variants: Mapping[Key, Sequence[ExportEntry]], max_ram: int,
            ram_of: Callable[[Target, ExportEntry], VariantRam] = variant_ram) -> RamFit:
    """The cheapest choice of `variants` (export.layer_variants: per workload, the fastest
    first) whose planned RAM is <= `max_ram` bytes; RamBoundError when none is. `ram_of`
    says what a variant adds to the RAM (its render's, by default)."""
    keys, weights = model_keys(model)
    options = tuple(lean_front([Option(e, ram_of(target, e)) for e in variants[k]]) for k in keys)
    planner = _Planner(model, target, keys, options, weights)
    bounds = [[planner.lower_bound(k, o.ram) for o in opts] for k, opts in zip(keys, options)]
    family = _thresholds(planner, bounds) or [tuple(0 for _ in keys)]  # no tuned layer: one choice, the empty one
    fastest = planner.plan(tuple(0 for _ in keys))
    fitting = [c for c in family if planner.plan(c).total <= max_ram]
    if not fitting:
        raise RamBoundError(refusal(model, planner, min((planner.plan(c) for c in family), key=lambda p: p.total),
                                    max_ram))
    best = _upgrade(planner, min(fitting, key=planner.cost), max_ram)
    return RamFit(max_ram, keys, options, weights, fastest, planner.plan(best))


def fastest_ram(model: Model, target: Target, variants: Mapping[Key, Sequence[ExportEntry]]) -> PlannedRam:
    """The RAM of the fastest variant of every workload (only those rendered)."""
    keys, weights = model_keys(model)
    options = tuple((Option(variants[k][0], variant_ram(target, variants[k][0])),) for k in keys)
    return _Planner(model, target, keys, options, weights).plan(tuple(0 for _ in keys))


def model_keys(model: Model) -> tuple[tuple[Key, ...], tuple[int, ...]]:
    """The model's tuned workloads as (kernel, shape) keys, and how many layers run each."""
    keys = tuple(dict.fromkeys((layer.kernel, layer.shape) for layer in model.layers if layer.kernel is not None))
    return keys, tuple(sum(1 for layer in model.layers if (layer.kernel, layer.shape) == k) for k in keys)


def room_for(model: Model, target: Target, max_ram: int) -> "RamRoom":
    """What a bound leaves each workload (the search's limit on its scratch), or RamBoundError
    when the tensors alone cannot fit."""
    keys, weights = model_keys(model)
    planner = _Planner(model, target, keys, [() for _ in keys], weights)
    return RamRoom(planner, max_ram)


@dataclass
class RamRoom:
    """A RAM bound against a model's schedule: how much scratch each workload's variants may
    need, and which options could fit at all (lower bounds, before any plan)."""
    planner: _Planner
    max_ram: int

    @property
    def free(self) -> int:
        """Bytes of the bound for the arena: less the inputs and outputs and the pointers of
        every tuned layer's scratch (each at most one)."""
        p = self.planner
        return self.max_ram - p.io_bytes - p.pointer * sum(len(p.functions[k]) for k in p.keys)

    def fits(self, key: Key, ram: VariantRam) -> bool:
        return self.planner.lower_bound(key, ram) <= self.free

    def scratch_limits(self) -> dict[Key, int]:
        """Per workload, the most scratch any of its variants may need: the bound less the
        tensors alive at its steps, taking it in place (the least they can take)."""
        least = {key: self.planner.lower_bound(key, VariantRam(0, 0, "start")) for key in self.planner.keys}
        worst = max(least, key=least.get)
        if least[worst] > self.free:
            raise RamBoundError(self.tensors_refusal(worst, least[worst]))
        return {key: self.free - need for key, need in least.items()}

    def tensors_refusal(self, key: Key, least: int) -> str:
        p = self.planner
        n = max((n for n, s in enumerate(p.steps) if s.function in p.functions[key]), key=p.alive)
        step = p.steps[n]
        return (f"--max-ram {self.max_ram}: {p.model.path} needs more: at operator {step.index} ({step.op}) the "
                f"tensors alive take {least:,} bytes even written in place, beside {p.io_bytes:,} bytes of inputs "
                "and outputs")


def peak_step(planned: PlannedRam) -> tuple[int, int, int]:
    """Where the arena's peak is set: (step position, bytes of tensors alive there, bytes of
    its scratch), the first step whose buffers reach highest in the arena."""
    plan = planned.plan
    tops = []
    for n in range(len(planned.steps)):
        alive = [a for a in plan.allocations if a.first <= n <= a.last]
        tops.append(max((a.end for a in alive), default=0))
    n = int(np.argmax(tops)) if tops else 0
    scratch = plan.scratch.get(n)
    return n, _covered([(a.offset, a.end) for a in plan.tensors if a.first <= n <= a.last]), \
        scratch.nbytes if scratch else 0


def _covered(ranges: Sequence[tuple[int, int]]) -> int:
    """Bytes in the union of [start, end) ranges (tensors written in place share theirs)."""
    total, reach = 0, 0
    for start, end in sorted(ranges):
        total += max(0, end - max(start, reach))
        reach = max(reach, end)
    return total


def refusal(model: Model, planner: _Planner, leanest: PlannedRam, max_ram: int) -> str:
    n, tensors, scratch = peak_step(leanest)
    step = leanest.steps[n]
    what = f"{tensors:,} bytes of tensors alive there" + (f" and {scratch:,} of its scratch" if scratch else "")
    static = f", static scratch {leanest.static_scratch:,}" if leanest.static_scratch else ""
    return (f"--max-ram {max_ram}: {model.path} needs at least {leanest.total:,} bytes of RAM with the variants "
            f"measured (arena {leanest.arena_bytes:,}{static}, inputs and outputs {leanest.io_bytes:,}); operator "
            f"{step.index} ({step.op}) sets the arena's peak: {what}")


__all__ = ["Option", "PlannedRam", "RamBoundError", "RamFit", "VariantRam", "fastest_ram", "fit_ram", "lean_front", "peak_step",
           "pointer_bytes", "variant_ram"]
