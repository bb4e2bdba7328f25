"""Tuning a whole model: every tunable layer becomes a workload (identical layers are one,
counted as often as they occur), and a task scheduler (edgetune.tuner.scheduler, after
Ansor's) spends the model's trial budget in rounds on the layer where a round is expected to
lower the model's total cost most. Each layer has one search (edgetune.session.LiveSearch),
opened at its first round and asked for one more round's trials at each of the next: its
space, strategy and evaluator are made once. The default `transfer` strategy learns from the
trials of the same kernel's other layers stored when the layer's search opened, so layers
tuned later start from what earlier ones found. Before its strategy proposes, a layer's round
measures the kernel's default configuration and its plain loop nest (so the exported variant
is never slower than either) and the best configurations similar layers found so far (RoundRunner._winners); a layer
still slower than its plain C loop is given rounds to catch up (tuner.scheduler).

The model's budget, like a workload's, counts stored trials: the rounds are replayed from
the database, and a round whose trials are stored already measures nothing. So a run that
was killed, resumed with the same seed, chooses the same rounds and ends where the
uninterrupted run ends (with deterministic measurements: emulator counts), and a rerun with
a larger budget goes on where the last one stopped: a layer's search reopened on a database
that holds its trials replays them, and learns from the other layers' trials stored before
its first one (what it learnt from when it first opened).
"""
from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

from edgetune.codegen import CodegenError, Kernel, get_kernel
from edgetune.codegen.kernels.naive_path import NAIVE
from edgetune.codegen.placement import PlacementError
from edgetune.errors import EdgetuneError
from edgetune.hal import Target
from edgetune.targets.runners import runner_for
from edgetune.tuner import Bound, Config, Record, TuningDatabase, Workload, check_strategy, feasible
from edgetune.tuner.code_explore import KernelFit
from edgetune.tuner.scheduler import SchedTask, TaskHistory, make_scheduler, model_cost
from edgetune.tuner.strategies import DEFAULT_STRATEGY

from edgetune.evaluate import measure_source
from edgetune.live_rank import compiles_ahead, scores_made, stop_ahead
from edgetune.search_ahead import compile_first_screen_ahead, compile_next_plan_ahead
from edgetune.session import (LiveSearch, ProgressFn, TuneRequest, TuneSummary, check_compilers, choose_objective,
                              compiled_by, workload_inputs, workload_of)
from .module import default_config
from .shared_rounds import SharedRounds, model_key, wait_for_round


class ModelLayer(Protocol):
    """What tuning needs of a model's layer (edgetune.model's ModelLayer has it)."""

    index: int  # the operator's index in the model
    kernel: str | None  # the kernel serving it; None: not tuned
    shape: tuple[tuple[str, int], ...]  # the kernel's shape keys and values
    macs: int


class ModelTuneError(EdgetuneError):
    """A model that cannot be tuned as given (a layer's kernel or shape, nothing to tune)."""


@dataclass(frozen=True)
class LayerWorkload:
    """One distinct (kernel, shape) of the model, and the operators it serves."""

    kernel: Kernel
    shape: dict
    workload: Workload
    layers: tuple[int, ...]  # operator indices
    macs: int  # of one occurrence

    @property
    def weight(self) -> int:
        return len(self.layers)


@dataclass(frozen=True)
class LayerRanking:
    """What `transfer+code`'s code ranking did for one layer over its rounds (each round is a
    search of its own, so `tune`'s one-run summary, CodeRankingUse, is kept per round here)."""

    kernel_fit: KernelFit | None  # the gate's evidence before any trial (the same every round)
    voted_from_start: bool  # that evidence let the code vote from a round's first plan
    rounds: int  # rounds that measured something
    rounds_voting: int  # of them, those after which the gate was open (the code had its say)
    compiled: int  # the layer's candidates compiled and ranked in this process, run or not


