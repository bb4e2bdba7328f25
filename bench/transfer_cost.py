"""What a `transfer` proposal costs: CPU milliseconds per proposal (the strategy's own ask
and tell, prior fit included) on the benchmark hub's GEMM space of the RTX 3060 laptop
(10,000 configurations) with five prior spaces: GEMM on the three other GPUs, and a random
half of two of them (under other names, so that they count as separate workloads).

"cold" clears the prior-score cache before each search (a process's first search on this
prior set); "warm" leaves it (the repeats, layers or resumed runs of one process that share
a prior set).

usage: .venv/bin/python bench/transfer_cost.py [--budgets 14 100 1006] [--repeats 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from edgetune.tuner.recorded import as_prior, load_recorded
from edgetune.tuner.strategies import PriorTrials, make_strategy, transfer
from edgetune.tuner.strategies.model import BoostedTrees, HistogramTrees

HUB = Path(__file__).resolve().parent / "data" / "benchmark_hub"


def five_priors(others) -> list[PriorTrials]:
    priors = [as_prior(other) for other in others]
    rng = np.random.default_rng(0)
    for n, other in enumerate(others[:2]):
        trials = list(other.trials.values())
        half = rng.choice(len(trials), len(trials) // 2, replace=False)
        priors.append(PriorTrials(f"half {n} of {other.target}", tuple(trials[int(i)] for i in half)))
    return priors


def cost(target, priors, budget: int, seed: int, cold: bool) -> float:
    if cold:
        transfer._PRIOR_CACHE.clear()
    started = time.process_time()
    search = make_strategy("transfer", target.space, np.random.default_rng(seed), target.objective, priors,
                           budget=budget)
    for _ in range(budget):
        search.tell([target.trial(search.ask(1)[0])])
    return 1000 * (time.process_time() - started) / budget


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", nargs="+", type=int, default=[14, 100, 1006])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    target = load_recorded(HUB / "gemm_RTX_3060_laptop.json.gz")
    priors = five_priors([load_recorded(HUB / f"gemm_RTX_{gpu}.json.gz") for gpu in ("2080_Ti", "3090", "Titan")])
    for model in (BoostedTrees, HistogramTrees):  # imports and first calls before the clock starts
        model(0).fit(np.zeros((4, 2)), np.arange(4.0))
    print(f"transfer on {len(target.space)} configurations, {len(priors)} prior spaces "
          f"({sum(len(p.trials) for p in priors)} trials); CPU ms per proposal, mean of {args.repeats} seeds")
    print(f"{'budget':>8}{'cold':>8}{'warm':>8}")
    for budget in args.budgets:
        cold = [cost(target, priors, budget, seed, True) for seed in range(args.repeats)]
        warm = [cost(target, priors, budget, seed, False) for seed in range(args.repeats)]
        print(f"{budget:>8}{np.mean(cold):>8.2f}{np.mean(warm):>8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
