"""bench/model_budget.py's arithmetic: the total a budget reaches, and the trials after which
the model's total stays within a percentage of the long run's."""
from __future__ import annotations

from bench_scripts import load_bench

from edgetune.model.session import ModelRound
from edgetune.tuner import Workload

bench = load_bench("model_budget")
W = Workload("conv2d_s8", 4, "cortex-m55", (("h", 1),))


def rounds(*totals):
    return [ModelRound(n + 1, W, 4, 4 * (n + 1), 4 * len(totals), total, int(total is None))
            for n, total in enumerate(totals)]


def test_trials_to_within_is_the_first_round_inside_the_bound():
    log = rounds(None, 200.0, 150.0, 104.0, 102.0, 100.0)
    assert bench.trials_to_within(log, 3.0) == 20  # 102 <= 103, 104 is not
    assert bench.trials_to_within(log, 5.0) == 16
    assert bench.trials_to_within(log, 0.0) == 24
    assert bench.trials_to_within(rounds(None, None), 3.0) is None and bench.trials_to_within([], 3.0) is None


def test_total_at_a_budget_is_the_last_round_at_or_below_it():
    log = rounds(None, 200.0, 150.0, 100.0)
    assert bench.total_at(log, 8) == 200.0 and bench.total_at(log, 11) == 200.0 and bench.total_at(log, 16) == 100.0
    assert bench.total_at(log, 4) is None and bench.total_at(log, 3) is None
