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
pnpoly spaces of the AutoTuningAssociation's benchmark hub (bench/data/benchmark_hub/; both
in Kernel Tuner's cache format, sources and licences in the folders' READMEs), and our own
whole-space recordings of matmul_s8 on the emulated Cortex-M55 (bench/spaces/, written by
`edgetune record`). The hub's larger GEMM and convolution spaces are a --data folder away.

Kernel Tuner's strategies run in its simulation mode (`kernel_tuner.tune_cache`) on the
same spaces, with the same budget, in the same run; Kernel Tuner's strategies draw from
Python's and numpy's global random generators, which this script seeds per repeat (that
is Kernel Tuner's design, not ours). Transfer learning is given, as prior trials, the other
recorded spaces of the same kernel (other GPUs, other matmul shapes).

usage: .venv/bin/python bench/search.py [--repeats R] [--spaces SUBSTRING ...] [--large] [--data DIR ...]
                                        [--strategies NAME ...] [--kt-strategies NAME ...] [--no-kernel-tuner]
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgetune.tuner import STRATEGIES
from edgetune.tuner.recorded import RecordedSpace, as_prior, load_recorded, replay
from edgetune.tuner.scoring import Baseline, baseline, score

HERE = Path(__file__).resolve().parent
DATA_FOLDERS = [HERE.parent / "tests" / "data" / "kernel_tuner", HERE / "data" / "benchmark_hub", HERE / "spaces"]
# Spaces whose budget b(0.96) exceeds this many evaluations (the GEMM spaces, pnpoly on the
# TITAN RTX: 900-2,500) take most of an hour for all strategies on two cores: --large adds them.
LARGE_BUDGET = 800
OURS = [name for name in STRATEGIES if name != "exhaustive"]
KT_STRATEGIES = ["random_sample", "genetic_algorithm", "simulated_annealing", "greedy_ils", "mls", "dual_annealing",
                 "diff_evo", "pso", "firefly_algorithm"]


@dataclass(frozen=True)
class Bench:
    name: str
    recorded: RecordedSpace
    reference: Baseline
    kt_cache: Path | None


def short_name(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".json").replace("strategies_test_cache_", "kt_").replace(
        "synthetic_fp32_cache_NVIDIA_RTX_A4000", "kt_synthetic").replace("test_cache_file", "kt_test")


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
        benches.append(Bench(name, recorded, reference, kernel_tuner_cache(recorded, folder)))
    return benches


def priors_for(bench: Bench, everything: list[Bench]):
    return [as_prior(other.recorded) for other in everything
            if other is not bench and other.recorded.kernel == bench.recorded.kernel
            and other.recorded.space.names == bench.recorded.space.names]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--spaces", nargs="*", default=[], help="Only spaces whose name contains one of these.")
    parser.add_argument("--strategies", nargs="*", default=OURS)
    parser.add_argument("--kt-strategies", nargs="*", default=KT_STRATEGIES)
    parser.add_argument("--no-kernel-tuner", action="store_true")
    parser.add_argument("--large", action="store_true", help=f"Include spaces with budgets over {LARGE_BUDGET}.")
    parser.add_argument("--json", help="Also write every score to this file.")
    parser.add_argument("--data", nargs="+", type=Path, default=DATA_FOLDERS, metavar="DIR",
                        help="Folders of recorded spaces (Kernel Tuner caches, edgetune recordings) "
                             "[default: tests/data/kernel_tuner bench/data/benchmark_hub bench/spaces].")
    args = parser.parse_args()
    missing = [folder for folder in args.data if not folder.is_dir()]
    if missing:
        print(f"bench/search.py: error: --data {missing[0]}: no such folder", file=sys.stderr)
        return 2
    if not args.no_kernel_tuner and importlib.util.find_spec("kernel_tuner") is None:
        print("bench/search.py: error: Kernel Tuner's strategies need the bench extra "
              "(pip install -e '.[bench]'), or pass --no-kernel-tuner", file=sys.stderr)
        return 2
    paths = space_files(args.data)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edgetune-bench-") as tmp:
        everything = load_benches(paths, Path(tmp))  # all of them: the others are transfer's prior
        benches = [b for b in everything if (not args.spaces or any(f in b.name for f in args.spaces))
                   and (args.large or b.reference.budget <= LARGE_BUDGET)]
        rows: dict[str, dict[str, list[float]]] = {}
        for bench in benches:
            ref = bench.reference
            print(f"# {bench.name}: {len(bench.recorded.space)} configurations ({bench.recorded.failures} failed), "
                  f"budget {ref.budget}, window {ref.start}..{ref.end}", file=sys.stderr, flush=True)
            prior = priors_for(bench, everything)
            for strategy in args.strategies:
                rows.setdefault(strategy, {})[bench.name] = [
                    score(replay(bench.recorded, strategy, ref.budget, seed, prior).trace, ref)
                    for seed in range(args.repeats)]
            if args.no_kernel_tuner:
                continue
            for strategy in args.kt_strategies:
                scores = []
                for seed in range(args.repeats):
                    try:
                        scores.append(score(run_kernel_tuner(bench, strategy, seed), ref))
                    except Exception as exc:  # report the failure in the table, keep benchmarking
                        print(f"#   kt:{strategy} on {bench.name} failed: {type(exc).__name__}: {exc}",
                              file=sys.stderr)
                        break
                rows.setdefault(f"kt:{strategy}", {})[bench.name] = scores
    print_table(rows, [b.name for b in benches], [b.reference for b in benches], args.repeats)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\n{time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


def print_table(rows: dict[str, dict[str, list[float]]], spaces: list[str], refs: list[Baseline], repeats: int) -> None:
    width = max(12, *(len(s) for s in spaces)) + 1 if spaces else 13
    print(f"Score per space: mean ± standard deviation over {repeats} repeats (0 = random search, 1 = optimum); "
          f"'mean' averages the space means.")
    print(f"{'strategy':22}" + "".join(f"{s:>{width}}" for s in spaces) + f"{'mean':>8}")
    print(f"{'(budget)':22}" + "".join(f"{r.budget:>{width}}" for r in refs))
    ranked = sorted(rows, key=lambda name: -overall(rows[name], spaces))
    for name in ranked:
        cells = []
        for space in spaces:
            scores = rows[name].get(space, [])
            cells.append(f"{np.mean(scores):+.2f}±{np.std(scores):.2f}" if len(scores) == repeats else "failed")
        print(f"{name:22}" + "".join(f"{c:>{width}}" for c in cells) + f"{overall(rows[name], spaces):>+8.3f}")


def overall(scores: dict[str, list[float]], spaces: list[str]) -> float:
    means = [np.mean(scores[s]) if scores.get(s) else np.nan for s in spaces]
    return float(np.nanmean(means)) if not all(np.isnan(means)) else float("nan")


if __name__ == "__main__":
    sys.exit(main())
