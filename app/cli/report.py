"""`edgetune record`, `edgetune replay` and `edgetune report`: a workload's whole space
measured into a file, strategies tried against such a file instead of hardware, and the
plots and tables of a database."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from edgetune.codegen import get_kernel
from edgetune.targets import get_target, target_names
from edgetune.tuner import TuningDatabase, check_strategy
from edgetune.tuner.code_explore import KernelFit
from edgetune.tuner.code_rank import DEFAULT_POOL
from edgetune.tuner.recorded import load_recorded

from ..identity import recompute_estimates
from ..outputs import writable_file, writable_folder
from ..progress import ProgressDisplay
from ..replay import RANKED_TRANSFER, check_rank_with, record, replay_json
from ..user_kernels import only_kernel
from . import options
from .summary import print_summary, summary_json


@click.command("record")
@click.argument("kernel_name", metavar="KERNEL", required=False)
@options.target
@options.shape
@options.out_file("Recorded-space file to write (.json, or .json.gz).")
@options.jobs
@options.db
@options.kernel_file
@options.as_json
def record_cmd(kernel_name, target_name, shape, out_path, jobs, db_path, kernel_files, as_json):
    """Measure KERNEL's whole space for a shape on a target and write it to a file (resumable
    through the database: stored configurations are not measured again)."""
    kernel = get_kernel(kernel_name or only_kernel(kernel_files))
    target = get_target(target_name)
    shape_dict = kernel.parse_shape(shape)
    kernel.check_fits(target, shape_dict)
    writable_file(out_path, "--out", keep=(db_path,))
    db = options.open_db(db_path)
    progress = None if as_json or not sys.stderr.isatty() else ProgressDisplay(target.measures)
    summary, written = record(kernel, target, shape_dict, Path(out_path), db, jobs, progress)
    if as_json:
        click.echo(json.dumps({**summary_json(summary, db_path), "out": str(written)}, indent=2))
    else:
        print_summary(summary)
        click.echo(f"recorded space: {written}")


@click.command("replay")
@click.argument("space_file", metavar="SPACE_FILE")
@options.strategy
@options.budget
@options.seed
@click.option("--repeats", default=1, show_default=True, type=options.WholeNumber(min=1), help="Independent runs.")
@click.option("--prior", "prior_files", multiple=True,
              help="Recorded space of the same kernel elsewhere, for transfer learning (repeatable).")
@click.option("--rank-with", "rank_files", multiple=True, metavar="FILE",
              help="Recorded space with code features (repeatable): rank the strategy's proposals by their "
                   "compiled code, with a ranker learnt from these (never from SPACE_FILE itself). With "
                   f"--strategy {RANKED_TRANSFER} (which ranks by SPACE_FILE's code estimate): the "
                   "kernel's spaces elsewhere, whose ranking lets it vote from the first trial "
                   "(docs/code-ranking-live.md).")
@click.option("--rank-keep", default=None, type=click.FloatRange(0, 1, min_open=True),
              help="With --rank-with (not with --strategy transfer+code): run the strategy's proposals in its "
                   "order, skipping those ranked worse than this quantile of those seen [default: run the "
                   f"best-ranked of every {DEFAULT_POOL}].")
@options.recorded_objective
@options.as_json
def replay_cmd(space_file, strategy, budget, seed, repeats, prior_files, rank_files, rank_keep, objective, as_json):
    """Tune against a recorded space (edgetune's format or a Kernel Tuner cache file)
    instead of hardware. Configurations absent from the file are not legal. --budget counts
    evaluations per repeat; repeat r runs with --seed plus r. --json prints one object: every
    repeat's trials with their configurations and the strategy's time per proposal, the
    objective and edgetune's version."""
    if strategy != RANKED_TRANSFER:
        check_strategy(strategy)
    elif rank_keep is not None:
        raise click.UsageError(f"--strategy {RANKED_TRANSFER} takes no --rank-keep: it votes in `transfer`'s "
                               f"choices rather than skipping proposals")
    if rank_keep is not None and not rank_files:
        raise click.UsageError("--rank-keep skips proposals ranked by a ranker learnt from --rank-with FILE: give "
                               "--rank-with")
    recorded = load_recorded(space_file)
    prior = [load_recorded(p) for p in prior_files]
    rank_with = [load_recorded(p) for p in rank_files]
    check_rank_with(recorded, rank_with, strategy)
    result = replay_json(recorded, strategy, budget, seed, repeats, prior, rank_with, rank_keep, objective)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    optimum = "none (every entry failed)" if result["optimum"] is None else f"{result['optimum']:g}"
    click.echo(f"{recorded.path}: {result['size']} configurations ({result['failures']} failed), "
               f"optimum {result['objective']}={optimum}")
    ranking = result["code_ranking"]
    if ranking is not None:
        given = ranking["kernel_fit"]
        fit = "no kernel fit" if given is None else f"kernel fit {KernelFit(**given).text()}"
        judged = ", ".join(ranking["judged_on"]) or "no --rank-with space of the same kernel and target"
        click.echo(f"code ranking: {fit}, judged on {judged}")
    for run in result["repeats"]:
        failed = sum(v is None for v in run["trace"])
        best = "none" if run["best"] is None else f"{run['best']:g}"
        cost = "" if run["strategy_ms_per_proposal"] is None else \
            f", the strategy {run['strategy_ms_per_proposal']:.2f} ms per proposal"
        found = next((n + 1 for n, v in enumerate(run["trace"]) if v is not None and v == run["best"]), None)
        where = "" if found is None else f", first at evaluation {found}"
        click.echo(f"  seed {run['seed']}: best {best}{where}; {len(run['trace'])} evaluations ({failed} failed){cost}")


@click.command("report")
@options.db
@options.out_folder("the PNG plots and index.html")
@options.objective
@options.pricing_targets
@click.option("--model", "models", multiple=True, metavar="MODEL.tflite",
              help="Name, for each workload, the layers of this model it serves (repeatable).")
def report_cmd(db_path, out_dir, objective, board_names, models):
    """Plots (convergence, Pareto front, parameter effects), tables and one HTML page."""
    from ..report import check_objective, write_report  # matplotlib: imported to plot, not to start

    db = options.open_existing_db(db_path)
    _price_with_current_tables(db, board_names)
    check_objective(db, objective)  # before the output folder is created
    result = write_report(db, writable_folder(out_dir, "--out"), objective, models)
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
