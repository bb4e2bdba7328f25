"""Search strategies. A strategy asks and is told; it never builds or runs anything.

`ask(n)` proposes up to n legal, not yet evaluated configurations; `tell(trials)` reports
finished trials (including ones recorded by an earlier run, so a resumed run does not
repeat them). Every strategy takes a seeded `numpy.random.Generator`.
"""
from __future__ import annotations

from typing import Iterable, Protocol

import numpy as np

from .space import Config, Space
from .trial import Trial


class Strategy(Protocol):
    def ask(self, n: int) -> list[Config]: ...

    def tell(self, trials: Iterable[Trial]) -> None: ...


class RandomSearch:
    """Uniform random sampling of the legal space without replacement.

    The order is one seeded permutation of the legal points, fixed at construction: a run
    resumed after a crash proposes the same sequence and skips what was already measured,
    so it ends with the same set of configurations as an uninterrupted run.
    """

    name = "random"

    def __init__(self, space: Space, rng: np.random.Generator):
        self.space = space
        self._order = rng.permutation(space.legal_indices())
        self._next = 0
        self._seen: set[int] = set()

    def ask(self, n: int) -> list[Config]:
        proposals = []
        while len(proposals) < n and self._next < len(self._order):
            index = int(self._order[self._next])
            self._next += 1
            if index not in self._seen:
                self._seen.add(index)
                proposals.append(self.space.config_at(index))
        return proposals

    def tell(self, trials: Iterable[Trial]) -> None:
        for trial in trials:
            self._seen.add(self.space.index_of(trial.config))


class Exhaustive(RandomSearch):
    """Every legal point in index order (for small spaces and recording whole spaces)."""

    name = "exhaustive"

    def __init__(self, space: Space, rng: np.random.Generator | None = None):
        self.space = space
        self._order = space.legal_indices()
        self._next = 0
        self._seen = set()


STRATEGIES = {"random": RandomSearch, "exhaustive": Exhaustive}


def make_strategy(name: str, space: Space, rng: np.random.Generator) -> Strategy:
    """The one place strategy names become objects (used by the CLI)."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r} (known: {', '.join(sorted(STRATEGIES))})") from None
    return cls(space, rng)
