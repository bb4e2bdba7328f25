"""A model module's code and constants placed across the target's memory regions
(codegen/code_placement.py places; this module says what the items are and what each is
worth):

- code: each kernel variant's and library operator's function. Its bytes are the trial's
  measured `code_bytes` where the variant was tuned, else a third of its C source's bytes
  (SOURCE_PER_CODE_BYTE: the shipped templates compile to 0.5% to 19% of their source, e.g.
  a default convolution's 7.6 KB to 0.4 KB, a SOFTMAX's 8.3 KB to 1.6 KB, GCC 12 -O2 for
  the M55). Before rendering (model show), a function counts CODE_ESTIMATE bytes, a library
  operator's LIBRARY_ESTIMATE. Its accesses per inference are the instructions its trial
  measured, times the layers it serves, where the variant was tuned; else modelled as the
  MACs of those layers (a library operator's: the bytes it writes), which instructions
  fetched grow with.
- constants: each const array (weights, bias, multiplier and shift tables, a library
  operator's constant inputs). A layer reads its constants once per output position
  (MACs / weight elements); accesses = bytes x that reuse. Each array takes its bytes
  rounded up to the module's 16-byte alignment.

`model show` and `model export` decide whether a model fits with the same function
(`code_fit_problem`, called by check_fits); the export then places the module's own arrays
and functions by the same rule (`module_plan`).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Iterable, Mapping, Sequence

import numpy as np

from edgetune.codegen.code_placement import (CODE, CONSTANT, FIRMWARE_CODE_RESERVE, CodePlacementError, CodePlan,
                                             CodeRegion, PlacedItem, code_regions, load_region, plan_code,
                                             section_name)
from edgetune.hal import Target

from .memory_plan import aligned
from .model import Model

CODE_ESTIMATE = 4096
LIBRARY_ESTIMATE = 1024
SOURCE_PER_CODE_BYTE = 3
# A function's room beside its code: the linker's long-branch veneer (8 bytes on Armv8-M) for
# calls between regions out of branch range, and alignment.
VENEER_BYTES = 16
C_SIZES = {"int8_t": 1, "int16_t": 2, "int32_t": 4, "int64_t": 8}


def _reuse(layer) -> float:
    """Times a layer reads each byte of its constants per inference (its output positions)."""
    weights = max((int(np.asarray(c.data).size) for c in layer.constants), default=0)
    return max(1.0, layer.macs / weights) if weights else 1.0


def _written(model: Model, layer) -> int:
    return sum(model.graph.tensors[t].nbytes for t in layer.operator.outputs if t >= 0)


def model_items(model: Model) -> list[PlacedItem]:
    """The model's code and constants as the module will have them, before any rendering:
    one function per tuned workload and per library operator, the layers' constants."""
    items, functions = [], {}
    absorbed = dict(model.graph.absorbed)
    for layer in model.layers:
        if layer.index in absorbed or (layer.kernel is None and not _written(model, layer)):
            continue
        key = (layer.kernel, layer.shape) if layer.kernel else ("op", layer.index)
        work = layer.macs if layer.kernel else _written(model, layer)
        if key not in functions:
            functions[key] = [f"the function of operator {layer.index} ({layer.op})", 0]
        functions[key][1] += work
        for c in layer.constants:
            nbytes = int(np.asarray(c.data).nbytes)
            items.append(PlacedItem(f"operator {layer.index}'s {c.name}", CONSTANT, aligned(nbytes),
                                    nbytes * _reuse(layer)))
    items += [PlacedItem(name, CODE, CODE_ESTIMATE if key[0] != "op" else LIBRARY_ESTIMATE, work)
              for key, (name, work) in functions.items()]
    return items


def model_code_plan(model: Model, target: Target, code_reserve: int = FIRMWARE_CODE_RESERVE) -> CodePlan | None:
    """The plan of the model's estimated items (model_items); None on the host, CodePlacementError
    when they fit no arrangement."""
    regions = code_regions(target, code_reserve)
    return plan_code(model_items(model), regions, target.firmware.code_region) if regions else None


def code_fit_problem(model: Model, target: Target, code_reserve: int = FIRMWARE_CODE_RESERVE) -> str | None:
    """Why the model's code and constants do not fit the target's regions, or None."""
    try:
        model_code_plan(model, target, code_reserve)
    except CodePlacementError as exc:
        return f"{target.source_file or target.name}: {exc}"
    return None


