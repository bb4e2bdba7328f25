"""The Runner contract, checked on every registered runner and on a fake one defined here.

The fake shows that a new runner is one module: it is a `Runner` subclass registered with
`register_runner` from this file, without editing edgetune. It "builds" as every runner
does (the shared compile step) and "measures" in-process by running the kernel's numpy
reference, so its trials go through the same checks as a board's.

Where the tools exist here the runners build and run a tiny kernel for real: QEMU, the host,
the serial board (its board is QEMU started by the flash command). Renode cannot be
installed on these machines: its check_tools says so before anything is built."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from edgetune.codegen import get_kernel
from edgetune.hal import Measures, RunnerSettings, Target, load_target
from edgetune.hal.model import RunnerKind
from edgetune.hal.loader import RUNNER_KINDS
from edgetune.evaluate import Evaluator
from edgetune.targets import get_target, runners, target_file
from edgetune.targets.build import Runner
from edgetune.targets.runners import register_runner, runner_class, runner_for, serving_class
from edgetune.targets.toolchain import BuildResult, MeasureError, ToolMissing, require_program
from edgetune.tuner import Outcome
from edgetune.verify import default_tolerance

from faulty import FaultyMatmul

SHAPE = "m=4,n=4,k=8"
CONFIG = {"tile_m": 2, "tile_n": 4, "unroll_k": 2, "vector": "c", "layout": "rowmajor", "compiler": "gcc", "opt": "O2"}


class FakeRunner(Runner):
    """An in-process board: the kernel is compiled (the shared build step), then "run" by
    computing the kernel's numpy reference; code that traps is a crash."""

    kind = "fake"
    measures = Measures("steps")

    def __init__(self, target: Target):
        super().__init__(target)
        self._built: dict = {}  # workdir -> (kernel, shape, source)

    @classmethod
    def default_tolerance_pct(cls, target: Target) -> float:
        return 1.0

    def slots(self) -> int:
        return 1

    def check_tools(self) -> None:
        for compiler in self.target.compilers:
            require_program(compiler.command)

    def build(self, kernel, shape, io, rendered, workdir):
        result = super().build(kernel, shape, io, rendered, workdir)
        self._built[result.workdir] = (kernel, dict(shape), rendered.source)
        return result

    def link(self, workdir, objects, glue_text, io, placement=None) -> BuildResult:
        return BuildResult(path=objects[0], workdir=workdir, info={"board": "fake"})

    def run(self, build, io, timeout_s=None):
        kernel, shape, source = self._built[build.workdir]
        if "__builtin_trap" in source:
            raise MeasureError(Outcome.CRASH, "the fake board trapped")
        outputs = kernel.reference(shape, io)
        raw = b"".join(np.ascontiguousarray(out).astype(buf.data.dtype.newbyteorder("<")).tobytes()
                       for out, buf in zip(outputs, io.outputs()))
        return {"steps": float(sum(out.size for out in outputs))}, raw


def renode_board() -> Target:
    """The emulated AN547 board described for Renode instead (never run here)."""
    return load_target(target_file("an547-serial"), overrides={
        "runner": {"kind": "renode"}, "renode": {"platform": "platforms/boards/an547.repl", "uart": "sysbus.uart0"}})


def fake_board() -> Target:
    return replace(get_target("host"), name="fake-board", runner=RunnerSettings(kind="fake", measures=FakeRunner.measures))


BOARDS = {"qemu": lambda: get_target("cortex-m55"), "native": lambda: get_target("host"),
          "qemu-user": lambda: get_target("cortex-a72-linux"),
          "serial": lambda: get_target("an547-serial"), "renode": renode_board, "fake": fake_board}
RUNNABLE = ["qemu", "native", "qemu-user", "serial", "fake"]  # renode: not installable here (see the last tests)


@pytest.fixture
def registry(monkeypatch):
    """The registry with the fake added through the public call, restored afterwards."""
    monkeypatch.setattr(runners, "RUNNERS", dict(runners.RUNNERS))
    assert register_runner(FakeRunner) is FakeRunner
    return runners.RUNNERS


def test_every_kind_the_hal_admits_has_one_runner_declaring_it():
    assert set(runners.RUNNERS) == set(RUNNER_KINDS)
    for kind, cls in runners.RUNNERS.items():
        assert issubclass(cls, Runner) and cls.kind == kind
        assert cls.measures == RUNNER_KINDS[kind].measures  # what the loader gives its targets


def test_a_kind_names_the_class_serving_it_and_the_class_must_agree():
    assert serving_class(RUNNER_KINDS["qemu"]) is runners.RUNNERS["qemu"]
    with pytest.raises(TypeError, match="'toolchain:BuildResult' is not a Runner subclass"):
        serving_class(RunnerKind("steps", Measures("steps"), "toolchain:BuildResult"))
    with pytest.raises(TypeError, match="'qemu:NoSuchRunner' is not a Runner subclass"):
        serving_class(RunnerKind("steps", Measures("steps"), "qemu:NoSuchRunner"))
    with pytest.raises(TypeError, match="QemuRunner declares kind 'qemu'"):
        serving_class(RunnerKind("native", Measures("time_ns"), "qemu:QemuRunner"))
    with pytest.raises(TypeError, match="not the description's"):  # same kind, other measures
        serving_class(RunnerKind("qemu", Measures("time_ns"), "qemu:QemuRunner"))


