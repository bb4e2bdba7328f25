"""The legal points of a space, found without listing its Cartesian product.

The product is walked one parameter at a time, as a tree whose level k holds the legal
prefixes of the first k parameters (as numpy digit rows). A constraint that declares the
parameters it reads is decided at the level of the last of them, so a prefix it rejects
is never extended; and it is called once per distinct combination of the values it reads,
not once per point, the rows then filtered by a table lookup. Constraints that do not say
what they read are checked on the whole configurations that survive the others.

Rows stay in lexicographic order of their digits, which is ascending mixed-radix index
order: the result is the very array listing the product would give, so strategies seeded
alike propose alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from .space import Constraint, Param, SpaceError, Value

# Digits are stored in the narrowest integer type their radices fit: a row of a space of a
# dozen parameters costs a dozen or two bytes while the tree is grown.
DIGIT_TYPES = (np.int8, np.int16, np.int32)  # signed: a difference of digits stays right


@dataclass
class WalkCount:
    """What a walk touched: how many prefixes it grew and how often it called a constraint
    (the measure of its work, for tests and the profile; not a timing)."""

    rows: int = 0
    calls: int = 0
    peak_rows: int = 0
    by_level: list[int] = field(default_factory=list)


def legal_digits(params: Sequence[Param], constraints: Sequence[Constraint],
                 count: WalkCount | None = None) -> np.ndarray:
    """The digits of every legal point, one row per point, in ascending index order."""
    count = count if count is not None else WalkCount()
    radix = [len(p.values) for p in params]
    dtype = next(t for t in DIGIT_TYPES if max(radix, default=1) - 1 <= np.iinfo(t).max)
    by_level, leftover = _levels(params, constraints)
    rows = np.zeros((1, 0), dtype=dtype)
    for constraint, _ in by_level.get(-1, ()):  # reads nothing: holds everywhere or nowhere
        count.calls += 1
        if not _decide(constraint, (), 0, params):
            rows = rows[:0]
    for level, size in enumerate(radix):
        rows = np.concatenate([np.repeat(rows, size, axis=0),
                               np.tile(np.arange(size, dtype=dtype), len(rows))[:, None]], axis=1)
        count.rows += len(rows)
        count.peak_rows = max(count.peak_rows, len(rows))
        for constraint, axes in by_level.get(level, ()):
            rows = rows[_holds(constraint, axes, rows, params, count)]
        count.by_level.append(len(rows))
    if leftover and len(rows):
        keep = [all(c.check(_values(params, row)) for c in leftover) for row in rows]
        count.calls += len(rows) * len(leftover)  # at most: `all` stops at the first refusal
        rows = rows[np.asarray(keep, dtype=bool)]
    return rows


def indices_of(digits: np.ndarray, radix: Sequence[int]) -> np.ndarray:
    """Mixed-radix indices (int64) of digit rows."""
    index = np.zeros(len(digits), dtype=np.int64)
    for axis, size in enumerate(radix):
        index = index * size + digits[:, axis].astype(np.int64)
    return index


def _levels(params: Sequence[Param], constraints: Sequence[Constraint]):
    """Declared constraints by the level that decides them (-1: they read nothing), each with
    the axes it reads; and the undeclared ones."""
    names = [p.name for p in params]
    by_level: dict[int, list[tuple[Constraint, tuple[int, ...]]]] = {}
    leftover = []
    for constraint in constraints:
        if constraint.reads is None:
            leftover.append(constraint)
            continue
        unknown = [name for name in constraint.reads if name not in names]
        if unknown:
            raise SpaceError(f"constraint {constraint.reason!r} reads {unknown[0]!r}, which is not a parameter "
                             f"(parameters: {', '.join(names)})")
        axes = tuple(names.index(name) for name in constraint.reads)
        by_level.setdefault(max(axes, default=-1), []).append((constraint, axes))
    return by_level, leftover


def _holds(constraint: Constraint, axes: tuple[int, ...], rows: np.ndarray, params: Sequence[Param],
           count: WalkCount) -> np.ndarray:
    """Which rows the constraint keeps: decided once per distinct combination of the digits
    it reads (a mixed-radix code of them), then looked up for every row."""
    if not len(rows):
        return np.zeros(0, dtype=bool)
    code = indices_of(rows[:, axes], [len(params[a].values) for a in axes])
    distinct, where = np.unique(code, return_inverse=True)
    verdicts = np.empty(len(distinct), dtype=bool)
    for n, combination in enumerate(distinct):
        verdicts[n] = _decide(constraint, axes, int(combination), params)
    count.calls += len(distinct)
    return verdicts[where.reshape(-1)]


def _decide(constraint: Constraint, axes: tuple[int, ...], code: int, params: Sequence[Param]) -> bool:
    values: dict[str, Value] = {}
    for axis in reversed(axes):
        code, digit = divmod(code, len(params[axis].values))
        values[params[axis].name] = params[axis].values[digit]
    try:
        return bool(constraint.check(values))
    except KeyError as exc:
        raise SpaceError(f"constraint {constraint.reason!r} reads {exc.args[0]!r} but declares only "
                         f"{', '.join(constraint.reads) or 'nothing'}") from None


def _values(params: Sequence[Param], row: np.ndarray) -> Mapping[str, Value]:
    return {p.name: p.values[int(digit)] for p, digit in zip(params, row)}
