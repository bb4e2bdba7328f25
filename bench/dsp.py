"""The Arm DSP-extension path (vector=dsp: SXTB16/SMLAD, SMLALD) on the Cortex-M4 and M7 in
QEMU, side by side with plain C, all measured in the same run on the same inputs.

For each target and kernel: two short random-search tunes over the same space pinned to
vector=dsp and to vector=c (fixed seed, fresh database each), best by estimated cycles; and
the plain loop built with arm-none-eabi-gcc -O3 (matmul_s8: the triple loop of
matmul_s8_naive.c.j2; conv2d_s8: the loop nest of conv2d_s8_naive.c.j2; fir_q15: the C variant with one output per tile and no unrolling, i.e.
the two nested loops). Instructions are exact QEMU counts; cycles are estimates from the
target's cost model (README, "Cycle and energy estimates"). Ratios are plain / DSP and
best C / DSP; MAC/cycle = the kernel's multiply-accumulates / estimated DSP cycles.

Then fir_q15 on the Cortex-M55 with Helium (vector=mve), taps=32, block=256, in both
rounding conventions: the best count of a search of the whole Helium space (18
configurations: every one measured), beside CMSIS-DSP's arm_fir_q15 measured in the same run
(bench/cmsis_fir.py: built from the cmsisdsp sdist on PyPI, downloaded into edgetune's cache
folder, with ARM_MATH_MVEI/ARM_MATH_HELIUM, arm-none-eabi-gcc -O3 and clang -O3, linked into
the same harness on the same inputs, its output checked bit for bit against rounding=truncate;
the count is one arm_fir_q15 call, its one-off setup measured apart and subtracted).
arm_fir_q15 truncates, so rounding=truncate is the like-for-like row. Offline, the bench says
so in one line and prints edgetune's figures alone.

usage: .venv/bin/python bench/dsp.py [--budget N] [--seed S] [--kernel NAME] [--no-helium]   (also printed by bench/targets.py)
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from kernels import macs_of, plain_values  # bench/kernels.py: MACs of a call, the plain loop's values
from restricted import one_vector_path  # bench/restricted.py
from cmsis_fir import library_fir  # bench/cmsis_fir.py: arm_fir_q15 built and measured

from edgetune.codegen import get_kernel
from edgetune.session import TuneRequest, tune, workload_of
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

TARGETS = ("cortex-m4", "cortex-m7")
WORKLOADS = (("matmul_s8", "m=16,n=16,k=32"), ("matmul_s8", "m=32,n=32,k=64"), ("fir_q15", "taps=32,block=64"),
             ("conv2d_s8", "h=16,w=16,cin=32,cout=32,kh=3,kw=3,stride=1,pad=1,dilation=1"))
# fir_q15 against CMSIS-DSP's arm_fir_q15 on the Cortex-M55 (bench/RESULTS.md, "fir_q15 on Helium").
HELIUM_FIR_SHAPE = "taps=32,block=256"
HELIUM_FIR_BUDGET = 24  # above the 18 configurations of the vector=mve space: the search measures them all


def plain_loop(kernel, target, shape, work):
    """The plain C loop at -O3 with GCC, on the workload's inputs."""
    return plain_values(kernel, target, shape, workload_of(kernel, target, shape), work)


def best_of(kernel, target, shape, vector, budget, seed, work):
    db = TuningDatabase(work / f"{target.name}-{kernel.name}-{vector}.db")
    summary = tune(TuneRequest(one_vector_path(kernel, vector), target, shape, "random", budget, 2, seed, "cycles"), db)
    if summary.best is None:
        raise SystemExit(f"{target.name} {kernel.name} vector={vector}: no successful trial")
    return summary.best.trial


def label_of(name, shape_text, shape):
    if name == "conv2d_s8":  # the layer in the usual notation; stride 1, pad 1, dilation 1 in WORKLOADS
        return f"{name} {shape['h']}x{shape['w']}x{shape['cin']}->{shape['cout']} {shape['kh']}x{shape['kw']}"
    return f"{name} {shape_text}"


