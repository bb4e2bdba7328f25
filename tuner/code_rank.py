"""Ranking candidates by features of their compiled code, learnt on other recorded spaces.

The idea is the NCS paper's (ranking compiled candidates with a model trained on related
tasks before measuring them): compiling is cached and cheap beside flashing and running a
board, so a search may compile a few candidates per evaluation and run the one whose code
looks best. The features are counts read from a variant's disassembly
(edgetune.targets.code_features: code size, loops, instruction classes of the innermost
loops); this module only sees them as numbers by name.

- `CodeRanker.fit(spaces, scored)` learns, from every recorded space with features except
  the one being scored (leave-one-space-out: the ranker never sees the answers it is scored
  on), how a configuration's code relates to its rank within its own space.
- `RankByCode(inner, score)` wraps any strategy: each proposal it makes is the best-ranked
  of `pool` proposals of the inner strategy; the others are kept in reserve and offered
  only once the inner strategy has nothing left, so no legal point is lost.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from edgetune.errors import EdgetuneError

from .recorded import RecordedSpace
from .space import Config
from .strategies.base import SearchStrategy
from .strategies.prior_trust import rank_agreement
from .trial import Trial

Features = Mapping[str, float]
# Inner proposals compiled per evaluation, at most: best of 4 saved the most evaluations
# with random search in bench/ranker.py (docs/search-priors.md, "Ranking by compiled code").
DEFAULT_POOL = 4


def feature_names(spaces: Iterable[RecordedSpace]) -> tuple[str, ...]:
    """The features every space holds: a space recorded before a feature existed would read
    as zeros for it, which the ranker would take for a fact about its code."""
    held = [{name for feats in space.features.values() for name in feats} for space in spaces]
    return tuple(sorted(set.intersection(*held))) if held else ()


def feature_matrix(rows: Sequence[Features], names: Sequence[str]) -> np.ndarray:
    """Per row: log counts centred on the rows' median (so shapes of different sizes compare),
    each hot_* count as a share of the innermost loops' instructions, and each mac_loop_*
    count (where recorded) as a share of the multiplying loops' instructions."""
    counts = _counts(rows, names)
    logs = np.log1p(counts)
    if len(rows):
        logs -= np.median(logs, axis=0)
    return np.hstack([logs, _shares(counts, names, "hot_"), _shares(counts, names, "mac_loop_")])


def _counts(rows: Sequence[Features], names: Sequence[str]) -> np.ndarray:
    return np.array([[float(row.get(name, 0.0)) for name in names] for row in rows], dtype=float).reshape(
        len(rows), len(names))


def _shares(counts: np.ndarray, names: Sequence[str], prefix: str) -> np.ndarray:
    """Each `<prefix><class>` column as a share of `<prefix>instructions` (or of their sum)."""
    total_name = f"{prefix}instructions"
    parts = [n for n, name in enumerate(names) if name.startswith(prefix) and name != total_name]
    total = counts[:, names.index(total_name)] if total_name in names else counts[:, parts].sum(axis=1)
    return counts[:, parts] / np.maximum(total, 1.0)[:, None]


