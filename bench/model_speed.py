"""Instructions, RAM and flash per inference of each MLPerf Tiny model's module on the
Cortex-M55 after a `model tune` at the default budget, beside TFLite Micro + CMSIS-NN's
(issue 29: goal 1, instructions <= 0.5x; goal 3, RAM <= 0.7x) and beside the
default-configuration module measured in the same run; per tuned layer, the variant the
export ships beside the layer's default-configuration and plain-loop trials of the same tune
(goal 2: never slower than either), and beside CMSIS-NN's kernel where issue 29 gives its
figure; with the tune's CPU time, the figure the default budget is chosen by (at most ~5
minutes on 2 cores).

Per model: `model tune` (the library's tune_model: default strategy, scheduler and round
size; `--budget` trials, default `model tune`'s own, or `--per-workload` trials per distinct
workload) in a fresh
database and, unless --warm-cache, a fresh build cache (EDGETUNE_CACHE), timed as the CPU
time of this process and its children (compilers, QEMU) during the tune, which a machine
shared with other jobs does not inflate as it does the wall time, and edgetune's own share
of it (this process: search, code generation, the database; bench/profile_tune.py's figure,
kept <= 25%); then the tuned module and
the default-configuration module (no database: every layer on its kernel's default
configuration, the space's first legal point: plain C, except dwconv2d_s8 where Helium is
offered, whose default is its pixel-lane Helium path) exported and run whole by `model verify`
(bit-exact with TFLite Micro, or the script stops): instructions of one inference, RAM
(arena, I/O, static scratch) and flash as `model verify` prints them. `model tune`'s own sum
(the tuned layers measured alone, weighted by occurrence; issue 29, goal 6) is printed
beside the module's figure.

Per tuned layer (workload), from the tune's database: the trial the export ships
(model.export.choose_layers, measured alone on the layer's tuning inputs), the trial of the
kernel's default configuration and of its plain loop nest (`vector=naive`, gcc -O3), the two
trials every layer's first round measures (model.session.default_seed, naive_seed), and
model tune's plain C baseline; a layer whose shipped variant is slower than any of them is
flagged.

Then the module under goal 3's bound (0.7x TFLite Micro's RAM): `model tune --max-ram`'s lean
trials measured into the same database (bench/model_ram.py's lean_trials, after the figures
above are taken), then `model export --max-ram`, or where the layers' variants alone cannot
meet the bound, `model export --max-ram --patch auto` (the first stages band by band,
docs/patches.md), verified whole the same way: the module a user gets with those flags,
whose instructions and RAM both goals judge together.

TFLite Micro's figures are reference constants (bench/model_ram.py's TFLM_M55, from issue 29),
and so are CMSIS-NN's four layers (CMSIS_NN_M55 below).

usage: .venv/bin/python bench/model_speed.py [--models ds_cnn_kws ...] [--budget N | --per-workload N]
                                             [--seed 0] [--jobs 2] [--warm-cache] [--keep-db DIR]
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from edgetune.cli.options import default_model_budget
from edgetune.model import load_model
from edgetune.model.export import choose_layers, export_model
from edgetune.model.patch_choice import choose_patch
from edgetune.model.session import (ModelSummary, compact_shape, default_seed, distinct_workloads, naive_seed,
                                    tune_model)
from edgetune.model.verify import verify_model
from edgetune.targets import get_target
from edgetune.tuner import SpaceError, TuningDatabase

sys.path.insert(0, str(Path(__file__).parent))
from model_ram import GOAL as RAM_GOAL, MODEL_NAMES, MODELS, TFLM_M55  # noqa: E402  (reference constants, with their source)
from model_ram import lean_trials, run as bounded_run  # noqa: E402  (model tune --max-ram's step; export + verify)

GOAL = 0.5  # issue 29, goal 1: instructions <= 0.5x TFLite Micro + CMSIS-NN's

# CMSIS-NN's kernel for one layer of a model, called alone on the Cortex-M55 (QEMU AN547,
# instructions counted by a plugin not edgetune's): (model, operator index) -> (the layer,
# instructions). Source: edgetune issue 29, "Where we are behind", "Layers behind CMSIS-NN".
CMSIS_NN_M55 = {
    ("ds_cnn_kws", 0): ("first convolution, cin 1, 10x4, stride 2", 289_328),
    ("fc_autoencoder_ad", 4): ("fully connected 128 -> 8", 1_077),
    ("fc_autoencoder_ad", 0): ("fully connected 640 -> 128", 40_942),
    ("mobilenet_v1_025_vww", 23): ("last stride-2 depthwise, 6x6x128", 26_294),
}


def cpu_seconds() -> tuple[float, float]:
    """User + system time so far of this process (edgetune's own: search, code generation,
    the database) and of its waited-for children (compilers, QEMU)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@dataclass(frozen=True)
