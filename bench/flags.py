"""The compiler's options as a tunable space: per kernel and target, the best variant tuned
with the option parameters (codegen/compiler_options.py) against the best tuned without
them, at the same budget and seed, and the geometric mean over the kernel library.

Each arm is its own session in its own database (the options do not change a workload's
identity, so one database would share trials between the arms). A `target:compiler` entry
tunes with that compiler only, so GCC and Clang are compared each on its own. QEMU targets
count instructions exactly; on the host the bests are re-measured in alternation (`--repeats`
rounds; each run's fastest batch, time_ns_min, and the fastest round) and those are compared.

AutoPass (Li, Ren, Tang, Zheng and Wang, "AutoPass: Evidence-Guided LLM Agents for Compiler
Performance Tuning", arXiv:2606.20373, 2026) reports geometric-mean speed-ups of 1.043x on
x86-64 and 1.117x on ARM64 over LLVM -O3 by choosing LLVM options per program; they are
printed beside ours. Theirs are whole programs against a fixed -O3; ours are kernels whose
own parameters (tiles, unrolling in the source, vector paths, -O level) are tuned in both arms.

usage: .venv/bin/python bench/flags.py [--targets cortex-m55:gcc,cortex-m55:clang,cortex-a53:gcc,host:gcc]
       [--kernels fir_q15,...] [--budget N] [--seed S] [--options cc_unroll,cc_vectorize|all]
"""
from __future__ import annotations

import argparse
import itertools
import math
import tempfile
from dataclasses import replace
from pathlib import Path

from edgetune.codegen import KERNELS, get_kernel
from edgetune.hal import load_target
from edgetune.hal.compiler_options import OPTION_NAMES
from edgetune.evaluate import Evaluator
from edgetune.session import TuneRequest, tune, workload_inputs
from edgetune.targets import target_file
from edgetune.targets.option_probe import with_accepted_options
from edgetune.tuner import TuningDatabase
from edgetune.tuner.strategies import DEFAULT_STRATEGY

AUTOPASS = {"x86-64": 1.043, "ARM64": 1.117}  # geometric-mean speed-ups over LLVM -O3 (arXiv:2606.20373)
SHIPPED = ("matmul_s8", "matmul_f32", "conv2d_s8", "dwconv2d_s8", "fir_q15", "fir_f32")


def arm_targets(entry: str, options: list[str]):
    """(without options, with options) for 'name[:compiler]'."""
    name, _, compiler = entry.partition(":")
    arms = []
    for chosen in ([], options):
        target = with_accepted_options(load_target(target_file(name), overrides={"compiler_options": chosen}))
        if compiler:
            target = replace(target, compilers=(target.compiler(compiler),))
        arms.append(target)
    return arms


def tuned(kernel, target, shape, args, folder: Path):
    db = TuningDatabase(folder / "bench.db")
    summary = tune(TuneRequest(kernel, target, shape, args.strategy, args.budget, args.jobs, args.seed), db)
    if summary.best is None:
        raise SystemExit(f"{kernel.name} on {target.name}: no trial succeeded ({summary.failures})")
    return summary


def alternating(evaluate, configs, objective: str, repeats: int) -> list[float]:
    """Each configuration's fastest over `repeats` rounds measured in alternation (on a
    loaded machine other jobs only ever add time: the minimum is the least disturbed)."""
    times: list[list[float]] = [[] for _ in configs]
    for round_ in range(repeats):
        for i in sorted(range(len(configs)), key=lambda j: (j - round_) % len(configs)):  # rotated: no first-place bias
            config = configs[i]
            trial = evaluate(config)
            if trial.outcome.failed:
                raise SystemExit(f"re-measuring {config.key()} failed: {trial.error}")
            times[i].append(float(trial.values.get(f"{objective}_min", trial.value(objective))))
    return [min(t) for t in times]


def option_sweep(evaluate, space, config: dict, objective: str):
    """Every legal option combination on one tuned variant: (best value, its config, wrong answers)."""
    base = {k: v for k, v in config.items() if k not in OPTION_NAMES}
    names = [p.name for p in space.params if p.name in OPTION_NAMES]
    best, wrong = None, 0
    for values in itertools.product(*(space.param(n).values for n in names)):
        candidate = space.make({**base, **dict(zip(names, values))})
        if not space.is_legal(candidate):
            continue
        trial = evaluate(candidate)
        wrong += trial.outcome.value == "wrong_answer"
        if not trial.outcome.failed and (best is None or trial.value(objective) < best[0]):
            best = (trial.value(objective), candidate)
    return best[0], best[1], wrong


