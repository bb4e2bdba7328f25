"""A tuning session: ask the strategy, render, build, run, check, record — until the budget
is spent. This is the only place where search (edgetune.tuner), code generation
(edgetune.codegen) and execution (edgetune.targets) meet.
"""
from __future__ import annotations

import functools
import hashlib
import re
import shutil
import socket
import tempfile
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from edgetune.codegen import get_kernel, CodegenError, Kernel, KernelIO
from edgetune.codegen.placement import PlacementError, pinned
from edgetune.hal import Target, TargetError
from edgetune.targets import iobuf
from edgetune.targets.buildcache import CachedFailure
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import MeasureError
from edgetune.tuner import (STRATEGIES, Bound, Config, Outcome, PriorTrials, Record, Space, SpaceError, Trial,
                            TuningDatabase, Workload, check_names, feasible, make_strategy)
from edgetune.tuner import Goal, resolve_goal
from edgetune.tuner.strategies import StrategyError

from .identity import measurement_fingerprint, recompute_estimates


@dataclass(frozen=True)
class TuneRequest:
    kernel: Kernel
    target: Target
    shape: dict
    strategy: str = "random"
    budget: int = 20
    jobs: int = 1
    seed: int = 0
    # A measured value to minimise and NAME<=LIMIT bounds on others; neither given: the
    # workload's stored goal, or the target's own unit (tuner.resolve_goal).
    objective: str = ""
    bounds: tuple[Bound, ...] = ()
    time_budget: float | None = None  # seconds of this run; None: no limit
    patience: int | None = None  # stop after this many evaluations without a new best
    initial: tuple[dict, ...] = ()  # configurations to measure first (e.g. an export's old best)
    remember_goal: bool = True  # store the goal with the workload (not for `record`, which measures everything)


@dataclass(frozen=True)
class TuneSummary:
    workload: Workload
    objective: str
    trials: int  # stored for this workload, this run's and earlier ones
    new_trials: int  # measured by this run
    failures: dict = field(default_factory=dict)  # outcome value -> count, over all stored trials
    best: Record | None = None
    bounds: tuple[Bound, ...] = ()
    infeasible: int = 0  # successful trials that break a bound
    stopped: str = "budget"  # budget | exhausted | time | patience

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def workload_of(kernel: Kernel, target: Target, shape: dict) -> Workload:
    """The workload's identity: kernel, template version, shape, target name, and a
    fingerprint of the tools and of every part of the target description a measurement
    depends on (app/identity.py; estimates are recomputed, not part of it)."""
    return Workload(kernel.name, kernel.version, target.name, tuple((k, int(v)) for k, v in shape.items()),
                    measurement_fingerprint(target))


def workload_inputs(kernel: Kernel, workload: Workload) -> KernelIO:
    """The inputs every trial of a workload runs on: fixed by the workload, not the seed,
    so a resumed or repeated run measures exactly the same thing."""
    seed = int.from_bytes(hashlib.sha256(workload.problem_key().encode()).digest()[:8], "little")
    return kernel.make_io(workload.shape_dict(), np.random.default_rng(seed))


# A run far slower than the fastest so far cannot win: it is killed after this many times
# the fastest run's wall time (OpenTuner's limit multiplier), never sooner than the floor
# (emulator start-up and a loaded machine), never later than the target's own timeout.
LIMIT_MULTIPLIER = 20.0
MIN_RUN_TIMEOUT_S = 5.0


