"""Bake the best stored variant of each tuned workload into C that builds without edgetune.

An export folder holds:
  edgetune_kernels.h   prototypes of every variant and of one shape dispatcher per kernel
  edgetune_kernels.c   the dispatchers
  <function>.c         one self-contained source per tuned workload, with its provenance
  edgetune_kernels.mk  the compiler and flags each file was measured with
  edgetune_sections.ld on targets that place buffers: the linker sections the header's
                       <FN>_WEIGHTS_SECTION / _ACTIVATIONS_SECTION macros name, in the
                       memory regions each variant was measured with its buffers in
  manifest.json        workloads, configurations, measured values, file checksums
"""
from __future__ import annotations

import importlib.metadata

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from edgetune.hal import Target
from edgetune.hal.loader import NAME_RE, PROGRAM_RE, flag_problem
from edgetune.tuner import TuningDatabase, Workload

from .kernels import KERNELS
from .kernels.base import COMMON_CFLAGS, KernelError, comment_safe
from .placement import check_regions, placement_of
from .render import render

HEADER = "edgetune_kernels.h"
DISPATCH = "edgetune_kernels.c"
MAKEFILE = "edgetune_kernels.mk"
SECTIONS_LD = "edgetune_sections.ld"
MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


class ExportError(ValueError):
    """Nothing to export, or the output folder cannot be written."""


class ManifestError(ValueError):
    """An export folder whose manifest is missing, unreadable, edited or from a newer edgetune."""


def _canonical(data: dict) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")


def write_manifest(folder: Path, data: dict) -> Path:
    """Write manifest.json with a checksum over its own content (hand edits are detected)."""
    body = {k: v for k, v in data.items() if k != "manifest_sha256"}
    body["manifest_sha256"] = hashlib.sha256(_canonical(body)).hexdigest()
    path = Path(folder) / MANIFEST
    _write(path, json.dumps(body, indent=2, sort_keys=True) + "\n")
    return path


def read_manifest(folder: Path) -> dict:
    """The manifest of an export folder, checked: its checksum, version and required keys."""
    path = Path(folder) / MANIFEST
    if not Path(folder).is_dir():
        raise ManifestError(f"{folder}: no such export folder")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path}: missing (is {folder} an edgetune export?)") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or "manifest_sha256" not in data:
        raise ManifestError(f"{path}: not an edgetune manifest (no manifest_sha256)")
    body = {k: v for k, v in data.items() if k != "manifest_sha256"}
    if hashlib.sha256(_canonical(body)).hexdigest() != data["manifest_sha256"]:
        raise ManifestError(f"{path}: checksum mismatch: the manifest was edited or corrupted after export")
    if data.get("manifest_version") != MANIFEST_VERSION:
        raise ManifestError(f"{path}: manifest_version {data.get('manifest_version')!r} is not {MANIFEST_VERSION}")
    for key in ("target", "objective", "kernels", "files", "dispatch"):
        if key not in data:
            raise ManifestError(f"{path}: required key {key!r} is missing")
    problem = _manifest_problem(data)
    if problem:
        raise ManifestError(f"{path}: {problem}")
    return data


# A manifest's checksum only catches accidents: anyone can recompute it. Everything in it
# that later reaches a command line, a file name or generated C is checked here.
SOURCE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\.c")
FILE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
VALUE_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
CONFIG_TEXT_RE = re.compile(r"[A-Za-z0-9_.+-]{0,64}")


def _unit_problem(where: str, unit) -> str | None:
    """A compiled file of the export: {source, compiler_command, cflags}."""
    if not isinstance(unit, dict):
        return f"{where}: expected an object"
    source, command, cflags = unit.get("source"), unit.get("compiler_command"), unit.get("cflags")
    if not isinstance(source, str) or not SOURCE_RE.fullmatch(source):
        return f"{where}.source: {source!r} is not a .c file name inside the export"
    if not isinstance(command, str) or not PROGRAM_RE.fullmatch(command):
        return f"{where}.compiler_command: {command!r} is not a program name or absolute path"
    if not isinstance(cflags, list):
        return f"{where}.cflags: expected a list of flags"
    for i, flag in enumerate(cflags):
        problem = flag_problem(flag)
        if problem:
            return f"{where}.cflags[{i}]: {problem}"
    return None


