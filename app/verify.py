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
from edgetune.codegen.export import ExportError, ExportResult, export_best, read_manifest, write_manifest
from edgetune.hal import Target
from edgetune.targets import iobuf
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import MeasureError, toolchain_versions
from edgetune.tuner import Bound, Goal, TuningDatabase, Workload, check_names, resolve_goal

from .identity import measurement_fingerprint, recompute_estimates
from .session import workload_inputs

# Allowed slow-down by default, per runner kind. Emulators count deterministically (QEMU's
# instruction counts; an emulated serial board or Renode counts virtual time), so 0% is
# meaningful there; host timing drifts a few per cent run to run (docs/measurements.md, "x86 host"). A real board
# over a serial link counts real cycles (DWT, the minimum of several runs), which caches and
# bus contention move slightly: 2% is a starting point, not a measurement (no real board
# was at hand); pass --tolerance for your board.
DEFAULT_TOLERANCE_PCT = {"qemu": 0.0, "native": 15.0, "renode": 0.0, "serial": 2.0}


def default_tolerance(target: Target) -> float:
    if target.runner.kind == "serial" and target.serial is not None and target.serial.flash_keeps_running:
        return 0.0  # the flash command is the board: an emulator, counting deterministically
    return DEFAULT_TOLERANCE_PCT[target.runner.kind]


def manifest_target(folder: Path) -> Target:
    """The target an export names: verify's default. A board file that is not shipped
    cannot be found by name: the user must pass it."""
    from edgetune.codegen.export import ManifestError
    from edgetune.hal import TargetError
    from edgetune.targets import get_target

    name = read_manifest(folder)["target"]
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


def _workload(entry: dict, target: Target) -> Workload:
    kernel = KERNELS[entry["kernel"]]
    shape = kernel.parse_shape(entry["shape"])  # the kernel's key order, not the manifest's
    return Workload(kernel.name, int(entry["kernel_version"]), target.name, tuple(shape.items()),
                    entry.get("toolchain", ""))


def _deployed(kernel, target: Target, shape: dict, entry: dict, io: KernelIO) -> KernelIO:
    config = kernel.tuning_space(target, shape).make(entry["config"])
    return kernel.deployed_io(io, config)


def _mismatch(kernel, shape: dict, io: KernelIO, raw: bytes, expected: list[np.ndarray]) -> str | None:
    try:
        outputs = iobuf.unpack_outputs(io, raw)
    except ValueError as exc:
        return str(exc)
    for buf, got, want in zip(io.outputs(), outputs, expected):
        problem = kernel.compare(shape, io, buf.name, got, want)  # bit-exact, or the kernel's float tolerance
        if problem:
            return problem
    return None


def manifest_goal(manifest: dict, entry: dict) -> tuple[str, tuple[Bound, ...]]:
    """The objective and bounds an exported kernel was chosen by (manifests before goals
    were recorded: the export's objective, unbounded). ManifestError when malformed."""
    from edgetune.codegen.export import VALUE_NAME_RE, ManifestError

    objective, bounds = entry.get("objective", manifest["objective"]), entry.get("bounds", [])
    where = f"manifest.json: kernel {entry.get('function')!r}"
    if not isinstance(objective, str) or not VALUE_NAME_RE.fullmatch(objective) or objective == "per_kernel":
        raise ManifestError(f"{where}: objective {objective!r} is not a measured value's name")
    if not isinstance(bounds, list) or not all(
            isinstance(b, list) and len(b) == 2 and isinstance(b[0], str) and VALUE_NAME_RE.fullmatch(b[0])
            and isinstance(b[1], (int, float)) and not isinstance(b[1], bool) for b in bounds):
        raise ManifestError(f"{where}: bounds {bounds!r} are not [[NAME, LIMIT], ...]")
    return objective, tuple(Bound(name, float(limit)) for name, limit in bounds)


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
                       toolchain=measurement_fingerprint(target), extra_manifest={"toolchain_versions": versions},
                       measure=lambda folder: _measure_export(folder, target))


def _exact(target: Target) -> bool:
    """Counts on this target are exact: the same code counts the same, run after run."""
    return target.runner.kind == "qemu"


