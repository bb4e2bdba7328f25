"""Transfer learning: warm-start the cost model with trials of the same kernel on other
workloads (other shapes, other targets), in the spirit of transfer-learning autotuners such
as ytopt's and the Neural Configuration Scorer line of work.

Each earlier workload's values are standardised on their own (a 4x4 and a 64x64 matmul
differ in scale, not necessarily in which tiles are good) and mapped into this space by
parameter values (points whose values this space lacks are dropped). One model is fitted
on all of them together, once, when the search starts, and scores every legal point of
this space: the prior score. Until this workload's own trials arrive, proposals are the
best prior scores; from then on the online model (fitted on this workload's trials only,
so a refit costs what it costs without priors) takes the prior score as one more feature
and learns how far to trust it. With no usable prior data this is the plain cost model.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..space import Space
from .base import PriorTrials
from .model import BoostedTrees, ModelGuided, standardised_targets

# The prior model learns from at most 3,000 trials per prior workload and 9,000 in all (a
# random subset of each): mapping and fitting them is the one-off cost of a transfer search
# (4,000 in all halved that cost but lost ~0.4 on one pnpoly space).
PRIOR_ROWS, PRIOR_TOTAL = 3000, 9000


class TransferLearning(ModelGuided):
    name = "transfer"
    uses_prior = True

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "",
                 prior: Sequence[PriorTrials] = (), **options):
        super().__init__(space, rng, objective, **options)
        features, targets = self._map_prior(prior)
        self.prior_size = len(targets)
        self._prior_score: np.ndarray | None = None  # per legal point, lower is better
        if self.prior_size:
            model = BoostedTrees(seed=int(self.rng.integers(2**31)))
            model.fit(features, targets)
            self._prior_score = model.predict(self.space.legal_digits().astype(float))

    def _map_prior(self, prior: Sequence[PriorTrials]) -> tuple[np.ndarray, np.ndarray]:
        self._names = set(self.space.names)
        features, targets = [], []
        share = min(PRIOR_ROWS, PRIOR_TOTAL // max(1, len(prior)))
        positions = [{(type(v), v): n for n, v in enumerate(p.values)} for p in self.space.params]
        for source in prior:
            rows, values = [], []
            trials = source.trials
            if len(trials) > share:
                trials = [trials[int(i)] for i in np.sort(self.rng.choice(len(trials), share, replace=False))]
            for trial in trials:
                digits = self._digits_of(trial.config.as_dict(), positions)
                if digits is None:
                    continue  # a value or parameter this space does not have
                rows.append(digits)
                value = trial.value(self.objective)
                values.append(np.nan if value is None else value)
            if any(not np.isnan(v) for v in values):
                features.extend(rows)
                targets.extend(standardised_targets(np.array(values)))
        width = len(self.space.params)
        return np.array(features, dtype=float).reshape(-1, width), np.array(targets)

    def _digits_of(self, config: dict, positions: list[dict]) -> list[int] | None:
        """The digits of a prior configuration in this space, or None when it has a value or
        parameter this space lacks (a dictionary look-up per parameter: Space.index_of's
        checks cost most of a transfer search's start on large priors). Keys carry the type,
        so 1 and True stay distinct values."""
        if any(name not in self._names for name in config):
            return None
        digits = []
        for param, table in zip(self.space.params, positions):
            value = config.get(param.name, param.default)
            digit = table.get((type(value), value))
            if digit is None:
                return None
            digits.append(digit)
        return digits

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
