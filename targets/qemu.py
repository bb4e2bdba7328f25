"""Build firmware images for emulated Cortex-M and Cortex-A machines and run them in QEMU.

Measurement: an instruction-count TCG plugin (targets/qemu/insn_count.c, built on first
use) counts the guest instructions between two marker functions of the harness. QEMU's
DWT cycle counter reads 0 and SysTick is coarse (docs/measurements.md, "Counting work"),
while plugin counts are exact and identical run to run. The harness first measures an
empty region; the kernel's count is the second region minus the first.
"""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgetune.codegen import KernelIO, render
from edgetune.firmware import COMMON_DIR, TEMPLATES_DIR
from edgetune.hal import Placement, Target
from edgetune.tuner import Outcome

from . import elf, iobuf, mix
from .build import Builder
from .toolchain import (BuildResult, MeasureError, cache_dir, cached_object, killed_from_outside, require_program,
                        run_tool, tool_version)

PLUGIN_SOURCE = Path(__file__).parent / "qemu" / "insn_count.c"
HARNESS_CFLAGS = ("-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-ffunction-sections", "-fdata-sections")

# Exit statuses of the harness (firmware/common/harness.h).
EXIT_OK, EXIT_BAD_IO, EXIT_OUTPUT_FAILED, EXIT_FAULT = 0, 3, 4, 5


def plugin_path() -> Path:
    """The instruction-count plugin, compiled with the host C compiler on first use."""
    source = PLUGIN_SOURCE.read_bytes()
    digest = hashlib.sha256(source + tool_version("cc").encode()).hexdigest()[:16]
    path = cache_dir() / "plugins" / f"insn_count-{digest}.so"
    if not path.exists():
        require_program("cc")
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            tmp_so = Path(tmp) / path.name
            run_tool(["cc", "-O2", "-shared", "-fPIC", "-Wall", "-Wextra", "-o", str(tmp_so), str(PLUGIN_SOURCE)],
                     cwd=Path(tmp), outcome=Outcome.RUNTIME_ERROR)
            os.replace(tmp_so, path)
    if "," in str(path):
        raise MeasureError(Outcome.RUNTIME_ERROR, f"cache path {path} contains a comma, which QEMU options cannot hold")
    return path


def _linker_script(target: Target) -> str:
    """The link layout of the target's start-up family (firmware/templates/<family>.ld.j2)."""
    fw = target.firmware
    code, data = target.region(fw.code_region), target.region(fw.data_region)
    return render(f"{fw.startup}.ld.j2", directory=TEMPLATES_DIR, variables=dict(
        target_name=target.name, code=code, data=data, code_size=fw.code_size or code.size,
        data_base=fw.data_base(data), data_reserved=fw.data_reserved, stack_size=fw.stack_size))


def link_image(target: Target, workdir: Path, objects: list[Path], harness: list[Path],
               extra_args: list[str] | tuple[str, ...]) -> None:
    """Link workdir/image.elf from the kernel's objects, workdir/glue.o and the harness with
    workdir/link.ld. A kernel larger than the code region is TOO_LARGE before linking; a
    link that fails while kernel and harness together exceed the region is TOO_LARGE too
    (the linker's overflow message), any other link failure a compile error."""
    fw = target.firmware
    code_region = target.region(fw.code_region)
    kernel_bytes = sum(elf.alloc_bytes(o) for o in objects)
    if kernel_bytes > code_region.size:
        raise MeasureError(Outcome.TOO_LARGE, f"kernel needs {kernel_bytes} bytes; {code_region.name} holds {code_region.size}")
    try:
        run_tool([fw.linker, *fw.ldflags, "-nostartfiles", "-T", "link.ld", *map(str, objects), "glue.o",
                  *map(str, harness), "-Wl,--gc-sections", *extra_args, "-o", "image.elf"], cwd=workdir)
    except MeasureError as exc:
        if kernel_bytes + sum(elf.alloc_bytes(o) for o in harness) > code_region.size:
            raise MeasureError(Outcome.TOO_LARGE, exc.message) from None
        raise


def _startup_source(family: str) -> Path:
    """startup_<family>.c or .S in firmware/common (the loader admits known families only)."""
    for suffix in (".c", ".S"):
        path = COMMON_DIR / f"startup_{family}{suffix}"
        if path.exists():
            return path
    raise FileNotFoundError(f"no start-up source for family {family!r} in {COMMON_DIR}")


