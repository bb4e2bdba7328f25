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
from .prior_trust import MIN_TRIALS, rank_agreement

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
# Runs of fewer evaluations than this plan SMALL_BATCH (or a sixteenth of the budget) at a
# time, with SMALL_EPSILON of the proposals random, not 8 and 0.2 (small_budget_options).
SMALL_BUDGET, SMALL_BATCH, SMALL_EPSILON = 128, 2, 0.05
TRUSTED_PRIOR_BATCH = 8  # ... but a trusted prior plans 8 at a time whatever the budget


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
                 check_priors: bool = True, small_budget_design: bool = True, spread_first_plan: bool = True,
                 **options):
        # A small budget also checks its priors against points they did not choose (_next).
        self._small = small_budget_design and budget is not None and budget < SMALL_BUDGET
        # A small budget cannot wait for the model to stumble on a categorical value (or
        # combination) it has never measured next to the best point (_switch_points).
        self.switches = self._small
        if small_budget_design and budget is not None:
            options = {**small_budget_options(budget), **options}
        super().__init__(space, rng, objective, **options)
        # Whether the prior score must keep ranking this space's own trials better than
        # chance to be used (prior_trust); False: trusted whatever it predicts (as before).
        self._check_priors = check_priors
        # Whether the first plan on a trusted prior is spread out (spread_out) rather than
        # its best points in order.
        self._spread_first_plan = spread_first_plan
        # Plans of a small budget are short without a prior, but a trusted prior's first
        # plan is its best points, and those are worth a whole batch (m16n16k32: +0.46
        # with 2 at a time, +0.95 with 8).
        self._batches = (self.batch, max(self.batch, TRUSTED_PRIOR_BATCH))
        self._trust_at, self._trusted = -1, False
        self._planned_trusting = False
        self._told_positions: list[int] = []  # this space's own legal trials, in telling order ...
        self._told_values: list[float] = []  # ... and their values (NaN: failed)
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

    @property
    def _usable_prior(self) -> np.ndarray | None:
        """The prior score while it ranks this space's own trials better than chance (or
        before there are enough to tell, or unchecked), else None: the plain cost model."""
        score = self._prior_score
        if score is None or not self._check_priors:
            return score
        count = len(self._told_positions)
        if self._trust_at != count:  # judged again whenever a trial came in
            self._trust_at = count
            self._trusted = count < MIN_TRIALS or rank_agreement(
                score[np.array(self._told_positions, dtype=np.int64)], np.array(self._told_values)) >= 0
        return score if self._trusted else None

    def _observe(self, index: int, value: float | None) -> None:
        super()._observe(index, value)
        position = self.space.legal_position(index)
        if position is not None and self._check_priors:
            self._told_positions.append(position)
            self._told_values.append(np.nan if value is None else value)

    def _next(self) -> int | None:
        trusted = self._usable_prior is not None
        if self._plan and trusted != self._planned_trusting:
            self._plan = []  # planned on a prior now judged otherwise: plan again
        self._planned_trusting = trusted
        self.batch = self._batches[trusted]
        if trusted and self._checking_prior and len(self.results) % 2 == 1:
            # Before the priors are judged, every other point comes from the space-filling
            # design: judged on their own top picks alone, a wrong prior looks no worse
            # than a right one, and a small budget cannot wait for the spread to come.
            return self._space_filling()
        return super()._next()

    def _ready(self) -> bool:
        return self._usable_prior is not None or super()._ready()

    @property
    def _checking_prior(self) -> bool:
        """Whether a small budget still checks its prior with design points (_next): until
        MIN_TRIALS of this space's own trials can judge it."""
        return self._check_priors and self._small and len(self._told_positions) < MIN_TRIALS

    @property
    def designing(self) -> bool:
        return super().designing or (self._usable_prior is not None and self._checking_prior)

    def _spreading(self) -> bool:
        """Whether the plan about to be made is the first, on the prior alone."""
        return self._spread_first_plan and not self.results and self._usable_prior is not None

    @property
    def shortlist(self) -> int:
        return SPREAD_POOL if self._spreading() else 1

    def _chosen(self, best_first: list[int], size: int) -> list[int]:
        return spread_out(self.space, best_first, size) if self._spreading() else super()._chosen(best_first, size)

    def _features(self, positions: np.ndarray) -> np.ndarray:
        digits = super()._features(positions)
        score = self._usable_prior
        if score is None:
            return digits
        return np.column_stack([digits, score[positions]])

    def _acquisition(self, points: np.ndarray) -> np.ndarray:
        if self._usable_prior is not None and not self.results:
            return points[:, -1]  # nothing of our own yet: the prior score alone
        return super()._acquisition(points)


# The first plan on a prior is chosen from the prior's best SPREAD_POOL x its size points.
SPREAD_POOL = 3


