"""Cost-model guided search (as AutoTVM and Ansor do): a model trained online on the
trials so far scores many candidate configurations, and only the most promising are
measured.

The model is gradient-boosted regression trees (scikit-learn's GradientBoostingRegressor)
on the configuration's digits (the position of each
parameter's value), predicting the log of the objective; a small bootstrap ensemble gives a
spread, and candidates are ranked by a lower confidence bound. Failed trials train the model too,
as worse than the worst success, so it learns where failures are. Each refit plans a batch
of proposals: the best predicted fresh points, plus a few random ones (epsilon-greedy) so a
wrong model cannot trap the search.
"""
from __future__ import annotations

import hashlib
import sys
import threading
from collections import OrderedDict

import numpy as np

from ..space import Space
from .base import SearchStrategy


class BoostedTrees:
    """A small wrapper so the search depends on fit/predict, not on a library's API."""

    def __init__(self, seed: int):
        # Imported here, not at module top: scikit-learn takes most of a second to import
        # and every `edgetune` command imports the strategy table.
        skip_scipy_docstring_notes()
        from sklearn.ensemble import GradientBoostingRegressor

        # Exact (not histogram) trees: on tens to hundreds of trials a fit takes ~10 ms.
        # Small leaves because the training sets are small; no subsampling, the seed only
        # breaks ties.
        self._model = GradientBoostingRegressor(n_estimators=40, learning_rate=0.25, max_leaf_nodes=15,
                                                min_samples_leaf=2, random_state=seed)

    def fit(self, features: np.ndarray, targets: np.ndarray, weights: np.ndarray | None = None) -> None:
        # Unit weights go as None: checking a weight vector costs more than a small tree.
        if weights is not None and np.all(weights == 1.0):
            weights = None
        with quick_sklearn():
            self._model.fit(features, targets, sample_weight=weights)

    def predict(self, features: np.ndarray) -> np.ndarray:
        with quick_sklearn():
            return self._model.predict(features)


class HistogramTrees(BoostedTrees):
    """The same boosting on histograms, for thousands of rows (the prior model): features
    are parameter-value positions, so a histogram of up to 255 bins splits exactly where
    the exact trees do, at a sixth of the cost on 9,000 rows. One thread: OpenMP's threads
    on a machine already busy building and running kernels cost ten times their work."""

    def __init__(self, seed: int):
        skip_scipy_docstring_notes()
        from sklearn.ensemble import HistGradientBoostingRegressor

        self._model = HistGradientBoostingRegressor(max_iter=40, learning_rate=0.25, max_leaf_nodes=15,
                                                    min_samples_leaf=2, early_stopping=False, random_state=seed)

    def fit(self, features: np.ndarray, targets: np.ndarray, weights: np.ndarray | None = None) -> None:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="openmp"):
            super().fit(features, targets, weights)

    def predict(self, features: np.ndarray) -> np.ndarray:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="openmp"):
            return super().predict(features)


# Predictions of fitted models by what they were fitted on and asked about, most recent last.
# A fit is a pure function of its model kind, seed, rows and weights, so the same inputs
# need no second fit: `model tune` opens a layer's search again each round, and the new
# search replays the old one's asks (tuner/resume.py) and scores the same prior set again
# while no other layer has stored trials; on fc_autoencoder_ad 15 of 34 fits were repeats.
_FITTED: OrderedDict[bytes, np.ndarray] = OrderedDict()
_FITTED_LOCK = threading.Lock()  # searches may run in threads (the fits themselves run unlocked)
# Predictions are one float per point asked: 16 scores of the 151,250 legal points of the
# 10^7-point space in bench/space_walk.py take 19 MB.
FITTED_CACHE_SIZE = 16


def fitted_predictions(kind: type[BoostedTrees], seed: int, features: np.ndarray, targets: np.ndarray,
                       weights: np.ndarray | None, points: np.ndarray) -> np.ndarray:
    """`kind(seed)` fitted on (features, targets, weights), its predictions of `points`
    (read-only): fitted and predicted once per distinct content."""
    if weights is not None and np.all(weights == 1.0):
        weights = None  # as BoostedTrees.fit takes them: the same fit
    key = _content_key(kind.__qualname__, seed, features, targets, weights, points)
    with _FITTED_LOCK:
        predicted = _FITTED.get(key)
        if predicted is not None:
            _FITTED.move_to_end(key)
            return predicted
    model = kind(seed=seed)
    model.fit(features, targets, weights)
    predicted = model.predict(points)
    predicted.setflags(write=False)  # shared by every caller that asks the same
    with _FITTED_LOCK:
        _FITTED[key] = predicted
        while len(_FITTED) > FITTED_CACHE_SIZE:
            _FITTED.popitem(last=False)
    return predicted


