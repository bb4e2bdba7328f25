"""Priors that check themselves: each prior workload's score of this space is weighed by how
well it ranked the trials measured here so far, and left out when it ranks them no better
than chance.

A prior is a guess that another workload of the kernel (another shape, another target)
ranks configurations as this one does. Often it does (the same kernel on four GPUs ranks
its convolution variants alike), sometimes not (a different memory system reverses which
tiles win), and a search that follows a wrong prior spends its first evaluations on the
worst points and teaches its model from them. So every prior source gets its own score of
the space, and before each plan the search compares each source's score with the values it
has measured: the rank correlation (Spearman's rho, failures ranked last) is the source's
weight, a source at rho <= 0 weighs nothing, and with every source at zero the search goes
on as if it had no priors (the plain cost model) until a source ranks better than chance
again. Until `MIN_TRIALS` of this space's own trials are in, every usable source weighs the
same: there is nothing yet to judge them by.
"""
from __future__ import annotations

import numpy as np

# Own trials (successes and failures) before the sources are judged: fewer give a rank
# correlation too noisy to act on (with 3 points rho takes only the values -1, -0.5, 0.5 and 1).
MIN_TRIALS = 4


def ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (0-based; tied values share the mean of their positions)."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    starts = np.cumsum(counts) - counts
    return (starts + (counts - 1) / 2)[inverse.reshape(-1)]


def rank_agreement(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Spearman's rho between a prior's scores and the measured values of the same points
    (lower is better in both; NaN = failed, ranked after every success). 0 when either side
    has no spread: a constant says nothing about order."""
    measured = np.where(np.isnan(measured), np.inf, measured)
    if len(measured) < 2 or np.ptp(predicted) == 0 or np.all(measured == measured[0]):
        return 0.0
    a, b = ranks(predicted), ranks(measured)
    a, b = a - a.mean(), b - b.mean()
    spread = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / spread) if spread > 0 else 0.0


def source_weights(scores_at_told: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Weight per prior source (rows of `scores_at_told`, one column per told trial, in the
    order of `measured`): 1 each before MIN_TRIALS trials, then max(0, rho)."""
    count = scores_at_told.shape[0]
    if len(measured) < MIN_TRIALS:
        return np.ones(count)
    return np.array([max(0.0, rank_agreement(row, measured)) for row in scores_at_told])


def blend(scores: np.ndarray, weights: np.ndarray) -> np.ndarray | None:
    """The weighted mean of the sources' scores of every legal point, or None when no
    source weighs anything (the search then runs without priors)."""
    total = weights.sum()
    if total <= 0:
        return None
    return (weights[:, None] * scores).sum(axis=0) / total
