"""Bake the best stored variant of each tuned workload into C that builds without edgetune.

An export folder holds exactly what its manifest lists:
  edgetune_kernels.h      prototypes of every variant and of one shape dispatcher per kernel,
                          each argument documented (CMSIS-style doc comments)
  edgetune_kernels.c      the dispatchers
  <function>.c            one self-contained source per tuned workload, with its provenance
  edgetune_kernels.mk     Make: the compiler and flags each file was measured with, and rules
  edgetune_kernels.cmake  CMake: edgetune_kernels_add(<target>) adds the sources with their flags
  zephyr/                 the folder as a Zephyr module (module.yml, CMakeLists.txt, Kconfig)
  edgetune_sections.ld    on targets that place buffers: output sections for the buffers the
                          header's EDGETUNE_<FN>_*_SECTION macros name and for the variants'
                          static scratch, in memory regions named EDGETUNE_<REGION> that the
                          firmware's linker script defines (REGION_ALIAS)
  manifest.json           workloads, configurations, measured values, the objective and
                          constraints each variant was chosen by, file checksums
docs/export.md describes how firmware builds them.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import hashlib
import json
import os
import re
import shutil
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from edgetune.errors import EdgetuneError
from edgetune.hal import Target
from edgetune.hal.loader import NAME_RE, PROGRAM_RE, flags_problem
from edgetune.tuner import Bound, TuningDatabase, Workload, resolve_goal

from .calling import FunctionDoc, dispatch_doc, pack_doc, variant_doc
from .kernels import KERNELS
from .kernels.base import COMMON_CFLAGS, KernelError, comment_safe
from .placement import check_regions, placement_of, scratch_section
from .render import render

HEADER = "edgetune_kernels.h"
DISPATCH = "edgetune_kernels.c"
MAKEFILE = "edgetune_kernels.mk"
CMAKE = "edgetune_kernels.cmake"
SECTIONS_LD = "edgetune_sections.ld"
# A Zephyr module (docs.zephyrproject.org, "Modules"): zephyr/module.yml names the folder
# of its CMakeLists.txt and its Kconfig file.
ZEPHYR_MODULE = "zephyr/module.yml"
ZEPHYR_CMAKE = "zephyr/CMakeLists.txt"
ZEPHYR_KCONFIG = "zephyr/Kconfig"
MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


class ExportError(EdgetuneError, ValueError):
    """Nothing to export, or the output folder cannot be written."""


class ManifestError(EdgetuneError, ValueError):
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
FILE_RE = re.compile(r"(zephyr/)?[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # a file of the folder or of its zephyr/
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
    problem = flags_problem(cflags)  # -mllvm and --param take the next flag as their value
    if problem:
        return f"{where}.cflags[{problem[0]}]: {problem[1]}"
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
    scratch: bool = False  # the variant has static scratch (placed in the section scratch_section names)
    bounds: tuple[Bound, ...] = ()  # the constraints it was chosen within
    # What chose it: "tuned" (the goal stored with the workload), "override" (the export's
    # --objective/--constraint), "default" (no stored goal: the target's own unit)
    chosen_by: str = "default"

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


CMAKE_ID = {"gcc": "GNU", "clang": "Clang"}  # CMAKE_C_COMPILER_ID of each compiler name targets use


def region_alias(region: str) -> str:
    """The memory region name the linker fragment puts a region's sections in: the user's
    linker script defines it, e.g. REGION_ALIAS("EDGETUNE_DTCM", DTCM)."""
    return "EDGETUNE_" + region.upper()


def _own_cflags(target: Target, entry_compiler: str, cflags: tuple[str, ...]) -> tuple[str, ...]:
    """The flags a file was measured with minus the target compiler's own (-march, -mcpu...),
    which a firmware's toolchain sets for every file."""
    prefix = target.compiler(entry_compiler).cflags
    return cflags[len(prefix):] if cflags[:len(prefix)] == prefix else cflags


def _units(target: Target, entries: list[ExportEntry]) -> list[dict]:
    """Every compiled file with its compiler and flags: the dispatcher, then the variants."""
    first = target.compilers[0]
    units = [dict(source=DISPATCH, var="EDGETUNE_DISPATCH", compiler=first.name, compiler_command=first.command,
                  cmake_id=CMAKE_ID.get(first.name, ""), target_cflags=first.cflags,
                  own_cflags=(*COMMON_CFLAGS, "-O2"), note="the shape dispatcher")]
    for e in entries:
        units.append(dict(source=e.source, var=e.function.upper(), compiler=e.compiler,
                          compiler_command=e.compiler_command, cmake_id=CMAKE_ID.get(e.compiler, ""),
                          target_cflags=target.compiler(e.compiler).cflags,
                          own_cflags=_own_cflags(target, e.compiler, e.cflags),
                          note=f"{e.objective}={e.value:g}"))
    return units


