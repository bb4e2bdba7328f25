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
from edgetune.targets.toolchain import MeasureError, toolchain_fingerprint, toolchain_versions
from edgetune.tuner import TuningDatabase, Workload

from .session import workload_inputs

DEFAULT_TOLERANCE_PCT = {"qemu": 0.0, "native": 15.0}  # host timing drifts a few % (docs/measurements.md, "x86 host")


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


def export_and_measure(db: TuningDatabase, target: Target, out_dir: Path) -> ExportResult:
    """Export the best variants and record how each measures when built as exported."""
    versions = toolchain_versions(target)
    result = export_best(db, target, out_dir, objective=target.measures, toolchain=toolchain_fingerprint(target),
                         extra_manifest={"toolchain_versions": versions})
    manifest = read_manifest(result.folder)
    runner = runner_for(target)
    with tempfile.TemporaryDirectory(prefix="edgetune-export-") as tmp:
        for entry in manifest["kernels"]:
            kernel = KERNELS[entry["kernel"]]
            shape = kernel.parse_shape(entry["shape"])
            io = workload_inputs(kernel, _workload(entry, target))
            deployed = _deployed(kernel, target, shape, entry, io)
            workdir = Path(tempfile.mkdtemp(dir=tmp))
            try:
                build = runner.build_export(kernel, shape, deployed, result.folder, workdir)
                values, raw = runner.run(build, deployed)
            except MeasureError as exc:
                raise ExportError(f"{entry['function']}: the exported code does not run ({exc.outcome.value}): "
                                  f"{exc.message}") from None
            problem = _mismatch(kernel, shape, io, raw, kernel.reference(shape, io))
            if problem:
                raise ExportError(f"{entry['function']}: the exported code computes a wrong answer: {problem}")
            entry["exported_value"] = values[manifest["objective"]]
    write_manifest(result.folder, manifest)
    return result


def _sha256_file(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def verify_export(folder: Path, target: Target, tolerance_pct: float | None = None, seed: int | None = None,
                  db: TuningDatabase | None = None) -> VerifyReport:
    """Check every kernel of an export: correct on fresh and edge inputs, not slower than
    recorded. Raises ManifestError (bad input) for a damaged or foreign export."""
    from edgetune.codegen.export import ManifestError

    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest["target"] != target.name:
        raise ManifestError(f"{folder}: exported for target {manifest['target']!r}, not {target.name!r}")
    for name in manifest["files"]:
        if Path(name).name != name:
            raise ManifestError(f"{folder}/manifest.json: file entry {name!r} is not a plain file name")
        if not (folder / name).is_file():
            raise ManifestError(f"{folder / name}: listed in the manifest but missing")
    tolerance = DEFAULT_TOLERANCE_PCT[target.runner.kind] if tolerance_pct is None else tolerance_pct
    seed = secrets.randbits(32) if seed is None else seed
    objective = manifest["objective"]
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
                measured = values[objective]
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
                    problems.append(f"slower: {objective}={measured:g} against {recorded:g} recorded at export "
                                    f"(+{100 * (measured / recorded - 1):.2f}%, tolerance {tolerance:g}%)")
                elif measured < recorded:
                    notes.append(f"faster than recorded: {measured:g} < {recorded:g}")
            elif recorded is None:
                notes.append("no value recorded at export; speed not checked")
            if db is not None:
                best = db.best(_workload(entry, target), objective)
                if best is not None and recorded is not None and best.trial.config.as_dict() != entry["config"]:
                    notes.append(f"the database holds a different best configuration ({best.trial.config.key()}); "
                                 "re-export to deploy it")
            verdicts.append(KernelVerdict(function=entry["function"], kernel=entry["kernel"], shape=shape,
                                          objective=objective, recorded=recorded, measured=measured,
                                          problems=tuple(problems), notes=tuple(notes)))
    return VerifyReport(folder=folder, target=target.name, tolerance_pct=tolerance, seed=seed, verdicts=tuple(verdicts))