def _measure_export(folder: Path, target: Target) -> None:
    """Build and run every kernel of a staged export as firmware would; store each count in
    the manifest as `exported_value` (the value it was chosen by) and `exported_values`.
    On an emulated target the variant is also run on its own (as tuning ran it): that count
    must equal the stored trial's, or the stored value was not measured from this code (a
    forged or corrupted database)."""
    manifest = read_manifest(folder)
    runner = runner_for(target)
    with tempfile.TemporaryDirectory(prefix="edgetune-export-") as tmp:
        for entry in manifest["kernels"]:
            kernel = KERNELS[entry["kernel"]]
            shape = kernel.parse_shape(entry["shape"])
            io = workload_inputs(kernel, _workload(entry, target))
            deployed = _deployed(kernel, target, shape, entry, io)
            try:
                build = runner.build_export(kernel, shape, deployed, folder, Path(tempfile.mkdtemp(dir=tmp)))
                values, raw = runner.run(build, deployed)
                if _exact(target):
                    direct = runner.build_export(kernel, shape, deployed, folder, Path(tempfile.mkdtemp(dir=tmp)),
                                                 direct=True)
                    _check_stored_count(entry, shape, target, runner.run(direct, deployed)[0])
            except MeasureError as exc:
                raise ExportError(f"{entry['function']}: the exported code does not run ({exc.outcome.value}): "
                                  f"{exc.message}") from None
            problem = _mismatch(kernel, shape, io, raw, kernel.reference(shape, io))
            if problem:
                raise ExportError(f"{entry['function']}: the exported code computes a wrong answer: {problem}")
            entry["exported_value"] = values[entry["objective"]]
            entry["exported_values"] = _numbers(values)  # verify --objective may check another
    write_manifest(folder, manifest)


def _check_stored_count(entry: dict, shape: dict, target: Target, measured: dict) -> None:
    unit = target.measures
    stored = entry["values"].get(unit)
    if stored != measured[unit]:
        raise ExportError(f"workload {entry['kernel']} {_shape_text(shape)} on {target.name}: the database "
                          f"says trial {entry['trial_id']} measured {unit}={stored!r}, the same code measures "
                          f"{measured[unit]} at export (counts on {target.name} are exact): the stored trial was "
                          "not measured from this code; remove it and re-tune")


