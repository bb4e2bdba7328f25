"""Command-line pieces for the Ethos-U NPU: `tune/best --device NPU` (tune.py routes to
them) and `place`."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable

import click
from click.core import ParameterSource

from edgetune.model import load_model
from edgetune.npu import get_npu_operator, npu_space
from edgetune.hal import Target
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase, check_names, check_strategy

from edgetune.model.plan import figures_line, plan_model, write_model_plan
from edgetune.npu.layer_plan import Plan, PlanError, export_plan, load_network, plan_network
from edgetune.npu.session import NPU_OBJECTIVE, npu_workload, resolve_npu

from ..progress import ProgressDisplay
from ..session import TuneRequest, TuneSummary, parse_config, summarize, tune
from . import options


def run_npu_tune(kernel_name: str, target: Target, device: str, shape: str, open_db: Callable[[], TuningDatabase],
                 show_progress: bool = False, **search) -> TuneSummary:
    """Validate everything first: bad input must not create a database. `search`: the
    TuneRequest's search fields (strategy, budget, jobs, seed, time_budget, patience), and
    `initial`, configurations as NAME=VALUE,... texts of the operator's space."""
    npu = resolve_npu(target, device)
    operator = get_npu_operator(kernel_name)
    shape_dict = operator.parse_shape(shape)
    space = npu_space(target, npu, operator, shape_dict)
    initial = tuple(parse_config(space, text) for text in search.pop("initial", ()))
    request = TuneRequest(operator, target, shape_dict, initial=initial, device=npu.name, **search)
    db = open_db()
    workload = npu_workload(operator, target, npu, request.shape)
    before = summarize(db, workload, NPU_OBJECTIVE)
    stored_best = None if before.best is None else before.best.trial.value(NPU_OBJECTIVE)
    progress = ProgressDisplay(NPU_OBJECTIVE, best=stored_best) if show_progress else None
    try:
        return tune(request, db, progress)
    except KeyboardInterrupt:  # Ctrl-C: what is stored stays; the caller exits 130 on "interrupted"
        if progress is not None:
            progress.interrupted()
        after = summarize(db, workload, NPU_OBJECTIVE)
        return replace(after, new_trials=after.trials - before.trials, stopped="interrupted")


def best_npu(kernel_name: str, target: Target, device: str, shape: str, db: TuningDatabase) -> TuneSummary:
    npu = resolve_npu(target, device)
    operator = get_npu_operator(kernel_name)
    return summarize(db, npu_workload(operator, target, npu, operator.parse_shape(shape)), NPU_OBJECTIVE)


@click.command("place")
@click.argument("network_file", metavar="NETWORK_FILE")
@options.target
@options.npu_device
@click.option("--macs", type=int, default=None, help="The board's NPU MAC configuration [default: the largest offered].")
@options.db
@options.out_folder("the plan header, NPU models and CPU kernels")
@click.option("--npu-budget", default=12, show_default=True, type=options.WholeNumber(min=1),
              help="Vela configurations per layer to have measured (untuned layers are tuned first).")
