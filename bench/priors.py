"""Leave-one-space-out: the default strategy with and without priors, before and after.

Every recorded space bench/search.py reads (Kernel Tuner's four test spaces, the benchmark
hub's twelve GPU spaces, our own Cortex-M recordings in bench/spaces/) is scored after
Willemsen et al. (FGCS 2024; edgetune.tuner.scoring: 0 = random search, 1 = the optimum at
once) at its own budget b(0.96). The default strategy learns, as its priors, from the other
spaces of the same kernel only, never from the space being scored (leave-one-space-out),
with their values mapped by role as bench/search.py maps them. Each variant runs the same
seeds in the same process:

- `VARIANT` with the priors, `VARIANT:no-prior` without them (the plain cost model);
- `before`: the default as it was before issue 30 goal 3 (no check of the priors' fit, the
  fixed initial design, the first plan the prior's best points in order); `after`: the
  default as it is; `in-order`: the default with its first plan in the prior's order.

The table gives per space the mean score over the seeds, then the mean and the lowest
space per variant, and the spaces where the priors lowered the score by more than noise
(two standard errors of the difference of the two means over the seeds).

usage: .venv/bin/python bench/priors.py [--repeats R] [--spaces SUBSTRING ...] [--variants before after in-order]
                                        [--inverted] [--skip-no-prior | --no-prior-only] [--json FILE] [--merge FILE ...]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from search import DATA_FOLDERS, load_benches, priors_for, space_files

from edgetune.tuner.recorded import timed_replay
from edgetune.tuner.scoring import score
from edgetune.tuner import PriorTrials, Trial
from edgetune.tuner.strategies import DEFAULT_STRATEGY, STRATEGIES

# What each variant passes the default strategy (none: its defaults, the behaviour shipped).
VARIANTS: dict[str, dict] = {"after": {}, "before": {"check_priors": False, "small_budget_design": False,
                                                        "spread_first_plan": False, "same_names_only": True},
                              "in-order": {"spread_first_plan": False}}


def run_variant(bench, options: dict, prior, seed: int) -> tuple[float, float, int]:
    """(score, CPU seconds of the strategy, proposals) of one seeded replay."""
    cls = STRATEGIES[DEFAULT_STRATEGY]
    options = dict(options)
    if options.pop("same_names_only", False):  # the priors bench/search.py gave before
        prior = [p for p in prior if p.trials and tuple(k for k, _ in p.trials[0].config.items) == bench.recorded.space.names]
    started = time.process_time()
    search = cls(bench.recorded.space, np.random.default_rng(seed), bench.recorded.objective, prior=tuple(prior),
                 budget=bench.reference.budget, roles=bench.roles, **options)
    timed = timed_replay(bench.recorded, search, bench.reference.budget)
    seconds = time.process_time() - started
    trace = [trial.value(bench.recorded.objective) for trial, _ in timed]
    return score(trace, bench.reference), seconds, len(trace)


def inverted(prior: list[PriorTrials]) -> list[PriorTrials]:
    """The priors with every value v replaced by 1/v: the same configurations ranked the
    other way round (an adversary); failures stay failures."""
    def flip(trial: Trial) -> Trial:
        return replace(trial, values={k: 1.0 / v if isinstance(v, (int, float)) and v else v
                                      for k, v in trial.values.items()})
    return [replace(p, trials=tuple(flip(t) for t in p.trials)) for p in prior]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--spaces", nargs="*", default=[], help="Only spaces whose name contains one of these.")
    parser.add_argument("--variants", nargs="+", default=["before", "after"], choices=sorted(VARIANTS))
    parser.add_argument("--json", help="Also write every score to this file.")
    parser.add_argument("--merge", nargs="+", type=Path, default=[], metavar="FILE",
                        help="Print one table of earlier --json files instead of running.")
    parser.add_argument("--skip-no-prior", action="store_true",
                        help="Run the variants with their priors only (the runs without come from another "
                             "--json file, merged with --merge).")
    parser.add_argument("--no-prior-only", action="store_true", help="Run the variants without priors only.")
    parser.add_argument("--inverted", action="store_true",
                        help="Also run each variant with its priors' ranking inverted (VARIANT:inverted).")
    return parser.parse_args()


def merged(files: list[Path]) -> int:
    """One table of the scores of earlier --json runs (e.g. families run as separate jobs)."""
    scores: dict[str, dict[str, list[float]]] = {}
    cost: dict[str, list[float]] = {}
    alone: set[str] = set()
    for path in files:
        data = json.loads(path.read_text())
        alone.update(data.get("alone", []))
        for label, spaces in data["scores"].items():
            scores.setdefault(label, {}).update(spaces)
        for label, (seconds, proposals) in data["cost"].items():
            spent = cost.setdefault(label, [0.0, 0])
            spent[0] += seconds
            spent[1] += proposals
    variants = [v for v in ("before", "after") if v in scores]
    spaces = list(dict.fromkeys(space for label in scores for space in scores[label]))
    print_table(scores, cost, alone, spaces, variants)
    return 0


def main() -> int:
    args = parse_args()
    if args.merge:
        return merged(args.merge)
    scores: dict[str, dict[str, list[float]]] = {}
    cost: dict[str, list[float]] = {}
    alone: set[str] = set()  # spaces without priors
    with tempfile.TemporaryDirectory(prefix="edgetune-priors-") as tmp:
        everything = load_benches(space_files(DATA_FOLDERS), Path(tmp))
        benches = [b for b in everything if not args.spaces or any(f in b.name for f in args.spaces)]
        for bench in benches:
            prior = priors_for(bench, everything)
            if not prior:
                alone.add(bench.name)
            for variant in args.variants:
                runs = [] if args.no_prior_only else [(variant, prior)]
                runs += [] if args.skip_no_prior else [(f"{variant}:no-prior", [])]
                if args.inverted:
                    runs.append((f"{variant}:inverted", inverted(prior)))
                for label, given in runs:
                    if label != variant and not prior:
                        continue  # the same search as with its (absent) priors
                    for seed in range(args.repeats):
                        value, seconds, proposals = run_variant(bench, VARIANTS[variant], given, seed)
                        scores.setdefault(label, {}).setdefault(bench.name, []).append(value)
                        spent = cost.setdefault(label, [0.0, 0])
                        spent[0] += seconds
                        spent[1] += proposals
            line = "  ".join(f"{label} {np.mean(s[bench.name]):+.2f}" for label, s in scores.items()
                             if bench.name in s)
            print(f"# {bench.name} (budget {bench.reference.budget}, prior sources {len(prior)}): {line}",
                  file=sys.stderr, flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps({"scores": scores, "cost": cost, "alone": sorted(alone)}, indent=1))
    print_table(scores, cost, alone, [b.name for b in benches], args.variants)
    return 0


def cell(scores: dict, alone: set, label: str, space: str) -> list[float]:
    """A label's scores on a space ([] when not run); a space without priors (`alone`) ran
    its variant once, which stands for all its labels (the same search)."""
    found = scores.get(label, {}).get(space)
    if not found and space in alone:
        found = scores.get(label.split(":")[0], {}).get(space)
    return found or []


def hurt(with_: list[float], without: list[float]) -> bool:
    """Priors lowered the score by more than noise: by more than two standard errors of the
    difference of the two means."""
    if len(with_) < 2 or len(without) < 2:
        return False
    noise = 2 * np.sqrt(np.var(with_, ddof=1) / len(with_) + np.var(without, ddof=1) / len(without))
    return float(np.mean(without) - np.mean(with_)) > noise


def print_table(scores: dict, cost: dict, alone: set, spaces: list[str], variants: list[str]) -> None:
    print("Score per space: mean ± standard deviation over the seeds (0 = random search, 1 = optimum); "
          "n/a: not run. Mean and lowest space over the spaces that every column but :inverted has "
          "(how many in brackets).")
    labels = [*variants, *(f"{v}:no-prior" for v in variants),
              *(f"{v}:inverted" for v in variants if f"{v}:inverted" in scores)]
    print(f"{'space':30}" + "".join(f"{label:>18}" for label in labels) + "  priors lower the score (beyond noise)")
    for space in spaces:
        cells = [cell(scores, alone, label, space) for label in labels]
        text = [f"{np.mean(c):+.2f}±{np.std(c):.2f}" if c else "n/a" for c in cells]
        harmed = [label for label in labels if ":no-prior" not in label and hurt(
            cell(scores, alone, label, space), cell(scores, alone, f"{label.split(':')[0]}:no-prior", space))]
        print(f"{space:30}" + "".join(f"{c:>18}" for c in text) + "  " + (", ".join(harmed) or "-"))
    main = [label for label in labels if ":inverted" not in label]
    complete = [s for s in spaces if all(cell(scores, alone, label, s) for label in main)]
    for what, reduce in (("mean", np.mean), ("lowest", np.min)):
        row = []
        for label in labels:
            values = [np.mean(c) for c in (cell(scores, alone, label, s) for s in complete) if c]
            row.append(f"{reduce(values):+.3f} ({len(values)})" if values else "n/a")
        print(f"{what:30}" + "".join(f"{value:>18}" for value in row))
    per = [1000 * cost[label][0] / max(1, cost[label][1]) if label in cost else float("nan") for label in labels]
    print(f"{'CPU ms per proposal':30}" + "".join(f"{value:>18.2f}" for value in per))


if __name__ == "__main__":
    sys.exit(main())
