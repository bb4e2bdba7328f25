"""What a tuning run minimises and which measured values it must keep under a limit.

An objective is the name of a measured value (e.g. "cycles"); a bound is NAME<=LIMIT on
another (e.g. "energy_uj<=2.5"). A trial that ran but breaks a bound is kept in the
database (it was measured) but can never be the best.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from edgetune.errors import EdgetuneError
from .trial import Trial

_BOUND = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*<=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


class ObjectiveError(EdgetuneError, ValueError):
    """An objective or bound that names no measured value, or cannot be parsed."""


@dataclass(frozen=True)
class Bound:
    name: str
    limit: float

    def allows(self, trial: Trial) -> bool:
        value = trial.value(self.name)
        return value is not None and value <= self.limit

    def text(self) -> str:
        return f"{self.name}<={self.limit:g}"


def parse_bound(text: str) -> Bound:
    match = _BOUND.fullmatch(text)
    if not match:
        raise ObjectiveError(f"constraint {text!r}: expected NAME<=NUMBER, e.g. energy_uj<=2.5")
    return Bound(match.group(1), float(match.group(2)))


def check_names(objective: str, bounds: Iterable[Bound], measured: Iterable[str], where: str) -> None:
    """Refuse an objective or bound on a value `where` does not measure."""
    measured = tuple(measured)
    if objective not in measured:
        raise ObjectiveError(f"objective {objective!r} is not measured on {where} (choose from: {', '.join(measured)})")
    for bound in bounds:
        if bound.name not in measured:
            raise ObjectiveError(f"constraint {bound.text()!r}: {bound.name!r} is not measured on {where} "
                                 f"(choose from: {', '.join(measured)})")


def feasible(trial: Trial, bounds: Iterable[Bound]) -> bool:
    return all(bound.allows(trial) for bound in bounds)


@dataclass(frozen=True)
class Goal:
    """What a workload is tuned for: the value to minimise and the bounds to keep. Stored
    with the workload by `tune`, so `best`, `export`, `verify` and `place` choose by it."""

    objective: str
    bounds: tuple[Bound, ...] = ()

    def allows(self, trial: Trial) -> bool:
        return feasible(trial, self.bounds)

    def text(self) -> str:
        return self.objective + (f" with {', '.join(b.text() for b in self.bounds)}" if self.bounds else "")


def resolve_goal(stored: "Goal | None", objective: str, bounds: Iterable[Bound], default: str) -> Goal:
    """The goal a command works to. Neither --objective nor --constraint given: the
    workload's stored goal (or `default`, the target's own unit, unbounded). Otherwise the
    given ones replace it: --constraint alone keeps the stored objective; --objective alone
    drops the stored bounds (they were chosen for another objective)."""
    bounds = tuple(bounds)
    if not objective and not bounds:
        return stored if stored is not None else Goal(default)
    return Goal(objective or (stored.objective if stored is not None else default), bounds)
