"""`model tune --max-ram BYTES`: the low-RAM variants a bound needs, measured when the stored
trials lack them (docs/model-ram.md).

A tune for speed alone rarely measures a layer's lean configurations: the fastest variants
keep unfused accumulators or padded copies. When a workload's fastest stored variant cannot
fit under the bound (its lower bound of the peak, ram_fit.RamRoom), its lean siblings are
the configurations nearest it on each code path and those within two parameter steps of it
whose scratch (Kernel.scratch_estimate) and in-place mode could fit: the nearest on each code
path first, then the closest, the largest scratch among equals (more im2col rows and tiles
run faster), at most LEAN_PER_WORKLOAD of them. They are measured as one more round of that
layer's search (seeds first), beyond the model's budget, and the summary says so.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from edgetune.codegen import KERNELS
from edgetune.hal import Target
from edgetune.tuner import TuningDatabase, feasible

from edgetune.session import TuneRequest, compiled_by, tune, workload_of
from . import Model
from .session import ModelSummary
from .export import layer_variants
from .ram_fit import RamRoom, VariantRam, variant_ram

LEAN_PER_WORKLOAD = 3


@dataclass(frozen=True)
class LeanRound:
    key: tuple  # (kernel, shape)
    measured: int  # new trials


def lean_siblings(kernel, target: Target, shape: dict, config: dict, room: RamRoom, key: tuple,
                  limit: int = LEAN_PER_WORKLOAD) -> list[dict]:
    """Configurations near `config` (one step, then two) whose estimated scratch and in-place
    mode could fit under the room's bound."""
    if not kernel.scratch_reads:
        return []
    space = kernel.tuning_space(target, shape)
    start = space.index_of(config)
    ring = {n: 1 for n in space.neighbours(start)}
    for n in list(ring):
        for m in space.neighbours(n):
            ring.setdefault(m, 2)
    ring.update({n: 3 for n in nearest_per_path(space, start) if n not in ring})
    ring.pop(start, None)
    found = []
    for index, steps in ring.items():
        candidate = space.config_at(index)
        values = candidate.as_dict()
        scratch = kernel.scratch_estimate(shape, values) or 0
        if room.fits(key, VariantRam(scratch, 0, kernel.in_place_mode(shape, candidate),
                                     kernel.in_place_lag(shape, candidate))):
            found.append((steps, -scratch, index, values))
    found.sort(key=lambda item: item[:3])
    # The nearest of each code path first (a path's lean form differs most in speed), then the rest.
    paths = {}
    for item in found:
        paths.setdefault(item[3].get("vector"), item)
    ordered = [*paths.values(), *(item for item in found if item not in paths.values())]
    return [values for *_, values in ordered[:limit]]


def nearest_per_path(space, start: int) -> list[int]:
    """For each value of `vector` (a kernel's code paths), the legal configuration nearest
    `start` that takes it: a path's own lean form may lie several steps away (mve_pixels
    depthwise, in place with a small static plane, needs four parameters changed)."""
    if "vector" not in space.names:
        return []
    axis = space.names.index("vector")
    legal, rows = space.legal_indices(), space.legal_digits()
    distance = space.distances(space.digits(start))
    found = []
    for digit in range(len(space.param("vector").values)):
        mask = rows[:, axis] == digit
        if mask.any():
            found.append(int(legal[mask][int(np.argmin(distance[mask]))]))
    return found


def measure_lean(model: Model, target: Target, db: TuningDatabase, room: RamRoom, template: TuneRequest,
                 objective: str = "", compilers: tuple[str, ...] = ()) -> tuple[LeanRound, ...]:
    """For each workload whose fastest stored variant cannot fit, measure its lean siblings
    (the ones not stored yet); the rounds run."""
    rounds = []
    for key, entries in layer_variants(model, target, db, objective, template.bounds, compilers).items():
        fastest = entries[0]
        if room.fits(key, variant_ram(target, fastest)):
            continue
        kernel = KERNELS[fastest.kernel]
        shape = dict(fastest.shape)
        stored = {tuple(sorted(dict(e.config).items())) for e in entries if e.trial_id}
        seeds = [c for c in lean_siblings(kernel, target, shape, dict(fastest.config), room, key)
                 if tuple(sorted(c.items())) not in stored]
        if not seeds:
            continue
        workload = workload_of(kernel, target, shape)
        before = len(db.proposals(workload))
        request = replace(template, kernel=kernel, shape=shape, budget=before + len(seeds), initial=tuple(seeds))
        summary = tune(request, db)
        rounds.append(LeanRound(key, summary.new_trials))
    return tuple(rounds)


def with_lean(summary: ModelSummary, db: TuningDatabase, lean: tuple[LeanRound, ...],
              compilers: tuple[str, ...] = ()) -> ModelSummary:
    """The summary with each lean round's trials counted in its layer's: trials, best and
    value over the budget's trials and the lean ones (a lean sibling is often the faster),
    so that its table and total agree with the choice made after them."""
    extra = {(r.key[0], tuple(sorted(dict(r.key[1]).items()))): r.measured for r in lean}
    layers = []
    for layer in summary.layers:
        w = layer.workload
        added = extra.get((w.kernel, tuple(sorted(dict(w.shape).items()))), 0)
        if added:
            records = [r for r in db.proposals(w) if compiled_by(r.trial, compilers)][:layer.trials + added]
            scored = [(r.trial.value(summary.objective), n, r) for n, r in enumerate(records)
                      if feasible(r.trial, summary.bounds) and r.trial.value(summary.objective) is not None]
            best = min(scored, key=lambda s: s[:2], default=None)
            layer = replace(layer, trials=len(records), best=best[2] if best else None,
                            value=best[0] if best else None)
        layers.append(layer)
    return replace(summary, layers=tuple(layers))  # `spent` stays the budget's: the lean trials are beyond it


__all__ = ["LEAN_PER_WORKLOAD", "LeanRound", "lean_siblings", "measure_lean", "with_lean"]