def module_items(model: Model, steps: Sequence, constants: Iterable[Mapping], measured: Mapping[str, Mapping],
                 sources: Mapping[str, str]) -> list[PlacedItem]:
    """The rendered module's functions (`measured`: a tuned function's trial values, whose
    code_bytes and instructions are used; else from their `sources` and the layers' MACs) and
    const arrays (each dict with name, ctype, count and the index of the layer that reads it)."""
    work: dict[str, float] = {}
    for step in steps:
        layer = model.layers[step.index]
        counted = measured.get(step.function, {}).get("instructions")
        work[step.function] = work.get(step.function, 0) + float(
            counted or (layer.macs if step.kernel else _written(model, layer)))
    items = []
    for fn, w in work.items():
        nbytes = measured.get(fn, {}).get("code_bytes") or len(sources.get(f"{fn}.c", "")) // SOURCE_PER_CODE_BYTE
        items.append(PlacedItem(fn, CODE, aligned(int(nbytes)) + VENEER_BYTES, w))
    for c in constants:
        nbytes = C_SIZES[c["ctype"]] * c["count"]
        items.append(PlacedItem(c["name"], CONSTANT, aligned(nbytes), nbytes * _reuse(model.layers[c["layer"]])))
    return items


def module_plan(model: Model, target: Target, steps: Sequence, constants: Iterable[Mapping],
                measured: Mapping[str, Mapping], sources: Mapping[str, str], ram_room: int | None = None,
                code_reserve: int = FIRMWARE_CODE_RESERVE) -> CodePlan | None:
    """Where each function and const array of the module goes; None on the host. `ram_room`
    (under `--max-ram`): the most bytes the plan may put in RAM regions copied in at start-up
    (what the bound leaves beside the arena, scratch and I/O); the rest goes to flash.
    `code_reserve`: bytes of the firmware's code region kept for the firmware's own code."""
    regions = code_regions(target, code_reserve)
    if not regions:
        return None
    items = module_items(model, steps, constants, measured, sources)
    try:
        return plan_code(items, capped(target, regions, ram_room), target.firmware.code_region)
    except CodePlacementError as exc:
        if ram_room is not None:
            raise CodePlacementError(f"{model.path}: under --max-ram, {ram_room:,} bytes of RAM are left for code and "
                                     f"constants and flash cannot hold the rest: {exc}") from None
        raise CodePlacementError(f"{model.path}: {exc}") from None


def copied_regions(target: Target) -> tuple[str, ...]:
    """The code regions whose contents the start-up code copies into RAM (targets/image.py's
    placed_regions `copied`): what `model verify` counts as RAM besides the arena."""
    if load_region(target) is None:
        return ()
    home = target.firmware.code_region
    return tuple(r.name for r in code_regions(target) if r.name != home and not r.flash)


def capped(target: Target, regions: tuple[CodeRegion, ...], ram_room: int | None) -> tuple[CodeRegion, ...]:
    """`regions` with the copied RAM regions' capacities cut so that together they hold at
    most `ram_room` bytes (the fastest region keeps the most: `regions` is ordered by speed)."""
    if ram_room is None:
        return regions
    left, copied, out = max(0, ram_room), copied_regions(target), []
    for r in regions:
        if r.name in copied:
            r = replace(r, capacity=min(r.capacity, left))
            left -= r.capacity
        out.append(r)
    return tuple(out)


def estimated_ram(model: Model, target: Target, ram_room: int) -> int:
    """Before rendering (`model tune --max-ram`): the bytes the code plan would copy into RAM
    within `ram_room`, from model_items' estimates (0 when the plan cannot place them)."""
    regions = code_regions(target)
    if not regions:
        return 0
    try:
        return ram_bytes(target, plan_code(model_items(model), capped(target, regions, ram_room),
                                           target.firmware.code_region))
    except CodePlacementError:
        return 0


def ram_bytes(target: Target, plan: CodePlan | None) -> int:
    """Bytes the plan put in RAM regions copied in at start-up (each item as the plan sized it)."""
    if plan is None or load_region(target) is None:  # copied_regions' rule: nothing to copy from
        return 0
    return sum(load.code_bytes + load.constant_bytes for load in plan.loads() if load.copied)


