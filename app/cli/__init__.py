"""The `edgetune` command line. Names become objects here and nowhere else."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import click

from edgetune.codegen import KERNELS, get_kernel
from edgetune.codegen.manifest import read_manifest
from edgetune.hal import Target
from edgetune.hal.loader import ALLOW_TOOLS_ENV
from edgetune.targets import get_target, target_names
from edgetune.tuner import STRATEGIES, TrialSelection, TuningDatabase, check_strategy, parse_bound
from edgetune.tuner.database import read_jsonl
from edgetune.tuner.code_rank import DEFAULT_POOL
from edgetune.tuner.recorded import load_recorded
from edgetune.tuner.strategies import DEFAULT_STRATEGY

from .. import __version__
from ..errors import EdgetuneError
from ..replay import record, replay_json
from ..cluster import connect
from ..outputs import writable_file, writable_folder
from ..progress import ProgressDisplay
from ..report import check_objective, write_report
from ..identity import recompute_estimates
from ..sharing import ImportCheck, parse_workload_selection
from ..session import MAX_SEED, TuneRequest, TuneSummary, choose_objective, goal_of, parse_config, summarize, tune, workload_of
from ..verify import export_and_measure, manifest_target, verify_export
from .npu import best_npu, place_cmd, run_npu_tune
from .cache import cache_group
from .model import model_group
from . import model_tune  # noqa: F401 - registers `model tune` in model_group
from . import model_report  # noqa: F401 - registers `model report` in model_group
from ..user_kernels import first_failure, kernel_file_option, load_installed, only_kernel, show_kernel_warnings

# Exit status of a bug (sysexits.h EX_SOFTWARE, "internal software error"): distinct from
# bad input (2), a failed check (1) and an interrupt (130).
BUG_EXIT_CODE = 70
INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C
TRACEBACK_ENV = "EDGETUNE_TRACEBACK"


def error_line(message: str) -> str:
    """The one form of every user-facing error: `edgetune: error: ...` on exactly one line.
    Whatever the message quotes (a path, a value read from a file) is shown with its line
    breaks and other control characters escaped (a newline as \\n, ESC as \\x1b), so a
    name cannot split the line or drive the terminal."""
    return f"edgetune: error: {_printable(message)}"


def _printable(message: str) -> str:
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in message)


class UserError(EdgetuneError, click.ClickException):
    """One line on stderr naming what is wrong, exit status 2."""

    exit_code = 2

    def show(self, file=None):
        click.echo(error_line(self.message), err=True)


def _guard(fn):
    """Turn edgetune's own input errors (EdgetuneError, and nothing else: any other
    exception is a bug, reported as one by _OneLineErrors) into one line and exit status 2."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError:
            raise
        except EdgetuneError as exc:
            raise UserError(str(exc)) from None

    return wrapper


def _report_bug(exc: Exception) -> None:
    """An exception that is not an EdgetuneError escaped a command: a bug in edgetune, never
    bad input. One line saying so (the traceback too when $EDGETUNE_TRACEBACK is set), then
    exit status BUG_EXIT_CODE."""
    if os.environ.get(TRACEBACK_ENV):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    hint = "" if os.environ.get(TRACEBACK_ENV) else f"; {TRACEBACK_ENV}=1 prints the traceback"
    click.echo(f"edgetune: internal error: {type(exc).__name__}: {_printable(str(exc))} "
               f"(a bug in edgetune, not in your input: please report it{hint})", err=True)
    sys.exit(BUG_EXIT_CODE)


def _open_db(path: str) -> TuningDatabase:
    return TuningDatabase(Path(path))


def _open_existing_db(path: str) -> TuningDatabase:
    """For commands that only read results: a missing file is an error, not a new database."""
    if not Path(path).exists():
        raise UserError(f"{path}: no such database (run `edgetune tune` first)")
    return _open_db(path)


