"""Checking imported trials against what this edgetune knows: the kernel (or NPU operator),
its template version, the target, the shape, and the tuning space of that workload.

A trial whose configuration the space does not hold would become a workload's best and
then break `export` for the whole target; a value of the wrong type would match by
accident (16.0 for 16, true for 1). So a configuration must name parameters of the space,
each with one of its values of the very type the space declares, and be legal there.
"""
from __future__ import annotations

import re
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from edgetune.codegen import KERNELS
from edgetune.codegen.kernels.user import UserKernel
from edgetune.npu import NPU_MODEL_VERSION, NPU_OPERATORS, npu_space
from edgetune.hal import INSTRUCTION_CLASSES, Target
from edgetune.targets import get_target, target_names
from edgetune.tuner import (Config, Goal, Outcome, Space, SpaceError, Trial, TrialSelection, TuningDatabase,
                            Workload)

from .errors import EdgetuneError
from edgetune.npu.session import NPU_OBJECTIVE

_FINGERPRINT = re.compile(r"[0-9a-f]{12}")
_SHAPE_ITEM = re.compile(r"([a-z_][a-z0-9_]*)=(\d{1,18})")
_KERNEL_PART = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.+-]*?)(?:@v(\d{1,9}))?")


class ImportCheck:
    """The `check` of TuningDatabase.import_jsonl: refuses (ValueError naming the field) a
    trial that is not a legal point of its workload's space, and returns it with its
    configuration in the space's own form. Targets are the shipped ones, plus the target
    files the user names (a name from the file never reaches a file path)."""

    def __init__(self, targets: Sequence[Target] = ()):
        self._targets = {target.name: target for target in targets}
        self._spaces: dict[Workload, tuple[Space, str]] = {}

    def __call__(self, workload: Workload, trial: Trial) -> Trial:
        if not _FINGERPRINT.fullmatch(workload.toolchain):
            # What a measurement's fingerprint (edgetune.identity) looks like; anything else would
            # store the trial under a workload no tuning run ever reads.
            raise ValueError(f"workload.toolchain: {workload.toolchain!r} is not a measurement fingerprint "
                             "(12 hex digits, as `db export` writes it)")
        key = replace(workload, toolchain="")
        if key not in self._spaces:
            self._spaces[key] = self._space(workload)
        space, unit = self._spaces[key]
        config = legal_config(space, trial.config)
        if trial.outcome is Outcome.OK and unit not in trial.values:
            raise ValueError(f"values.{unit}: missing (every successful trial of {workload.target} measures it)")
        if "+" not in workload.target:  # an NPU operator's values are Vela's, checked by type only
            check_value_names(self._target(workload.target), trial.values)
        return replace(trial, config=config)

    def check_goal(self, workload: Workload, goal: Goal) -> Goal:
        """The goal a line says its workload was tuned for: an objective and bounds among the
        values its target measures (ValueError naming the field otherwise)."""
        if "+" in workload.target:
            return goal
        known = self._target(workload.target).measured_values
        if goal.objective not in known:
            raise ValueError(f"goal.objective: {goal.objective!r} is not a value {workload.target} measures "
                             f"({', '.join(known)})")
        for bound in goal.bounds:
            if bound.name not in known:
                raise ValueError(f"goal.bounds: {bound.name!r} is not a value {workload.target} measures "
                                 f"({', '.join(known)})")
        return goal

    def _target(self, name: str) -> Target:
        if name in self._targets:
            return self._targets[name]
        if name in target_names():
            return get_target(name)
        raise ValueError(f"workload.target: {name!r} is not a shipped target (name its file with --target FILE)")

    def _space(self, workload: Workload) -> tuple[Space, str]:
        board, plus, npu_name = workload.target.partition("+")
        target = self._target(board)
        shape = workload.shape_dict()
        try:
            if plus:
                return self._npu_space(workload, target, npu_name, shape), NPU_OBJECTIVE
            kernel = KERNELS.get(workload.kernel)
            if kernel is None:
                raise ValueError(f"workload.kernel: {workload.kernel!r} is not a kernel of this edgetune "
                                 f"(known: {', '.join(sorted(KERNELS))}; a kernel of your own: pass its --kernel-file)")
            if workload.kernel_version != kernel.version and isinstance(kernel, UserKernel):
                raise ValueError(f"workload.kernel_version: v{workload.kernel_version} is another definition of "
                                 f"{workload.kernel} than the --kernel-file given (v{kernel.version}); every line "
                                 "must be of the definitions given (export one definition's trials with "
                                 f"`edgetune db export --workload {workload.kernel}@v{kernel.version}`)")
            if workload.kernel_version != kernel.version:
                raise ValueError(f"workload.kernel_version: {workload.kernel} is at template v{kernel.version} here, "
                                 f"not v{workload.kernel_version}")
            if tuple(kernel.parse_shape(shape).items()) != workload.shape:
                raise ValueError(f"workload.shape: expected the keys {', '.join(kernel.shape_keys)} in that order")
            return kernel.tuning_space(target, shape), target.measures
        except (ValueError, OverflowError) as exc:  # KernelError, SpaceError, NpuOperatorError name the culprit
            text = str(exc)
            raise ValueError(text if text.startswith("workload.") else f"workload: {text}") from None

    @staticmethod
    def _npu_space(workload: Workload, target: Target, npu_name: str, shape: dict) -> Space:
        operator = NPU_OPERATORS.get(workload.kernel)
        if operator is None:
            raise ValueError(f"workload.kernel: {workload.kernel!r} is not an NPU operator of this edgetune")
        if workload.kernel_version != NPU_MODEL_VERSION:
            raise ValueError(f"workload.kernel_version: NPU models are at v{NPU_MODEL_VERSION} here, "
                             f"not v{workload.kernel_version}")
        try:
            npu = target.npu(npu_name)
        except KeyError as exc:
            raise ValueError(f"workload.target: {exc.args[0]}") from None
        if tuple(operator.parse_shape(shape).items()) != workload.shape:
            raise ValueError(f"workload.shape: expected the keys {', '.join(operator.shape_keys)} in that order")
        return npu_space(target, npu, operator, shape)