def _shape_text(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def _sha256_file(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _check_folder_contents(folder: Path, manifest: dict) -> None:
    """The folder holds exactly the files the manifest lists (and the manifest): a missing
    file, or one the export did not write (a stale et_*.c beside the new ones), is named."""
    from edgetune.codegen.export import FILE_RE, MANIFEST, ManifestError

    for name in manifest["files"]:
        if not FILE_RE.fullmatch(name):
            raise ManifestError(f"{folder}/manifest.json: file entry {name!r} is not a file of an export")
        if not (folder / name).is_file():
            raise ManifestError(f"{folder / name}: listed in the manifest but missing")
    listed = {*manifest["files"], MANIFEST}
    folders = {name.rsplit("/", 1)[0] for name in listed if "/" in name}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if name not in listed and not (path.is_dir() and name in folders):
            raise ManifestError(f"{path}: not part of the export (not in its manifest); the folder must hold "
                                "exactly what the export wrote: remove it, or export again")


def verify_export(folder: Path, target: Target, tolerance_pct: float | None = None, seed: int | None = None,
                  db: TuningDatabase | None = None, objective: str = "",
                  bounds: tuple[Bound, ...] = ()) -> VerifyReport:
    """Check every kernel of an export: correct on fresh and edge inputs, not slower than
    recorded in the value it was chosen by (or `objective`), within the bounds it was
    chosen within (or `bounds`). Raises ManifestError (bad input) for a damaged or foreign export."""
    from edgetune.codegen.export import ManifestError

    folder = Path(folder)
    manifest = read_manifest(folder)
    if db is not None:
        recompute_estimates(db, target)
    if manifest["target"] != target.name:
        raise ManifestError(f"{folder}: exported for target {manifest['target']!r}, but --target names "
                            f"{target.name!r} (omit --target to use the export's own)")
    _check_folder_contents(folder, manifest)
    for entry in manifest["kernels"]:
        if entry.get("exported_value") is None:
            raise ManifestError(f"{folder}/manifest.json: {entry['function']} has no value measured at export "
                                "(the export did not finish); export again")
    tolerance = default_tolerance(target) if tolerance_pct is None else tolerance_pct
    seed = secrets.randbits(32) if seed is None else seed
    if objective or bounds:
        check_names(objective or target.measures, bounds, target.measured_values, target.name)
    runner = runner_for(target)
    changed = {name for name, digest in manifest["files"].items() if _sha256_file(folder / name) != digest}
    # Files every kernel is built with: a change there concerns all of them.
    shared_changed = changed - {entry["source"] for entry in manifest["kernels"]}

    verdicts = []
    with tempfile.TemporaryDirectory(prefix="edgetune-verify-") as tmp:
        for index, entry in enumerate(manifest["kernels"]):
            problems, notes = [], []
            kernel = KERNELS.get(entry["kernel"])
            if kernel is None:
                raise ManifestError(f"{folder}: kernel {entry['kernel']!r} is unknown to this edgetune")
            shape = kernel.parse_shape(entry["shape"])
            goal = resolve_goal(Goal(*manifest_goal(manifest, entry)), objective, bounds, target.measures)
            exported = entry.get("exported_values")
            recorded = exported.get(goal.objective) if isinstance(exported, dict) else None
            if recorded is None and goal.objective == entry.get("objective", manifest["objective"]):
                recorded = entry.get("exported_value")
            if entry["source"] in changed:
                problems.append(f"{entry['source']} differs from the exported file (checksum mismatch)")
            for name in sorted(shared_changed):
                problems.append(f"{name} differs from the exported file (checksum mismatch)")
            measured = None
            workdir = Path(tempfile.mkdtemp(dir=tmp))
            canonical = workload_inputs(kernel, _workload(entry, target))
            try:
                # A variant with weights packed at export time is called with packed weights,
                # as firmware calls it; outputs are checked against the plain inputs' reference.
                deployed = _deployed(kernel, target, shape, entry, canonical)
                build = runner.build_export(kernel, shape, deployed, folder, workdir)
                values, raw = runner.run(build, deployed)
                measured = values[goal.objective]
                problems += [f"breaks its constraint {b.text()}: {b.name}={values.get(b.name)}"
                             for b in goal.bounds if not isinstance(values.get(b.name), (int, float))
                             or values[b.name] > b.limit]
                checks = [("the tuning inputs", canonical, raw)]
                rng = np.random.default_rng([seed, index])
                for label, edge in (("fresh random inputs", "random"), ("saturating edge inputs", "extreme")):
                    io = kernel.make_io(shape, rng, edge=edge)
                    checks.append((label, io, runner.run(build, _deployed(kernel, target, shape, entry, io))[1]))
                for label, io, out in checks:
                    problem = _mismatch(kernel, shape, io, out, kernel.reference(shape, io))
                    if problem:
                        problems.append(f"wrong answer on {label} (seed {seed}): {problem}")
            except MeasureError as exc:
                detail = " | ".join(exc.message.splitlines()[:3])
                problems.append(f"does not {'build' if exc.outcome.value in ('compile', 'too_large') else 'run'}: "
                                f"{exc.outcome.value}: {detail}")
            if measured is not None and recorded is not None:
                limit = recorded * (1 + tolerance / 100)
                if measured > limit:
                    problems.append(f"slower: {goal.objective}={measured:g} against {recorded:g} recorded at export "
                                    f"(+{100 * (measured / recorded - 1):.2f}%, tolerance {tolerance:g}%)")
                elif measured < recorded:
                    notes.append(f"faster than recorded: {measured:g} < {recorded:g}")
            if db is not None:
                best = db.best(_workload(entry, target), goal.objective, goal.allows)
                if best is not None and recorded is not None and best.trial.config.as_dict() != entry["config"]:
                    notes.append(f"the database holds a different best configuration ({best.trial.config.key()}); "
                                 "re-export to deploy it")
            verdicts.append(KernelVerdict(function=entry["function"], kernel=entry["kernel"], shape=shape,
                                          objective=goal.objective, recorded=recorded, measured=measured,
                                          problems=tuple(problems), notes=tuple(notes)))
    return VerifyReport(folder=folder, target=target.name, tolerance_pct=tolerance, seed=seed, verdicts=tuple(verdicts))
