"""Search strategies. A strategy asks and is told; it never builds or runs anything.

`ask(n)` proposes up to n legal, not yet evaluated configurations; `tell(trials)` reports
finished trials (including ones recorded by an earlier run, so a resumed run does not
repeat them). Every strategy takes a seeded `numpy.random.Generator`; names become
objects only through the one table below.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from edgetune.errors import EdgetuneError

from ..space import Space
from .annealing import SimulatedAnnealing
from .bandit import Bandit
from .base import PriorTrials, SearchStrategy, Strategy, ValueRoles
from .basic import Exhaustive, RandomSearch
from .differential import DifferentialEvolution
from .genetic import GeneticAlgorithm
from .gradient import GradientSearch
from .local import LocalSearch
from .model import ModelGuided
from .transfer import TransferLearning
# Not a module of this package: it builds on the strategies above (transfer, prior_trust).
from ..code_explore import CodeRankedTransfer  # noqa: E402

# `transfer+code` ranks candidates by their compiled code (`uses_code`): the application, which
# compiles, gives it a score (make_strategy's `ranking`); made without one it is `transfer`.
STRATEGIES: dict[str, type[SearchStrategy]] = {
    cls.name: cls for cls in (RandomSearch, Exhaustive, GeneticAlgorithm, SimulatedAnnealing, LocalSearch,
                              GradientSearch, TransferLearning, Bandit, DifferentialEvolution, CodeRankedTransfer)
}

# Old names kept working, each with the name it now stands for. `model` was the cost model
# without priors: `transfer` with no stored trials of the kernel on other workloads is that
# model, proposal for proposal (the same traces in all 120 runs of the GPU spaces, issue 30),
# so one name serves both; the cost model stays the bandit's arm (ModelGuided).
ALIASES: dict[str, str] = {"model": "transfer"}

# What `edgetune tune` uses unless told otherwise: the best mean score in bench/search.py,
# on every family including the held-out one (docs/search.md): the cost model warm-started
# from the database's other workloads of the kernel; with none stored, the plain cost model.
DEFAULT_STRATEGY = "transfer"


class StrategyError(EdgetuneError, ValueError):
    """A strategy name that names no strategy."""


def canonical_strategy(name: str) -> str:
    """The strategy's one name: an old name (ALIASES) as the name it stands for, any other
    name as given (checked by check_strategy)."""
    return ALIASES.get(name, name)


def deprecation_note(name: str) -> str:
    """One line for a user who gave an old name, or "" for a current one."""
    if name not in ALIASES:
        return ""
    return (f"strategy {name!r} is deprecated: it is {ALIASES[name]!r} (the same proposals when no trials of "
            f"the kernel on other workloads are stored); use --strategy {ALIASES[name]}")


def check_strategy(name: str) -> type[SearchStrategy]:
    """The one check of a strategy name (the CLI, the session, replay and NPU tuning all use
    it): the strategy's class (an old name's: ALIASES), or StrategyError naming the known ones."""
    try:
        return STRATEGIES[canonical_strategy(name)]
    except KeyError:
        raise StrategyError(f"unknown strategy {name!r} (known: {', '.join(sorted(STRATEGIES))})") from None


def make_strategy(name: str, space: Space, rng: np.random.Generator, objective: str = "",
                  prior: Sequence[PriorTrials] = (), budget: int | None = None,
                  roles: ValueRoles = ValueRoles(), ranking: dict | None = None) -> SearchStrategy:
    """The one place strategy names become objects (used by the CLI and the session).

    `objective` names the measured value to minimise (strategies that learn need it);
    `prior` holds trials of the same kernel on other workloads, for strategies that
    transfer what they learnt (others ignore it), and `roles` this space's target's value
    roles, which prior values are mapped to (see ValueRoles); `budget` is the run's
    evaluation budget, for strategies that plan by it (None: unknown); `ranking` the options of
    a strategy that ranks compiled code (`uses_code`: score, prefetch, kernel_fit; see
    tuner.code_explore), which the others ignore.
    """
    cls = check_strategy(name)
    options: dict = {}
    if cls.uses_prior:
        options["prior"] = tuple(prior)
        options["roles"] = roles
    if cls.uses_budget:
        options["budget"] = budget
    if cls.uses_code:
        options.update(ranking or {})
    return cls(space, rng, objective, **options)


__all__ = ["ALIASES", "Bandit", "CodeRankedTransfer", "DEFAULT_STRATEGY", "DifferentialEvolution", "Exhaustive", "GeneticAlgorithm", "GradientSearch",
           "LocalSearch", "ModelGuided", "PriorTrials", "RandomSearch", "STRATEGIES", "SearchStrategy", "SimulatedAnnealing", "Strategy",
           "TransferLearning", "ValueRoles", "canonical_strategy", "check_strategy", "deprecation_note",
           "make_strategy"]
