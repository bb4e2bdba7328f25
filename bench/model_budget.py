"""How many trials `model tune` needs to come within 3% of what four times its default budget
reaches (issue 30, goal 1), per committed MLPerf Tiny model.

Per model: one `model tune` (the library's tune_model, default strategy and scheduler) in a
fresh database with `--multiple` (4) times the default budget (`model tune`'s
default_model_budget: 32 trials per distinct workload, at least 512). A run with a smaller budget makes the same
choices as the first rounds of a larger one (the scheduler and each layer's search depend on
the trials stored so far only), so the model's total after each round of the long run is
what a run with that budget ends with; one run gives every budget's figure. Printed per
model: the total (sum over tuned layers of occurrences x best instructions) at the default
budget and at the long run's end, how far apart they are, the first budget within 3% of the
end, and the wall time of the whole run. The reference: issue 29's DS-CNN figures, measured
before this script (tuned layers 1,374,925 at the default budget of 32; its module 1,217,951
at 32 and 972,500 at 128: the module runs fewer instructions than the sum of its layers
measured alone).

usage: .venv/bin/python bench/model_budget.py [--models fc_autoencoder_ad ds_cnn_kws ...]
                                              [--target cortex-m55] [--multiple 4] [--seed 0]
                                              [--jobs 2] [--within 3] [--winners 2 0] [--keep-db DIR]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from edgetune.cli.options import default_model_budget
from edgetune.model import load_model
from edgetune.model import session
from edgetune.model.session import ModelRound, distinct_workloads, tune_model
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

MODELS = Path(__file__).resolve().parent.parent / "tests" / "data" / "models"
# Issue 29's table (QEMU AN547, instruction counts), before this script: DS-CNN's tuned layers
# at the default budget, and its exported module at 32 and 128 trials.
REFERENCE = {"ds_cnn_kws": "issue 29: tuned layers 1,374,925 at 32 trials; module 1,217,951 at 32, 972,500 at 128"}


def total_at(rounds: list[ModelRound], trials: int) -> float | None:
    """The model's total when `trials` trials were spent (the last round at or below it)."""
    reached = [r for r in rounds if r.spent <= trials]
    return reached[-1].total if reached else None


def trials_to_within(rounds: list[ModelRound], pct: float) -> int | None:
    """The fewest trials after which the total stays within `pct` percent of the last round's
    (the total never rises, so the first such round is where it enters for good)."""
    if not rounds or rounds[-1].total is None:
        return None
    bound = rounds[-1].total * (1 + pct / 100)
    return next(r.spent for r in rounds if r.total is not None and r.total <= bound)


def measure(name: str, target, multiple: int, seed: int, jobs: int, keep: Path | None = None) -> dict:
    model = load_model(MODELS / f"{name}.tflite")
    default = default_model_budget(len(distinct_workloads(model.layers, target)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tune.db" if keep is None else keep / f"{name}-w{session.WINNERS}.db"
        path.unlink(missing_ok=True)
        started = time.monotonic()
        summary = tune_model(model.layers, target, TuningDatabase(path), budget=default * multiple,
                             seed=seed, jobs=jobs)
        seconds = time.monotonic() - started
    rounds = list(summary.rounds)
    return dict(name=name, default=default, keys=[layer.workload.key() for layer in summary.layers], budget=summary.budget, at_default=total_at(rounds, default),
                at_end=rounds[-1].total if rounds else None, seconds=seconds, layers=summary.layers,
                rounds=rounds)


def report(row: dict, within: float, rounds_needed: int | None) -> None:
    """The model's figures, flushed as they come (a run takes minutes)."""
    gap = (row["at_default"] / row["at_end"] - 1) * 100 if row["at_default"] and row["at_end"] else None
    print(f"\n{row['name']}: default budget {row['default']} trials, long run {row['budget']}")
    print(f"  total at {row['default']:>4} trials: {_num(row['at_default'])}")
    print(f"  total at {row['budget']:>4} trials: {_num(row['at_end'])}  "
          f"(the default budget's is {'-' if gap is None else f'{gap:.1f}'}% above)")
    print(f"  trials to within {within:g}% of the long run: {rounds_needed} "
          f"({'within' if rounds_needed is not None and rounds_needed <= row['default'] else 'beyond'} the default)")
    print(f"  wall time of the long run: {row['seconds']:.0f} s (the load of other jobs on the machine included)")
    print("  rounds (trials: layer, model total): " + "; ".join(
        f"{r.spent}: w{row['keys'].index(r.workload.key())} {_num(r.total)}" for r in row["rounds"]))
    for layer in row["layers"]:
        print(f"    {layer.workload.kernel:<12} x{layer.weight} trials {layer.trials:>3} best {_num(layer.value):>10} "
              f"plain {_num(layer.baseline):>10}  {','.join(f'{k}={v}' for k, v in layer.workload.shape[:6])}")
    if row["name"] in REFERENCE:
        print(f"  reference: {REFERENCE[row['name']]}")
    print(flush=True)


def _num(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["fc_autoencoder_ad", "ds_cnn_kws"])
    parser.add_argument("--target", default="cortex-m55")
    parser.add_argument("--multiple", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--within", type=float, default=3.0)
    parser.add_argument("--winners", type=int, nargs="*", default=[session.WINNERS],
                        help="the similar layers' best configurations each round measures first "
                             f"(edgetune.model.session.WINNERS, {session.WINNERS}); several: one run each, "
                             "0 is the reference without them")
    parser.add_argument("--keep-db", type=Path, default=None, metavar="DIR",
                        help="keep each run's database as DIR/MODEL-wN.db")
    args = parser.parse_args()
    target = get_target(args.target)
    for name in args.models:
        for winners in args.winners:
            session.WINNERS = winners
            row = measure(name, target, args.multiple, args.seed, args.jobs, args.keep_db)
            print(f"\n[winners {winners}]", end="")
            report(row, args.within, trials_to_within(row["rounds"], args.within))

if __name__ == "__main__":
    main()
