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

This module renders an export: given the variants chosen (ExportEntry values, chosen from the
database by the application) and the target, it returns every file's text and the Manifest,
without touching the disk. Choosing and writing are the application's (edgetune.selection,
edgetune.export, edgetune.publish).
"""
from __future__ import annotations

import hashlib
import re
import textwrap
from dataclasses import dataclass
from pathlib import PurePath
from typing import Sequence

import numpy as np

from edgetune.errors import EdgetuneError
from edgetune.hal import Target
from edgetune.tuner import Bound

from .calling import FunctionDoc, dispatch_doc, pack_doc, variant_doc
from .kernels import KERNELS
from .kernels.base import COMMON_CFLAGS, comment_safe
from .manifest import PER_KERNEL, CompiledUnit, KernelEntry, Manifest
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
# How the linker fragment's comment before the code plan's sections begins: the Zephyr module
# cuts the fragment there when the code and constants stay in .text and .rodata.
CODE_SECTIONS_MARKER = "/* Code and constants the code plan"


class ExportError(EdgetuneError, ValueError):
    """Nothing to export, the output folder cannot be written, or what was chosen cannot be
    written into the build files."""


@dataclass(frozen=True)
class ExportEntry:
    """One workload's chosen variant, as the application's selection hands it to rendering:
    the workload, its configuration, what chose it and the trial it was measured in."""
    kernel: str
    kernel_version: int
    shape: tuple[tuple[str, int], ...]
    config: tuple[tuple[str, object], ...]
    objective: str
    value: float
    values: tuple[tuple[str, object], ...]
    trial_id: int
    created: str
    trials: int  # how many trials of its workload the database holds
    compiler_version: str = "unknown"
    toolchain: str = ""  # the workload's measurement fingerprint
    bounds: tuple[Bound, ...] = ()  # the constraints it was chosen within
    # What chose it: "tuned" (the goal stored with the workload), "override" (the export's
    # --objective/--constraint), "default" (no stored goal: the target's own unit)
    chosen_by: str = "default"


@dataclass(frozen=True)
class RenderedExport:
    files: dict[str, str]  # every file of the folder but the manifest, by name
    manifest: Manifest


@dataclass(frozen=True)
class ZephyrModule:
    """What names an export folder as a Zephyr module (zephyr/module.yml, CMakeLists.txt, Kconfig)."""
    name: str  # the module's and its Zephyr library's name
    symbol: str  # its Kconfig option, CONFIG_<symbol>
    summary: str  # what it holds, in module.yml's comment
    heading: str  # the Kconfig file's first comment
    prompt: str  # the option's prompt
    help: tuple[str, ...]  # the option's help, line by line


def zephyr_files(build: dict, module: ZephyrModule) -> dict[str, str]:
    """The folder's Zephyr module files, from the variables of its Make and CMake fragments
    (`build`: units, regions, sections_ld, and code_placed for a model's code plan)."""
    view = dict(build, zephyr=module, code_marker=CODE_SECTIONS_MARKER)
    return {ZEPHYR_MODULE: render("export_zephyr_module.yml.j2", view),
            ZEPHYR_CMAKE: render("export_zephyr_CMakeLists.txt.j2", view),
            ZEPHYR_KCONFIG: render("export_zephyr_Kconfig.j2", view)}


def _kernels_zephyr_module(common: dict) -> ZephyrModule:
    target, version, date = common["target"], common["edgetune_version"], common["date"]
    return ZephyrModule("edgetune_kernels", "EDGETUNE_KERNELS", f"Kernels tuned on {target}",
                        f"Kernels tuned by edgetune {version} on {target} (exported {date})",
                        f"Kernels tuned by edgetune for {target}",
                        (f"Builds the kernels of {common['header']} (exported by edgetune), each with the compiler",
                         "flags it was measured with."))


def _sections(target: Target, entry: KernelEntry) -> list[dict]:
    """The section macros of one variant: a group and the linker section of its region."""
    return [{"group": group.upper(), "region": region, "section": target.section_name(region)}
            for group, region in (("weights", entry.weights_region), ("activations", entry.activations_region))
            if region]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


def _units(target: Target, entries: Sequence[KernelEntry]) -> list[dict]:
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


def _regions(target: Target, entries: Sequence[KernelEntry]) -> list[dict]:
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


def _entry_view(target: Target, e: KernelEntry) -> dict:
    """What the header shows of one variant: its documented declaration, its helpers, the
    element counts of its buffers, and the sections its buffers and scratch belong in."""
    kernel = KERNELS[e.kernel]
    shape = dict(e.shape)
    config = kernel.tuning_space(target, shape).make(dict(e.config))
    declaration = kernel.declaration(shape, fn=e.function)
    where = [f"{s['group'].lower()} in {s['region']}" for s in _sections(target, e)]
    details = (f"Measured on {target.name}: {e.objective}={e.value:g} (trial {e.trial_id}, {e.measured}).",
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


def _render_files(target: Target, entries: Sequence[KernelEntry], sources: dict[str, str], common: dict) -> dict[str, str]:
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
             **zephyr_files(build, _kernels_zephyr_module(common)),
             **sources}
    if regions:
        files[SECTIONS_LD] = render("export_sections.ld.j2", dict(common, regions=regions))
    return files


def _render_variant(target: Target, e: ExportEntry, database_name: str) -> tuple[KernelEntry, str]:
    """One chosen variant rendered: its manifest entry and its source, whose comment says
    where it was measured and how it was chosen."""
    kernel = KERNELS[e.kernel]
    shape = kernel.parse_shape(dict(e.shape))
    config = kernel.tuning_space(target, shape).make(dict(e.config))
    within = f" within {', '.join(b.text() for b in e.bounds)}" if e.bounds else ""
    provenance = (f"Tuned on {target.name}: {e.objective}={e.value:g}{within} (best of {e.trials} trials),",
                  f"trial {e.trial_id} of {database_name}, measured {e.created},",
                  f"compiler: {e.compiler_version}.")
    rendered = kernel.render(target, shape, config, header=HEADER, provenance=provenance)
    compiler = target.compiler(rendered.compiler)
    placement = placement_of(target, kernel.make_io(shape, np.random.default_rng(0)), config)
    section = scratch_section(target)
    entry = KernelEntry(
        kernel=kernel.name, kernel_version=kernel.version, shape=e.shape, function=rendered.function,
        source=f"{rendered.function}.c", config=config.items, objective=e.objective, bounds=e.bounds,
        chosen_by=e.chosen_by, value=float(e.value), values=e.values, compiler=compiler.name,
        compiler_command=compiler.command, cflags=(*compiler.cflags, *COMMON_CFLAGS, *rendered.cflags),
        trial_id=e.trial_id, measured=e.created, toolchain=e.toolchain,
        weights_region=placement.weights if placement else "",
        activations_region=placement.activations if placement else "",
        scratch=section is not None and section in rendered.source, definition=kernel.definition)
    return entry, rendered.source


def render_export(target: Target, chosen: Sequence[ExportEntry], *, database: str, date: str, version: str,
                  toolchain_versions: dict[str, str] | None = None) -> RenderedExport:
    """Every file of an export of `chosen` (in that order) and its manifest: no disk, no
    database, no clock (`date`, `version` and the `database` path are the caller's).
    ExportError when a compiler name or flag cannot be written into the build files."""
    database_name = PurePath(database).name
    kernels, sources = [], {}
    for e in chosen:
        entry, source = _render_variant(target, e, database_name)
        kernels.append(entry)
        sources[entry.source] = source
    common = dict(header=HEADER, target=target.name, date=date, db=comment_safe(database_name),
                  edgetune_version=version)
    files = _render_files(target, kernels, sources, common)
    objectives = {k.objective for k in kernels}
    first = target.compilers[0]
    manifest = Manifest(
        target=target.name, objective=objectives.pop() if len(objectives) == 1 else PER_KERNEL,
        dispatch=CompiledUnit(DISPATCH, first.command, (*first.cflags, *COMMON_CFLAGS, "-O2")),
        kernels=tuple(kernels), files=tuple((name, _sha256(text)) for name, text in sorted(files.items())),
        edgetune_version=version, exported=date, database=database,
        toolchain_versions=None if toolchain_versions is None else tuple(sorted(toolchain_versions.items())))
    return RenderedExport(files=files, manifest=manifest)