@dataclass(frozen=True)
class LayerResult:
    workload: Workload
    layers: tuple[int, ...]
    macs: int
    trials: int  # trials the model's budget gave it
    best: Record | None  # its best feasible trial among them
    value: float | None  # the objective's value of `best`
    baseline: float | None = None  # the plain C loop nest (-O3), when the kernel has one and it ran
    failures: dict = field(default_factory=dict)  # outcome value -> count, among its trials
    exhausted: bool = False  # every configuration of its space was measured
    code_ranking: LayerRanking | None = None  # a strategy that ranks compiled code: what it did

    @property
    def weight(self) -> int:
        return len(self.layers)


@dataclass(frozen=True)
class ModelRound:
    """The state after one round: what the progress display shows."""

    number: int
    workload: Workload  # the layer that had the round
    layer_trials: int  # its trials so far
    spent: int  # the model's trials so far
    budget: int
    total: float | None  # sum of weight * best; None while a layer has no feasible trial
    missing: int  # layers without a feasible trial yet
    layers: tuple[int, ...] = ()  # the model's operator indices the round's workload serves


ModelProgressFn = Callable[[ModelRound], None]


@dataclass(frozen=True)
class ModelSummary:
    target: str
    objective: str
    scheduler: str
    budget: int
    spent: int
    layers: tuple[LayerResult, ...]
    untuned: tuple[int, ...] = ()  # operators no kernel serves
    rounds: tuple[ModelRound, ...] = ()
    bounds: tuple[Bound, ...] = ()

    @property
    def total(self) -> float | None:
        """The model's cost: sum of weight * best over its layers; None when one has none."""
        if any(layer.value is None for layer in self.layers):
            return None
        return sum(layer.weight * layer.value for layer in self.layers)

    @property
    def baseline_total(self) -> float | None:
        if any(layer.baseline is None for layer in self.layers):
            return None
        return sum(layer.weight * layer.baseline for layer in self.layers)

    @property
    def unsolved(self) -> tuple[LayerResult, ...]:
        """Layers with no feasible trial: reported, the model has no total."""
        return tuple(layer for layer in self.layers if layer.value is None)


def tune_model(layers: Sequence[ModelLayer], target: Target, db: TuningDatabase, *, budget: int,
               strategy: str = DEFAULT_STRATEGY, seed: int = 0, jobs: int = 1, objective: str = "",
               bounds: tuple[Bound, ...] = (), progress: ModelProgressFn | None = None, scheduler: str = "gradient",
               round_trials: int = 4, baselines: bool = True, trial_progress: ProgressFn | None = None,
               kernels: Callable[[str], Kernel] = get_kernel, batch: int | None = None,
               compilers: tuple[str, ...] = (), scratch_limits: dict[tuple, int] | None = None) -> ModelSummary:
    """Tune the model's distinct layers on `target`, `budget` trials in all, split in rounds
    of `round_trials` (at least `jobs`) by `scheduler` ("gradient" or "even"); see the module.
    Every layer is checked (kernel, shape, fits the target) before anything is measured.
    `progress` hears of every round, `trial_progress` of every trial (as tune() reports it).
    `batch`: variants per image (TuneRequest.batch; None: the session's choice). `compilers`:
    the only compilers measured and counted (TuneRequest.compilers; (): every one).
    `scratch_limits`: (kernel, shape) -> the bytes of scratch a layer's variants may need
    (a RAM bound's share, ram_fit.scratch_allowance): the others are not proposed."""
    check_strategy(strategy)
    chooser = make_scheduler(scheduler, seed)
    if budget < 0 or round_trials < 1:
        raise ModelTuneError(f"budget {budget} and round trials {round_trials}: need budget >= 0, round trials >= 1")
    objective = choose_objective(target, objective, bounds)
    check_compilers(target, compilers)
    workloads = distinct_workloads(layers, target, kernels)
    runner_for(target).check_tools()
    # What every round's tuning session shares; the layer and its budget change per round.
    template = TuneRequest(workloads[0].kernel, target, workloads[0].shape, strategy, 0, max(1, jobs), seed,
                           objective, bounds, batch=batch, compilers=compilers)
    # The plain loops first: a layer still slower than its own is given rounds to catch up.
    plain = {lw.workload.key(): measure_baseline(lw, target, objective) if baselines else None for lw in workloads}
    tasks = [SchedTask(lw.workload.key(), lw.weight, similarity_group(lw), lw.macs, plain[lw.workload.key()])
             for lw in workloads]
    log: list[ModelRound] = []
    limits = {lw.workload.key(): (scratch_limits or {}).get((lw.kernel.name, tuple(lw.shape.items())))
              for lw in workloads}
    def next_round(histories: Mapping[str, TaskHistory], spent: int) -> str | None:
        return chooser.choose(tasks, histories) if spent < budget else None

    with RoundRunner(workloads, db, template, max(round_trials, jobs), trial_progress, limits, next_round) as rounds:
        rounds.compile_first_screens_ahead()
        # Processes sharing the database follow one sequence of rounds (edgetune.model.shared_rounds).
        shared = SharedRounds(db, model_key([(t.id, t.weight) for t in tasks], objective, bounds, chooser.name,
                                            rounds.size))
        while rounds.spent < budget and (decided := shared.next_round(
                len(log) + 1, lambda: chooser.choose(tasks, rounds.histories), rounds.size,
                budget - rounds.spent)) is not None:
            chosen, room = decided
            trials = rounds.run(chosen, room)
            state = ModelRound(len(log) + 1, rounds.by_key[chosen].workload, trials, rounds.spent, budget,
                               model_cost(tasks, rounds.histories),
                               sum(1 for h in rounds.histories.values() if h.current is None),
                               rounds.by_key[chosen].layers)
            log.append(state)
            if progress is not None:
                progress(state)
    results = tuple(rounds.result(lw, plain[lw.workload.key()]) for lw in workloads)
    untuned = tuple(layer.index for layer in layers if layer.kernel is None)
    return ModelSummary(target.name, objective, chooser.name, budget, rounds.spent, results, untuned, tuple(log),
                        bounds)


