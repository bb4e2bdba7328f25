"""A tuning session: ask the strategy, have each configuration measured (edgetune.evaluate:
rendered, then built, run and checked by the measuring pipeline, edgetune.targets.measure),
record — until the budget is spent.
"""
from __future__ import annotations

import functools
import hashlib
import math
import re
import tempfile
import time
from concurrent.futures import Executor, ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from edgetune.codegen import get_kernel, Kernel, KernelIO
from edgetune.codegen.kernels.user_loader import KernelBundle, kernel_of_bundle
from edgetune.codegen.kernels.zero_points import with_zero_points
from edgetune.npu import NpuOperator
from edgetune.codegen.placement import pinned
from edgetune.errors import EdgetuneError
from edgetune.hal import Target, TargetError
from edgetune.targets import iobuf
from edgetune.targets.batch import MAX_BATCH, fit_by_data
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import MeasureError
from edgetune.tuner import (STRATEGIES, Bound, Claim, Config, Constraint, Outcome, Owner, PriorTrials, Record, Space, SpaceError,
                            Trial, TuningDatabase, Workload, canonical_strategy, check_names, check_strategy, feasible, make_strategy,
                            replaceable)
from edgetune.tuner import Goal, resolve_goal
from edgetune.tuner.code_explore import CodeRankedTransfer, CodeRankingUse
from edgetune.tuner.resume import Resumed, rebuild

from .compile_check import check_compiles
from .evaluate import Evaluator
from .identity import measurement_fingerprint, recompute_estimates
from .batch_ahead import compile_batch_plan_ahead
from .live_rank import check_code_readable, code_ranking, compiles_ahead, stop_ahead
from edgetune.npu.session import NpuTask, resolve_npu
from .task import TuningTask, machine_name  # noqa: F401 - machine_name: part of this module's interface
from .value_roles import target_roles


# Seeds are stored with every trial in an SQLite INTEGER (signed 64 bits), and numpy's
# generators take only non-negative ones.
MAX_SEED = 2**63 - 1


class RunLimitError(EdgetuneError, ValueError):
    """A run's budget, jobs, seed, batch, patience or time budget out of range (from the Python
    API: the command line's options refuse them first)."""


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_seed(seed, flag: str = "--seed") -> None:
    if not _is_int(seed) or not 0 <= seed <= MAX_SEED:
        raise RunLimitError(f"{flag} {seed!r}: must be an integer from 0 to {MAX_SEED}")


def check_run_limits(request: "TuneRequest") -> None:
    """Refuse what no run can mean, naming the option, before anything is measured."""
    counts = [("--budget", request.budget), ("--jobs", request.jobs)]
    counts += [(flag, value) for flag, value in (("--batch", request.batch), ("--patience", request.patience))
               if value is not None]  # None: no limit
    for flag, value in counts:
        if not _is_int(value) or value < 1:
            raise RunLimitError(f"{flag} {value!r}: must be an integer of at least 1")
    check_seed(request.seed)
    limit = request.time_budget
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))
                              or not math.isfinite(limit) or limit <= 0):
        raise RunLimitError(f"--time-budget {limit!r}: must be a finite number of seconds above 0")


@dataclass(frozen=True)
class TuneRequest:
    kernel: Kernel | NpuOperator
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
    # "cpu", or an NPU of the target: then `kernel` is an NpuOperator whose Vela options are
    # tuned (edgetune.npu.session), `macs` optionally pinning the accelerator configuration.
    device: str = "cpu"
    macs: int | None = None
    # Variants per image and emulator boot (edgetune.targets.batch); None: as many as the
    # target's memory holds (at most targets.batch.MAX_BATCH); 1: one at a time.
    batch: int | None = None
    # The compilers of the target this run may measure with (--compiler); (): every one.
    compilers: tuple[str, ...] = ()
    # Bytes of scratch a variant may need (a model layer's share of `model tune --max-ram`):
    # configurations the kernel estimates above it are not proposed. None: no limit.
    scratch_limit: int | None = None


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
    prior_stored: int = 0  # a transfer run: trials of the same kernel on other workloads it was given
    prior_used: int = 0  # and how many of them mapped into this space and were learnt from
    prior_targets: tuple[str, ...] = ()  # the targets those other workloads are on
    code_ranking: CodeRankingUse | None = None  # a `transfer+code` run: what its code ranking did

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def workload_of(kernel: Kernel, target: Target, shape: dict) -> Workload:
    """The workload's identity: kernel, template version, shape, target name, and a
    fingerprint of the tools and of every part of the target description a measurement
    depends on (app/identity.py; estimates are recomputed, not part of it)."""
    return Workload(kernel.name, kernel.version, target.name, tuple((k, int(v)) for k, v in shape.items()),
                    _with_inputs(measurement_fingerprint(target), getattr(kernel, "tuning_zero_points", ())))