def chosen_options(config: dict) -> str:
    picked = [f"{k}={v}" for k, v in config.items() if k in OPTION_NAMES and v != "default"]
    return ",".join(picked) or "none"


def bench_kernel(name: str, arms, args) -> tuple[float, float]:
    """One kernel on one target: (same-budget ratio, ratio of the options swept on the plain best)."""
    plain_target, option_target = arms
    kernel = get_kernel(name)
    shape = kernel.parse_shape(kernel.example_shape())
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        plain = tuned(kernel, plain_target, shape, args, Path(a))
        searched = tuned(kernel, option_target, shape, args, Path(b))
        objective = plain.objective
        space = kernel.tuning_space(option_target, shape)
        evaluate = Evaluator(kernel, option_target, shape, space, workload_inputs(kernel, searched.workload), Path(b))
        swept, swept_config, wrong = option_sweep(evaluate, space, plain.best.trial.config.as_dict(), objective)
        wrong += searched.failures.get("wrong_answer", 0)
        without, with_ = plain.best.trial.value(objective), searched.best.trial.value(objective)
        if plain_target.runner.kind == "native":  # time: the bests again, in alternation
            configs = [space.make(plain.best.trial.config.as_dict()), space.make(searched.best.trial.config.as_dict()),
                       swept_config]
            without, with_, swept = alternating(evaluate, configs, objective, args.repeats)
    print(f"{name:>12} {without:>10.0f} {with_:>10.0f} {without / with_:>7.3f} {swept:>10.0f} {without / swept:>7.3f} "
          f"{wrong:>5}  {chosen_options(searched.best.trial.config.as_dict())} | "
          f"{chosen_options(swept_config.as_dict())}", flush=True)
    return without / with_, without / swept


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="cortex-m55:gcc,cortex-m55:clang,cortex-a53:gcc,host:gcc")
    parser.add_argument("--kernels", default=",".join(SHIPPED), help=f"of {', '.join(sorted(KERNELS))}")
    parser.add_argument("--budget", type=int, default=24, help="trials per arm, kernel and target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--strategy", default=DEFAULT_STRATEGY)
    parser.add_argument("--repeats", type=int, default=5, help="alternating re-measurements of the host's bests")
    parser.add_argument("--options", default="cc_unroll,cc_vectorize", help="option parameters, or all")
    args = parser.parse_args()
    options = args.options.split(",")
    kernels = args.kernels.split(",")
    print(f"best without / best with compiler options ({args.options}); {args.strategy}, budget {args.budget} "
          f"per arm, seed {args.seed}; units: instructions (QEMU), ns (host: fastest of {args.repeats} alternating "
          "re-measurements); swept: every option combination on the best without options")
    means = {}
    for entry in args.targets.split(","):
        arms = arm_targets(entry, options)
        print(f"\n{entry}\n{'kernel':>12} {'without':>10} {'with':>10} {'ratio':>7} {'swept':>10} {'ratio':>7} "
              f"{'wrong':>5}  options chosen: searched | swept on the best without")
        rows = [bench_kernel(name, arms, args) for name in kernels]
        means[entry] = (geomean([r[0] for r in rows]), geomean([r[1] for r in rows]))
    print()
    for entry, (same_budget, swept) in means.items():
        arch = "x86-64" if entry.startswith("host") else "ARM64" if "a53" in entry or "a72" in entry else None
        beside = f"   AutoPass {arch}: {AUTOPASS[arch]:.3f}x over LLVM -O3" if arch else ""
        print(f"{entry:>18} geometric mean over {len(kernels)} kernels: {same_budget:.3f}x at the same budget, "
              f"{swept:.3f}x swept on the best without{beside}")
    print(f"AutoPass (arXiv:2606.20373): {AUTOPASS['x86-64']:.3f}x on x86-64, {AUTOPASS['ARM64']:.3f}x on ARM64")


if __name__ == "__main__":
    main()
