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

from edgetune.codegen import KernelIO
from edgetune.firmware import COMMON_DIR
from edgetune.hal import Placement, Target
from edgetune.hal.loader import RUNNER_KINDS
from edgetune.tuner import Outcome

from . import elf, iobuf, mix
from .batch import as_table, pack_io, split_outputs
from .build import EXIT_BAD_IO, EXIT_FAULT, EXIT_OK, EXIT_OUTPUT_FAILED, EXIT_OVERRUN, OVERRUN_MESSAGE, Runner
from .image import HARNESS_CFLAGS, link_image, linker_script, placement_info, startup_source
from .toolchain import (BuildResult, MeasureError, cache_dir, cached_object, killed_from_outside, require_program,
                        run_tool, tool_version)

PLUGIN_SOURCE = Path(__file__).parent / "qemu" / "insn_count.c"


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


def emulator_command(target: Target, image: str, loaders: list[str], plugin: str) -> list[str]:
    """The QEMU command line of one run. -nodefaults: QEMU creates none of its default
    devices (serial port, monitor, network card, display adapter). The harness talks to the
    host through semihosting only, and the `virt` machine's default virtio NIC would make
    QEMU load a network boot ROM (efi-virtio.rom) that a minimal install does not have."""
    cpu = ["-cpu", target.runner.cpu] if target.runner.cpu else []
    return [target.runner.program, "-M", target.runner.machine, *cpu, "-nodefaults", "-display", "none",
            "-semihosting-config", "enable=on,target=native", "-kernel", image, *loaders, "-plugin", plugin]


