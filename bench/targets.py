"""Tuned matmul_s8 on every QEMU target: exact instructions, estimated cycles and energy,
against the plain C loop built with GCC -O3 for the same core, measured in the same run.

For each target: a short random-search tune (fixed seed, fresh database), best by the
chosen objective (default: estimated cycles); then the plain triple loop on the same
inputs in the same harness. Ratios are plain / tuned. Cycles and energy are estimates from
each target's cost model (README, "Cycle and energy estimates").

Then the Arm DSP-extension path on the Cortex-M4 and M7 (bench/dsp.py): matmul_s8, conv2d_s8 and
fir_q15 tuned with vector=dsp only and with plain C only, against the plain loop at -O3.

usage: .venv/bin/python bench/targets.py [--budget N] [--shape m=..,n=..,k=..] [--objective cycles] [--no-dsp]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from dsp import dsp_table  # bench/dsp.py: the DSP-extension path against plain C on M4/M7
from kernels import plain_loop_values  # bench/kernels.py: the plain loop through the measuring pipeline

from edgetune.codegen import get_kernel
from edgetune.session import TuneRequest, tune, workload_inputs
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

TARGETS = ["cortex-m4", "cortex-m7", "cortex-m55", "cortex-a53", "cortex-a72"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shape", default="m=16,n=16,k=32")
    parser.add_argument("--objective", default="cycles")
    parser.add_argument("--no-dsp", action="store_true", help="skip the DSP-extension table")
    args = parser.parse_args()

    kernel = get_kernel("matmul_s8")
    shape = kernel.parse_shape(args.shape)
    blocks = shape["m"] * shape["n"] * shape["k"] / 64
    print(f"matmul_s8 {args.shape}; random search, budget {args.budget}, seed {args.seed}, best by {args.objective}")
    print(f"{'target':>11} {'instr':>8} {'cycles':>9} {'cyc/64MAC':>9} {'energy uJ':>9} {'plain instr':>11} "
          f"{'plain cycles':>12} {'ratio cyc':>9}  best configuration")
    with tempfile.TemporaryDirectory() as tmp:
        db = TuningDatabase(Path(tmp) / "bench.db")
        for name in TARGETS:
            target = get_target(name)
            summary = tune(TuneRequest(kernel, target, shape, "random", args.budget, 2, args.seed, args.objective), db)
            best = summary.best.trial.values
            plain = plain_loop_values(kernel, target, shape, workload_inputs(kernel, summary.workload), Path(tmp),
                                      what=f"{name}: plain loop")
            print(f"{name:>11} {best['instructions']:>8} {best['cycles']:>9.0f} {best['cycles'] / blocks:>9.1f} "
                  f"{best['energy_uj']:>9.3f} {plain['instructions']:>11} {plain['cycles']:>12.0f} "
                  f"{plain['cycles'] / best['cycles']:>9.2f}  {summary.best.trial.config.key()}")
        if not args.no_dsp:
            print()
            dsp_table(args.budget, args.seed, Path(tmp))


if __name__ == "__main__":
    main()