def _content_key(kind: str, seed: int, *arrays: np.ndarray | None) -> bytes:
    digest = hashlib.blake2b(f"{kind}/{seed}".encode(), digest_size=20)
    for array in arrays:
        if array is None:
            digest.update(b"none")
            continue
        array = np.ascontiguousarray(array)
        digest.update(f"/{array.dtype.str}{array.shape}/".encode())
        digest.update(array.data)
    return digest.digest()


def forget_fits() -> None:
    """Empty the cache of fitted predictions (tests that count fits)."""
    with _FITTED_LOCK:
        _FITTED.clear()


def skip_scipy_docstring_notes() -> None:
    """scikit-learn imports scipy.stats, and SciPy (1.15 on) rewrites the docstring of each
    of its ~470 array-API functions as it imports them, parsing each one to add a note of
    the array libraries it supports: 0.15 to 0.4 s of CPU, up to a tenth of edgetune's own
    in a default `model tune` of a small model, for text nobody reads here. Before scipy.stats
    is first imported, its note-adding decorator is given a document class that leaves a
    docstring as it is; the functions, and what they compute, are untouched. A SciPy without
    that decorator (older, or renamed) is left alone."""
    if "scipy.stats" in sys.modules:
        return
    try:
        from scipy._lib import _array_api
    except ImportError:
        return
    if isinstance(getattr(_array_api, "FunctionDoc", None), type):
        _array_api.FunctionDoc = _DocstringAsItIs


class _DocstringAsItIs:
    """The part of SciPy's FunctionDoc its array-API decorator uses, doing nothing: any
    section reads as an empty list, and the text is a signature line (which the decorator
    strips) followed by the docstring as it was."""

    def __init__(self, function, *_args, **_kwargs):
        self._doc = getattr(function, "__doc__", None) or ""

    def __getitem__(self, _section: str) -> list:
        return []

    def __str__(self) -> str:
        return "\n" + self._doc


def quick_sklearn():
    """scikit-learn without its per-call checks of parameters and finiteness (our inputs
    are built here, finite by construction): most of a small fit's time was those checks."""
    import sklearn

    return sklearn.config_context(skip_parameter_validation=True, assume_finite=True)


def log_scale(values: np.ndarray) -> np.ndarray:
    """Runtimes and instruction counts span orders of magnitude: learn their logarithm."""
    return np.log(values) if len(values) and values.min() > 0 else values


