"""Instructions per inference of each MLPerf Tiny model's module on the Cortex-M55 after a
`model tune` at the default budget, beside TFLite Micro + CMSIS-NN's (issue 29, goal 1:
<= 0.5x) and beside the default-configuration module measured in the same run; with the tune's CPU time,
the figure the default budget is chosen by (at most ~5 minutes on 2 cores).

Per model: `model tune` (the library's tune_model: default strategy, scheduler and round
size, `--per-workload` trials per distinct workload, default `model tune`'s own) in a fresh
database and, unless --warm-cache, a fresh build cache (EDGETUNE_CACHE), timed as the CPU
time of this process and its children (compilers, QEMU) during the tune, which a machine
shared with other jobs does not inflate as it does the wall time; then the tuned module and
the default-configuration module (no database: every layer on its kernel's default
configuration, the space's first legal point: plain C, except dwconv2d_s8 where Helium is
offered, whose default is its pixel-lane Helium path) exported and run whole by `model verify`
(bit-exact with TFLite Micro, or the script stops).

TFLite Micro's figures are reference constants (bench/model_ram.py's TFLM_M55, from issue 29).

usage: .venv/bin/python bench/model_speed.py [--models ds_cnn_kws ...] [--per-workload N]
                                             [--seed 0] [--jobs 2] [--warm-cache] [--keep-db DIR]
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from edgetune.cli.options import MODEL_TRIALS_PER_WORKLOAD
from edgetune.model import load_model
from edgetune.model.export import export_model
from edgetune.model.session import distinct_workloads, tune_model
from edgetune.model.verify import verify_model
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

sys.path.insert(0, str(Path(__file__).parent))
from model_ram import MODELS, TFLM_M55  # noqa: E402  (the reference constants, with their source)

GOAL = 0.5  # issue 29, goal 1: instructions <= 0.5x TFLite Micro + CMSIS-NN's


def cpu_seconds() -> float:
    """User + system time of this process and its waited-for children so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def module_instructions(path: Path, target, db: TuningDatabase | None, folder: Path) -> int:
    export_model(path, target, db, folder)
    outcome = verify_model(folder, target, 1)
    if not outcome.ok:
        raise SystemExit(f"{path.name}: not bit-exact with TFLite Micro: {[i.problem for i in outcome.inferences]}")
    return outcome.inferences[0].instructions


def measure(name: str, target, per_workload: int, seed: int, jobs: int, work: Path, keep: Path | None) -> dict:
    path = MODELS / f"{name}.tflite"
    model = load_model(path)
    budget = per_workload * len(distinct_workloads(model.layers, target))
    db_path = (keep or work) / f"{name}.db"
    db_path.unlink(missing_ok=True)
    db = TuningDatabase(db_path)
    cpu, wall = cpu_seconds(), time.monotonic()
    tune_model(model.layers, target, db, budget=budget, seed=seed, jobs=jobs)
    cpu, wall = cpu_seconds() - cpu, time.monotonic() - wall
    tuned = module_instructions(path, target, db, work / f"{name}-tuned")
    plain = module_instructions(path, target, None, work / f"{name}-plain")
    return dict(name=name, budget=budget, cpu=cpu, wall=wall, tuned=tuned, plain=plain,
                tflm=TFLM_M55[name]["instructions"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["ds_cnn_kws", "resnet8_cifar10", "mobilenet_v1_025_vww"])
    parser.add_argument("--per-workload", type=int, default=MODEL_TRIALS_PER_WORKLOAD)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--warm-cache", action="store_true", help="keep EDGETUNE_CACHE as it is (default: a fresh one)")
    parser.add_argument("--keep-db", type=Path, default=None, metavar="DIR", help="keep each tune's database as DIR/MODEL.db")
    args = parser.parse_args()
    target = get_target("cortex-m55")
    print(f"| model (budget) | edgetune module | TFLM + CMSIS-NN | ratio | <= {GOAL}x | default-config module | tune CPU s "
          "| tune wall s |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for name in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            if not args.warm_cache:  # each model's compiles counted in its own time
                os.environ["EDGETUNE_CACHE"] = str(Path(tmp) / "cache")
            row = measure(name, target, args.per_workload, args.seed, args.jobs, Path(tmp), args.keep_db)
        ratio = row["tuned"] / row["tflm"]
        print(f"| {name} ({row['budget']}) | {row['tuned']:,} | {row['tflm']:,} | {ratio:.2f} | "
              f"{'yes' if ratio <= GOAL else 'no'} | {row['plain']:,} | {row['cpu']:.0f} | {row['wall']:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
