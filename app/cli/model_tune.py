"""`edgetune model tune MODEL.tflite`: tune every tunable layer of a TFLite model on a target
(identical layers once, the budget split across layers by the task scheduler:
app/model/session.py, docs/models-tuning.md), then check each tuned layer's best variant,
run on the target with the model's own weights and quantisation, against TFLite Micro
(app/model/check.py). Exit 1 when a layer differs from TFLite Micro or has no feasible
variant; bad input exits 2 (errors.py), like every command."""
from __future__ import annotations

import json
import sys
from dataclasses import asdict

import click

from edgetune.model import ModelError, check_fits, load_model
from edgetune.targets import get_target
from edgetune.tuner import check_strategy
from edgetune.tuner.scheduler import SCHEDULERS

from edgetune.model.check import LayerCheck, check_model
from edgetune.model.session import ModelRound, ModelSummary, compact_shape, progress_line, tune_model

from edgetune.codegen import get_kernel
from edgetune.model.export import layer_variants
from edgetune.model.ram_fit import fastest_ram, fit_ram, room_for
from edgetune.model.code_plan import estimated_ram
from edgetune.model.ram_tune import measure_lean, with_lean

from ..live_rank import check_code_readable
from ..session import TuneRequest, choose_objective
from . import options
from .summary import ranking_evidence
from .model_ram import export_command, ram_fit_json, ram_fit_lines, ram_parts

ROUND_TRIALS = 4  # trials per scheduler round, when the budget allows