# The int8 lanes of one 128-bit vector (Helium, NEON): a layer whose vectorised axis (the
# reduction's input channels, a depthwise layer's channels, a matmul's k) is narrower leaves
# lanes idle in every instruction, so its MACs per cycle stay below a wider layer's.
VECTOR_LANES = 16
VECTOR_AXES = ("cin", "c", "k")


def similarity_group(lw: LayerWorkload) -> str:
    """Which layers the scheduler takes as similar (Ansor's similar tasks, whose throughput
    says how fast a layer could become): the same kernel with the same filter window, and
    a vectorised axis narrower than one vector (VECTOR_LANES) or not. A 3x3 convolution on 3
    input channels cannot reach the MACs per cycle of one on 16-64: taken for similar, ResNet-8's
    first convolution kept its hopes up and took 156 of 288 trials, MobileNet's 1x1 8->16
    convolution 476 of 640 (bench/RESULTS.md)."""
    window = (lw.shape.get("kh"), lw.shape.get("kw"))
    group = lw.workload.kernel if None in window else f"{lw.workload.kernel} {window[0]}x{window[1]}"
    narrow = any(lw.shape.get(axis, VECTOR_LANES) < VECTOR_LANES for axis in VECTOR_AXES)
    return f"{group} narrow" if narrow else group


def distinct_workloads(layers: Sequence[ModelLayer], target: Target,
                       kernels: Callable[[str], Kernel] = get_kernel) -> list[LayerWorkload]:
    """The model's tunable layers as workloads, layers of one workload merged, in the order
    they first occur; each layer checked (kernel known, shape valid, buffers fit the
    target), the error naming the layer."""
    found: dict[str, LayerWorkload] = {}
    checked: dict[tuple, tuple[Kernel, dict]] = {}  # identical layers are checked once
    for layer in layers:
        if layer.kernel is None:
            continue
        raw = (layer.kernel, tuple(layer.shape))
        if raw not in checked:
            checked[raw] = _checked(layer, target, kernels)
        kernel, shape = checked[raw]
        workload = workload_of(kernel, target, shape)
        known = found.get(workload.key())
        if known is None:
            found[workload.key()] = LayerWorkload(kernel, shape, workload, (layer.index,), int(layer.macs))
        else:
            found[workload.key()] = replace(known, layers=(*known.layers, layer.index))
    if not found:
        raise ModelTuneError("the model has no layer edgetune can tune")
    return list(found.values())


