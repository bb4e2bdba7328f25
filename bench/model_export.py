"""Per-inference figures of the model export (docs/model-export.md): each MLPerf Tiny model
exported as one C module and run whole in QEMU (edgetune model verify, bit-exact with TFLite
Micro on every run), per target: instructions and estimated cycles per inference (the HAL's
cost model), latency at the board's clock, the module's flash (code and weights) and RAM
(arena, input, output, static scratch), and TFLite Micro's arena for the same model.

Two modules per model and target:
  plain   every layer on its kernel's default configuration (the plain C direct loop), what
          an export without a tuning database ships;
  vector  every layer on a variant of the target's vector path (Helium on the M55, the DSP
          extension on the M4/M7, NEON on the A53), weights packed where the kernel offers
          it, plus `--budget` random trials per workload (default 0: one trial, the chosen
          variant); the best trial of each is exported, as after `edgetune model tune`.
The vector module is not a tuned optimum: with --budget 0 it is one hand-picked point per
layer. Tuning wall time is the vector database's.

With `--db DIR` the second module is the *tuned* one instead: exported from DIR/MODEL-TARGET.db,
the gradient run's database `bench/models.py --keep-db DIR` leaves. Printed after each tuned
module, what limits it: the layer with the largest share of the module's instructions (its
weight times its best trial's instructions, measured standalone), the share of all tuned
layers, and the rest: the library operators no kernel serves (ADD, pooling, softmax...)
and the module's own code between layers.

usage: .venv/bin/python bench/model_export.py [--targets cortex-m55 ...] [--models ds_cnn_kws ...]
                                              [--budget N] [--inputs N] [--db DIR]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from edgetune.codegen import KERNELS
from edgetune.model import load_model
from edgetune.model.export import export_model
from edgetune.model.verify import verify_model
from edgetune.session import TuneRequest, tune, workload_of
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

MODELS = Path(__file__).resolve().parent.parent / "tests" / "data" / "models"
MODEL_NAMES = ("ds_cnn_kws", "mobilenet_v1_025_vww", "resnet8_cifar10", "fc_autoencoder_ad")
TARGETS = ("cortex-m55", "cortex-m4", "cortex-m7", "cortex-a53")
PREFERRED = ({"layout": "packed", "algo": "im2col"}, {"layout": "packed"}, {})


def _vector_config(kernel, target, shape):
    """The first configuration on the target's best vector path (MVE, NEON, DSP), weights
    packed and im2col where offered; None when the kernel has only plain C there."""
    space = kernel.tuning_space(target, shape)
    offered = [p.name for p in kernel.offered_paths(target)]
    vector = next((v for v in ("mve", "neon", "dsp") if v in offered), None)
    if vector is None:
        return None
    for extra in PREFERRED:
        wanted = {"vector": vector, **extra}
        config = next((c.as_dict() for c in space if all(c.as_dict().get(k) == v for k, v in wanted.items())), None)
        if config is not None:
            return config
    return None


def vector_db(path: Path, target, model, budget: int) -> tuple[TuningDatabase, float]:
    db = TuningDatabase(path)
    start = time.perf_counter()
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        shape = kernel.parse_shape(dict(w.shape))
        config = _vector_config(kernel, target, shape)
        if config is None and budget == 0:
            continue
        tune(TuneRequest(kernel, target, shape, "random", max(budget, 1), 1, 0,
                         initial=(config,) if config else ()), db)
    return db, time.perf_counter() - start


def measure(model_name: str, target, db, work: Path, inputs: int) -> dict:
    folder = work / f"{model_name}-{target.name}-{'plain' if db is None else 'from-db'}"
    result = export_model(MODELS / f"{model_name}.tflite", target, db, folder)
    outcome = verify_model(folder, target, inputs)
    if not outcome.ok:
        raise SystemExit(f"{folder}: not bit-exact with TFLite Micro: {outcome.inferences}")
    first = outcome.inferences[0]
    values = dict(first.values)
    cycles = values.get("cycles")
    return dict(instructions=first.instructions, cycles=cycles, flash=outcome.size.flash_bytes,
                code=outcome.size.code_bytes, ram=outcome.size.ram_bytes, arena=outcome.manifest.model.arena_bytes,
                tflm=result.tflm_arena, latency_ms=None if cycles is None else 1e3 * cycles / target.core.clock_hz,
                runs=len(outcome.inferences))


def limits(model, target, db, module_instructions: int) -> str:
    """The tuned layers' share of the module's instructions, from their standalone best trials."""
    shares = []
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        best = db.best(workload_of(kernel, target, kernel.parse_shape(dict(w.shape))), "instructions")
        value = None if best is None else best.trial.value("instructions")
        if value is not None:
            shares.append((len(w.layers) * value, w))
    if not shares:
        return "no tuned layer in the database"
    tuned = sum(v for v, _ in shares)
    top, w = max(shares, key=lambda item: item[0])
    layers = ",".join(str(i) for i in w.layers)
    return (f"largest: {w.kernel} at operators {layers} ({100 * top / module_instructions:.0f}% of the module); "
            f"all {len(shares)} tuned workloads {100 * tuned / module_instructions:.0f}%; untuned operators and "
            f"glue {100 * (1 - tuned / module_instructions):.0f}%")


def _row(model_name: str, target, kind: str, m: dict, tune_s: float | None) -> str:
    cycles = f"{m['cycles'] / 1e6:.2f} M" if m["cycles"] is not None else "-"
    ms = m["latency_ms"]
    latency = "-" if ms is None else f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"
    tuned = f"{tune_s:.0f}" if tune_s is not None else "-"
    return (f"| {model_name} | {target.name} | {kind} | {m['instructions'] / 1e6:.2f} M | {cycles} | {latency} | "
            f"{m['flash']:,} ({m['code']:,}) | {m['ram']:,} | {m['arena']:,} | {m['tflm']:,} | {tuned} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", default=list(TARGETS))
    parser.add_argument("--models", nargs="+", default=list(MODEL_NAMES), choices=MODEL_NAMES)
    parser.add_argument("--budget", type=int, default=0, help="random trials per workload beyond the vector variant")
    parser.add_argument("--inputs", type=int, default=1, help="random inputs per verify (plus a saturating one)")
    parser.add_argument("--db", type=Path, default=None,
                        help="export the tuned module from DIR/MODEL-TARGET.db (bench/models.py --keep-db DIR)")
    args = parser.parse_args()
    print("| model | target | kernels | instructions | est. cycles | ms at clock | flash B (code) | RAM B | "
          "arena B | TFLM arena B | tuning s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="edgetune-bench-") as tmp:
        work = Path(tmp)
        for target_name in args.targets:
            target = get_target(target_name)
            for model_name in args.models:
                model = load_model(MODELS / f"{model_name}.tflite")
                plain = measure(model_name, target, None, work, args.inputs)
                print(_row(model_name, target, "plain", plain, None), flush=True)
                if args.db is None:
                    db, seconds = vector_db(work / f"{model_name}-{target_name}.db", target, model, args.budget)
                    vector = measure(model_name, target, db, work, args.inputs)
                    print(_row(model_name, target, "vector", vector, seconds), flush=True)
                    continue
                path = args.db / f"{model_name}-{target.name}.db"
                if not path.is_file():
                    print(f"| {model_name} | {target.name} | tuned | not run: no {path.name} |", flush=True)
                    continue
                db = TuningDatabase(path)
                tuned = measure(model_name, target, db, work, args.inputs)
                print(_row(model_name, target, "tuned", tuned, None), flush=True)
                print(f"|  |  | limits: {limits(model, target, db, tuned['instructions'])} |", flush=True)


if __name__ == "__main__":
    main()