def _value(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _ratio(tuned: float | None, plain: float | None) -> str:
    return "-" if tuned is None or not plain else f"{tuned / plain:.2f}x"


def print_model_summary(summary: ModelSummary) -> None:
    click.echo(f"{summary.target}: {summary.spent} of {summary.budget} trials spent by the {summary.scheduler} "
               f"scheduler over {counted(len(summary.layers), 'distinct workload')} ({summary.objective})")
    click.echo(f"  {'layers':<22} {'trials':>6} {'tuned':>14} {'plain C':>14} {'ratio':>7}  workload")
    for layer in summary.layers:
        served = ",".join(map(str, layer.layers))
        w = layer.workload
        click.echo(f"  {served:<22} {layer.trials:>6} {_value(layer.value):>14} {_value(layer.baseline):>14} "
                   f"{_ratio(layer.value, layer.baseline):>7}  {w.kernel} {compact_shape(dict(w.shape))}")
    total, plain = summary.total, summary.baseline_total
    # Honest about what it is (issue 29, goal 6): each layer measured alone, not the module,
    # which also runs the library operators, and whose layers run on other memory and
    # neighbours (a DS-CNN 1x1 convolution: 141,352 alone, 113,017 in its module).
    click.echo(f"  sum of the tuned layers measured alone ({summary.objective}, weighted by occurrence): {_value(total)}"
               + (f" against {_value(plain)} with plain C loops ({_ratio(total, plain)})" if plain else ""))
    click.echo(f"  not the module's figure: `edgetune model export` then `model verify` measure the module whole "
               "(library operators included)")
    unmeasured = [layer for layer in summary.layers if layer.baseline is None]
    if unmeasured:  # a bare '-' in the table left a new user guessing
        click.echo(f"  plain C '-': {_why_no_plain_loop(unmeasured)}")
    for layer in summary.unsolved:
        click.echo(f"  layers {','.join(map(str, layer.layers))}: no feasible trial "
                   f"({', '.join(f'{k} {v}' for k, v in sorted(layer.failures.items())) or 'none measured'})")
    for layer in summary.layers:  # what the scheduler's catch-up rounds could not fix (a larger --budget may)
        if layer.value is not None and layer.baseline and layer.value > layer.baseline:
            click.echo(f"  layers {','.join(map(str, layer.layers))}: the best of {layer.trials} trials is slower "
                       f"than the plain C loop ({_value(layer.value)} against {_value(layer.baseline)})")
    print_code_rankings(summary)


def print_code_rankings(summary: ModelSummary) -> None:
    """Per layer, what `transfer+code`'s code ranking did (docs/code-ranking-live.md): its
    evidence before any trial, and after how many of the layer's rounds the code had its say."""
    ranked = [layer for layer in summary.layers if layer.code_ranking is not None]
    if ranked:
        click.echo("  code ranking, per layer (docs/code-ranking-live.md):")
    for layer in ranked:
        use, kernel = layer.code_ranking, layer.workload.kernel
        said = (f"the code voted after {use.rounds_voting} of {use.rounds} rounds"
                + (" (from the first plan on)" if use.voted_from_start else ""))
        click.echo(f"    layers {','.join(map(str, layer.layers))}: "
                   f"{ranking_evidence(use.kernel_fit, kernel)}; {said}; "
                   f"{use.compiled} candidates compiled and ranked")


def counted(n: int, word: str) -> str:
    """`1 tuned layer`, `6 tuned layers` (model show's and model tune's lines)."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def _why_no_plain_loop(layers) -> str:
    """Why the table has no plain C loop for these layers: their kernel has none (the 16x8
    convolutions), or it was not measured (the target has no gcc, or the run failed)."""
    kernels = sorted({layer.workload.kernel for layer in layers})
    without = [name for name in kernels if not hasattr(get_kernel(name), "render_naive")]
    said = []
    if without:
        said.append(f"{', '.join(without)} {'has' if len(without) == 1 else 'have'} no plain C loop nest to measure "
                    "against")
    if len(without) < len(kernels):
        said.append(f"{'the other layers' if without else 'its'} plain loop was not measured (the target has no gcc, "
                    "or it failed)")
    return "; ".join(said)


def check_lines(checks: list[LayerCheck]) -> list[str]:
    """One line a checked layer, its columns as wide as their longest entry (a kernel of your
    own, `leaky_relu_s8`, pushed the verdicts out of line)."""
    widths = (max([18] + [len(c.op) for c in checks]), max([12] + [len(c.kernel) for c in checks]))
    return [_check_line(check, widths) for check in checks]


def _check_line(check: LayerCheck, widths: tuple[int, int]) -> str:
    if check.ok:
        verdict = f"bit-exact with {check.oracle} on {check.inputs} inputs" + (" (remembered)" if check.remembered else "")
    else:
        verdict = f"{'DIFFERS' if check.checked else 'not checked'}: {check.problem}"
    op_width, kernel_width = widths
    return f"  layer {check.index:>3} {check.op:<{op_width}} {check.kernel:<{kernel_width}} {verdict}"


def _summary_json(summary: ModelSummary, checks: tuple[LayerCheck, ...], db_path: str) -> dict:
    return {
        "target": summary.target, "objective": summary.objective, "scheduler": summary.scheduler,
        "budget": summary.budget, "spent": summary.spent, "db": db_path,
        "total": summary.total, "plain_total": summary.baseline_total, "untuned": list(summary.untuned),
        "total_is": "the sum of the tuned layers measured alone, weighted by occurrence (not the module's figure)",
        "workloads": [{"kernel": l.workload.kernel, "shape": dict(l.workload.shape), "layers": list(l.layers),
                       "trials": l.trials, "best": l.value, "plain": l.baseline,
                       "config": l.best.trial.config.as_dict() if l.best else None,
                       "code_ranking": asdict(l.code_ranking) if l.code_ranking else None}
                      for l in summary.layers],
        "checks": [{"layer": c.index, "op": c.op, "kernel": c.kernel, "ok": c.ok, "checked": c.checked, "inputs": c.inputs,
                    "problem": c.problem, "oracle": c.oracle, "config": c.config, "remembered": c.remembered}
                   for c in checks],
    }


def bounded_choice(model, target, db, room, strategy, seed, jobs, objective, bounds, compilers):
    """Under --max-ram: the low-RAM variants the bound needs measured (ram_tune.py), then
    the choice under it (RamBoundError, one line, when none fits)."""
    first = next(layer for layer in model.layers if layer.kernel is not None)
    template = TuneRequest(get_kernel(first.kernel), target, {}, strategy, 0, jobs, seed, objective, bounds,
                           compilers=compilers)
    lean = measure_lean(model, target, db, room, template, objective, compilers)
    return fit_ram(model, target, layer_variants(model, target, db, objective, bounds, compilers), room.max_ram), lean


def print_bounded(fit, lean, model, target, export: str) -> None:
    measured = sum(r.measured for r in lean)
    if measured:
        click.echo(f"  --max-ram: {measured} low-RAM variants of {len(lean)} workloads measured beyond the budget "
                   "(lean configurations near each one's fastest; counted in the table above)")
    code_ram = estimated_ram(model, target, fit.max_ram - fit.fitted.total)
    for line in ram_fit_lines(fit, code_ram):
        click.echo(line)
    if code_ram:
        click.echo("  (code and constants copied to RAM: estimated before rendering; `model export` plans them "
                   "within what the bound leaves, the rest in flash)")
    click.echo(f"  the module: {export}")
    click.echo("  (without --max-ram, the fastest variants)")


def print_ram(model, target, db, objective, bounds, compilers) -> None:
    """The RAM the fastest variants plan, and how to bound it (the default stays the fastest)."""
    fastest = fastest_ram(model, target, layer_variants(model, target, db, objective, bounds, compilers))
    click.echo(f"  RAM of the module with these variants: {fastest.total:,} bytes planned ({ram_parts(fastest)}); "
               "to bound it, tune and export with --max-ram BYTES (docs/model-ram.md)")


@click.command("tune")
@click.argument("model_file", metavar="MODEL.tflite")
@options.target
@options.model_budget
@click.option("--scheduler", type=click.Choice(SCHEDULERS), default="gradient", show_default=True,
              help="How the budget is split across layers: Ansor's gradient scheduler, or evenly.")
@options.strategy
@options.jobs
@options.seed
@options.objective
@options.constraints
@options.db
@click.option("--no-check", "no_check", is_flag=True, help="Skip the check of every tuned layer against TFLite Micro.")
@click.option("--recheck", is_flag=True, help="Check every layer again, also a variant found bit-exact before with the "
              "same model, target, toolchain and seed (remembered by content).")
@options.max_ram
@options.as_json
@options.compilers
@options.kernel_file
def model_tune_cmd(model_file, target_name, budget, scheduler, strategy, jobs, seed, objective, constraints, db_path,
                   no_check, max_ram, as_json, kernel_files, compilers, recheck):
    """Tune every layer of MODEL.tflite on a target: identical layers once, the budget spent
    where it lowers the model's total most; then check each tuned layer against TFLite Micro."""
    model = load_model(model_file)
    target = get_target(target_name)
    check_fits(model, target)
    check_strategy(strategy)
    check_code_readable(strategy, target)  # before the database is opened
    bounds = options.bounds_of(constraints)
    export = (export_command(model_file, target_name, db_path, max_ram, objective, constraints, compilers)
              if max_ram is not None else "")
    objective = choose_objective(target, objective, bounds)
    distinct = len(model.workloads())
    if budget is None:
        budget = options.default_model_budget(distinct)
    if budget < distinct:
        raise ModelError(f"--budget {budget}: {model_file} has {distinct} distinct workloads to tune, "
                         f"each needs at least one trial: give --budget {distinct} or more (without --budget, "
                         f"{options.default_model_budget(distinct)})")
    # Rounds small enough that every workload gets one within the budget; a round runs its
    # trials `jobs` at a time, so a budget that small also runs fewer at once.
    round_trials = max(1, min(ROUND_TRIALS, budget // distinct))
    jobs = min(jobs, round_trials)
    show = not as_json and sys.stderr.isatty()

    def progress(state: ModelRound) -> None:
        if show:
            click.echo(progress_line(state, objective), err=True)

    # A RAM bound the tensors alone exceed is refused before anything is measured; else each
    # layer's search proposes no variant whose scratch could not fit beside them.
    room = room_for(model, target, max_ram) if max_ram is not None else None
    limits = room.scratch_limits() if room is not None else None
    db = options.open_db(db_path)
    summary = tune_model(model.layers, target, db, budget=budget, strategy=strategy, seed=seed, jobs=jobs,
                         objective=objective, bounds=bounds, progress=progress, scheduler=scheduler,
                         round_trials=round_trials, compilers=compilers, scratch_limits=limits)
    fit, lean = (bounded_choice(model, target, db, room, strategy, seed, jobs, objective, bounds, compilers)
                 if room is not None else (None, ()))
    summary = with_lean(summary, db, lean, compilers) if lean else summary
    # Under a bound, the layers are checked on the variants it chose (those the export runs).
    chosen = {key: entry.config for key, entry in fit.chosen().items()} if fit is not None else None
    checks = () if no_check else check_model(model, target, db, objective, bounds, seed, compilers=compilers,
                                             recheck=recheck, chosen=chosen)
    if as_json:
        code_ram = estimated_ram(model, target, fit.max_ram - fit.fitted.total) if fit is not None else 0
        click.echo(json.dumps(dict(_summary_json(summary, checks, db_path), max_ram=ram_fit_json(fit, code_ram),
                                   lean_trials=sum(r.measured for r in lean), export_command=export or None),
                                   indent=2))
    else:
        print_model_summary(summary)
        if fit is not None:
            print_bounded(fit, lean, model, target, export)
        elif not summary.unsolved:
            print_ram(model, target, db, objective, bounds, compilers)
        if checks:
            judges = "TFLite Micro" + ("" if all(c.oracle == "TFLite Micro" for c in checks) else
                                       " (CUSTOM operators: their kernel's reference)")
            remembered = sum(c.remembered for c in checks)
            again = (f"; {remembered} remembered from an earlier check of the same model, variants, target and "
                     "toolchain, not run again (--recheck runs them)") if remembered else ""
            click.echo(f"checked against {judges} ({counted(len(checks), 'tuned layer')}, the model's own weights{again}):")
            for line in check_lines(checks):
                click.echo(line)
    if summary.unsolved or any(not c.ok for c in checks):
        sys.exit(1)
