"""What every strategy shares: the ask/tell contract and the bookkeeping behind it.

A strategy proposes legal, not yet evaluated configurations (`ask(n)`) and learns from
finished trials (`tell(trials)`); it never builds or runs anything. The base class keeps
the books (what was proposed or told, every observed value, the best so far) and owns the
guarantees the conformance suite checks: every proposal is legal, none repeats, and `ask`
returns [] exactly when every legal point has been evaluated. Subclasses only choose the
next point (`_next`) and learn from values (`_observe`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol, Sequence

import numpy as np

from ..space import Config, Space
from ..trial import Trial


class Strategy(Protocol):
    def ask(self, n: int) -> list[Config]: ...

    def tell(self, trials: Iterable[Trial]) -> None: ...


@dataclass(frozen=True)
class ValueRoles:
    """Target-neutral names ("roles") of parameter values that name a part of one target.
    A memory region is `dtcm` on one board and `ssram23` on the next, while its role (say,
    the nearest region buffers can go in) is the same on both; the application, which
    knows the targets, gives per parameter the (value, role) pairs of one target, and a
    value it does not list is its own role. A prior value then stands for the value with
    the same role in another space (see `translation`). Within a parameter each listed
    value has one role and each role at most one value."""

    params: tuple[tuple[str, tuple[tuple[object, object], ...]], ...] = ()

    def __post_init__(self):
        for name, pairs in self.params:
            values, roles = [_typed(v) for v, _ in pairs], [_typed(r) for _, r in pairs]
            if len(set(values)) != len(values) or len(set(roles)) != len(roles):
                raise ValueError(f"value roles of parameter {name!r} are not one to one: {pairs!r}")

    @classmethod
    def of(cls, roles: Mapping[str, Mapping[object, object]]) -> "ValueRoles":
        return cls(tuple((name, tuple(values.items())) for name, values in roles.items()))

    def roles_of(self, name: str) -> dict[tuple, object] | None:
        """{(type, value): role} of a parameter's listed values, or None when this target
        gives the parameter no roles."""
        return next(({_typed(v): r for v, r in pairs} for n, pairs in self.params if n == name), None)


def _typed(value) -> tuple:
    """A value as a key that keeps 1 and True apart."""
    return type(value), value


def translation(source: ValueRoles, here: ValueRoles, name: str, values: Sequence) -> dict[tuple, object] | None:
    """{(type, a prior's value): the value here with the same role} for parameter `name`,
    whose values here are `values`; None when either side gives it no roles (its values
    then carry over as they are, by name). A prior value whose role no value here has is
    missing from the dict: it cannot be mapped."""
    theirs, ours = source.roles_of(name), here.roles_of(name)
    if theirs is None or ours is None:
        return None
    by_role: dict[tuple, object] = {}
    for value in values:
        role = _typed(ours.get(_typed(value), value))
        if role in by_role:
            raise ValueError(f"value roles of parameter {name!r}: {by_role[role]!r} and {value!r} share a role")
        by_role[role] = value
    mapped = {key: by_role[_typed(role)] for key, role in theirs.items() if _typed(role) in by_role}
    # An unlisted prior value is its own role: it maps to the same value here, if that is
    # unlisted too (a role of a listed value is not a value's name).
    mapped.update({role: mine for role, mine in by_role.items() if role not in theirs and role == _typed(mine)})
    return mapped


@dataclass(frozen=True)
class PriorTrials:
    """Finished trials of the same kernel on another workload (another shape or target),
    for strategies that transfer what they learnt. `source` names the workload; `roles`
    are the value roles of its target (none: its values mean what they say here too)."""

    source: str
    trials: tuple[Trial, ...]
    roles: ValueRoles = ValueRoles()


class SearchStrategy:
    """Base of the ask/tell strategies. `objective` names the measured value to minimise."""

    name = ""
    uses_prior = False  # make_strategy passes prior trials only to strategies that want them
    uses_budget = False  # ... and the run's evaluation budget (a hint: None when unknown)
    uses_code = False  # ... and a score of each candidate's compiled code (tuner.code_explore)

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = ""):
        self.space = space
        self.rng = rng
        self.objective = objective
        legal = space.legal_indices()
        # One seeded permutation of the legal points: the source of fresh random points.
        self._pool = rng.permutation(legal)
        self._pool_next = 0
        self._fresh = np.ones(len(legal), dtype=bool)  # by position in legal_indices()
        self._taken: set[int] = set()  # proposed, told or skipped
        self.results: dict[int, float | None] = {}  # told, in telling order; None = failed
        self.best_index: int | None = None
        self.best_value: float | None = None

    # --- the contract ------------------------------------------------------------------
    def ask(self, n: int) -> list[Config]:
        proposals = []
        while len(proposals) < n and len(self._taken) < self._legal_count():
            index = self._next()
            if index is None or not self._is_fresh(index):
                # A subclass with nothing (valid) to offer falls back to a random fresh point.
                index = self._random_fresh()
                if index is None:
                    break
            self._take(index)
            proposals.append(self.space.config_at(index))
        return proposals

    def tell(self, trials: Iterable[Trial]) -> None:
        for trial in trials:
            index = self.space.index_of(trial.config)
            self._take(index)
            value = trial.value(self.objective) if self.objective else None
            self.results[index] = value
            if value is not None and (self.best_value is None or value < self.best_value):
                self.best_index, self.best_value = index, value
            self._observe(index, value)

    def skip(self, configs: Iterable[Config]) -> None:
        """Never propose these (another strategy proposed them; a result may follow)."""
        for config in configs:
            self._take(self.space.index_of(config))

    # --- for subclasses ------------------------------------------------------------------
    def _next(self) -> int | None:
        """The next legal fresh point to propose, or None for a random one."""
        return None

    def _observe(self, index: int, value: float | None) -> None:
        """A result arrived (value None: the trial failed)."""

    def _legal_count(self) -> int:
        return len(self._fresh)

    def _is_fresh(self, index: int) -> bool:
        return index not in self._taken and self.space.is_legal_index(index)

    def _take(self, index: int) -> None:
        if index in self._taken:
            return
        self._taken.add(index)
        position = self.space.legal_position(index)
        if position is not None:
            self._fresh[position] = False

    def _random_fresh(self) -> int | None:
        while self._pool_next < len(self._pool):
            index = int(self._pool[self._pool_next])
            self._pool_next += 1
            if index not in self._taken:
                return index
        return None

    def _fresh_neighbours(self, index: int) -> list[int]:
        return [i for i in self.space.neighbours(index) if i not in self._taken]

    def _closest_fresh(self, digits: Sequence[float]) -> int | None:
        """The fresh legal point nearest to a (possibly illegal) point given by its digits:
        how crossover and gradient steps land on legal ground in sparse spaces."""
        if not self._fresh.any():
            return None
        distance = self.space.distances(digits)
        distance[~self._fresh] = np.inf
        nearest = np.flatnonzero(distance == distance.min())
        return int(self.space.legal_indices()[self.rng.choice(nearest)])

    def _perturbed_best(self, changes: int = 2) -> int | None:
        """A fresh legal point near the best so far: `changes` random parameters of the best
        point set to random values, moved to the nearest fresh legal point (the kick of an
        iterated local search, Lourenco et al. 2003). None before any success."""
        if self.best_index is None:
            return None
        digits = list(self.space.digits(self.best_index))
        for axis in self.rng.choice(len(digits), size=min(changes, len(digits)), replace=False):
            digits[int(axis)] = int(self.rng.integers(len(self.space.params[int(axis)].values)))
        index = self.space.index_from_digits(digits)
        return index if self._is_fresh(index) else self._closest_fresh(digits)

    def _space_filling(self, sample: int = 256) -> int | None:
        """A fresh legal point far from every point tried so far (greedy maximin over a
        random sample of the legal set): the initial design covers the space as a Latin
        hypercube would, but only on legal ground, however sparse."""
        fresh = np.flatnonzero(self._fresh)
        if len(fresh) == 0:
            return None
        pool = self.rng.choice(fresh, size=min(sample, len(fresh)), replace=False)
        if not self.results:
            return int(self.space.legal_indices()[pool[0]])
        digits = self.space.legal_digits()
        scale = np.array([max(1, len(p.values) - 1) if p.is_ordered else 1 for p in self.space.params], dtype=float)
        tried = np.array([self.space.digits(i) for i in self.results], dtype=float) / scale
        points = digits[pool].astype(float) / scale
        gaps = np.abs(points[:, None, :] - tried[None, :, :])
        unordered = [a for a, p in enumerate(self.space.params) if not p.is_ordered]
        gaps[:, :, unordered] = gaps[:, :, unordered] > 0
        nearest = gaps.sum(axis=2).min(axis=1)
        return int(self.space.legal_indices()[pool[int(np.argmax(nearest))]])

    def _ranked_results(self) -> list[tuple[int, float]]:
        """Successful results, best first (ties in telling order)."""
        ok = [(i, v) for i, v in self.results.items() if v is not None]
        return sorted(ok, key=lambda item: item[1])

    def _failure_value(self) -> float | None:
        """What a failed trial counts as for strategies that need a number: worse than the
        worst success seen, so failures are avoided without being trusted as measurements."""
        ok = [v for v in self.results.values() if v is not None]
        if not ok:
            return None
        worst, best = max(ok), min(ok)
        return worst + max(worst - best, abs(worst) * 0.1, 1e-12)