def _with_inputs(fingerprint: str, zero_points: tuple[tuple[str, int], ...]) -> str:
    """The fingerprint of a workload tuned on zero points of the user's (`tune --zero-point`,
    codegen/kernels/zero_points.py): its trials ran on other inputs than the kernel's own
    draw, so they are another workload, never mixed with those (nor exported for them)."""
    if not zero_points:
        return fingerprint
    text = fingerprint + "|" + ",".join(f"{name}={value}" for name, value in zero_points)
    return hashlib.sha256(text.encode()).hexdigest()[:len(fingerprint)]


def workload_inputs(kernel: Kernel, workload: Workload) -> KernelIO:
    """The inputs every trial of a workload runs on: fixed by the workload, not the seed,
    so a resumed or repeated run measures exactly the same thing; drawn as the kernel's
    tuning_io draws them (the int8 kernels: TFLite's conventions, as the kernel version in
    the workload's key says)."""
    seed = int.from_bytes(hashlib.sha256(workload.problem_key().encode()).digest()[:8], "little")
    return kernel.tuning_io(workload.shape_dict(), np.random.default_rng(seed))


ProgressFn = Callable[[int, int, Trial], None]  # (trials stored, budget, the trial just finished)


@dataclass(frozen=True)
class CpuTask:
    """A kernel for one shape on a target: rendered, built and run by the target's runner
    (Evaluator), on this machine or a cluster's workers."""

    kernel: Kernel
    target: Target
    shape: dict
    remembers_goal: bool = True
    compilers: tuple[str, ...] = ()  # () : every compiler of the target
    scratch_limit: int | None = None  # TuneRequest.scratch_limit

    @property
    def workload(self) -> Workload:
        return workload_of(self.kernel, self.target, self.shape)

    @property
    def run_limit_s(self) -> float:
        return self.target.runner.timeout_s

    def goal(self, db: TuningDatabase, objective: str, bounds: tuple[Bound, ...]) -> Goal:
        return goal_of(db, self.workload, self.target, objective, bounds)

    def space(self, goal: Goal) -> Space:
        space = only_compilers(search_space(self.kernel, self.target, self.shape, goal.objective, goal.bounds),
                               self.target, self.compilers)
        return within_scratch(space, self.kernel, self.shape, self.scratch_limit)

    def prepare(self, db: TuningDatabase) -> None:
        recompute_estimates(db, self.target)  # stored trials priced by the target's current tables
        runner_for(self.target).check_tools()
        self.kernel.check_fits(self.target, self.shape)  # one refusal before any trial, not one too_large per variant
        check_compiles(self.kernel, self.target, self.shape, self.compilers)  # and not one compile error per variant

    def batch_size(self, asked: int | None) -> int:
        """Variants per image: what the target's I/O regions hold side by side (the code of
        an image is checked once compiled, targets.batch), at most `asked` or MAX_BATCH;
        1 where the runner boots once per variant."""
        if not runner_for(self.target).batches:
            return 1
        io = workload_inputs(self.kernel, self.workload)
        try:
            fits = fit_by_data(self.target, io, iobuf.plan_io(self.target, io, None))
        except MeasureError:
            return 1
        return max(1, min(fits, asked or MAX_BATCH))

    def evaluator(self, space: Space, work_root: Path) -> "Evaluator":
        return Evaluator(self.kernel, self.target, self.shape, space, workload_inputs(self.kernel, self.workload),
                         work_root)

    def remote(self) -> Callable[[Config], Trial]:
        return functools.partial(evaluate_remotely, RemoteEvaluation(self.kernel.name, self.target,
                                                                      tuple(self.shape.items()),
                                                                      getattr(self.kernel, "bundle", None),
                                                                      getattr(self.kernel, "tuning_zero_points", ())))


def task_of(request: TuneRequest) -> TuningTask:
    """The task a request tunes: the CPU kernel, or the operator on one of the target's NPUs."""
    if request.device == "cpu":
        return CpuTask(request.kernel, request.target, request.shape, request.remember_goal, request.compilers,
                       request.scratch_limit)
    return NpuTask(request.kernel, request.target, resolve_npu(request.target, request.device), request.shape,
                   request.macs)


# Called beside each batch with the configurations being measured (LiveSearch.run).
Meanwhile = Callable[[tuple[Config, ...]], None]


def tune(request: TuneRequest, db: TuningDatabase, progress: ProgressFn | None = None,
         executor: Executor | None = None) -> TuneSummary:
    """Run a tuning session on any task (a CPU kernel, an NPU operator). Trials are built
    and run in local threads, or on `executor` (a Dask cluster's, from
    edgetune.cluster.connect); either way only this process writes the database."""
    with LiveSearch(request, db, progress, executor) as search:
        look_ahead = search.batch_look_ahead()
        try:
            return search.run(request.budget, look_ahead)
        finally:
            if look_ahead is not None:
                stop_ahead(search.workload.key())  # what no batch will ask for now


