"""Transfer learning: warm-start the cost model with trials of the same kernel on other
workloads (other shapes, other targets), in the spirit of transfer-learning autotuners such
as ytopt's and the Neural Configuration Scorer line of work.

Each earlier workload's values are standardised on their own (a 4x4 and a 64x64 matmul
differ in scale, not necessarily in which tiles are good), mapped into this space by
parameter values (points whose values this space lacks are dropped), and trained on
together with this workload's own trials, which weigh at least as much as all prior trials
together. With usable prior data the very first proposals already come from the model.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..space import Space, SpaceError
from .base import PriorTrials
from .model import ModelGuided, standardised_targets


class TransferLearning(ModelGuided):
    name = "transfer"
    uses_prior = True

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "",
                 prior: Sequence[PriorTrials] = (), **options):
        super().__init__(space, rng, objective, **options)
        self._prior_features, self._prior_targets = self._map_prior(prior)

    @property
    def prior_size(self) -> int:
        return len(self._prior_targets)

    def _map_prior(self, prior: Sequence[PriorTrials]) -> tuple[np.ndarray, np.ndarray]:
        features, targets = [], []
        for source in prior:
            rows, values = [], []
            for trial in source.trials:
                try:
                    index = self.space.index_of(trial.config)
                except SpaceError:
                    continue  # a value or parameter this space does not have
                rows.append(self.space.digits(index))
                value = trial.value(self.objective)
                values.append(np.nan if value is None else value)
            if any(not np.isnan(v) for v in values):
                features.extend(rows)
                targets.extend(standardised_targets(np.array(values)))
        width = len(self.space.params)
        return np.array(features, dtype=float).reshape(-1, width), np.array(targets)

    def _ready(self) -> bool:
        return self.prior_size > 0 or super()._ready()

    def _training_data(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        features, targets, weights = super()._training_data()
        if not self.prior_size:
            return features, targets, weights
        own_weight = max(1.0, self.prior_size / max(1, len(targets)))
        return (np.concatenate([self._prior_features, features]),
                np.concatenate([self._prior_targets, targets]),
                np.concatenate([np.ones(self.prior_size), weights * own_weight]))
