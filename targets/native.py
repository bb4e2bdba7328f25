"""Build kernels for the machine edgetune runs on and time them natively.

Timing follows what held up when measured (docs/measurements.md, "x86 host"): 64-byte
aligned buffers, batches of at least 2 ms, the median of 15 batches reported in ns. Runs
take the machine's single timing slot, so two timed runs never overlap.
"""
from __future__ import annotations

import errno
import subprocess
import time
from pathlib import Path

from edgetune.codegen import KernelIO
from edgetune.firmware import COMMON_DIR, HOST_DIR
from edgetune.hal import Placement, Target
from edgetune.hal.loader import RUNNER_KINDS
from edgetune.tuner import Outcome

from . import iobuf
from .build import EXIT_BAD_IO, EXIT_OK, EXIT_OUTPUT_FAILED, Runner
from .toolchain import BuildResult, MeasureError, cached_object, require_program, run_tool

HARNESS_CC = ("cc", "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror")
TIMING_BATCHES = 15
EXEC_ATTEMPTS = 20  # starting an executable another thread's fork briefly holds open (see start_harness)


class NativeRunner(Runner):
    """The machine edgetune runs on, timed."""

    kind = "native"
    measures = RUNNER_KINDS[kind].measures
    measures_this_machine = True

    @classmethod
    def default_tolerance_pct(cls, target: Target) -> float:
        return 15.0  # host timing drifts a few per cent run to run (docs/ci.md)

    def slots(self) -> int:
        return 1  # timing needs the machine to itself

    @classmethod
    def programs(cls, target: Target) -> tuple[str, ...]:
        return (*super().programs(target), "cc")  # the native harness is built with cc

    def check_tools(self) -> None:
        require_program("cc")
        for compiler in self.target.compilers:
            require_program(compiler.command)

    def link(self, workdir: Path, objects: list[Path], glue_text: str, io: KernelIO,
             placement: Placement | None = None) -> BuildResult:
        (workdir / "glue.c").write_text(glue_text)
        harness_cc = [*HARNESS_CC, "-I", str(COMMON_DIR)]
        harness = cached_object("host", HOST_DIR / "harness_native.c", harness_cc)
        run_tool([*harness_cc, "-c", "glue.c", "-o", "glue.o"], cwd=workdir, outcome=Outcome.RUNTIME_ERROR)
        run_tool(["cc", *map(str, objects), "glue.o", str(harness), "-o", "harness"], cwd=workdir)
        return BuildResult(path=workdir / "harness", workdir=workdir)

    def run(self, build: BuildResult, io: KernelIO, timeout_s: float | None = None) -> tuple[dict, bytes]:
        workdir = build.workdir
        (workdir / "in.bin").write_bytes(iobuf.pack(io))
        (workdir / "out.bin").unlink(missing_ok=True)
        timeout = timeout_s or self.target.runner.timeout_s
        try:
            proc = start_harness([str(build.path), "in.bin", "out.bin", str(TIMING_BATCHES)], cwd=workdir,
                                 capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise MeasureError(Outcome.TIMEOUT, f"no exit within {timeout:.1f} s; the process was killed") from None
        if proc.returncode < 0:
            raise MeasureError(Outcome.CRASH, f"the kernel died with signal {-proc.returncode}")
        if proc.returncode != EXIT_OK:
            what = {EXIT_BAD_IO: "the harness rejected the I/O block",
                    EXIT_OUTPUT_FAILED: "the harness could not write its output"}.get(proc.returncode, "the harness failed")
            raise MeasureError(Outcome.RUNTIME_ERROR, f"{what} (exit {proc.returncode})")
        values = {}
        for line in proc.stdout.splitlines():
            key, _, value = line.partition(" ")
            if key in ("time_ns", "time_ns_min"):
                values[key] = float(value)
        if "time_ns" not in values:
            raise MeasureError(Outcome.RUNTIME_ERROR, "the harness printed no time_ns")
        return values, (workdir / "out.bin").read_bytes()


def start_harness(args: list[str], **options) -> subprocess.CompletedProcess:
    """subprocess.run, retried while exec fails with ETXTBSY: the harness was just written
    (a build cache hit copies it into the trial's folder) and a subprocess another thread
    forked meanwhile holds the written file open until its own exec closes it."""
    for attempt in range(1, EXEC_ATTEMPTS):
        try:
            return subprocess.run(args, **options)
        except OSError as exc:
            if exc.errno != errno.ETXTBSY:
                raise
            time.sleep(0.005 * attempt)
    return subprocess.run(args, **options)
