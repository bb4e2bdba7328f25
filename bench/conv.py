"""Tuned conv2d_s8 on the Cortex-M55 (QEMU) against the plain C loop nest, side by side.

For each shape: a short random-search tune (fixed seed, fresh database), then the plain loop
nest (conv2d_s8_naive.c.j2: no tiling, no intrinsics) built with arm-none-eabi-gcc for the
same core at -O3 (and at -O3 -fno-tree-vectorize, a strictly scalar baseline), all on the same
inputs in the same harness. Instruction counts are exact, so one run each suffices; the
ratio is plain / tuned. MACs per executed instruction = oh*ow*cout*kh*kw*cin / instructions
(taps in the padding count as MACs, as in the usual layer MAC count).

Each shape is tuned twice, in separate databases with the same seed and budget: once with the
weights as given (layout=ohwi only) and once with weights packed at export time allowed
(layout=packed: reordered for the inner loop, bias and input zero point folded into a term).

usage: .venv/bin/python bench/conv.py [--budget N] [--seed S] [--strategy NAME] [--shapes h=..,w=..,... ...]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from kernels import tune_and_baselines  # noqa: E402  (bench/kernels.py: tune + plain-loop baselines)
from restricted import restricted  # noqa: E402  (bench/restricted.py)

from edgetune.codegen import get_kernel  # noqa: E402
from edgetune.codegen.kernels.convolution import geometry_of  # noqa: E402
from edgetune.targets import get_target  # noqa: E402
from edgetune.tuner import Constraint, TuningDatabase  # noqa: E402

DEFAULT_SHAPES = ["h=16,w=16,cin=32,cout=32,kh=3,kw=3,stride=1,pad=1,dilation=1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategy", default="random", help="search strategy of both tunes (default: random)")
    parser.add_argument("--shapes", nargs="*", default=DEFAULT_SHAPES)
    args = parser.parse_args()

    kernel, target = get_kernel("conv2d_s8"), get_target("cortex-m55")
    print(f"conv2d_s8 on {target.name} (QEMU {target.runner.machine}); {args.strategy} search, budget {args.budget}, "
          f"seed {args.seed}")
    print(f"{'shape':>58} {'plain -O3':>11} {'plain novec':>11} {'tuned':>9} {'ratio':>7} {'ratio novec':>11} "
          f"{'MAC/instr':>9}  best configuration")
    with tempfile.TemporaryDirectory() as tmp:
        as_given = restricted(kernel, Constraint("packed weights not allowed in this run", lambda c: c["layout"] != "packed",
                                                        reads=("layout",)))
        for label, variant in (("weights as given", as_given), ("packed weights allowed", kernel)):
            print(label)
            db = TuningDatabase(Path(tmp) / f"bench-{len(label)}.db")
            for shape_text in args.shapes:
                shape = kernel.parse_shape(shape_text)
                summary, plain, scalar = tune_and_baselines(variant, target, shape, args.budget, args.seed, db,
                                                            Path(tmp), args.strategy)
                best = summary.best.trial
                tuned = best.values["instructions"]
                geo = geometry_of(shape)
                macs = geo.oh * geo.ow * shape["cout"] * shape["kh"] * shape["kw"] * shape["cin"]
                print(f"{shape_text:>58} {plain:>11} {scalar:>11} {tuned:>9} {plain / tuned:>7.2f} "
                      f"{scalar / tuned:>11.2f} {macs / tuned:>9.2f}  {best.config.key()}")


if __name__ == "__main__":
    main()