class Evaluator:
    """Turns one configuration into one Trial; every fault becomes a failed Trial."""

    def __init__(self, kernel: Kernel, target: Target, shape: dict, space: Space, io: KernelIO,
                 work_root: Path):
        self.kernel, self.target, self.shape, self.space, self.io = kernel, target, shape, space, io
        self.runner = runner_for(target)
        # A device slot (an emulator, the host's timing slot) serves one run at a time;
        # builds are not limited and overlap with runs.
        self._slots = threading.Semaphore(self.runner.slots)
        self.expected = kernel.reference(shape, io)
        self.work_root = work_root
        self._fastest_run: float | None = None  # wall seconds of the fastest correct run

    def run_timeout(self) -> float:
        limit = self.target.runner.timeout_s
        if self._fastest_run is None:
            return limit
        return min(limit, max(MIN_RUN_TIMEOUT_S, LIMIT_MULTIPLIER * self._fastest_run))

    def __call__(self, config: Config) -> Trial:
        trial = self._evaluate(config)
        # The target's run limit it was measured under (see timed_out_below).
        return stamp(replace(trial, info={**trial.info, "timeout_limit_s": self.target.runner.timeout_s}), self.target)

    def _evaluate(self, config: Config) -> Trial:
        started = time.monotonic()
        reason = self.space.violation(config)
        if reason:
            return Trial(config, Outcome.INVALID, error=reason)
        workdir = Path(tempfile.mkdtemp(prefix="trial-", dir=self.work_root))
        info: dict = {}
        try:
            rendered = self.kernel.render(self.target, self.shape, config)
            io = self.kernel.deployed_io(self.io, config)  # e.g. weights packed as an export ships them
            build = self.runner.build(self.kernel, self.shape, io, rendered, workdir)
            info = dict(build.info)
            with self._slots:
                run_started = time.monotonic()
                values, raw = self.runner.run(build, io, timeout_s=self.run_timeout())
                run_seconds = time.monotonic() - run_started
            outcome, error = self._check(raw)
            if outcome is Outcome.OK and (self._fastest_run is None or run_seconds < self._fastest_run):
                self._fastest_run = run_seconds
            values = {**values, **build.values}
            info["seconds"] = round(time.monotonic() - started, 3)
            return Trial(config, outcome, values=values if outcome is Outcome.OK else {}, error=error, info=info)
        except (CodegenError, PlacementError) as exc:
            return Trial(config, Outcome.CODEGEN_ERROR, error=str(exc), info=info)
        except MeasureError as exc:
            if isinstance(exc, CachedFailure):
                info = {**info, "build_cache": "hit"}  # the same failure, replayed without building
            return Trial(config, exc.outcome, error=exc.message, info=info)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _check(self, raw: bytes) -> tuple[Outcome, str]:
        try:
            outputs = iobuf.unpack_outputs(self.io, raw)
        except ValueError as exc:
            return Outcome.WRONG_ANSWER, str(exc)
        for buf, got, want in zip(self.io.outputs(), outputs, self.expected):
            problem = self.kernel.compare(self.shape, self.io, buf.name, got, want)
            if problem:
                return Outcome.WRONG_ANSWER, problem
        return Outcome.OK, ""


def timed_out_below(trial: Trial, limit_s: float) -> bool:
    """A timeout under a smaller run limit than `limit_s` (or an unrecorded one): it says the
    limit was too short, not that the configuration is slow, so it is measured again once the
    target allows longer (TuningDatabase.record replaces it)."""
    if trial.outcome is not Outcome.TIMEOUT:
        return False
    recorded = trial.info.get("timeout_limit_s")
    return not isinstance(recorded, (int, float)) or recorded < limit_s


def machine_name(target: Target) -> str:
    """Who measures: this host, and the board resource when the target names one (a farm's
    worker may own several boards)."""
    host = re.sub(r"[^A-Za-z0-9_.:@\[\]-]", "_", socket.gethostname()) or "unknown"
    return f"{host}/{target.runner.resource}" if target.runner.resource else host


