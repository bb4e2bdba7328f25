"""Search strategies scored side by side with Kernel Tuner's, on recorded spaces.

Methodology: Willemsen et al., "A methodology for comparing optimization algorithms for
auto-tuning", FGCS 2024, as implemented in edgetune.tuner.scoring (read its docstring for
the exact definitions): per space, random search's expected best is computed analytically
from the sorted space; the budget is b(0.96), the evaluations random search needs to get
96% of the way from the median to the optimum; the score is the mean over the window
b(0.5)..b(0.96) of (strategy - random) / (optimum - random): 0 = random search, 1 = the
optimum at once.

Spaces (every *.json and *.json.gz in the --data folders): by default the small recorded
GPU spaces Kernel Tuner ships in its test suite (tests/data/kernel_tuner/), the brute-forced
pnpoly, GEMM and convolution spaces of the AutoTuningAssociation's benchmark hub
(bench/data/benchmark_hub/; both in Kernel Tuner's cache format, sources and licences in the
folders' READMEs), and our own whole-space recordings of matmul_s8, conv2d_s8, dwconv2d_s8
and fir_q15 on the emulated Cortex-M55 and Cortex-M4 (bench/spaces/, written by `edgetune
record`; shapes and command lines in its README), each kernel a family.

Kernel Tuner's strategies run in its simulation mode (`kernel_tuner.tune_cache`) on the
same spaces, with the same budget, in the same run; Kernel Tuner's strategies draw from
Python's and numpy's global random generators, which this script seeds per repeat (that
is Kernel Tuner's design, not ours). Transfer learning is given, as prior trials, the other
recorded spaces of the same kernel (other GPUs, other matmul shapes, the other Cortex-M;
also where their parameters differ, as Kernel Tuner's vector_add test spaces do: the
strategy maps what it can), their placement values mapped by their regions' roles (edgetune.value_roles); --by-name
also runs it with values mapped by name only, as before roles, labelled STRATEGY:by-name,
and each space's line says how many prior rows either way can use.

Spaces are grouped into families by kernel; the table gives each family's mean, the mean
over all spaces, and the held-out family's (--held-out: the family the strategies were not
tuned on), and per strategy the mean milliseconds of CPU time per proposal (the
strategy's own ask and tell; for Kernel Tuner's, its whole simulated run per evaluation).
--json writes the scores and timings (after every space, so a stopped run keeps what it
finished), --merge reads such files back into one table (e.g. Kernel Tuner's strategies and
ours run separately, or families run as separate jobs).

usage: .venv/bin/python bench/search.py [--repeats R] [--spaces SUBSTRING ...] [--max-budget N] [--data DIR ...]
                                        [--strategies NAME ...] [--kt-strategies NAME ...] [--no-kernel-tuner]
                                        [--held-out FAMILY] [--json FILE] [--merge FILE ...] [--by-name]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgetune.tuner import STRATEGIES, ValueRoles
from edgetune.tuner.recorded import RecordedSpace, as_prior, load_recorded, replay
from edgetune.tuner.scoring import Baseline, baseline, score
from edgetune.tuner.strategies.transfer import map_prior
from edgetune.value_roles import target_roles

HERE = Path(__file__).resolve().parent
DATA_FOLDERS = [HERE.parent / "tests" / "data" / "kernel_tuner", HERE / "data" / "benchmark_hub", HERE / "spaces"]
# The family no strategy's settings were tuned on (decisions were measured on the others).
HELD_OUT = "convolution"
# transfer+code ranks compiled code, which a replay gives it only from --rank-with files
# (bench/code_explore.py measures it); made without them it is `transfer`.
OURS = [name for name, cls in STRATEGIES.items() if name != "exhaustive" and not cls.uses_code]
KT_STRATEGIES = ["random_sample", "genetic_algorithm", "simulated_annealing", "greedy_ils", "mls", "dual_annealing",
                 "diff_evo", "pso", "firefly_algorithm"]


@dataclass(frozen=True)
class Bench:
    name: str
    recorded: RecordedSpace
    reference: Baseline
    kt_cache: Path | None
    roles: ValueRoles = ValueRoles()  # of the recording's target (none for a GPU's)


def short_name(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".json").replace("strategies_test_cache_", "kt_").replace(
        "matmul_s8-cortex-m55-", "m55_").replace("convolution_", "conv_").replace(
        "synthetic_fp32_cache_NVIDIA_RTX_A4000", "kt_synthetic").replace("_RTX_", "_").replace(
        "test_cache_file", "kt_test").replace("-cortex-m55-", "_m55_").replace("-cortex-m4-", "_m4_")


def kernel_tuner_cache(recorded: RecordedSpace, folder: Path) -> Path:
    """The recorded space as a Kernel Tuner cache file (what its simulation mode reads):
    'time' carries our objective, failures carry Kernel Tuner's error strings."""
    names = list(recorded.space.names)
    cache = {}
    for trial in recorded.trials.values():
        values = [trial.config[n] for n in names]
        value = trial.value(recorded.objective)
        error = "CompilationFailedConfig" if trial.outcome.value == "compile" else "RuntimeFailedConfig"
        cache[",".join(str(v) for v in values)] = {**dict(zip(names, values)), "time": error if value is None else value}
    data = {"device_name": recorded.target or "unknown", "kernel_name": recorded.kernel or "kernel",
            "problem_size": 1, "tune_params_keys": names,
            "tune_params": {p.name: list(p.values) for p in recorded.space.params}, "objective": "time",
            "cache": cache}
    path = folder / f"{len(list(folder.iterdir()))}.json"
    path.write_text(json.dumps(data))
    return path


