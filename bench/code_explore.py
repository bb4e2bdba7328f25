"""Does ranking by compiled code pay beside the default strategy? Evaluations and wall time.

For each recorded Cortex-M55 and Cortex-M4 space in bench/spaces/ (--targets), the code's
score is its code's estimated cost (edgetune.tuner.product_rank.estimates: the static
profile's instructions, else instructions per product; nothing learnt), or with
--forest the rank predicted by a ranker (edgetune.tuner.code_rank.CodeRanker) trained on every
*other* recorded space with features (leave-one-space-out), and, per seed, in the same run:
- `transfer` (the default) runs for the space's methodology budget (Willemsen et al. 2024,
  edgetune.tuner.scoring) with the other spaces of its kernel as priors, as bench/ranker.py
  gives them; its best and the evaluations it took to first reach it are noted;
- `transfer+code` (edgetune.tuner.code_explore.CodeRankedTransfer: the same model and seed;
  each plan is the best of the model's --shortlist x plan-size candidates by the sum of the
  model's and the code's ranks, each random proposal the best-ranked of --draws random
  points, while its gate is open: the ranker's fit on the kernel's other recorded spaces,
  tuner.product_rank.product_fit_among or tuner.code_rank.kernel_fit, is at least 0.8 on two
  spaces or more, or from --gate-trials trials on its rank correlation on this space's trials
  is at least --gate) runs until it reaches that best, or --cap x the budget (a miss counts
  the cap).
Saved: 1 - (evaluations of transfer+code) / (evaluations of transfer), summed over seeds.
Extra compiles: candidates compiled to be ranked and never run (the one that runs is
compiled for its run anyway, and the build cache keeps it).

--compare-ungated: each space's ranked run also without its gate, beside the same
`transfer` runs. --compare-static: the ranked run also with the static counts only (the
loop-structure counts mac_loop_* and copy_loop_*, edgetune.targets.code_features, left out).

Wall time (--wall): one compile (+ disassembly) of a variant and one QEMU trial of it
(compile included) are timed here, with an empty build cache, on matmul_s8 m=8,n=32,k=64
for the M55. A serial board's trial is modelled from the recording: --board-overhead
seconds (flash, reset, session: an assumed figure, the project has no board to time) plus
the `an547-serial` target's runs per trial of the trial's recorded instructions at its
clock, plus the compile. Each search's seconds to reach `transfer`'s best are its trials'
plus its extra compiles'.

usage: .venv/bin/python bench/code_explore.py [--seeds N] [--shortlist S] [--draws K] [--cap C] [--wall]
                                              [--board-overhead S] [--data FOLDER] [--gate RHO] [--gate-trials N]
                                              [--ungated | --compare-ungated] [--compare-static]
                                              [--targets T [T ...]] [--first-tune] [--forest]

--first-tune: no priors, as in a first live tune of a kernel (docs/code-ranking-live.md).
--compare-static measures the forest (its static counts only) beside the main row.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from edgetune.tuner.code_explore import (DEFAULT_DRAWS, DEFAULT_SHORTLIST, GATE_RHO, GATE_TRIALS, CodeRankedTransfer,
                                         KernelFit)
from edgetune.tuner.code_rank import CodeRanker, kernel_fit
from edgetune.tuner.product_rank import ProductRanker, product_fit_among
from edgetune.tuner.recorded import RecordedSpace, as_prior, load_recorded, replay, replay_trials
from edgetune.tuner.scoring import baseline
from edgetune.value_roles import target_roles

HERE = Path(__file__).resolve().parent
SCORED_TARGETS = ("cortex-m55", "cortex-m4")
WALL_KERNEL, WALL_SHAPE, WALL_TARGET = "matmul_s8", {"m": 8, "n": 32, "k": 64}, "cortex-m55"
BOARD_TARGET = "an547-serial"  # the serial board whose runs per trial and clock model a board's timing


@dataclass(frozen=True)
class SpaceFigures:
    budget: int
    plain: list[int]  # evaluations transfer took to first reach its best, per seed
    ranked: list[int]  # ... and transfer+code to reach that best (the cap where it never did)
    reached: int
    extra_compiles: list[int]
    plain_instructions: list[float]  # recorded instructions of the trials each run, per seed
    ranked_instructions: list[float]  # (a failed trial: 0)

    @property
    def saved(self) -> float:
        return 1.0 - sum(self.ranked) / sum(self.plain)


LOOP_FEATURE_PREFIXES = ("mac_loop", "copy_loop")


def static_only(space: RecordedSpace) -> RecordedSpace:
    """The space with its loop-structure features left out: what the ranker saw before them."""
    kept = {i: {name: v for name, v in feats.items() if not name.startswith(LOOP_FEATURE_PREFIXES)}
            for i, feats in space.features.items()}
    return replace(space, features=kept)


def first_reaching(trace: list[float | None], value: float) -> int | None:
    return next((n + 1 for n, v in enumerate(trace) if v is not None and v <= value), None)


def priors_for(space: RecordedSpace, everything: list[RecordedSpace]):
    return [as_prior(o, target_roles(o.target)) for o in everything
            if o is not space and o.kernel == space.kernel and o.space.names == space.space.names]


def measure(space: RecordedSpace, everything: list[RecordedSpace], seeds: int, shortlist: int, draws: int,
            cap: float, gate: float | None = GATE_RHO, gate_trials: int = GATE_TRIALS,
            with_priors: bool = True, forest: bool = False) -> SpaceFigures:
    if forest:
        ranker = CodeRanker.fit(everything, space)
        assert space.path not in ranker.sources  # leave-one-space-out
        fit = kernel_fit(everything, space)
        siblings = [s for s in everything if s is not space and s.kernel == space.kernel and s.target == space.target]
        predicted, evidence = ranker.predicted_ranks(space), None if fit is None else KernelFit(fit, len(siblings))
    else:
        others = [s for s in everything if s is not space]
        predicted = ProductRanker().predicted_ranks(space)
        evidence = product_fit_among(others, space.kernel, space.target)
    budget = baseline(space.values(), space.failures).budget
    prior, roles = priors_for(space, everything) if with_priors else [], target_roles(space.target)
    limit = max(budget, int(round(cap * budget)))
    plain_evals, ranked_evals, extra, reached, plain_work, ranked_work = [], [], [], 0, [], []
    for seed in range(seeds):
        plain = replay(space, "transfer", budget, seed, prior, roles=roles)
        search = CodeRankedTransfer(space.space, np.random.default_rng(seed), space.objective, prior=tuple(prior),
                                    budget=budget, roles=roles, shortlist=shortlist, draws=draws, gate=gate,
                                    gate_trials=gate_trials, kernel_fit=evidence,
                                    score=lambda c: predicted.get(space.space.index_of(c)))
        trials = replay_trials(space, search, limit, stop_at=plain.best)
        hit = first_reaching([t.value(space.objective) for t in trials], plain.best)
        reached += hit is not None
        plain_evals.append(first_reaching(list(plain.trace), plain.best))
        ranked_evals.append(hit if hit is not None else limit)
        run = {space.space.index_of(t.config) for t in trials}
        extra.append(len(search.scored_indices - run))
        plain_work.append(sum(v or 0.0 for v in plain.trace[:plain_evals[-1]]))
        ranked_work.append(sum(t.value(space.objective) or 0.0 for t in trials[:ranked_evals[-1]]))
    return SpaceFigures(budget, plain_evals, ranked_evals, reached, extra, plain_work, ranked_work)


def timed_costs() -> tuple[float, float]:
    """(seconds to compile and disassemble one variant, seconds of one QEMU trial), each the
    mean of a few, with an empty build cache and a scratch database."""
    from edgetune.api import tune
    from edgetune.codegen import get_kernel
    from edgetune.replay import code_features_of
    from edgetune.targets import get_target

    with tempfile.TemporaryDirectory(prefix="edgetune-bench-") as root:
        os.environ["EDGETUNE_CACHE"] = str(Path(root) / "cache")
        kernel, target = get_kernel(WALL_KERNEL), get_target(WALL_TARGET)
        space = kernel.space(target, dict(WALL_SHAPE))
        configs = [space.config_at(int(i)) for i in space.legal_indices()[:6]]
        started = time.perf_counter()
        found = code_features_of(kernel, target, dict(WALL_SHAPE), configs)
        compile_s = (time.perf_counter() - started) / max(len(found), 1)
        started = time.perf_counter()
        summary = tune(WALL_KERNEL, WALL_SHAPE, WALL_TARGET, budget=6, jobs=1, db=Path(root) / "t.db",
                       strategy="random")
        trial_s = (time.perf_counter() - started) / max(summary.new_trials, 1)
    return compile_s, trial_s


def short(space: RecordedSpace) -> str:
    return Path(space.path).name.removesuffix(".gz").removesuffix(".json")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--shortlist", type=int, default=DEFAULT_SHORTLIST,
                        help="Model candidates compiled and ranked per plan slot.")
    parser.add_argument("--draws", type=int, default=DEFAULT_DRAWS, help="Random points ranked per random slot.")
    parser.add_argument("--cap", type=float, default=3.0, help="transfer+code stops at this many times the budget.")
    parser.add_argument("--wall", action="store_true", help="Time a compile and a QEMU trial (builds and runs).")
    parser.add_argument("--board-overhead", type=float, default=3.0,
                        help="Assumed seconds per trial on a serial board besides the kernel's runs: flash, "
                             "reset, session [3].")
    parser.add_argument("--data", type=Path, default=HERE / "spaces")
    parser.add_argument("--gate", type=float, default=GATE_RHO,
                        help=f"Rank correlation of the ranking and the measured trials it needs to have a say [{GATE_RHO}].")
    parser.add_argument("--gate-trials", type=int, default=GATE_TRIALS,
                        help=f"Trials before the gate is first judged [{GATE_TRIALS}].")
    parser.add_argument("--ungated", action="store_true", help="The ranking always has a say (no gate).")
    parser.add_argument("--compare-ungated", action="store_true",
                        help="Also measure the ranking without its gate, beside the same `transfer` runs.")
    parser.add_argument("--targets", nargs="+", default=list(SCORED_TARGETS),
                        help="Score the recorded spaces of these targets [cortex-m55 cortex-m4].")
    parser.add_argument("--first-tune", action="store_true",
                        help="No priors: each space tuned as a first tune of its kernel is (as a live tune often is).")
    parser.add_argument("--compare-static", action="store_true",
                        help="Also measure the learnt ranker on static counts only (loop-structure features left out).")
    parser.add_argument("--forest", action="store_true",
                        help="Score by the learnt ranker (a forest over code features), not the code's estimated cost.")
    return parser.parse_args()


def board_seconds(evaluations: float, instructions: float, compiles: float, compile_s: float,
                  overhead_s: float, runs: int, clock_hz: float) -> float:
    """A serial board's wall time for a search: per trial the per-run overhead (flash, reset,
    session) and `runs` runs of the kernel at one instruction per cycle, plus every compile."""
    return evaluations * overhead_s + runs * instructions / clock_hz + compiles * compile_s


def print_wall(rows: list[tuple[str, SpaceFigures]], seeds: int, overhead_s: float) -> None:
    from edgetune.targets import get_target

    board = get_target(BOARD_TARGET)
    runs, clock = board.serial.runs, board.core.clock_hz
    compile_s, qemu_s = timed_costs()
    print(f"\n# wall time per run (mean over seeds): compile+disassemble {compile_s:.2f} s and a QEMU trial "
          f"{qemu_s:.2f} s (its compile included), timed now; a serial board's trial modelled as {overhead_s:.1f} s "
          f"overhead (assumed) + {runs} runs of the recorded instructions at {clock / 1e6:.0f} MHz ({BOARD_TARGET}), "
          f"plus its compile")
    print(f"{'space':<40}{'evals saved':>12}{'extra compiles':>15}{'QEMU s':>9}{'+code':>8}{'saved':>8}"
          f"{'board s':>9}{'+code':>8}{'saved':>8}")
    totals = np.zeros(4)
    for name, row in rows:
        plain_n, ranked_n = sum(row.plain) / seeds, sum(row.ranked) / seeds
        extra = sum(row.extra_compiles) / seeds
        qemu = (plain_n * qemu_s, ranked_n * qemu_s + extra * compile_s)
        board = (board_seconds(plain_n, sum(row.plain_instructions) / seeds, plain_n, compile_s, overhead_s, runs,
                               clock),
                 board_seconds(ranked_n, sum(row.ranked_instructions) / seeds, ranked_n + extra, compile_s,
                               overhead_s, runs, clock))
        totals += (*qemu, *board)
        print(f"{name:<40}{plain_n - ranked_n:>12.1f}{extra:>15.1f}{qemu[0]:>9.1f}{qemu[1]:>8.1f}"
              f"{1 - qemu[1] / qemu[0]:>+8.1%}{board[0]:>9.1f}{board[1]:>8.1f}{1 - board[1] / board[0]:>+8.1%}")
    print(f"{'all spaces':<40}{'':>27}{totals[0]:>9.1f}{totals[1]:>8.1f}{1 - totals[1] / totals[0]:>+8.1%}"
          f"{totals[2]:>9.1f}{totals[3]:>8.1f}{1 - totals[3] / totals[2]:>+8.1%}")


def main() -> int:
    args = parse_args()
    if not args.data.is_dir():
        print(f"bench/code_explore.py: error: {args.data}: no such folder", file=sys.stderr)
        return 2
    everything = [s for s in (load_recorded(p) for p in sorted(args.data.glob("*.json.gz"))) if s.features]
    scored = [s for s in everything if s.target in args.targets]
    print(f"# {len(scored)} scored spaces ({', '.join(args.targets)}), {len(everything)} with features; "
          f"scored by {'a forest learnt on the others' if args.forest else 'the code estimate (static profile)'}; "
          f"shortlist {args.shortlist}, "
          f"draws {args.draws}, "
          f"{args.seeds} seeds; evaluations to reach transfer's best (mean over seeds)")
    print(f"{'space':<40}{'budget':>7}{'transfer':>9}{'+code':>8}{'saved':>8}{'reached':>9}{'extra compiles/eval':>20}")
    rows, static_rows, ungated_rows = [], [], []
    static = [static_only(s) for s in everything] if args.compare_static else []
    for space in scored:
        if static:
            row = measure(static[everything.index(space)], static, args.seeds, args.shortlist, args.draws, args.cap,
                          forest=True)
            static_rows.append(row.saved)
            print(f"{short(space) + ' (static counts only)':<40}{row.budget:>7}{np.mean(row.plain):>9.1f}"
                  f"{np.mean(row.ranked):>8.1f}{row.saved:>+8.1%}{row.reached:>6}/{args.seeds:<2}", flush=True)
        if args.compare_ungated:
            row = measure(space, everything, args.seeds, args.shortlist, args.draws, args.cap, None,
                          forest=args.forest)
            ungated_rows.append(row.saved)
            print(f"{short(space) + ' (ungated)':<40}{row.budget:>7}{np.mean(row.plain):>9.1f}"
                  f"{np.mean(row.ranked):>8.1f}{row.saved:>+8.1%}{row.reached:>6}/{args.seeds:<2}", flush=True)
        row = measure(space, everything, args.seeds, args.shortlist, args.draws, args.cap,
                      None if args.ungated else args.gate, args.gate_trials, not args.first_tune, args.forest)
        rows.append((short(space), row))
        per_eval = sum(row.extra_compiles) / sum(row.ranked)
        print(f"{short(space):<40}{row.budget:>7}{np.mean(row.plain):>9.1f}{np.mean(row.ranked):>8.1f}"
              f"{row.saved:>+8.1%}{row.reached:>6}/{args.seeds:<2}{per_eval:>20.2f}", flush=True)
    print(f"{'mean over spaces':<40}{'':>24}{np.mean([r.saved for _, r in rows]):>+8.1%}")
    if ungated_rows:
        print(f"{'mean over spaces, ungated':<40}{'':>24}{np.mean(ungated_rows):>+8.1%}")
    if static_rows:
        print(f"{'mean over spaces, static counts only':<40}{'':>24}{np.mean(static_rows):>+8.1%}")
    print(f"{'pooled (all seeds and spaces)':<40}{'':>24}"
          f"{1 - sum(sum(r.ranked) for _, r in rows) / sum(sum(r.plain) for _, r in rows):>+8.1%}")
    if args.wall:
        print_wall(rows, args.seeds, args.board_overhead)
    return 0


if __name__ == "__main__":
    sys.exit(main())