class QemuRunner(Runner):
    """Emulated boards in qemu-system-arm / qemu-system-aarch64 (one QEMU process per run)."""

    kind = "qemu"
    measures = RUNNER_KINDS[kind].measures
    counts_exactly = True

    def __init__(self, target: Target):
        if target.firmware is None:
            raise ValueError(f"target {target.name} has no [firmware] table")
        super().__init__(target)

    @classmethod
    def default_tolerance_pct(cls, target: Target) -> float:
        return 0.0  # instruction counts are identical run to run

    def slots(self) -> int:
        # Counts do not depend on host load, so every core can run an emulator at once.
        return max(1, os.cpu_count() or 1)

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
        (workdir / "glue.c").write_text(as_table(glue_text, bases))
        (workdir / "link.ld").write_text(linker_script(target))
        harness_cc = [fw.linker, *fw.ldflags, *HARNESS_CFLAGS, "-I", str(COMMON_DIR)]
        harness = [cached_object(target.name, startup_source(fw.startup), harness_cc),
                   cached_object(target.name, COMMON_DIR / "semihost.c", harness_cc),
                   cached_object(target.name, COMMON_DIR / "harness_semihost.c", [*harness_cc, *defines])]
        run_tool([*harness_cc, "-c", "glue.c", "-o", "glue.o"], cwd=workdir, outcome=Outcome.RUNTIME_ERROR)

        link_image(target, workdir, objects, harness, fw.libs)
        return BuildResult(path=workdir / "image.elf", workdir=workdir,
                           info={**placement_info(plan), "emulator": tool_version(target.runner.program)},
                           placement=Placement(plan.region_of("weights"), plan.region_of("activations")))

    # --- run ------------------------------------------------------------------------------
    batches = True

    def run(self, build: BuildResult, io: KernelIO, timeout_s: float | None = None) -> tuple[dict, bytes]:
        """Run the image once: (measured values, raw output bytes)."""
        done, stopped = self.run_batch(build, [io], timeout_s or self.target.runner.timeout_s)
        if stopped is not None:
            raise stopped
        return done[0]

    def run_batch(self, build: BuildResult, ios: list[KernelIO], timeout_s: float):
        target, workdir = self.target, build.workdir
        plan = iobuf.plan_io(target, ios[0], build.placement)
        symbols = elf.symbols(build.path)
        try:
            start, stop = symbols["et_mark_start"] & ~1, symbols["et_mark_stop"] & ~1
        except KeyError as exc:
            return [], MeasureError(Outcome.RUNTIME_ERROR, f"image lacks marker symbol {exc}")
        loaders = []
        for index, (region, data) in enumerate(zip(plan.regions, pack_io(ios, plan))):
            (workdir / f"in{index}.bin").write_bytes(data)
            loaders += ["-device", f"loader,file=in{index}.bin,addr={target.io_address(region):#x},force-raw=on"]
        for name in ("out.bin", "counts.txt"):
            (workdir / name).unlink(missing_ok=True)
        measure_mix = int(target.cost is not None)
        plugin = f"{plugin_path()},start={start:#x},stop={stop:#x},out=counts.txt,pcs={measure_mix},mem={measure_mix}"
        stopped = self._boot(emulator_command(target, "image.elf", loaders, plugin), workdir, timeout_s)
        try:
            counts = _read_counts(workdir / "counts.txt")
        except MeasureError as exc:
            return [], stopped or exc
        raw = (workdir / "out.bin").read_bytes() if (workdir / "out.bin").exists() else b""
        # A variant whose outputs are missing did not finish, even when its region closed: an
        # overrun is found after the stop marker, before the outputs are written.
        written = sum(1 for io, out in zip(ios, split_outputs(ios, raw))
                      if len(out) == sum(b.data.nbytes for b in io.outputs()))
        completed = min(max(0, len(counts.regions) - 1), written)
        if stopped is None and completed != len(ios):
            stopped = MeasureError(Outcome.RUNTIME_ERROR, f"expected {len(ios) + 1} counted regions, "
                                                          f"the plugin saw {len(counts.regions)}")
        try:
            executed = {pc for region in range(completed + 1) for pc in counts.pcs_in(region)}
            listing = mix.disassemble(target.cost, build.path, workdir, executed) if target.cost and completed else {}
            done = [(self._values(build, counts, listing, 1 + v), out)
                    for v, out in zip(range(min(completed, len(ios))), split_outputs(ios, raw))]
        except MeasureError as exc:
            return [], exc
        return done, stopped

    def _boot(self, args: list[str], workdir: Path, timeout: float) -> MeasureError | None:
        """Run QEMU to its end: None when the harness exited cleanly, else why it did not."""
        try:
            proc = subprocess.run(args, cwd=workdir, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return MeasureError(Outcome.TIMEOUT, f"no exit within {timeout:.1f} s; QEMU was killed")
        if proc.returncode == EXIT_FAULT:
            return MeasureError(Outcome.CRASH, "the kernel faulted (HardFault/BusFault/UsageFault)")
        if proc.returncode == EXIT_OVERRUN:
            return MeasureError(Outcome.OVERRUN, OVERRUN_MESSAGE)
        if killed_from_outside(proc.returncode):
            return MeasureError(Outcome.EMULATOR_LOST, f"QEMU was killed by signal {-proc.returncode} "
                                f"({signal.Signals(-proc.returncode).name}) from outside: {proc.stderr.strip()[-300:]}")
        if proc.returncode < 0:
            return MeasureError(Outcome.CRASH, f"QEMU died with signal {-proc.returncode}: {proc.stderr.strip()[-300:]}")
        if proc.returncode != EXIT_OK:
            what = {EXIT_BAD_IO: "the harness rejected the I/O block",
                    EXIT_OUTPUT_FAILED: "the harness could not write its output"}.get(proc.returncode, "QEMU failed")
            return MeasureError(Outcome.RUNTIME_ERROR, f"{what} (exit {proc.returncode}) {proc.stderr.strip()[-300:]}")
        return None

    def _values(self, build: BuildResult, counts: "PluginCounts", listing: dict, region: int) -> dict:
        values = {"instructions": counts.regions[region] - counts.regions[0]}
        if self.target.cost is not None:
            values.update(self.estimate(build, counts, listing, region))
        return values

    def estimate(self, build: BuildResult, counts: "PluginCounts", listing: dict, region: int = 1) -> dict:
        """Estimated cycles and energy of the kernel (HAL cost model) from its instruction
        mix: the mix of the measured region minus that of the empty calibration region, so
        it sums to exactly the instruction count reported."""
        a64 = elf.is_aarch64(build.path)
        (empty, empty_unlisted), (full, unlisted) = (mix.instruction_mix(counts.pcs_in(r), listing, a64)
                                                     for r in (0, region))
        if unlisted or empty_unlisted:
            raise MeasureError(Outcome.RUNTIME_ERROR,
                               f"{unlisted + empty_unlisted} executed instructions are not in the disassembly")
        classes = {name: full.get(name, 0) - empty.get(name, 0) for name in full}
        classes = {name: n for name, n in classes.items() if n}
        instructions = counts.regions[region] - counts.regions[0]
        if any(n < 0 for n in classes.values()) or sum(classes.values()) != instructions:
            raise MeasureError(Outcome.RUNTIME_ERROR, f"per-PC counts {classes} do not add up to {instructions} instructions")
        empty_access, full_access = (mix.memory_accesses(counts.pcs_in(r), listing, counts.addresses_in(r), a64,
                                                         self.target.memory) for r in (0, region))
        accesses = {name: full_access.get(name, 0) - empty_access.get(name, 0) for name in full_access}
        # Instruction fetches from a region with wait states are priced as its loads are.
        empty_fetch, full_fetch = (mix.instruction_fetches(counts.pcs_in(r), self.target.memory) for r in (0, region))
        for name, n in full_fetch.items():
            accesses[name] = accesses.get(name, 0) + n - empty_fetch.get(name, 0)
        accesses = {name: n for name, n in accesses.items() if n}
        # Priced by the HAL as a stored trial's estimates are recomputed (app/identity.py).
        return {**self.target.estimated_values(classes, accesses), "mix": classes, "accesses": accesses}


@dataclass(frozen=True)
class PluginCounts:
    regions: tuple[int, ...]
    pcs: dict  # region -> {PC: executions inside it} (pcs=1 only)
    region_addresses: dict  # region -> {PC: the last data address it accessed inside it} (mem=1 only)

    def pcs_in(self, region: int) -> dict[int, int]:
        return self.pcs.get(region, {})

    def addresses_in(self, region: int) -> dict[int, int]:
        return self.region_addresses.get(region, {})


def _read_counts(path: Path) -> PluginCounts:
    """The plugin's counts file. A run killed mid-way leaves the regions closed before it,
    each written whole before its "region" line: the per-PC lines of the region it was in
    have no region line and are never looked at."""
    if not path.exists():
        raise MeasureError(Outcome.RUNTIME_ERROR, "the instruction-count plugin wrote no counts")
    regions, pcs, addresses = [], {}, {}
    for line in path.read_text().split("\n")[:-1]:  # a last line without its newline was cut short
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "region":
            regions.append(int(fields[1]))
        elif fields[0] == "pc":
            pcs.setdefault(int(fields[1]), {})[int(fields[2], 16)] = int(fields[3])
        elif fields[0] == "raddr":
            addresses.setdefault(int(fields[1]), {})[int(fields[2], 16)] = int(fields[3], 16)
        elif fields[0] == "pcs_dropped":
            raise MeasureError(Outcome.RUNTIME_ERROR, f"the plugin ran out of per-PC counters ({fields[1]} dropped)")
    return PluginCounts(tuple(regions), pcs, addresses)
