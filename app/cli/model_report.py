"""`edgetune model report`: a model's per-layer breakdown (edgetune.model_report)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from edgetune.codegen.model import load_model
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

from .model import model_group
from ..model_report import model_report, write_model_report
from ..report import ReportError
from ..session import choose_objective
from ..user_kernels import kernel_file_option


@model_group.command("report")
@click.argument("model_file", metavar="MODEL.tflite")
@click.option("--target", "target_name", required=True, help="Target name or .toml file.")
@click.option("--db", "db_path", default="edgetune.db", show_default=True, help="Tuning database with the layers' trials.")
@click.option("--out", "out_dir", required=True, help="Folder for index.html and layers.png.")
@click.option("--objective", default="", help="Value to compare (default: the target's own unit).")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
@kernel_file_option
def model_report_cmd(model_file, target_name, db_path, out_dir, objective, as_json, kernel_files):
    """Per tuned layer of MODEL.tflite: its best trial against its plain C loop nest and its
    share of the model's total, as a bar chart and a table (docs/models.md)."""
    target = get_target(target_name)
    objective = choose_objective(target, objective)
    model = load_model(Path(model_file))
    if not Path(db_path).is_file():
        raise ReportError(f"--db {db_path}: no such database")
    db = TuningDatabase(Path(db_path))
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
