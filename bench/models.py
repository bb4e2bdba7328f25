"""A model's layers tuned together: the task scheduler's budget split against an even split.

Per target: the model's distinct layers (identical layers are one workload, counted as often
as they occur) are tuned twice with the same seed and the same total budget, each in a fresh
database: once with the gradient task scheduler (Ansor's, edgetune.tuner.scheduler), once
with the even split (every layer in turn). Printed: per layer, its weight, MACs, the trials
each split gave it and its best value both ways, next to its plain C loop nest at gcc -O3;
then the model's total (sum of weight * best) after every quarter of the budget, both ways,
and the tuning wall time. A run with a smaller budget makes the same choices as the first
rounds of a larger one, so each quarter's total is what a run with that budget ends with.

The layers: a model's own (`--tflite MODEL.tflite`; tests/data/models/ holds the MLPerf Tiny
models, Banbury et al., "MLPerf Tiny Benchmark", 2021), or a hand-written list: `--model
ds-cnn` (keyword spotting: a 10x4 stride-2 convolution on the 49x10 MFCC input, four
depthwise-separable blocks of 64 channels, the 64->12 classifier as a 1x1 convolution) or
`--model mobilenet` (MobileNetV1-0.25 on 96x96x3 for visual wake words: 20 distinct layers of
very different cost). The hand-written lists pad symmetrically (by 1 where the models pad
SAME), so they approximate the real models' first layers.

Per model, a summary table (one row per target): the tuned layers' total in the target's
unit (instructions in QEMU, time_ns on the host) and in estimated cycles (the HAL's cost
model) against their plain C loop nests, MACs per estimated cycle both ways, the even split's
total at the same budget, and the tuning wall time. `--trials-per-layer N` sets the budget to
N trials per distinct workload; `--keep-db DIR` keeps the gradient run's database as
DIR/MODEL-TARGET.db, which `bench/model_export.py --db DIR` exports.

usage: .venv/bin/python bench/models.py [--model ds-cnn|mobilenet | --tflite MODEL.tflite ...]
                                        [--targets host cortex-m55] [--budget N | --trials-per-layer N]
                                        [--round-trials N] [--seeds S ...] [--jobs J] [--keep-db DIR]
"""
from __future__ import annotations

import argparse
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from edgetune.codegen import get_kernel
from edgetune.model import load_model
from edgetune.model.session import ModelSummary, baseline_values, distinct_workloads, tune_model
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

# (kernel, shape) per operator, in model order.
DS_CNN_LIKE = [
    ("conv2d_s8", "h=49,w=10,cin=1,cout=64,kh=10,kw=4,stride=2,pad=1,dilation=1"),
    *[layer for _ in range(4) for layer in (
        ("dwconv2d_s8", "h=25,w=5,c=64,kh=3,kw=3,stride=1,pad=1,dilation=1"),
        ("conv2d_s8", "h=25,w=5,cin=64,cout=64,kh=1,kw=1,stride=1,pad=0,dilation=1"))],
    ("conv2d_s8", "h=1,w=1,cin=64,cout=12,kh=1,kw=1,stride=1,pad=0,dilation=1"),
]



def _separable(size: int, channels: int, out: int, stride: int) -> list[tuple[str, str]]:
    """A depthwise 3x3 (stride 1 or 2) on size x size x channels, then the 1x1 to `out`."""
    after = (size - 1) // stride + 1
    return [("dwconv2d_s8", f"h={size},w={size},c={channels},kh=3,kw=3,stride={stride},pad=1,dilation=1"),
            ("conv2d_s8", f"h={after},w={after},cin={channels},cout={out},kh=1,kw=1,stride=1,pad=0,dilation=1")]


# MobileNetV1 with width 0.25 on 96x96x3 (visual wake words): 20 distinct layers of
# very different cost; stride-2 layers padded symmetrically by 1 (SAME pads 0/1 in TFLite).
MOBILENET_LIKE = [
    ("conv2d_s8", "h=96,w=96,cin=3,cout=8,kh=3,kw=3,stride=2,pad=1,dilation=1"),
    *_separable(48, 8, 16, 1), *_separable(48, 16, 32, 2), *_separable(24, 32, 32, 1),
    *_separable(24, 32, 64, 2), *_separable(12, 64, 64, 1), *_separable(12, 64, 128, 2),
    *[layer for _ in range(5) for layer in _separable(6, 128, 128, 1)],
    *_separable(6, 128, 256, 2), *_separable(3, 256, 256, 1),
    ("conv2d_s8", "h=1,w=1,cin=256,cout=2,kh=1,kw=1,stride=1,pad=0,dilation=1"),
]
MODELS = {"ds-cnn": ("DS-CNN-like", DS_CNN_LIKE), "mobilenet": ("MobileNetV1-0.25-like", MOBILENET_LIKE)}


@dataclass(frozen=True)
class Layer:
    """What tune_model reads of a model's layer."""

    index: int
    kernel: str | None
    shape: tuple[tuple[str, int], ...]
    macs: int