class LiveSearch:
    """One workload's search, opened once and asked for more as often as its owner likes
    (a model's scheduler gives a layer round after round): the goal, the space, the prior
    trials, the strategy (its model fitted as it learns, never refitted from scratch), the
    evaluator and the database replay are made when it opens, and each `run(budget)` goes
    on where the last one stopped, as one uninterrupted session would. `prior_before`: learn
    only from other workloads' trials stored before this row id (None: all of them); `plan`:
    the evaluations the strategy is told to plan for (None: the request's budget)."""

    def __init__(self, request: TuneRequest, db: TuningDatabase, progress: ProgressFn | None = None,
                 executor: Executor | None = None, prior_before: int | None = None, plan: int | None = None):
        parts = search_parts(request, db, prior_before)
        task = parts.task
        self.db, self.task, self.workload, self.request, self.goal = db, task, task.workload, parts.request, parts.goal
        self.space, self.prior, self.ranking = parts.space, parts.prior, parts.ranking
        self.strategy = parts.strategy(plan=plan)
        remote = None if executor is None else task.remote()
        if executor is not None and remote is None:
            raise TargetError(f"{self.workload.target}: runs on this machine only, not on a cluster")
        task.prepare(db)
        if task.remembers_goal:
            db.set_goal(self.workload, parts.goal)
        self._stack = ExitStack()
        try:
            self._open(remote, executor, progress)
        except BaseException:
            self.close()
            raise

    def _open(self, remote, executor, progress) -> None:
        """Replay the database into the strategy and make the evaluator: once."""
        request, task, limit = self.request, self.task, self.task.run_limit_s
        self.start = resume_search(self.db, self.workload, self.space, self.strategy,
                                   (request.strategy, request.seed), request.initial,
                                   redo=lambda trial: replaceable(trial.outcome, trial.info.get("timeout_limit_s"),
                                                                  limit))
        self.stop = StopRule(request, self.goal.objective,
                             best=min((v for t in self.start.done if feasible(t, self.goal.bounds)
                                       and (v := t.value(self.goal.objective)) is not None), default=None))
        batch = task.batch_size(request.batch) if remote is None and isinstance(task, CpuTask) else 1
        if request.batch is None:
            batch = within_plan(batch, request.jobs, self.start.resumed.strategy)
        submit_batch = None
        if remote is None:
            tmp = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="edgetune-"))
            pool = self._stack.enter_context(ThreadPoolExecutor(max_workers=max(1, request.jobs)))
            evaluator = task.evaluator(self.space, Path(tmp))
            submit = functools.partial(pool.submit, evaluator)
            if batch > 1:
                submit_batch = functools.partial(pool.submit, evaluator.evaluate_batch)
        else:
            submit = functools.partial(executor.submit, remote)
        start = self.start
        self._search = SearchRun(start.resumed.strategy, submit, self.db, self.workload, budget=request.budget,
                                 jobs=request.jobs, stored=len(start.done), label=(request.strategy, request.seed),
                                 progress=progress, stop=self.stop, pending=start.pending, remote=remote is not None,
                                 resumed=start.resumed, timeout_limit_s=limit, batch=batch, submit_batch=submit_batch)

    def run(self, budget: int, meanwhile: Meanwhile | None = None) -> TuneSummary:
        """Measure until the workload holds `budget` trials (stored or claimed), the space
        is exhausted or the stop rule says so: the first run finishes what the replay left
        (the interrupted batch, lost trials, initial configurations), later ones only ask.
        `meanwhile` is called in this thread beside each batch, with its configurations,
        once its trials are submitted and before they return: work for the host while they
        run (on a board)."""
        new, stopped = self._search.until(budget, meanwhile)
        return replace(summarize(self.db, self.workload, self.goal.objective, new, self.goal.bounds,
                                 self.request.compilers),
                       stopped=stopped, code_ranking=_ranking_use(self.start.resumed.strategy),
                       **_prior_use(self.db, self.prior, self.strategy))

    def compile_screen_ahead(self, budget: int) -> int:
        """Queue, to compile in the background while trials run (edgetune.ahead), the
        screen this search opened again planning for `budget` would take design points from
        (CodeRankedTransfer.screen_ahead); returns how many were queued (0 for a strategy
        that compiles no code, or a design that is over)."""
        strategy = self.start.resumed.strategy
        if not isinstance(strategy, CodeRankedTransfer) or self.ranking is None:
            return 0
        return self.ranking["score"].ahead([self.space.config_at(i) for i in strategy.screen_ahead(budget)])

    def batch_look_ahead(self) -> Meanwhile | None:
        """What `run` should do beside each batch: on a board (live_rank.AHEAD_RUNNERS, trials
        measured here) a search ranking compiled code compiles what its next batch's plan
        will need (compile_next_batch_ahead); None elsewhere (an emulator's trials take the
        host's cores)."""
        if self.ranking is None or self._search.run.remote or not compiles_ahead(self.request.target):
            return None
        return self.compile_next_batch_ahead

    def compile_next_batch_ahead(self, in_flight: tuple[Config, ...]) -> bool:
        """Beside the batch `in_flight` (`run`'s meanwhile, on a board): queue, to compile in
        the background, what the strategy will compile when asked for its next batch
        (edgetune.batch_ahead); returns whether anything was queued (not for a strategy
        that compiles no code)."""
        search = self._search
        asked = search.asked
        return compile_batch_plan_ahead(self.start.resumed.strategy, search.next_ask(), in_flight,
                                        lambda: search.asked == asked)

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "LiveSearch":
        return self

    def __exit__(self, *_) -> None:
        self.close()


