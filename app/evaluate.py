"""Tuning's measuring caller: one configuration of a workload -> one Trial.

The Evaluator renders a configuration (the kernel's template), hands it to the measuring
pipeline (edgetune.targets.measure: build, run, compare with the kernel's reference) and
turns what came of it into a Trial; every fault becomes a failed Trial. Several
configurations may share an image (edgetune.targets.batch). A source that is not a
configuration of the kernel (its plain loop, a library's code) is measured with
`measure_source`, judged the same way.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from edgetune.codegen import CodegenError, Kernel, KernelIO, RenderedKernel
from edgetune.codegen.placement import PlacementError
from edgetune.hal import Target
from edgetune.targets.batch import Failed, Variant, member_function
from edgetune.targets.measure import MeasureResult, Pipeline, Run, judge, reference_check, variant_input
from edgetune.targets.runners import runner_for
from edgetune.tuner import Config, Outcome, Space, Trial

from .task import stamp

# A run far slower than the fastest so far cannot win: it is killed after this many times
# the fastest run's wall time (OpenTuner's limit multiplier), never sooner than the floor
# (emulator start-up and a loaded machine), never later than the target's own timeout.
LIMIT_MULTIPLIER = 20.0
MIN_RUN_TIMEOUT_S = 5.0


def measure_source(kernel: Kernel, target: Target, shape: dict, rendered: RenderedKernel, io: KernelIO,
                   work_root: Path, deployed: KernelIO | None = None,
                   expected: Sequence[np.ndarray] | None = None) -> MeasureResult:
    """A rendered source under the kernel's declaration (its plain loop, a library's code)
    run once on `deployed` (default: `io`), its outputs judged as a variant's: against the
    kernel's reference on `io`, or the `expected` outputs. A render error is the caller's:
    nothing here renders."""
    workdir = Path(tempfile.mkdtemp(prefix="source-", dir=work_root))
    try:
        check = reference_check(kernel, shape, io, expected)
        return Pipeline(runner_for(target)).measure(variant_input(kernel, shape, rendered, deployed or io, check),
                                                    workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


class Evaluator:
    """Turns one configuration into one Trial; every fault becomes a failed Trial."""

    def __init__(self, kernel: Kernel, target: Target, shape: dict, space: Space, io: KernelIO,
                 work_root: Path):
        self.kernel, self.target, self.shape, self.space, self.io = kernel, target, shape, space, io
        self.pipeline = Pipeline(runner_for(target))
        self.runner = self.pipeline.runner
        self.expected = kernel.reference(shape, io)
        self.work_root = work_root
        self._fastest_run: float | None = None  # wall seconds of the fastest correct run
        self.alone_reason = ""  # why configurations are evaluated one at a time here ("": they need not be)

    def run_timeout(self, variants: int = 1) -> float:
        """The time limit of a run of `variants` variants (several: one batched image): the
        target's, or the multiple of the fastest run for each of them."""
        limit = self.target.runner.timeout_s
        if self._fastest_run is None:
            return limit
        return min(limit, max(MIN_RUN_TIMEOUT_S, LIMIT_MULTIPLIER * self._fastest_run * variants))

    def __call__(self, config: Config) -> Trial:
        return self._finish(self._evaluate(config))

    def _finish(self, trial: Trial) -> Trial:
        # The target's run limit it was measured under (see tuner.trial.replaceable).
        return stamp(replace(trial, info={**trial.info, "timeout_limit_s": self.target.runner.timeout_s}), self.target)

    def _run(self, deployed: KernelIO) -> Run:
        """A run on `deployed`, judged on the workload's plain buffers (a variant fed packed
        weights computes what the plain ones give)."""
        return Run(deployed, reference_check(self.kernel, self.shape, self.io, self.expected))

    # --- several configurations per image (edgetune.targets.batch) ----------------------------
    def batches(self) -> bool:
        """Whether this evaluator puts several variants into one image (else: why not, in
        `alone_reason`)."""
        return self.runner.batches and not self.alone_reason

    def evaluate_batch(self, configs: Sequence[Config]) -> list[Trial]:
        """Trials of several configurations, measured in as few images as fit. Each trial is
        the one evaluating its configuration alone gives: a variant that fails in a batch
        (faults, hangs, answers wrong, or its image does not link) is evaluated again alone."""
        if len(configs) < 2 or not self.batches():
            return [self._alone(config) for config in configs]
        trials: dict[int, Trial] = {}
        variants, where = [], []
        for index, config in enumerate(configs):
            prepared = self._prepare(config)
            if isinstance(prepared, Trial):
                trials[index] = prepared
            else:
                variants.append(prepared)
                where.append(index)
        workdir = Path(tempfile.mkdtemp(prefix="batch-", dir=self.work_root))
        try:
            measured = self.pipeline.measure_batch(self.kernel, self.shape, variants, workdir, self.run_timeout)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if measured.refusal:
            self.alone_reason = measured.refusal
        for index, variant, result in zip(where, variants, measured.results):
            trials[index] = self._batch_trial(configs[index], variant, result)
        return [self._finish(trials[index]) for index in range(len(configs))]

    def _alone(self, config: Config) -> Trial:
        """One at a time in a batched session: the trial says why, when the kernel is why."""
        trial = self(config)
        if not self.alone_reason:
            return trial
        return replace(trial, info={**trial.info, "batch_refused": f"kernel {self.kernel.name}: {self.alone_reason}"})

    def _prepare(self, config: Config) -> "Variant | Trial":
        """A configuration as a batch member, or the trial it already is (illegal, not
        renderable, or a kernel that cannot be renamed: evaluated alone)."""
        reason = self.space.violation(config)
        if reason:
            return Trial(config, Outcome.INVALID, error=reason)
        name = member_function(self.kernel, self.shape, config)
        try:
            rendered = self.kernel.render(self.target, self.shape, config, fn=name)
            io = self.kernel.deployed_io(self.io, config)
        except (CodegenError, PlacementError) as exc:
            return Trial(config, Outcome.CODEGEN_ERROR, error=str(exc))
        if rendered.function != name:
            self.alone_reason = f"it names its entry point {rendered.function!r} itself"
            return self._evaluate(config)
        return Variant(rendered, io)

    def _batch_trial(self, config: Config, variant: Variant, result) -> Trial:
        if isinstance(result, Failed):
            return Trial(config, result.error.outcome, error=result.error.message, info=dict(result.info))
        if result is None:
            return self._evaluate(config)
        _, problem = judge(self._run(variant.io), result.raw)
        if problem:
            return self._evaluate(config)  # perhaps a neighbour's doing: alone, it is its own outcome
        seconds = result.info.get("seconds_run", 0.0)
        if self._fastest_run is None or seconds < self._fastest_run:
            self._fastest_run = seconds
        info = {**result.info, "seconds": round(sum(result.info.get(f"seconds_{part}", 0.0)
                                                    for part in ("compile", "link", "run")), 3)}
        return Trial(config, Outcome.OK, values=result.values, info=info)

    def _evaluate(self, config: Config) -> Trial:
        started = time.monotonic()
        reason = self.space.violation(config)
        if reason:
            return Trial(config, Outcome.INVALID, error=reason)
        workdir = Path(tempfile.mkdtemp(prefix="trial-", dir=self.work_root))
        try:
            rendered = self.kernel.render(self.target, self.shape, config)
            io = self.kernel.deployed_io(self.io, config)  # e.g. weights packed as an export ships them
            result = self.pipeline.measure(variant_input(self.kernel, self.shape, rendered, io, self._run(io).expected),
                                           workdir, self.run_timeout)
        except (CodegenError, PlacementError) as exc:
            return Trial(config, Outcome.CODEGEN_ERROR, error=str(exc))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return self._trial(config, result, started)

    def _trial(self, config: Config, result: MeasureResult, started: float) -> Trial:
        if not result.runs:  # it did not build, or its run faulted
            return Trial(config, result.outcome, error=result.error, info=result.info)
        run = result.runs[0]
        outcome = result.outcome
        if outcome is Outcome.OK and (self._fastest_run is None or run.seconds < self._fastest_run):
            self._fastest_run = run.seconds
        info = {**result.info, "seconds": round(time.monotonic() - started, 3)}
        return Trial(config, outcome, values=result.values if outcome is Outcome.OK else {}, error=result.error,
                     info=info)
