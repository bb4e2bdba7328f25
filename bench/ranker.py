"""Evaluations saved by ranking candidates by their compiled code, on our recorded M55 spaces.

For each recorded Cortex-M55 space in bench/spaces/ with code features: a ranker
(edgetune.tuner.code_rank.CodeRanker) is trained on every *other* recorded space with
features (the other M55 spaces and the Cortex-M4 ones: leave-one-space-out, never the
scored space), and a strategy is replayed with and without the wrapper (RankByCode: each
evaluation runs the best-ranked of --pool inner proposals or, with --keep Q, the next inner
proposal not ranked worse than the Q-quantile of those seen). Per seed: the plain strategy
runs for the space's methodology budget (Willemsen et al. 2024, edgetune.tuner.scoring) and
its best value is noted with the evaluations it took to first reach it; the ranked run goes
on until it reaches that value (or --cap x the budget). The figure is evaluations saved at
equal best: 1 - (ranked evaluations) / (plain evaluations), summed over seeds, where a ranked
run that never reached the value counts its whole cap. Compiles are not evaluations: the
ranked run compiles about --pool candidates per evaluation (cached, and on a serial board
far cheaper than a flash-and-run); the table gives them too.

Results and what they say: docs/search-priors.md, "Ranking by compiled code".

usage: .venv/bin/python bench/ranker.py [--seeds N] [--pool K] [--keep Q] [--strategies NAME ...] [--cap C]
                                        [--data DIR]
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgetune.tuner.strategies import DEFAULT_STRATEGY
from edgetune.tuner.code_rank import DEFAULT_POOL, CodeRanker, RankByCode
from edgetune.tuner.recorded import RecordedSpace, as_prior, load_recorded, replay, replay_strategy, replay_trials
from edgetune.tuner.scoring import baseline

HERE = Path(__file__).resolve().parent
SCORED_TARGET = "cortex-m55"


@dataclass(frozen=True)
class Run:
    trace: list[float | None]
    compiles: int  # candidates compiled to be ranked (a plain run: one per evaluation)


def replay_search(recorded: RecordedSpace, search, budget: int, stop_at: float | None = None) -> Run:
    """tuner/recorded's replay loop, with the stop rule this figure needs (stop at the plain
    run's best, not only at the budget), keeping the search to count the ranker's compiles."""
    trials = replay_trials(recorded, search, budget, stop_at)
    return Run([t.value(recorded.objective) for t in trials], getattr(search, "scored", len(trials)))


def first_reaching(trace: list[float | None], value: float) -> int | None:
    return next((n + 1 for n, v in enumerate(trace) if v is not None and v <= value), None)


def priors_for(space: RecordedSpace, everything: list[RecordedSpace]):
    """As bench/search.py gives transfer learning: the other spaces of the same kernel."""
    return [as_prior(o) for o in everything
            if o is not space and o.kernel == space.kernel and o.space.names == space.space.names]


def measure(space: RecordedSpace, everything: list[RecordedSpace], strategy: str, seeds: int, pool: int,
            cap: float, keep: float | None) -> dict:
    ranker = CodeRanker.fit(everything, space)
    assert space.path not in ranker.sources  # leave-one-space-out
    predicted = ranker.predicted_ranks(space)
    budget = baseline(space.values(), space.failures).budget
    prior = priors_for(space, everything)
    plain_evals, ranked_evals, reached, compiles = [], [], 0, []
    for seed in range(seeds):
        plain = replay(space, strategy, budget, seed, prior)
        # The ranked run's inner strategy is the plain one (same seed, told the same budget):
        # the ranking is the only difference; the cap only lets it run on until it reaches plain.best.
        inner = replay_strategy(space, strategy, budget, seed, prior)
        wrapped = RankByCode(inner, lambda c: predicted.get(space.space.index_of(c)), pool, keep)
        limit = max(budget, int(round(cap * budget)))
        ranked = replay_search(space, wrapped, limit, stop_at=plain.best)
        hit = first_reaching(ranked.trace, plain.best)
        reached += hit is not None
        plain_evals.append(first_reaching(list(plain.trace), plain.best))
        ranked_evals.append(hit if hit is not None else limit)
        compiles.append(ranked.compiles / max(len(ranked.trace), 1))
    return {"budget": budget, "plain": float(np.mean(plain_evals)), "ranked": float(np.mean(ranked_evals)),
            "saved": 1.0 - sum(ranked_evals) / sum(plain_evals), "reached": reached,
            "compiles_per_eval": float(np.mean(compiles)), "trained_on": len(ranker.sources)}


def short(space: RecordedSpace) -> str:
    return Path(space.path).name.removesuffix(".gz").removesuffix(".json")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--pool", type=int, default=DEFAULT_POOL, help="Inner proposals ranked per evaluation.")
    parser.add_argument("--strategies", nargs="*", default=["random", DEFAULT_STRATEGY])
    parser.add_argument("--keep", type=float, default=None,
                        help="Skip inner proposals scored worse than this quantile of the scores seen "
                             "[default: run the best-scored of each pool].")
    parser.add_argument("--cap", type=float, default=3.0, help="Ranked runs stop at this many times the budget.")
    parser.add_argument("--data", type=Path, default=HERE / "spaces")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if not args.data.is_dir():
        print(f"bench/ranker.py: error: {args.data}: no such folder", file=sys.stderr)
        return 2
    everything = [load_recorded(p) for p in sorted(args.data.glob("*.json.gz"))]
    everything = [s for s in everything if s.features]
    scored = [s for s in everything if s.target == SCORED_TARGET]
    print(f"# {len(scored)} scored {SCORED_TARGET} spaces, {len(everything)} with features; "
          f"pool {args.pool}, keep {args.keep or 'best of pool'}, {args.seeds} seeds, evaluations to reach the plain run's best (mean over seeds)")
    print(f"{'strategy':<10}{'space':<40}{'budget':>7}{'plain':>8}{'ranked':>8}{'saved':>8}{'reached':>9}"
          f"{'compiles/eval':>14}")
    for strategy in args.strategies:
        saved = []
        for space in scored:
            row = measure(space, everything, strategy, args.seeds, args.pool, args.cap, args.keep)
            saved.append(row["saved"])
            print(f"{strategy:<10}{short(space):<40}{row['budget']:>7}{row['plain']:>8.1f}{row['ranked']:>8.1f}"
                  f"{row['saved']:>+8.1%}{row['reached']:>6}/{args.seeds:<2}{row['compiles_per_eval']:>14.1f}",
                  flush=True)
        print(f"{strategy:<10}{'mean over spaces':<40}{'':>23}{np.mean(saved):>+8.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
