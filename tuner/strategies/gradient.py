"""A gradient-style search: estimate the direction of improvement from neighbours, then
step along it.

Around its centre the search probes one neighbour per parameter (a finite difference per
axis). The direction is then, per ordered parameter, towards the probe when the probe was
better and away from it when it was worse; per unordered parameter, the probed value when
it was better. The step moves along every axis at once and keeps going while it improves
(a line search); when it stops improving the best probe becomes the centre, and when no
probe improved either the centre is a local optimum and the search restarts elsewhere.
"""
from __future__ import annotations

import numpy as np

from ..space import Space
from .base import SearchStrategy


class GradientSearch(SearchStrategy):
    name = "gradient"

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = ""):
        super().__init__(space, rng, objective)
        self._centre: int | None = None
        self._centre_value: float | None = None
        self._starts: set[int] = set()
        self._probes: dict[int, int] = {}  # probe index -> axis, for the current centre
        self._probe_values: dict[int, float | None] = {}  # told probes of the current centre
        self._direction: list[int] | None = None
        self._line: int | None = None  # the pending line step

    # --- proposing ---------------------------------------------------------------------
    def _next(self) -> int | None:
        if self._centre is None:
            start = self._random_fresh()
            if start is not None:
                self._starts.add(start)
            return start
        if self._direction is not None and self._line is None:
            target = [d + s for d, s in zip(self.space.digits(self._centre), self._direction)]
            target = [min(max(t, 0), len(p.values) - 1) for t, p in zip(target, self.space.params)]
            step = self.space.index_from_digits(target)
            self._line = step if self._is_fresh(step) else self._closest_fresh(target)
            return self._line
        probe = self._unprobed_neighbour()
        if probe is not None:
            return probe
        if self._line is None and len(self._probe_values) == len(self._probes):
            self._direction = self._estimate_direction()
            if self._direction is None:
                self._restart()
            return self._next() if self._centre is None or self._direction is not None else None
        return None

    def _unprobed_neighbour(self) -> int | None:
        centre = self.space.digits(self._centre)
        probed_axes = set(self._probes.values())
        options = []
        for index in self._fresh_neighbours(self._centre):
            axis = next(a for a, (x, y) in enumerate(zip(centre, self.space.digits(index))) if x != y)
            if axis not in probed_axes:
                options.append((axis, index))
        if not options:
            return None
        axis, index = options[self.rng.integers(len(options))]
        self._probes[index] = axis
        return index

    def _estimate_direction(self) -> list[int] | None:
        centre = self.space.digits(self._centre)
        direction = [0] * len(centre)
        for index, value in self._probe_values.items():
            axis = self._probes[index]
            offset = self.space.digits(index)[axis] - centre[axis]
            param = self.space.params[axis]
            better = value is not None and value < self._centre_value
            if better:
                direction[axis] = offset
            elif param.is_ordered and value is not None:
                direction[axis] = -1 if offset > 0 else 1  # the slope says: the other way
        return direction if any(direction) else None

    # --- learning ----------------------------------------------------------------------
    def _observe(self, index: int, value: float | None) -> None:
        if index in self._starts:
            self._starts.discard(index)
            if value is not None and self._centre is None:
                self._move(index, value)
            return
        if index in self._probes and index not in self._probe_values:
            self._probe_values[index] = value
            return
        if index == self._line:
            self._line = None
            if value is not None and value < self._centre_value:
                direction = self._direction
                self._move(index, value)
                self._direction = direction  # keep going while it improves
                return
            self._direction = None
            told = [(v, i) for i, v in self._probe_values.items() if v is not None]
            best = min(told) if told else None
            if best is not None and best[0] < self._centre_value:
                self._move(best[1], best[0])
            else:
                self._restart()

    def _move(self, index: int, value: float) -> None:
        self._centre, self._centre_value = index, value
        self._probes, self._probe_values = {}, {}
        self._direction, self._line = None, None

    def _restart(self) -> None:
        self._centre, self._centre_value = None, None
        self._probes, self._probe_values = {}, {}
        self._direction, self._line = None, None
