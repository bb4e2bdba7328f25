"""Strategies that do not learn: uniform random sampling and exhaustive enumeration."""
from __future__ import annotations

import numpy as np

from ..space import Space
from .base import SearchStrategy


class RandomSearch(SearchStrategy):
    """Uniform random sampling of the legal space without replacement.

    The order is one seeded permutation of the legal points, fixed at construction: a run
    resumed after a crash proposes the same sequence and skips what was already measured,
    so it ends with the same set of configurations as an uninterrupted run.
    """

    name = "random"


class Exhaustive(SearchStrategy):
    """Every legal point in index order (for small spaces and recording whole spaces)."""

    name = "exhaustive"

    def __init__(self, space: Space, rng: np.random.Generator | None = None, objective: str = ""):
        super().__init__(space, rng if rng is not None else np.random.default_rng(0), objective)
        self._pool = space.legal_indices()