def _checked(layer: ModelLayer, target: Target, kernels: Callable[[str], Kernel]) -> tuple[Kernel, dict]:
    try:
        kernel = kernels(layer.kernel)
        shape = kernel.parse_shape(dict(layer.shape))
        kernel.check_fits(target, shape)
    except EdgetuneError as exc:
        raise ModelTuneError(f"layer {layer.index} ({layer.kernel}): {exc}") from None
    return kernel, shape


# How many of the similar layers' best configurations a layer's round measures first (RoundRunner._winners).
WINNERS = 2


# The layer the scheduler would give the next round, from the layers' histories and the
# trials spent once the current round is over (None: none, the budget spent).
NextRound = Callable[[Mapping[str, TaskHistory], int], "str | None"]


class RoundRunner:
    """Gives layers rounds of trials and keeps each one's history for the scheduler. A
    round raises the layer's allocation; trials the database holds already count (in
    proposal order), so only what is missing is measured, by the layer's search: opened
    at the first round that measures and kept open until the runner closes."""

    def __init__(self, workloads: Sequence[LayerWorkload], db: TuningDatabase, template: TuneRequest, size: int,
                 trial_progress: ProgressFn | None = None, scratch_limits: dict[str, int | None] | None = None,
                 next_round: NextRound | None = None):
        self.db, self.template, self.size, self.trial_progress = db, template, size, trial_progress
        self.next_round = next_round
        self.scratch_limits = scratch_limits or {}
        self.objective, self.bounds = template.objective, template.bounds
        self.by_key = {lw.workload.key(): lw for lw in workloads}
        self.histories = {key: TaskHistory() for key in self.by_key}
        self.allocated = {key: 0 for key in self.by_key}
        self.searches: dict[str, LiveSearch] = {}
        self.ranking: dict[str, LayerRanking] = {}

    def __enter__(self) -> "RoundRunner":
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def close(self) -> None:
        searches, self.searches = self.searches, {}
        for search in searches.values():
            search.close()
        for key in self.by_key:
            stop_ahead(key)  # what the rounds will not ask for any more

    @property
    def spent(self) -> int:
        return sum(self.allocated.values())

    def run(self, key: str, trials: int) -> int:
        """One round of up to `trials` more trials for the layer; returns its trials so far."""
        lw = self.by_key[key]
        want = self.allocated[key] + trials
        proposals = self.db.proposals(lw.workload)
        foreign = self._foreign(proposals)
        if len(proposals) - foreign < want:
            # Faults in the layer's variants are failed trials inside the search; the run goes on.
            search = self._search(lw, want + foreign)
            meanwhile = None
            if compiles_ahead(self.template.target):
                search.compile_screen_ahead(want + foreign + self.size)  # the screen of its next round
                meanwhile = functools.partial(self._compile_ahead_beside_batch, key, want, search)
            self._note_ranking(key, search.run(want + foreign, meanwhile))
        # Trials of this round another process is measuring count once they are stored.
        wait_for_round(self.db, lw.workload, want + foreign,
                       lambda: self._search(lw, want + foreign).run(want + foreign))
        given = self._given(lw, want)
        # Fewer than asked for: every configuration of the space has been measured.
        self.allocated[key] = len(given)
        self.histories[key] = self.histories[key].after(self._best_value(given), exhausted=len(given) < want)
        return len(given)

    def _foreign(self, proposals: Sequence[Record]) -> int:
        """A layer's stored trials of compilers this run may not use (--compiler): they count
        in a session's budget (the workload's stored trials), not in the layer's allocation."""
        return sum(1 for r in proposals if not compiled_by(r.trial, self.template.compilers))

    def _compile_ahead_beside_batch(self, key: str, want: int, search: LiveSearch,
                                    in_flight: tuple[Config, ...]) -> None:
        """While a batch (`in_flight`) of `key`'s round runs on a board, queue what the next
        round's opening will compile, then, ahead of it (needed sooner), what the round's
        next batch will (edgetune.batch_ahead)."""
        self._compile_next_plan_ahead(key, want)
        search.compile_next_batch_ahead(in_flight)

    def _compile_next_plan_ahead(self, key: str, want: int) -> None:
        """While a batch of `key`'s round (up to `want` trials) runs on a board, queue what the
        next round's first plan will compile (edgetune.search_ahead): of the layer the
        scheduler would choose as the round stands, on the trials stored by now. Beside
        each batch, not only the last: one batch's time (two trials, about 7 s) compiled
        about half of what a round's opening waited on (its replay's plan, then its own)."""
        lw = self.by_key[key]
        now = {**self.histories, key: self.histories[key].after(self._best_value(self._given(lw, want)))}
        chosen = None if self.next_round is None else self.next_round(now, self.spent - self.allocated[key] + want)
        if chosen is None:
            return
        other = self.by_key[chosen]
        allocated = want if chosen == key else self.allocated[chosen]
        budget = allocated + self.size + self._foreign(self.db.proposals(other.workload))
        compile_next_plan_ahead(self._request(other, budget), self.db)  # its seeds play no part in a replay

    def _note_ranking(self, key: str, summary: TuneSummary) -> None:
        """Keep what a round's code ranking did (nothing for strategies that rank no code)."""
        use = summary.code_ranking
        if use is None:
            return
        before = self.ranking.get(key)
        rounds, voting = (before.rounds, before.rounds_voting) if before else (0, 0)
        compiled = sum(len(s.compiled) for s in scores_made() if s.workload_key == key)
        self.ranking[key] = LayerRanking(use.kernel_fit, use.voted_from_start, rounds + 1, voting + use.voting_now,
                                         compiled)

    def compile_first_screens_ahead(self) -> None:
        """Queue the screens the layers' first rounds may design from (`transfer+code` on a
        board), to compile in the background while the first layers' trials run (edgetune.ahead)."""
        if not compiles_ahead(self.template.target):
            return
        for lw in self.by_key.values():
            if not self.db.proposals(lw.workload):
                compile_first_screen_ahead(self._request(lw, self.size), self.db)

    def _request(self, lw: LayerWorkload, budget: int) -> TuneRequest:
        return replace(self.template, kernel=lw.kernel, shape=lw.shape, budget=budget,
                       scratch_limit=self.scratch_limits.get(lw.workload.key()))

    def _search(self, lw: LayerWorkload, budget: int) -> LiveSearch:
        """The layer's search for this round, learning from every trial the other layers have
        stored by now and planning for the layer's trials so far: the layers teach each
        other as the rounds go (a search kept open from its first round learnt from the few
        trials stored then: DS-CNN's default tune ended 22% slower). Within a round it is
        kept (the round's wait may ask it for more)."""
        # Its replay asks again for the batches of the layer's earlier rounds (tuner.resume),
        # planned on fewer of the other layers' trials: rarely proposed again, and finding so
        # makes `transfer+code` compile plans it will not make (DS-CNN on the M55, 64 trials:
        # 189 of the run's 506 candidates). Measured and not kept (2026-12-05): telling the
        # earlier rounds' trials instead of asking: 431 candidates, 125 s rather than 140,
        # but DS-CNN's 128-trial tune on the M55 took 416 evaluations to `transfer`'s best
        # over three seeds against 320 for `transfer` (228 before; seeds -4%, +57%, not
        # reached in 256). On a board the replay's compiles are done ahead (search_ahead).
        key = (lw.workload.key(), budget)
        if key not in self.searches:
            for old in [k for k in self.searches if k[0] == key[0]]:
                self.searches.pop(old).close()
            seeds = (default_seed(lw, self.template.target, self.template.compilers),
                     *naive_seed(lw, self.template.target, self.template.compilers), *self._winners(lw),
                     *starting_seeds(lw, self.template.target, self.template.compilers))
            self.searches[key] = LiveSearch(replace(self._request(lw, budget), initial=seeds), self.db,
                                            self.trial_progress)
        return self.searches[key]

    def _winners(self, lw: LayerWorkload) -> list[dict]:
        """The best configurations the similar layers (similarity_group) have found within
        their rounds so far, the highest throughput (MACs per unit of cost) first, at most
        WINNERS of them: measured on this layer before its strategy's proposals, where they
        fit its space and are not measured yet. The winner of one 1x1 convolution is often
        the winner of another; the cost model only learns that after several trials."""
        group, found = similarity_group(lw), []
        for other in self.by_key.values():
            if other is lw or similarity_group(other) != group:
                continue
            best = self._best(self._given(other, self.allocated[other.workload.key()]))
            if best is not None:
                found.append((-other.macs / max(best.trial.value(self.objective), 1e-12), best.trial.config.as_dict()))
        found.sort(key=lambda item: item[0])  # stable: equals keep the layers' order
        distinct = dict.fromkeys(tuple(sorted(config.items())) for _, config in found)
        return [dict(items) for items in distinct][:WINNERS]

    def result(self, lw: LayerWorkload, baseline: float | None) -> LayerResult:
        key = lw.workload.key()
        given = self._given(lw, self.allocated[key])
        best = self._best(given)
        failures: dict[str, int] = {}
        for record in given:
            if record.trial.outcome.failed:
                failures[record.trial.outcome.value] = failures.get(record.trial.outcome.value, 0) + 1
        return LayerResult(lw.workload, lw.layers, lw.macs, len(given), best,
                           None if best is None else best.trial.value(self.objective), baseline, failures,
                           self.histories[key].exhausted, self.ranking.get(key))

    def _given(self, lw: LayerWorkload, count: int) -> list[Record]:
        # Trials built by a compiler this run may not use (--compiler) are not its own.
        compilers = self.template.compilers
        return [r for r in self.db.proposals(lw.workload) if compiled_by(r.trial, compilers)][:count]

    def _best(self, records: Sequence[Record]) -> Record | None:
        """The best feasible record; ties: the earliest proposed (as TuningDatabase.best)."""
        best, best_value = None, None
        for record in records:
            value = record.trial.value(self.objective) if feasible(record.trial, self.bounds) else None
            if value is not None and (best_value is None or value < best_value):
                best, best_value = record, value
        return best

    def _best_value(self, records: Sequence[Record]) -> float | None:
        best = self._best(records)
        return None if best is None else best.trial.value(self.objective)