def _manifest_problem(data: dict) -> str | None:
    if not isinstance(data["target"], str) or not NAME_RE.fullmatch(data["target"]):
        return f"target: {data['target']!r} is not a target name"
    if not isinstance(data["objective"], str) or not VALUE_NAME_RE.fullmatch(data["objective"]):
        return f"objective: {data['objective']!r} is not a measured value's name"
    if not isinstance(data["files"], dict):
        return "files: expected an object of file name -> checksum"
    for name in data["files"]:
        if not FILE_RE.fullmatch(name):
            return f"files: {name!r} is not a plain file name"
    problem = _unit_problem("dispatch", data["dispatch"])
    if problem:
        return problem
    if not isinstance(data["kernels"], list):
        return "kernels: expected a list"
    for i, entry in enumerate(data["kernels"]):
        where = f"kernels[{i}]"
        problem = _unit_problem(where, entry)
        if problem:
            return problem
        for key in ("kernel", "kernel_version", "shape", "function", "config"):
            if key not in entry:
                return f"{where}: required key {key!r} is missing"
        if not isinstance(entry["kernel"], str) or not NAME_RE.fullmatch(entry["kernel"]):
            return f"{where}.kernel: {entry['kernel']!r} is not a kernel name"
        if not isinstance(entry["kernel_version"], int) or isinstance(entry["kernel_version"], bool):
            return f"{where}.kernel_version: {entry['kernel_version']!r} is not an integer"
        if not isinstance(entry["function"], str) or not IDENTIFIER_RE.fullmatch(entry["function"]):
            return f"{where}.function: {entry['function']!r} is not a C identifier"
        for field in ("shape", "config"):
            if not isinstance(entry[field], dict):
                return f"{where}.{field}: expected an object"
            for name, value in entry[field].items():
                if not VALUE_NAME_RE.fullmatch(name):
                    return f"{where}.{field}: {name!r} is not a plain name"
                if field == "shape" and (not isinstance(value, int) or isinstance(value, bool)):
                    return f"{where}.shape.{name}: {value!r} is not an integer"
                if isinstance(value, str) and not CONFIG_TEXT_RE.fullmatch(value) or \
                        not isinstance(value, (str, int, float, bool)):
                    return f"{where}.{field}.{name}: {value!r} is not an allowed value"
    return None


@dataclass(frozen=True)
class ExportEntry:
    kernel: str
    kernel_version: int
    shape: tuple[tuple[str, int], ...]
    function: str
    source: str  # file name inside the export folder
    config: tuple[tuple[str, object], ...]
    objective: str
    value: float
    values: tuple[tuple[str, object], ...]
    compiler: str
    compiler_command: str
    cflags: tuple[str, ...]
    trial_id: int
    created: str
    weights_region: str = ""  # where the variant expects its buffers ("" where the target places none)
    activations_region: str = ""

    @property
    def config_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.config)

    @property
    def shape_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.shape)


@dataclass(frozen=True)
class ExportResult:
    folder: Path
    header: Path
    dispatch: Path
    sources: tuple[Path, ...]
    manifest: Path
    entries: tuple[ExportEntry, ...]
    skipped: tuple[str, ...]  # workloads that could not be exported, with the reason


def _sections(target: Target, entry: ExportEntry) -> list[dict]:
    """The section macros of one variant: a group and the linker section of its region."""
    return [{"group": group.upper(), "region": region, "section": target.section_name(region)}
            for group, region in (("weights", entry.weights_region), ("activations", entry.activations_region))
            if region]


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def edgetune_version() -> str:
    """The installed edgetune's version, from its package metadata (codegen must not import
    the app package above it for this)."""
    return importlib.metadata.version("edgetune")