def ranking_of(task: TuningTask, space: Space, request: TuneRequest) -> dict | None:
    """A strategy that ranks candidates by their compiled code (`transfer+code`) gets its
    score here (edgetune.live_rank: compiled through the build cache, read, ranked); for any
    other, None."""
    if not STRATEGIES[request.strategy].uses_code:
        return None
    if not isinstance(task, CpuTask):
        check_code_readable(request.strategy, task.target, request.device)
    return code_ranking(task.kernel, task.target, task.shape, space, task.workload.key(), request.jobs)


@dataclass(frozen=True)
class SearchParts:
    """What a workload's search is made of before anything is replayed or measured: the
    request (its strategy's canonical name, the goal's objective and bounds), task, goal,
    space, the prior trials (other workloads' stored before row `prior_before`; () for a
    strategy that learns from none) and the code ranking's options (None unless it ranks
    code). LiveSearch opens on them; edgetune.search_ahead looks ahead with them."""

    request: TuneRequest
    task: TuningTask
    goal: Goal
    space: Space
    prior: tuple[PriorTrials, ...]
    ranking: dict | None

    def strategy(self, ranking: dict | None = None, plan: int | None = None):
        """The search's strategy, fresh from its seed; `ranking` in place of the parts' own
        (a probe that compiles nothing), `plan` the evaluations it plans for (None: the
        request's budget)."""
        request = self.request
        return make_strategy(request.strategy, self.space, np.random.default_rng(request.seed), self.goal.objective,
                             self.prior, budget=request.budget if plan is None else plan,
                             roles=target_roles(self.task.workload.target, self.task.target),
                             ranking=self.ranking if ranking is None else ranking)


def search_parts(request: TuneRequest, db: TuningDatabase, prior_before: int | None = None) -> SearchParts:
    """The parts of `request`'s search on `db` (SearchParts); refuses what it cannot run."""
    check_strategy(request.strategy)
    # An old strategy name runs and is stored as the one it stands for (tuner ALIASES).
    request = replace(request, strategy=canonical_strategy(request.strategy))
    check_run_limits(request)
    task = task_of(request)
    goal = task.goal(db, request.objective, request.bounds)
    space = task.space(goal)
    prior = (prior_trials(db, task.workload, task.target, prior_before)
             if STRATEGIES[request.strategy].uses_prior else ())
    return SearchParts(replace(request, objective=goal.objective, bounds=goal.bounds), task, goal, space, prior,
                       ranking_of(task, space, request))


def _ranking_use(strategy) -> CodeRankingUse | None:
    """What a strategy that ranks compiled code did (TuneSummary.code_ranking); None for others."""
    use = getattr(strategy, "ranking_use", None)
    return use() if callable(use) else None


def _prior_use(db: TuningDatabase, prior: tuple[PriorTrials, ...], strategy) -> dict:
    """What a run was given from other workloads and what it learnt from (TuneSummary's
    prior_* fields), so the command can say whether priors were used."""
    if not prior:
        return {}
    sources = {p.source for p in prior}
    targets = tuple(sorted({w.target for w in db.workloads() if w.key() in sources}))
    return {"prior_stored": sum(len(p.trials) for p in prior), "prior_used": getattr(strategy, "prior_size", 0),
            "prior_targets": targets}


