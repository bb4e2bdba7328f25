"""Simulated annealing over the neighbourhood graph of the legal space.

The search begins with a space-filling design (greedy maximin over the legal set, a tenth
of the budget, 3 to 30 points), and the walk starts from its best point: at budgets of a
few dozen evaluations a walk from one random point reaches little of the space, and on the
training spaces the design lifted annealing from below random search to above it.

Proposals are then fresh neighbours of the current point, or (with probability `jump`) the
current point with one parameter set to any value, moved to the nearest fresh legal point:
steps refine, jumps cross values that a one-step walk can only reach through worse ones
(an ordered "method" parameter whose middle value is poor). A told result replaces the
current point when it is better, or when it is worse with probability exp(-relative loss
/ T); the temperature decays geometrically with every result and is restored when the walk
restarts: when it is stuck (no fresh neighbour left) or has gone `patience` results without
a new best of its own. A restart is a kick of the best point so far (two parameters set to
random values), as in an iterated local search; a random point before any success.
"""
from __future__ import annotations

import math

import numpy as np

from ..space import Space
from .base import SearchStrategy

# The initial design without a known budget: what a budget of 100 evaluations gets.
UNKNOWN_BUDGET_DESIGN = 10


def design_size(budget: int | None) -> int:
    """Space-filling points before the walk: a tenth of the budget, 3 to 30."""
    if budget is None:
        return UNKNOWN_BUDGET_DESIGN
    return min(30, max(3, round(0.1 * budget)))


class SimulatedAnnealing(SearchStrategy):
    name = "annealing"
    uses_budget = True

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "", budget: int | None = None,
                 start_temperature: float = 0.1, cooling: float = 0.95, min_temperature: float = 0.005,
                 patience: int = 40, jump: float = 0.2, initial: int | None = None):
        super().__init__(space, rng, objective)
        self.start_temperature = start_temperature
        self.cooling = cooling
        self.min_temperature = min_temperature
        self.temperature = start_temperature
        self.patience = patience
        self.jump = jump
        self.initial = design_size(budget) if initial is None else initial
        self._designed = 0  # design points proposed so far
        self._walking = False  # the design is over and the walk has begun
        self._current: int | None = None
        self._current_value: float | None = None
        self._walk_best: float | None = None
        self._stale = 0  # results since the walk's best last improved

    def _next(self) -> int | None:
        if self._designed < self.initial:
            self._designed += 1
            return self._space_filling()
        if not self._walking:
            # The walk starts from the best point seen (the design's, or a resumed run's).
            self._walking = True
            self._current, self._current_value = self.best_index, self.best_value
        if self._current is None:
            return self._perturbed_best()  # a restart (None: a random point)
        if self.jump and self.rng.random() < self.jump:
            return self._jump_from(self._current)
        fresh = self._fresh_neighbours(self._current)
        if not fresh:
            self._restart()
            return self._perturbed_best()
        return int(fresh[self.rng.integers(len(fresh))])

    def _jump_from(self, index: int) -> int | None:
        digits = list(self.space.digits(index))
        axis = int(self.rng.integers(len(digits)))
        digits[axis] = int(self.rng.integers(len(self.space.params[axis].values)))
        target = self.space.index_from_digits(digits)
        return target if self._is_fresh(target) else self._closest_fresh(digits)

    def _observe(self, index: int, value: float | None) -> None:
        if value is None or not self._walking:
            return
        if self._walk_best is None or value < self._walk_best:
            self._walk_best, self._stale = value, 0
        else:
            self._stale += 1
            if self._stale >= self.patience:
                self._restart()
                return
        self.temperature = max(self.min_temperature, self.temperature * self.cooling)
        if self._current_value is None or value <= self._current_value:
            self._current, self._current_value = index, value
            return
        loss = (value - self._current_value) / max(abs(self._current_value), 1e-12)
        if self.rng.random() < math.exp(-loss / self.temperature):
            self._current, self._current_value = index, value

    def _restart(self) -> None:
        self._current, self._current_value = None, None
        self._walk_best, self._stale = None, 0
        self.temperature = self.start_temperature