def export_best(db: TuningDatabase, target: Target, out_dir: Path, objective: str,
                toolchain: str | None = None, extra_manifest: dict | None = None,
                only: Iterable[Workload] | None = None) -> ExportResult:
    """Export the best variant of every workload of `target` (only those measured with
    `toolchain`, when given: results from another compiler version are stale; only the
    workloads in `only`, when given, e.g. the CPU part of a placement plan)."""
    __version__ = edgetune_version()

    entries, sources, skipped = [], {}, []
    wanted = None if only is None else set(only)
    for workload in db.workloads(target.name):
        if wanted is not None and workload not in wanted:
            continue
        if toolchain is not None and workload.toolchain != toolchain:
            skipped.append(f"{workload.key()}: measured with another toolchain; re-tune it "
                           f"(edgetune tune --from-export DIR re-tunes an export's workloads)")
            continue
        kernel = KERNELS.get(workload.kernel)
        if kernel is None:
            skipped.append(f"{workload.key()}: kernel unknown to this edgetune")
            continue
        if kernel.version != workload.kernel_version:
            skipped.append(f"{workload.key()}: tuned with template v{workload.kernel_version}, "
                           f"this edgetune has v{kernel.version}; re-tune it")
            continue
        record = db.best(workload, objective)
        if record is None:
            skipped.append(f"{workload.key()}: no successful trial")
            continue
        try:  # a stored shape is checked like one from the command line before it reaches C
            shape = kernel.parse_shape(workload.shape_dict())
        except KernelError as exc:
            skipped.append(f"{workload.key()}: {exc}")
            continue
        space = kernel.tuning_space(target, shape)
        config = space.make(record.trial.config.as_dict())
        placement = placement_of(target, kernel.make_io(shape, np.random.default_rng(0)), config)
        value = record.trial.values[objective]
        provenance = (f"Tuned on {target.name}: {objective}={value:g} (best of {len(db.trials(workload))} trials),",
                      f"trial {record.id} of {db.path.name}, measured {record.created},",
                      f"compiler: {record.trial.info.get('compiler_version', 'unknown')}.")
        rendered = kernel.render(target, shape, config, header=HEADER, provenance=provenance)
        compiler = target.compiler(rendered.compiler)
        sources[f"{rendered.function}.c"] = rendered.source
        entries.append(ExportEntry(
            kernel=kernel.name, kernel_version=kernel.version, shape=workload.shape, function=rendered.function,
            source=f"{rendered.function}.c", config=config.items, objective=objective, value=float(value),
            values=tuple(sorted(record.trial.values.items())), compiler=compiler.name,
            compiler_command=compiler.command, cflags=(*compiler.cflags, *COMMON_CFLAGS, *rendered.cflags),
            trial_id=record.id, created=record.created, weights_region=placement.weights if placement else "",
            activations_region=placement.activations if placement else ""))
    if not entries:
        detail = "; ".join(skipped) if skipped else "the database holds no trials for it"
        raise ExportError(f"nothing to export for target {target.name}: {detail}")

    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"{out_dir}: exists and is not a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".edgetune-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ExportError(f"{out_dir}: cannot write there ({exc.strerror})") from None

    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    dispatchers = []
    for name in dict.fromkeys(e.kernel for e in entries):
        kernel = KERNELS[name]
        mine = [e for e in entries if e.kernel == name]
        example = dict(mine[0].shape)
        dispatchers.append({
            "kernel": name,
            "declaration": kernel.dispatch_declaration(example),
            "definition": kernel.dispatch_declaration(example),
            "arg_names": kernel.argument_names(example),
            "shapes": [e.shape_text for e in mine],
            "cases": [{"function": e.function,
                       "condition": " && ".join(f"{k} == {int(v)}" for k, v in e.shape)} for e in mine],
        })
    view = [dict(kernel=e.kernel, shape_text=e.shape_text, objective=e.objective, value_text=f"{e.value:g}",
                 trial_id=e.trial_id, created=comment_safe(e.created), config_text=e.config_text, function=e.function,
                 declaration=KERNELS[e.kernel].declaration(dict(e.shape), fn=e.function), source=e.source,
                 extra_declarations=KERNELS[e.kernel].extra_declarations(
                     dict(e.shape), KERNELS[e.kernel].tuning_space(target, dict(e.shape)).make(dict(e.config)), e.function),
                 var=e.function.upper(), compiler_command=e.compiler_command, cflags=e.cflags,
                 sections=_sections(target, e)) for e in entries]
    # The database's file name and the stored dates sit in C comments: defused.
    common = dict(header=HEADER, target=target.name, date=date, db=comment_safe(db.path.name),
                  edgetune_version=__version__)
    header_text = render("export_header.h.j2", dict(common, entries=view, dispatchers=dispatchers))
    dispatch_text = render("export_dispatch.c.j2", dict(common, dispatchers=dispatchers))
    first = target.compilers[0]
    make_text = render("export_build.mk.j2", dict(common, entries=view, dispatch_cc=first.command,
                                                  dispatch_cflags=" ".join((*first.cflags, *COMMON_CFLAGS, "-O2"))))

    files = {HEADER: header_text, DISPATCH: dispatch_text, MAKEFILE: make_text, **sources}
    used = list(dict.fromkeys(r for e in entries for r in (e.activations_region, e.weights_region) if r))
    if used:
        check_regions(target, used, "export")
        files[SECTIONS_LD] = render("export_sections.ld.j2", dict(common, regions=[dict(
            name=r, section=target.section_name(r), memory="EDGETUNE_" + r.upper(), origin=target.io_address(r),
            length=target.io_capacity(r), kind=target.region(r).kind) for r in used]))
    for name, text in files.items():
        _write(out_dir / name, text)
    manifest = {
        **(extra_manifest or {}),
        "manifest_version": MANIFEST_VERSION, "edgetune_version": __version__, "target": target.name,
        "objective": objective, "exported": date, "database": str(db.path),
        "dispatch": {"source": DISPATCH, "compiler_command": first.command,
                     "cflags": [*first.cflags, *COMMON_CFLAGS, "-O2"]},
        "kernels": [{"kernel": e.kernel, "kernel_version": e.kernel_version, "shape": dict(e.shape),
                     "function": e.function, "source": e.source, "config": dict(e.config),
                     "objective": e.objective, "value": e.value, "values": dict(e.values), "compiler": e.compiler,
                     "compiler_command": e.compiler_command, "cflags": list(e.cflags), "trial_id": e.trial_id,
                     "measured": e.created, "toolchain": toolchain or "",
                     **({"placement": {"weights": e.weights_region, "activations": e.activations_region}}
                        if e.weights_region else {})} for e in entries],
        "files": {name: _sha256(text) for name, text in sorted(files.items())},
    }
    write_manifest(out_dir, manifest)
    return ExportResult(folder=out_dir, header=out_dir / HEADER, dispatch=out_dir / DISPATCH,
                        sources=tuple(out_dir / name for name in sources), manifest=out_dir / MANIFEST,
                        entries=tuple(entries), skipped=tuple(skipped))
