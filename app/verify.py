"""Exports measured as users build them, and `edgetune verify` for the user's CI.

At export time every exported kernel is built from the exported sources (through the shape
dispatcher, with the flags in the manifest), run on its workload's canonical inputs, checked
against numpy, and its count stored in the manifest as `exported_value`. `verify` repeats
exactly that measurement, so on an emulated target a 0% tolerance is meaningful, and also
runs each kernel on fresh random inputs and on saturating edge inputs.
"""
from __future__ import annotations

import hashlib
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgetune.codegen import KERNELS, KernelIO
from edgetune.codegen.export import ExportError
from edgetune.codegen.manifest import MANIFEST, KernelEntry, Manifest, ManifestError, read_manifest, write_manifest
from edgetune.hal import Target
from edgetune.targets.runners import runner_class, runner_for, toolchain_versions
from edgetune.targets.measure import (Expected, ExportProgram, MeasureInput, MeasureResult, Pipeline, Run,
                                       failure_text, reference_check)
from edgetune.tuner import Bound, Goal, TuningDatabase, Workload, check_names, resolve_goal

from .export import ExportResult, export_best
from .identity import measurement_fingerprint, recompute_estimates
from .session import workload_inputs

def default_tolerance(target: Target) -> float:
    """Allowed slow-down by default, as the target's runner declares it: 0% where an emulator
    counts deterministically, a few per cent for host timing and real boards."""
    return runner_class(target).default_tolerance_pct(target)


def manifest_target(folder: Path) -> Target:
    """The target an export names: verify's default. A board file that is not shipped
    cannot be found by name: the user must pass it."""
    from edgetune.hal import TargetError
    from edgetune.targets import get_target

    name = read_manifest(folder).target
    try:
        return get_target(name)
    except TargetError:
        raise ManifestError(f"{folder}: exported for target {name!r}, which is not a shipped target; "
                            f"pass its board file with --target FILE") from None


@dataclass(frozen=True)
class KernelVerdict:
    function: str
    kernel: str
    shape: dict
    objective: str
    recorded: float | None
    measured: float | None
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class VerifyReport:
    folder: Path
    target: str
    tolerance_pct: float
    seed: int
    verdicts: tuple[KernelVerdict, ...]

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)


def _workload(entry: KernelEntry, target: Target) -> Workload:
    kernel = KERNELS[entry.kernel]
    shape = kernel.parse_shape(entry.shape_dict)  # the kernel's key order, not the manifest's
    return Workload(kernel.name, entry.kernel_version, target.name, tuple(shape.items()), entry.toolchain)


def _deployed(kernel, target: Target, shape: dict, entry: KernelEntry, io: KernelIO) -> KernelIO:
    config = kernel.tuning_space(target, shape).make(entry.config_dict)
    return kernel.deployed_io(io, config)


