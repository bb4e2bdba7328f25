"""NEON variants of matmul_s8, matmul_f32, conv2d_s8 and dwconv2d_s8 on the Cortex-A53 and A72 (QEMU
virt): tuned instructions and estimated cycles against the plain C loop at -O3, side by side.

For each kernel, target and shape, on the same inputs in the same harness and run:
  - plain: the kernel's plain loop (render_naive) built with GCC -O3 for the core;
  - C:     a short random-search tune over the plain-C variants (tiling, packing, layout,
           compiler and flags; the compiler auto-vectorises them with NEON as it likes);
  - NEON:  the same search over the NEON intrinsics variants.
Both searches use a fixed seed and a fresh database and rank by estimated cycles.
Instruction counts are exact and identical on both cores (QEMU models no pipeline);
cycles are estimates of each target's cost model (README, "Cycle and energy estimates":
a throughput bound, L1 hits, no dependency stalls). Ratios are plain / tuned.

usage: .venv/bin/python bench/neon.py [--budget N] [--seed S] [--s8-shapes m=..,n=..,k=.. ...]
                                      [--f32-shapes ...] [--conv-shapes h=..,w=..,cin=.. ...]
                                      [--dw-shapes h=..,w=..,c=..,kh=.. ...]
                                      [--kernels matmul_s8 matmul_f32 conv2d_s8 dwconv2d_s8]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from kernels import macs_of, plain_values  # bench/kernels.py: MACs of a call, the plain loop's values
from restricted import one_vector_path  # bench/restricted.py

from edgetune.codegen import get_kernel
from edgetune.session import TuneRequest, tune
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

TARGETS = ("cortex-a53", "cortex-a72")
KERNELS = ("matmul_s8", "matmul_f32", "conv2d_s8", "dwconv2d_s8")


def best_of_path(kernel, target, shape, vector, budget, seed, work):
    """The best trial of a seeded random search restricted to one vector path."""
    db = TuningDatabase(work / f"{vector}.db")
    summary = tune(TuneRequest(one_vector_path(kernel, vector), target, shape, "random", budget, 2, seed, "cycles"), db)
    if summary.best is None:
        raise SystemExit(f"{kernel.name} {target.name}: no {vector} variant ran: {summary.failures}")
    return summary.best.trial, summary.workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--s8-shapes", nargs="*", default=["m=16,n=16,k=32", "m=64,n=64,k=64"])
    parser.add_argument("--f32-shapes", nargs="*", default=["m=16,n=16,k=32", "m=64,n=64,k=64"])
    parser.add_argument("--conv-shapes", nargs="*",
                        default=["h=16,w=16,cin=32,cout=32,kh=3,kw=3,stride=1,pad=1,dilation=1",
                                 "h=9,w=9,cin=19,cout=13,kh=3,kw=3,stride=2,pad=2,dilation=1"])
    parser.add_argument("--dw-shapes", nargs="*", default=["h=16,w=16,c=32,kh=3,kw=3,stride=1,pad=1,dilation=1",
                                                           "h=15,w=15,c=45,kh=3,kw=3,stride=2,pad=1,dilation=1"])
    parser.add_argument("--kernels", nargs="*", default=list(KERNELS), choices=KERNELS)
    args = parser.parse_args()

    print(f"NEON on the Cortex-A (QEMU virt); random search per path, budget {args.budget}, seed {args.seed}, "
          "best by estimated cycles; ratios = plain -O3 / tuned")
    print(f"{'kernel':>11} {'target':>10} {'shape':>15} | {'plain instr':>11} {'plain cyc':>10} | "
          f"{'C instr':>9} {'C cyc':>9} | {'NEON instr':>10} {'NEON cyc':>9} | {'instr x':>7} {'cyc x':>6} "
          f"{'vs C cyc':>8} {'MAC/cyc':>7}  best NEON configuration")
    for kernel_name, shapes in (("matmul_s8", args.s8_shapes), ("matmul_f32", args.f32_shapes),
                                ("conv2d_s8", args.conv_shapes), ("dwconv2d_s8", args.dw_shapes)):
        if kernel_name not in args.kernels:
            continue
        kernel = get_kernel(kernel_name)
        for shape_text in shapes:
            shape = kernel.parse_shape(shape_text)
            macs = macs_of(kernel_name, shape)
            for target_name in TARGETS:
                target = get_target(target_name)
                with tempfile.TemporaryDirectory() as tmp:
                    work = Path(tmp)
                    c_best, _ = best_of_path(kernel, target, shape, "c", args.budget, args.seed, work)
                    neon, workload = best_of_path(kernel, target, shape, "neon", args.budget, args.seed, work)
                    plain = plain_values(kernel, target, shape, workload, work)
                n_instr, n_cyc = neon.values["instructions"], neon.values["cycles"]
                print(f"{kernel_name:>11} {target_name:>10} {shape_text:>15} | {plain['instructions']:>11} "
                      f"{plain['cycles']:>10.0f} | {c_best.values['instructions']:>9} {c_best.values['cycles']:>9.0f} | "
                      f"{n_instr:>10} {n_cyc:>9.0f} | {plain['instructions'] / n_instr:>7.2f} "
                      f"{plain['cycles'] / n_cyc:>6.2f} {c_best.values['cycles'] / n_cyc:>8.2f} {macs / n_cyc:>7.2f}  "
                      f"{neon.config.key()}", flush=True)


if __name__ == "__main__":
    main()
