"""The measuring pipeline: what to measure, how it is built, where it runs, what came of it.

Every measurement edgetune makes goes through here: a tuning trial, the check of a tuned model
layer against TFLite Micro, an export measured and `verify`d, a model export run whole, the
plain loop a tuned kernel is compared with. Its seams are frozen values:

- `MeasureInput`: the program to build (`VariantProgram`: one rendered variant of a kernel;
  `ExportProgram`: a kernel as an exported folder builds it; `LinkedProgram`: objects built
  elsewhere, a model export's, with the glue that calls them) and the `Run`s to make of it,
  each with the buffers it loads and what its outputs must be (`Expected`).
- `Builder`: compiles and links a program through the target runner's content-addressed
  build cache (targets/build.py, buildcache.py); a failure raises MeasureError.
- `Device`: runs a build on the target (QEMU, a serial board, the host, qemu-user), one run
  per device slot at a time; several variants per image through `targets.batch`.
- `MeasureResult`: the build, each run's values, raw and unpacked outputs and what is wrong
  with them, and the closed `Outcome` (tuner.Outcome) of the whole.

`Pipeline.measure` is the one build -> run -> compare loop. Rendering is the caller's (a
render error is the caller's to classify), so the pipeline never sees a configuration.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from edgetune.codegen import Kernel, KernelIO, RenderedKernel
from edgetune.hal import Placement
from edgetune.tuner import Outcome

from . import iobuf
from .batch import BatchResults, Variant, measure_batch
from .build import Runner
from .buildcache import CachedFailure
from .toolchain import BuildResult, MeasureError


# --- what to build -------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class VariantProgram:
    """One rendered variant of `kernel` for `shape`: compiled as it says, linked with the glue
    that calls its entry point (any source: a configured variant, the plain loop, a library's
    code under the kernel's declaration)."""

    kernel: Kernel
    shape: dict
    rendered: RenderedKernel


@dataclass(frozen=True, eq=False)
class ExportProgram:
    """`kernel` for `shape` as the exported folder builds it: through the shape dispatcher,
    or `direct`ly as a tuning run calls it."""

    folder: Path
    kernel: Kernel
    shape: dict
    direct: bool = False


@dataclass(frozen=True)
class LinkedProgram:
    """Objects built elsewhere (a model export's Make fragment) linked with `glue`, its buffers
    where `placement` says. Not cached: the objects are not content-keyed."""

    objects: tuple[Path, ...]
    glue: str
    placement: Placement | None = None


Program = VariantProgram | ExportProgram | LinkedProgram

# (output buffer's name, what the run gave, what it must be) -> what is wrong ("" or None: nothing)
Compare = Callable[[str, np.ndarray, object], "str | None"]


@dataclass(frozen=True, eq=False)
class Expected:
    """What a run's outputs must be: per output buffer of `layout` (None: not checked), judged
    by `compare`. `layout` is the buffers the raw output is unpacked by (None: the run's own;
    a variant fed packed weights is judged on the plain buffers its reference was taken on)."""

    outputs: tuple
    compare: Compare
    layout: KernelIO | None = None


@dataclass(frozen=True, eq=False)
class Run:
    """One run of a build: the buffers the harness loads (as deployed), what must come out
    (None: nothing is checked; the outputs are returned)."""

    io: KernelIO
    expected: Expected | None = None


@dataclass(frozen=True, eq=False)
class MeasureInput:
    program: Program
    runs: tuple[Run, ...]


# --- what came of it -------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class RunOutput:
    values: dict  # what the run measured (its runner's `measures`)
    raw: bytes
    outputs: tuple[np.ndarray, ...]  # the raw bytes unpacked (empty when they could not be)
    problem: str = ""  # how the outputs differ from the expected ones ("": they do not, or unchecked)
    seconds: float = 0.0  # wall time of the run itself


@dataclass(frozen=True, eq=False)
class MeasureResult:
    """A measurement: its build (None when it failed to build), the runs made in order (a fault
    ends them: the faulting run is not among them), the fault's outcome and message, and
    what is known about the build (compiler, cache use, run seconds)."""

    build: BuildResult | None
    runs: tuple[RunOutput, ...] = ()
    fault: Outcome | None = None
    message: str = ""  # the fault's
    info: dict = field(default_factory=dict)

    @property
    def outcome(self) -> Outcome:
        if self.fault is not None:
            return self.fault
        return Outcome.WRONG_ANSWER if any(run.problem for run in self.runs) else Outcome.OK

    @property
    def error(self) -> str:
        """Why it is not OK (as a Trial's error): the fault's message, or the first wrong
        answer ("": it is OK)."""
        return self.message if self.fault is not None else next((r.problem for r in self.runs if r.problem), "")

    @property
    def first_wrong(self) -> int | None:
        """The index of the first run whose outputs are wrong, or None."""
        return next((index for index, run in enumerate(self.runs) if run.problem), None)

    @property
    def values(self) -> dict:
        """The first run's values with the build's (code and RAM bytes)."""
        build = self.build.values if self.build is not None else {}
        return {**(self.runs[0].values if self.runs else {}), **build}


# --- the stages ----------------------------------------------------------------------------------
class Builder:
    """Makes a program runnable with the target's runner: compiled and linked through its
    content-addressed cache (a variant built before is copied, one that failed fails again
    the same way, as CachedFailure)."""

    def __init__(self, runner: Runner):
        self.runner = runner

    def build(self, program: Program, io: KernelIO, workdir: Path) -> BuildResult:
        if isinstance(program, VariantProgram):
            return self.runner.build(program.kernel, program.shape, io, program.rendered, workdir)
        if isinstance(program, ExportProgram):
            return self.runner.build_export(program.kernel, program.shape, io, program.folder, workdir,
                                            direct=program.direct)
        return self.runner.link(workdir, list(program.objects), program.glue, io, program.placement)


class Device:
    """Where builds run: the target's runner, each of its slots (an emulator, the host's timing
    slot, a board) serving one run at a time; builds are not limited and overlap with runs."""

    def __init__(self, runner: Runner):
        self.runner = runner
        self.slots = threading.Semaphore(runner.slots())

    def run(self, build: BuildResult, io: KernelIO, timeout_s: float | None) -> tuple[dict, bytes, float]:
        """(values, raw output, wall seconds of the run); a fault raises MeasureError."""
        with self.slots:
            started = time.monotonic()
            values, raw = self.runner.run(build, io, timeout_s=timeout_s)
            return values, raw, time.monotonic() - started


def judge(run: Run, raw: bytes) -> tuple[tuple[np.ndarray, ...], str]:
    """The run's outputs unpacked, and what is wrong with them ("": nothing, or unchecked)."""
    layout = run.expected.layout if run.expected is not None and run.expected.layout is not None else run.io
    try:
        outputs = tuple(iobuf.unpack_outputs(layout, raw))
    except ValueError as exc:
        return (), "" if run.expected is None else str(exc)
    if run.expected is None:
        return outputs, ""
    for buf, got, want in zip(layout.outputs(), outputs, run.expected.outputs):
        problem = None if want is None else run.expected.compare(buf.name, got, want)
        if problem:
            return outputs, problem
    return outputs, ""


Timeout = Callable[[], "float | None"]  # asked just before each run: a limit may tighten as runs finish


class Pipeline:
    """Builder and device for one target's runner."""

    def __init__(self, runner: Runner):
        self.runner = runner
        self.builder = Builder(runner)
        self.device = Device(runner)

    def measure(self, measure_input: MeasureInput, workdir: Path, timeout_s: Timeout = lambda: None,
                each: Callable[[int, RunOutput], None] | None = None) -> MeasureResult:
        """Build the input's program (loaded as its first run loads it), make every run, judge
        each; `each(index, output)` is told of every run as it completes. A fault of the
        build or of a run ends the measurement (its outcome: the fault's)."""
        runs = measure_input.runs
        try:
            build = self.builder.build(measure_input.program, runs[0].io, workdir)
        except MeasureError as exc:
            # A failure replayed from the cache says so (nothing was built).
            return MeasureResult(None, fault=exc.outcome, message=exc.message,
                                 info={"build_cache": "hit"} if isinstance(exc, CachedFailure) else {})
        info, done = dict(build.info), []
        for index, run in enumerate(runs):
            try:
                values, raw, seconds = self.device.run(build, run.io, timeout_s())
            except MeasureError as exc:
                return MeasureResult(build, tuple(done), exc.outcome, exc.message, info)
            if index == 0:
                info["seconds_run"] = round(seconds, 3)
            outputs, problem = judge(run, raw)
            done.append(RunOutput(values, raw, outputs, problem, seconds))
            if each is not None:
                each(index, done[-1])
        return MeasureResult(build, tuple(done), info=info)

    def measure_batch(self, kernel: Kernel, shape: dict, variants: Sequence[Variant], workdir: Path,
                      timeout_s: Callable[[int], float]) -> BatchResults:
        """Several variants of one workload in as few images as fit, each booted once
        (targets.batch), on this pipeline's device slots; the caller judges each output."""
        return measure_batch(self.runner, kernel, shape, variants, workdir, timeout_s, self.device.slots)


# --- inputs every caller builds the same way -----------------------------------------------------
def reference_check(kernel: Kernel, shape: dict, io: KernelIO, expected: Sequence[np.ndarray] | None = None) -> Expected:
    """Outputs judged as tuning judges them: against the kernel's reference on `io` (or the
    `expected` outputs given, e.g. TFLite Micro's), bit-exact or within the kernel's own
    float tolerance (kernel.compare)."""
    want = tuple(kernel.reference(shape, io) if expected is None else expected)
    return Expected(want, lambda name, got, out: kernel.compare(shape, io, name, got, out), io)


def variant_input(kernel: Kernel, shape: dict, rendered: RenderedKernel, deployed: KernelIO,
                  check: Expected | None) -> MeasureInput:
    """One run of a rendered variant on `deployed`, judged by `check`."""
    return MeasureInput(VariantProgram(kernel, shape, rendered), (Run(deployed, check),))


def failure_text(result: MeasureResult) -> str:
    """Why a measurement gave no figure: 'does not build' or 'does not run', the outcome and
    the first lines of what the tool said."""
    detail = " | ".join(result.message.splitlines()[:3])
    verb = "build" if result.fault in (Outcome.COMPILE_ERROR, Outcome.TOO_LARGE) else "run"
    return f"does not {verb}: {result.fault.value}: {detail}"
