"""RAM and flash of each MLPerf Tiny model's module on the Cortex-M55 beside TFLite Micro's
(issue 29's goal 3: total RAM = arena + scratch + I/O <= 0.7x TFLite Micro's).

Per model, one module exported (from DIR/<model>.db with --db-dir, the database a `model tune`
left, else every layer on its kernel's default configuration) and run whole in QEMU by
`edgetune model verify` (bit-exact with TFLite Micro, or the script stops): its instructions
per inference, its RAM and flash as verify prints them. Beside them, measured from the same
export's plan in the same run, what the module would take with its layers' scratch in one
static area beside a tensors-only arena and no layer in place (the layout before scratch
was planned into the arena): the tensors' arena + the largest variant's scratch + I/O.

TFLite Micro's figures are reference constants, not measured here (TFLM_M55 below, with
their source).

usage: .venv/bin/python bench/model_ram.py [--db-dir DIR] [--models ds_cnn_kws ...] [--inputs N]
"""
from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from edgetune.model import load_model
from edgetune.model.export import export_model
from edgetune.model.module import memory_plan
from edgetune.model.verify import verify_model
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

MODELS = Path(__file__).resolve().parent.parent / "tests" / "data" / "models"
MODEL_NAMES = ("ds_cnn_kws", "resnet8_cifar10", "mobilenet_v1_025_vww", "fc_autoencoder_ad")

# TFLite Micro with its CMSIS-NN kernels for the Cortex-M55, built at -O3, one inference in
# QEMU AN547 counted by a plugin not edgetune's, on the same .tflite files: RAM is its arena's
# used bytes plus its static data, flash includes the model flatbuffer. Source: edgetune
# issue 29, "Whole models 2x past TFLite Micro + CMSIS-NN", its table (instructions, RAM, flash).
TFLM_M55 = {
    "ds_cnn_kws": dict(instructions=1_789_930, ram=28_704, flash=147_984),
    "resnet8_cifar10": dict(instructions=4_814_439, ram=56_384, flash=213_584),
    "mobilenet_v1_025_vww": dict(instructions=6_746_428, ram=101_664, flash=450_464),
    "fc_autoencoder_ad": dict(instructions=155_825, ram=23_616, flash=453_344),
}
GOAL = 0.7  # issue 29, goal 3: total RAM <= 0.7x TFLite Micro's


def scratch_beside(model, rendered, io_bytes: int) -> int:
    """The module's RAM with the same variants, their scratch in one static area beside a
    tensors-only arena and no tuned layer in place (how modules were laid out before)."""
    steps = tuple(replace(s, in_place=()) if s.kernel is not None else s for s in rendered.steps)
    largest = max((arena + static for _, arena, static in rendered.scratch_needs), default=0)
    return memory_plan(model, steps).arena_bytes + largest + io_bytes


def measure(name: str, target, db_dir: Path | None, work: Path, inputs: int) -> dict:
    path = MODELS / f"{name}.tflite"
    db_path = db_dir / f"{name}.db" if db_dir else None
    db = TuningDatabase(db_path) if db_path and db_path.exists() else None
    folder = work / name
    result = export_model(path, target, db, folder)
    outcome = verify_model(folder, target, inputs)
    if not outcome.ok:
        raise SystemExit(f"{name}: not bit-exact with TFLite Micro: {[i.problem for i in outcome.inferences]}")
    m = outcome.manifest.model
    io_bytes = sum(int(np.prod(shape)) for shape in (*m.input_shapes, *m.output_shapes))
    return dict(source=db_path.name if db else "plain C", instructions=outcome.inferences[0].instructions,
                ram=outcome.size.ram_bytes, flash=outcome.size.flash_bytes, arena=m.arena_bytes,
                beside=scratch_beside(load_model(path), result.rendered, io_bytes))


def row(name: str, m: dict) -> str:
    ref = TFLM_M55[name]
    ratio = m["ram"] / ref["ram"]
    return (f"| {name} | {m['source']} | {m['instructions']:,} | {m['ram']:,} | {m['beside']:,} | {ref['ram']:,} | "
            f"{ratio:.2f} | {'yes' if ratio <= GOAL else 'no'} | {m['flash']:,} | {ref['flash']:,} | "
            f"{m['flash'] / ref['flash']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db-dir", type=Path, default=None, help="tuned databases DIR/<model>.db (a `model tune`'s)")
    parser.add_argument("--models", nargs="+", default=list(MODEL_NAMES), choices=MODEL_NAMES)
    parser.add_argument("--inputs", type=int, default=1, help="random inputs per verify (plus a saturating one)")
    args = parser.parse_args()
    target = get_target("cortex-m55")
    print("| model | variants | instructions | RAM B | RAM B, scratch beside | TFLM RAM B | RAM / TFLM | "
          f"<= {GOAL} | flash B | TFLM flash B | flash / TFLM |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="edgetune-model-ram-") as tmp:
        for name in args.models:
            print(row(name, measure(name, target, args.db_dir, Path(tmp), args.inputs)), flush=True)


if __name__ == "__main__":
    main()
