"""A 10^7-point tuning space in use: its legal points found by walking it (tuner/legal.py),
in milliseconds and megabytes, and the strategies' proposals on it, in milliseconds.

The space: seven parameters of ten values each, four constraints that declare what they
read (151,250 legal points). The reference, measured in the same run: the same space with
five values per parameter (78,125 points) listed the old way, every point checked, against
its walk. Memory is the peak traced by tracemalloc during the walk (Python and numpy
allocations). Proposals: each strategy asks batches of 8 and is told a made-up value (the
sum of the digits), --rounds times; the figure is CPU time per proposed point (process time,
robust to a shared machine), scikit-learn imported before.

usage: .venv/bin/python bench/space_walk.py [--rounds N]
"""
from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from edgetune.tuner import Constraint, Outcome, PriorTrials, Space, Trial, choice, make_strategy
from edgetune.tuner.legal import WalkCount, legal_digits
from edgetune.tuner.strategies.model import BoostedTrees

OBJECTIVE = "instructions"
STRATEGIES = ("random", "annealing", "genetic", "model", "transfer")


def synthetic(values: int) -> Space:
    """Seven parameters of `values` values each (10: a 10^7-point product)."""
    return Space([choice(name, range(values)) for name in "abcdefg"], [
        Constraint("a at most b", lambda c: c["a"] <= c["b"], reads=("a", "b")),
        Constraint("c and d add up to the largest value", lambda c: c["c"] + c["d"] == values - 1, reads=("c", "d")),
        Constraint("e even", lambda c: c["e"] % 2 == 0, reads=("e",)),
        Constraint("f at least g", lambda c: c["f"] >= c["g"], reads=("f", "g")),
    ])


def walk(space: Space) -> tuple[int, float, float, WalkCount]:
    """(legal points, CPU ms, peak MiB, what the walk touched)."""
    count = WalkCount()
    tracemalloc.start()
    started = time.process_time()
    try:
        digits = legal_digits(space.params, space.constraints, count)
        seconds = time.process_time() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return len(digits), seconds * 1e3, peak / 2**20, count


def listing(space: Space) -> tuple[int, float]:
    """(legal points, CPU ms) of the old way: every point of the product checked."""
    started = time.process_time()
    legal = sum(1 for index in range(space.cartesian_size) if space.is_legal(space.config_at(index)))
    return legal, (time.process_time() - started) * 1e3


def value(config) -> float:
    return float(1 + sum(v for _, v in config.items))


def proposal_ms(name: str, space: Space, rounds: int) -> float:
    """CPU ms per proposed point of `rounds` batches of 8, told as they come."""
    prior = ()
    if name == "transfer":  # trials of another workload: a random 2,000 of the legal points
        rng = np.random.default_rng(1)
        picks = rng.choice(space.legal_indices(), 2000, replace=False)
        prior = (PriorTrials("other", tuple(Trial(space.config_at(int(i)), Outcome.OK,
                                                  {OBJECTIVE: value(space.config_at(int(i)))}) for i in picks)),)
    strategy = make_strategy(name, space, np.random.default_rng(0), OBJECTIVE, prior, budget=8 * rounds)
    proposed, started = 0, time.process_time()
    for _ in range(rounds):
        batch = strategy.ask(8)
        proposed += len(batch)
        strategy.tell([Trial(config, Outcome.OK, {OBJECTIVE: value(config)}) for config in batch])
    return (time.process_time() - started) * 1e3 / max(1, proposed)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="batches of 8 asked of each strategy")
    options = parser.parse_args(argv)
    small = synthetic(5)
    listed, listed_ms = listing(small)
    points, small_ms, small_mib, _ = walk(synthetic(5))
    assert points == listed  # the walk finds what the listing finds
    print(f"reference, {small.cartesian_size:,}-point space: listed (every point checked) {listed_ms:8.1f} ms, "
          f"walked {small_ms:6.1f} ms, {small_mib:5.1f} MiB; {listed:,} legal")
    space = synthetic(10)
    points, ms, mib, count = walk(space)
    print(f"{space.cartesian_size:,}-point space: walked {ms:6.1f} ms, {mib:5.1f} MiB at the peak, {points:,} legal, "
          f"{count.rows:,} prefixes grown")
    space.legal_indices()  # kept by the space, as a search keeps it
    BoostedTrees(seed=0)  # scikit-learn imported before the clock starts (a second, once per process)
    for name in STRATEGIES:
        print(f"  {name:10} {proposal_ms(name, space, options.rounds):8.2f} ms per proposed point", flush=True)


if __name__ == "__main__":
    main()