def value_names(target: Target) -> frozenset[str]:
    """Every value name a successful trial on `target` may store: what it measures (and
    estimates), a board's own counters, an emulator's instruction mix and memory accesses
    (instruction counts), a native run's fastest repetition (times)."""
    measures = target.runner.measures
    extra = {"instructions": ("mix", "accesses"), "time_ns": ("time_ns_min",)}.get(measures.primary, ())
    return frozenset((*target.measured_values, *measures.placement_counted, *extra))


def check_value_names(target: Target, values: dict) -> None:
    """Refuse a value no measurement on `target` stores (ValueError naming it): a time on an
    emulator, a name of nobody's, an instruction class or memory region the target has not."""
    known = value_names(target)
    for name in values:
        if name not in known:
            raise ValueError(f"values.{name}: not a value a trial on {target.name} stores ({', '.join(sorted(known))})")
    parts = {"mix": set(INSTRUCTION_CLASSES), "accesses": {region.name for region in target.memory} | {"unmapped"}}
    for name, allowed in parts.items():
        for part in values.get(name, {}) if isinstance(values.get(name), dict) else ():
            if part not in allowed:
                raise ValueError(f"values.{name}.{part}: not {'an instruction class' if name == 'mix' else 'a memory region'}"
                                 f" of {target.name} ({', '.join(sorted(allowed))})")


def legal_config(space: Space, config: Config) -> Config:
    """`config` as a legal point of `space`, each value matched with its own type."""
    values = {}
    for name, value in config.items:
        try:
            param = space.param(name)
        except SpaceError as exc:
            raise ValueError(f"config.{name}: {exc}") from None
        if not any(type(candidate) is type(value) and candidate == value for candidate in param.values):
            raise ValueError(f"config.{name}: {value!r} is not a value of this parameter "
                             f"(values: {', '.join(map(repr, param.values))})")
        values[name] = value
    try:
        point = space.make(values)
    except SpaceError as exc:
        raise ValueError(f"config: {exc}") from None
    reason = space.violation(point)
    if reason:
        raise ValueError(f"config: not legal for this workload ({reason})")
    return point


class SelectionError(EdgetuneError, ValueError):
    """A --workload selection that cannot be parsed."""


def parse_workload_selection(text: str) -> TrialSelection:
    """`KERNEL[@vN][/TARGET[/SHAPE]]` (as `db remove --workload` takes it; SHAPE as
    m=8,n=16,k=16) -> the trials of those workloads. The kernel need not be known here: a
    forged workload must be removable too."""
    parts = text.split("/")
    if len(parts) > 3 or not parts[0]:
        raise SelectionError(f"--workload {text!r}: expected KERNEL[@vN][/TARGET[/SHAPE]], e.g. matmul_s8/host/m=4,n=4,k=4")
    match = _KERNEL_PART.fullmatch(parts[0])
    if not match:
        raise SelectionError(f"--workload {text!r}: {parts[0]!r} is not a kernel name")
    target = parts[1] if len(parts) > 1 and parts[1] else None
    shape = None
    if len(parts) == 3:
        items = [_SHAPE_ITEM.fullmatch(item.strip()) for item in parts[2].split(",") if item.strip()]
        if not items or not all(items):
            raise SelectionError(f"--workload {text!r}: shape {parts[2]!r} is not NAME=INTEGER,...")
        shape = tuple((m.group(1), int(m.group(2))) for m in items)
    version = None if match.group(2) is None else int(match.group(2))
    return TrialSelection(kernel=match.group(1), kernel_version=version, target=target, shape=shape)


def import_into(db_path: Path, parsed: list, source: str):
    """Store checked lines (TuningDatabase.read_jsonl's) in the database at `db_path` as one
    batch. A database this import creates is removed again when storing fails (a full disk,
    a quota): a refused import leaves no new file behind."""
    created = not db_path.exists()
    db = None
    try:
        db = TuningDatabase(db_path)
        return db.store_imported(parsed, source)
    except BaseException:
        if db is not None:
            db.close()
            db = None
        if created:
            _remove_if_empty(db_path)
        raise
    finally:
        if db is not None:
            db.close()


def _remove_if_empty(db_path: Path) -> None:
    """Remove a database file (and SQLite's files beside it) that holds no trial: one a
    failed import created. Trials another process stored there meanwhile keep it."""
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5)
        try:
            empty = conn.execute("SELECT count(*) FROM trials").fetchone()[0] == 0
        finally:
            conn.close()
    except sqlite3.Error:  # no table yet, or a file cut short by the full disk: nothing stored
        empty = True
    if empty:
        for suffix in ("", "-wal", "-shm", "-journal"):
            db_path.with_name(db_path.name + suffix).unlink(missing_ok=True)
