"""Tuning Vela's options for one operator on an Ethos-U NPU: a tuning task (app/task.py)
that edgetune.session.tune runs with the same strategies, database, resumption, seeds and
stop rules as CPU kernels.

A workload is (operator, model version, "<board>+<npu>", shape, toolchain) where the
toolchain fingerprint covers Vela's version and the .ini the HAL produces, so a Vela upgrade
or an edited memory description starts a new workload. The objective is `total_cycles`:
Vela's estimate of NPU cycles including memory stalls (its `cycles_total`).
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgetune.npu import NpuOperator, build_model, npu_space
from edgetune.npu.space import NPU_MODEL_VERSION
from edgetune.hal import Npu, Target, TargetError
from edgetune.targets.toolchain import MeasureError
from edgetune.targets.vela import VelaOptions, VelaResult, check_vela, compile_model, vela_ini, vela_version
from edgetune.tuner import Bound, Config, Goal, Outcome, Space, Trial, TuningDatabase, Workload

from edgetune.task import stamp

NPU_OBJECTIVE = "total_cycles"


def resolve_npu(target: Target, device: str) -> Npu:
    try:
        return target.npu(device)
    except KeyError as exc:
        raise TargetError(f"--device: {exc.args[0]}") from None


def npu_target_name(target: Target, npu: Npu) -> str:
    return f"{target.name}+{npu.name}"


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


@dataclass(frozen=True)
class NpuTask:
    """An operator for one shape on a target's NPU (a TuningTask): each configuration of
    Vela's options compiles the workload's model, and Vela's estimates are the values."""

    operator: NpuOperator
    target: Target
    npu: Npu
    shape: dict
    macs: int | None = None  # pin the accelerator configuration
    remembers_goal: bool = False  # always total_cycles: nothing to remember
    run_limit_s: float = 0.0  # Vela compiles; no run limit to outgrow

    @property
    def workload(self) -> Workload:
        return npu_workload(self.operator, self.target, self.npu, self.shape)

    def goal(self, db: TuningDatabase, objective: str, bounds: tuple[Bound, ...]) -> Goal:
        if objective not in ("", NPU_OBJECTIVE) or bounds:
            raise TargetError(f"{npu_target_name(self.target, self.npu)}: NPU tuning minimises Vela's "
                              f"{NPU_OBJECTIVE}, unbounded")
        return Goal(NPU_OBJECTIVE)

    def space(self, goal: Goal) -> Space:
        return npu_space(self.target, self.npu, self.operator, self.shape, self.macs)

    def prepare(self, db: TuningDatabase) -> None:
        check_vela()

    def evaluator(self, space: Space, work_root: Path) -> "NpuEvaluator":
        return NpuEvaluator(self, space, work_root)

    def remote(self) -> None:
        return None  # Vela runs on this machine


class NpuEvaluator:
    """One configuration -> one Trial; Vela's refusals become failed trials."""

    def __init__(self, task: NpuTask, space: Space, work_root: Path):
        self.task, self.space, self.work_root = task, space, work_root
        self.model = workload_model(task.operator, task.workload)

    def __call__(self, config: Config) -> Trial:
        return stamp(self._evaluate(config), self.task.target)

    def _evaluate(self, config: Config) -> Trial:
        started = time.monotonic()
        reason = self.space.violation(config)
        if reason:
            return Trial(config, Outcome.INVALID, error=reason)
        workdir = Path(tempfile.mkdtemp(prefix="vela-", dir=self.work_root))
        try:
            t = self.task
            result = compile_model(self.model, t.operator.name, t.target, t.npu,
                                   VelaOptions.from_config(config.as_dict()), workdir)
            info = {**result.info, "seconds": round(time.monotonic() - started, 3)}
            return Trial(config, Outcome.OK, values=result.values, info=info)
        except MeasureError as exc:
            return Trial(config, exc.outcome, error=exc.message)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