def space_examples(space: RecordedSpace, names: Sequence[str]) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(indices, features, rank within the space: 0 best .. 1 worst) of its successful entries
    that have features."""
    indices = [i for i, t in sorted(space.trials.items())
               if i in space.features and t.value(space.objective) is not None]
    values = np.array([space.trials[i].value(space.objective) for i in indices], dtype=float)
    ranks = np.argsort(np.argsort(values, kind="stable"), kind="stable") / max(len(values) - 1, 1)
    return indices, feature_matrix([space.features[i] for i in indices], names), ranks


class CodeRankerError(EdgetuneError, ValueError):
    """No recorded space with features to learn from, or none in the space to rank."""


@dataclass(frozen=True)
class CodeRanker:
    names: tuple[str, ...]
    sources: tuple[str, ...]  # the paths of the spaces it learnt from
    model: object

    @classmethod
    def fit(cls, spaces: Sequence[RecordedSpace], scored: RecordedSpace, seed: int = 0) -> "CodeRanker":
        """Learn from every space with features except `scored` (compared by path and by identity)."""
        from sklearn.ensemble import RandomForestRegressor

        training = [s for s in spaces if s is not scored and s.path != scored.path and s.features]
        if not scored.features:
            raise CodeRankerError(f"{scored.path}: holds no code features to rank by (record it again with "
                                  f"`edgetune record`, or add them with bench/code_features.py)")
        if not training:
            raise CodeRankerError(f"{scored.path}: no other recorded space with code features to learn a ranker from")
        return cls.learn(training, feature_names([*training, scored]), seed)

    @classmethod
    def learn(cls, training: Sequence[RecordedSpace], names: Sequence[str] | None = None,
              seed: int = 0) -> "CodeRanker":
        """Learn from every space of `training` with features, on the features `names` (default:
        those every one of them holds): how a space no file records is ranked; `fit` learns
        for a recorded one, leaving it out."""
        from sklearn.ensemble import RandomForestRegressor

        training = [s for s in training if s.features]
        if not training:
            raise CodeRankerError("no recorded space with code features to learn a ranker from")
        names = tuple(names) if names is not None else feature_names(training)
        parts = [space_examples(space, names)[1:] for space in training]
        x = np.vstack([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        model = RandomForestRegressor(n_estimators=100, min_samples_leaf=3, random_state=seed, n_jobs=1).fit(x, y)
        return cls(names, tuple(s.path for s in training), model)

    def agreement(self, space: RecordedSpace) -> float:
        """How well this ranker ranks a space it did not learn from (agreement_on)."""
        return agreement_on(self.predicted_ranks(space), space)

    def predicted_ranks(self, space: RecordedSpace) -> dict[int, float]:
        """Predicted rank (0 best .. 1 worst) of every configuration of `space` with features."""
        indices = sorted(space.features)
        if not indices:
            return {}
        predicted = self.model.predict(feature_matrix([space.features[i] for i in indices], self.names))
        return dict(zip(indices, map(float, predicted)))


def agreement_on(predicted: Mapping[int, float], space: RecordedSpace) -> float:
    """Spearman's rho of scores by index (lower is better) and the recorded values of `space`
    at those indices (failures ranked last)."""
    indices = sorted(i for i in predicted if i in space.trials)
    values = [space.trials[i].value(space.objective) for i in indices]
    return rank_agreement(np.array([predicted[i] for i in indices]),
                          np.array([np.nan if v is None else v for v in values], dtype=float))


def kernel_fit(spaces: Sequence[RecordedSpace], scored: RecordedSpace, seed: int = 0) -> float | None:
    """How well a ranker learnt without `scored` ranks the other recorded spaces of its kernel
    on its target (other shapes), each in turn left out of the ranker's training as well: the
    lowest rank correlation, or None when the kernel has no other recorded space with
    features there. It is the evidence, before any trial of `scored` is measured, that the
    ranker knows the kernel's code (tuner.code_explore's gate)."""
    return kernel_fit_among([s for s in spaces if s is not scored and s.path != scored.path], scored.kernel,
                            seed, scored.target)


def kernel_fit_among(spaces: Sequence[RecordedSpace], kernel: str, seed: int = 0, target: str = "") -> float | None:
    """kernel_fit over `spaces` (the space being ranked already left out): each recorded space
    of `kernel` ranked by a ranker learnt from the others, the lowest rank correlation; None
    when `spaces` hold none of the kernel with features. Given a `target`, only the kernel's
    spaces on that target are judged: the code a target's compiler writes for a kernel is
    what the ranker must know there (a Cortex-M4 matmul_s8 space, ranked by a ranker that knew
    the M55's, fitted 0.57 where the M55's own fitted 0.97-0.98; conv2d_s8's M55 space fits
    0.84, its M4 space 0.60)."""
    siblings = [s for s in spaces if s.kernel == kernel and s.features and (not target or s.target == target)]
    rest = list(spaces)
    fits = []
    for sibling in siblings:
        try:
            fits.append(CodeRanker.fit(rest, sibling, seed).agreement(sibling))
        except CodeRankerError:
            continue  # nothing else to learn from: no evidence from this sibling
    return min(fits) if fits else None


class RankByCode:
    """A strategy wrapper that ranks the inner strategy's proposals by their predicted rank
    `score(config)` (lower is better; None where there is none: it did not compile, or has no
    features, and then ranks behind every scored candidate). At most `pool` inner proposals
    are compiled and scored per proposal made. Two ways to use the scores:
    - `keep=None`: each proposal is the best-scored of `pool` inner proposals;
    - `keep=q`: the inner proposals are taken in the inner strategy's order, skipping those
      scored worse than the q-quantile of every score seen so far (sure losers); when all
      `pool` fail that test the best-scored of them is taken.
    Candidates passed over go to a reserve, offered best first once the inner strategy has
    nothing left, so no legal point is lost. Ties keep the inner strategy's order: the
    wrapper is as deterministic as `inner`."""

    def __init__(self, inner: SearchStrategy, score: Callable[[Config], float | None], pool: int = DEFAULT_POOL,
                 keep: float | None = None):
        if pool < 1:
            raise ValueError("pool must be at least 1")
        if keep is not None and not 0.0 < keep <= 1.0:
            raise ValueError("keep must lie in (0, 1]")
        self.inner, self.score, self.pool, self.keep = inner, score, pool, keep
        self._reserve: list[tuple[float, int, Config]] = []  # passed over, never run yet
        self._seen: list[float] = []  # every finite score, for keep's quantile
        self._order = 0
        self.scored = 0  # candidates compiled and scored so far

    @property
    def space(self):
        return self.inner.space

    def _ranked(self, config: Config) -> tuple[float, int, Config]:
        value = self.score(config)
        self._order += 1
        self.scored += 1
        if value is not None:
            self._seen.append(float(value))
        return (np.inf if value is None else float(value), self._order, config)

    def _one(self) -> Config | None:
        candidates: list[tuple[float, int, Config]] = []
        while len(candidates) < self.pool:
            fresh = self.inner.ask(1)
            if not fresh:
                break
            candidate = self._ranked(fresh[0])
            if self.keep is not None and self._seen and candidate[0] <= np.quantile(self._seen, self.keep):
                self._reserve.extend(candidates)
                return candidate[2]
            candidates.append(candidate)
        if not candidates:  # the inner strategy is done: the reserve, best first
            if not self._reserve:
                return None
            self._reserve.sort(key=lambda item: item[:2])
            return self._reserve.pop(0)[2]
        candidates.sort(key=lambda item: item[:2])
        self._reserve.extend(candidates[1:])
        return candidates[0][2]

    def ask(self, n: int) -> list[Config]:
        proposals = []
        while len(proposals) < n:
            config = self._one()
            if config is None:
                break
            proposals.append(config)
        return proposals

    def tell(self, trials: Iterable[Trial]) -> None:
        trials = list(trials)
        self._drop(trial.config for trial in trials)  # measured elsewhere: never offered again
        self.inner.tell(trials)

    def skip(self, configs: Iterable[Config]) -> None:
        configs = list(configs)
        self._drop(configs)
        self.inner.skip(configs)

    def _drop(self, configs: Iterable[Config]) -> None:
        keys = {c.key() for c in configs}
        self._reserve = [item for item in self._reserve if item[2].key() not in keys]