def default_seed(lw: LayerWorkload, target: Target, compilers: tuple[str, ...]) -> dict:
    """The layer's first trial: the configuration `model export` runs when nothing better is
    stored (the kernel's default, built by a compiler this run may use), so the best trial
    exported is never slower than it."""
    return default_config(lw.kernel, target, lw.shape, compilers).as_dict()


def naive_seed(lw: LayerWorkload, target: Target, compilers: tuple[str, ...]) -> tuple[dict, ...]:
    """The layer's second trial: its plain loop nest as the baseline measures it (gcc -O3, the
    kernel's `naive` path, codegen/kernels/naive_path.py), so the variant exported is never
    slower than the plain loop either: where nothing tuned beats it, it ships. () when the
    kernel has no such path or this run may not use gcc."""
    if compilers and "gcc" not in compilers:
        return ()
    space = lw.kernel.tuning_space(target, lw.shape)
    if "vector" not in space.names or NAIVE not in space.param("vector").values:
        return ()
    wanted = {**default_seed(lw, target, compilers), "vector": NAIVE, "compiler": "gcc", "opt": "O3"}
    try:
        config = space.make(wanted)
    except (KeyError, ValueError):
        return ()
    return (config.as_dict(),) if space.is_legal(config) else ()


def starting_seeds(lw: LayerWorkload, target: Target, compilers: tuple[str, ...]) -> tuple[dict, ...]:
    """The kernel's starting points (Kernel.starting_points) as whole configurations of the
    layer's space, over its default configuration: measured after the plain loop and the
    similar layers' winners (evidence from this model's own layers comes first), before the
    strategy's own proposals, so a layer whose search is short (a model's smaller layers get
    a few dozen trials) still starts from a configuration known to be fast on such layers.
    Those illegal for the shape, or built by a compiler this run may not use, are left out."""
    space = lw.kernel.tuning_space(target, lw.shape)
    base, seeds = default_seed(lw, target, compilers), []
    for partial in lw.kernel.starting_points(target, lw.shape):
        try:
            config = space.make({**base, **partial})
        except (KeyError, ValueError):
            continue  # a value this target's space does not have (a compiler it lacks)
        if space.is_legal(config) and (not compilers or config["compiler"] in compilers):
            seeds.append(config.as_dict())
    return tuple(seeds)


