"""Transfer learning: warm-start the cost model with trials of the same kernel on other
workloads (other shapes, other targets), in the spirit of transfer-learning autotuners such
as ytopt's and the Neural Configuration Scorer line of work.

Each earlier workload's values are standardised on their own (a 4x4 and a 64x64 matmul
differ in scale, not necessarily in which tiles are good) and mapped into this space by
parameter values (points whose values this space lacks are dropped). Values that name a
part of one target (a memory region) are mapped by their role instead of their name, where
the application gives both targets' roles (`ValueRoles`): `dtcm` on the Cortex-M55 stands
for `ssram23` on the Cortex-M4, and a value whose role this space lacks is dropped like
any other missing value. One model is fitted
on all of them together, once, when the search first needs it, and scores every legal
point of this space: the prior score. Until this workload's own trials arrive, proposals
are the best prior scores; from then on the online model (fitted on this workload's trials
only, so a refit costs what it costs without priors) takes the prior score as one more
feature and learns how far to trust it. With no usable prior data this is the plain cost
model.

The prior fit is the one-off cost of a transfer search, so it is kept in proportion to the
run: it learns from at most `PRIOR_ROWS_PER_EVALUATION` prior trials per evaluation of the
budget (never fewer than `PRIOR_MIN_ROWS`), and its prior score is cached per (prior
trials, space, objective), so the layers and repeats of one process that share a prior
set fit it once.
"""
from __future__ import annotations

import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..space import Space
from .base import PriorTrials, ValueRoles, translation
from .model import BoostedTrees, HistogramTrees, ModelGuided, fitted_predictions, standardised_targets

# The prior model learns from at most 3,000 trials per prior workload and 9,000 in all (a
# random subset of each; 4,000 in all lost ~0.4 on one pnpoly space at a budget of 457)...
PRIOR_ROWS, PRIOR_TOTAL = 3000, 9000
# ... and from no more than 70 per evaluation of a known budget (a 14-evaluation run maps
# and fits 980, not 9,000: the fit stays a few milliseconds per proposal at any budget).
PRIOR_ROWS_PER_EVALUATION, PRIOR_MIN_ROWS = 70, 700
# Above this many rows the prior model is fitted on histograms (a third of the exact trees'
# time at 9,000 rows); below it the exact trees are cheaper (a histogram fit has ~30 ms of
# fixed cost, and its prediction of 10,000 points takes 12 ms against 2).
HISTOGRAM_ROWS = 3000
PRIOR_CACHE_SIZE = 8


@dataclass(frozen=True)
class _Scored:
    """A cached prior score and what it was computed from. The entry holds the prior sets
    and the space themselves, so the ids in its key can never be reused by other objects."""

    prior: tuple[PriorTrials, ...]
    space: Space
    roles: ValueRoles
    score: np.ndarray | None
    size: int


_PRIOR_CACHE: OrderedDict[tuple, _Scored] = OrderedDict()

class TransferLearning(ModelGuided):
    name = "transfer"
    uses_prior = True
    uses_budget = True

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "",
                 prior: Sequence[PriorTrials] = (), budget: int | None = None, roles: ValueRoles = ValueRoles(),
                 **options):
        super().__init__(space, rng, objective, **options)
        self._prior = tuple(prior)
        self._roles = roles  # this space's target's value roles, what prior values are mapped to
        limit = PRIOR_TOTAL if budget is None else max(PRIOR_MIN_ROWS, PRIOR_ROWS_PER_EVALUATION * budget)
        self._prior_rows = min(PRIOR_TOTAL, limit)
        self._prior_loaded = False
        self._prior_values: np.ndarray | None = None
        self._prior_count = 0

    # --- the prior score, computed on first use ---------------------------------------------
    @property
    def _prior_score(self) -> np.ndarray | None:
        """The prior model's score of every legal point (lower is better), or None."""
        if not self._prior_loaded:
            self._prior_loaded = True
            self._prior_values, self._prior_count = prior_score(self.space, self.objective, self._prior,
                                                                self._prior_rows, self._roles)
        return self._prior_values

    @property
    def prior_size(self) -> int:
        """How many prior trials the prior model learnt from (0: none usable)."""
        _ = self._prior_score
        return self._prior_count

    def _ready(self) -> bool:
        return self._prior_score is not None or super()._ready()

    def _features(self, positions: np.ndarray) -> np.ndarray:
        digits = super()._features(positions)
        if self._prior_score is None:
            return digits
        return np.column_stack([digits, self._prior_score[positions]])

    def _acquisition(self, points: np.ndarray) -> np.ndarray:
        if self._prior_score is not None and not self.results:
            return points[:, -1]  # nothing of our own yet: the prior score alone
        return super()._acquisition(points)


