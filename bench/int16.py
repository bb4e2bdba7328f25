"""16x8 models (int16 activations, int8 weights) on the embedded targets: the zoo's
converter-made keyword-spotting model exported with every layer at its kernel's default
configuration (the plain C loop: the reference, measured in the same run), then tuned with
`--budget` trials and exported again; each module verified bit for bit against TFLite Micro
on random and saturating inputs, layer by layer. Prints instructions per inference, flash
and RAM of both.

    .venv/bin/python bench/int16.py --budget 48 --targets cortex-m55,cortex-m4
"""
from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgetune.model import load_model
from edgetune.model.export import export_model
from edgetune.model.session import tune_model
from edgetune.model.verify import verify_model
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

MODEL = Path(__file__).resolve().parent.parent / "tests" / "data" / "models" / "zoo" / "kws_int16x8.tflite"


@dataclass(frozen=True)
class Run:
    instructions: int
    exact: bool
    flash: int
    ram: int


def measured(path: Path, target, db, folder: Path) -> Run:
    export_model(path, target, db, folder)
    outcome = verify_model(folder, target, 3, layers=True)
    return Run(outcome.inferences[0].instructions, outcome.ok, outcome.size.flash_bytes, outcome.size.ram_bytes)


def bench(target_name: str, budget: int, seed: int, work: Path) -> tuple[Run, Run]:
    target = get_target(target_name)
    plain = measured(MODEL, target, None, work / f"{target_name}-plain")
    db = TuningDatabase(work / f"{target_name}.db")
    tune_model(load_model(MODEL).layers, target, db, budget=budget, seed=seed)
    return plain, measured(MODEL, target, db, work / f"{target_name}-tuned")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", default="cortex-m55,cortex-m4")
    args = parser.parse_args()
    print(f"{MODEL.name}, budget {args.budget}, seed {args.seed}")
    print("| target | plain C instructions | tuned instructions | speed-up | bit-exact (plain, tuned) | flash (plain, tuned) | RAM |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="edgetune-bench-int16-") as tmp:
        for name in args.targets.split(","):
            plain, tuned = bench(name, args.budget, args.seed, Path(tmp))
            print(f"| {name} | {plain.instructions:,} | {tuned.instructions:,} | {plain.instructions / tuned.instructions:.2f}x "
                  f"| {plain.exact}, {tuned.exact} | {plain.flash:,}, {tuned.flash:,} | {tuned.ram:,} |")


if __name__ == "__main__":
    main()