class Module:
    """One module run whole by `model verify`: its figures as verify prints them."""
    instructions: int
    ram: int
    flash: int


def module_figures(path: Path, target, db: TuningDatabase | None, folder: Path, **export_options) -> Module:
    export_model(path, target, db, folder, **export_options)
    outcome = verify_model(folder, target, 1)
    if not outcome.ok:
        raise SystemExit(f"{path.name}: not bit-exact with TFLite Micro: {[i.problem for i in outcome.inferences]}")
    return Module(outcome.inferences[0].instructions, outcome.size.ram_bytes, outcome.size.flash_bytes)


@dataclass(frozen=True)
class LayerFigures:
    """One tuned workload's shipped variant beside its baselines, each measured alone on the
    layer's tuning inputs (None: not measured, or the trial failed)."""
    layers: tuple[int, ...]  # the operators it serves
    workload: str  # kernel and compact shape
    trials: int  # stored for it
    shipped: float | None  # the export's choice
    default: float | None  # the kernel's default configuration's trial
    naive: float | None  # its plain loop nest's trial (vector=naive, gcc -O3)
    plain: float | None = None  # model tune's plain C baseline (the loop nest outside the space)

    def behind(self) -> tuple[str, ...]:
        """What the shipped variant is slower than (issue 29, goal 2: nothing)."""
        against = (("default", self.default), ("plain loop", self.naive), ("plain C", self.plain))
        return tuple(name for name, value in against
                     if value is not None and (self.shipped is None or self.shipped > value))


def stored_value(space, records, config: dict | None, objective: str) -> float | None:
    """The value of `objective` of the stored trial of `config` (both taken as points of
    `space`, so a parameter added since the trial was stored takes its default); None when no
    trial of it is stored or it failed."""
    if config is None:
        return None
    wanted = space.make(config).key()
    for record in records:
        try:
            key = space.make(record.trial.config.as_dict()).key()
        except SpaceError:  # a value the space no longer offers
            continue
        if key == wanted and record.trial.value(objective) is not None:
            return record.trial.value(objective)
    return None


def layer_figures(model, target, db: TuningDatabase, summary: ModelSummary | None = None) -> tuple[LayerFigures, ...]:
    """Per tuned workload of `model`: the variant `model export` ships from `db` beside the
    default-configuration and plain-loop trials the tune seeded (and `summary`'s plain C
    baseline, when given)."""
    chosen, _ = choose_layers(model, target, db)
    plain = {r.workload.key(): r.baseline for r in summary.layers} if summary is not None else {}
    found = []
    for lw in distinct_workloads(model.layers, target):
        entry = chosen[(lw.kernel.name, model_shape(model, lw))]
        space, records = lw.kernel.tuning_space(target, lw.shape), db.proposals(lw.workload)
        default = stored_value(space, records, default_seed(lw, target, ()), entry.objective)
        naive = stored_value(space, records, next(iter(naive_seed(lw, target, ())), None), entry.objective)
        # No trial stored: the export ships the default configuration.
        shipped = entry.value if entry.trial_id else default
        found.append(LayerFigures(lw.layers, f"{lw.workload.kernel} {compact_shape(lw.shape)}", len(records), shipped,
                                  default, naive, plain.get(lw.workload.key())))
    return tuple(found)


def model_shape(model, lw) -> tuple:
    """The model's own shape key of a distinct workload (choose_layers' key)."""
    return next(w.shape for w in model.workloads() if set(w.layers) & set(lw.layers))