def _target_json(target: Target, full: bool = False) -> dict:
    data = {"name": target.name, "description": target.description, "arch": target.arch,
            "core": {"name": target.core.name, "count": target.core.count, "clock_hz": target.core.clock_hz},
            "vector_units": [v.name for v in target.vector_units],
            "runner": target.runner.kind, "measures": target.measures,
            "compilers": [c.name for c in target.compilers]}
    if full:
        data["vector_units"] = [{"name": v.name, "register_bits": v.register_bits, "registers": v.registers,
                                 "lanes": dict(v.lanes), "int8_macs_per_cycle": v.int8_macs_per_cycle,
                                 "source": v.source} for v in target.vector_units]
        data["memory"] = [{"name": m.name, "kind": m.kind, "base": m.base, "size": m.size, "access": m.access,
                           "source": m.source} for m in target.memory]
        data["caches"] = [{"level": c.level, "kind": c.kind, "size": c.size, "line": c.line} for c in target.caches]
        data["power"] = None if target.power is None else {
            "active_mw": target.power.active_mw, "idle_mw": target.power.idle_mw, "source": target.power.source}
        data["cost"] = None if target.cost is None else {
            "source": target.cost.source, "static_mw": target.cost.static_mw, "issue_width": target.cost.issue_width,
            "overlapping_units": list(target.cost.overlapping_units),
            "classes": {name: {"cycles": c.cycles, "unit": c.unit, "energy_pj": c.energy_pj} for name, c in target.cost.classes}}
        data["measured_values"] = list(target.measured_values)
        data["core"].update(isa=target.core.isa, fpu=target.core.fpu, source=target.core.source,
                            extensions=list(target.core.extensions))
        data["npus"] = [{"name": n.name, "product": n.product, "macs_per_cycle": list(n.macs_per_cycle),
                         "clock_hz": n.clock_hz, "memory_modes": [m.name for m in n.memory_modes],
                         "ports": [{"name": p.name, "memory": p.memory, "region": p.region, "data_bits": p.data_bits,
                                    "writable": p.writable} for p in n.ports], "source": n.source} for n in target.npus]
        data["file"] = target.source_file
    return data