def spread_out(space: Space, best_first: list[int], size: int) -> list[int]:
    """`size` points of `best_first`, in its order, where a point one move from a point
    already chosen (one_move_apart) waits until no other is left.

    A prior's best points are mostly one point and its neighbours: the same tiles built at O2
    and at O3, with each of three tap loops. When the prior knows the region but not the
    point, a plan of them spends its evaluations on one guess; spread out, it tries as many
    of the prior's guesses as it has points (docs/search-trust.md: the stride-2 depthwise
    spaces, budgets 19 and 92, scored +0.30 and +0.68 in order)."""
    chosen: list[int] = []
    waiting: list[int] = []
    for index in best_first:
        digits = space.digits(index)
        if any(one_move_apart(space, digits, space.digits(other)) for other in chosen):
            waiting.append(index)
        else:
            chosen.append(index)
            if len(chosen) == size:
                return chosen
    return (chosen + waiting)[:size]


def one_move_apart(space: Space, a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two points (digits) differ in one parameter only, by one of its steps (a tile
    of 4 against 8, O2 against O3, one tap loop against another: Param.step_positions)."""
    differ = [axis for axis in range(len(a)) if a[axis] != b[axis]]
    return len(differ) == 1 and int(b[differ[0]]) in space.params[differ[0]].step_positions(int(a[differ[0]]))


def small_budget_options(budget: int) -> dict:
    """The cost model's plan size and share of random proposals for a run of `budget`
    evaluations: below SMALL_BUDGET every evaluation counts, so the model plans a few
    proposals at a time (refitted as each batch comes in) and rarely spends one at random."""
    if budget >= SMALL_BUDGET:
        return {}
    return {"batch": min(8, max(SMALL_BATCH, budget // 16)), "epsilon": SMALL_EPSILON}


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
    defaults = _defaults(space, positions)
    names = space.names
    share = min(PRIOR_ROWS, rows // max(1, len(prior)))
    features, targets = [], []
    for source in prior:
        trials = source.trials
        if len(trials) > share:
            rng = np.random.default_rng(zlib.crc32(source.source.encode()) + len(trials))
            trials = [trials[int(i)] for i in np.sort(rng.choice(len(trials), share, replace=False))]
        tables = digit_tables(space, positions, source.roles, roles)
        fixed = _fixed_extras(trials, names)
        mapped, values = [], []
        for trial in trials:
            digits = _digits_of(names, trial.config.items, tables, defaults, fixed)
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


def _defaults(space: Space, positions: list[dict]) -> list[int | None]:
    """Per parameter, the digit a prior configuration without it stands for: the
    parameter's default, or the one value every legal point here has (a parameter this
    space fixes is no choice, so a workload tuned without it ran the same), else None."""
    legal = space.legal_digits()
    out = []
    for column, (table, param) in enumerate(zip(positions, space.params)):
        digit = table.get((type(param.default), param.default))
        if digit is None and len(legal) and np.all(legal[:, column] == legal[0, column]):
            digit = int(legal[0, column])
        out.append(digit)
    return out


def _fixed_extras(trials, names: tuple[str, ...]) -> frozenset[str]:
    """The parameters a source's trials have and this space lacks, where every trial of the
    source has the same value: the source never varied them, so its trials still rank what
    this space varies (a parameter it did vary keeps its trials out, as any unknown value)."""
    if trials and all(len(t.config.items) == len(names) for t in trials) and all(
            key in names for key, _ in trials[0].config.items):
        return frozenset()  # one space's trials, named as here (the usual case): nothing to look at
    seen: dict[str, set] = {}
    for trial in trials:
        for name, value in trial.config.items:
            if name not in names:
                seen.setdefault(name, set()).add((type(value), value))
    return frozenset(name for name, values in seen.items() if len(values) == 1)


def _digits_of(names: tuple[str, ...], items: tuple, tables: list[dict], defaults: list[int | None],
               fixed: frozenset[str] = frozenset()) -> list[int] | None:
    """The digits of a prior configuration (its (name, value) pairs) in this space, or None
    when it has a value or parameter this space lacks: a dictionary look-up per parameter
    (Space.index_of's checks cost most of a transfer search's start on large priors). Keys
    carry the type, so 1 and True stay distinct values. A parameter the prior lacks takes
    this space's default (see _defaults; none: the configuration is dropped); a parameter
    this space lacks is left out if the source fixed it (`fixed`), else it drops the
    configuration."""
    if len(items) == len(names) and all(key == name for (key, _), name in zip(items, names)):
        # the usual case: the same parameters, in order
        digits = [table.get((type(value), value)) for table, (_, value) in zip(tables, items)]
    else:
        config = {name: value for name, value in items if name not in fixed}
        if any(name not in names for name in config):
            return None
        digits = [table.get((type(config[name]), config[name])) if name in config else default
                  for name, table, default in zip(names, tables, defaults)]
    return None if None in digits else digits