def dsp_table(budget: int, seed: int, work: Path, kernels: tuple[str, ...] | None = None) -> None:
    """One row per target and workload (of `kernels` only, when given)."""
    print(f"Arm DSP extension (vector=dsp) vs plain C; random search per path, budget {budget}, seed {seed}, "
          "best by estimated cycles")
    print(f"{'target':>10} {'workload':>26} {'plain instr':>11} {'plain cyc':>9} {'C instr':>8} {'C cyc':>8} "
          f"{'DSP instr':>9} {'DSP cyc':>8} {'plain/DSP':>9} {'C/DSP':>6} {'MAC/cyc':>7}  best DSP configuration")
    for target_name in TARGETS:
        target = get_target(target_name)
        for kernel_name, shape_text in WORKLOADS:
            if kernels is not None and kernel_name not in kernels:
                continue
            kernel = get_kernel(kernel_name)
            shape = kernel.parse_shape(shape_text)
            plain = plain_loop(kernel, target, shape, work)
            c = best_of(kernel, target, shape, "c", budget, seed, work)
            dsp = best_of(kernel, target, shape, "dsp", budget, seed, work)
            print(f"{target_name:>10} {label_of(kernel_name, shape_text, shape):>26} {plain['instructions']:>11} "
                  f"{plain['cycles']:>9.0f} {c.values['instructions']:>8} {c.values['cycles']:>8.0f} "
                  f"{dsp.values['instructions']:>9} {dsp.values['cycles']:>8.0f} "
                  f"{plain['cycles'] / dsp.values['cycles']:>9.2f} {c.values['cycles'] / dsp.values['cycles']:>6.2f} "
                  f"{macs_of(kernel_name, shape) / dsp.values['cycles']:>7.2f}  {dsp.config.key()}")


def helium_fir_table(seed: int, work: Path) -> None:
    """fir_q15 with vector=mve on the M55, both rounding conventions, best by instructions,
    beside arm_fir_q15 measured in the same run."""
    target, kernel = get_target("cortex-m55"), get_kernel("fir_q15")
    library = library_fir(kernel, target, HELIUM_FIR_SHAPE, work)
    measured = not isinstance(library, str)
    print(f"\nfir_q15 {HELIUM_FIR_SHAPE} on the Cortex-M55, Helium (vector=mve), every configuration measured, "
          "best by instructions")
    if measured:
        for compiler, (call, setup) in library.items():
            print(f"CMSIS-DSP arm_fir_q15 ({compiler} -O3, MVEI/HELIUM): {call} instructions per call "
                  f"(setup {setup} measured apart, subtracted); output = rounding=truncate, bit for bit")
        best_library = min(call for call, _ in library.values())
    else:
        print(library)
    ratio_head = f" {'/library':>8}" if measured else ""
    print(f"{'rounding':>9} {'plain instr':>11} {'best instr':>10} {'best cyc':>8}{ratio_head}  best configuration")
    for rounding in ("nearest", "truncate"):
        shape = kernel.parse_shape(f"{HELIUM_FIR_SHAPE},rounding={rounding}")
        plain = plain_loop(kernel, target, shape, work)
        db = TuningDatabase(work / f"m55-fir_q15-{rounding}.db")
        request = TuneRequest(one_vector_path(kernel, "mve"), target, shape, "random", HELIUM_FIR_BUDGET, 2, seed,
                              "instructions")
        best = tune(request, db).best
        if best is None:
            raise SystemExit(f"cortex-m55 fir_q15 rounding={rounding}: no successful trial")
        count = best.trial.values["instructions"]
        ratio = f" {count / best_library:>8.3f}" if measured else ""
        print(f"{rounding:>9} {plain['instructions']:>11} {count:>10} {best.trial.values['cycles']:>8.0f}{ratio}  "
              f"{best.trial.config.key()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    names = tuple(dict.fromkeys(name for name, _ in WORKLOADS))
    parser.add_argument("--kernel", action="append", choices=names, help="only this kernel's workloads (repeatable)")
    parser.add_argument("--no-helium", action="store_true", help="leave out fir_q15 on the M55 against arm_fir_q15")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dsp_table(args.budget, args.seed, Path(tmp), tuple(args.kernel) if args.kernel else None)
        if not args.no_helium and (args.kernel is None or "fir_q15" in args.kernel):
            helium_fir_table(args.seed, Path(tmp))


if __name__ == "__main__":
    main()
