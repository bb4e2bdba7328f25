"""Patch-based (row-band) execution of MobileNet-VWW's first stages on the Cortex-M55 (issue 29,
goal 4: peak RAM <= 0.35x TFLite Micro's, 101,664 B -> <= 35,582 B).

In one run, each module exported (every layer on its --db variant, else its kernel's default
configuration) and run whole in QEMU by `model verify` (bit-exact with TFLite Micro on one
random input and the saturating one, or the script stops): the module without patches, then
each patch plan; per module its instructions per inference and its RAM as verify prints it
(arena + static scratch + input and output). The recompute's cost is the difference between
a plan that recomputes the halo rows and the same plan caching them, beside the rows each
layer computes in all (patches.StageSchedule.computed_rows). TFLite Micro's figures are
reference constants (TFLM_M55, with their source), not measured here.

usage: .venv/bin/python bench/patches.py [--db FILE] [--plans PLAN ...]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from edgetune.model import load_model
from edgetune.model.export import export_model
from edgetune.model.patch_module import parse_patch_plan, plan_stage
from edgetune.model.verify import verify_model
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

MODEL = Path(__file__).resolve().parent.parent / "tests" / "data" / "models" / "mobilenet_v1_025_vww.tflite"
# TFLite Micro + CMSIS-NN for the Cortex-M55 at -O3, one inference in QEMU AN547 counted by a
# plugin not edgetune's; RAM is its arena's used bytes plus its static data. Source: edgetune
# issue 29, "Whole models 2x past TFLite Micro + CMSIS-NN", its table.
TFLM_M55 = dict(instructions=6_746_428, ram=101_664)
GOAL = 0.35  # issue 29, goal 4
PLANS = ("0-3:1:cache,4-7:1:cache", "0-3:1:recompute,4-7:1:recompute", "0-3:2:cache,4-7:2:cache",
         "0-3:1:cache:default,4-7:1:cache",
         "0-3:2:recompute,4-7:2:recompute", "0-7:1:cache", "0-3:1:cache")


def measure(target, db, plan_text: str, work: Path) -> dict:
    plan = parse_patch_plan(plan_text) if plan_text else None
    folder = work / (plan_text.replace(",", "_").replace(":", "_").replace("-", "_") or "plain")
    export_model(MODEL, target, db, folder, patch=plan)
    outcome = verify_model(folder, target, 1)
    if not outcome.ok:
        raise SystemExit(f"{plan_text or 'no patches'}: not bit-exact with TFLite Micro: "
                         f"{[i.problem for i in outcome.inferences]}")
    return dict(instructions=outcome.inferences[0].instructions, ram=outcome.size.ram_bytes,
                arena=outcome.manifest.model.arena_bytes)


def computed_rows(model, plan_text: str) -> str:
    if not plan_text:
        return "-"
    return " | ".join(",".join(map(str, plan_stage(model, s).schedule.computed_rows()))
                      for s in parse_patch_plan(plan_text).stages)


def row(label: str, m: dict, plain: dict, rows: str) -> str:
    ratio = m["ram"] / TFLM_M55["ram"]
    return (f"| {label} | {m['instructions']:,} | {m['instructions'] / plain['instructions']:.3f} | "
            f"{m['instructions'] / TFLM_M55['instructions']:.2f} | {m['ram']:,} | {m['arena']:,} | {ratio:.3f} | "
            f"{'yes' if ratio <= GOAL else 'no'} | {rows} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, default=None, help="a `model tune` database of the model")
    parser.add_argument("--plans", nargs="+", default=list(PLANS), help="patch plans (FIRST-LAST:ROWS:HALO,...)")
    args = parser.parse_args()
    target = get_target("cortex-m55")
    db = TuningDatabase(args.db) if args.db else None
    model = load_model(MODEL)
    print(f"variants: {args.db.name if args.db else 'each kernel default configuration (plain C)'}")
    print(f"| module | instructions | / no patches | / TFLM | RAM B | arena B | RAM / TFLM | <= {GOAL} | rows computed per layer |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    print(f"| TFLite Micro + CMSIS-NN (reference) | {TFLM_M55['instructions']:,} | - | 1.00 | {TFLM_M55['ram']:,} | - | "
          "1.000 | - | - |")
    with tempfile.TemporaryDirectory(prefix="edgetune-patches-") as tmp:
        plain = measure(target, db, "", Path(tmp))
        print(row("no patches", plain, plain, "-"), flush=True)
        for plan in args.plans:
            print(row(f"--patch {plan}", measure(target, db, plan, Path(tmp)), plain, computed_rows(model, plan)),
                  flush=True)


if __name__ == "__main__":
    main()
