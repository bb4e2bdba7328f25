"""Which variant of each tuned workload an export deploys: chosen from the database by the
goal its workload was tuned for (or the export's override), among trials measured with the
current toolchain; every workload that cannot be exported comes with the reason."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from edgetune.codegen import KERNELS, KernelError
from edgetune.codegen.export import ExportEntry
from edgetune.codegen.kernels.user import UserKernel
from edgetune.hal import Target
from edgetune.tuner import Bound, TuningDatabase, Workload, resolve_goal


@dataclass(frozen=True)
class Selection:
    entries: tuple[ExportEntry, ...]
    skipped: tuple[str, ...]  # workloads that could not be exported, each with the reason


def select_best(db: TuningDatabase, target: Target, objective: str = "", bounds: tuple[Bound, ...] = (),
                toolchain: str | None = None, only: Iterable[Workload] | None = None) -> Selection:
    """The best variant of every workload of `target` (only those measured with `toolchain`,
    when given: results from another compiler version or board description are stale; only
    the workloads in `only`, when given, e.g. the CPU part of a placement plan). Each
    workload's best is chosen by the goal it was tuned for (stored with it), unless
    `objective`/`bounds` override it (tuner.resolve_goal)."""
    entries, skipped = [], []
    wanted = None if only is None else set(only)
    for workload in db.workloads(target.name):
        if wanted is not None and workload not in wanted:
            continue
        entry = _choose(db, target, workload, objective, bounds, toolchain)
        if isinstance(entry, str):
            skipped.append((workload, entry))
        else:
            entries.append(entry)
    exported = {(e.kernel, e.shape) for e in entries}
    return Selection(entries=tuple(entries), skipped=tuple(
        f"{w.key()}: {(w.kernel, w.shape) in exported and _superseded(w) or reason}" for w, reason in skipped))


def _superseded(workload: Workload) -> str:
    """Why a workload of the same kernel and shape as an exported one was skipped, when it is
    an earlier definition of a user's kernel, re-tuned since ("" otherwise)."""
    kernel = KERNELS[workload.kernel]
    if isinstance(kernel, UserKernel) and kernel.version != workload.kernel_version:
        return (f"an earlier definition of {kernel.name} (v{workload.kernel_version}), superseded by the "
                f"current one's (v{kernel.version}), exported")
    return ""


def _choose(db: TuningDatabase, target: Target, workload: Workload, objective: str, bounds: tuple[Bound, ...],
            toolchain: str | None) -> ExportEntry | str:
    """The chosen variant of one workload, or why it cannot be exported."""
    if toolchain is not None and workload.toolchain != toolchain:
        return ("measured with another toolchain or board description; re-tune it "
                "(edgetune tune --from-export DIR re-tunes an export's workloads)")
    kernel = KERNELS.get(workload.kernel)
    if kernel is None:
        return "kernel unknown to this edgetune (a kernel of your own: pass its --kernel-file)"
    if kernel.version != workload.kernel_version:
        if isinstance(kernel, UserKernel):  # the user edited their kernel: edgetune's own version is not at stake
            return (f"tuned with an earlier definition of {kernel.name} (v{workload.kernel_version}, now "
                    f"v{kernel.version}; its trials stay stored): tune this shape again to export it")
        return f"tuned with template v{workload.kernel_version}, this edgetune has v{kernel.version}; re-tune it"
    stored_goal = db.goal(workload)
    goal = resolve_goal(stored_goal, objective, bounds, target.measures)
    record = db.best(workload, goal.objective, goal.allows)
    if record is None:
        within = f" within {', '.join(b.text() for b in goal.bounds)}" if goal.bounds else ""
        return f"no successful trial{within}"
    try:  # a stored shape is checked like one from the command line before it reaches C
        shape = kernel.parse_shape(workload.shape_dict())
    except KernelError as exc:
        return str(exc)
    config = kernel.tuning_space(target, shape).make(record.trial.config.as_dict())
    return ExportEntry(
        kernel=kernel.name, kernel_version=kernel.version, shape=workload.shape, config=config.items,
        objective=goal.objective, value=float(record.trial.values[goal.objective]),
        values=tuple(sorted(record.trial.values.items())), trial_id=record.id, created=record.created,
        trials=len(db.trials(workload)), compiler_version=str(record.trial.info.get("compiler_version", "unknown")),
        toolchain=toolchain or "", bounds=goal.bounds,
        chosen_by="override" if objective or bounds else "tuned" if stored_goal is not None else "default")