def prior_score(space: Space, objective: str, prior: tuple[PriorTrials, ...],
                rows: int, roles: ValueRoles = ValueRoles()) -> tuple[np.ndarray | None, int]:
    """(score of every legal point, prior trials learnt from), from the cache when this
    prior set, space, value roles, objective and row limit were scored before. Deterministic: the
    subsets drawn and the model's seed depend on the prior data, not on a search's seed,
    which is what lets searches of any seed share the fit."""
    key = (tuple(id(source) for source in prior), id(space), roles, objective, rows)
    hit = _PRIOR_CACHE.get(key)
    if hit is None or hit.space is not space or len(hit.prior) != len(prior) or any(
            a is not b for a, b in zip(hit.prior, prior)):
        features, targets = map_prior(space, objective, prior, rows, roles)
        score = None
        if len(targets):
            kind = HistogramTrees if len(targets) > HISTOGRAM_ROWS else BoostedTrees
            # Read-only, shared by every search that hits either cache.
            score = fitted_predictions(kind, 0, features, targets, None, space.legal_digits().astype(float))
        hit = _PRIOR_CACHE[key] = _Scored(prior, space, roles, score, len(targets))
        while len(_PRIOR_CACHE) > PRIOR_CACHE_SIZE:
            _PRIOR_CACHE.popitem(last=False)
    _PRIOR_CACHE.move_to_end(key)
    return hit.score, hit.size


def map_prior(space: Space, objective: str, prior: Sequence[PriorTrials], rows: int,
              roles: ValueRoles = ValueRoles()) -> tuple[np.ndarray, np.ndarray]:
    """The prior trials as (digits in this space, standardised targets): at most
    min(PRIOR_ROWS, rows / number of sources) from each source, a random subset seeded by
    the source itself. `roles` are this space's value roles (see digit_tables)."""
    positions = [{(type(v), v): n for n, v in enumerate(p.values)} for p in space.params]
    defaults = [table.get((type(p.default), p.default)) for table, p in zip(positions, space.params)]
    names = space.names
    share = min(PRIOR_ROWS, rows // max(1, len(prior)))
    features, targets = [], []
    for source in prior:
        trials = source.trials
        if len(trials) > share:
            rng = np.random.default_rng(zlib.crc32(source.source.encode()) + len(trials))
            trials = [trials[int(i)] for i in np.sort(rng.choice(len(trials), share, replace=False))]
        tables = digit_tables(space, positions, source.roles, roles)
        mapped, values = [], []
        for trial in trials:
            digits = _digits_of(names, trial.config.items, tables, defaults)
            if digits is None:
                continue  # a value or parameter this space does not have
            mapped.append(digits)
            value = trial.value(objective)
            values.append(np.nan if value is None else value)
        if any(not np.isnan(v) for v in values):
            features.extend(mapped)
            targets.extend(standardised_targets(np.array(values)))
    width = len(space.params)
    return np.array(features, dtype=float).reshape(-1, width), np.array(targets)


def digit_tables(space: Space, positions: list[dict], theirs: ValueRoles, ours: ValueRoles) -> list[dict]:
    """Per parameter, {(type, a prior's value): digit here}: the value's own position, or,
    for a parameter both targets give roles, the position of the value with the same role
    (a value whose role has no value here has no entry, so its trials are dropped)."""
    tables = []
    for param, table in zip(space.params, positions):
        mapping = translation(theirs, ours, param.name, param.values)
        if mapping is not None:
            table = {key: table[(type(mine), mine)] for key, mine in mapping.items()}
        tables.append(table)
    return tables


def _digits_of(names: tuple[str, ...], items: tuple, tables: list[dict], defaults: list[int]) -> list[int] | None:
    """The digits of a prior configuration (its (name, value) pairs) in this space, or None
    when it has a value or parameter this space lacks: a dictionary look-up per parameter
    (Space.index_of's checks cost most of a transfer search's start on large priors). Keys
    carry the type, so 1 and True stay distinct values. A parameter the prior lacks takes
    this space's default (none: the configuration is dropped)."""
    if len(items) == len(names) and all(key == name for (key, _), name in zip(items, names)):
        # the usual case: the same parameters, in order
        digits = [table.get((type(value), value)) for table, (_, value) in zip(tables, items)]
    else:
        config = dict(items)
        if any(name not in names for name in config):
            return None
        digits = [table.get((type(config[name]), config[name])) if name in config else default
                  for name, table, default in zip(names, tables, defaults)]
    return None if None in digits else digits