def run_kernel_tuner(bench: Bench, strategy: str, seed: int) -> list[float | None]:
    from kernel_tuner import tune_cache

    random.seed(seed)
    np.random.seed(seed)  # Kernel Tuner's strategies use the global generators
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _env = tune_cache(str(bench.kt_cache), strategy=strategy, quiet=True, verbose=False,
                                   objective="time", strategy_options={"max_fevals": bench.reference.budget})
    names = list(bench.recorded.space.names)
    seen, trace = set(), []
    for result in results:
        if not result:
            continue
        key = tuple(str(result[n]) for n in names)
        if key in seen:
            continue  # a revisit served from Kernel Tuner's cache costs no evaluation
        seen.add(key)
        value = result.get("time")
        trace.append(float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None)
    return trace[: bench.reference.budget]


def space_files(folders: list[Path]) -> list[Path]:
    """The recorded spaces in `folders`, in a stable order."""
    return [path for folder in folders for path in sorted([*folder.glob("*.json"), *folder.glob("*.json.gz")])]


def load_benches(paths: list[Path], folder: Path) -> list[Bench]:
    benches = []
    for path in paths:
        name = short_name(path)
        recorded = load_recorded(path)
        reference = baseline(recorded.values(), recorded.failures)
        benches.append(Bench(name, recorded, reference, kernel_tuner_cache(recorded, folder),
                             target_roles(recorded.target)))
    return benches


def priors_for(bench: Bench, everything: list[Bench], by_role: bool = True):
    return [as_prior(other.recorded, other.roles if by_role else ValueRoles()) for other in everything
            if other is not bench and other.recorded.kernel == bench.recorded.kernel]


def usable_rows(bench: Bench, prior, roles: ValueRoles) -> int:
    """How many prior trials map into the bench's space (before any row limit)."""
    total = sum(len(p.trials) for p in prior)
    return len(map_prior(bench.recorded.space, bench.recorded.objective, prior, max(1, total), roles)[1])


