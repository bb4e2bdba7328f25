"""The measuring pipeline's seams (edgetune.targets.measure): a MeasureInput goes through the
Builder and the Device into a MeasureResult carrying its Outcome.

A scripted runner (nothing compiled: it "runs" by adding 1 to its input, or faults where
told) checks the order of the stages, the judging of outputs and how faults end a
measurement; then a real variant is measured on QEMU's Cortex-M55 through the same door,
and gives what the tuning Evaluator gives for the same configuration."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetune.codegen.kernels.base import Buffer, KernelIO
from edgetune.evaluate import Evaluator, measure_source
from edgetune.hal import Measures
from edgetune.targets.build import Runner
from edgetune.targets.buildcache import CachedFailure
from edgetune.targets.measure import (Expected, LinkedProgram, MeasureInput, Pipeline, Run, failure_text,
                                      reference_check, variant_input)
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import BuildResult, MeasureError
from edgetune.tuner import Outcome


def io_of(values) -> KernelIO:
    x = np.asarray(values, dtype=np.int8)
    return KernelIO((Buffer("x", x), Buffer("y", np.zeros_like(x), is_output=True)), ())


def equal(_, got, want):
    return "" if np.array_equal(got, want) else f"got {got.tolist()}, want {np.asarray(want).tolist()}"


def plus_one(values) -> Run:
    return Run(io_of(values), Expected((np.asarray(values, dtype=np.int8) + 1,), equal))


class Scripted(Runner):
    """Links anything; a run outputs its input plus one, or faults on an input holding `trap`."""

    kind = "scripted"
    measures = Measures("steps")

    def __init__(self, target, fail_link: MeasureError | None = None, trap: int = 99):
        super().__init__(target)
        self.fail_link, self.trap = fail_link, trap
        self.events: list = []

    @classmethod
    def default_tolerance_pct(cls, target):
        return 0.0

    def slots(self) -> int:
        return 1

    def check_tools(self) -> None:
        pass

    def link(self, workdir, objects, glue_text, io, placement=None) -> BuildResult:
        self.events.append(("link", tuple(io.buffers[0].data.tolist())))
        if self.fail_link is not None:
            raise self.fail_link
        return BuildResult(Path(workdir) / "image", Path(workdir), {"code_bytes": 10}, {"linked": "yes"})

    def run(self, build, io, timeout_s=None):
        x = io.buffers[0].data
        self.events.append(("run", tuple(x.tolist()), timeout_s))
        if self.trap in x:
            raise MeasureError(Outcome.CRASH, "it trapped\nat 0x10")
        return {"steps": int(x.size)}, (x + 1).astype(np.int8).tobytes()


def measure(runner, runs, **options):
    return Pipeline(runner).measure(MeasureInput(LinkedProgram((), "glue"), tuple(runs)), Path("/nonexistent"),
                                    **options)


@pytest.fixture
def scripted(host):
    return Scripted(host)


def test_the_program_is_built_once_then_every_run_is_made_and_judged_in_order(scripted):
    told = []
    result = measure(scripted, [plus_one([1, 2]), plus_one([3, 4])], timeout_s=lambda: 7.0,
                     each=lambda index, output: told.append((index, output.values)))
    assert scripted.events == [("link", (1, 2)), ("run", (1, 2), 7.0), ("run", (3, 4), 7.0)]
    assert result.outcome is Outcome.OK and result.error == "" and result.first_wrong is None
    assert told == [(0, {"steps": 2}), (1, {"steps": 2})]
    assert result.values == {"steps": 2, "code_bytes": 10}  # the first run's, with the build's
    assert [o.outputs[0].tolist() for o in result.runs] == [[2, 3], [4, 5]]
    assert result.info["linked"] == "yes" and "seconds_run" in result.info


def test_a_wrong_output_is_a_wrong_answer_naming_the_first_that_differs(scripted):
    wrong = Run(io_of([5, 6]), Expected((np.array([6, 8], dtype=np.int8),), equal))
    result = measure(scripted, [plus_one([1, 2]), wrong, plus_one([0, 0])])
    assert result.outcome is Outcome.WRONG_ANSWER and result.first_wrong == 1
    assert result.error == "got [6, 7], want [6, 8]"
    assert len(result.runs) == 3  # a wrong answer is not a fault: the other runs are made


def test_a_fault_ends_the_measurement_with_its_outcome(scripted):
    result = measure(scripted, [plus_one([1, 2]), plus_one([99, 0]), plus_one([3, 4])])
    assert result.outcome is Outcome.CRASH and result.fault is Outcome.CRASH
    assert len(result.runs) == 1 and scripted.events[-1][:2] == ("run", (99, 0))
    assert result.message == result.error == "it trapped\nat 0x10"
    assert failure_text(result) == "does not run: crash: it trapped | at 0x10"


def test_a_build_that_fails_runs_nothing(host):
    failing = Scripted(host, fail_link=MeasureError(Outcome.TOO_LARGE, "region FLASH overflowed"))
    result = measure(failing, [plus_one([1])])
    assert result.build is None and result.runs == () and result.outcome is Outcome.TOO_LARGE
    assert failure_text(result) == "does not build: too_large: region FLASH overflowed"
    assert [e[0] for e in failing.events] == ["link"] and result.info == {}
    replayed = measure(Scripted(host, fail_link=CachedFailure(Outcome.COMPILE_ERROR, "error: x")), [plus_one([1])])
    assert replayed.info == {"build_cache": "hit"}  # the failure came from the cache: nothing was built


def test_an_unchecked_run_returns_its_outputs_and_is_never_wrong(scripted):
    result = measure(scripted, [Run(io_of([1, 2]))])
    assert result.outcome is Outcome.OK and result.runs[0].outputs[0].tolist() == [2, 3]


def test_outputs_are_unpacked_by_the_expected_layout_when_it_is_given(scripted):
    # A run fed other buffers (packed weights) is judged on the plain layout its reference was taken on.
    plain = KernelIO((Buffer("y", np.zeros(1, dtype=np.int16), is_output=True),), ())
    want = np.frombuffer(np.array([2, 3], dtype=np.int8).tobytes(), dtype="<i2")
    result = measure(scripted, [Run(io_of([1, 2]), Expected((want,), equal, plain))])
    assert result.outcome is Outcome.OK and result.runs[0].outputs[0].dtype == np.int16
    short = KernelIO((Buffer("y", np.zeros(3, dtype=np.int8), is_output=True),), ())
    mismatched = measure(scripted, [Run(io_of([1, 2]), Expected((want,), equal, short))])
    assert mismatched.outcome is Outcome.WRONG_ANSWER and "expected at least 3" in mismatched.error


@pytest.mark.qemu
def test_a_variant_measured_through_the_pipeline_on_qemu_is_what_tuning_measures(matmul, m55, tmp_path):
    shape = matmul.parse_shape("m=4,n=8,k=16")
    space = matmul.space(m55, shape)
    config = next(iter(space))
    io = matmul.make_io(shape, np.random.default_rng(2))
    deployed = matmul.deployed_io(io, config)
    rendered = matmul.render(m55, shape, config)
    pipeline = Pipeline(runner_for(m55))
    (tmp_path / "a").mkdir()
    result = pipeline.measure(variant_input(matmul, shape, rendered, deployed, reference_check(matmul, shape, io)),
                              tmp_path / "a")
    assert result.outcome is Outcome.OK, result.error
    assert result.values["instructions"] > 0 and result.values["code_bytes"] > 0
    trial = Evaluator(matmul, m55, shape, space, io, tmp_path)(config)
    assert trial.outcome is Outcome.OK and trial.values == result.values  # the emulator counts exactly
    # The same source judged against other outputs is a wrong answer, not a fault.
    wrong = [np.asarray(out) + 1 for out in matmul.reference(shape, io)]
    judged = measure_source(matmul, m55, shape, rendered, io, tmp_path, deployed=deployed, expected=wrong)
    assert judged.outcome is Outcome.WRONG_ANSWER and judged.first_wrong == 0