def baseline_values(lw: LayerWorkload, target: Target) -> dict | None:
    """Every value measured of the layer's plain C loop nest built with the target's gcc at
    -O3, on the workload's inputs, checked against the kernel's reference: what the tuned
    layer is compared with. None when the kernel has no plain loop, the target no gcc, or
    the run fails (a baseline is a figure, not a reason to stop)."""
    if not hasattr(lw.kernel, "render_naive") or not any(c.name == "gcc" for c in target.compilers):
        return None
    with tempfile.TemporaryDirectory(prefix="edgetune-baseline-") as tmp:
        try:
            plain = lw.kernel.render_naive(target, lw.shape, "gcc", ("-O3",))
            result = measure_source(lw.kernel, target, lw.shape, plain, workload_inputs(lw.kernel, lw.workload),
                                    Path(tmp))
        except (CodegenError, PlacementError):
            return None
    return None if result.outcome.failed else result.values


def measure_baseline(lw: LayerWorkload, target: Target, objective: str) -> float | None:
    """The plain C loop nest's value of `objective` (baseline_values)."""
    values = baseline_values(lw, target)
    return None if values is None else values.get(objective)


def progress_line(state: ModelRound, objective: str) -> str:
    """One line for a terminal: round, trials against the budget, the layer by its short
    name (the workload's full id is ~200 characters), the model's total once every layer
    has a result (before: how many are still to measure, which is the warm-up, not a fault),
    named for what it is: the tuned layers measured alone, not the module (issue 29, goal 6;
    it was "model instructions=", as the summary's total was before it was named so)."""
    total = (f"tuned layers alone: {objective}={state.total:g}" if state.total is not None
             else f"model total once every layer is measured ({state.missing} to go)")
    return (f"[{state.spent:>4}/{state.budget}] round {state.number}: {short_layer_name(state)} "
            f"({state.layer_trials} trials) | {total}")


