"""The benchmark's scoring (Willemsen et al. 2024): random search's expectation is exact."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgetune.tuner.scoring import baseline, best_so_far, random_expected_best, score


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_random_expectation_matches_enumeration(k):
    values = [5.0, 1.0, 3.0, 3.0, 9.0]
    failures = 2  # count as the worst value, 9
    pool = values + [9.0] * failures
    draws = [min(c) for c in itertools.combinations(pool, k)]
    assert random_expected_best(values, failures, k) == pytest.approx(np.mean(draws))


def test_random_expectation_ends_at_the_optimum():
    values = np.random.default_rng(0).random(50) + 1
    assert random_expected_best(values, 3, 53) == pytest.approx(values.min())
    assert random_expected_best(values, 0, 1) == pytest.approx(values.mean())


def test_window_brackets_the_targets():
    values = np.linspace(1.0, 100.0, 400)
    ref = baseline(values, failures=0)
    median, optimum = np.median(values), values.min()
    assert ref.expected[ref.start - 1] <= median + 0.5 * (optimum - median)
    assert ref.expected[ref.start - 2] > median + 0.5 * (optimum - median)
    assert ref.expected[ref.end - 1] <= median + 0.96 * (optimum - median)
    assert ref.expected[ref.end - 2] > median + 0.96 * (optimum - median)
    assert 1 < ref.start < ref.end


def test_scores_of_optimum_random_and_worst():
    values = np.linspace(1.0, 100.0, 400)
    ref = baseline(values, failures=0)
    assert score([1.0], ref) == pytest.approx(1.0)  # the optimum first: 1
    assert score([100.0] * ref.end, ref) < 0  # never better than the worst: below random
    # A trace that follows random search's expectation exactly scores 0.
    assert score(list(ref.expected), ref) == pytest.approx(0.0, abs=1e-12)


def test_best_so_far_fills_failures_and_short_traces():
    assert list(best_so_far([None, 5.0, 7.0, 2.0], 6, fill=10.0)) == [10.0, 5.0, 5.0, 2.0, 2.0, 2.0]