# Compiler names and flags are written into Make and CMake files: only text that means the
# same, unquoted, to make, to CMake and to a shell passes.
BUILD_TEXT_RE = re.compile(r"[A-Za-z0-9_+=,./:-]{1,200}")


def _check_build_text(units: list[dict]) -> None:
    for unit in units:
        for text in (unit["compiler_command"], *unit["target_cflags"], *unit["own_cflags"]):
            if not BUILD_TEXT_RE.fullmatch(text):
                raise ExportError(f"{unit['source']}: {text!r} cannot be written into the Make and CMake files "
                                  "(allowed: letters, digits and _+=,./:-)")


def _regions(target: Target, entries: list[ExportEntry]) -> list[dict]:
    """The memory regions the fragment places sections in: every buffer region a variant was
    measured with, and the firmware's data region when a variant has static scratch (the
    harness keeps .bss there)."""
    used = [r for e in entries for r in (e.activations_region, e.weights_region) if r]
    check_regions(target, used, "export")
    if any(e.scratch for e in entries) and target.firmware is not None:
        used.append(target.firmware.data_region)  # a HAL region name (the loader checked it)
    used = list(dict.fromkeys(used))
    return [dict(name=r, section=target.section_name(r), alias=region_alias(r), kind=target.region(r).kind,
                 wait_states=target.region(r).wait_states, origin=target.io_address(r), length=target.io_capacity(r))
            for r in used]


def doc_comment(doc: FunctionDoc, details: tuple[str, ...] = ()) -> str:
    """A CMSIS-style doc comment: @brief, details, one @param per argument, @return."""
    lines = textwrap.wrap("@brief  " + comment_safe(doc.brief), 96, subsequent_indent="        ")
    for text in details:
        lines += textwrap.wrap(comment_safe(text), 96)
    width = max((len(name) for _, name, _ in doc.params), default=0)
    for direction, name, text in doc.params:
        head = f"@param[{direction}]{' ' if direction == 'out' else '  '}{name.ljust(width)}  "
        lines += textwrap.wrap(head + comment_safe(text), 96, subsequent_indent=" " * len(head))
    if doc.returns:
        lines += textwrap.wrap("@return " + comment_safe(doc.returns), 96, subsequent_indent="        ")
    return "/**\n" + "".join(f" * {line}\n" for line in lines) + " */"


def _entry_view(target: Target, e: ExportEntry) -> dict:
    """What the header shows of one variant: its documented declaration, its helpers, the
    element counts of its buffers, and the sections its buffers and scratch belong in."""
    kernel = KERNELS[e.kernel]
    shape = dict(e.shape)
    config = kernel.tuning_space(target, shape).make(dict(e.config))
    declaration = kernel.declaration(shape, fn=e.function)
    where = [f"{s['group'].lower()} in {s['region']}" for s in _sections(target, e)]
    details = (f"Measured on {target.name}: {e.objective}={e.value:g} (trial {e.trial_id}, {e.created}).",
               f"Configuration: {e.config_text}.",
               *([f"Measured with its buffers in: {'; '.join(where)}: declare the arrays you pass with the "
                  f"EDGETUNE_{e.function.upper()}_*_SECTION macros below."] if where else []),
               *([f"Static scratch: in section {scratch_section(target)} (where it was measured); not reentrant."]
                 if e.scratch else []))
    doc = variant_doc(e.kernel, kernel.description, e.shape_text, declaration, shape, dict(e.config), "")
    extras = [dict(declaration=extra, doc=doc_comment(pack_doc(e.kernel, extra, e.function)))
              for extra in kernel.extra_declarations(shape, config, e.function)]
    io = kernel.make_io(shape, np.random.default_rng(0))
    sizes = [dict(macro=f"EDGETUNE_{e.function.upper()}_{b.name.upper()}_ELEMENTS", count=int(b.data.size),
                  ctype=b.ctype, name=b.name) for b in io.buffers]
    return dict(kernel=e.kernel, shape_text=e.shape_text, function=e.function, declaration=declaration,
                doc=doc_comment(doc, details), extra_declarations=extras, sizes=sizes, var=e.function.upper(),
                sections=_sections(target, e))