def output_size(shape: dict, axis: str) -> int:
    """Output rows (axis "h") or columns ("w") of a convolution, from per-axis or shared keys."""
    side = {"h": ("top", "bottom"), "w": ("left", "right")}[axis]
    stride = shape.get(f"stride_{axis}", shape.get("stride", 1))
    dilation = shape.get(f"dilation_{axis}", shape.get("dilation", 1))
    pads = sum(shape.get(f"pad_{s}", shape.get("pad", 0)) for s in side)
    return (shape[axis] + pads - dilation * (shape[f"k{axis}"] - 1) - 1) // stride + 1


def macs_of(kernel: str, shape: dict) -> int:
    taps = output_size(shape, "h") * output_size(shape, "w") * shape["kh"] * shape["kw"]
    if kernel == "dwconv2d_s8":
        return taps * shape["c"] * shape.get("mult", 1)
    return taps * shape["cin"] * shape["cout"]


def layers_of(operators: list[tuple[str, str]]) -> list[Layer]:
    layers = []
    for index, (kernel, text) in enumerate(operators):
        shape = get_kernel(kernel).parse_shape(text)
        layers.append(Layer(index, kernel, tuple(shape.items()), macs_of(kernel, shape)))
    return layers


def both_ways(layers, target, args, seed: int, keep: Path | None = None) -> dict[str, tuple[ModelSummary, float]]:
    """Gradient then even split, each in a fresh database; the gradient one kept at `keep`."""
    runs = {}
    budget = budget_of(layers, target, args)
    for scheduler in ("gradient", "even"):
        with tempfile.TemporaryDirectory() as tmp:
            path = keep if keep is not None and scheduler == "gradient" else Path(tmp) / "model.db"
            if path.exists():
                path.unlink()
            started = time.monotonic()
            summary = tune_model(layers, target, TuningDatabase(path), budget=budget, seed=seed, jobs=args.jobs,
                                 scheduler=scheduler, round_trials=args.round_trials, baselines=False)
            runs[scheduler] = (summary, time.monotonic() - started)
    return runs


def budget_of(layers, target, args) -> int:
    """--budget, or --trials-per-layer times the model's distinct workloads on the target."""
    if args.trials_per_layer:
        return args.trials_per_layer * len(distinct_workloads(layers, target))
    return args.budget


def plain_values(layers, target) -> dict[str, dict]:
    """Every measured value of each distinct layer's plain C loop nest (gcc -O3), by workload
    key: instructions and estimated cycles from one run (tune_model's baseline gives one)."""
    values = {}
    for lw in distinct_workloads(layers, target):
        measured = baseline_values(lw, target)
        if measured is not None:
            values[lw.workload.key()] = measured
    return values


def total_after(summary: ModelSummary, trials: int) -> float | None:
    """The model's total when `trials` trials were spent (the last round at or below it)."""
    reached = [r for r in summary.rounds if r.spent <= trials]
    return reached[-1].total if reached else None


