"""Differential evolution (DE/rand/1/bin) over parameter digits, steady-state.

Storn and Price, "Differential Evolution - A Simple and Efficient Heuristic for Global
Optimization over Continuous Spaces", Journal of Global Optimization 11 (1997) 341-359: a
population of points; for each member in turn (the target) a trial point is built from
three other members a, b, c as a + F * (b - c), crossed with the target (each parameter
taken from the mutant with probability CR, at least one always), and the trial replaces
the target when it is at least as good.

Here a point is its parameters' value positions (the space's digits). On an ordered
parameter the difference is arithmetic on positions, rounded; an unordered one has no
direction, so the mutant takes b's value with probability F when b and c differ (a
difference exists on that axis) and a's otherwise. A trial that is illegal or already
evaluated moves to the nearest fresh legal point, as the genetic algorithm's children do.
Trials are told in any order: each child remembers the slot it competes for. The first
generation is random; trials told that no child asked for (a resumed run's) fill the
population, then replace its worst member when better.
"""
from __future__ import annotations

import math

import numpy as np

from ..space import Space
from .base import SearchStrategy

# a, b and c are distinct from each other and from the target.
MIN_POPULATION = 4


class DifferentialEvolution(SearchStrategy):
    name = "differential"

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "",
                 population: int = 12, weight: float = 0.5, crossover: float = 0.9):
        super().__init__(space, rng, objective)
        # Storn and Price's usual settings: F = 0.5, CR = 0.9. The population is smaller than
        # their 10 per parameter: tuning budgets are tens to hundreds of trials, not thousands.
        self.population = max(MIN_POPULATION, population)
        self.weight = weight
        self.crossover = crossover
        self._members: list[int] = []  # the population, by slot
        self._values: list[float] = []  # their objective values; inf: a failed trial
        self._pending: dict[int, int] = {}  # a proposed child -> the slot it competes for
        self._turn = 0  # the next target slot, round robin

    def _next(self) -> int | None:
        if len(self._members) < min(self.population, self._legal_count()) or len(self._members) < MIN_POPULATION:
            return None  # the first generation is random
        slot = self._turn % len(self._members)
        self._turn += 1
        others = [s for s in range(len(self._members)) if s != slot]
        a, b, c = (self._members[int(s)] for s in self.rng.choice(others, size=3, replace=False))
        trial = self._trial(self.space.digits(self._members[slot]), *map(self.space.digits, (a, b, c)))
        index = self.space.index_from_digits([int(round(d)) for d in trial])
        if not self._is_fresh(index):
            index = self._closest_fresh(trial)
        if index is not None:
            self._pending[index] = slot
        return index

    def _trial(self, target: tuple[int, ...], a: tuple[int, ...], b: tuple[int, ...],
               c: tuple[int, ...]) -> list[float]:
        """The mutant a + F (b - c), binomially crossed with the target, in digit space."""
        forced = int(self.rng.integers(len(target)))
        out: list[float] = []
        for axis, param in enumerate(self.space.params):
            if axis != forced and self.rng.random() >= self.crossover:
                out.append(float(target[axis]))
            elif param.is_ordered:
                out.append(float(np.clip(a[axis] + self.weight * (b[axis] - c[axis]), 0, len(param.values) - 1)))
            else:
                differ = b[axis] != c[axis] and self.rng.random() < self.weight
                out.append(float(b[axis] if differ else a[axis]))
        return out

    def _observe(self, index: int, value: float | None) -> None:
        value = math.inf if value is None else value
        slot = self._pending.pop(index, None)
        if slot is not None:
            if value <= self._values[slot]:  # "at least as good": lets the population drift on plateaus
                self._members[slot], self._values[slot] = index, value
        elif len(self._members) < self.population:
            self._members.append(index)
            self._values.append(value)
        else:
            worst = int(np.argmax(self._values))
            if value < self._values[worst]:
                self._members[worst], self._values[worst] = index, value