class ModelGuided(SearchStrategy):
    name = "model"

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "", initial: int | None = None,
                 batch: int = 8, candidates: int = 4096, epsilon: float = 0.2, ensemble: int = 3,
                 optimism: float = 1.5):
        super().__init__(space, rng, objective)
        # A small initial design whatever the budget (tuning budgets can be a few dozen
        # evaluations): one point per parameter that varies, at least four, at most ten,
        # spread over the legal set; the model takes over from then on.
        varying = sum(len(p.values) > 1 for p in space.params)
        self.initial = initial if initial is not None else min(10, max(4, varying))
        self.batch = batch
        self.candidates = candidates
        self.epsilon = epsilon
        self.ensemble = ensemble
        self.optimism = optimism
        self._plan: list[int] = []

    def _next(self) -> int | None:
        while self._plan:
            index = self._plan.pop(0)
            if self._is_fresh(index):
                return index
        if not self._ready():
            return self._space_filling()
        self._plan = self._make_plan()
        return self._plan.pop(0) if self._plan else None

    def _ready(self) -> bool:
        return sum(v is not None for v in self.results.values()) >= min(self.initial, self._legal_count())

    @property
    def designing(self) -> bool:
        """Whether proposals may still come from the space-filling design."""
        return not self._ready()

    # --- the model ---------------------------------------------------------------------
    def _training_data(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # Told trials outside the legal set (an older space's, resumed) teach nothing here.
        indices = [i for i in self.results if self.space.is_legal_index(i)]
        values = np.array([self.results[i] if self.results[i] is not None else np.nan for i in indices])
        targets = standardised_targets(values)
        positions = np.array([self.space.legal_position(i) for i in indices], dtype=np.int64)
        return self._features(positions), targets, np.ones(len(indices))

    def _features(self, positions: np.ndarray) -> np.ndarray:
        """What the model sees of the legal points at these positions: their digits."""
        return self.space.legal_digits()[positions].astype(float)

    # Whether a plan gives one of its slots to the best point's most promising untried
    # categorical switch (_switch_points): off here, TransferLearning's small budgets use it.
    switches = False

    def _make_plan(self) -> list[int]:
        candidates = self._candidates()
        if len(candidates) == 0:
            return []
        switches = self._switch_points() if self.switches else np.zeros(0, dtype=np.int64)
        candidates = np.unique(np.concatenate([candidates, switches])) if len(switches) else candidates
        predicted = self._acquisition(self._features(candidates))
        # Shuffle before a stable sort so ties are broken by the seed, not by index order.
        order = self.rng.permutation(len(candidates))
        ranked = order[np.argsort(predicted[order], kind="stable")]
        # Refits get rarer as trials accumulate (each new trial moves the model less):
        # a plan is at least `batch` long and at least a sixth of the trials so far (a tenth
        # scored the same on the training spaces and cost a third more time per proposal).
        size = max(self.batch, len(self.results) // 6)
        best_first = [int(self.space.legal_indices()[candidates[r]]) for r in ranked[:size * self.shortlist]]
        plan = self._chosen(best_first, size)
        for slot in range(len(plan)):
            if self.rng.random() < self.epsilon:
                random_point = self._random_fresh()
                if random_point is not None:
                    plan[slot] = random_point
        if len(switches) and len(plan) >= 2:
            legal = self.space.legal_indices()
            score = dict(zip(candidates.tolist(), predicted.tolist()))
            open_ = [int(p) for p in switches if int(legal[p]) not in plan]
            if open_:
                plan[-1] = int(legal[min(open_, key=lambda p: (score[p], p))])
        return plan

    def _switch_points(self) -> np.ndarray:
        """Positions (in legal_indices()) of the best point's untried categorical switches:
        for each unordered parameter (a kernel's path, its compiler, a layout) and each of its
        other values, the fresh legal point with that value nearest the best point, where no
        trial so far has that point's combination of unordered values. Trees on value
        positions rank a value, or a combination of values, that no trial has by its
        neighbours' positions, i.e. not at all: DS-CNN's depthwise layer met the Helium
        pixel-tiled path (25% faster than any other) at its 83rd trial, its pointwise layer
        the direct Helium loop at its 58th. One such switch per plan (the model's favourite)
        tries the best point's context before the model has learnt to rank it."""
        if self.best_index is None:
            return np.zeros(0, dtype=np.int64)
        unordered = [axis for axis, param in enumerate(self.space.params) if not param.is_ordered]
        digits = self.space.legal_digits()
        best = self.space.digits(self.best_index)
        tried = {tuple(self.space.digits(index)[axis] for axis in unordered) for index in self.results}
        near = self.space.distances(best)
        near[~self._fresh] = np.inf
        found = []
        for axis in unordered:
            column = digits[:, axis]
            for value in np.unique(column[self._fresh]):
                if value == best[axis]:
                    continue
                position = int(np.argmin(np.where(column == value, near, np.inf)))  # first of equals
                if tuple(int(digits[position, other]) for other in unordered) not in tried:
                    found.append(position)
        return np.unique(np.array(found, dtype=np.int64))

    # Candidates ranked per plan slot: 1 here; a subclass that re-ranks the model's best by
    # another measure (tuner/code_explore.py: by compiled code) shortlists more.
    shortlist = 1

    def _chosen(self, best_first: list[int], size: int) -> list[int]:
        """The plan, from the model's `size * shortlist` best candidates, best first."""
        return best_first[:size]

    def _acquisition(self, points: np.ndarray) -> np.ndarray:
        """Lower confidence bound: the mean prediction of models fitted on bootstrap resamples
        of the trials, minus `optimism` times their spread. Regions the trials barely cover
        disagree across resamples, so they get tried before the search settles on one basin."""
        features, targets, weights = self._training_data()
        predictions = []
        for member in range(self.ensemble):
            rows = (np.arange(len(targets)) if member == 0
                    else self.rng.integers(len(targets), size=len(targets)))
            seed = int(self.rng.integers(2**31))
            predictions.append(fitted_predictions(BoostedTrees, seed, features[rows], targets[rows], weights[rows],
                                                  points))
        predictions = np.array(predictions)
        return predictions.mean(axis=0) - self.optimism * predictions.std(axis=0)

    def _candidates(self) -> np.ndarray:
        """Positions (in legal_indices()) of the fresh points the model scores: all of them
        in a small space, else a random sample plus the fresh neighbours of the best points."""
        fresh = np.flatnonzero(self._fresh)
        if len(fresh) <= self.candidates:
            return fresh
        sample = self.rng.choice(fresh, size=self.candidates, replace=False)
        near = [self.space.legal_position(n) for i, _ in self._ranked_results()[:8] for n in self._fresh_neighbours(i)]
        return np.unique(np.concatenate([sample, np.asarray(near, dtype=np.int64)]))


def standardised_targets(values: np.ndarray) -> np.ndarray:
    """Log values scaled to mean 0 and spread 1 (so spaces of different scale can share a
    model); NaN (failed) becomes one unit worse than the worst success."""
    ok = ~np.isnan(values)
    out = np.zeros(len(values))
    if ok.any():
        logged = log_scale(values[ok])
        spread = logged.std() or 1.0
        out[ok] = (logged - logged.mean()) / spread
        out[~ok] = out[ok].max() + 1.0
    return out
