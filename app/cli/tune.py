"""`edgetune tune` and `edgetune best`: tune one workload (or every workload of an export),
and show the best stored configuration of one."""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

import click

from edgetune.codegen import get_kernel
from edgetune.codegen.kernels.zero_points import parse_zero_points, with_zero_points
from edgetune.codegen.manifest import read_manifest
from edgetune.hal import Target
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase, check_strategy

from ..cluster import connect
from ..identity import recompute_estimates
from ..live_rank import check_code_readable
from ..progress import ProgressDisplay
from ..session import TuneRequest, TuneSummary, choose_objective, goal_of, parse_config, summarize, tune, workload_of
from ..user_kernels import first_failure, only_kernel
from . import options
from .errors import INTERRUPTED_EXIT, UserError, printable
from .npu import best_npu, run_npu_tune
from .summary import print_summary, summary_json


@click.command("tune")
@click.argument("kernel_name", metavar="KERNEL", required=False)
@options.target
@options.shape_or_export
@click.option("--from-export", "from_export", metavar="DIR",
              help="Re-tune every workload of an export, measuring its old best configurations first.")
@options.strategy
@options.budget
@options.jobs
@options.seed
@click.option("--initial", "initial", multiple=True, metavar="NAME=VALUE,...",
              help="A configuration to measure first, e.g. tile_m=4,tile_n=8,... (repeatable).")
