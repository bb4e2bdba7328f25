"""RAM and instructions of each MLPerf Tiny model's module on the Cortex-M55, its fastest
variants beside the fastest under a RAM bound of 0.7x TFLite Micro's (issue 29's goal 3:
total RAM = arena + scratch + I/O <= 0.7x TFLite Micro's), and beside TFLite Micro's figures.

Per model, from a copy of DIR/<model>.db (--db-dir, the database a `model tune` left; else
every layer on its kernel's default configuration): first the low-RAM variants the bound
needs are measured, as `model tune --max-ram` does beyond its budget (app/model/ram_tune.py;
--no-lean skips it); then two modules are exported from the same trials, the fastest
variants (`model export`) and the fastest under the bound (`model export --max-ram`), and
each runs whole in QEMU through `edgetune model verify` (bit-exact with TFLite Micro, or the
script stops): instructions per inference, RAM and flash as verify prints them. A bound no
choice meets prints the export's one-line refusal in its row.

TFLite Micro's figures are reference constants, not measured here (TFLM_M55 below, with
their source).

usage: .venv/bin/python bench/model_ram.py [--db-dir DIR] [--models ds_cnn_kws ...] [--inputs N] [--no-lean]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from edgetune.codegen import get_kernel
from edgetune.model import load_model
from edgetune.model.export import export_model
from edgetune.model.ram_fit import RamBoundError, room_for
from edgetune.model.ram_tune import measure_lean
from edgetune.model.verify import verify_model
from edgetune.session import TuneRequest
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


def run(name: str, target, db, folder: Path, inputs: int, max_ram: int | None) -> dict:
    """One export (under `max_ram` when given) verified whole: its figures, or the refusal."""
    try:
        export_model(MODELS / f"{name}.tflite", target, db, folder, max_ram=max_ram)
    except RamBoundError as exc:
        return dict(refused=str(exc))
    outcome = verify_model(folder, target, inputs)
    if not outcome.ok:
        raise SystemExit(f"{name}: not bit-exact with TFLite Micro: {[i.problem for i in outcome.inferences]}")
    return dict(instructions=outcome.inferences[0].instructions, ram=outcome.size.ram_bytes,
                flash=outcome.size.flash_bytes)


def lean_trials(name: str, target, db, max_ram: int) -> int:
    """The low-RAM variants the bound needs, measured into `db` (model tune --max-ram's step)."""
    model = load_model(MODELS / f"{name}.tflite")
    first = next(layer for layer in model.layers if layer.kernel is not None)
    template = TuneRequest(get_kernel(first.kernel), target, {}, "transfer", 0, 2, 0)
    try:
        room = room_for(model, target, max_ram)
        room.scratch_limits()
    except RamBoundError:
        return 0
    return sum(r.measured for r in measure_lean(model, target, db, room, template))


def measure(name: str, target, db_dir: Path | None, work: Path, inputs: int, lean: bool) -> dict:
    bound = int(GOAL * TFLM_M55[name]["ram"])
    source = db_dir / f"{name}.db" if db_dir else None
    db = None
    if source is not None and source.exists():
        shutil.copy(source, work / f"{name}.db")  # the lean trials go into a copy
        db = TuningDatabase(work / f"{name}.db")
    added = lean_trials(name, target, db, bound) if db is not None and lean else 0
    return dict(source=(source.name + (f" +{added} lean" if added else "")) if db else "plain C", bound=bound,
                fastest=run(name, target, db, work / f"{name}_fast", inputs, None),
                bounded=run(name, target, db, work / f"{name}_bound", inputs, bound))


def row(name: str, m: dict) -> str:
    ref, fast, bounded = TFLM_M55[name], m["fastest"], m["bounded"]
    cells = [name, m["source"], f"{fast['instructions']:,}", f"{fast['ram']:,}", f"{fast['ram'] / ref['ram']:.2f}",
             f"{m['bound']:,}"]
    if "refused" in bounded:
        cells += ["refused", "-", "-", "-", "no"]
    else:
        change = (bounded["instructions"] - fast["instructions"]) / fast["instructions"]
        ratio = bounded["ram"] / ref["ram"]
        cells += [f"{bounded['instructions']:,}", f"{change:+.1%}", f"{bounded['ram']:,}", f"{ratio:.2f}",
                  "yes" if ratio <= GOAL else "no"]
    cells += [f"{ref['instructions']:,}", f"{ref['ram']:,}"]
    line = "| " + " | ".join(cells) + " |"
    return line + (f"\n  {name}: {bounded['refused']}" if "refused" in bounded else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db-dir", type=Path, default=None, help="tuned databases DIR/<model>.db (a `model tune`'s)")
    parser.add_argument("--models", nargs="+", default=list(MODEL_NAMES), choices=MODEL_NAMES)
    parser.add_argument("--inputs", type=int, default=1, help="random inputs per verify (plus a saturating one)")
    parser.add_argument("--no-lean", action="store_true", help="measure no low-RAM variant: the stored trials only")
    args = parser.parse_args()
    target = get_target("cortex-m55")
    print(f"| model | variants | fastest: instructions | RAM B | RAM / TFLM | bound B (<= {GOAL} TFLM) | bounded: "
          "instructions | vs fastest | RAM B | RAM / TFLM | <= bound | TFLM instructions | TFLM RAM B |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="edgetune-model-ram-") as tmp:
        for name in args.models:
            print(row(name, measure(name, target, args.db_dir, Path(tmp), args.inputs, not args.no_lean)), flush=True)


if __name__ == "__main__":
    main()