def short_layer_name(state: ModelRound) -> str:
    """`layer 3 conv2d_s8 3x3`, `layers 1,4,7 dwconv2d_s8 3x3`: the layers a round served and
    their kernel, with the filter window where there is one."""
    shape = state.workload.shape_dict()
    window = f" {shape['kh']}x{shape['kw']}" if "kh" in shape and "kw" in shape else ""
    shown = ",".join(map(str, state.layers[:4])) + (",..." if len(state.layers) > 4 else "")
    which = f"layer{'s' if len(state.layers) > 1 else ''} {shown} " if state.layers else ""
    return f"{which}{state.workload.kernel}{window}"


# What a shape key holds when it changes nothing (a stride of 1, no padding, no dilation, a
# depth multiplier of 1): left out of a compact shape, which a reader scans for what matters.
NEUTRAL_SHAPE_VALUES = {"stride": 1, "stride_h": 1, "stride_w": 1, "dilation": 1, "dilation_h": 1,
                        "dilation_w": 1, "pad": 0, "mult": 1}
AXIS_PAIRS = {"stride_h": ("stride_w", "stride"), "dilation_h": ("dilation_w", "dilation")}
PADS = ("pad_top", "pad_bottom", "pad_left", "pad_right")


def compact_shape(shape: dict) -> str:
    """A workload's shape in a line a terminal keeps: per-axis pairs of equal values as one
    (stride_h=stride_w=2 as stride=2), four equal paddings as pad=N, neutral values left out.
    `conv2d_s8`'s 1x1 layer: `h=1,w=1,cin=640,cout=128,kh=1,kw=1` instead of 190 characters."""
    items, skip = [], set()
    for key, value in shape.items():
        if key in skip:
            continue
        if key in AXIS_PAIRS and shape.get(AXIS_PAIRS[key][0]) == value:
            other, key = AXIS_PAIRS[key]
            skip.add(other)
        elif key == PADS[0] and all(shape.get(p) == value for p in PADS):
            key = "pad"
            skip.update(PADS[1:])
        if NEUTRAL_SHAPE_VALUES.get(key) != value:
            items.append(f"{key}={value}")
    return ",".join(items)