def within_plan(batch: int, jobs: int, strategy) -> int:
    """Variants per image such that a round (jobs x batch) asks no more than a strategy that
    plans its proposals in batches (the model-guided ones: `batch`) plans at once, so its
    search learns as often as it would alone."""
    plan = getattr(strategy, "batch", None)
    if not isinstance(plan, int) or isinstance(plan, bool) or plan < 1:
        return batch
    return max(1, min(batch, plan // max(1, jobs)))


@dataclass(frozen=True)
class SearchStart:
    """Where a search starts on a database: the rebuilt strategy (and the interrupted batch),
    the configurations to measure before asking it, and the stored trials that count."""

    resumed: Resumed
    pending: tuple[Config, ...]
    done: tuple[Trial, ...]


def resume_search(db: TuningDatabase, workload: Workload, space: Space, strategy, label: tuple[str, int | None],
                  initial: Sequence[dict] = (),
                  redo: Callable[[Trial], bool] = lambda trial: trial.outcome.lost) -> SearchStart:
    """Rebuild `strategy` (fresh from its seed) over the stored proposals in proposal order
    (edgetune.tuner.resume), so a resumed run ends where an uninterrupted one does,
    whatever order trials finished in. Then: `initial` configurations, and stored trials
    to measure again (`redo`: lost with their machine, or timed out under a smaller run
    limit than the target's now) are measured first."""
    records = db.proposals(workload)
    claims = db.claims(workload)
    resumed = rebuild(strategy, space, records, claims, label)
    done = tuple(record.trial for record in records if not redo(record.trial))
    lost = [record.trial.config for record in records if redo(record.trial)]
    # Claimed configurations are someone's to measure (or the interrupted batch's).
    measured = {*(trial.config for trial in (*done, *trials_as_points(space, done))),
                *(_as_config(space, claim.config.as_dict()) for claim in claims)}
    # Seeds that no longer fit the space (a parameter value gone, a constraint tightened)
    # are dropped: the search covers the workload anyway.
    seeds = [*initial, *(config.as_dict() for config in lost)]
    pending = tuple(dict.fromkeys(config for config in (_as_config(space, values) for values in seeds)
                                  if config is not None and config not in measured))
    return SearchStart(resumed, pending, done)


@dataclass(frozen=True)
class RemoteEvaluation:
    """What a cluster worker needs to evaluate configurations of a workload: small and
    picklable. Inputs and the reference are rebuilt on the worker from the workload, so
    every worker measures exactly what a local run would."""

    kernel: str
    target: Target
    shape: tuple[tuple[str, int], ...]
    bundle: KernelBundle | None = None  # a kernel of the user's own, by content (user_loader.py)
    zero_points: tuple[tuple[str, int], ...] = ()  # `tune --zero-point` (Kernel.tuning_zero_points)


@functools.lru_cache(maxsize=16)
def _worker_evaluator(spec: RemoteEvaluation) -> Evaluator:
    # One evaluator per workload per worker process: the reference is computed once.
    kernel = kernel_of_bundle(spec.bundle) if spec.bundle is not None else get_kernel(spec.kernel)
    shape = dict(spec.shape)
    if spec.zero_points:
        kernel = with_zero_points(kernel, shape, dict(spec.zero_points))
    return Evaluator(kernel, spec.target, shape, kernel.tuning_space(spec.target, shape),
                     workload_inputs(kernel, workload_of(kernel, spec.target, shape)),
                     Path(tempfile.mkdtemp(prefix="edgetune-worker-")))


def evaluate_remotely(spec: RemoteEvaluation, config: Config) -> Trial:
    """Runs on a cluster worker."""
    return _worker_evaluator(spec)(config)


def search_loop(strategy, submit: Callable, db: TuningDatabase, workload: Workload, *, budget: int, jobs: int,
                stored: int, label: tuple[str, int | None], progress: ProgressFn | None = None,
                stop: "StopRule | None" = None, pending: Sequence[Config] = (), remote: bool = False,
                resumed: Resumed | None = None, timeout_limit_s: float = 0.0, batch: int = 1,
                submit_batch: Callable | None = None) -> tuple[int, str]:
    """The loop every tuning session runs: until the workload's `budget` is used (trials
    stored, and claimed by any process sharing the database), claim a batch of up to `jobs`
    configurations and evaluate it through `submit`: first what `resumed` left (the
    interrupted batch, then claims of dead processes), then `pending`, then what the
    strategy asks for. Each trial is stored as it completes; the strategy is told each batch
    in proposal order (batch-synchronous, so a seed reproduces the run whatever order
    trials finish in). `label` is the (strategy name, seed) stored with each trial.
    With `submit_batch` (several configurations per image, edgetune.targets.batch), a
    round holds up to `jobs` x `batch` configurations, evaluated as `jobs` groups.
    Returns the number of new trials and why the loop ended: budget, exhausted, or the
    stop rule's reason."""
    return SearchRun(strategy, submit, db, workload, budget=budget, jobs=jobs, stored=stored, label=label,
                     progress=progress, stop=stop, pending=pending, remote=remote, resumed=resumed,
                     timeout_limit_s=timeout_limit_s, batch=batch, submit_batch=submit_batch).until(budget)


class SearchRun:
    """search_loop's state, kept between calls of `until` by a search that stays open
    (LiveSearch): the strategy, what is left to measure, and what is known of other
    processes' trials and claims."""

    def __init__(self, strategy, submit: Callable, db: TuningDatabase, workload: Workload, *, budget: int, jobs: int,
                 stored: int, label: tuple[str, int | None], progress: ProgressFn | None = None,
                 stop: "StopRule | None" = None, pending: Sequence[Config] = (), remote: bool = False,
                 resumed: Resumed | None = None, timeout_limit_s: float = 0.0, batch: int = 1,
                 submit_batch: Callable | None = None):
        self.owner, self.db, self.workload, self.label = Owner.this_process(), db, workload, label
        resumed = resumed or Resumed.nothing_to_replay(strategy, db.proposals(workload))
        self.resumed = _within_budget(db, workload, budget, resumed)
        self.run = _BatchRunner(strategy, submit, db, workload, label, self.owner, remote, progress, stop, stored,
                                budget, self.resumed)
        self.run.submit_batch, self.run.jobs = submit_batch, jobs
        self.strategy, self.stop, self.timeout_limit_s = strategy, stop, timeout_limit_s
        self.least = jobs  # a round as it is one at a time: never cut below this
        self.jobs = jobs * batch if submit_batch is not None else jobs  # configurations per round
        self.pending, self.orphans = list(pending), list(self.resumed.orphans)
        self.asked = 0  # batches the strategy was asked for

    def next_ask(self) -> int:
        """How many proposals the strategy will be asked for once the batch being measured
        returns, as things stand (0: none, or what the replay left and the initial
        configurations come first): what a look-ahead asks a copy for (edgetune.batch_ahead)."""
        if self.orphans or self.pending or self.resumed.batch_claims:
            return 0
        return max(0, self._room(self.run.budget))

    def _room(self, budget: int) -> int:
        """The proposals the next ask may ask for: a round's, within the budget (stored and
        claimed) and what the stop rule leaves; <= 0 when the budget is used."""
        room = min(self.jobs, budget - self.db.used(self.workload))
        if room > 0 and self.stop is not None:
            room = min(room, self.stop.room(self.least))
        return room

    def until(self, budget: int, meanwhile: Meanwhile | None = None) -> tuple[int, str]:
        """Measure until the workload's `budget` is used (or the space exhausted, or the stop
        rule says so); returns the trials this call measured and why it ended. `meanwhile`
        (LiveSearch.run) runs beside each batch."""
        new_before, self.run.budget = self.run.new, budget
        with self.db.heartbeat(self.owner):
            if self.resumed.batch_claims:
                self.run.resume(self.resumed)
                self.resumed = replace(self.resumed, batch_claims=())
            while (reason := self._round(budget, meanwhile)) is None:
                pass
        return self.run.new - new_before, reason

    def _round(self, budget: int, meanwhile: Meanwhile | None = None) -> str | None:
        """Measure one batch (`meanwhile` beside it); why the loop ends instead, if it does."""
        db, workload, run, jobs = self.db, self.workload, self.run, self.jobs
        if self.stop is not None and (reason := self.stop.reason()) is not None:
            return reason
        self.orphans.extend(run.look_around())
        if self.orphans:  # owed to the budget already: measured before anything new
            taken = db.take_over(workload, [claim for _, claim in self.orphans[:jobs]], self.owner)
            points = {claim.config.key(): point for point, claim in self.orphans[:jobs]}
            self.orphans = self.orphans[jobs:]
            run.measure([(points[c.config.key()], c) for c in taken], meanwhile)
            return None
        if self.pending:  # the budget decides in the claim: a lost trial measured again takes no room
            claims, _ = db.claim(workload, self.pending[:jobs], budget=budget, owner=self.owner,
                                 strategy=self.label[0], seed=self.label[1], asked=False,
                                 timeout_limit_s=self.timeout_limit_s)
            self.pending = self.pending[jobs:]
            run.measure([(claim.config, claim) for claim in claims], meanwhile)
            return None
        room = self._room(budget)
        if room <= 0:
            return "budget"
        asked_at = time.monotonic()
        batch = self.strategy.ask(room)
        self.asked += 1
        run.spent["search"] += time.monotonic() - asked_at
        if not batch:
            return "exhausted"  # every legal configuration has been measured
        # Configurations another process claimed meanwhile are passed over here; the
        # strategy learns their results when that process stores them.
        claimed_at = time.monotonic()
        claims, _ = db.claim(workload, batch, budget=budget, owner=self.owner, strategy=self.label[0],
                             seed=self.label[1], asked=True)
        run.spent["database"] += time.monotonic() - claimed_at
        run.measure([(claim.config, claim) for claim in claims], meanwhile)
        return None


def _within_budget(db: TuningDatabase, workload: Workload, budget: int, resumed: Resumed) -> Resumed:
    """A run resumed with a smaller budget than the interrupted one claimed for: the claims
    beyond it are dropped (latest first), so the run ends with exactly `budget` trials."""
    dropped = db.drop_claims_over(workload, budget)
    if not dropped:
        return resumed

    def kept(pairs):
        return tuple(pair for pair in pairs if pair[1].config.key() not in dropped)

    return replace(resumed, batch_claims=kept(resumed.batch_claims), orphans=kept(resumed.orphans))


class _BatchRunner:
    """Measures claimed batches and tells the strategy; keeps up with other processes
    sharing the database (their results are told, their claims never proposed)."""

    def __init__(self, strategy, submit, db: TuningDatabase, workload: Workload, label, owner: Owner,
                 remote: bool, progress: ProgressFn | None, stop: "StopRule | None", stored: int, budget: int,
                 resumed: Resumed):
        self.strategy, self.submit, self.db, self.workload = strategy, submit, db, workload
        self.label, self.owner, self.remote, self.progress, self.stop = label, owner, remote, progress, stop
        self.stored, self.new, self.budget = stored, 0, budget
        # Stored trials the strategy knows of (told by the rebuild, or measured here).
        self.last_id, self.known = resumed.last_id, set(resumed.seen)
        # Claims left by dead owners that are dealt with already, and configurations others
        # are measuring (never proposed here).
        self.orphaned = {(c.config.key(), c.owner) for _, c in (*resumed.batch_claims, *resumed.orphans)}
        self.skipped: set[str] = set()
        # Several configurations per submitted evaluation, in `jobs` groups (search_loop).
        self.submit_batch: Callable | None = None
        self.jobs = 1
        self.spent = {"search": 0.0, "database": 0.0}  # seconds of this run, for the progress display

    def resume(self, resumed: Resumed) -> None:
        """Finish the interrupted batch: take over its claims, measure them, tell it whole."""
        taken = self.db.take_over(self.workload, [claim for _, claim in resumed.batch_claims], self.owner)
        points = {claim.config.key(): point for point, claim in resumed.batch_claims}
        trials = self._run([(points[c.config.key()], c) for c in taken])
        by_config = {**resumed.batch_trials, **{t.config: t for t in trials}}
        self._tell([by_config[config] for config in resumed.batch if config in by_config])

    def measure(self, batch: list[tuple[Config, Claim]], meanwhile: Meanwhile | None = None) -> None:
        self._tell(self._run(batch, meanwhile))

    def _run(self, batch: list[tuple[Config, Claim]], meanwhile: Meanwhile | None = None) -> list[Trial]:
        """Evaluate the batch; store each trial as it completes. Trials in batch order.
        `meanwhile` is called once the batch is submitted, before its trials are waited for."""
        groups = self._groups(batch)
        futures = {self._submit(group): group for group in groups}
        if meanwhile is not None:
            meanwhile(tuple(config for config, _ in batch))
        results = {}
        for future in as_completed(futures):
            group = futures[future]
            trials = _results(future, [config for config, _ in group], self.remote, len(group) > 1)
            for (config, claim), trial in zip(group, trials):
                results[config.key()] = trial
                self._store(trial, claim)
        return [results[config.key()] for config, _ in batch]

    def _groups(self, batch: list[tuple[Config, Claim]]) -> list[list[tuple[Config, Claim]]]:
        """One group per evaluation: each configuration alone, or with submit_batch the
        round cut into `jobs` groups of consecutive proposals."""
        if self.submit_batch is None or len(batch) < 2:
            return [[pair] for pair in batch]
        size = -(-len(batch) // self.jobs)
        return [batch[i:i + size] for i in range(0, len(batch), size)]

    def _submit(self, group: list[tuple[Config, Claim]]):
        if len(group) == 1:
            return self.submit(group[0][0])
        return self.submit_batch(tuple(config for config, _ in group))

    def _store(self, trial: Trial, claim: Claim) -> None:
        started = time.monotonic()
        self.known.add(trial.config.key())
        if self.db.record(self.workload, trial, *self.label, claim=claim):
            self.stored += 1
            self.new += 1
        self.spent["database"] += time.monotonic() - started
        if self.progress:
            # Where this run's time went besides the evaluations, so far (for the display).
            shown = replace(trial, info={**trial.info, **{f"run_seconds_{k}": round(v, 3) for k, v in self.spent.items()}})
            self.progress(self.stored, self.budget, shown)

    def _tell(self, trials: list[Trial]) -> None:
        started = time.monotonic()
        self.strategy.tell(trials)
        self.spent["search"] += time.monotonic() - started
        if self.stop is not None:
            self.stop.observe(trials)

    def look_around(self) -> list[tuple[Config, Claim]]:
        """What other processes did since the last look: their stored trials are told,
        their claims are never proposed here; claims they left behind are returned."""
        since = self.db.proposals(self.workload, self.last_id)
        self.last_id = max([self.last_id, *(r.id for r in since)])
        fresh = [r.trial for r in since if r.trial.config.key() not in self.known]
        if fresh:
            self.known.update(t.config.key() for t in fresh)
            self.strategy.tell(trials_as_points(self.strategy.space, fresh))
        left = []
        for claim in self.db.claims(self.workload):
            if claim.owner == self.owner:
                continue
            point = _as_config(self.strategy.space, claim.config.as_dict())
            if claim.expired():
                if (claim.config.key(), claim.owner) in self.orphaned:
                    continue
                self.orphaned.add((claim.config.key(), claim.owner))
                if point is not None:
                    left.append((point, claim))
            elif claim.config.key() not in self.skipped:
                self.skipped.add(claim.config.key())
                if point is not None:
                    self.strategy.skip([point])
        return left


def _results(future, configs: list[Config], remote: bool, grouped: bool) -> list[Trial]:
    """A finished evaluation's trials (one, or a group's). Local evaluations never raise
    (faults are trials: anything else is a bug and propagates); on a cluster, a trial Dask
    could not complete even after rescheduling it is recorded as a failed trial instead of
    being lost."""
    if not remote:
        return future.result() if grouped else [future.result()]
    try:
        return [future.result()]
    except Exception as exc:  # noqa: BLE001 - any cluster failure becomes a recorded trial
        return [Trial(configs[0], Outcome.RUNTIME_ERROR,
                      error=f"evaluation lost on the cluster: {type(exc).__name__}: {exc}")]


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

    def room(self, least: int) -> int:
        """The most evaluations the next round may ask for: what patience has left (so a
        batched round does not run past it), but never fewer than `least`."""
        if self.patience is None:
            return 1 << 30
        return max(least, self.patience - self.since_best)

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


def compiled_by(trial: Trial, compilers: tuple[str, ...]) -> bool:
    """Whether a trial's variant was built by one of `compilers` (--compiler; (): any)."""
    return not compilers or trial.config.as_dict().get("compiler") in compilers


def check_compilers(target: Target, compilers: tuple[str, ...]) -> None:
    """Refuse a --compiler the target does not have, naming the ones it has."""
    offered = [c.name for c in target.compilers]
    unknown = [c for c in compilers if c not in offered]
    if unknown:
        raise TargetError(f"--compiler {unknown[0]}: {target.name} has no compiler of that name "
                          f"(its compilers: {', '.join(offered)})")


def only_compilers(space: Space, target: Target, compilers: tuple[str, ...]) -> Space:
    """`space` restricted to configurations built by `compilers` (--compiler): a firmware
    built with one toolchain gets no object measured with another. (): `space` itself."""
    if not compilers:
        return space
    check_compilers(target, compilers)
    if "compiler" not in space.names:
        return space
    return Space(space.params, [*space.constraints, Constraint(
        f"compiler is not {' or '.join(compilers)} (--compiler)", lambda c: c["compiler"] in compilers,
        reads=("compiler",))])


def within_scratch(space: Space, kernel: Kernel, shape: dict, limit: int | None) -> Space:
    """`space` without the configurations whose scratch the kernel estimates above `limit`
    bytes (Kernel.scratch_estimate; a kernel without an estimate is not restricted). None:
    `space` itself."""
    reads = tuple(getattr(kernel, "scratch_reads", ()))
    if limit is None or not reads or not set(reads) <= set(space.names):
        return space
    return Space(space.params, [*space.constraints, Constraint(
        f"scratch above the {limit} bytes the RAM bound leaves this layer (--max-ram)",
        lambda c: (kernel.scratch_estimate(shape, c) or 0) <= limit, reads=reads)])


def trials_as_points(space: Space, trials: Sequence[Trial]) -> list[Trial]:
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


def prior_trials(db: TuningDatabase, workload: Workload, target: Target | None = None,
                 before: int | None = None) -> tuple[PriorTrials, ...]:
    """Trials of the same kernel (same template version) on every other stored workload:
    other shapes and other targets, for strategies that transfer what they learnt, each
    with its target's value roles (edgetune.value_roles; `target` is the one being tuned).
    Each in proposal order, not the order trials finished in (timing), so what a strategy
    learns from them is the same in a resumed run as in an uninterrupted one. `before`: only
    trials stored before this row id (what was stored when a search first opened)."""
    others = [other for other in db.workloads() if other.kernel == workload.kernel
              and other.kernel_version == workload.kernel_version and other != workload]
    roles = {name: target_roles(name, target) for name in {other.target for other in others}}
    stored = {other: [r.trial for r in db.proposals(other) if before is None or r.id < before] for other in others}
    return tuple(PriorTrials(other.key(), tuple(trials), roles[other.target])
                 for other, trials in stored.items() if trials or before is None)


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
              bounds: tuple[Bound, ...] = (), compilers: tuple[str, ...] = ()) -> TuneSummary:
    """The stored trials of a workload in figures, and its best (within `bounds`, and
    compiled by one of `compilers` when given)."""
    trials = db.trials(workload)
    failures: dict[str, int] = {}
    for trial in trials:
        if trial.outcome.failed:
            failures[trial.outcome.value] = failures.get(trial.outcome.value, 0) + 1
    infeasible = sum(1 for t in trials if not t.outcome.failed and not feasible(t, bounds))
    return TuneSummary(workload=workload, objective=objective, trials=len(trials), new_trials=new_trials,
                       failures=failures, best=db.best(workload, objective,
                                                       lambda t: feasible(t, bounds) and compiled_by(t, compilers)),
                       bounds=bounds, infeasible=infeasible)
