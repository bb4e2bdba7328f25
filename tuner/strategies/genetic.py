"""A steady-state genetic algorithm over parameter digits, with restarts.

Each proposal is a child of two parents picked by tournament among the evaluated points
of the current epoch (failed trials rank below every success), made by uniform crossover
and a per-parameter mutation that moves one step along that parameter's neighbourhood. A
child that is illegal or already evaluated is repaired to the nearest fresh legal point, so
the population keeps moving in spaces where most of the Cartesian product is illegal.

A steady-state GA whose parents are the best points ever seen converges on one basin
within a few generations (on the training spaces every seed stopped at the same local
optimum). So the population lives in epochs: when an epoch has gone `patience` children
without improving its own best, a new epoch starts from fresh random points, keeping only
the best point found so far as one parent candidate.
"""
from __future__ import annotations

import numpy as np

from ..space import Space
from .base import SearchStrategy


class GeneticAlgorithm(SearchStrategy):
    name = "genetic"

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "",
                 population: int = 16, tournament: int = 3, mutation: float | None = None,
                 patience: int | None = None):
        super().__init__(space, rng, objective)
        self.population = population
        self.tournament = tournament
        # One mutated gene per child on average (the usual 1/length rate).
        self.mutation = mutation if mutation is not None else 1.0 / max(1, len(space.params))
        self.patience = patience if patience is not None else 3 * population
        self._epoch: dict[int, float | None] = {}  # this epoch's results
        self._epoch_best: float | None = None
        self._stale = 0  # results since the epoch's best last improved

    def _next(self) -> int | None:
        ranked = sorted(((i, v) for i, v in self._epoch.items() if v is not None), key=lambda item: item[1])
        if len(ranked) < 2 or len(self._epoch) < min(self.population, self._legal_count()) // 2:
            return None  # an epoch's first generation is random
        elite = [i for i, _ in ranked[: self.population]]
        first, second = self._select(elite), self._select(elite)
        child = self._mutate(self._crossover(self.space.digits(first), self.space.digits(second)))
        index = self.space.index_from_digits(child)
        if self._is_fresh(index):
            return index
        return self._closest_fresh(child)

    def _observe(self, index: int, value: float | None) -> None:
        self._epoch[index] = value
        if value is not None and (self._epoch_best is None or value < self._epoch_best):
            self._epoch_best, self._stale = value, 0
            return
        self._stale += 1
        if self._stale >= self.patience:
            self._epoch = {} if self.best_index is None else {self.best_index: self.best_value}
            self._epoch_best, self._stale = None, 0

    def _select(self, elite: list[int]) -> int:
        # Tournament on rank: elite is sorted best first, so the smallest position wins.
        contenders = self.rng.choice(len(elite), size=min(self.tournament, len(elite)), replace=False)
        return elite[int(contenders.min())]

    def _crossover(self, a: tuple[int, ...], b: tuple[int, ...]) -> list[int]:
        pick = self.rng.random(len(a)) < 0.5
        return [x if take else y for x, y, take in zip(a, b, pick)]

    def _mutate(self, digits: list[int]) -> list[int]:
        for axis, param in enumerate(self.space.params):
            if self.rng.random() < self.mutation:
                # Half the mutations step to a neighbouring value, half jump to any value:
                # steps refine, jumps reach values no member of a converged population has.
                steps = param.step_positions(digits[axis])
                if self.rng.random() < 0.5 and steps:
                    digits[axis] = int(steps[self.rng.integers(len(steps))])
                else:
                    digits[axis] = int(self.rng.integers(len(param.values)))
        return digits
