"""The model zoo (tests/data/models/zoo/, scripts/make_model_zoo.py) through edgetune, per model:
supported or the refusal (one line, as `edgetune model show` and `model export` give it),
and for a supported model two modules exported and verified whole in the target's emulator
on the zoo's saved inputs (`edgetune model export` and `model verify`, bit for bit against
TFLite Micro; an input TFLite Micro itself fails on is named and left out):

  plain   every layer on its kernel's default configuration, what an export without a tuning
          database ships (the plain C loops): the reference measured in the same run;
  vector  every tuned layer on a variant of the target's vector path, weights packed where
          the kernel offers it (one trial per workload: bench/model_export.py's vector_db),
          as after `edgetune model tune`, not a tuned optimum.

Printed per model: the verdict, bit-exact or not (both modules), instructions per inference
(the first saved input) of both modules and their ratio, and the vector module's flash (code
and weights) and RAM (arena, input, output, static scratch); then how many models are supported
and bit-exact. The refusals are what docs/model-zoo.md explains.

usage: .venv/bin/python bench/zoo.py [--targets cortex-m55 ...] [--models NAME ...] [--refusals-only]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from edgetune.model import ModelError, load_model
from edgetune.model.export import export_model
from edgetune.model.module import schedule
from edgetune.model.verify import VerifyOutcome, verify_model
from edgetune.targets import get_target

from model_export import vector_db

ZOO = Path(__file__).resolve().parent.parent / "tests" / "data" / "models" / "zoo"


def refusal(path: Path) -> str:
    """"" when edgetune runs the model, else its one-line refusal (file name only)."""
    try:
        schedule(load_model(path), "zoo")
    except ModelError as exc:
        return str(exc).replace(str(path), path.name)
    return ""


def input_files(name: str, work: Path) -> list[Path]:
    """The zoo's saved inputs of the model as `model verify --input` files, one per case."""
    files = []
    with np.load(ZOO / f"{name}.npz") as saved:
        keys = sorted(k for k in saved.files if k.startswith("input"))
        for case in range(len(saved["tflm_ok"])):
            path = work / f"{name}-case{case}.npy"
            np.save(path, np.concatenate([saved[k][case].reshape(-1) for k in keys]).astype(np.int8))
            files.append(path)
    return files


def exported(name: str, target, db, work: Path, kind: str, inputs: list[Path]) -> VerifyOutcome:
    folder = work / f"{name}-{target.name}-{kind}"
    export_model(ZOO / f"{name}.tflite", target, db, folder)
    return verify_model(folder, target, input_files=inputs)


def _problem(outcome: VerifyOutcome) -> str:
    return outcome.layer_problem or next((i.problem for i in outcome.inferences if i.problem), "") or \
        "; ".join(outcome.unchecked)


def measure(name: str, target, work: Path) -> str:
    inputs = input_files(name, work)
    plain = exported(name, target, None, work, "plain", inputs)
    db, _ = vector_db(work / f"{name}-{target.name}.db", target, load_model(ZOO / f"{name}.tflite"), 0)
    vector = exported(name, target, db, work, "vector", inputs)
    exact = plain.ok and vector.ok
    unchecked = f" ({len(vector.unchecked)} input(s) TFLite Micro fails on: not checked)" if vector.unchecked else ""
    if not exact:
        return f"| {name} | supported | NO: {_problem(plain) or _problem(vector)} | | | | | |"
    p, v = plain.inferences[0].instructions, vector.inferences[0].instructions
    size = vector.size
    return (f"| {name} | supported | yes, {len(vector.inferences)} inputs{unchecked} | {v:,} | {p:,} | "
            f"{p / v:.2f}x | {size.flash_bytes:,} ({size.code_bytes:,}) | {size.ram_bytes:,} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", default=["cortex-m55"])
    parser.add_argument("--models", nargs="+", default=sorted(p.stem for p in ZOO.glob("*.tflite")))
    parser.add_argument("--refusals-only", action="store_true", help="print the verdicts, measure nothing")
    args = parser.parse_args()
    verdicts = {name: refusal(ZOO / f"{name}.tflite") for name in args.models}
    supported = [name for name, why in verdicts.items() if not why]
    for name, why in verdicts.items():
        if why:
            print(f"{name}: refused: {why}")
    print(f"{len(supported)} of {len(verdicts)} zoo models supported: {', '.join(supported)}")
    if args.refusals_only:
        return
    with tempfile.TemporaryDirectory(prefix="edgetune-bench-zoo-") as tmp:
        for target_name in args.targets:
            target = get_target(target_name)
            print(f"\n{target.name}: | model | verdict | bit-exact with TFLite Micro | instructions (vector) | "
                  "instructions (plain C) | plain / vector | flash B (code) | RAM B |")
            print("|---|---|---|---|---|---|---|---|")
            exact = 0
            for name in supported:
                row = measure(name, target, Path(tmp))
                exact += "| yes," in row
                print(row, flush=True)
            print(f"{target.name}: {exact} of {len(supported)} supported models bit-exact "
                  f"({len(verdicts)} in the zoo)")


if __name__ == "__main__":
    main()