@dataclass
class Table:
    """Scores per strategy and space, CPU seconds and proposals per strategy."""

    scores: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    proposals: dict[str, int] = field(default_factory=dict)

    def add(self, strategy: str, space: str, value: float, seconds: float, proposals: int) -> None:
        self.scores.setdefault(strategy, {}).setdefault(space, []).append(value)
        self.seconds[strategy] = self.seconds.get(strategy, 0.0) + seconds
        self.proposals[strategy] = self.proposals.get(strategy, 0) + proposals

    def merge(self, data: dict) -> None:
        """Add an earlier run's scores (runs split by strategy or by space add up)."""
        for strategy, spaces in data["scores"].items():
            self.scores.setdefault(strategy, {}).update(spaces)
            self.seconds[strategy] = self.seconds.get(strategy, 0.0) + data["seconds"][strategy]
            self.proposals[strategy] = self.proposals.get(strategy, 0) + data["proposals"][strategy]

    def as_json(self) -> dict:
        return {"scores": self.scores, "seconds": self.seconds, "proposals": self.proposals}


def run_ours(table: Table, bench: Bench, strategies: list[str], repeats: int, prior,
             roles: ValueRoles = ValueRoles(), suffix: str = "") -> None:
    for strategy in strategies:
        for seed in range(repeats):
            started = time.process_time()
            run = replay(bench.recorded, strategy, bench.reference.budget, seed, prior, roles=roles)
            table.add(strategy + suffix, bench.name, score(run.trace, bench.reference), time.process_time() - started,
                      len(run.trace))