def _render_files(target: Target, entries: list[ExportEntry], sources: dict[str, str], common: dict) -> dict[str, str]:
    """Every file of the export folder but the manifest, by name."""
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
    for d, name in zip(dispatchers, dict.fromkeys(e.kernel for e in entries)):
        first = next(e for e in entries if e.kernel == name)
        d["doc"] = doc_comment(dispatch_doc(name, KERNELS[name].shape_keys, d["declaration"], dict(first.shape),
                                            d["shapes"], dict(first.config)))
    view = [_entry_view(target, e) for e in entries]
    regions = _regions(target, entries)
    units = _units(target, entries)
    _check_build_text(units)
    build = dict(common, units=units, regions=regions, sections_ld=SECTIONS_LD if regions else "")
    files = {HEADER: render("export_header.h.j2", dict(common, entries=view, dispatchers=dispatchers)),
             DISPATCH: render("export_dispatch.c.j2", dict(common, dispatchers=dispatchers)),
             MAKEFILE: render("export_build.mk.j2", build),
             CMAKE: render("export_build.cmake.j2", build),
             ZEPHYR_MODULE: render("export_zephyr_module.yml.j2", build),
             ZEPHYR_CMAKE: render("export_zephyr_CMakeLists.txt.j2", build),
             ZEPHYR_KCONFIG: render("export_zephyr_Kconfig.j2", build),
             **sources}
    if regions:
        files[SECTIONS_LD] = render("export_sections.ld.j2", dict(common, regions=regions))
    return files


