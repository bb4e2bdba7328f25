"""Simulated annealing over the neighbourhood graph of the legal space.

Proposals are fresh neighbours of the current point. A told result replaces the current
point when it is better, or when it is worse with probability exp(-relative loss / T);
the temperature decays geometrically with every result and is restored when the walk is
stuck (no fresh neighbour left), which restarts it from a random point.
"""
from __future__ import annotations

import math

import numpy as np

from ..space import Space
from .base import SearchStrategy


class SimulatedAnnealing(SearchStrategy):
    name = "annealing"

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "",
                 start_temperature: float = 0.3, cooling: float = 0.95, min_temperature: float = 0.005):
        super().__init__(space, rng, objective)
        self.start_temperature = start_temperature
        self.cooling = cooling
        self.min_temperature = min_temperature
        self.temperature = start_temperature
        self._current: int | None = None
        self._current_value: float | None = None

    def _next(self) -> int | None:
        if self._current is None:
            return None
        fresh = self._fresh_neighbours(self._current)
        if not fresh:
            self._restart()
            return None
        return int(fresh[self.rng.integers(len(fresh))])

    def _observe(self, index: int, value: float | None) -> None:
        if value is None:
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
        self.temperature = self.start_temperature
