"""Which of several tuning tasks gets the next round of trials: a task scheduler after
Zheng et al., "Ansor: Generating High-Performance Tensor Programs for Deep Learning",
OSDI 2020, section 6.

A model is several tasks (its distinct layers); task i occurs w_i times and its best cost so
far is g_i, so the model costs f = sum_i w_i * g_i. The budget is spent in rounds, each
giving one task a batch of trials; the scheduler picks the task whose next round is expected
to lower f most, from an estimate of the gradient df/dt_i (t_i: the rounds task i had):

    df/dt_i ~ w_i * (alpha * backward_i + (1 - alpha) * forward_i)

- backward_i: how much g_i fell per round over the last `window` rounds (the past slope);
- forward_i: the more optimistic of two guesses at the next rounds' slope: -g_i / t_i (the
  cost could fall to zero at the rate it has taken so far), and beta * C_i / V_best - g_i,
  the cost task i would have at 1/beta of the best throughput V = C_k / g_k (C: the work, e.g.
  MACs) that a similar task k reached (the same group: for a model's layers, the same kernel
  and filter window, and the vectorised axis either narrower than one vector or not).

The task with the most negative estimate gets the round; with probability epsilon a random
one does (epsilon-greedy, so no estimate starves a task for ever). Every task first gets one
round in turn (round-robin warm-up), as the paper's allocation starts from t = (1, ..., 1).

Beyond the paper: a task with no successful trial yet has no cost to weigh, and the model has
no total without it, so it goes first, until it has had `patience` rounds without any
success; then it is given up (it stays without a result; a caller reports it). A task whose
space is exhausted gets nothing more. A task may name a baseline, the cost it must beat to
be worth its tuning (a layer's plain C loop): a task still costing more than its baseline
goes next, the one with the fewest rounds first, until it has had `patience` rounds more
than the warm-up gave it (its best after those is what it has; the caller decides what
ships). The FC autoencoder's 128->8 layer got one round of 4 trials and ended at 8,758
instructions against its plain loop's 5,767: the gradient saw a small layer with little to
win and spent the budget elsewhere. The even split (`EvenSplit`), the baseline the
gradient is compared with, gives the live task with the fewest rounds the next one.

Pure and deterministic: the choice is a function of the tasks, their histories and the seed
(the round's random draw is seeded by the seed and the number of rounds so far, so a run
rebuilt from stored histories chooses as the uninterrupted run did).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Protocol, Sequence

import numpy as np

from edgetune.errors import EdgetuneError


@dataclass(frozen=True)
class SchedTask:
    """One task: `weight` how often its cost counts in the total (a layer's occurrences),
    `group` which tasks are similar (the kernel), `work` its amount of work (MACs; 0: unknown),
    `baseline` the cost it should beat (a layer's plain loop; None: none)."""

    id: str
    weight: float = 1.0
    group: str = ""
    work: float = 0.0
    baseline: float | None = None  # the cost the task should beat (None: none known)

    def __post_init__(self):
        if not self.weight > 0:
            raise ValueError(f"task {self.id!r}: weight {self.weight!r} is not positive")


@dataclass(frozen=True)
class TaskHistory:
    """A task's best cost after each round it had (None: no successful trial yet), and
    whether its space is exhausted (nothing left to measure)."""

    best: tuple[float | None, ...] = ()
    exhausted: bool = False

    @property
    def rounds(self) -> int:
        return len(self.best)

    @property
    def current(self) -> float | None:
        return self.best[-1] if self.best else None

    def after(self, best: float | None, exhausted: bool = False) -> "TaskHistory":
        """This history with one more round."""
        return replace(self, best=(*self.best, best), exhausted=self.exhausted or exhausted)


class SchedulerError(EdgetuneError, ValueError):
    """A scheduler name that names no scheduler."""


class Scheduler(Protocol):
    name: str

    def choose(self, tasks: Sequence[SchedTask], histories: Mapping[str, TaskHistory]) -> str | None:
        """The id of the task that gets the next round, or None when no task can use one."""


def model_cost(tasks: Sequence[SchedTask], histories: Mapping[str, TaskHistory]) -> float | None:
    """f = sum of weight * best cost; None while a task has no result."""
    costs = [histories.get(task.id, TaskHistory()).current for task in tasks]
    if any(cost is None for cost in costs):
        return None
    return sum(task.weight * cost for task, cost in zip(tasks, costs))


def is_live(history: TaskHistory, patience: int) -> bool:
    """Can the task use another round: not exhausted, and not given up (`patience` rounds
    without any successful trial)."""
    return not history.exhausted and not (history.current is None and history.rounds >= patience)


@dataclass(frozen=True)
class EvenSplit:
    """Every live task in turn: the one with the fewest rounds (the first of those in order)."""

    patience: int = 3
    name: str = "even"

    def choose(self, tasks: Sequence[SchedTask], histories: Mapping[str, TaskHistory]) -> str | None:
        live = _live(tasks, histories, self.patience)
        if not live:
            return None
        return min(live, key=lambda task: histories.get(task.id, TaskHistory()).rounds).id


@dataclass(frozen=True)
class GradientScheduler:
    """Ansor's gradient-based choice (see the module). Defaults: a backward window of 3
    rounds, alpha 0.2, beta 2, epsilon 0.05 (values in the spirit of the paper's; not tuned
    for edgetune's small budgets)."""

    seed: int = 0
    window: int = 3
    alpha: float = 0.2
    beta: float = 2.0
    epsilon: float = 0.05
    patience: int = 3
    name: str = "gradient"

    def choose(self, tasks: Sequence[SchedTask], histories: Mapping[str, TaskHistory]) -> str | None:
        live = _live(tasks, histories, self.patience)
        if not live:
            return None
        history = {task.id: histories.get(task.id, TaskHistory()) for task in tasks}
        fresh = [task for task in live if history[task.id].rounds == 0]
        if fresh:  # warm-up: one round each, in order
            return fresh[0].id
        unsolved = [task for task in live if history[task.id].current is None]
        if unsolved:  # no cost to weigh yet, and no model total without one
            return min(unsolved, key=lambda task: history[task.id].rounds).id
        behind = behind_baseline(live, history, self.patience)
        if behind:  # a tuned variant slower than what it replaces is not worth exporting
            return min(behind, key=lambda task: history[task.id].rounds).id
        rounds_so_far = sum(h.rounds for h in history.values())
        rng = np.random.default_rng([self.seed, rounds_so_far])
        if rng.random() < self.epsilon:
            return live[int(rng.integers(len(live)))].id
        estimates = self.gradients(tasks, histories)
        return min(live, key=lambda task: estimates[task.id]).id  # min: the first of equals

    def gradients(self, tasks: Sequence[SchedTask], histories: Mapping[str, TaskHistory]) -> dict[str, float]:
        """df/dt_i of every task with a cost (negative: a round is expected to lower f)."""
        history = {task.id: histories.get(task.id, TaskHistory()) for task in tasks}
        solved = [task for task in tasks if history[task.id].current is not None]
        return {task.id: task.weight * (self.alpha * backward_slope(history[task.id].best, self.window)
                                        + (1 - self.alpha) * self._forward(task, history, solved))
                for task in solved}

    def _forward(self, task: SchedTask, history: Mapping[str, TaskHistory], solved: Sequence[SchedTask]) -> float:
        cost = history[task.id].current
        optimistic = -cost / history[task.id].rounds
        throughputs = [other.work / history[other.id].current for other in solved
                       if other.id != task.id and other.group == task.group and other.work > 0
                       and history[other.id].current > 0]
        if task.work <= 0 or not throughputs:
            return optimistic
        return min(optimistic, self.beta * task.work / max(throughputs) - cost)


def behind_baseline(live: Sequence[SchedTask], history: Mapping[str, TaskHistory], patience: int) -> list[SchedTask]:
    """The live tasks costing more than their baseline that have had at most `patience`
    rounds, so each gets `patience` rounds beyond the warm-up's one to catch up."""
    return [task for task in live if task.baseline is not None and history[task.id].current is not None
            and history[task.id].current > task.baseline and history[task.id].rounds <= patience]


def backward_slope(best: Sequence[float | None], window: int) -> float:
    """How much the cost changed per round over the last `window` rounds (negative: it fell);
    a window reaching back before the first success starts at the first success."""
    known = [i for i, value in enumerate(best) if value is not None]
    if not known or known[-1] != len(best) - 1:
        return 0.0
    last = len(best) - 1
    start = max(last - window, known[0])
    if start == last:
        return 0.0
    return (best[last] - best[start]) / (last - start)


SCHEDULERS = ("gradient", "even")


def make_scheduler(name: str, seed: int = 0, patience: int = 3) -> Scheduler:
    """The one place scheduler names become objects."""
    if name == "gradient":
        return GradientScheduler(seed=seed, patience=patience)
    if name == "even":
        return EvenSplit(patience=patience)
    raise SchedulerError(f"unknown scheduler {name!r} (known: {', '.join(SCHEDULERS)})")


def _live(tasks: Sequence[SchedTask], histories: Mapping[str, TaskHistory], patience: int) -> list[SchedTask]:
    if len({task.id for task in tasks}) != len(tasks):
        raise ValueError("task ids repeat")
    return [task for task in tasks if is_live(histories.get(task.id, TaskHistory()), patience)]