def emulator_command(target: Target, image: str, loaders: list[str], plugin: str) -> list[str]:
    """The QEMU command line of one run. -nodefaults: QEMU creates none of its default
    devices (serial port, monitor, network card, display adapter). The harness talks to the
    host through semihosting only, and the `virt` machine's default virtio NIC would make
    QEMU load a network boot ROM (efi-virtio.rom) that a minimal install does not have."""
    cpu = ["-cpu", target.runner.cpu] if target.runner.cpu else []
    return [target.runner.program, "-M", target.runner.machine, *cpu, "-nodefaults", "-display", "none",
            "-semihosting-config", "enable=on,target=native", "-kernel", image, *loaders, "-plugin", plugin]


class QemuRunner(Builder):
    """Emulated boards in qemu-system-arm / qemu-system-aarch64 (one QEMU process per run)."""

    # Counts do not depend on host load, so every core can run an emulator at once.
    slots = max(1, os.cpu_count() or 1)

    def __init__(self, target: Target):
        if target.firmware is None:
            raise ValueError(f"target {target.name} has no [firmware] table")
        super().__init__(target)

    def check_tools(self) -> None:
        require_program(self.target.runner.program)
        require_program(self.target.firmware.linker)
        for compiler in self.target.compilers:
            require_program(compiler.command)

    # --- build --------------------------------------------------------------------------
    def link(self, workdir: Path, objects: list[Path], glue_text: str, io: KernelIO,
             placement: Placement | None = None) -> BuildResult:
        target, fw = self.target, self.target.firmware
        plan = iobuf.plan_io(target, io, placement)
        bases = [target.io_address(region) for region in plan.regions]
        defines = [f"-DET_IO_BASE{index or ''}={base:#x}" for index, base in enumerate(bases)]
        (workdir / "glue.c").write_text(glue_text)
        (workdir / "link.ld").write_text(_linker_script(target))
        harness_cc = [fw.linker, *fw.ldflags, *HARNESS_CFLAGS, "-I", str(COMMON_DIR)]
        harness = [cached_object(target.name, _startup_source(fw.startup), harness_cc),
                   cached_object(target.name, COMMON_DIR / "semihost.c", harness_cc),
                   cached_object(target.name, COMMON_DIR / "harness_semihost.c", [*harness_cc, *defines])]
        run_tool([*harness_cc, "-c", "glue.c", "-o", "glue.o"], cwd=workdir, outcome=Outcome.RUNTIME_ERROR)

        link_image(target, workdir, objects, harness, fw.libs)
        return BuildResult(path=workdir / "image.elf", workdir=workdir,
                           info={**placement_info(plan), "emulator": tool_version(target.runner.program)},
                           placement=Placement(plan.region_of("weights"), plan.region_of("activations")))

    # --- run ------------------------------------------------------------------------------
    def run(self, build: BuildResult, io: KernelIO, timeout_s: float | None = None) -> tuple[dict, bytes]:
        """Run the image once: (measured values, raw output bytes)."""
        target, workdir = self.target, build.workdir
        plan = iobuf.plan_io(target, io, build.placement)
        symbols = elf.symbols(build.path)
        try:
            start, stop = symbols["et_mark_start"] & ~1, symbols["et_mark_stop"] & ~1
        except KeyError as exc:
            raise MeasureError(Outcome.RUNTIME_ERROR, f"image lacks marker symbol {exc}") from None
        loaders = []
        for index, (region, data) in enumerate(zip(plan.regions, iobuf.pack_segments(io, plan))):
            (workdir / f"in{index}.bin").write_bytes(data)
            loaders += ["-device", f"loader,file=in{index}.bin,addr={target.io_address(region):#x},force-raw=on"]
        for name in ("out.bin", "counts.txt"):
            (workdir / name).unlink(missing_ok=True)
        measure_mix = int(target.cost is not None)
        plugin = f"{plugin_path()},start={start:#x},stop={stop:#x},out=counts.txt,pcs={measure_mix},mem={measure_mix}"
        args = emulator_command(target, "image.elf", loaders, plugin)
        timeout = timeout_s or target.runner.timeout_s
        try:
            proc = subprocess.run(args, cwd=workdir, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise MeasureError(Outcome.TIMEOUT, f"no exit within {timeout:.1f} s; QEMU was killed") from None
        if proc.returncode == EXIT_FAULT:
            raise MeasureError(Outcome.CRASH, "the kernel faulted (HardFault/BusFault/UsageFault)")
        if killed_from_outside(proc.returncode):
            raise MeasureError(Outcome.EMULATOR_LOST, f"QEMU was killed by signal {-proc.returncode} "
                               f"({signal.Signals(-proc.returncode).name}) from outside: {proc.stderr.strip()[-300:]}")
        if proc.returncode < 0:
            raise MeasureError(Outcome.CRASH, f"QEMU died with signal {-proc.returncode}: {proc.stderr.strip()[-300:]}")
        if proc.returncode != EXIT_OK:
            what = {EXIT_BAD_IO: "the harness rejected the I/O block",
                    EXIT_OUTPUT_FAILED: "the harness could not write its output"}.get(proc.returncode, "QEMU failed")
            raise MeasureError(Outcome.RUNTIME_ERROR, f"{what} (exit {proc.returncode}) {proc.stderr.strip()[-300:]}")
        counts = _read_counts(workdir / "counts.txt")
        if len(counts.regions) != 2:
            raise MeasureError(Outcome.RUNTIME_ERROR, f"expected 2 counted regions, the plugin saw {len(counts.regions)}")
        raw = (workdir / "out.bin").read_bytes() if (workdir / "out.bin").exists() else b""
        values = {"instructions": counts.regions[1] - counts.regions[0]}
        if target.cost is not None:
            values.update(self.estimate(build, counts))
        return values, raw

    def estimate(self, build: BuildResult, counts: "PluginCounts") -> dict:
        """Estimated cycles and energy of the kernel (HAL cost model) from its instruction
        mix: the mix of the measured region minus that of the empty calibration region, so
        it sums to exactly the instruction count reported."""
        cost = self.target.cost
        listing = mix.disassemble(cost, build.path, build.workdir)
        a64 = elf.is_aarch64(build.path)
        (empty, empty_unlisted), (full, unlisted) = (mix.instruction_mix(pcs, listing, a64) for pcs in counts.pcs[:2])
        if unlisted or empty_unlisted:
            raise MeasureError(Outcome.RUNTIME_ERROR,
                               f"{unlisted + empty_unlisted} executed instructions are not in the disassembly")
        classes = {name: full.get(name, 0) - empty.get(name, 0) for name in full}
        classes = {name: n for name, n in classes.items() if n}
        instructions = counts.regions[1] - counts.regions[0]
        if any(n < 0 for n in classes.values()) or sum(classes.values()) != instructions:
            raise MeasureError(Outcome.RUNTIME_ERROR, f"per-PC counts {classes} do not add up to {instructions} instructions")
        empty_access, full_access = (mix.memory_accesses(pcs, listing, counts.addresses, a64, self.target.memory)
                                     for pcs in counts.pcs[:2])
        accesses = {name: full_access.get(name, 0) - empty_access.get(name, 0) for name in full_access}
        accesses = {name: n for name, n in accesses.items() if n}
        # Priced by the HAL as a stored trial's estimates are recomputed (app/identity.py).
        return {**self.target.estimated_values(classes, accesses), "mix": classes, "accesses": accesses}


def placement_info(plan: iobuf.IoPlan) -> dict:
    """What a trial records about where its buffers lived (io_region: the I/O block's
    header and activations, as before placement was tunable)."""
    return {"io_region": plan.regions[0], "activations_region": plan.region_of("activations"),
            "weights_region": plan.region_of("weights")}


@dataclass(frozen=True)
class PluginCounts:
    regions: tuple[int, ...]
    pcs: tuple[dict[int, int], ...]  # per region: PC -> executions inside it (pcs=1 only)
    addresses: dict  # PC -> the last data address it accessed (mem=1 only)


def _read_counts(path: Path) -> PluginCounts:
    if not path.exists():
        raise MeasureError(Outcome.RUNTIME_ERROR, "the instruction-count plugin wrote no counts")
    regions, pcs, addresses = [], {}, {}
    for line in path.read_text().splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "region":
            regions.append(int(fields[1]))
        elif fields[0] == "pc":
            pcs.setdefault(int(fields[1]), {})[int(fields[2], 16)] = int(fields[3])
        elif fields[0] == "addr":
            addresses[int(fields[1], 16)] = int(fields[2], 16)
        elif fields[0] == "pcs_dropped":
            raise MeasureError(Outcome.RUNTIME_ERROR, f"the plugin ran out of per-PC counters ({fields[1]} dropped)")
    return PluginCounts(tuple(regions), tuple(pcs.get(i, {}) for i in range(len(regions))), addresses)
