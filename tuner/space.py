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

from edgetune.errors import EdgetuneError

Value = int | str | bool


class SpaceError(EdgetuneError, ValueError):
    """A parameter, value or configuration that does not belong to a space."""


@dataclass(frozen=True)
class Param:
    """One tunable parameter: a name and its ordered values (order gives neighbourhoods)."""

    name: str
    values: tuple[Value, ...]
    doc: str = ""
    ordered: bool | None = None  # None: ordered when every value is a number (not a bool)
    # The value a configuration without this parameter stands for: configurations stored
    # before the parameter joined the space were measured with it. None: required.
    default: Value | None = None

    def __post_init__(self):
        if not self.values:
            raise SpaceError(f"parameter {self.name!r} has no values")
        # Compared by type and value: 1, 1.0 and True are three different choices here.
        if len({(type(v), v) for v in self.values}) != len(self.values):
            raise SpaceError(f"parameter {self.name!r} repeats a value")
        if self.default is not None:
            self.index_of(self.default)

    @property
    def is_ordered(self) -> bool:
        """Whether neighbouring positions in `values` are neighbouring choices (tile sizes are,
        compiler names are not)."""
        if self.ordered is not None:
            return self.ordered
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values)

    def step_positions(self, position: int) -> tuple[int, ...]:
        """Positions one step away: the adjacent values of an ordered parameter, every other
        value of an unordered one."""
        if self.is_ordered:
            return tuple(p for p in (position - 1, position + 1) if 0 <= p < len(self.values))
        return tuple(p for p in range(len(self.values)) if p != position)

    def index_of(self, value: Value) -> int:
        # Typed comparison, so True never matches 1 (Kernel Tuner spaces mix them); a number
        # of another numeric type (16.0 for 16) matches when no value of its own type does.
        for same_type in (True, False):
            for position, candidate in enumerate(self.values):
                if candidate == value and (type(candidate) is type(value)) == same_type \
                        and (same_type or _both_numbers(candidate, value)):
                    return position
        raise SpaceError(f"{value!r} is not a value of parameter {self.name!r} "
                         f"(values: {', '.join(map(str, self.values))})")


def _both_numbers(a, b) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))