def _check_destination(out_dir: Path) -> None:
    """An export replaces its folder whole: only a missing or empty folder, or an earlier
    export (one with a manifest), may be replaced; never a folder of someone's own files."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"{out_dir}: exists and is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / MANIFEST).is_file():
        raise ExportError(f"{out_dir}: exists, is not empty and holds no {MANIFEST} (not an earlier export); "
                          "an export replaces its folder whole: choose a new folder")


STAGING_MARK = ".edgetune-partial-"


def _remove_abandoned_staging(out_dir: Path) -> None:
    """Folders left beside out_dir by exports that were killed (their process is gone)."""
    prefix = f".{out_dir.name}{STAGING_MARK}"
    for path in out_dir.parent.iterdir():  # not glob: the folder's name may hold [ or *
        if not path.name.startswith(prefix) or not path.is_dir():
            continue
        pid = path.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stage_and_publish(out_dir: Path, files: dict[str, str], manifest: dict,
                       measure: Callable[[Path], None] | None) -> None:
    """Write the export beside out_dir, let `measure` finish it, then swap it into place."""
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned_staging(out_dir)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}{STAGING_MARK}{os.getpid()}-", dir=out_dir.parent))
    except OSError as exc:
        raise ExportError(f"{out_dir}: cannot write there ({exc.strerror})") from None
    try:
        for name, text in files.items():
            (staging / name).parent.mkdir(exist_ok=True)
            _write(staging / name, text)
        write_manifest(staging, manifest)
        if measure is not None:
            measure(staging)
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; an export is an ordinary folder
        _swap_into_place(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already when published


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _swap_into_place(staging: Path, out_dir: Path) -> None:
    """out_dir becomes staging. An existing out_dir is exchanged in one step where the
    kernel offers it (Linux renameat2 RENAME_EXCHANGE), else renamed aside first: a kill
    between the two renames leaves out_dir absent (the old export kept beside it), never
    half-written."""
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return
    if not _exchange(staging, out_dir):
        aside = staging.with_name(staging.name + "-old")
        os.rename(out_dir, aside)
        os.rename(staging, out_dir)
        staging = aside
    shutil.rmtree(staging, ignore_errors=True)  # now the old export


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux >= 3.15, glibc >= 2.28); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    done = renameat2(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange) == 0
    return done


def export_best(db: TuningDatabase, target: Target, out_dir: Path, objective: str = "",
                toolchain: str | None = None, extra_manifest: dict | None = None,
                only: Iterable[Workload] | None = None, measure: Callable[[Path], None] | None = None,
                bounds: tuple[Bound, ...] = ()) -> ExportResult:
    """Export the best variant of every workload of `target` (only those measured with
    `toolchain`, when given: results from another compiler version or board description
    are stale; only the workloads in `only`, when given, e.g. the CPU part of a placement
    plan). Each workload's best is chosen by the goal it was tuned for (stored with it),
    unless `objective`/`bounds` override it (tuner.resolve_goal).

    The export is written into a fresh folder beside `out_dir`, handed to `measure` (which
    may rewrite its manifest, e.g. with the values measured at export), and only then put
    in place of `out_dir` in one rename: an export killed part-way leaves the old folder as
    it was, and the new folder holds exactly the files its manifest lists."""
    __version__ = edgetune_version()

    entries, sources, skipped = [], {}, []
    wanted = None if only is None else set(only)
    for workload in db.workloads(target.name):
        if wanted is not None and workload not in wanted:
            continue
        if toolchain is not None and workload.toolchain != toolchain:
            skipped.append(f"{workload.key()}: measured with another toolchain or board description; re-tune it "
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
        stored_goal = db.goal(workload)
        goal = resolve_goal(stored_goal, objective, bounds, target.measures)
        chosen_by = "override" if objective or bounds else "tuned" if stored_goal is not None else "default"
        record = db.best(workload, goal.objective, goal.allows)
        within = f" within {', '.join(b.text() for b in goal.bounds)}" if goal.bounds else ""
        if record is None:
            skipped.append(f"{workload.key()}: no successful trial{within}")
            continue
        try:  # a stored shape is checked like one from the command line before it reaches C
            shape = kernel.parse_shape(workload.shape_dict())
        except KernelError as exc:
            skipped.append(f"{workload.key()}: {exc}")
            continue
        space = kernel.tuning_space(target, shape)
        config = space.make(record.trial.config.as_dict())
        placement = placement_of(target, kernel.make_io(shape, np.random.default_rng(0)), config)
        value = record.trial.values[goal.objective]
        provenance = (f"Tuned on {target.name}: {goal.objective}={value:g}{within} "
                      f"(best of {len(db.trials(workload))} trials),",
                      f"trial {record.id} of {db.path.name}, measured {record.created},",
                      f"compiler: {record.trial.info.get('compiler_version', 'unknown')}.")
        rendered = kernel.render(target, shape, config, header=HEADER, provenance=provenance)
        compiler = target.compiler(rendered.compiler)
        sources[f"{rendered.function}.c"] = rendered.source
        entries.append(ExportEntry(
            kernel=kernel.name, kernel_version=kernel.version, shape=workload.shape, function=rendered.function,
            source=f"{rendered.function}.c", config=config.items, objective=goal.objective, value=float(value),
            values=tuple(sorted(record.trial.values.items())), compiler=compiler.name,
            compiler_command=compiler.command, cflags=(*compiler.cflags, *COMMON_CFLAGS, *rendered.cflags),
            trial_id=record.id, created=record.created, weights_region=placement.weights if placement else "",
            activations_region=placement.activations if placement else "", bounds=goal.bounds, chosen_by=chosen_by,
            scratch=scratch_section(target) is not None and scratch_section(target) in rendered.source))
    if not entries:
        detail = "; ".join(skipped) if skipped else "the database holds no trials for it"
        raise ExportError(f"nothing to export for target {target.name}: {detail}")

    out_dir = Path(out_dir)
    _check_destination(out_dir)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    files = _render_files(target, entries, sources, dict(header=HEADER, target=target.name, date=date,
                                                         db=comment_safe(db.path.name), edgetune_version=__version__))
    manifest = {
        **(extra_manifest or {}),
        "manifest_version": MANIFEST_VERSION, "edgetune_version": __version__, "target": target.name,
        # What every kernel was chosen by, or "per_kernel" when they differ (each entry says).
        "objective": objectives.pop() if len(objectives := {e.objective for e in entries}) == 1 else "per_kernel",
        "exported": date, "database": str(db.path),
        "dispatch": {"source": DISPATCH, "compiler_command": target.compilers[0].command,
                     "cflags": [*target.compilers[0].cflags, *COMMON_CFLAGS, "-O2"]},
        "kernels": [{"kernel": e.kernel, "kernel_version": e.kernel_version, "shape": dict(e.shape),
                     "function": e.function, "source": e.source, "config": dict(e.config),
                     "objective": e.objective, "constraints": [b.text() for b in e.bounds],
                     "bounds": [[b.name, b.limit] for b in e.bounds], "chosen_by": e.chosen_by,
                     "value": e.value, "values": dict(e.values), "compiler": e.compiler,
                     "compiler_command": e.compiler_command, "cflags": list(e.cflags), "trial_id": e.trial_id,
                     "measured": e.created, "toolchain": toolchain or "",
                     **({"placement": {"weights": e.weights_region, "activations": e.activations_region}}
                        if e.weights_region else {})} for e in entries],
        "files": {name: _sha256(text) for name, text in sorted(files.items())},
    }
    _stage_and_publish(out_dir, files, manifest, measure)
    return ExportResult(folder=out_dir, header=out_dir / HEADER, dispatch=out_dir / DISPATCH,
                        sources=tuple(out_dir / name for name in sources), manifest=out_dir / MANIFEST,
                        entries=tuple(entries), skipped=tuple(skipped))
