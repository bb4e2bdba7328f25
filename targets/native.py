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
from .batch import as_table
from .build import EXIT_BAD_IO, EXIT_OK, EXIT_OUTPUT_FAILED, EXIT_OVERRUN, OVERRUN_MESSAGE, Runner
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
        (workdir / "glue.c").write_text(as_table(glue_text, ()))
        harness_cc = [*HARNESS_CC, "-I", str(COMMON_DIR)]
        harness = cached_object("host", HOST_DIR / "harness_native.c", harness_cc)
        run_tool([*harness_cc, "-c", "glue.c", "-o", "glue.o"], cwd=workdir, outcome=Outcome.RUNTIME_ERROR)
        run_tool(["cc", *map(str, objects), "glue.o", str(harness), "-o", "harness"], cwd=workdir)
        return BuildResult(path=workdir / "harness", workdir=workdir)

    batches = True

    def run(self, build: BuildResult, io: KernelIO, timeout_s: float | None = None) -> tuple[dict, bytes]:
        done, stopped = self.run_batch(build, [io], timeout_s or self.target.runner.timeout_s)
        if stopped is not None:
            raise stopped
        return done[0]

    def run_batch(self, build: BuildResult, ios: list[KernelIO], timeout_s: float):
        workdir = build.workdir
        files = []
        for v, io in enumerate(ios):
            (workdir / f"in{v}.bin").write_bytes(iobuf.pack(io))
            (workdir / f"out{v}.bin").unlink(missing_ok=True)
            files += [f"in{v}.bin", f"out{v}.bin"]
        stopped = None
        try:
            proc = start_harness([str(build.path), str(TIMING_BATCHES), *files], cwd=workdir,
                                 capture_output=True, text=True, timeout=timeout_s)
            stdout = proc.stdout
            stopped = _failure(proc.returncode)
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            stopped = MeasureError(Outcome.TIMEOUT, f"no exit within {timeout_s:.1f} s; the process was killed")
        done = []
        for v, values in enumerate(_times(stdout)[:len(ios)]):
            if "time_ns" not in values:
                return done, MeasureError(Outcome.RUNTIME_ERROR, "the harness printed no time_ns")
            done.append((values, (workdir / f"out{v}.bin").read_bytes()))
        if stopped is None and len(done) != len(ios):
            stopped = MeasureError(Outcome.RUNTIME_ERROR, f"the harness timed {len(done)} of {len(ios)} variants")
        return done, stopped


def _failure(returncode: int) -> MeasureError | None:
    if returncode < 0:
        return MeasureError(Outcome.CRASH, f"the kernel died with signal {-returncode}")
    if returncode == EXIT_OVERRUN:
        return MeasureError(Outcome.OVERRUN, OVERRUN_MESSAGE)
    if returncode != EXIT_OK:
        what = {EXIT_BAD_IO: "the harness rejected the I/O block",
                EXIT_OUTPUT_FAILED: "the harness could not write its output"}.get(returncode, "the harness failed")
        return MeasureError(Outcome.RUNTIME_ERROR, f"{what} (exit {returncode})")
    return None


def _times(stdout: str) -> list[dict]:
    """Each variant's figures, from its "variant" line to the next."""
    variants: list[dict] = []
    for line in stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "variant":
            variants.append({})
        elif key in ("time_ns", "time_ns_min") and variants:
            variants[-1][key] = float(value)
    return variants


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
