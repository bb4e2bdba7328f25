"""A steady-state genetic algorithm over parameter digits.

Each proposal is a child of two parents picked by tournament among the evaluated points
(failed trials rank below every success), made by uniform crossover and a per-parameter
mutation that moves one step along that parameter's neighbourhood. A child that is illegal
or already evaluated is repaired to the nearest fresh legal point, so the population keeps
moving in spaces where most of the Cartesian product is illegal.
"""
from __future__ import annotations

import numpy as np

from ..space import Space
from .base import SearchStrategy


class GeneticAlgorithm(SearchStrategy):
    name = "genetic"

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "",
                 population: int = 16, tournament: int = 3, mutation: float | None = None):
        super().__init__(space, rng, objective)
        self.population = population
        self.tournament = tournament
        # One mutated gene per child on average (the usual 1/length rate).
        self.mutation = mutation if mutation is not None else 1.0 / max(1, len(space.params))

    def _next(self) -> int | None:
        ranked = self._ranked_results()
        if len(ranked) < 2 or len(self.results) < min(self.population, self._legal_count()) // 2:
            return None  # the first generation is random
        elite = [i for i, _ in ranked[: self.population]]
        first, second = self._select(elite), self._select(elite)
        child = self._mutate(self._crossover(self.space.digits(first), self.space.digits(second)))
        index = self.space.index_from_digits(child)
        if self._is_fresh(index):
            return index
        return self._closest_fresh(child)

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
                steps = param.step_positions(digits[axis])
                if steps:
                    digits[axis] = int(steps[self.rng.integers(len(steps))])
        return digits
