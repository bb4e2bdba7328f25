"""dwconv2d_s8 on the Cortex-M55 (QEMU): MACs per estimated cycle before and after the
Helium path with output pixels across the lanes (vector=mve_pixels) and the padded input
copy (taps=padded3x3), next to the plain loop and the M55's peak of 8 int8 MACs per cycle,
on the issue's 3x3 shape and the depthwise layers of the MLPerf Tiny models (DS-CNN,
MobileNetV1-0.25).

For each shape, on the same inputs in the same harness:
  - plain:  the plain loop nest (render_naive) at GCC -O3;
  - before: the best of a search over the space as it was (every path but mve_pixels, no
            taps=padded3x3: plain C and Helium with channels across the lanes), a few
            known-good configurations first, then random search;
  - padded: the same search over taps=padded3x3 (channels across the lanes);
  - pixels: the same search over vector=mve_pixels;
  - after:  the best of the three (what a search of the whole space finds at best).
The searches rank by estimated cycles (the HAL's cost model, hal/cost.py, on the exact
instruction mix QEMU executes: vector instructions 2 cycles each, loads and stores
overlapping arithmetic, scalar instructions serial). MACs = oh*ow*c*mult*kh*kw (taps in the
padding count, as in the usual layer MAC count). CMSIS-NN's arm_depthwise_conv_s8 is not
built here: no package registry this project uses ships its sources.

usage: .venv/bin/python bench/dwconv.py [--budget N] [--seed S] [--shapes h=..,w=..,c=.. ...]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from kernels import macs_of, plain_values  # noqa: E402  (bench/kernels.py: MACs of a call, the plain loop)
from restricted import restricted  # noqa: E402  (bench/restricted.py)

from edgetune.codegen import get_kernel  # noqa: E402
from edgetune.session import TuneRequest, tune  # noqa: E402
from edgetune.targets import get_target  # noqa: E402
from edgetune.tuner import Constraint, TuningDatabase  # noqa: E402

PEAK = 8  # int8 MACs per cycle: one 16-lane VMLADAVA.S8 every two cycles on the dual-beat M55
ISSUE_SHAPE = "h=16,w=16,c=32,kh=3,kw=3,stride=1,pad=1,dilation=1"
# The distinct depthwise workloads of tests/data/models/ (`edgetune model show`).
MLPERF_SHAPES = {
    "DS-CNN x4": "h=25,w=5,c=64,kh=3,kw=3,stride=1,pad=1,dilation=1",
    "MobileNet 1": "h=48,w=48,c=8,kh=3,kw=3,stride=1,pad=1,dilation=1",
    "MobileNet 3": "h=48,w=48,c=16,kh=3,kw=3,stride=2,pad_top=0,pad_bottom=1,pad_left=0,pad_right=1,dilation=1",
    "MobileNet 5": "h=24,w=24,c=32,kh=3,kw=3,stride=1,pad=1,dilation=1",
    "MobileNet 7": "h=24,w=24,c=32,kh=3,kw=3,stride=2,pad_top=0,pad_bottom=1,pad_left=0,pad_right=1,dilation=1",
    "MobileNet 9": "h=12,w=12,c=64,kh=3,kw=3,stride=1,pad=1,dilation=1",
    "MobileNet 11": "h=12,w=12,c=64,kh=3,kw=3,stride=2,pad_top=0,pad_bottom=1,pad_left=0,pad_right=1,dilation=1",
    "MobileNet 13 x5": "h=6,w=6,c=128,kh=3,kw=3,stride=1,pad=1,dilation=1",
    "MobileNet 23": "h=6,w=6,c=128,kh=3,kw=3,stride=2,pad_top=0,pad_bottom=1,pad_left=0,pad_right=1,dilation=1",
    "MobileNet 25": "h=3,w=3,c=256,kh=3,kw=3,stride=1,pad=1,dilation=1",
}
# Measured first in each search (then random search fills the budget): the strongest
# configurations of each family on the issue's shape.
KNOWN_GOOD = {
    "padded": ({"vector": "mve", "tile_c": 8, "tile_p": 2, "taps": "padded3x3", "layout": "packed",
                "compiler": "clang", "opt": "O3"},
               {"vector": "mve", "tile_c": 16, "tile_p": 1, "taps": "padded3x3", "layout": "packed",
                "compiler": "clang", "opt": "O3"}),
    "before": ({"vector": "mve", "tile_c": 8, "tile_p": 2, "taps": "unrolled3x3", "layout": "packed",
                  "compiler": "clang", "opt": "O3"},
                 {"vector": "mve", "tile_c": 16, "tile_p": 1, "taps": "unrolled3x3", "layout": "packed",
                  "compiler": "clang", "opt": "O3"}),
    "pixels": ({"vector": "mve_pixels", "tile_p": 4, "taps": "unrolled3x3", "compiler": "clang", "opt": "O3"},
               {"vector": "mve_pixels", "tile_p": 1, "taps": "unrolled3x3", "compiler": "clang", "opt": "O3"}),
}
FAMILIES = {
    "before": Constraint("the space before mve_pixels and padded3x3",
                         lambda c: c["vector"] != "mve_pixels" and c["taps"] != "padded3x3", reads=("vector", "taps")),
    "padded": Constraint("taps=padded3x3 only", lambda c: c["vector"] != "mve_pixels" and c["taps"] == "padded3x3",
                         reads=("vector", "taps")),
    "pixels": Constraint("vector=mve_pixels only", lambda c: c["vector"] == "mve_pixels", reads=("vector",)),
}


def legal_starts(kernel, target, shape, family) -> tuple[dict, ...]:
    """The family's known-good configurations that the shape's space allows, completed with
    the space's first legal values for the parameters they leave out."""
    space = kernel.space(target, shape)
    starts = []
    for wanted in KNOWN_GOOD[family]:
        for config in space:
            if all(config[k] == v for k, v in wanted.items()):
                starts.append(config.as_dict())
                break
    return tuple(starts)