def quarters(summary: ModelSummary) -> list[int]:
    return [summary.budget * quarter // 4 for quarter in (1, 2, 3, 4)]


def _best(layer, unit: str):
    return None if layer.best is None else layer.best.trial.value(unit)


def _weighted(layers, value_of) -> float | None:
    values = [value_of(layer) for layer in layers]
    return None if None in values else sum(layer.weight * v for layer, v in zip(layers, values))


def report(target, seed: int, runs, plain: dict) -> dict:
    """Per layer and the model's totals; returns the summary row's figures."""
    gradient, even = runs["gradient"][0], runs["even"][0]
    unit = gradient.objective
    print(f"\n{target.name}: objective {unit}, budget {gradient.budget} trials, seed {seed}")
    print(f"{'layer (kernel, shape)':>78} {'w':>2} {'MACs':>8} {'trials g/e':>10} {'gradient':>11} {'even':>11} "
          f"{'plain C':>11} {'cycles g':>11} {'cycles C':>11}")
    for g, e in zip(gradient.layers, even.layers):
        shape = ",".join(f"{k}={v}" for k, v in g.workload.shape)
        base = plain.get(g.workload.key(), {})
        print(f"{g.workload.kernel + ' ' + shape:>78} {g.weight:>2} {g.macs:>8} {f'{g.trials}/{e.trials}':>10} "
              f"{_num(g.value):>11} {_num(e.value):>11} {_num(base.get(unit)):>11} "
              f"{_num(_best(g, 'cycles')):>11} {_num(base.get('cycles')):>11}")
    figures = totals(gradient, even, plain, runs)
    print(f"model total (sum of weight * best) {unit}: gradient {_num(figures['tuned'])}, "
          f"plain C loops {_num(figures['plain'])}; estimated cycles: gradient {_num(figures['tuned_cycles'])}, "
          f"plain C {_num(figures['plain_cycles'])}")
    for trials in quarters(gradient):
        g, e = total_after(gradient, trials), total_after(even, trials)
        ratio = f"{e / g:.3f}" if g and e else "-"
        print(f"  after {trials:>4} trials: gradient {_num(g):>12}  even {_num(e):>12}  even / gradient {ratio}")
    print(f"wall time: gradient {runs['gradient'][1]:.0f} s, even {runs['even'][1]:.0f} s")
    return figures


def totals(gradient: ModelSummary, even: ModelSummary, plain: dict, runs) -> dict:
    unit = gradient.objective
    macs = sum(layer.weight * layer.macs for layer in gradient.layers)
    return dict(target=gradient.target, unit=unit, budget=gradient.budget, macs=macs,
                tuned=gradient.total, even=even.total,
                plain=_weighted(gradient.layers, lambda l: plain.get(l.workload.key(), {}).get(unit)),
                tuned_cycles=_weighted(gradient.layers, lambda l: _best(l, "cycles")),
                plain_cycles=_weighted(gradient.layers, lambda l: plain.get(l.workload.key(), {}).get("cycles")),
                gradient_s=runs["gradient"][1], even_s=runs["even"][1])


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def summary_table(name: str, rows: list[dict]) -> None:
    """One markdown row per target: the figures side by side, ratios plain / tuned."""
    print(f"\n{name}: all tuned layers, weighted by occurrence")
    print("| target | unit | budget | tuned | plain C | plain/tuned | est. cycles tuned | est. cycles plain C | "
          "plain/tuned | MACs/cycle tuned | MACs/cycle plain | even split total | even/gradient | tuning s (g+e) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        per_cycle = lambda c: f"{r['macs'] / c:.3f}" if c else "-"
        print(f"| {r['target']} | {r['unit']} | {r['budget']} | {_num(r['tuned'])} | {_num(r['plain'])} | "
              f"{_ratio(r['plain'], r['tuned'])} | {_num(r['tuned_cycles'])} | {_num(r['plain_cycles'])} | "
              f"{_ratio(r['plain_cycles'], r['tuned_cycles'])} | {per_cycle(r['tuned_cycles'])} | "
              f"{per_cycle(r['plain_cycles'])} | {_num(r['even'])} | {_ratio(r['even'], r['tuned'])} | "
              f"{r['gradient_s']:.0f}+{r['even_s']:.0f} |", flush=True)


def report_seeds(target, all_runs) -> None:
    """Over the seeds: the geometric mean of even / gradient after each quarter of the budget."""
    print(f"\n{target.name}, {len(all_runs)} seeds: geometric mean of the model's total even / gradient")
    for trials in quarters(all_runs[0]["gradient"][0]):
        ratios = [total_after(runs["even"][0], trials) / total_after(runs["gradient"][0], trials) for runs in all_runs
                  if total_after(runs["gradient"][0], trials) and total_after(runs["even"][0], trials)]
        mean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
        wins = sum(ratio > 1 for ratio in ratios)
        print(f"  after {trials:>4} trials: {'-' if mean is None else f'{mean:.3f}'} "
              f"(gradient lower in {wins} of {len(ratios)}, higher in {sum(ratio < 1 for ratio in ratios)})")


def _num(value) -> str:
    return "-" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="ds-cnn", help="a hand-written layer list")
    parser.add_argument("--tflite", nargs="*", default=(), help=".tflite models' layers instead (edgetune.model)")
    parser.add_argument("--targets", nargs="*", default=["host", "cortex-m55"])
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--trials-per-layer", type=int, default=0,
                        help="budget = this many trials per distinct workload (overrides --budget)")
    parser.add_argument("--round-trials", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0], help="one comparison per seed")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep-db", type=Path, default=None,
                        help="keep the gradient run's database as DIR/MODEL-TARGET.db (for bench/model_export.py)")
    args = parser.parse_args()
    models = [(path, list(load_model(path).layers)) for path in args.tflite]
    if not models:
        name, operators = MODELS[args.model]
        models = [(name, layers_of(operators))]
    if args.keep_db:
        args.keep_db.mkdir(parents=True, exist_ok=True)
    for name, layers in models:
        run_model(name, layers, args)


def run_model(name, layers, args) -> None:
    print(f"\n## {name}: {len(layers)} operators, {sum(layer.macs for layer in layers):,} MACs; "
          f"rounds of {args.round_trials} trials, transfer strategy", flush=True)
    rows = []
    for target_name in args.targets:
        target = get_target(target_name)
        keep = args.keep_db / f"{Path(str(name)).stem}-{target.name}.db" if args.keep_db else None
        plain = plain_values(layers, target)
        all_runs = []
        for seed in args.seeds:
            all_runs.append(both_ways(layers, target, args, seed, keep if seed == args.seeds[0] else None))
            figures = report(target, seed, all_runs[-1], plain)
            if seed == args.seeds[0]:
                rows.append(figures)
        if len(all_runs) > 1:
            report_seeds(target, all_runs)
    summary_table(str(name), rows)


if __name__ == "__main__":
    main()
