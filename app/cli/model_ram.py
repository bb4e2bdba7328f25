"""What `model export --max-ram` and `model tune --max-ram` print about the choice under the
bound (app/model/ram_fit.py): the planned RAM beside the fastest choice's, what the bound
cost in the objective, and the workloads whose variant changed."""
from __future__ import annotations

from edgetune.model.ram_fit import PlannedRam, RamFit
from edgetune.model.session import compact_shape


def _parts(p: PlannedRam) -> str:
    static = f", static scratch {p.static_scratch:,}" if p.static_scratch else ""
    return f"arena {p.arena_bytes:,}{static}, inputs and outputs {p.io_bytes:,}"


def cost_change(fit: RamFit) -> str:
    fast, bounded = fit.cost(fit.fastest), fit.cost(fit.fitted)
    change = f" ({(bounded - fast) / fast:+.1%})" if fast else ""
    objective = fit.options[0][0].entry.objective if fit.options else ""
    return (f"tuned layers' {objective} (measured alone, weighted by occurrence): {bounded:,.0f} under the bound, "
            f"{fast:,.0f} with the fastest variants{change}")


def ram_fit_lines(fit: RamFit) -> list[str]:
    lines = [f"RAM bound {fit.max_ram:,} bytes: planned {fit.fitted.total:,} bytes ({_parts(fit.fitted)}); the fastest "
             f"variants take {fit.fastest.total:,}", "  " + cost_change(fit)]
    for key in fit.changed():
        w = fit.keys.index(key)
        was, now = fit.options[w][fit.fastest.choice[w]], fit.options[w][fit.fitted.choice[w]]
        value = "not measured (the default configuration)" if now.cost is None else f"{now.cost:,.0f}"
        lines.append(f"  {key[0]} {compact_shape(dict(key[1]))}: {value} instead of {was.cost or 0:,.0f} "
                     f"(scratch {now.ram.arena_scratch + now.ram.static_scratch:,} bytes instead of "
                     f"{was.ram.arena_scratch + was.ram.static_scratch:,}"
                     + (", in place" if now.ram.in_place and not was.ram.in_place else "") + ")")
    return lines


def ram_fit_json(fit: RamFit | None) -> dict | None:
    if fit is None:
        return None
    return {"max_ram": fit.max_ram, "planned_ram": fit.fitted.total, "fastest_ram": fit.fastest.total,
            "arena_bytes": fit.fitted.arena_bytes, "static_scratch": fit.fitted.static_scratch,
            "io_bytes": fit.fitted.io_bytes, "cost": fit.cost(fit.fitted), "fastest_cost": fit.cost(fit.fastest),
            "changed": [{"kernel": k[0], "shape": dict(k[1])} for k in fit.changed()]}
