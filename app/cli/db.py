"""`edgetune db ...`: a database's trials as JSON lines, out and in (as import batches),
and removing trials by workload, batch or id (docs/sharing.md)."""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import click

from edgetune.targets import get_target
from edgetune.tuner import TrialSelection
from edgetune.tuner.database import read_jsonl

from ..outputs import writable_file
from ..sharing import ImportCheck, import_into, parse_workload_selection
from . import options
from .errors import UserError


@click.group("db")
def db_group():
    """Share tuning results between machines as JSON lines."""


@db_group.command("export")
@options.db
@options.out_file("JSON-lines file to write ('-' for stdout).")
@options.workload
def db_export_cmd(db_path, out_path, workload_text):
    """Write every trial of the database (or of the workloads --workload names) as one JSON
    object per line."""
    selection = parse_workload_selection(workload_text) if workload_text is not None else None
    db = options.open_existing_db(db_path)
    if out_path == "-":
        count = db.export_jsonl(sys.stdout, selection)
    else:
        writable_file(out_path, "--out", keep=(db_path,))
        with open(out_path, "w", encoding="utf-8") as out:
            count = db.export_jsonl(out, selection)
    click.echo(f"exported {count} trials", err=True)


@db_group.command("import")
@click.argument("in_path", metavar="FILE")
@options.db
@options.import_targets
@options.kernel_file
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
    result = import_into(Path(db_path), parsed, in_path)
    batch = f" as batch {result.batch} (`edgetune db remove --batch {result.batch}` undoes it)" if result.batch else ""
    click.echo(f"imported {result.added} trials ({result.present} already present){batch}")


@db_group.command("batches")
@options.db
@options.as_json
def db_batches_cmd(db_path, as_json):
    """List the import batches: when, from which file, how many trials are still stored."""
    batches = options.open_existing_db(db_path).batches()
    if as_json:
        click.echo(json.dumps([{"batch": b.id, "source": b.source, "imported_at": b.imported_at, "lines": b.lines,
                                "stored": b.stored} for b in batches], indent=2))
        return
    if not batches:
        click.echo("no import batches")
    for b in batches:
        click.echo(f"batch {b.id}: {b.imported_at}  {b.stored} of {b.lines} trials stored  from {b.source}")


@db_group.command("remove")
@options.db
@options.workload
@click.option("--batch", type=options.WholeNumber(min=1), default=None, help="The trials of one import batch (db batches).")
@click.option("--trial", "trial_id", type=options.WholeNumber(min=1), default=None, help="One trial, by its id.")
@click.option("--dry-run", is_flag=True, help="Say how many trials would go; remove nothing.")
def db_remove_cmd(db_path, workload_text, batch, trial_id, dry_run):
    """Remove trials: by workload, by import batch or by id (given together: all must match)."""
    if workload_text is None and batch is None and trial_id is None:
        raise UserError("db remove: give --workload, --batch or --trial (see --help)")
    selection = parse_workload_selection(workload_text) if workload_text is not None else TrialSelection()
    selection = replace(selection, batch=batch, trial=trial_id)
    count = options.open_existing_db(db_path).remove(selection, dry_run=dry_run)
    click.echo(f"would remove {count} trials (dry run)" if dry_run else f"removed {count} trials")
