"""Evaluations per minute on cortex-m55: the parallel pipeline against a plain
one-at-a-time loop over the same configurations, measured in the same run.

Both tune matmul_s8 with the same seed and budget into fresh databases (so they measure the
same configurations); the one-at-a-time loop is `--jobs 1`, the pipeline `--jobs N`. Each is
run `--rounds` times, alternating, after one warm-up run that fills the harness cache.
Core use = CPU time of edgetune and its children (compilers, QEMU) / (wall time x cores).
Every timed run starts with an empty cache of compiled variants (it would otherwise turn
the later rounds into pure cache hits). A last pipeline run over the same configurations
with the cache warm shows what the cache saves when variants repeat (a resumed or repeated
run, another database, verify).

usage: .venv/bin/python bench/throughput.py [--budget 24] [--jobs 2] [--rounds 2]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from edgetune.codegen import get_kernel
from edgetune.session import TuneRequest, tune
from edgetune.targets import buildcache, get_target
from edgetune.tuner import TuningDatabase


COMPILED_VARIANTS = tuple(p for p in buildcache.PARTS if p.startswith(buildcache.VARIANTS))


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def one_run(kernel, target, shape, budget, jobs, seed, folder: Path, cold: bool = True) -> tuple[float, float, int]:
    if cold:
        buildcache.clear(parts=COMPILED_VARIANTS)
    db = TuningDatabase(folder / f"run-{jobs}-{time.monotonic_ns()}.db")
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    summary = tune(TuneRequest(kernel, target, shape, "random", budget, jobs, seed), db)
    return time.perf_counter() - wall0, cpu_seconds() - cpu0, summary.new_trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--shape", default="m=16,n=16,k=32")
    args = parser.parse_args()
    kernel, target = get_kernel("matmul_s8"), get_target("cortex-m55")
    shape = kernel.parse_shape(args.shape)
    cores = len(os.sched_getaffinity(0))
    results: dict[int, list[tuple[float, float, int]]] = {1: [], args.jobs: []}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["EDGETUNE_CACHE"] = str(Path(tmp) / "cache")  # the bench's own: it empties it
        one_run(kernel, target, shape, 4, 1, 99, Path(tmp))  # warm-up: harness objects, plugin
        for _ in range(args.rounds):
            for jobs in (1, args.jobs):
                results[jobs].append(one_run(kernel, target, shape, args.budget, jobs, 0, Path(tmp)))
        warm = one_run(kernel, target, shape, args.budget, args.jobs, 0, Path(tmp), cold=False)
    print(f"matmul_s8 {args.shape} on {target.name}, {args.budget} evaluations per run, {args.rounds} rounds, "
          f"{cores} cores")
    print(f"{'mode':>22} {'evals/min':>10} {'core use':>9}")
    rates = {}
    for jobs, runs in results.items():
        rates[jobs] = statistics.median(n / wall * 60 for wall, _, n in runs)
        use = statistics.median(cpu / (wall * cores) for wall, cpu, _ in runs)
        label = "one at a time (jobs 1)" if jobs == 1 else f"pipeline (jobs {jobs})"
        print(f"{label:>22} {rates[jobs]:>10.0f} {use:>9.0%}")
    print(f"{'speed-up':>22} {rates[args.jobs] / rates[1]:>10.2f}x")
    wall, cpu, n = warm
    print(f"{'pipeline, cache warm':>22} {n / wall * 60:>10.0f} {cpu / (wall * cores):>9.0%}"
          f"   ({n / wall * 60 / rates[args.jobs]:.2f}x the cold pipeline: every build a cache hit)")


if __name__ == "__main__":
    main()
