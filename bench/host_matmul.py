"""Tuned matmul_f32 on this machine against numpy's matmul on one thread, side by side.

For each n: a short seeded random-search tune of matmul_f32 (n x n x n) on `host`, the
best configuration of the previous n measured first (its trial is stored like any other,
so the search resumes after it). Then, in alternation, ROUNDS times: numpy single-thread
float32 matmul (a subprocess started with OPENBLAS_NUM_THREADS=1 so the pin holds before
numpy loads), and the tuned variant re-measured by edgetune's host runner. Both report
the median per-call time of 15 batches of at least 2 ms (firmware/host/harness_native.c;
numpy with the same protocol). GFLOP/s = 2 n^3 / time_ns; ratio = tuned / numpy, the
median of the rounds.

numpy runs the way it does by default in this environment; when OPENBLAS_CORETYPE or
OPENBLAS_L2_SIZE are set (docs/measurements.md: they select a slower kernel), it is also
measured with them removed, and that figure is printed as well.

usage: .venv/bin/python bench/host_matmul.py [--budget N] [--seed S] [--sizes 256 1024]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from edgetune.codegen import get_kernel
from edgetune.evaluate import Evaluator
from edgetune.session import TuneRequest, tune, workload_inputs, workload_of
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

ROUNDS = 5
BLAS_SELECTORS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

# Timed in a fresh interpreter so the thread pin is in place before numpy loads.
NUMPY_TIMER = r"""
import json, sys, time
import numpy as np
n = int(sys.argv[1])
rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
c = np.empty((n, n), dtype=np.float32)
np.matmul(a, b, out=c)
reps = 1
while True:
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        np.matmul(a, b, out=c)
    if time.perf_counter_ns() - t0 >= 2_000_000 or reps >= 1 << 20:
        break
    reps *= 2
per_call = []
for _ in range(15):
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        np.matmul(a, b, out=c)
    per_call.append((time.perf_counter_ns() - t0) / reps)
print(json.dumps({"time_ns": sorted(per_call)[7]}))
"""


def numpy_time_ns(n: int, drop: tuple[str, ...] = ()) -> float:
    env = {key: value for key, value in os.environ.items() if key not in drop}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", NUMPY_TIMER, str(n)], env=env, capture_output=True, text=True,
                         check=True)
    return float(json.loads(out.stdout)["time_ns"])


def gflops(n: int, time_ns: float) -> float:
    return 2.0 * n ** 3 / time_ns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=24, help="trials per size (default 24)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sizes", type=int, nargs="*", default=[256, 1024])
    parser.add_argument("--jobs", type=int, default=2, help="parallel builds (timed runs never overlap)")
    args = parser.parse_args()

    kernel, target = get_kernel("matmul_f32"), get_target("host")
    selectors = {key: os.environ[key] for key in BLAS_SELECTORS if key in os.environ}
    print(f"matmul_f32 on {target.name} ({target.core.name}; vector units: "
          f"{', '.join(u.name for u in target.vector_units)}); random search, budget {args.budget}, seed {args.seed}")
    print(f"numpy {__import__('numpy').__version__}, one thread; BLAS selectors in the environment: "
          f"{selectors or 'none'}")
    print(f"{'n':>6} {'tuned GFLOP/s':>14} {'numpy GFLOP/s':>14} {'ratio':>6}"
          f"{'  numpy unset GFLOP/s' if selectors else ''}  best configuration")
    previous_best = None
    with tempfile.TemporaryDirectory() as tmp:
        db = TuningDatabase(Path(tmp) / "bench.db")
        for n in args.sizes:
            shape = kernel.parse_shape(f"m={n},n={n},k={n}")
            space = kernel.space(target, shape)
            workload = workload_of(kernel, target, shape)
            evaluate = Evaluator(kernel, target, shape, space, workload_inputs(kernel, workload), Path(tmp))
            if previous_best is not None and space.is_legal(previous_best):
                db.record(workload, evaluate(previous_best), "transfer", args.seed)
            summary = tune(TuneRequest(kernel, target, shape, "random", args.budget, args.jobs, args.seed), db)
            if summary.best is None:
                raise SystemExit(f"n={n}: no successful trial ({summary.failures})")
            best = summary.best.trial.config
            previous_best = best
            tuned, numpy = [], []
            for _ in range(ROUNDS):
                numpy.append(gflops(n, numpy_time_ns(n)))
                trial = evaluate(best)
                if trial.outcome.failed:
                    raise SystemExit(f"n={n}: re-measuring the best failed: {trial.error}")
                tuned.append(gflops(n, trial.values["time_ns"]))
            ratio = statistics.median(t / p for t, p in zip(tuned, numpy))
            unset = f"  {gflops(n, numpy_time_ns(n, drop=BLAS_SELECTORS)):>20.1f}" if selectors else ""
            print(f"{n:>6} {statistics.median(tuned):>14.1f} {statistics.median(numpy):>14.1f} {ratio:>6.2f}{unset}  "
                  f"{best.key()}", flush=True)


if __name__ == "__main__":
    main()