def stamp(trial: Trial, target: Target) -> Trial:
    """The trial with the machine that measured it and the UTC time it finished there."""
    return replace(trial, measured_by=machine_name(target),
                   measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


ProgressFn = Callable[[int, int, Trial], None]  # (trials stored, budget, the trial just finished)


def tune(request: TuneRequest, db: TuningDatabase, progress: ProgressFn | None = None,
         executor: Executor | None = None) -> TuneSummary:
    """Run a tuning session. Trials are built and run in local threads, or on `executor`
    (a Dask cluster's, from edgetune.cluster.connect); either way only this process
    writes the database."""
    kernel, target, shape = request.kernel, request.target, request.shape
    workload = workload_of(kernel, target, shape)
    recompute_estimates(db, target)  # stored trials priced by the target's current tables
    goal = goal_of(db, workload, target, request.objective, request.bounds)
    request = replace(request, objective=goal.objective, bounds=goal.bounds)
    objective = goal.objective
    space = search_space(kernel, target, shape, objective, request.bounds)
    if request.strategy not in STRATEGIES:
        raise StrategyError(f"unknown strategy {request.strategy!r} (known: {', '.join(sorted(STRATEGIES))})")
    prior = prior_trials(db, workload) if STRATEGIES[request.strategy].uses_prior else ()
    strategy = make_strategy(request.strategy, space, np.random.default_rng(request.seed), objective, prior)
    runner_for(target).check_tools()
    if request.remember_goal:
        db.set_goal(workload, goal)
    inputs = workload_inputs(kernel, workload)
    problem = iobuf.fit_problem(target, inputs)
    if problem:  # one refusal before any trial, not one too_large trial per variant
        raise TargetError(problem)

    stored_trials = db.trials(workload)
    # Trials lost with their machine (emulator killed, board gone), and timeouts under a
    # smaller limit than the target's now, are measured again first.
    again = [t.outcome.lost or timed_out_below(t, target.runner.timeout_s) for t in stored_trials]
    done = [trial for trial, redo in zip(stored_trials, again) if not redo]
    lost = [trial.config for trial, redo in zip(stored_trials, again) if redo]
    told = in_space(space, done)
    strategy.tell(told)
    stored = len(done)
    stop = StopRule(request, objective, best=min((v for t in done if feasible(t, request.bounds)
                                                  and (v := t.value(objective)) is not None), default=None))
    measured = {trial.config for trial in (*done, *told)}
    # Seeds that no longer fit the space (a parameter value gone, a constraint tightened)
    # are dropped: the search covers the workload anyway.
    seeds = [*request.initial, *(config.as_dict() for config in lost)]
    pending = list(dict.fromkeys(config for config in (_as_config(space, values) for values in seeds)
                                 if config is not None and config not in measured))
    with tempfile.TemporaryDirectory(prefix="edgetune-") as tmp, ExitStack() as stack:
        if executor is None:
            evaluate = Evaluator(kernel, target, shape, space, inputs, Path(tmp))
            pool = stack.enter_context(ThreadPoolExecutor(max_workers=max(1, request.jobs)))
            submit = functools.partial(pool.submit, evaluate)
        else:
            spec = RemoteEvaluation(kernel.name, target, tuple(shape.items()))
            submit = functools.partial(executor.submit, evaluate_remotely, spec)
        new, stopped = search_loop(strategy, submit, db, workload, budget=request.budget, jobs=request.jobs,
                                   stored=stored, label=(request.strategy, request.seed), progress=progress,
                                   stop=stop, pending=pending, remote=executor is not None)
    return replace(summarize(db, workload, objective, new, request.bounds), stopped=stopped)


@dataclass(frozen=True)
class RemoteEvaluation:
    """What a cluster worker needs to evaluate configurations of a workload: small and
    picklable. Inputs and the reference are rebuilt on the worker from the workload, so
    every worker measures exactly what a local run would."""

    kernel: str
    target: Target
    shape: tuple[tuple[str, int], ...]


@functools.lru_cache(maxsize=16)
def _worker_evaluator(spec: RemoteEvaluation) -> Evaluator:
    # One evaluator per workload per worker process: the reference is computed once.
    kernel = get_kernel(spec.kernel)
    shape = dict(spec.shape)
    return Evaluator(kernel, spec.target, shape, kernel.tuning_space(spec.target, shape),
                     workload_inputs(kernel, workload_of(kernel, spec.target, shape)),
                     Path(tempfile.mkdtemp(prefix="edgetune-worker-")))


def evaluate_remotely(spec: RemoteEvaluation, config: Config) -> Trial:
    """Runs on a cluster worker."""
    return _worker_evaluator(spec)(config)


def search_loop(strategy, submit: Callable, db: TuningDatabase, workload: Workload, *, budget: int, jobs: int,
                stored: int, label: tuple[str, int | None], progress: ProgressFn | None = None,
                stop: "StopRule | None" = None, pending: Sequence[Config] = (), remote: bool = False) -> tuple[int, str]:
    """The loop every tuning session runs: until `budget` trials are stored, ask the strategy
    for a batch of `jobs` (configurations in `pending` first), evaluate it through `submit`,
    store each trial as it completes, and tell the strategy the batch in proposal order
    (batch-synchronous, so a seed reproduces the run whatever order trials finish in).
    `label` is the (strategy name, seed) stored with each trial. Returns the number of new
    trials and why the loop ended: budget, exhausted, or the stop rule's reason."""
    new, pending = 0, list(pending)
    while stored < budget:
        if stop is not None and (reason := stop.reason()) is not None:
            return new, reason
        room = min(jobs, budget - stored)
        batch, pending = pending[:room], pending[room:]
        batch = batch or strategy.ask(room)
        if not batch:
            return new, "exhausted"  # every legal configuration has been measured
        futures = {submit(config): config for config in batch}
        results = {}
        for future in as_completed(futures):
            trial = results[future] = _result(future, futures[future], remote)
            if db.record(workload, trial, *label):
                stored += 1
                new += 1
            if progress:
                progress(stored, budget, trial)
        trials = [results[future] for future in futures]
        strategy.tell(trials)
        if stop is not None:
            stop.observe(trials)
    return new, "budget"


def _result(future, config: Config, remote: bool) -> Trial:
    """A finished evaluation. Local evaluations never raise (faults are trials: anything
    else is a bug and propagates); on a cluster, a trial Dask could not complete even after
    rescheduling it is recorded as a failed trial instead of being lost."""
    if not remote:
        return future.result()
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - any cluster failure becomes a recorded trial
        return Trial(config, Outcome.RUNTIME_ERROR,
                     error=f"evaluation lost on the cluster: {type(exc).__name__}: {exc}")


class StopRule:
    """The run's own limits besides the trial budget: wall time, and patience (evaluations
    without a new best, counted from this run's start)."""

    def __init__(self, request: TuneRequest, objective: str, best: float | None):
        self.deadline = None if request.time_budget is None else time.monotonic() + request.time_budget
        self.patience = request.patience
        self.objective, self.bounds = objective, request.bounds
        self.best = best
        self.since_best = 0

    def observe(self, trials: Sequence[Trial]) -> None:
        for trial in trials:
            # A trial that breaks a bound is no improvement, whatever its objective.
            value = trial.value(self.objective) if feasible(trial, self.bounds) else None
            if value is not None and (self.best is None or value < self.best):
                self.best, self.since_best = value, 0
            else:
                self.since_best += 1

    def reason(self) -> str | None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "time"
        if self.patience is not None and self.since_best >= self.patience:
            return "patience"
        return None


def search_space(kernel: Kernel, target: Target, shape: dict, objective: str, bounds: tuple[Bound, ...] = ()) -> Space:
    """What a session searches: the kernel's tuning space, with buffer placement pinned to
    its default unless the objective or a bound is a value placement changes."""
    space = kernel.tuning_space(target, shape)
    if objective in target.placement_values or any(b.name in target.placement_values for b in bounds):
        return space
    return pinned(space, target, objective)


def in_space(space: Space, trials: Sequence[Trial]) -> list[Trial]:
    """Stored trials as legal points of `space`: a parameter added since they were measured
    takes its default; trials outside it (another placement while placement is pinned, a
    value no longer offered) are left out."""
    found = []
    for trial in trials:
        try:
            config = space.make(trial.config.as_dict())
        except SpaceError:
            continue
        if space.is_legal(config):
            found.append(replace(trial, config=config))
    return found


def prior_trials(db: TuningDatabase, workload: Workload) -> tuple[PriorTrials, ...]:
    """Trials of the same kernel (same template version) on every other stored workload:
    other shapes and other targets, for strategies that transfer what they learnt."""
    return tuple(PriorTrials(other.key(), tuple(db.trials(other))) for other in db.workloads()
                 if other.kernel == workload.kernel and other.kernel_version == workload.kernel_version
                 and other != workload)


def _as_config(space: Space, values: dict) -> Config | None:
    try:
        config = space.make(values)
    except SpaceError:
        return None
    return config if space.is_legal(config) else None


_CONFIG_ITEM = re.compile(r"([a-z_][a-z0-9_]*)=([A-Za-z0-9_.+-]+)")


def parse_config(space: Space, text: str) -> dict:
    """'tile_m=4,tile_n=8,...' (a command line's configuration) -> the space's own values,
    checked: every parameter named once, every value one of the parameter's, the whole
    configuration legal. SpaceError names the culprit."""
    values: dict = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = _CONFIG_ITEM.fullmatch(item)
        if not match:
            raise SpaceError(f"configuration {text!r}: {item!r} is not NAME=VALUE")
        name, raw = match.groups()
        param = space.param(name)  # SpaceError: unknown parameter, with the known ones
        found = [v for v in param.values if str(v) == raw or isinstance(v, bool) and str(v).lower() == raw.lower()]
        if not found:
            raise SpaceError(f"configuration {text!r}: {raw!r} is not a value of parameter {name!r} "
                             f"(values: {', '.join(map(str, param.values))})")
        if name in values:
            raise SpaceError(f"configuration {text!r}: parameter {name!r} is given twice")
        values[name] = found[0]
    config = space.make(values)
    reason = space.violation(config)
    if reason:
        raise SpaceError(f"configuration {text!r} is not legal: {reason}")
    return config.as_dict()


def goal_of(db: TuningDatabase, workload: Workload, target: Target, objective: str = "",
            bounds: tuple[Bound, ...] = ()) -> Goal:
    """What a command on `workload` works to: the given objective and bounds, or those it
    was tuned for (stored with it), or the target's own unit; checked against what the
    target measures."""
    goal = resolve_goal(db.goal(workload), objective, bounds, target.measures)
    check_names(goal.objective, goal.bounds, target.measured_values, target.name)
    return goal


def choose_objective(target: Target, objective: str = "", bounds: tuple[Bound, ...] = ()) -> str:
    """The objective to minimise (default: the target's own unit), checked with the bounds
    against what the target measures."""
    objective = objective or target.measures
    check_names(objective, bounds, target.measured_values, target.name)
    return objective


def summarize(db: TuningDatabase, workload: Workload, objective: str, new_trials: int = 0,
              bounds: tuple[Bound, ...] = ()) -> TuneSummary:
    trials = db.trials(workload)
    failures: dict[str, int] = {}
    for trial in trials:
        if trial.outcome.failed:
            failures[trial.outcome.value] = failures.get(trial.outcome.value, 0) + 1
    infeasible = sum(1 for t in trials if not t.outcome.failed and not feasible(t, bounds))
    return TuneSummary(workload=workload, objective=objective, trials=len(trials), new_trials=new_trials,
                       failures=failures, best=db.best(workload, objective, lambda t: feasible(t, bounds)),
                       bounds=bounds, infeasible=infeasible)
