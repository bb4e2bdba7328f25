"""Run kernels as AArch64 Linux programs in QEMU's user mode (`qemu-aarch64`) and count them.

For a board that runs Linux (a Raspberry Pi 4, a Jetson, a phone): the variant is built with
the Linux toolchain and linked with the host harness (firmware/host/harness_native.c) into a
static AArch64 executable, which qemu-aarch64 runs as a process: no firmware image, memory
map or semihosting, and a run starts faster than a bare-metal machine boots (FACTS:
~22 ms against ~38 ms for qemu-system-aarch64).

Measurement: the instruction-count plugin of the QEMU runner (targets/qemu/insn_count.c)
counts from the kernel's first instruction to the instruction its first call returns to.
Both addresses come from the linked executable: the glue is compiled without sibling calls,
so its one branch-with-link (`bl`) is the call of the kernel; the region it opens and
closes holds the kernel's own instructions (its callees included, the glue's argument
set-up not), exactly and identically run to run. The harness calls the kernel again to time
it; the plugin records each call and the first one is reported, as a firmware's single call.
The programs are fixed here, never read from the target file: qemu-aarch64, the AArch64
Linux GCC (linker) and objdump, and the host C compiler (the plugin).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from edgetune.codegen import KernelIO
from edgetune.firmware import COMMON_DIR, HOST_DIR
from edgetune.hal import Placement, Target
from edgetune.hal.loader import RUNNER_KINDS
from edgetune.tuner import Outcome

from . import iobuf
from .batch import as_table
from .build import EXIT_BAD_IO, EXIT_OK, EXIT_OUTPUT_FAILED, EXIT_OVERRUN, OVERRUN_MESSAGE, Runner
from .qemu import plugin_path
from .toolchain import BuildResult, MeasureError, cached_object, killed_from_outside, require_program, run_tool

EMULATOR = "qemu-aarch64"
LINKER = "aarch64-linux-gnu-gcc"
OBJDUMP = "aarch64-linux-gnu-objdump"
HARNESS_CFLAGS = ("-O2", "-std=c99", "-Wall", "-Wextra", "-Werror")
# -fno-optimize-sibling-calls: the kernel's call stays a `bl` with an instruction after it
# (a tail call would return straight to main, past any address the plugin could stop at).
GLUE_CFLAGS = (*HARNESS_CFLAGS, "-fno-optimize-sibling-calls")
# One timing batch: the harness's timing is not what this runner reports.
TIMING_BATCHES = "1"
# objdump's line of a call: "  400a3c:\t94000010 \tbl\t400a7c <name>"
CALL_RE = re.compile(r"^\s*([0-9a-f]+):\s+[0-9a-f]{8}\s+bl\s+([0-9a-f]+)\b")
ADDRESS_RE = re.compile(r"^\s*([0-9a-f]+):\s+[0-9a-f]{8}\s")
GLUE_RUN = "et_variant_run_0"


class QemuUserRunner(Runner):
    """An AArch64 Linux process in qemu-aarch64, counted by the instruction-count plugin."""

    kind = "qemu-user"
    measures = RUNNER_KINDS[kind].measures
    counts_exactly = True

    @classmethod
    def default_tolerance_pct(cls, target: Target) -> float:
        return 0.0  # the plugin's counts are identical run to run

    def slots(self) -> int:
        return max(1, os.cpu_count() or 1)  # counts do not depend on host load

    @classmethod
    def programs(cls, target: Target) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*super().programs(target), LINKER, OBJDUMP, EMULATOR, "cc")))

    def check_tools(self) -> None:
        for program in self.programs(self.target):
            require_program(program)

    def link(self, workdir: Path, objects: list[Path], glue_text: str, io: KernelIO,
             placement: Placement | None = None) -> BuildResult:
        (workdir / "glue.c").write_text(as_table(glue_text, ()))
        harness_cc = [LINKER, *HARNESS_CFLAGS, "-I", str(COMMON_DIR)]
        harness = cached_object("qemu-user", HOST_DIR / "harness_native.c", harness_cc)
        run_tool([LINKER, *GLUE_CFLAGS, "-I", str(COMMON_DIR), "-c", "glue.c", "-o", "glue.o"], cwd=workdir,
                 outcome=Outcome.RUNTIME_ERROR)
        run_tool([LINKER, "-static", "-no-pie", *map(str, objects), "glue.o", str(harness), "-o", "harness"],
                 cwd=workdir)
        return BuildResult(path=workdir / "harness", workdir=workdir)

    def run(self, build: BuildResult, io: KernelIO, timeout_s: float | None = None) -> tuple[dict, bytes]:
        workdir = build.workdir
        start, stop = kernel_call(build.path, workdir)
        (workdir / "in.bin").write_bytes(iobuf.pack(io))
        for name in ("out.bin", "counts.txt"):
            (workdir / name).unlink(missing_ok=True)
        cpu = ["-cpu", self.target.runner.cpu] if self.target.runner.cpu else []
        plugin = f"{plugin_path()},start={start:#x},stop={stop:#x},out=counts.txt"
        args = [EMULATOR, *cpu, "-plugin", plugin, "./harness", TIMING_BATCHES, "in.bin", "out.bin"]
        timeout = timeout_s or self.target.runner.timeout_s
        try:
            proc = subprocess.run(args, cwd=workdir, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise MeasureError(Outcome.TIMEOUT, f"no exit within {timeout:.1f} s; qemu-aarch64 was killed") from None
        check_exit(proc)
        regions = counted_calls(workdir / "counts.txt")
        if not regions:
            raise MeasureError(Outcome.RUNTIME_ERROR, "the plugin counted no call of the kernel")
        return {"instructions": regions[0]}, (workdir / "out.bin").read_bytes()


def kernel_call(executable: Path, workdir: Path) -> tuple[int, int]:
    """(the kernel's entry, the address its call returns to): the one `bl` of the variant's
    glue (et_glue_run, named et_variant_run_0 in the harness's table of one)."""
    listing = run_tool([OBJDUMP, "-d", f"--disassemble={GLUE_RUN}", executable.name], cwd=workdir,
                       outcome=Outcome.RUNTIME_ERROR).stdout
    lines = listing.splitlines()
    for number, line in enumerate(lines):
        call = CALL_RE.match(line)
        if call:
            after = next((ADDRESS_RE.match(rest) for rest in lines[number + 1:] if ADDRESS_RE.match(rest)), None)
            if after is None:
                break
            return int(call.group(2), 16), int(after.group(1), 16)
    raise MeasureError(Outcome.RUNTIME_ERROR, f"{GLUE_RUN} holds no call of the kernel followed by an instruction")


def counted_calls(path: Path) -> list[int]:
    """The plugin's regions (one per call of the kernel, the first 64), in call order."""
    if not path.exists():
        raise MeasureError(Outcome.RUNTIME_ERROR, "the instruction-count plugin wrote no counts")
    return [int(fields[1]) for fields in map(str.split, path.read_text().splitlines())
            if len(fields) == 2 and fields[0] == "region"]


def check_exit(proc: subprocess.CompletedProcess) -> None:
    """A guest signal is the kernel's fault (qemu-user dies of the signal the guest got);
    a signal from outside is a lost emulator; a harness status names what it rejected."""
    if killed_from_outside(proc.returncode):
        raise MeasureError(Outcome.EMULATOR_LOST, f"qemu-aarch64 was killed by signal {-proc.returncode} "
                           f"({signal.Signals(-proc.returncode).name}) from outside")
    if proc.returncode < 0:
        raise MeasureError(Outcome.CRASH, f"the kernel died with signal {-proc.returncode} "
                           f"({signal.Signals(-proc.returncode).name}): {proc.stderr.strip()[-300:]}")
    if proc.returncode == EXIT_OVERRUN:
        raise MeasureError(Outcome.OVERRUN, OVERRUN_MESSAGE)
    if proc.returncode != EXIT_OK:
        what = {EXIT_BAD_IO: "the harness rejected the I/O block",
                EXIT_OUTPUT_FAILED: "the harness could not write its output"}.get(proc.returncode, "the harness failed")
        raise MeasureError(Outcome.RUNTIME_ERROR, f"{what} (exit {proc.returncode}) {proc.stderr.strip()[-300:]}")
