"""Scoring a search strategy on a recorded space, after Willemsen et al., "A methodology
for comparing optimization algorithms for auto-tuning", FGCS 2024.

Per space, the reference is random search without replacement, whose expected best value
after k evaluations is computed exactly from the sorted space (no sampling). With the
median and the optimum of the space's successful values, the target at fraction p is the
value p of the way from the median to the optimum:

    target(p) = median + p * (optimum - median)

and b(p) is the smallest k at which random search's expected best reaches target(p). The
budget window runs from b(0.5) to b(0.96) inclusive; a strategy's score is the mean over
the window of

    (strategy_best(k) - random_best(k)) / (optimum - random_best(k))

so 0 is random search, 1 is the optimum from the first evaluation, negative is worse than
random. A failed evaluation (and "nothing found yet") counts as the space's worst successful
value, for the strategy and for the random-search reference alike. Objectives are minimised.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

P_START = 0.5
P_END = 0.96


@dataclass(frozen=True)
class Baseline:
    """Random search's expected best per evaluation count (index k-1), and the window."""

    expected: np.ndarray
    optimum: float
    median: float
    worst: float
    start: int  # first evaluation count of the window (1-based)
    end: int  # last evaluation count of the window (inclusive)

    @property
    def budget(self) -> int:
        return self.end


def random_expected_best(values: Sequence[float], failures: int, k: int) -> float:
    """Expected best (lowest) value after k draws without replacement from the space's
    successful `values` plus `failures` failed points (which count as the worst value)."""
    ordered = np.sort(np.asarray(values, dtype=float))
    ranked = np.concatenate([ordered, np.full(failures, ordered[-1])])
    total = len(ranked)
    if not 1 <= k <= total:
        raise ValueError(f"k={k} outside 1..{total}")
    # S_i = P(best rank >= i) = C(total-i+1, k) / C(total, k); consecutive ratios are
    # (total-i+1-k) / (total-i+1), so S is a running product (no huge binomials).
    i = np.arange(1, total)
    factors = np.clip((total - i + 1 - k) / (total - i + 1), 0.0, None)
    survival = np.cumprod(factors)  # S_2 .. S_total
    return float(ranked[0] + np.sum(np.diff(ranked) * survival))


def baseline(values: Sequence[float], failures: int, p_start: float = P_START, p_end: float = P_END) -> Baseline:
    values = np.asarray(values, dtype=float)
    optimum, median, worst = float(values.min()), float(np.median(values)), float(values.max())
    total = len(values) + failures
    targets = [median + p * (optimum - median) for p in (p_start, p_end)]
    expected: list[float] = []
    reached: list[int] = []
    for k in range(1, total + 1):
        expected.append(random_expected_best(values, failures, k))
        while len(reached) < 2 and expected[-1] <= targets[len(reached)] + 1e-12 * abs(targets[len(reached)]):
            reached.append(k)
        if len(reached) == 2:
            break
    return Baseline(np.array(expected), optimum, median, worst, reached[0], reached[1])


def best_so_far(trace: Sequence[float | None], length: int, fill: float) -> np.ndarray:
    """The best value after each of `length` evaluations; a trace that ended early (space
    exhausted) keeps its last best."""
    out = np.empty(length)
    best = fill
    for k in range(length):
        if k < len(trace) and trace[k] is not None:
            best = min(best, float(trace[k]))
        out[k] = best
    return out


def score(trace: Sequence[float | None], reference: Baseline) -> float:
    found = best_so_far(trace, reference.end, reference.worst)
    window = slice(reference.start - 1, reference.end)
    random = reference.expected[window]
    gap = reference.optimum - random
    # Where random search's expectation is already the optimum the window point says nothing.
    useful = gap < 0
    if not useful.any():
        return 0.0
    return float(np.mean((found[window][useful] - random[useful]) / gap[useful]))
