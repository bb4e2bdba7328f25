"""Search spaces: typed parameters, constraints, and configurations as mixed-radix integers.

A `Space` owns validity. Strategies only ever receive legal configurations from it, so no
evaluation is wasted on a point the target or the kernel cannot run. Every point of the
Cartesian product has an index (mixed radix over the parameters' value lists, as AutoTVM
does), which makes "visited" sets and comparisons cheap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

Value = int | str | bool


class SpaceError(ValueError):
    """A parameter, value or configuration that does not belong to a space."""


@dataclass(frozen=True)
class Param:
    """One tunable parameter: a name and its ordered values (order gives neighbourhoods)."""

    name: str
    values: tuple[Value, ...]
    doc: str = ""

    def __post_init__(self):
        if not self.values:
            raise SpaceError(f"parameter {self.name!r} has no values")
        if len(set(self.values)) != len(self.values):
            raise SpaceError(f"parameter {self.name!r} repeats a value")

    def index_of(self, value: Value) -> int:
        try:
            return self.values.index(value)
        except ValueError:
            raise SpaceError(f"{value!r} is not a value of parameter {self.name!r} "
                             f"(values: {', '.join(map(str, self.values))})") from None


def choice(name: str, values: Sequence[Value], doc: str = "") -> Param:
    return Param(name, tuple(values), doc)


def powers_of_two(name: str, low: int, high: int, doc: str = "") -> Param:
    if low < 1 or high < low:
        raise SpaceError(f"parameter {name!r}: bad power-of-two range {low}..{high}")
    values = []
    v = 1 << (low - 1).bit_length()
    while v <= high:
        values.append(v)
        v *= 2
    return Param(name, tuple(values), doc)


@dataclass(frozen=True)
class Constraint:
    """A predicate over a configuration, with the reason shown when a point is rejected."""

    reason: str
    check: Callable[[Mapping[str, Value]], bool]


@dataclass(frozen=True)
class Config:
    """A configuration: parameter values in the space's parameter order."""

    items: tuple[tuple[str, Value], ...]

    def __getitem__(self, name: str) -> Value:
        for key, value in self.items:
            if key == name:
                return value
        raise KeyError(name)

    def as_dict(self) -> dict[str, Value]:
        return dict(self.items)

    def key(self) -> str:
        """A canonical text form, stable across runs (used as the database key)."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.items))


class Space:
    def __init__(self, params: Sequence[Param], constraints: Sequence[Constraint] = ()):
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise SpaceError("a space's parameter names must be unique")
        self.params = tuple(params)
        self.constraints = tuple(constraints)
        self._radix = [len(p.values) for p in self.params]
        self._legal_cache: np.ndarray | None = None

    # --- sizes and indexing ---------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def cartesian_size(self) -> int:
        return math.prod(self._radix)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise SpaceError(f"unknown parameter {name!r} (parameters: {', '.join(self.names)})")

    def config_at(self, index: int) -> Config:
        if not 0 <= index < self.cartesian_size:
            raise SpaceError(f"index {index} is outside the space (size {self.cartesian_size})")
        items = []
        for p, radix in zip(reversed(self.params), reversed(self._radix)):
            index, digit = divmod(index, radix)
            items.append((p.name, p.values[digit]))
        return Config(tuple(reversed(items)))

    def index_of(self, config: Config | Mapping[str, Value]) -> int:
        values = config.as_dict() if isinstance(config, Config) else dict(config)
        extra = set(values) - set(self.names)
        if extra:  # named first: a misspelt parameter is likelier than a forgotten one
            raise SpaceError(f"unknown parameter {sorted(extra)[0]!r} (parameters: {', '.join(self.names)})")
        index = 0
        for p, radix in zip(self.params, self._radix):
            if p.name not in values:
                raise SpaceError(f"configuration lacks parameter {p.name!r}")
            index = index * radix + p.index_of(values[p.name])
        return index

    def make(self, values: Mapping[str, Value]) -> Config:
        """A configuration from a mapping, checked for unknown names and values."""
        return self.config_at(self.index_of(values))

    # --- legality -----------------------------------------------------------------------
    def violation(self, config: Config) -> str | None:
        values = config.as_dict()
        for constraint in self.constraints:
            if not constraint.check(values):
                return constraint.reason
        return None

    def is_legal(self, config: Config) -> bool:
        return self.violation(config) is None

    def legal_indices(self) -> np.ndarray:
        """All legal points, ascending. Enumerates the product once and caches it."""
        if self._legal_cache is None:
            legal = [i for i in range(self.cartesian_size) if self.is_legal(self.config_at(i))]
            self._legal_cache = np.asarray(legal, dtype=np.int64)
        return self._legal_cache

    def __iter__(self) -> Iterator[Config]:
        return (self.config_at(int(i)) for i in self.legal_indices())

    def __len__(self) -> int:
        return len(self.legal_indices())
