"""Buffer placement on M-profile boards: the same tuned matmul_s8 variant with its weights and
activations in each pair of the board's buffer regions, measured in the same run.

For each target: a short random-search tune by instructions (placement stays at its default
there: QEMU counts the same instructions wherever buffers live); then that best variant
measured with every legal placement. Instructions must not move; estimated cycles and
energy do, because the cost model charges each load and store by its data's region
(wait_states and access_pj in the target file: estimates, see README "Cycle and energy
estimates"). Ratios are against the default placement (first column pair). Finally a tune
by estimated cycles, which searches placement too, and the placement it chose.

usage: .venv/bin/python bench/placement.py [--targets cortex-m7,cortex-m55] [--shape m=..,n=..,k=..] [--budget N]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from edgetune.codegen import get_kernel
from edgetune.codegen.placement import ACTIVATIONS_PARAM, WEIGHTS_PARAM
from edgetune.evaluate import Evaluator
from edgetune.session import TuneRequest, tune, workload_inputs
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="cortex-m7,cortex-m4,cortex-m55")
    parser.add_argument("--shape", default="m=16,n=16,k=32")
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    kernel = get_kernel("matmul_s8")
    shape = kernel.parse_shape(args.shape)
    print(f"matmul_s8 {args.shape}; best of a random tune by instructions (budget {args.budget}, seed {args.seed}), "
          "measured with each placement")
    print(f"{'target':>10} {'weights_in':>10} {'activations_in':>14} {'instr':>7} {'est. cycles':>11} {'x default':>9} "
          f"{'energy uJ':>9} {'x default':>9}  accesses by region")
    with tempfile.TemporaryDirectory() as tmp:
        db = TuningDatabase(Path(tmp) / "bench.db")
        for name in args.targets.split(","):
            target = get_target(name)
            summary = tune(TuneRequest(kernel, target, shape, "random", args.budget, 2, args.seed), db)
            best = summary.best.trial.config.as_dict()
            space = kernel.tuning_space(target, shape)
            evaluate = Evaluator(kernel, target, shape, space, workload_inputs(kernel, summary.workload), Path(tmp))
            points = [(w, a) for w in space.param(WEIGHTS_PARAM).values for a in space.param(ACTIVATIONS_PARAM).values
                      if space.is_legal(space.make({**best, WEIGHTS_PARAM: w, ACTIVATIONS_PARAM: a}))]
            points.sort(key=lambda p: p != (best[WEIGHTS_PARAM], best[ACTIVATIONS_PARAM]))  # the default first
            print(f"{name:>10} best by instructions: {summary.best.trial.config.key()}")
            reference = None
            for weights, activations in points:
                trial = evaluate(space.make({**best, WEIGHTS_PARAM: weights, ACTIVATIONS_PARAM: activations}))
                if trial.outcome.failed:
                    raise SystemExit(f"{name} {weights}/{activations}: {trial.outcome.value}: {trial.error}")
                v = trial.values
                reference = reference or v
                accesses = ", ".join(f"{r} {n}" for r, n in sorted(v["accesses"].items()))
                print(f"{name:>10} {weights:>10} {activations:>14} {v['instructions']:>7} {v['cycles']:>11.0f} "
                      f"{v['cycles'] / reference['cycles']:>9.3f} {v['energy_uj']:>9.3f} "
                      f"{v['energy_uj'] / reference['energy_uj']:>9.3f}  {accesses}")
            # The same workload: the trials by instructions count, then as many more searching placement too.
            chosen = tune(TuneRequest(kernel, target, shape, "random", 2 * args.budget, 2, args.seed, objective="cycles"),
                          db).best.trial
            print(f"{name:>10} tuned by estimated cycles: {chosen.values['cycles']:.0f} cycles with weights in "
                  f"{chosen.info['weights_region']}, activations in {chosen.info['activations_region']} "
                  f"({chosen.config.key()})")


if __name__ == "__main__":
    main()