def test_the_fake_is_registered_without_editing_edgetune(registry):
    assert registry["fake"] is FakeRunner
    target = fake_board()
    assert runner_class(target) is FakeRunner and isinstance(runner_for(target), FakeRunner)
    assert target.measures == "steps" and target.measured_values == ("steps", "code_bytes", "ram_bytes")


def test_a_kind_is_served_once_and_only_by_a_runner(registry):
    class Another(FakeRunner):
        pass

    with pytest.raises(ValueError, match="'fake' is already served by FakeRunner"):
        register_runner(Another)
    with pytest.raises(TypeError, match="is not a Runner subclass"):
        register_runner(object)


def test_the_interface_is_declared_not_duck_typed():
    class Incomplete(Runner):
        kind = "incomplete"
        measures = Measures("steps")

    with pytest.raises(TypeError, match="abstract"):
        Incomplete(get_target("host"))


@pytest.mark.parametrize("kind", sorted(BOARDS))
def test_declared_measures_tolerance_and_slots(registry, kind):
    target = BOARDS[kind]()
    runner = runner_for(target)
    assert type(runner).kind == kind == target.runner.kind
    assert target.measures == type(runner).measures.primary
    assert target.measured_values[0] == target.measures
    tolerance = type(runner).default_tolerance_pct(target)
    assert isinstance(tolerance, float) and tolerance >= 0
    assert tolerance == default_tolerance(target)  # what verify allows by default
    if type(runner).counts_exactly:
        assert tolerance == 0
    slots = runner.slots()
    assert isinstance(slots, int) and slots >= 1


@pytest.mark.parametrize("kind", sorted(BOARDS))
def test_a_missing_tool_is_one_clear_line(registry, kind, tmp_path, monkeypatch):
    runner = runner_for(BOARDS[kind]())
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing is installed
    with pytest.raises(ToolMissing) as caught:
        runner.check_tools()
    message = str(caught.value)
    assert "\n" not in message
    assert "not found on PATH" in message or "is not installed" in message


def evaluate(kernel, target, tmp_path):
    shape = kernel.parse_shape(SHAPE)
    space = kernel.space(target, shape)
    io = kernel.make_io(shape, np.random.default_rng(5))
    return Evaluator(kernel, target, shape, space, io, tmp_path)(space.make(CONFIG))


@pytest.mark.qemu
@pytest.mark.parametrize("kind", RUNNABLE)
def test_a_tiny_kernel_builds_runs_and_matches_the_reference(registry, kind, tmp_path):
    target = BOARDS[kind]()
    runner_for(target).check_tools()
    trial = evaluate(get_kernel("matmul_s8"), target, tmp_path)
    assert trial.outcome is Outcome.OK, trial.error  # OK: the outputs equal the numpy reference
    assert set(target.measured_values) <= set(trial.values)
    assert trial.values[target.measures] > 0


@pytest.mark.qemu
@pytest.mark.parametrize("kind", RUNNABLE)
def test_a_fault_is_a_classified_failed_trial(registry, kind, tmp_path):
    trial = evaluate(FaultyMatmul("trap", always=True), BOARDS[kind](), tmp_path)
    assert trial.outcome is Outcome.CRASH, trial.error
    assert trial.error and not trial.values


def test_renode_says_it_cannot_be_installed_before_building(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissing, match="not available for Debian 12"):
        runner_for(renode_board()).check_tools()


def test_the_native_harness_is_started_again_while_its_file_is_busy(monkeypatch):
    """ETXTBSY: a build cache hit just copied the harness and another thread's fork still
    holds the copy open; the start is retried, any other failure to start is not."""
    import errno
    import subprocess

    from edgetune.targets import native

    calls = []

    def busy_twice(args, **options):
        calls.append(args)
        if len(calls) <= 2:
            raise OSError(errno.ETXTBSY, "Text file busy")
        return subprocess.CompletedProcess(args, 0, "time_ns 1\n", "")

    monkeypatch.setattr(native.subprocess, "run", busy_twice)
    monkeypatch.setattr(native.time, "sleep", lambda seconds: None)
    assert native.start_harness(["./harness"]).returncode == 0 and len(calls) == 3

    def missing(args, **options):
        calls.append(args)
        raise OSError(errno.ENOENT, "No such file")

    calls.clear()
    monkeypatch.setattr(native.subprocess, "run", missing)
    with pytest.raises(OSError, match="No such file"):
        native.start_harness(["./harness"])
    assert len(calls) == 1
