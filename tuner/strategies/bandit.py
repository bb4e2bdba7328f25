"""A bandit over several strategies (as OpenTuner's AUC bandit does): each proposal comes
from one arm, chosen by upper confidence bound on how often that arm's recent proposals
found a new best. Every arm is told every result, so each learns from the others' trials;
an arm is told what the others proposed, so no point is proposed twice.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Callable, Iterable, Sequence

import numpy as np

from ..space import Config, Space
from ..trial import Trial
from .annealing import SimulatedAnnealing
from .base import SearchStrategy
from .genetic import GeneticAlgorithm
from .local import LocalSearch
from .model import ModelGuided

ArmFactory = Callable[[Space, np.random.Generator, str], SearchStrategy]
DEFAULT_ARMS: tuple[ArmFactory, ...] = (ModelGuided, GeneticAlgorithm, LocalSearch, SimulatedAnnealing)


class Bandit(SearchStrategy):
    name = "bandit"

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "",
                 arms: Sequence[ArmFactory] = DEFAULT_ARMS, window: int = 50, exploration: float = 0.5):
        super().__init__(space, rng, objective)
        if not arms:
            raise ValueError("a bandit needs at least one arm")
        self.arms = [make(space, np.random.default_rng(int(rng.integers(2**63))), objective) for make in arms]
        self.window = window
        self.exploration = exploration
        self._history: deque[tuple[int, bool]] = deque(maxlen=window)  # (arm, found a new best)
        self._proposed_by: dict[int, int] = {}  # index -> arm

    def ask(self, n: int) -> list[Config]:
        proposals = []
        while len(proposals) < n:
            arm = self._pick()
            got = self.arms[arm].ask(1)
            if not got:
                break  # an arm runs dry only when every legal point is taken
            config = got[0]
            index = self.space.index_of(config)
            self._take(index)
            self._proposed_by[index] = arm
            for other, strategy in enumerate(self.arms):
                if other != arm:
                    strategy.skip([config])
            proposals.append(config)
        return proposals

    def tell(self, trials: Iterable[Trial]) -> None:
        trials = list(trials)
        for trial in trials:
            before = self.best_value
            super().tell([trial])
            index = self.space.index_of(trial.config)
            arm = self._proposed_by.pop(index, None)
            if arm is not None:
                improved = self.best_value is not None and (before is None or self.best_value < before)
                self._history.append((arm, improved))
        for strategy in self.arms:
            strategy.tell(trials)

    def _pick(self) -> int:
        uses = [0] * len(self.arms)
        wins = [0] * len(self.arms)
        for arm, improved in self._history:
            uses[arm] += 1
            wins[arm] += improved
        untried = [a for a in range(len(self.arms)) if uses[a] == 0]
        if untried:
            return untried[int(self.rng.integers(len(untried)))]
        total = sum(uses)
        scores = [wins[a] / uses[a] + self.exploration * math.sqrt(2 * math.log(total) / uses[a])
                  for a in range(len(self.arms))]
        best = max(scores)
        tied = [a for a, s in enumerate(scores) if s == best]
        return tied[int(self.rng.integers(len(tied)))]