def _attributed(source: str, header: str, prototype: str, section: str, region: str) -> str:
    """A function's source with its declaration carrying `section` (GCC and Clang take a
    section attribute from a declaration before the definition), after the module header's
    include; EDGETUNE_DEFAULT_SECTIONS keeps it in .text."""
    include = f'#include "{header}"\n' if f'#include "{header}"\n' in source else "#include <stdint.h>\n"
    declaration = (f"/* Placed in {region} by edgetune's code plan; define EDGETUNE_DEFAULT_SECTIONS to keep it "
                   f"in .text. */\n#ifndef EDGETUNE_DEFAULT_SECTIONS\n{prototype} "
                   f'__attribute__((section("{section}")));\n#endif\n')
    if include not in source:  # the declaration's types come from stdint.h
        return include + declaration + source
    return source.replace(include, include + declaration, 1)


def placed(rendered, plan: CodePlan | None, target: Target, name: str):
    """The rendered module (module.py's _Rendered) with every item the plan put outside the
    code region tagged with its section; unchanged when nothing moved."""
    if plan is None or not plan.split:
        return rendered
    macro = f"{name.upper()}_PLACED"
    constants = tuple(c if plan.region_of(c["name"]) == plan.home else
                      dict(c, attr=f' {macro}("{section_name(target, plan.region_of(c["name"]), CONSTANT)}")')
                      for c in rendered.constants)
    sources = dict(rendered.sources)
    for fn, region in plan.placed:
        if region == plan.home or f"{fn}.c" not in sources:
            continue
        prototype = next(p for p in rendered.prototypes if re.search(rf"\b{re.escape(fn)}\(", p))
        sources[f"{fn}.c"] = _attributed(sources[f"{fn}.c"], f"{name}.h", prototype,
                                         section_name(target, region, CODE), region)
    return replace(rendered, constants=constants, sources=sources)


def measured_values(kernels: Iterable) -> dict[str, dict]:
    """function -> the values its trial measured (KernelEntry.values: code_bytes,
    instructions, ...), for the tuned functions."""
    return {k.function: dict(k.values) for k in kernels if k.trial_id}


COPY_NOTE = ("A RAM region's contents are stored in EDGETUNE_LOAD (your flash) and your start-up code copies\n"
             "   them in before the first inference, as it copies .data: for each region R below, the words from\n"
             "   __edgetune_R_load to __edgetune_R_start, up to __edgetune_R_end.")


def fragment_regions(target: Target, plan: CodePlan | None) -> list[dict]:
    """The regions the plan used outside the code region, as the build fragments list them
    (edgetune_sections.ld gives each an output section; a RAM region's is stored in
    EDGETUNE_LOAD, which the user's script also defines)."""
    if plan is None or not plan.split:
        return []
    from edgetune.codegen.export import region_alias
    view = []
    for name in plan.used():
        region = target.region(name)
        view.append(dict(name=name, section=target.section_name(name), alias=region_alias(name), kind=region.kind,
                         wait_states=region.wait_states, code="placed", copied=region.kind != "flash", note=""))
    if any(r["copied"] for r in view):
        view[0]["note"] = COPY_NOTE
        view.append(dict(name="flash holding the RAM regions' stored copy", section="", alias="EDGETUNE_LOAD",
                         kind="flash", wait_states=0, code="load", copied=False, note=""))
    return view


def placement_text(plan: CodePlan, counted: bool = False) -> str:
    """Where the code and constants go, bytes per region, e.g. "368,640 B of code and constants
    in itcm, 154,528 B of constants in sram (copied from flash at boot)"; `counted` adds how
    many functions and arrays."""
    parts = []
    for load in plan.loads():
        kinds = [(load.code_bytes, "code", load.functions, "function"),
                 (load.constant_bytes, "constants", load.arrays, "const array")]
        held = [(f"{n:,} B of {what}" + (f" ({items} {noun}{'s' if items != 1 else ''})" if counted else ""))
                for n, what, items, noun in kinds if items]
        parts.append(" and ".join(held) + f" in {load.region}" + (" (copied from flash at boot)" if load.copied else ""))
    return ", ".join(parts)


def plan_text(plan: CodePlan | None) -> str:
    """One line for `model export` when the plan moved anything: the bytes and items in each region."""
    if plan is None or not plan.split:
        return ""
    return (f"code plan: the module exceeds {plan.home} (placed by accesses per byte): "
            f"{placement_text(plan, counted=True)}")
