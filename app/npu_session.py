"""Tuning Vela's options for one operator on an Ethos-U NPU, with the same strategies,
database and summaries as CPU kernels.

A workload is (operator, model version, "<board>+<npu>", shape, toolchain) where the
toolchain fingerprint covers Vela's version and the .ini the HAL produces, so a Vela upgrade
or an edited memory description starts a new workload. The objective is `total_cycles`:
Vela's estimate of NPU cycles including memory stalls (its `cycles_total`).
"""
from __future__ import annotations

import functools
import hashlib
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from edgetune.codegen.npu import NpuOperator, build_model, npu_space
from edgetune.codegen.npu.space import NPU_MODEL_VERSION
from edgetune.hal import Npu, Target, TargetError
from edgetune.targets.toolchain import MeasureError
from edgetune.targets.vela import VelaOptions, VelaResult, check_vela, compile_model, vela_ini, vela_version
from edgetune.tuner import STRATEGIES, Config, Outcome, Space, SpaceError, Trial, TuningDatabase, Workload, make_strategy

from .session import ProgressFn, TuneSummary, prior_trials, search_loop, stamp, summarize

NPU_OBJECTIVE = "total_cycles"


def resolve_npu(target: Target, device: str) -> Npu:
    try:
        return target.npu(device)
    except KeyError as exc:
        raise TargetError(f"--device: {exc.args[0]}") from None


def npu_target_name(target: Target, npu: Npu) -> str:
    return f"{target.name}+{npu.name}"


@dataclass(frozen=True)
class NpuTuneRequest:
    operator: NpuOperator
    target: Target
    npu: Npu
    shape: dict
    strategy: str = "random"
    budget: int = 20
    jobs: int = 1
    seed: int = 0
    macs: int | None = None  # pin the accelerator configuration (the budget then counts only those trials)


def npu_workload(operator: NpuOperator, target: Target, npu: Npu, shape: dict) -> Workload:
    fingerprint = hashlib.sha256(f"vela={vela_version()}\n{vela_ini(target, npu)}".encode()).hexdigest()[:12]
    return Workload(operator.name, NPU_MODEL_VERSION, npu_target_name(target, npu),
                    tuple((k, int(v)) for k, v in shape.items()), fingerprint)


def workload_model(operator: NpuOperator, workload: Workload) -> bytes:
    """The TFLite model every trial of a workload compiles: weights and quantisation are
    seeded by the workload itself, so repeated and resumed runs compile the same model."""
    seed = int.from_bytes(hashlib.sha256(workload.problem_key().encode()).digest()[:8], "little")
    return build_model(operator.model(workload.shape_dict(), np.random.default_rng(seed)))


def compile_config(operator: NpuOperator, target: Target, npu: Npu, workload: Workload, config: Config,
                   workdir: Path) -> VelaResult:
    """Compile the workload's model with one configuration (MeasureError when Vela refuses)."""
    return compile_model(workload_model(operator, workload), operator.name, target, npu,
                         VelaOptions.from_config(config.as_dict()), workdir)


class NpuEvaluator:
    """One configuration -> one Trial; Vela's refusals become failed trials."""

    def __init__(self, request: NpuTuneRequest, workload: Workload, work_root: Path):
        self.request, self.workload, self.work_root = request, workload, work_root
        self.space = npu_space(request.target, request.npu, request.operator, request.shape, request.macs)
        self.model = workload_model(request.operator, workload)

    def __call__(self, config: Config) -> Trial:
        return stamp(self._evaluate(config), self.request.target)

    def _evaluate(self, config: Config) -> Trial:
        started = time.monotonic()
        reason = self.space.violation(config)
        if reason:
            return Trial(config, Outcome.INVALID, error=reason)
        workdir = Path(tempfile.mkdtemp(prefix="vela-", dir=self.work_root))
        try:
            r = self.request
            result = compile_model(self.model, r.operator.name, r.target, r.npu,
                                   VelaOptions.from_config(config.as_dict()), workdir)
            info = {**result.info, "seconds": round(time.monotonic() - started, 3)}
            return Trial(config, Outcome.OK, values=result.values, info=info)
        except MeasureError as exc:
            return Trial(config, exc.outcome, error=exc.message)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def in_space(space: Space, config: Config) -> bool:
    try:
        space.index_of(config)
    except SpaceError:
        return False
    return True


def tune_npu(request: NpuTuneRequest, db: TuningDatabase, progress: ProgressFn | None = None) -> TuneSummary:
    check_vela()
    workload = npu_workload(request.operator, request.target, request.npu, request.shape)
    space = npu_space(request.target, request.npu, request.operator, request.shape, request.macs)
    # Learning strategies need the objective; transfer also learns from the operator's other workloads.
    prior = prior_trials(db, workload) if STRATEGIES[request.strategy].uses_prior else ()
    strategy = make_strategy(request.strategy, space, np.random.default_rng(request.seed), NPU_OBJECTIVE, prior)
    done = [trial for trial in db.trials(workload) if in_space(space, trial.config)]
    strategy.tell(done)
    with tempfile.TemporaryDirectory(prefix="edgetune-vela-") as tmp:
        evaluate = NpuEvaluator(request, workload, Path(tmp))
        with ThreadPoolExecutor(max_workers=max(1, request.jobs)) as pool:
            new, stopped = search_loop(strategy, functools.partial(pool.submit, evaluate), db, workload,
                                 budget=request.budget, jobs=request.jobs, stored=len(done),
                                 label=(request.strategy, request.seed), progress=progress)
    return replace(summarize(db, workload, NPU_OBJECTIVE, new), stopped=stopped)
