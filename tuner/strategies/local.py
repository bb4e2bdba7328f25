"""Local search: first-improvement hill climbing over parameter neighbourhoods, restarted
as an iterated local search.

The climb evaluates fresh neighbours of its current point in random order and moves to the
first one that improves on it. When every neighbour has been evaluated without improvement
the point is a local optimum, and the climb restarts: every other time from a kick of the
best point so far (two parameters set to random values: good points cluster, so the next
basin is often near), otherwise from a random fresh point (so one basin cannot hold the
search for good).
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
        self._restarts = 0

    def _next(self) -> int | None:
        if self._current is None:
            self._restarts += 1
            start = self._perturbed_best() if self._restarts % 2 == 0 else None
            start = start if start is not None else self._random_fresh()
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
