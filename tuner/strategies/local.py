"""Local search: first-improvement hill climbing over parameter neighbourhoods, with
random restarts.

The climb evaluates fresh neighbours of its current point in random order and moves to the
first one that improves on it. When every neighbour has been evaluated without improvement
the point is a local optimum, and the climb restarts from a random fresh point.
"""
from __future__ import annotations

import numpy as np

from ..space import Space
from .base import SearchStrategy


class LocalSearch(SearchStrategy):
    name = "local"

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = ""):
        super().__init__(space, rng, objective)
        self._current: int | None = None
        self._current_value: float | None = None
        self._probes: set[int] = set()  # points proposed by this climb, not yet told

    def _next(self) -> int | None:
        if self._current is None:
            start = self._random_fresh()
            if start is not None:
                self._probes.add(start)
            return start
        fresh = self._fresh_neighbours(self._current)
        if not fresh:
            self._current, self._current_value = None, None  # local optimum: restart
            return self._next()
        choice = int(fresh[self.rng.integers(len(fresh))])
        self._probes.add(choice)
        return choice

    def _observe(self, index: int, value: float | None) -> None:
        was_probe = index in self._probes
        self._probes.discard(index)
        if value is None or not was_probe:
            return
        if self._current_value is None or value < self._current_value:
            self._current, self._current_value = index, value