@options.jobs
@options.seed
@options.random_strategy
@options.objective
@options.constraints
@options.as_json
@options.kernel_file
def place_cmd(network_file, target_name, device, macs, db_path, out_dir, npu_budget, jobs, seed, strategy,
              objective, constraints, as_json, kernel_files=()):
    """Place each layer of NETWORK_FILE (a network .toml, or a .tflite model) on the CPU or the NPU and export the plan.

    Per layer: the best tuned CPU kernel (from --db) against the best Vela configuration
    (tuned here if the database has none), counting NPU invocations and the copies between
    CPU and NPU memory. Writes DIR/edgetune_plan.h, DIR/plan.json, DIR/npu/*_vela.tflite and
    the CPU kernels in DIR/cpu/. --objective and --constraint choose the CPU kernels instead
    of what each was tuned for."""
    target = get_target(target_name)
    asked = click.get_current_context().get_parameter_source("device") is not ParameterSource.DEFAULT
    if asked and device != "none" and not target.npus:  # not in silence all on the CPU: the NPU asked for is not there
        raise PlanError(f"--device {device}: {target.name} has no NPU (leave --device out, or --device none, "
                        "to plan everything on the CPU)")
    if Path(network_file).suffix == ".tflite":
        _place_model(Path(network_file), target, device, macs, db_path, out_dir, objective, constraints, as_json)
        return
    npu = resolve_npu(target, device)
    network = load_network(Path(network_file))
    check_strategy(strategy)  # a name it does not know is said as such
    if strategy != "random":
        raise PlanError("--strategy: place tunes the NPU with random search")
    if macs is not None and macs not in npu.macs_per_cycle:
        raise PlanError(f"--macs: {npu.name} comes with {', '.join(map(str, npu.macs_per_cycle))} MACs per cycle")
    bounds = options.bounds_of(constraints)
    if objective or bounds:
        check_names(objective or target.measures, bounds, target.measured_values, target.name)
    db = options.open_db(db_path)
    plan = plan_network(network, target, npu, db, macs=macs, npu_budget=npu_budget, seed=seed, jobs=jobs,
                        objective=objective, bounds=bounds)
    exported = export_plan(plan, db, Path(out_dir))
    if as_json:
        click.echo(exported.plan_json.read_text(encoding="utf-8"), nl=False)
        return
    alternatives = [f"all on the NPU {plan.all_npu_cycles}" if plan.all_npu_cycles is not None else "all on the NPU impossible",
                    f"all on the CPU {plan.all_cpu_cycles}" if plan.all_cpu_cycles is not None else "all on the CPU impossible"]
    _echo_plan(plan, network.name, "layers", [f"plan: {plan.total_cycles} cycles ({'; '.join(alternatives)})"],
               [f"header: {exported.header}", *(f"npu model: {model}" for model in exported.npu_models),
                *([f"cpu kernels: {exported.cpu_export.header}"] if exported.cpu_export is not None else [])])
    sys.stdout.flush()


def _echo_plan(plan: Plan, name: str, what: str, totals: list[str], files: list[str]) -> None:
    """A placement, a network's or a model's: what was planned, each layer's or operator's
    explanation, the copy back, the totals, the files written."""
    target = plan.target
    click.echo(f"{name} on {target.name} + {plan.accelerator} ({len(plan.layers)} {what}; "
               f"CPU cycles at {target.core.clock_hz / 1e6:g} MHz)")
    for lp in plan.layers:
        click.echo(f"  {lp.explanation}")
    if plan.copy_out_cycles:
        click.echo(f"  output: +{plan.copy_out_cycles} cycles to copy {plan.copy_out_bytes} bytes back to CPU memory")
    for line in (*totals, *files):
        click.echo(line)


def _place_model(path: Path, target: Target, device: str, macs, db_path, out_dir, objective, constraints,
                 as_json) -> None:
    """`place MODEL.tflite`: every operator of the model (edgetune.model.plan). A board
    without an NPU, or --device none, plans everything on the CPU."""
    npu = None if device == "none" or not target.npus else resolve_npu(target, device)
    model = load_model(path)
    if npu is not None and macs is not None and macs not in npu.macs_per_cycle:  # before a database is made
        raise PlanError(f"--macs: {npu.name} comes with {', '.join(map(str, npu.macs_per_cycle))} MACs per cycle")
    bounds = options.bounds_of(constraints)
    if objective or bounds:
        check_names(objective or target.measures, bounds, target.measured_values, target.name)
    plan = plan_model(model, target, npu, options.open_db(db_path), macs, objective, bounds)
    plan_json, models = write_model_plan(plan, Path(out_dir))
    if as_json:
        click.echo(plan_json.read_text(encoding="utf-8"), nl=False)
        return
    npu_total = "impossible" if plan.all_npu_cycles is None else plan.all_npu_cycles
    total = (f"plan: {plan.total_cycles} cycles (all on the CPU {plan.all_cpu_cycles}; "
             f"tuned layers all on the NPU {npu_total})" if npu else f"plan: {plan.total_cycles} cycles, all on the CPU")
    _echo_plan(plan, path.name, "operators", [total, figures_line(plan)],
               [f"plan: {plan_json}", *(f"npu model: {model_path}" for model_path in models)])
