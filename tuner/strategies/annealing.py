"""Simulated annealing over the neighbourhood graph of the legal space.

Proposals are fresh neighbours of the current point. A told result replaces the current
point when it is better, or when it is worse with probability exp(-relative loss / T);
the temperature decays geometrically with every result and is restored when the walk
restarts: when it is stuck (no fresh neighbour left) or has gone `patience` results without
a new best of its own. Restarts alternate between a kick of the best point so far (two
parameters set to random values) and a random point, as in an iterated local search.
"""
from __future__ import annotations

import math

import numpy as np

from ..space import Space
from .base import SearchStrategy


class SimulatedAnnealing(SearchStrategy):
    name = "annealing"

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "",
                 start_temperature: float = 0.1, cooling: float = 0.95, min_temperature: float = 0.005,
                 patience: int = 40):
        super().__init__(space, rng, objective)
        self.start_temperature = start_temperature
        self.cooling = cooling
        self.min_temperature = min_temperature
        self.temperature = start_temperature
        self.patience = patience
        self._current: int | None = None
        self._current_value: float | None = None
        self._walk_best: float | None = None
        self._stale = 0  # results since the walk's best last improved
        self._restarts = 0

    def _next(self) -> int | None:
        if self._current is None:
            self._restarts += 1
            return self._perturbed_best() if self._restarts % 2 == 0 else None
        fresh = self._fresh_neighbours(self._current)
        if not fresh:
            self._restart()
            return None
        return int(fresh[self.rng.integers(len(fresh))])

    def _observe(self, index: int, value: float | None) -> None:
        if value is None:
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
