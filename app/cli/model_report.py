"""`edgetune model report`: a model's per-layer breakdown (edgetune.model.report); `edgetune model
compare`: models x targets x compilers in one table (edgetune.model.compare)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from edgetune.model import load_model
from edgetune.targets import get_target

from edgetune.model.compare import compare_rows, compare_table

from ..session import choose_objective
from . import options


@click.command("report")
@click.argument("model_file", metavar="MODEL.tflite")
@options.target
@options.db
@options.out_folder("index.html and layers.png")
@options.objective
@options.as_json
@options.kernel_file
def model_report_cmd(model_file, target_name, db_path, out_dir, objective, as_json, kernel_files):
    """Per tuned layer of MODEL.tflite: its best trial against its plain C loop nest and its
    share of the model's total, as a bar chart and a table (docs/models.md)."""
    from edgetune.model.report import model_report, write_model_report  # matplotlib: imported to plot, not to start

    target = get_target(target_name)
    objective = choose_objective(target, objective)
    model = load_model(Path(model_file))
    db = options.open_existing_db(db_path)
    report = model_report(model, target, db, objective)
    index, plot = write_model_report(report, db, Path(out_dir))
    if as_json:
        click.echo(json.dumps({"index": str(index), "plot": str(plot), "objective": report.objective,
                               "tuned_total": report.tuned_total, "plain_total": report.plain_total,
                               "layers": [{"index": r.index, "op": r.op, "kernel": r.kernel, "shape": r.shape,
                                           "trial": r.trial, "tuned": r.tuned, "plain": r.plain} for r in report.rows]},
                              indent=2))
    else:
        click.echo(f"report: {index} ({plot.name})")


@click.command("compare")
@click.argument("model_files", metavar="MODEL.tflite...", nargs=-1, required=True)
@options.db
@click.option("--plain", is_flag=True,
              help="Also measure each model's plain C module (gcc -O3) on each target now, as a row of its own.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Draw each tuned row against its plain C module into this PNG (implies --plain).")
@options.as_json
@options.kernel_file
def model_compare_cmd(model_files, db_path, plain, plot_path, as_json, kernel_files):
    """One table of MODEL x target x compiler from the database: the model's instructions,
    estimated cycles and energy, kernel code and RAM, per compiler and for any; with --plain the
    plain C module beside them (docs/models.md)."""
    db = options.open_existing_db(db_path)
    rows = compare_rows([load_model(Path(f)) for f in model_files], db, plain=plain or plot_path is not None)
    if as_json:
        click.echo(json.dumps([{"model": r.model, "target": r.target, "compiler": r.compiler,
                                "workloads": r.workloads, "solved": r.solved, "totals": dict(r.totals),
                                "code_bytes": r.code_bytes, "ram_bytes": r.ram_bytes} for r in rows], indent=2))
    elif not rows:
        click.echo(f"{db_path} holds no trial of {', '.join(model_files)}'s layers")
    else:
        for line in compare_table(rows):
            click.echo(line)
    if plot_path is not None and rows:
        from edgetune.model.compare_plot import write_compare_plot  # matplotlib: imported to plot, not to start

        units = {r.target: get_target(r.target).measures for r in rows}
        drawn = write_compare_plot(rows, units, plot_path)
        message = f"plot: {plot_path}" if drawn else "plot: no tuned row has a plain C module to compare with; none drawn"
        click.echo(message, err=as_json)