def best_of(kernel, target, shape, family, budget, seed, work):
    db = TuningDatabase(work / f"{family}.db")
    request = TuneRequest(restricted(kernel, FAMILIES[family]), target, shape, "random", budget, 2, seed, "cycles",
                          initial=legal_starts(kernel, target, shape, family))
    summary = tune(request, db)
    if summary.best is None:
        raise SystemExit(f"{kernel.name} {shape}: no {family} variant ran: {summary.failures}")
    return summary.best.trial, summary.workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=16, help="trials per search (default 16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shapes", nargs="*", help="shapes to measure (default: the issue's and the MLPerf layers)")
    args = parser.parse_args()
    shapes = ({text: text for text in args.shapes} if args.shapes
              else {"issue 3x3": ISSUE_SHAPE, **MLPERF_SHAPES})

    kernel, target = get_kernel("dwconv2d_s8"), get_target("cortex-m55")
    print(f"dwconv2d_s8 on {target.name} (QEMU {target.runner.machine}); estimated cycles; searches of {args.budget} "
          f"trials, seed {args.seed}; peak {PEAK} MACs/cycle")
    print(f"{'layer':>16} {'MACs':>8} {'plain':>9} {'before':>8} {'padded':>8} {'pixels':>8} {'MAC/c plain':>11} "
          f"{'MAC/c before':>12} {'MAC/c after':>11} {'of peak':>7} {'after/before':>12}  best after")
    with tempfile.TemporaryDirectory() as tmp:
        for label, text in shapes.items():
            shape = kernel.parse_shape(text)
            work = Path(tmp) / f"s{len(label)}-{abs(hash(text))}"
            work.mkdir()
            best = {family: best_of(kernel, target, shape, family, args.budget, args.seed, work)
                    for family in FAMILIES}
            cycles = {family: trial.values["cycles"] for family, (trial, _) in best.items()}
            after = min(cycles, key=cycles.get)
            plain = plain_values(kernel, target, shape, best["before"][1], work)["cycles"]
            macs, b, a = macs_of(kernel.name, shape), cycles["before"], cycles[after]
            print(f"{label:>16} {macs:>8} {plain:>9.0f} {b:>8.0f} {cycles['padded']:>8.0f} {cycles['pixels']:>8.0f} "
                  f"{macs / plain:>11.3f} {macs / b:>12.3f} {macs / a:>11.3f} {macs / a / PEAK:>7.1%} {b / a:>12.2f}  "
                  f"{best[after][0].config.key()}")


if __name__ == "__main__":
    main()
