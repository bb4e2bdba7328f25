"""Tuned matmul_s8 on the Cortex-M55 (QEMU) against the plain C loop, side by side.

For each shape: a short random-search tune (fixed seed, fresh database), then the plain
triple loop built with arm-none-eabi-gcc -O3 for the same core, both run on the same inputs
in the same harness. Instruction counts are exact, so one run each suffices; the ratio is
plain / tuned. MACs per executed instruction = M*N*K / instructions. Last, the best trial of each weight
layout (row-major B, or B packed at export time) found by the same search.

usage: .venv/bin/python bench/kernels.py [--budget N] [--shapes m=..,n=..,k=.. ...]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from edgetune.codegen import get_kernel
from edgetune.session import Evaluator, TuneRequest, tune, workload_inputs
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

DEFAULT_SHAPES = ["m=16,n=16,k=32", "m=5,n=13,k=7", "m=32,n=32,k=64", "m=64,n=64,k=64"]


class NaiveLoop:
    """Makes an Evaluator build the plain loop instead of a configured variant."""

    def __init__(self, kernel, compiler, cflags):
        self.kernel, self.compiler, self.cflags = kernel, compiler, cflags

    def __getattr__(self, name):
        return getattr(self.kernel, name)

    def render(self, target, shape, config, **_):
        return self.kernel.render_naive(target, shape, self.compiler, self.cflags)

    def deployed_io(self, io, config):
        return io  # the plain loop takes the weights as they are


def measure_naive(kernel, target, shape, space, workload, work, cflags):
    naive = NaiveLoop(kernel, "gcc", cflags)
    evaluator = Evaluator(naive, target, shape, space, workload_inputs(kernel, workload), work)
    trial = evaluator(next(iter(space)))  # the configuration is ignored by NaiveLoop
    if trial.outcome.failed:
        raise SystemExit(f"plain loop failed: {trial.outcome.value}: {trial.error}")
    return trial.values["instructions"]


def tune_and_baselines(kernel, target, shape, budget, seed, db, work, strategy="random"):
    """One shape: a seeded tune (random search unless told), then the plain loop at -O3 and at
    -O3 without auto-vectorisation, on the same inputs. Returns (summary, plain, scalar) instructions."""
    summary = tune(TuneRequest(kernel, target, shape, strategy, budget, 2, seed), db)
    space = kernel.space(target, shape)
    plain = measure_naive(kernel, target, shape, space, summary.workload, work, ("-O3",))
    scalar = measure_naive(kernel, target, shape, space, summary.workload, work, ("-O3", "-fno-tree-vectorize"))
    return summary, plain, scalar


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shapes", nargs="*", default=DEFAULT_SHAPES)
    args = parser.parse_args()

    kernel, target = get_kernel("matmul_s8"), get_target("cortex-m55")
    print(f"matmul_s8 on {target.name} (QEMU {target.runner.machine}); random search, budget {args.budget}, "
          f"seed {args.seed}")
    header = (f"{'shape':>16} {'plain -O3':>11} {'plain -O3 novec':>15} {'tuned':>9} {'ratio':>7} "
              f"{'ratio novec':>11} {'MAC/instr':>9}  best configuration")
    print(header)
    layouts = []
    with tempfile.TemporaryDirectory() as tmp:
        db = TuningDatabase(Path(tmp) / "bench.db")
        for shape_text in args.shapes:
            shape = kernel.parse_shape(shape_text)
            summary, plain, scalar = tune_and_baselines(kernel, target, shape, args.budget, args.seed, db, Path(tmp))
            best = summary.best.trial
            tuned = best.values["instructions"]
            macs = shape["m"] * shape["n"] * shape["k"]
            print(f"{shape_text:>16} {plain:>11} {scalar:>15} {tuned:>9} {plain / tuned:>7.2f} {scalar / tuned:>11.2f} "
                  f"{macs / tuned:>9.2f}  {best.config.key()}")
            layouts.append((shape_text, macs, best_per_layout(db, summary.workload)))
    print("\nbest per weight layout (MACs per executed instruction; rowmajor = the skeleton's MVE path over N,")
    print("packed = B packed at export time, VMLADAVA.S8 dot products over K)")
    for shape_text, macs, per_layout in layouts:
        cells = "  ".join(f"{layout} {trial.values['instructions']:>8} instr {macs / trial.values['instructions']:5.2f} "
                          f"MAC/instr" for layout, trial in per_layout.items())
        print(f"{shape_text:>16}  {cells}")


def best_per_layout(db, workload):
    """The best successful trial of each weight layout in the database."""
    best = {}
    for trial in db.trials(workload):
        if trial.outcome.failed:
            continue
        layout = trial.config["layout"]
        if layout not in best or trial.values["instructions"] < best[layout].values["instructions"]:
            best[layout] = trial
    return dict(sorted(best.items()))


if __name__ == "__main__":
    main()