def _numbers(values: dict) -> dict:
    """The measured numbers of a run (not its instruction mix or accesses)."""
    return {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def export_and_measure(db: TuningDatabase, target: Target, out_dir: Path, objective: str = "",
                       bounds: tuple[Bound, ...] = ()) -> ExportResult:
    """Export the best variants (each by the goal its workload was tuned for, unless
    `objective`/`bounds` override it) and record how each measures when built as exported.
    The folder appears (or replaces the old one) only once every kernel is measured."""
    versions = toolchain_versions(target)
    recompute_estimates(db, target)
    if objective or bounds:
        check_names(objective or target.measures, bounds, target.measured_values, target.name)
    return export_best(db, target, out_dir, objective=objective, bounds=bounds,
                       toolchain=measurement_fingerprint(target), toolchain_versions=versions,
                       measure=lambda folder: _measure_export(folder, target))


def _exact(target: Target) -> bool:
    """Counts on this target are exact: the same code counts the same, run after run."""
    return runner_class(target).counts_exactly


def _measure_export(folder: Path, target: Target) -> None:
    """Build and run every kernel of a staged export as firmware would; store each count in
    the manifest as `exported_value` (the value it was chosen by) and `exported_values`.
    On an emulated target the variant is also run on its own (as tuning ran it): that count
    must equal the stored trial's, or the stored value was not measured from this code (a
    forged or corrupted database)."""
    manifest = read_manifest(folder)
    pipeline = Pipeline(runner_for(target))
    measured = {}
    with tempfile.TemporaryDirectory(prefix="edgetune-export-") as tmp:
        for entry in manifest.kernels:
            kernel = KERNELS[entry.kernel]
            shape = kernel.parse_shape(entry.shape_dict)
            io = workload_inputs(kernel, _workload(entry, target))
            deployed = _deployed(kernel, target, shape, entry, io)
            result = pipeline.measure(_export_input(folder, kernel, shape, deployed, reference_check(kernel, shape, io)),
                                      Path(tempfile.mkdtemp(dir=tmp)))
            _raise_unless_run(entry, result)
            if _exact(target):
                direct = pipeline.measure(_export_input(folder, kernel, shape, deployed, None, direct=True),
                                          Path(tempfile.mkdtemp(dir=tmp)))
                _raise_unless_run(entry, direct)
                _check_stored_count(entry, shape, target, direct.runs[0].values)
            if result.error:
                raise ExportError(f"{entry.function}: the exported code computes a wrong answer: {result.error}")
            values = result.runs[0].values
            measured[entry.function] = (values[entry.objective], _numbers(values))  # verify --objective may check another
    write_manifest(folder, manifest.with_exported_values(measured))


def _export_input(folder: Path, kernel, shape: dict, deployed: KernelIO, check: Expected | None,
                  direct: bool = False) -> MeasureInput:
    return MeasureInput(ExportProgram(folder, kernel, shape, direct), (Run(deployed, check),))


def _raise_unless_run(entry: KernelEntry, result: MeasureResult) -> None:
    if result.fault is not None:
        raise ExportError(f"{entry.function}: the exported code does not run ({result.fault.value}): {result.message}")


def _check_stored_count(entry: KernelEntry, shape: dict, target: Target, measured: dict) -> None:
    unit = target.measures
    stored = dict(entry.values).get(unit)
    if stored != measured[unit]:
        raise ExportError(f"workload {entry.kernel} {_shape_text(shape)} on {target.name}: the database "
                          f"says trial {entry.trial_id} measured {unit}={stored!r}, the same code measures "
                          f"{measured[unit]} at export (counts on {target.name} are exact): the stored trial was "
                          "not measured from this code; remove it and re-tune")


def _shape_text(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def _sha256_file(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _check_folder_contents(folder: Path, manifest: Manifest) -> None:
    """The folder holds exactly the files the manifest lists (and the manifest): a missing
    file, or one the export did not write (a stale et_*.c beside the new ones), is named.
    (Manifest.from_json has checked that every listed name is a file of an export.)"""
    for name in manifest.file_digests:
        if not (folder / name).is_file():
            raise ManifestError(f"{folder / name}: listed in the manifest but missing")
    listed = {*manifest.file_digests, MANIFEST}
    folders = {name.rsplit("/", 1)[0] for name in listed if "/" in name}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if name not in listed and not (path.is_dir() and name in folders):
            raise ManifestError(f"{path}: not part of the export (not in its manifest); the folder must hold "
                                "exactly what the export wrote: remove it, or export again")


def _checked_manifest(folder: Path, target: Target) -> Manifest:
    """The export's manifest, for this target, with the folder holding exactly its files and
    every kernel measured at export: ManifestError (bad input) otherwise."""
    manifest = read_manifest(folder)
    if manifest.model is not None:
        raise ManifestError(f"{folder}: a model export (edgetune model export); check it with edgetune model verify")
    if manifest.target != target.name:
        raise ManifestError(f"{folder}: exported for target {manifest.target!r}, but --target names "
                            f"{target.name!r} (omit --target to use the export's own)")
    _check_folder_contents(folder, manifest)
    for entry in manifest.kernels:
        if entry.exported_value is None:
            raise ManifestError(f"{folder}/manifest.json: {entry.function} has no value measured at export "
                                "(the export did not finish); export again")
        if entry.kernel not in KERNELS:
            hint = " (a kernel of your own: pass its --kernel-file, or install its package)" if entry.definition else ""
            raise ManifestError(f"{folder}: kernel {entry.kernel!r} is unknown to this edgetune{hint}")
        now = KERNELS[entry.kernel].definition
        if entry.definition != now:
            raise ManifestError(f"{folder}: kernel {entry.kernel!r} changed since export (definition "
                                f"{entry.definition[:12] or 'shipped'} at export, {now[:12] or 'shipped'} now): "
                                "verify with the definition it was exported from, or tune and export again")
    return manifest


@dataclass(frozen=True)
class _Check:
    """What verify_export checks every kernel against."""
    folder: Path
    target: Target
    pipeline: Pipeline
    tolerance: float
    seed: int
    objective: str
    bounds: tuple[Bound, ...]
    changed: frozenset[str]  # files whose checksum no longer matches
    shared_changed: tuple[str, ...]  # of those, files every kernel is built with
    db: TuningDatabase | None


def verify_export(folder: Path, target: Target, tolerance_pct: float | None = None, seed: int | None = None,
                  db: TuningDatabase | None = None, objective: str = "",
                  bounds: tuple[Bound, ...] = ()) -> VerifyReport:
    """Check every kernel of an export: correct on fresh and edge inputs, not slower than
    recorded in the value it was chosen by (or `objective`), within the bounds it was
    chosen within (or `bounds`). Raises ManifestError (bad input) for a damaged or foreign export."""
    folder = Path(folder)
    manifest = _checked_manifest(folder, target)
    if db is not None:
        recompute_estimates(db, target)
    tolerance = default_tolerance(target) if tolerance_pct is None else tolerance_pct
    seed = secrets.randbits(32) if seed is None else seed
    if objective or bounds:
        check_names(objective or target.measures, bounds, target.measured_values, target.name)
    changed = frozenset(name for name, digest in manifest.files if _sha256_file(folder / name) != digest)
    check = _Check(folder=folder, target=target, pipeline=Pipeline(runner_for(target)), tolerance=tolerance, seed=seed,
                   objective=objective, bounds=bounds, changed=changed, db=db,
                   shared_changed=tuple(sorted(changed - {entry.source for entry in manifest.kernels})))
    with tempfile.TemporaryDirectory(prefix="edgetune-verify-") as tmp:
        verdicts = tuple(_verify_kernel(check, index, entry, Path(tempfile.mkdtemp(dir=tmp)))
                         for index, entry in enumerate(manifest.kernels))
    return VerifyReport(folder=folder, target=target.name, tolerance_pct=tolerance, seed=seed, verdicts=verdicts)


def _verify_kernel(check: _Check, index: int, entry: KernelEntry, workdir: Path) -> KernelVerdict:
    target = check.target
    kernel = KERNELS[entry.kernel]
    shape = kernel.parse_shape(entry.shape_dict)
    goal = resolve_goal(Goal(entry.objective, entry.bounds), check.objective, check.bounds, target.measures)
    exported = dict(entry.exported_values) if entry.exported_values is not None else None
    recorded = exported.get(goal.objective) if exported is not None else None
    if recorded is None and goal.objective == entry.objective:
        recorded = entry.exported_value
    problems, notes = [], []
    if entry.source in check.changed:
        problems.append(f"{entry.source} differs from the exported file (checksum mismatch)")
    for name in check.shared_changed:
        problems.append(f"{name} differs from the exported file (checksum mismatch)")
    measured = _run_checks(check, index, entry, kernel, shape, goal, workdir, problems)
    if measured is not None and recorded is not None:
        limit = recorded * (1 + check.tolerance / 100)
        if measured > limit:
            problems.append(f"slower: {goal.objective}={measured:g} against {recorded:g} recorded at export "
                            f"(+{100 * (measured / recorded - 1):.2f}%, tolerance {check.tolerance:g}%)")
        elif measured < recorded:
            notes.append(f"faster than recorded: {measured:g} < {recorded:g}")
    if check.db is not None:
        problems += _against_database(check, entry, kernel, shape, goal, workdir / "direct")
        best = check.db.best(_workload(entry, target), goal.objective, goal.allows)
        if best is not None and recorded is not None and best.trial.config.as_dict() != entry.config_dict:
            notes.append(f"the database holds a different best configuration ({best.trial.config.key()}); "
                         "re-export to deploy it")
    return KernelVerdict(function=entry.function, kernel=entry.kernel, shape=shape, objective=goal.objective,
                         recorded=recorded, measured=measured, problems=tuple(problems), notes=tuple(notes))


def _against_database(check: _Check, entry: KernelEntry, kernel, shape: dict, goal: Goal,
                      workdir: Path) -> list[str]:
    """The exported code measured as tuning measures a variant (called directly, no
    dispatcher) against the best trial the database holds for its workload. The manifest's
    own figures (exported_value, values) and its checksum can be rewritten by anyone who can
    edit the folder; the database is the user's own record, so a slowed kernel whose manifest
    was rewritten to match still fails here."""
    workload = _workload(entry, check.target)
    if not check.db.trials(workload):
        return [f"the database holds no trials of {entry.kernel} {_shape_text(shape)} on {check.target.name} "
                f"(toolchain {entry.toolchain or '-'}): nothing to compare the exported code with"]
    best = check.db.best(workload, goal.objective, goal.allows)
    if best is None:
        return [f"the database holds no successful trial of {entry.kernel} {_shape_text(shape)} within its goal "
                f"({goal.objective}{''.join(', ' + b.text() for b in goal.bounds)})"]
    deployed = _deployed(kernel, check.target, shape, entry, workload_inputs(kernel, workload))
    workdir.mkdir(parents=True, exist_ok=True)
    direct = ExportProgram(check.folder, kernel, shape, True)
    result = check.pipeline.measure(MeasureInput(direct, (Run(deployed, None),)), workdir)
    if not result.runs or result.fault is not None:
        return [f"as tuning runs it, the exported code fails: {failure_text(result)}"]
    measured = result.runs[0].values[goal.objective]
    stored = float(best.trial.values[goal.objective])
    if measured > stored * (1 + check.tolerance / 100):
        return [f"slower than the database's best: {goal.objective}={measured:g} as tuning measures it, against "
                f"{stored:g} of trial {best.id} (+{100 * (measured / stored - 1):.2f}%, tolerance "
                f"{check.tolerance:g}%)"]
    return []


def _run_checks(check: _Check, index: int, entry: KernelEntry, kernel, shape: dict, goal: Goal, workdir: Path,
                problems: list[str]) -> float | None:
    """Build the kernel as exported, run it on its tuning inputs and on fresh and edge
    inputs; add what is wrong to `problems`; the measured value of the goal's objective."""
    target = check.target
    canonical = workload_inputs(kernel, _workload(entry, target))
    rng = np.random.default_rng([check.seed, index])
    cases = [("the tuning inputs", canonical), *((label, kernel.make_io(shape, rng, edge=edge)) for label, edge in
                                                 (("fresh random inputs", "random"), ("saturating edge inputs", "extreme")))]
    # A variant with weights packed at export time is called with packed weights, as
    # firmware calls it; outputs are checked against the plain inputs' reference.
    runs = tuple(Run(_deployed(kernel, target, shape, entry, io), reference_check(kernel, shape, io)) for _, io in cases)
    result = check.pipeline.measure(MeasureInput(ExportProgram(check.folder, kernel, shape), runs), workdir)
    if not result.runs:
        problems.append(failure_text(result))
        return None
    values = result.runs[0].values
    measured = values[goal.objective]
    problems += [f"breaks its constraint {b.text()}: {b.name}={values.get(b.name)}"
                 for b in goal.bounds if not isinstance(values.get(b.name), (int, float))
                 or values[b.name] > b.limit]
    if result.fault is not None:
        problems.append(failure_text(result))
        return measured
    problems += [f"wrong answer on {label} (seed {check.seed}): {run.problem}"
                 for (label, _), run in zip(cases, result.runs) if run.problem]
    return measured
