"""What `model export --max-ram` and `model tune --max-ram` print about the choice under the
bound (app/model/ram_fit.py): the planned RAM beside the fastest choice's, what the bound
cost in the objective, and the workloads whose variant changed."""
from __future__ import annotations

import shlex
from pathlib import Path

import click

from edgetune.model.ram_fit import PlannedRam, RamFit
from edgetune.model.session import compact_shape


def ram_parts(p: PlannedRam, code_ram: int = 0) -> str:
    """Every part of a planned RAM figure, so that they add up to it (`code_ram`: code and
    constants the code plan copies into RAM)."""
    parts = [f"arena {p.arena_bytes:,}"]
    parts += [f"static scratch {p.static_scratch:,}"] if p.static_scratch else []
    parts += [f"scratch pointers {p.pointers:,}"] if p.pointers else []
    parts += [f"inputs and outputs {p.io_bytes:,}"]
    parts += [f"code and constants copied to RAM {code_ram:,}"] if code_ram else []
    return ", ".join(parts)


def cost_change(fit: RamFit) -> str:
    if not any(o.cost is not None for options in fit.options for o in options):
        return ("no tuned layers: no trial in the database for any workload, each runs its kernel's default "
                "configuration (nothing for the bound to trade)")
    fast, bounded = fit.cost(fit.fastest), fit.cost(fit.fitted)
    change = f" ({(bounded - fast) / fast:+.1%})" if fast else ""
    objective = fit.options[0][0].entry.objective if fit.options else ""
    return (f"tuned layers' {objective} (measured alone, weighted by occurrence): {bounded:,.0f} under the bound, "
            f"{fast:,.0f} with the fastest variants{change}")


def ram_fit_lines(fit: RamFit, code_ram: int = 0) -> list[str]:
    """`code_ram`: the bytes the code plan copies into RAM within what the bound leaves."""
    lines = [f"RAM bound {fit.max_ram:,} bytes: planned {fit.fitted.total + code_ram:,} bytes "
             f"({ram_parts(fit.fitted, code_ram)}); the fastest variants take {fit.fastest.total:,}"
             + (" before code and constants" if code_ram else ""), "  " + cost_change(fit)]
    for key in fit.changed():
        w = fit.keys.index(key)
        was, now = fit.options[w][fit.fastest.choice[w]], fit.options[w][fit.fitted.choice[w]]
        value = "not measured (the default configuration)" if now.cost is None else f"{now.cost:,.0f}"
        lines.append(f"  {key[0]} {compact_shape(dict(key[1]))}: {value} instead of {was.cost or 0:,.0f} "
                     f"(scratch {now.ram.arena_scratch + now.ram.static_scratch:,} bytes instead of "
                     f"{was.ram.arena_scratch + was.ram.static_scratch:,}"
                     + (", in place" if now.ram.in_place and not was.ram.in_place else "") + ")")
    return lines


def ram_fit_json(fit: RamFit | None, code_ram: int = 0) -> dict | None:
    if fit is None:
        return None
    return {"max_ram": fit.max_ram, "planned_ram": fit.fitted.total + code_ram, "fastest_ram": fit.fastest.total,
            "arena_bytes": fit.fitted.arena_bytes, "static_scratch": fit.fitted.static_scratch,
            "scratch_pointers": fit.fitted.pointers, "code_ram": code_ram, "io_bytes": fit.fitted.io_bytes, "cost": fit.cost(fit.fitted), "fastest_cost": fit.cost(fit.fastest),
            "changed": [{"kernel": k[0], "shape": dict(k[1])} for k in fit.changed()]}


def export_command(model_file: str, target_name: str, db_path: str, max_ram: int, objective: str = "",
                   constraints: tuple[str, ...] = (), compilers: tuple[str, ...] = ()) -> str:
    """The `model export` that makes the module of a bounded tune, as the user can paste it:
    their target as they named it, their database unless it is the default, the run's goal
    and compilers (the same choice), their kernel files, and an --out folder named after the
    model and the bound."""
    from . import options
    words = ["edgetune", "model", "export", str(model_file), "--target", str(target_name)]
    words += ["--db", str(db_path)] if str(db_path) != options.DEFAULT_DB else []
    words += ["--objective", objective] if objective else []
    for constraint in constraints:
        words += ["--constraint", constraint]
    for compiler in compilers:
        words += ["--compiler", compiler]
    for path in click.get_current_context().meta.get("kernel_file_paths", ()):
        words += ["--kernel-file", str(path)]
    words += ["--out", f"{Path(model_file).stem}_ram{max_ram}", "--max-ram", str(max_ram)]
    return " ".join(shlex.quote(word) for word in words)