class _OneLineErrors(click.Group):
    """Click's own usage errors (an unknown option, a missing argument, a bad number) in
    edgetune's convention too: one line naming the culprit, exit status 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            command = exc.ctx.command_path[len(exc.ctx.find_root().command_path):].strip() if exc.ctx else ""
            where = f"{command}: " if command else ""
            UserError(f"{where}{exc.format_message()} (see --help)").show()
            sys.exit(UserError.exit_code)
        except click.ClickException as exc:
            if isinstance(exc, UserError):
                exc.show()
            else:  # click's own (a file it could not open, ...): the same one-line form
                click.echo(error_line(exc.format_message()), err=True)
            sys.exit(exc.exit_code)
        except click.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):  # Ctrl-C in a command other than `tune`
                click.echo("edgetune: interrupted (Ctrl-C); every trial already stored is kept: "
                           "run the same command again to resume", err=True)
                sys.exit(INTERRUPTED_EXIT)
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except EdgetuneError as exc:  # raised outside a guarded command (e.g. while parsing options)
            UserError(str(exc)).show()
            sys.exit(UserError.exit_code)
        except Exception as exc:  # noqa: BLE001 - whatever is left is a bug, and shows as one
            _report_bug(exc)
        # Without standalone mode click returns a command's exit code instead of exiting.
        sys.exit(result if isinstance(result, int) else 0)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgetune")
@click.option("--allow-tool", "allow_tools", multiple=True, metavar="PATH",
              help=f"Let target files run the program at this absolute path (repeatable; adds to ${ALLOW_TOOLS_ENV}).")
def main(allow_tools):
    """Auto-tune C kernels for embedded and edge targets, and bake the best into C."""
    for path in allow_tools:
        if not path.startswith("/") or "\n" in path:
            raise click.BadParameter(f"{path!r} is not an absolute path", param_hint="--allow-tool")
    if allow_tools:  # the environment, so worker and flasher processes started from here agree
        os.environ[ALLOW_TOOLS_ENV] = ":".join(filter(None, (os.environ.get(ALLOW_TOOLS_ENV, ""), *allow_tools)))
    for problem in load_installed():  # kernels of installed packages (edgetune.kernels entry points)
        click.echo(f"edgetune: warning: installed kernel not loaded: {_printable(problem)}", err=True)
    show_kernel_warnings(lambda text: click.echo(f"edgetune: warning: {_printable(text)}", err=True))


# --- targets ----------------------------------------------------------------------------
@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@_guard
def targets(ctx, as_json):
    """List the targets (or `targets show NAME`)."""
    if ctx.invoked_subcommand:
        return
    items = [get_target(name) for name in target_names()]
    if as_json:
        click.echo(json.dumps([_target_json(t, full=True) for t in items], indent=2))
        return
    for t in items:
        units = ",".join(v.name for v in t.vector_units) or "-"
        click.echo(f"{t.name:14} {t.runner.kind:7} {t.core.clock_hz / 1e6:8.0f} MHz  vector: {units:20} {t.description}")


@targets.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guard
def targets_show(name, as_json):
    """Everything the HAL knows about one target (a name or a path to a .toml file)."""
    t = get_target(name)
    data = _target_json(t, full=True)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{t.name}: {t.description}\n  file: {t.source_file}")
    click.echo(f"  core: {t.core.name} x{t.core.count}, {t.core.isa}, {t.core.clock_hz / 1e6:.0f} MHz"
               + (f", extensions: {', '.join(t.core.extensions)}" if t.core.extensions else ""))
    for v in t.vector_units:
        lanes = ", ".join(f"{d}x{n}" for d, n in v.lanes)
        click.echo(f"  vector: {v.name} ({v.register_bits}-bit x{v.registers}; {lanes})")
    for m in t.memory:
        click.echo(f"  memory: {m.name:6} {m.kind:5} {m.base:#010x} {m.size // 1024:6} KiB {m.access}")
    for c in t.caches:
        click.echo(f"  cache: L{c.level} {c.kind} {c.size // 1024} KiB, {c.line} B lines")
    if t.power:
        click.echo(f"  power: {t.power.active_mw} mW active, {t.power.idle_mw} mW idle ({t.power.source})")
    if t.cost:
        units = f"; overlapping units {', '.join(t.cost.overlapping_units)}" if t.cost.overlapping_units else ""
        click.echo(f"  cost model: issue width {t.cost.issue_width:g}{units}; static {t.cost.static_mw:g} mW ({t.cost.source})")
    for n in t.npus:
        ports = ", ".join(f"{p.name}={p.memory}" for p in n.ports)
        click.echo(f"  npu: {n.name} ({n.product}; MACs/cycle {'/'.join(map(str, n.macs_per_cycle))}; {ports}; "
                   f"modes {', '.join(m.name for m in n.memory_modes)})")
    cpu = f" -cpu {t.runner.cpu}" if t.runner.cpu else ""
    click.echo(f"  runner: {t.runner.kind} {t.runner.program} {t.runner.machine}{cpu}".rstrip())
    click.echo(f"  compilers: {', '.join(c.name + '=' + c.command for c in t.compilers)}")


# --- kernels ----------------------------------------------------------------------------
@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--target", "target_name", default="cortex-m55", show_default=True,
              help="Target whose legal parameter values are listed.")
@kernel_file_option
@_guard
def kernels(as_json, target_name, kernel_files):
    """List the kernels and their tunable parameters (with --kernel-file, only those files' kernels)."""
    target = get_target(target_name)
    items = []
    for kernel in [KERNELS[name] for name in kernel_files] if kernel_files else list(KERNELS.values()):
        if hasattr(kernel, "warn_unknown_units"):  # a user kernel: say why a misspelt unit's path is not listed
            kernel.warn_unknown_units(target)
        space = kernel.tuning_space(target, kernel.parse_shape(kernel.example_shape()))
        items.append({"name": kernel.name, "version": kernel.version, "description": kernel.description,
                      "shape": list(kernel.shape_keys), "example_shape": kernel.example_shape(),
                      "parameters": {p.name: {"values": list(p.values), "doc": p.doc} for p in space.params}})
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    for item in items:
        click.echo(f"{item['name']} (shape {','.join(item['shape'])}): {item['description']}")
        for name, p in item["parameters"].items():
            click.echo(f"  {name:10} {', '.join(map(str, p['values']))}")


# --- tune / best ---------------------------------------------------------------------------
def _summary_json(summary: TuneSummary, db_path: str) -> dict:
    w = summary.workload
    data = {"kernel": w.kernel, "kernel_version": w.kernel_version, "target": w.target, "shape": w.shape_dict(),
            "objective": summary.objective, "constraints": [b.text() for b in summary.bounds],
            "infeasible": summary.infeasible, "trials": summary.trials, "new_trials": summary.new_trials,
            "failed": summary.failed, "failures": summary.failures, "db": str(db_path), "stopped": summary.stopped,
            "prior_trials": summary.prior_used,
            "best": None}
    if summary.best is not None:
        trial = summary.best.trial
        data["best"] = {"config": trial.config.as_dict(), **trial.values, "trial_id": summary.best.id,
                        "created": summary.best.created, "compiler_version": trial.info.get("compiler_version", "")}
    return data


STOP_REASONS = {
    "budget": "the budget is reached",
    "exhausted": "the space is exhausted: every legal configuration is measured, before the budget was reached",
    "time": "the --time-budget is spent",
    "patience": "--patience evaluations in a row brought no new best",
    "interrupted": "interrupted (Ctrl-C); the stored trials are kept: run the same command again to resume",
}


def _print_summary(summary: TuneSummary, show_stop: bool = False) -> None:
    w = summary.workload
    shape = ",".join(f"{k}={v}" for k, v in w.shape)
    click.echo(f"{w.kernel} {shape} on {w.target}: {summary.trials} trials stored "
               f"({summary.new_trials} new), {summary.failed} failed")
    if show_stop:  # only a run has a reason to stop; `best` and `record` print no such line
        click.echo(f"  stopped: {STOP_REASONS.get(summary.stopped, summary.stopped)}")
    if show_stop and summary.prior_stored:
        _print_priors(summary)
    if summary.failures:
        click.echo("  failures: " + ", ".join(f"{k} {v}" for k, v in sorted(summary.failures.items())))
    if summary.bounds:
        click.echo(f"  constraints: {', '.join(b.text() for b in summary.bounds)} ({summary.infeasible} trials break them)")
    if summary.best is None:
        click.echo("  no successful trial within the constraints" if summary.infeasible else "  no successful trial yet")
        return
    trial = summary.best.trial
    shown = [name for name in ("instructions", "cycles", "energy_uj", "time_ns", "code_bytes") if name in trial.values]
    click.echo(f"  best: {summary.objective}={trial.values[summary.objective]:g}  "
               + "  ".join(f"{name}={trial.values[name]:g}" for name in shown if name != summary.objective))
    click.echo(f"        {trial.config.key()}")


def _print_priors(summary: TuneSummary) -> None:
    where = f"{summary.workload.kernel} on other workloads ({', '.join(summary.prior_targets)})"
    if summary.prior_used:
        click.echo(f"  priors: learnt from {summary.prior_used} of {summary.prior_stored} stored trials of {where}")
    else:
        click.echo(f"  priors: none of the {summary.prior_stored} stored trials of {where} maps into this space")


SHAPE_HELP = ("Workload shape, e.g. m=16,n=16,k=32; convolutions take TFLite's geometry, e.g. "
              "h=96,w=96,cin=3,cout=8,kh=3,kw=3,stride=2,pad=same (or stride_h/_w, dilation_h/_w, pad_top/_bottom/"
              "_left/_right; pad=P, pad=valid).")
_shape_option = click.option("--shape", required=True, help=SHAPE_HELP)
_target_option = click.option("--target", "target_name", default="cortex-m55", show_default=True,
                              help="Target name or path to a target .toml file.")
_db_option = click.option("--db", "db_path", default="edgetune.db", show_default=True, help="Tuning database (SQLite).")
_objective_option = click.option("--objective", default="", help="Measured value to minimise (default: instructions "
                                 "on QEMU targets, time_ns on the host; also cycles, energy_uj, code_bytes, ...).")
_constraint_option = click.option("--constraint", "constraints", multiple=True, metavar="NAME<=VALUE",
                                  help="Bound on another measured value, e.g. energy_uj<=2.5 (repeatable).")


@main.command("tune")
@click.argument("kernel_name", metavar="KERNEL", required=False)
@_target_option
@click.option("--shape", help=SHAPE_HELP)
@click.option("--from-export", "from_export", metavar="DIR",
              help="Re-tune every workload of an export, measuring its old best configurations first.")
@click.option("--strategy", default=DEFAULT_STRATEGY, show_default=True, help=f"One of: {', '.join(sorted(STRATEGIES))}.")
@click.option("--budget", default=20, show_default=True, type=click.IntRange(min=1),
              help="Trials this workload should have in the database when the run ends.")
@click.option("--jobs", default=2, show_default=True, type=click.IntRange(min=1), help="Trials built and run at once.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, MAX_SEED), help="Seed of the search.")
@click.option("--initial", "initial", multiple=True, metavar="NAME=VALUE,...",
              help="A configuration to measure first, e.g. tile_m=4,tile_n=8,... (repeatable).")
@_objective_option
@_constraint_option
@click.option("--time-budget", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop starting new trials after this many seconds.")
@click.option("--patience", type=click.IntRange(min=1), default=None,
              help="Stop after this many evaluations without a new best.")
@_db_option
@kernel_file_option
@click.option("--cluster", default=None, metavar="tcp://HOST:PORT",
              help="Build and run on this Dask scheduler's workers (docs/cluster.md); --jobs trials at once.")
@click.option("--device", default="cpu", show_default=True,
              help="cpu, or an NPU of the target (ethos-u55, ethos-u65): tune Vela's options instead.")
@click.option("--batch", default=None, type=click.IntRange(min=1), metavar="N",
              help="Variants per image and emulator boot (default: as many as the target's memory holds, "
                   "at most 16); 1: one at a time (docs/throughput.md).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object, no progress.")
@_guard
def tune_cmd(kernel_name, target_name, shape, from_export, strategy, budget, jobs, seed, initial, objective, constraints,
             time_budget, patience, db_path, kernel_files, cluster, device, batch, as_json):
    """Tune KERNEL for one shape on a target. Re-running resumes: stored trials are kept.

    With --from-export DIR (and no KERNEL or --shape), re-tune exactly the workloads of an
    export, e.g. after a compiler upgrade made `edgetune verify` fail.

    With --device ethos-u55 (or another NPU of the target), the operator is compiled by Vela
    and its options are tuned; the objective is Vela's total_cycles estimate."""
    target = get_target(target_name)
    check_strategy(strategy)
    kernel_name = kernel_name or only_kernel(kernel_files, from_export)
    if device != "cpu":
        if from_export or not kernel_name or not shape:
            raise UserError("--device NPU tunes one operator: give KERNEL and --shape (no --from-export)")
        if objective or constraints:
            raise UserError("--objective and --constraint apply to CPU tuning; NPU tuning minimises Vela's total_cycles")
        if cluster:
            raise UserError("--cluster runs CPU kernels; Vela runs on this machine")
        summary = run_npu_tune(kernel_name, target, device, shape, lambda: _open_db(db_path),
                               show_progress=not as_json and sys.stderr.isatty(), strategy=strategy, budget=budget,
                               jobs=jobs, seed=seed, initial=initial, time_budget=time_budget, patience=patience)
        if as_json:
            click.echo(json.dumps(_summary_json(summary, db_path), indent=2))
        else:
            _print_summary(summary, show_stop=True)
        if summary.stopped == "interrupted":
            sys.exit(INTERRUPTED_EXIT)
        return
    bounds = tuple(parse_bound(text) for text in constraints)
    if objective or bounds:
        choose_objective(target, objective or target.measures, bounds)  # names checked before anything runs
    if from_export:
        if kernel_name or shape or initial:
            raise UserError("--from-export re-tunes the export's own workloads: give no KERNEL, --shape or --initial")
        manifest = read_manifest(Path(from_export))
        if manifest.target != target.name:
            raise UserError(f"{from_export}: exported for target {manifest.target!r}; pass --target {manifest.target}")
        # Each workload is re-tuned for what its kernel was exported by, unless told otherwise.
        requests = [TuneRequest(get_kernel(entry.kernel), target, get_kernel(entry.kernel).parse_shape(entry.shape_dict),
                                strategy, budget, jobs, seed,
                                *((objective, bounds) if objective or bounds else (entry.objective, entry.bounds)),
                                initial=(entry.config_dict,), time_budget=time_budget, patience=patience,
                                batch=batch)
                    for entry in manifest.kernels]
    else:
        if not kernel_name or not shape:
            missing = "--shape" if kernel_name else "KERNEL and --shape"
            raise UserError(f"give {missing} (or --from-export DIR)"
                            + (f", e.g. --shape {get_kernel(kernel_name).example_shape()}" if kernel_name else ""))
        kernel = get_kernel(kernel_name)
        shape_dict = kernel.parse_shape(shape)
        kernel.check_fits(target, shape_dict)
        space = kernel.tuning_space(target, shape_dict)
        requests = [TuneRequest(kernel, target, shape_dict, strategy, budget, jobs, seed, objective, bounds,
                                time_budget=time_budget, patience=patience, batch=batch,
                                initial=tuple(parse_config(space, text) for text in initial))]
    client, executor = connect(cluster, target) if cluster else (None, None)
    try:
        summaries, interrupted = _tune_all(requests, _open_db(db_path), executor,
                                           show_progress=not as_json and sys.stderr.isatty())
    finally:
        if client is not None:
            client.close()
    if as_json:
        data = [_summary_json(summary, db_path) for summary in summaries]
        click.echo(json.dumps(data if from_export else (data[0] if data else None), indent=2))
    else:
        for summary in summaries:
            _print_summary(summary, show_stop=True)
            failure = first_failure(_open_db(db_path), summary.workload) if summary.failed else None
            if failure:
                click.echo(f"  {_printable(failure)}")
    if interrupted:
        if not summaries:
            click.echo("edgetune: interrupted before any trial was measured", err=True)
        sys.exit(INTERRUPTED_EXIT)


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


@main.command("best")
@click.argument("kernel_name", metavar="KERNEL", required=False)
@_target_option
@_shape_option
@_objective_option
@_constraint_option
@_db_option
@click.option("--device", default="cpu", show_default=True, help="cpu, or an NPU of the target (ethos-u55, ethos-u65).")
@kernel_file_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guard
def best_cmd(kernel_name, target_name, shape, objective, constraints, db_path, device, kernel_files, as_json):
    """The best stored configuration of KERNEL for a shape on a target."""
    target = get_target(target_name)
    db = _open_existing_db(db_path)
    kernel_name = kernel_name or only_kernel(kernel_files)
    if device != "cpu":
        summary = best_npu(kernel_name, target, device, shape, db)
    else:
        kernel = get_kernel(kernel_name)
        shape_dict = kernel.parse_shape(shape)
        bounds = tuple(parse_bound(text) for text in constraints)
        recompute_estimates(db, target)
        workload = workload_of(kernel, target, shape_dict)
        goal = goal_of(db, workload, target, objective, bounds)  # what it was tuned for, unless overridden
        summary = summarize(db, workload, goal.objective, bounds=goal.bounds)
    if as_json:
        click.echo(json.dumps(_summary_json(summary, db_path), indent=2))
    else:
        _print_summary(summary)
    if summary.best is None:
        sys.exit(1)


@main.command("export")
@_target_option
@click.option("--out", "out_dir", required=True, help="Folder for the header, sources and manifest.")
@_db_option
@click.option("--objective", default="", help="Choose every kernel by this value instead of what its workload "
              "was tuned for.")
@_constraint_option
@kernel_file_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guard
def export_cmd(target_name, out_dir, db_path, objective, constraints, kernel_files, as_json):
    """Bake the best variant of every tuned workload of a target into C sources: each
    chosen by the objective and constraints it was tuned with, unless overridden."""
    target = get_target(target_name)
    db = _open_existing_db(db_path)
    bounds = tuple(parse_bound(text) for text in constraints)
    result = export_and_measure(db, target, Path(out_dir), objective, bounds)
    if as_json:
        click.echo(json.dumps({"header": str(result.header), "sources": [str(s) for s in result.sources],
                               "manifest": str(result.manifest), "kernels": len(result.entries)}, indent=2))
    else:
        # The tuned value is the variant run on its own; built as exported (through the
        # shape dispatcher) it may differ, and that is the value `verify` checks.
        exported = {k.function: k.exported_value for k in read_manifest(result.folder).kernels}
        for entry in result.entries:
            within = f" within {', '.join(b.text() for b in entry.bounds)}" if entry.bounds else ""
            built = exported.get(entry.function)
            as_built = f", {built:g} as exported" if built is not None and built != entry.value else ""
            click.echo(f"  {entry.function}: {entry.objective}={entry.value:g}{within}{as_built} ({entry.config_text})")
        for reason in result.skipped:
            click.echo(f"  skipped {reason}", err=True)
        click.echo(f"header: {result.header}")


# --- record / replay -------------------------------------------------------------------------
@main.command("record")
@click.argument("kernel_name", metavar="KERNEL", required=False)
@_target_option
@_shape_option
@click.option("--out", "out_path", required=True, help="Recorded-space file to write (.json, or .json.gz).")
@click.option("--jobs", default=2, show_default=True, type=click.IntRange(min=1), help="Trials built and run at once.")
@_db_option
@kernel_file_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object, no progress.")
@_guard
def record_cmd(kernel_name, target_name, shape, out_path, jobs, db_path, kernel_files, as_json):
    """Measure KERNEL's whole space for a shape on a target and write it to a file (resumable
    through the database: stored configurations are not measured again)."""
    kernel = get_kernel(kernel_name or only_kernel(kernel_files))
    target = get_target(target_name)
    shape_dict = kernel.parse_shape(shape)
    kernel.check_fits(target, shape_dict)
    writable_file(out_path, "--out", keep=(db_path,))
    db = _open_db(db_path)
    progress = None if as_json or not sys.stderr.isatty() else ProgressDisplay(target.measures)
    summary, written = record(kernel, target, shape_dict, Path(out_path), db, jobs, progress)
    if as_json:
        click.echo(json.dumps({**_summary_json(summary, db_path), "out": str(written)}, indent=2))
    else:
        _print_summary(summary)
        click.echo(f"recorded space: {written}")


@main.command("replay")
@click.argument("space_file", metavar="SPACE_FILE")
@click.option("--strategy", default=DEFAULT_STRATEGY, show_default=True, help=f"One of: {', '.join(sorted(STRATEGIES))}.")
@click.option("--budget", default=20, show_default=True, type=click.IntRange(min=1), help="Evaluations per repeat.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, MAX_SEED), help="Seed of the first repeat (repeat r: seed + r).")
@click.option("--repeats", default=1, show_default=True, type=click.IntRange(min=1), help="Independent runs.")
@click.option("--prior", "prior_files", multiple=True,
              help="Recorded space of the same kernel elsewhere, for transfer learning (repeatable).")
@click.option("--rank-with", "rank_files", multiple=True, metavar="FILE",
              help="Recorded space with code features (repeatable): rank the strategy's proposals by their "
                   "compiled code, with a ranker learnt from these (never from SPACE_FILE itself).")
@click.option("--rank-keep", default=None, type=click.FloatRange(0, 1, min_open=True),
              help="With --rank-with: run the strategy's proposals in its order, skipping those ranked worse than "
                   f"this quantile of those seen [default: run the best-ranked of every {DEFAULT_POOL}].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_guard
def replay_cmd(space_file, strategy, budget, seed, repeats, prior_files, rank_files, rank_keep, as_json):
    """Tune against a recorded space (edgetune's format or a Kernel Tuner cache file)
    instead of hardware. Configurations absent from the file are not legal."""
    check_strategy(strategy)
    recorded = load_recorded(space_file)
    prior = [load_recorded(p) for p in prior_files]
    rank_with = [load_recorded(p) for p in rank_files]
    result = replay_json(recorded, strategy, budget, seed, repeats, prior, rank_with, rank_keep)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"{recorded.path}: {result['size']} configurations ({result['failures']} failed), "
               f"optimum {recorded.objective}={result['optimum']:g}")
    for run in result["repeats"]:
        failed = sum(v is None for v in run["trace"])
        best = "none" if run["best"] is None else f"{run['best']:g}"
        click.echo(f"  seed {run['seed']}: best {best} after {len(run['trace'])} evaluations ({failed} failed)")


@main.command("report")
@_db_option
@click.option("--out", "out_dir", required=True, help="Folder for the PNG plots and index.html.")
@click.option("--objective", default="", help="Measured value to plot [default: what each workload was tuned for "
              "where stored, else the target's unit, what `tune` minimises unless told otherwise].")
@click.option("--target", "board_names", multiple=True, metavar="NAME|FILE",
              help="A board file whose current cost tables price its trials (repeatable; shipped targets are "
                   "found by name).")
@_guard
def report_cmd(db_path, out_dir, objective, board_names):
    """Plots (convergence, Pareto front, parameter effects), tables and one HTML page."""
    db = _open_existing_db(db_path)
    _price_with_current_tables(db, board_names)
    check_objective(db, objective)  # before the output folder is created
    result = write_report(db, writable_folder(out_dir, "--out"), objective)
    click.echo(f"report: {result.index} ({len(result.images)} plots)")


def _price_with_current_tables(db: TuningDatabase, names) -> None:
    """Estimates of stored trials from today's target files: the ones named, and every
    shipped target the database holds trials of."""
    given = [get_target(name) for name in names]
    shipped = set(target_names())
    for name in sorted({w.target for w in db.workloads()} - {t.name for t in given}):
        if name in shipped:
            given.append(get_target(name))
    for target in given:
        recompute_estimates(db, target)


@main.group("db")
def db_group():
    """Share tuning results between machines as JSON lines."""


@db_group.command("export")
@_db_option
@click.option("--out", "out_path", required=True, help="JSON-lines file to write ('-' for stdout).")
@click.option("--workload", "workload_text", metavar="KERNEL[@vN][/TARGET[/SHAPE]]",
              help="Only the trials of these workloads (e.g. one definition of a kernel of your own: KERNEL@vN).")
@_guard
def db_export_cmd(db_path, out_path, workload_text):
    """Write every trial of the database (or of the workloads --workload names) as one JSON
    object per line."""
    selection = parse_workload_selection(workload_text) if workload_text is not None else None
    db = _open_existing_db(db_path)
    if out_path == "-":
        count = db.export_jsonl(sys.stdout, selection)
    else:
        writable_file(out_path, "--out", keep=(db_path,))
        with open(out_path, "w", encoding="utf-8") as out:
            count = db.export_jsonl(out, selection)
    click.echo(f"exported {count} trials", err=True)


@db_group.command("import")
@click.argument("in_path", metavar="FILE")
@_db_option
@click.option("--target", "target_files", multiple=True, metavar="FILE.toml",
              help="A target file the imported trials name (shipped targets are known; repeatable).")
@kernel_file_option
@_guard
def db_import_cmd(in_path, db_path, target_files, kernel_files):
    """Add the trials of a JSON-lines file as one batch; ones already stored are skipped.

    Every line is checked first (a legal configuration of its kernel's space for that
    target and shape; measured values finite, non-negative numbers): a bad line is refused
    naming its number and field, and then nothing is imported (docs/sharing.md)."""
    targets = []
    for name in target_files:
        if not name.endswith(".toml"):
            raise UserError(f"--target {name!r}: give a target file (.toml); shipped targets are known already")
        targets.append(get_target(name))
    if Path(in_path).exists() and not Path(in_path).is_file():  # a folder, or a pipe that would block for ever
        raise UserError(f"{in_path}: not a regular file")
    try:
        lines = Path(in_path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{in_path}: cannot read ({exc})") from None
    parsed = read_jsonl(lines, source=in_path, check=ImportCheck(targets))  # before the database is opened
    result = _open_db(db_path).store_imported(parsed, in_path)
    batch = f" as batch {result.batch} (`edgetune db remove --batch {result.batch}` undoes it)" if result.batch else ""
    click.echo(f"imported {result.added} trials ({result.present} already present){batch}")


@db_group.command("batches")
@_db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guard
def db_batches_cmd(db_path, as_json):
    """List the import batches: when, from which file, how many trials are still stored."""
    batches = _open_existing_db(db_path).batches()
    if as_json:
        click.echo(json.dumps([{"batch": b.id, "source": b.source, "imported_at": b.imported_at, "lines": b.lines,
                                "stored": b.stored} for b in batches], indent=2))
        return
    if not batches:
        click.echo("no import batches")
    for b in batches:
        click.echo(f"batch {b.id}: {b.imported_at}  {b.stored} of {b.lines} trials stored  from {b.source}")


@db_group.command("remove")
@_db_option
@click.option("--workload", "workload_text", metavar="KERNEL[@vN][/TARGET[/SHAPE]]",
              help="The trials of these workloads, e.g. matmul_s8/cortex-m55/m=8,n=16,k=16.")
@click.option("--batch", type=click.IntRange(min=1), default=None, help="The trials of one import batch (db batches).")
@click.option("--trial", "trial_id", type=click.IntRange(min=1), default=None, help="One trial, by its id.")
@click.option("--dry-run", is_flag=True, help="Say how many trials would go; remove nothing.")
@_guard
def db_remove_cmd(db_path, workload_text, batch, trial_id, dry_run):
    """Remove trials: by workload, by import batch or by id (given together: all must match)."""
    if workload_text is None and batch is None and trial_id is None:
        raise UserError("db remove: give --workload, --batch or --trial (see --help)")
    selection = parse_workload_selection(workload_text) if workload_text is not None else TrialSelection()
    selection = replace(selection, batch=batch, trial=trial_id)
    count = _open_existing_db(db_path).remove(selection, dry_run=dry_run)
    click.echo(f"would remove {count} trials (dry run)" if dry_run else f"removed {count} trials")


@main.command("verify")
@click.argument("folder", metavar="DIR")
@click.option("--target", "target_name", default=None,
              help="Target name or .toml file [default: the target the manifest names].")
@click.option("--db", "db_path", default=None, help="Also say when this database holds a better configuration.")
@click.option("--tolerance", "tolerance_pct", type=click.FloatRange(min=0), default=None,
              help="Allowed slow-down in percent [default: 0 on emulated targets, 15 on the host, "
                   "2 on a real board].")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=None, help="Seed of the fresh random inputs [default: a new one, printed].")
@click.option("--objective", default="", help="Check this value instead of the one each kernel was chosen by.")
@_constraint_option
@kernel_file_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guard
def verify_cmd(folder, target_name, db_path, tolerance_pct, seed, objective, constraints, kernel_files, as_json):
    """Check an export in the target's emulator: still correct, still as fast as recorded.

    Exit 0 when every kernel holds, 1 naming each kernel that is wrong or slower, 2 on bad
    input (a missing, damaged or foreign export)."""
    target = get_target(target_name) if target_name else manifest_target(Path(folder))
    db = _open_existing_db(db_path) if db_path is not None else None
    report = verify_export(Path(folder), target, tolerance_pct=tolerance_pct, seed=seed, db=db, objective=objective,
                           bounds=tuple(parse_bound(text) for text in constraints))
    if as_json:
        click.echo(json.dumps({
            "folder": str(report.folder), "target": report.target, "ok": report.ok,
            "tolerance_pct": report.tolerance_pct, "seed": report.seed,
            "kernels": [{"function": v.function, "kernel": v.kernel, "shape": v.shape, "ok": v.ok,
                         "objective": v.objective, "recorded": v.recorded, "measured": v.measured,
                         "problems": list(v.problems), "notes": list(v.notes)} for v in report.verdicts]}, indent=2))
    else:
        for v in report.verdicts:
            status = "ok  " if v.ok else "FAIL"
            click.echo(f"{status} {v.function}: {v.objective} {v.measured if v.measured is not None else '-'} "
                       f"(recorded {v.recorded if v.recorded is not None else '-'})")
            for line in (*v.problems, *v.notes):
                click.echo(f"       {line}")
        failed = [v.function for v in report.verdicts if not v.ok]
        click.echo(f"verify: {len(report.verdicts) - len(failed)} of {len(report.verdicts)} kernels hold "
                   f"(seed {report.seed}, tolerance {report.tolerance_pct:g}%)"
                   + (f"; failing: {', '.join(failed)}" if failed else ""))
    if not report.ok:
        sys.exit(1)


place_cmd.callback = _guard(place_cmd.callback)  # defined in npu_cli.py; same error convention
main.add_command(place_cmd)
main.add_command(cache_group)
for _command in model_group.commands.values():  # model_cli.py's commands; same error convention
    _command.callback = _guard(_command.callback)
main.add_command(model_group)
