"""`edgetune export` and `edgetune verify`: bake the best variants of a target's tuned
workloads into C sources, and check such an export still holds."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from edgetune.codegen.manifest import read_manifest
from edgetune.targets import get_target

from ..verify import export_and_measure, manifest_target, verify_export
from . import options


@click.command("export")
@options.target
@options.out_folder("the header, sources and manifest")
@options.db
@options.objective
@options.constraints
@options.kernel_file
@options.as_json
def export_cmd(target_name, out_dir, db_path, objective, constraints, kernel_files, as_json):
    """Bake the best variant of every tuned workload of a target into C sources: each
    chosen by the objective and constraints it was tuned with, unless --objective or
    --constraint overrides them. The database must exist."""
    target = get_target(target_name)
    db = options.open_existing_db(db_path)
    bounds = options.bounds_of(constraints)
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


@click.command("verify")
@click.argument("folder", metavar="DIR")
@options.export_target
@options.check_db
@click.option("--tolerance", "tolerance_pct", type=click.FloatRange(min=0), default=None,
              help="Allowed slow-down in percent [default: 0 on emulated targets, 15 on the host, "
                   "2 on a real board].")
@options.fresh_seed
@options.objective
@options.constraints
@options.kernel_file
@options.as_json
def verify_cmd(folder, target_name, db_path, tolerance_pct, seed, objective, constraints, kernel_files, as_json):
    """Check an export in the target's emulator: still correct, still as fast as recorded.

    Exit 0 when every kernel holds, 1 naming each kernel that is wrong or slower, 2 on bad
    input (a missing, damaged or foreign export)."""
    target = get_target(target_name) if target_name else manifest_target(Path(folder))
    db = options.open_existing_db(db_path) if db_path is not None else None
    report = verify_export(Path(folder), target, tolerance_pct=tolerance_pct, seed=seed, db=db, objective=objective,
                           bounds=options.bounds_of(constraints))
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