def measure(name: str, target, budget: int | None, per_workload: int | None, seed: int, jobs: int, work: Path,
            keep: Path | None) -> dict:
    path = MODELS / f"{name}.tflite"
    model = load_model(path)
    distinct = len(distinct_workloads(model.layers, target))
    if budget is None:
        budget = default_model_budget(distinct) if per_workload is None else per_workload * distinct
    db_path = (keep or work) / f"{name}.db"
    db_path.unlink(missing_ok=True)
    db = TuningDatabase(db_path)
    (own, children), wall = cpu_seconds(), time.monotonic()
    summary = tune_model(model.layers, target, db, budget=budget, seed=seed, jobs=jobs)
    (own_after, children_after), wall = cpu_seconds(), time.monotonic() - wall
    own, cpu = own_after - own, own_after - own + children_after - children
    row = dict(name=name, budget=budget, cpu=cpu, own=own, wall=wall, alone=summary.total,
               tuned=module_figures(path, target, db, work / f"{name}-tuned"),
               plain=module_figures(path, target, None, work / f"{name}-plain"),
               layers=layer_figures(model, target, db, summary))
    bound = int(RAM_GOAL * TFLM_M55[name]["ram"])
    lean = lean_trials(name, target, db, bound)
    return dict(row, bound=bound, lean=lean, bounded=bounded_module(name, target, db, work / f"{name}-bounded", bound))


def bounded_module(name: str, target, db: TuningDatabase, folder: Path, bound: int) -> dict:
    """The module within `bound` bytes of RAM as `model export --max-ram BOUND` makes it, or,
    where the layers' variants alone cannot meet it (MobileNet's first layers' tensors), as
    `model export --max-ram BOUND --patch auto` does: its first stages run band by band
    (docs/patches.md), the plan of fewest measured instructions within the bound."""
    plain = bounded_run(name, target, db, folder, 1, bound)
    if "refused" not in plain:
        return dict(plain, how="--max-ram")
    path = MODELS / f"{name}.tflite"
    best, _ = choose_patch(path, target, db, bound)
    if best.plan is None or best.ram > bound:
        return dict(plain, how="--max-ram, --patch auto")
    m = module_figures(path, target, db, folder, patch=best.plan, code_ram_room=bound - best.ram)
    return dict(instructions=m.instructions, ram=m.ram, flash=m.flash, how=f"--max-ram --patch auto ({best.plan.text})")


def _ratio(ours: float | None, reference: float | None) -> str:
    return "-" if ours is None or not reference else f"{ours / reference:.2f}"


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


