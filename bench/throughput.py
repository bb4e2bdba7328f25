"""Evaluations per minute on cortex-m55: batched evaluation (several variants per image and
per emulator boot, edgetune.targets.batch) against one variant per image, measured in the
same run, both with `--jobs N`.

Both tune matmul_s8 with the same seed and budget into fresh databases (the random strategy
proposes the same configurations whatever the round size, so both measure the same
variants); each mode is run `--rounds` times, alternating, after one warm-up run that
fills the harness cache. Every timed run starts with an empty cache of compiled variants.
Core use = CPU time of edgetune and its children (compilers, QEMU) / (wall time x cores).

The breakdown is per evaluation, in milliseconds of one job's time: compiling the kernel,
linking (glue, harness, image; an image's link shared by its variants), the emulator (boot
and run, shared likewise; the disassembly for the cost model included), the search
(strategy ask and tell) and the database (claims and stored trials). With --jobs 2 two
evaluations proceed at once, so the parts add up to about twice the wall time.
A last batched run with the cache warm shows what the cache saves when variants repeat.

usage: .venv/bin/python bench/throughput.py [--budget 16] [--jobs 2] [--rounds 2]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from edgetune.codegen import get_kernel
from edgetune.session import TuneRequest, tune
from edgetune.targets import buildcache, get_target
from edgetune.tuner import TuningDatabase

COMPILED_VARIANTS = tuple(p for p in buildcache.PARTS if p.startswith(buildcache.VARIANTS))
PARTS = ("compile", "link", "run", "search", "database")
LABELS = {"compile": "compile", "link": "link", "run": "emulator", "search": "search", "database": "database"}


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    evaluations: int
    parts: dict  # part -> seconds over the whole run
    instructions: tuple  # the counts stored, to show both modes measured the same


def one_run(kernel, target, shape, budget, jobs, batch, seed, folder: Path, cold: bool = True) -> Run:
    if cold:
        buildcache.clear(parts=COMPILED_VARIANTS)
    db = TuningDatabase(folder / f"run-{jobs}-{batch}-{time.monotonic_ns()}.db")
    session = {}

    def progress(_done, _budget, trial):  # the session's own costs so far ride on each trial shown
        session.update({k: trial.info.get(f"run_seconds_{k}", 0.0) for k in ("search", "database")})

    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    summary = tune(TuneRequest(kernel, target, shape, "random", budget, jobs, seed, batch=batch), db, progress)
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    trials = db.trials(summary.workload)
    parts = {part: sum(t.info.get(f"seconds_{part}", 0.0) for t in trials) for part in ("compile", "link", "run")}
    parts.update(session)
    return Run(wall, cpu, summary.new_trials, parts, tuple(sorted(t.values.get("instructions", -1) for t in trials)))


def report(label: str, runs: list[Run], cores: int) -> float:
    rate = statistics.median(r.evaluations / r.wall * 60 for r in runs)
    use = statistics.median(r.cpu / (r.wall * cores) for r in runs)
    per_eval = {part: statistics.median(r.parts.get(part, 0.0) / r.evaluations * 1000 for r in runs)
                for part in PARTS}
    cells = " ".join(f"{per_eval[part]:>9.1f}" for part in PARTS)
    print(f"{label:>24} {rate:>10.0f} {use:>9.0%} {cells}")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=None, help="variants per image (default: the session's choice)")
    parser.add_argument("--shape", default="m=16,n=16,k=32")
    args = parser.parse_args()
    kernel, target = get_kernel("matmul_s8"), get_target("cortex-m55")
    shape = kernel.parse_shape(args.shape)
    cores = len(os.sched_getaffinity(0))
    modes = {"one at a time": 1, "batched": args.batch}
    results: dict[str, list[Run]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["EDGETUNE_CACHE"] = str(Path(tmp) / "cache")  # the bench's own: it empties it
        one_run(kernel, target, shape, 4, 1, 1, 99, Path(tmp))  # warm-up: harness objects, plugin
        for _ in range(args.rounds):
            for mode, batch in modes.items():
                results[mode].append(one_run(kernel, target, shape, args.budget, args.jobs, batch, 0, Path(tmp)))
        warm = one_run(kernel, target, shape, args.budget, args.jobs, args.batch, 0, Path(tmp), cold=False)
    print(f"matmul_s8 {args.shape} on {target.name}, {args.budget} evaluations per run, --jobs {args.jobs}, "
          f"{args.rounds} rounds, {cores} cores, caches cold")
    header = " ".join(f"{LABELS[part]:>9}" for part in PARTS)
    print(f"{'':>24} {'':>10} {'':>9} {'ms per evaluation (of one job)':^49}")
    print(f"{'mode':>24} {'evals/min':>10} {'core use':>9} {header}")
    rates = {mode: report(f"{mode} (jobs {args.jobs})", runs, cores) for mode, runs in results.items()}
    print(f"{'batched / one at a time':>24} {rates['batched'] / rates['one at a time']:>10.2f}x")
    same = {runs[0].instructions for runs in results.values()}
    print(f"{'same counts':>24} {'yes' if len(same) == 1 else 'NO: the modes measured different counts'}")
    rate = report("batched, cache warm", [warm], cores)
    print(f"{'':>24} ({rate / rates['batched']:.2f}x the cold batched run: every build a cache hit)")


if __name__ == "__main__":
    main()