@options.objective
@options.constraints
@click.option("--time-budget", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop starting new trials after this many seconds.")
@click.option("--patience", type=options.WholeNumber(min=1), default=None,
              help="Stop after this many evaluations without a new best.")
@options.db
@options.kernel_file
@click.option("--cluster", default=None, metavar="tcp://HOST:PORT",
              help="Build and run on this Dask scheduler's workers (docs/cluster.md); --jobs trials at once.")
@options.device
@click.option("--batch", default=None, type=options.WholeNumber(min=1), metavar="N",
              help="Variants per image and emulator boot (default: as many as the target's memory holds, "
                   "at most 16); 1: one at a time (docs/throughput.md).")
@click.option("--zero-point", "zero_points", multiple=True, metavar="NAME=VALUE",
              help="Tune on this zero point (e.g. b_zero=3) instead of the kernel's draw (the int8 kernels: "
                   "TFLite's conventions, weights symmetric); repeatable. Stored as a workload of its own, which "
                   "`export` does not ship.")
@options.as_json
@options.compilers
def tune_cmd(kernel_name, target_name, shape, from_export, strategy, budget, jobs, seed, initial, objective, constraints,
             time_budget, patience, db_path, kernel_files, cluster, device, batch, zero_points, as_json, compilers):
    """Tune KERNEL for one shape on a target. Re-running resumes: stored trials are kept.

    With --from-export DIR (and no KERNEL or --shape), re-tune exactly the workloads of an
    export, e.g. after a compiler upgrade made `edgetune verify` fail.

    With --device ethos-u55 (or another NPU of the target), the operator is compiled by Vela
    and its options are tuned; the objective is Vela's total_cycles estimate."""
    target = get_target(target_name)
    check_strategy(strategy)
    check_code_readable(strategy, target, device)  # before the database is opened
    kernel_name = kernel_name or only_kernel(kernel_files, from_export)
    search = dict(strategy=strategy, budget=budget, jobs=jobs, seed=seed, time_budget=time_budget, patience=patience)
    if zero_points and (from_export or device != "cpu"):
        raise UserError("--zero-point sets the inputs of one CPU kernel's tuning: give KERNEL and --shape "
                        "(no --from-export, no --device)")
    if device != "cpu":
        if from_export or not kernel_name or not shape:
            raise UserError("--device NPU tunes one operator: give KERNEL and --shape (no --from-export)")
        if objective or constraints:
            raise UserError("--objective and --constraint apply to CPU tuning; NPU tuning minimises Vela's total_cycles")
        if cluster:
            raise UserError("--cluster runs CPU kernels; Vela runs on this machine")
        if compilers:
            raise UserError("--compiler applies to CPU tuning; Vela compiles for the NPU")
        summary = run_npu_tune(kernel_name, target, device, shape, lambda: options.open_db(db_path),
                               show_progress=not as_json and sys.stderr.isatty(), initial=initial, **search)
        if as_json:
            click.echo(json.dumps(summary_json(summary, db_path), indent=2))
        else:
            print_summary(summary, show_stop=True)
        if summary.stopped == "interrupted":
            sys.exit(INTERRUPTED_EXIT)
        return
    bounds = options.bounds_of(constraints)
    if objective or bounds:
        choose_objective(target, objective or target.measures, bounds)  # names checked before anything runs
    if from_export:
        if kernel_name or shape or initial:
            raise UserError("--from-export re-tunes the export's own workloads: give no KERNEL, --shape or --initial")
        requests = _export_requests(Path(from_export), target, objective, bounds, batch, compilers, search)
    else:
        requests = [_kernel_request(kernel_name, shape, target, objective, bounds, initial, batch, compilers, search,
                                    parse_zero_points(zero_points))]
    summaries, interrupted = _run(requests, db_path, cluster, target,
                                  show_progress=not as_json and sys.stderr.isatty())
    _print_summaries(summaries, db_path, as_json, one=not from_export)
    if interrupted:
        if not summaries:
            click.echo("edgetune: interrupted before any trial was measured", err=True)
        sys.exit(INTERRUPTED_EXIT)
    if any(summary.best is None for summary in summaries):
        # Nothing to export (every trial failed: a reference that disagrees with the C, or
        # bounds nothing keeps): exit 1, as `best` and `model tune` do, so `tune && export`
        # in a script stops here. The summary above said why.
        sys.exit(1)


def _export_requests(folder: Path, target: Target, objective: str, bounds: tuple, batch, compilers: tuple[str, ...],
                     search: dict) -> list[TuneRequest]:
    """One request per workload of an earlier export: each re-tuned for what its kernel was
    exported by (unless told otherwise), its exported configuration measured first."""
    manifest = read_manifest(folder)
    if manifest.target != target.name:
        raise UserError(f"{folder}: exported for target {manifest.target!r}; pass --target {manifest.target}")
    return [TuneRequest(get_kernel(entry.kernel), target, get_kernel(entry.kernel).parse_shape(entry.shape_dict),
                        search["strategy"], search["budget"], search["jobs"], search["seed"],
                        *((objective, bounds) if objective or bounds else (entry.objective, entry.bounds)),
                        initial=(entry.config_dict,), time_budget=search["time_budget"],
                        patience=search["patience"], batch=batch, compilers=compilers)
            for entry in manifest.kernels]


def _kernel_request(kernel_name: str | None, shape: str | None, target: Target, objective: str, bounds: tuple,
                    initial: tuple[str, ...], batch, compilers: tuple[str, ...], search: dict,
                    zero_points: dict[str, int]) -> TuneRequest:
    if not kernel_name or not shape:
        missing = "--shape" if kernel_name else "KERNEL and --shape"
        raise UserError(f"give {missing} (or --from-export DIR)"
                        + (f", e.g. --shape {get_kernel(kernel_name).example_shape()}" if kernel_name else ""))
    kernel = get_kernel(kernel_name)
    shape_dict = kernel.parse_shape(shape)
    kernel.check_fits(target, shape_dict)
    kernel = with_zero_points(kernel, shape_dict, zero_points)
    space = kernel.tuning_space(target, shape_dict)
    return TuneRequest(kernel, target, shape_dict, search["strategy"], search["budget"], search["jobs"], search["seed"],
                       objective, bounds, time_budget=search["time_budget"], patience=search["patience"], batch=batch,
                       compilers=compilers, initial=tuple(parse_config(space, text) for text in initial))


def _run(requests: list[TuneRequest], db_path: str, cluster: str | None, target: Target, show_progress: bool
         ) -> tuple[list[TuneSummary], bool]:
    """The requests tuned here, or on a Dask cluster's workers (its client closed after). The
    database is opened once the cluster answered: a bad address creates no file."""
    client, executor = connect(cluster, target) if cluster else (None, None)
    try:
        return _tune_all(requests, options.open_db(db_path), executor, show_progress)
    finally:
        if client is not None:
            client.close()


def _print_summaries(summaries: list[TuneSummary], db_path: str, as_json: bool, one: bool) -> None:
    """Each run's summary and its first failure; as JSON, one object (`one`: a single
    workload was asked for) or a list."""
    if as_json:
        data = [summary_json(summary, db_path) for summary in summaries]
        click.echo(json.dumps((data[0] if data else None) if one else data, indent=2))
        return
    for summary in summaries:
        print_summary(summary, show_stop=True)
        failure = first_failure(options.open_db(db_path), summary.workload) if summary.failed else None
        if failure:
            click.echo(f"  {printable(failure)}")


def _tune_all(requests: list[TuneRequest], db: TuningDatabase, executor, show_progress: bool
              ) -> tuple[list[TuneSummary], bool]:
    """Tune each request in turn. Ctrl-C (SIGINT) ends the run: every trial already stored
    stays stored (each is committed as it completes), the trials in flight are dropped, and
    the summaries so far are returned with the interrupted one marked, so the command still
    says where it stands. Returns (summaries, interrupted)."""
    summaries = []
    for request in requests:
        before = progress = None
        try:
            workload = workload_of(request.kernel, request.target, request.shape)
            objective, bounds = _goal_shown(db, request)
            before = summarize(db, workload, objective, bounds=bounds)
            if show_progress:
                stored_best = None if before.best is None else before.best.trial.value(objective)
                progress = ProgressDisplay(objective, best=stored_best, bounds=bounds)
            summaries.append(tune(request, db, progress, executor))
        except KeyboardInterrupt:
            if progress is not None:
                progress.interrupted()
            if before is not None:  # else interrupted while preparing: nothing of it was measured
                after = summarize(db, workload, objective, bounds=bounds)
                summaries.append(replace(after, new_trials=after.trials - before.trials, stopped="interrupted"))
            return summaries, True
    return summaries, False


def _goal_shown(db: TuningDatabase, request: TuneRequest) -> tuple[str, tuple]:
    """The objective and bounds a run works to, for its progress line and an interrupted
    run's summary: as tune() resolves them (the request's, else the workload's stored goal,
    else the target's unit)."""
    goal = goal_of(db, workload_of(request.kernel, request.target, request.shape), request.target,
                   request.objective, request.bounds)
    return goal.objective, goal.bounds


def _tune_command(kernel: str, shape_text: str, target_name: str, db_path) -> str:
    """The `tune` command that fills the workload, as the user can paste it: their kernel files
    (a kernel of their own is unknown without them) and their target as they named it (a board
    file's path, not its name)."""
    words = ["edgetune", "tune", kernel]
    for path in click.get_current_context().meta.get("kernel_file_paths", ()):
        words += ["--kernel-file", str(path)]
    words += ["--shape", shape_text, "--target", str(target_name), "--db", str(db_path)]
    return " ".join(shlex.quote(word) for word in words)


@click.command("best")
@click.argument("kernel_name", metavar="KERNEL", required=False)
@options.target
@options.shape
@options.objective
@options.constraints
@options.db
@options.device
@options.kernel_file
@options.as_json
def best_cmd(kernel_name, target_name, shape, objective, constraints, db_path, device, kernel_files, as_json):
    """The best stored configuration of KERNEL for a shape on a target."""
    target = get_target(target_name)
    db = options.open_existing_db(db_path)
    kernel_name = kernel_name or only_kernel(kernel_files)
    if device != "cpu":
        summary = best_npu(kernel_name, target, device, shape, db)
    else:
        kernel = get_kernel(kernel_name)
        shape_dict = kernel.parse_shape(shape)
        bounds = options.bounds_of(constraints)
        recompute_estimates(db, target)
        workload = workload_of(kernel, target, shape_dict)
        goal = goal_of(db, workload, target, objective, bounds)  # what it was tuned for, unless overridden
        summary = summarize(db, workload, goal.objective, bounds=goal.bounds)
    if as_json:
        click.echo(json.dumps(summary_json(summary, db_path), indent=2))
    elif not summary.trials:  # not "0 trials stored (0 new)": say what is missing and how to get it
        w = summary.workload
        shape_text = ",".join(f"{k}={v}" for k, v in w.shape)
        hint = _tune_command(w.kernel, shape_text, target_name, db_path)
        click.echo(f"{w.kernel} {shape_text} on {w.target}: not tuned ({db_path} holds no trial of it); "
                   f"tune it first: {hint}")
    else:
        print_summary(summary)
    if summary.best is None:
        sys.exit(1)