def choice(name: str, values: Sequence[Value], doc: str = "", ordered: bool | None = None,
           default: Value | None = None) -> Param:
    return Param(name, tuple(values), doc, ordered, default)


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
    """A predicate over a configuration, with the reason shown when a point is rejected.

    `reads` names the parameters the predicate reads. Declared, the space decides the
    constraint as soon as those parameters are chosen, once per distinct combination of
    their values, so a space is pruned while it is walked instead of being listed whole
    (edgetune.tuner.legal); the predicate is then given those parameters only, and
    reading another is an error. None: it may read anything and is checked on whole
    configurations, after the declared ones have pruned."""

    reason: str
    check: Callable[[Mapping[str, Value]], bool]
    reads: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.reads is not None:
            object.__setattr__(self, "reads", tuple(dict.fromkeys(self.reads)))


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
    def __init__(self, params: Sequence[Param], constraints: Sequence[Constraint] = (),
                 legal: Sequence[int] | None = None):
        """`legal`, when given, is the complete list of legal indices, known in advance (a
        recorded space: legal = measured); the constraints must agree with it."""
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise SpaceError("a space's parameter names must be unique")
        self.params = tuple(params)
        self.constraints = tuple(constraints)
        self._radix = [len(p.values) for p in self.params]
        self._legal_cache: np.ndarray | None = None
        if legal is not None:
            self._legal_cache = np.unique(np.asarray(legal, dtype=np.int64))
            if len(self._legal_cache) and not 0 <= self._legal_cache[0] <= self._legal_cache[-1] < self.cartesian_size:
                raise SpaceError(f"a legal index lies outside the space (size {self.cartesian_size})")
        self._legal_digits: np.ndarray | None = None

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
            if p.name not in values and p.default is None:
                raise SpaceError(f"configuration lacks parameter {p.name!r}")
            index = index * radix + p.index_of(values.get(p.name, p.default))
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
        """All legal points, ascending. Found once (edgetune.tuner.legal walks the product
        pruning it by the constraints, never listing it whole) and kept."""
        if self._legal_cache is None:
            self._walk()
        return self._legal_cache

    def _walk(self) -> None:
        from .legal import indices_of, legal_digits  # legal.py builds on this module's types
        digits = legal_digits(self.params, self.constraints)
        self._legal_cache = indices_of(digits, self._radix)
        self._legal_digits = digits

    def __iter__(self) -> Iterator[Config]:
        return (self.config_at(int(i)) for i in self.legal_indices())

    def __len__(self) -> int:
        return len(self.legal_indices())

    # --- neighbourhoods and geometry (what strategies walk on) ------------------------------
    def legal_position(self, index: int) -> int | None:
        """Where `index` sits in legal_indices(), or None when the point is illegal (a binary
        search of the sorted legal points: no table as large as the space)."""
        legal = self.legal_indices()
        position = int(np.searchsorted(legal, int(index)))
        return position if position < len(legal) and int(legal[position]) == int(index) else None

    def is_legal_index(self, index: int) -> bool:
        return self.legal_position(index) is not None

    def digits(self, index: int) -> tuple[int, ...]:
        """The position of each parameter's value (the mixed-radix digits of the index)."""
        out = []
        for radix in reversed(self._radix):
            index, digit = divmod(int(index), radix)
            out.append(digit)
        return tuple(reversed(out))

    def index_from_digits(self, digits: Sequence[int]) -> int:
        index = 0
        for digit, radix in zip(digits, self._radix):
            if not 0 <= digit < radix:
                raise SpaceError(f"digit {digit} outside 0..{radix - 1}")
            index = index * radix + int(digit)
        return index

    def legal_digits(self) -> np.ndarray:
        """Digits of every legal point, one row per point, in legal_indices() order (in the
        narrowest integer type that holds them)."""
        if self._legal_digits is None:
            indices = self.legal_indices()
            if self._legal_digits is None:  # a space given its legal points: split their indices
                columns = []
                for radix in reversed(self._radix):
                    indices, digit = np.divmod(indices, radix)
                    columns.append(digit)
                self._legal_digits = (np.stack(columns[::-1], axis=1) if columns
                                      else np.zeros((len(indices), 0), np.int64))
        return self._legal_digits

    def neighbours(self, index: int) -> list[int]:
        """Legal points that differ from `index` in one parameter by one step.

        A step along an ordered parameter that lands on an illegal point keeps going in the
        same direction to the first legal one, so that points stay connected in spaces where
        constraints leave only a small fraction of the Cartesian product legal.
        """
        digits = list(self.digits(index))
        found = []
        for axis, param in enumerate(self.params):
            here = digits[axis]
            if param.is_ordered:
                walks = [range(here - 1, -1, -1), range(here + 1, len(param.values))]
            else:
                walks = [[p] for p in param.step_positions(here)]
            for walk in walks:
                for position in walk:
                    digits[axis] = position
                    candidate = self.index_from_digits(digits)
                    if self.is_legal_index(candidate):
                        found.append(candidate)
                        break
            digits[axis] = here
        return found

    def distances(self, digits: Sequence[float]) -> np.ndarray:
        """Distance from a point given by its digits to every legal point (legal_indices()
        order): per ordered parameter the step difference as a fraction of its range, per
        unordered one 0 or 1."""
        rows = self.legal_digits()
        target = np.asarray(digits, dtype=float)
        total = np.zeros(len(rows))
        for axis, param in enumerate(self.params):  # a column at a time: no float copy of every row
            diff = np.abs(rows[:, axis].astype(float) - target[axis])
            if param.is_ordered:
                total += diff / max(1, len(param.values) - 1)
            else:
                total += (diff > 0).astype(float)
        return total
