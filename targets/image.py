"""The bare-metal firmware image the QEMU, serial-board and Renode runners share: the link
layout of the target's start-up family, the start-up source, linking the kernel's objects
with the harness, and what a trial records about where its buffers were placed."""
from __future__ import annotations

from pathlib import Path

from edgetune.codegen import render
from edgetune.codegen.code_placement import PLACING_FAMILIES, code_regions, load_region
from edgetune.firmware import COMMON_DIR, TEMPLATES_DIR
from edgetune.hal import Target
from edgetune.tuner import Outcome

from . import elf, iobuf
from .toolchain import MeasureError, run_tool

HARNESS_CFLAGS = ("-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-ffunction-sections", "-fdata-sections")


def placed_regions(target: Target) -> list[dict]:
    """The regions besides the code region that may hold a model's code and constants
    (codegen/code_placement.py), flash first (a RAM region's stored copy follows them in
    flash): their MEMORY name, output section, and where a RAM region's copy is stored (on a
    board without flash, nowhere: the emulator loads the RAM region itself)."""
    fw = target.firmware
    load = load_region(target)
    memory = {fw.code_region: "CODE"}
    regions = sorted((r for r in code_regions(target) if r.name != fw.code_region), key=lambda r: not r.flash)
    view = []
    for r in regions:
        memory[r.name] = f"ET_{r.name.upper()}"
        region = target.region(r.name)
        view.append(dict(name=r.name, memory=memory[r.name], access=region.access, base=region.base, size=region.size,
                         section=target.section_name(r.name), copied=not r.flash and load is not None,
                         load_name=load))
    for r in view:
        r["load"] = memory.get(load, "")
    return view


def linker_script(target: Target) -> str:
    """The link layout of the target's start-up family (firmware/templates/<family>.ld.j2)."""
    fw = target.firmware
    code, data = target.region(fw.code_region), target.region(fw.data_region)
    return render(f"{fw.startup}.ld.j2", directory=TEMPLATES_DIR, variables=dict(
        target_name=target.name, code=code, data=data, code_size=fw.code_size or code.size,
        data_base=fw.data_base(data), data_reserved=fw.data_reserved, stack_size=fw.stack_size,
        placed=placed_regions(target) if fw.startup in PLACING_FAMILIES else []))


def link_image(target: Target, workdir: Path, objects: list[Path], harness: list[Path],
               extra_args: list[str] | tuple[str, ...]) -> None:
    """Link workdir/image.elf from the kernel's objects, workdir/glue.o and the harness with
    workdir/link.ld. A kernel larger than the code region is TOO_LARGE before linking; a
    link that fails while kernel and harness together exceed the region is TOO_LARGE too
    (the linker's overflow message), any other link failure a compile error."""
    fw = target.firmware
    code_region = target.region(fw.code_region)
    # Sections the code plan put in another region (placed_regions) do not take the code region's bytes.
    elsewhere = tuple(f"{r['section']}." for r in placed_regions(target)) if fw.startup in PLACING_FAMILIES else ()
    kernel_bytes = sum(elf.alloc_bytes(o) - elf.bytes_in(o, elsewhere) for o in objects)
    if kernel_bytes > code_region.size:
        raise MeasureError(Outcome.TOO_LARGE, f"kernel needs {kernel_bytes} bytes; {code_region.name} holds {code_region.size}")
    try:
        run_tool([fw.linker, *fw.ldflags, "-nostartfiles", "-T", "link.ld", *map(str, objects), "glue.o",
                  *map(str, harness), "-Wl,--gc-sections", *extra_args, "-o", "image.elf"], cwd=workdir)
    except MeasureError as exc:
        if kernel_bytes + sum(elf.alloc_bytes(o) for o in harness) > code_region.size:
            raise MeasureError(Outcome.TOO_LARGE, exc.message) from None
        raise


def startup_source(family: str) -> Path:
    """startup_<family>.c or .S in firmware/common (the loader admits known families only)."""
    for suffix in (".c", ".S"):
        path = COMMON_DIR / f"startup_{family}{suffix}"
        if path.exists():
            return path
    raise FileNotFoundError(f"no start-up source for family {family!r} in {COMMON_DIR}")


def placement_info(plan: iobuf.IoPlan) -> dict:
    """What a trial records about where its buffers lived (io_region: the I/O block's
    header and activations, as before placement was tunable)."""
    return {"io_region": plan.regions[0], "activations_region": plan.region_of("activations"),
            "weights_region": plan.region_of("weights")}