def run_theirs(table: Table, bench: Bench, strategies: list[str], repeats: int) -> None:
    for strategy in strategies:
        for seed in range(repeats):
            started = time.process_time()
            try:
                trace = run_kernel_tuner(bench, strategy, seed)
            except Exception as exc:  # report the failure in the table, keep benchmarking
                print(f"#   kt:{strategy} on {bench.name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                break
            table.add(f"kt:{strategy}", bench.name, score(trace, bench.reference), time.process_time() - started,
                      len(trace))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--spaces", nargs="*", default=[], help="Only spaces whose name contains one of these.")
    parser.add_argument("--strategies", nargs="*", default=OURS)
    parser.add_argument("--kt-strategies", nargs="*", default=KT_STRATEGIES)
    parser.add_argument("--no-kernel-tuner", action="store_true")
    parser.add_argument("--by-name", action="store_true",
                        help="Also run the strategies that learn from prior trials with prior values mapped by "
                             "name only (no value roles), labelled STRATEGY:by-name.")
    parser.add_argument("--max-budget", type=int, default=0, help="Skip spaces whose budget exceeds this (0: none).")
    parser.add_argument("--held-out", default=HELD_OUT, help=f"The family reported as held out [{HELD_OUT}].")
    parser.add_argument("--json", help="Also write every score and timing to this file.")
    parser.add_argument("--merge", nargs="*", type=Path, default=[], metavar="FILE",
                        help="Add the scores of earlier --json files to the table.")
    parser.add_argument("--data", nargs="+", type=Path, default=DATA_FOLDERS, metavar="DIR",
                        help="Folders of recorded spaces (Kernel Tuner caches, edgetune recordings) "
                             "[default: tests/data/kernel_tuner bench/data/benchmark_hub bench/spaces].")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    missing = [path for path in [*args.data, *args.merge] if not path.exists()]
    if missing:
        print(f"bench/search.py: error: {missing[0]}: no such file or folder", file=sys.stderr)
        return 2
    if not args.no_kernel_tuner and args.kt_strategies and importlib.util.find_spec("kernel_tuner") is None:
        print("bench/search.py: error: Kernel Tuner's strategies need the bench extra "
              "(pip install -e '.[bench]'), or pass --no-kernel-tuner", file=sys.stderr)
        return 2
    # Imported before the clock starts: the first cost-model fit would otherwise pay for it.
    importlib.import_module("sklearn.ensemble")
    table = Table()
    for path in args.merge:
        table.merge(json.loads(path.read_text()))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edgetune-bench-") as tmp:
        everything = load_benches(space_files(args.data), Path(tmp))  # all of them: the others are transfer's prior
        benches = [b for b in everything if (not args.spaces or any(f in b.name for f in args.spaces))
                   and (not args.max_budget or b.reference.budget <= args.max_budget)]
        for bench in benches:
            ref = bench.reference
            prior, by_name = priors_for(bench, everything), priors_for(bench, everything, by_role=False)
            print(f"# {bench.name}: {len(bench.recorded.space)} configurations ({bench.recorded.failures} failed), "
                  f"budget {ref.budget}, window {ref.start}..{ref.end}, prior rows usable: "
                  f"{usable_rows(bench, prior, bench.roles)} by role, {usable_rows(bench, by_name, ValueRoles())} by name "
                  f"(of {sum(len(p.trials) for p in prior)})", file=sys.stderr, flush=True)
            run_ours(table, bench, args.strategies, args.repeats, prior, bench.roles)
            if args.by_name:
                learners = [name for name in args.strategies if STRATEGIES[name].uses_prior]
                run_ours(table, bench, learners, args.repeats, by_name, suffix=":by-name")
            if not args.no_kernel_tuner:
                run_theirs(table, bench, args.kt_strategies, args.repeats)
            if args.json:  # after every space, so a run stopped early keeps what it finished
                Path(args.json).write_text(json.dumps(table.as_json(), indent=1))
    print_table(table, benches, args.held_out)
    if args.json:
        Path(args.json).write_text(json.dumps(table.as_json(), indent=1))
    print(f"\n{time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


def family(bench: Bench) -> str:
    return bench.recorded.kernel or "?"


def print_table(table: Table, benches: list[Bench], held_out: str) -> None:
    spaces = [b.name for b in benches]
    families = list(dict.fromkeys(family(b) for b in benches))
    members = {f: [b.name for b in benches if family(b) == f] for f in families}
    held = [f for f in families if held_out and held_out in f]
    width = max(12, *(len(s) for s in spaces)) + 1 if spaces else 13
    print("Score per space: mean ± standard deviation over the repeats (0 = random search, 1 = optimum); "
          "family and overall means average the space means; ms/prop: CPU milliseconds per proposal.")
    head = "".join(f"{s:>{width}}" for s in spaces) + "".join(f"{f[:11]:>12}" for f in families)
    print(f"{'strategy':22}" + head + f"{'mean':>8}{'min':>7}{'held-out':>9}{'ms/prop':>9}")
    print(f"{'(budget)':22}" + "".join(f"{b.reference.budget:>{width}}" for b in benches))
    ranked = sorted(table.scores, key=lambda name: -overall(table.scores[name], spaces))
    for name in ranked:
        scores = table.scores[name]
        cells = [f"{np.mean(scores[s]):+.2f}±{np.std(scores[s]):.2f}" if scores.get(s) else "failed" for s in spaces]
        fam = [f"{overall(scores, members[f]):>+12.3f}" for f in families]
        lowest = min((np.mean(scores[s]) for s in spaces if scores.get(s)), default=float("nan"))
        kept = overall(scores, [s for f in held for s in members[f]]) if held else float("nan")
        per = 1000 * table.seconds.get(name, 0.0) / max(1, table.proposals.get(name, 0))
        print(f"{name:22}" + "".join(f"{c:>{width}}" for c in cells) + "".join(fam)
              + f"{overall(scores, spaces):>+8.3f}{lowest:>+7.2f}{kept:>+9.3f}{per:>9.2f}")
    if held:
        print(f"held-out family: {', '.join(held)} (no strategy setting was chosen on it)")


def overall(scores: dict[str, list[float]], spaces: list[str]) -> float:
    means = [np.mean(scores[s]) if scores.get(s) else np.nan for s in spaces]
    return float(np.nanmean(means)) if means and not all(np.isnan(means)) else float("nan")


if __name__ == "__main__":
    sys.exit(main())