MODEL_HEADER = (f"| model (budget) | module instructions | TFLM + CMSIS-NN | ratio | goal 1 <= {GOAL}x | RAM B | TFLM RAM B "
                f"| ratio | goal 3 <= {RAM_GOAL}x | flash B | TFLM flash B | ratio | default-config module: instructions "
                "| RAM B | flash B | tuned layers alone (model tune's sum) | layers behind (goal 2) | tune CPU s "
                "| own CPU % | tune wall s |\n"
                "|---|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def model_row(row: dict) -> str:
    ref, tuned, plain = TFLM_M55[row["name"]], row["tuned"], row["plain"]
    speed, ram = tuned.instructions / ref["instructions"], tuned.ram / ref["ram"]
    behind = sum(1 for layer in row["layers"] if layer.behind())
    cells = [f"{row['name']} ({row['budget']})", f"{tuned.instructions:,}", f"{ref['instructions']:,}", f"{speed:.2f}",
             "yes" if speed <= GOAL else "no", f"{tuned.ram:,}", f"{ref['ram']:,}", f"{ram:.2f}",
             "yes" if ram <= RAM_GOAL else "no", f"{tuned.flash:,}", f"{ref['flash']:,}", _ratio(tuned.flash, ref["flash"]),
             f"{plain.instructions:,}", f"{plain.ram:,}", f"{plain.flash:,}", _n(row["alone"]),
             f"{behind} of {len(row['layers'])}", f"{row['cpu']:.0f}", f"{100 * row['own'] / row['cpu']:.0f}",
             f"{row['wall']:.0f}"]
    return "| " + " | ".join(cells) + " |"


BOUNDED_HEADER = (f"| model | RAM bound B ({RAM_GOAL}x TFLM) | lean trials added | export | instructions | ratio "
                  f"| goal 1 <= {GOAL}x | RAM B | ratio | goal 3 <= {RAM_GOAL}x | flash B | ratio "
                  "| instructions against the fastest module |\n"
                  "|---|---:|---:|---|---:|---:|---|---:|---:|---|---:|---:|---:|")


def bounded_row(row: dict) -> str:
    """The module exported under goal 3's bound, beside TFLite Micro's figures and the fastest module's."""
    ref, m = TFLM_M55[row["name"]], row["bounded"]
    how = m.get("how", "--max-ram")
    if "refused" in m:
        return f"| {row['name']} | {row['bound']:,} | {row['lean']} | {how} | refused: {m['refused']} | | | | | | | | |"
    speed, ram = m["instructions"] / ref["instructions"], m["ram"] / ref["ram"]
    change = (m["instructions"] - row["tuned"].instructions) / row["tuned"].instructions
    cells = [row["name"], f"{row['bound']:,}", str(row["lean"]), how, f"{m['instructions']:,}", f"{speed:.2f}",
             "yes" if speed <= GOAL else "no", f"{m['ram']:,}", f"{ram:.2f}", "yes" if ram <= RAM_GOAL else "no",
             f"{m['flash']:,}", _ratio(m["flash"], ref["flash"]), f"{change:+.1%}"]
    return "| " + " | ".join(cells) + " |"


LAYER_HEADER = ("| model | layers | workload | trials | shipped | default config | shipped / default | plain loop "
                "(vector=naive) | shipped / plain loop | plain C (model tune's) | slower than |\n"
                "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")


def layer_row(name: str, layer: LayerFigures) -> str:
    cells = [name, ",".join(map(str, layer.layers)), layer.workload, str(layer.trials), _n(layer.shipped),
             _n(layer.default), _ratio(layer.shipped, layer.default), _n(layer.naive), _ratio(layer.shipped, layer.naive),
             _n(layer.plain), ", ".join(layer.behind()) or "nothing"]
    return "| " + " | ".join(cells) + " |"


CMSIS_HEADER = ("| model | layer | edgetune (shipped, alone) | CMSIS-NN | ratio | goal 2 <= CMSIS-NN |\n"
                "|---|---|---:|---:|---:|---|")


def cmsis_rows(name: str, layers: tuple[LayerFigures, ...]) -> list[str]:
    """Our shipped variant beside CMSIS-NN's kernel for the layers issue 29 gives a figure of."""
    rows = []
    for (model, index), (what, reference) in CMSIS_NN_M55.items():
        if model != name:
            continue
        ours = next((layer.shipped for layer in layers if index in layer.layers), None)
        verdict = "-" if ours is None else "yes" if ours <= reference else "no"
        rows.append(f"| {name} | {index}: {what} | {_n(ours)} | {reference:,} | {_ratio(ours, reference)} | {verdict} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODEL_NAMES), choices=MODEL_NAMES)
    parser.add_argument("--budget", type=int, default=None, help="the model's trials (default: model tune's)")
    parser.add_argument("--per-workload", type=int, default=None, help="or this many per distinct workload")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--warm-cache", action="store_true", help="keep EDGETUNE_CACHE as it is (default: a fresh one)")
    parser.add_argument("--keep-db", type=Path, default=None, metavar="DIR", help="keep each tune's database as DIR/MODEL.db")
    args = parser.parse_args()
    target = get_target("cortex-m55")
    print(MODEL_HEADER, flush=True)
    rows = []
    for name in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            if not args.warm_cache:  # each model's compiles counted in its own time
                os.environ["EDGETUNE_CACHE"] = str(Path(tmp) / "cache")
            row = measure(name, target, args.budget, args.per_workload, args.seed, args.jobs, Path(tmp), args.keep_db)
        rows.append(row)
        print(model_row(row), flush=True)
    print("\nThe module under goal 3's RAM bound (model tune --max-ram's lean trials, model export --max-ram):\n")
    print(BOUNDED_HEADER)
    for row in rows:
        print(bounded_row(row))
    print("\nPer tuned layer (instructions, each measured alone on the layer's tuning inputs):\n")
    print(LAYER_HEADER)
    for row in rows:
        for layer in row["layers"]:
            print(layer_row(row["name"], layer))
    cmsis = [line for row in rows for line in cmsis_rows(row["name"], row["layers"])]
    if cmsis:
        print("\nIssue 29's layers against CMSIS-NN's kernel (instructions, alone):\n")
        print(CMSIS_HEADER)
        print("\n".join(cmsis))


if __name__ == "__main__":
    main()
