"""`edgetune model compare MODEL.tflite...`: one table across runs, model x target x compiler.

Each row is one model on one target, with the variants of one compiler (or of any: the
row "any"), from what the database holds: for every distinct workload of the model its
best stored trial by the target's own unit (among that compiler's trials), and the model's
totals as `model tune` counts them (each workload's values times the layers it serves):
instructions, the estimated cycles and energy (hal/cost.py, where the target has a cost
model), host time. Code is the kernels' code summed over the distinct workloads (one
object each, as the module links them); RAM the largest layer's (its buffers and static
data: layers run one after the other). A row missing a layer's trial says so instead of a
total. Nothing is measured: the table is the database's, so runs on different days,
targets and compilers line up.

With `plain=True` each (model, target) also gets the row of its plain C module: every distinct
workload's plain C loop nest (gcc -O3, edgetune.model.session.baseline_values), measured in the
target's emulator now, counted the same way, the reference a tuned row is read against.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgetune.model import Model
from edgetune.errors import EdgetuneError
from edgetune.hal import TargetError
from edgetune.targets import get_target
from edgetune.tuner import Record, TuningDatabase

from .session import LayerWorkload, baseline_values, distinct_workloads
from edgetune.session import compiled_by

VALUES = ("instructions", "cycles", "energy_uj", "time_ns")
ANY = "any"
PLAIN = "plain C"  # the compiler cell of the plain C module's row (gcc -O3, measured now)


@dataclass(frozen=True)
class CompareRow:
    model: str
    target: str
    compiler: str  # a compiler of the target, or "any"
    workloads: int  # distinct workloads of the model
    solved: int  # of them with a successful trial of this compiler
    totals: tuple[tuple[str, float], ...]  # value -> model total (only when every workload is solved)
    code_bytes: int | None
    ram_bytes: int | None

    @property
    def complete(self) -> bool:
        return self.solved == self.workloads


def compare_rows(models: list[Model], db: TuningDatabase, plain: bool = False) -> list[CompareRow]:
    """Every (model, target the database holds, compiler) with at least one trial of the model;
    with `plain`, after each (model, target) its plain C module's row."""
    rows = []
    for model in models:
        for name in sorted({w.target for w in db.workloads()}):
            try:
                target = get_target(name)
                workloads = distinct_workloads(model.layers, target)
            except (TargetError, EdgetuneError):
                continue  # a target no longer known here, or one the model does not fit
            if not any(db.trials(lw.workload) for lw in workloads):
                continue
            for compiler in (ANY, *(c.name for c in target.compilers)):
                rows.append(_row(model, target, compiler, workloads, db))
            if plain:
                rows.append(_plain_row(model, target, workloads))
    return rows


def _plain_row(model: Model, target, workloads: list[LayerWorkload]) -> CompareRow:
    measured = [(lw, baseline_values(lw, target)) for lw in workloads]
    ran = [(lw, values) for lw, values in measured if values is not None]
    complete = len(ran) == len(workloads)
    totals = tuple((value, sum(lw.weight * v[value] for lw, v in ran)) for value in VALUES
                   if complete and all(value in v for _, v in ran))
    code = [v.get("code_bytes") for _, v in ran]
    ram = [v.get("ram_bytes") for _, v in ran]
    return CompareRow(Path(model.path).name, target.name, PLAIN, len(workloads), len(ran), totals,
                      int(sum(code)) if complete and None not in code else None,
                      int(max(ram)) if complete and ram and None not in ram else None)


def against_plain(rows: list[CompareRow], value: str) -> list[tuple[CompareRow, float]]:
    """Each complete tuned row with its `value` as a fraction of its (model, target)'s plain C
    row: the figure that reads the same across targets whose units differ."""
    plain = {(r.model, r.target): dict(r.totals).get(value) for r in rows if r.compiler == PLAIN and r.complete}
    out = []
    for r in rows:
        reference, own = plain.get((r.model, r.target)), dict(r.totals).get(value)
        if r.compiler != PLAIN and r.complete and reference and own is not None:
            out.append((r, own / reference))
    return out


def _row(model: Model, target, compiler: str, workloads: list[LayerWorkload], db: TuningDatabase) -> CompareRow:
    only = () if compiler == ANY else (compiler,)
    best: list[tuple[LayerWorkload, Record]] = []
    for lw in workloads:
        record = db.best(lw.workload, target.measures, lambda t: compiled_by(t, only))
        if record is not None:
            best.append((lw, record))
    complete = len(best) == len(workloads)
    totals = tuple((value, sum(lw.weight * r.trial.values[value] for lw, r in best)) for value in VALUES
                   if complete and all(value in r.trial.values for _, r in best))
    code = [r.trial.values.get("code_bytes") for _, r in best]
    ram = [r.trial.values.get("ram_bytes") for _, r in best]
    return CompareRow(Path(model.path).name, target.name, compiler, len(workloads), len(best), totals,
                      int(sum(code)) if complete and None not in code else None,
                      int(max(ram)) if complete and ram and None not in ram else None)


def compare_table(rows: list[CompareRow]) -> list[str]:
    """The rows as aligned text lines, a header first."""
    shown = [v for v in VALUES if any(dict(r.totals).get(v) is not None for r in rows)]
    header = ["model", "target", "compiler", *shown, "kernel code B", "largest layer RAM B"]
    lines = [header]
    for r in rows:
        values = dict(r.totals)
        cells = [_figure(values[v]) if v in values else "-" for v in shown] if r.complete else \
            [_incomplete(r)] + [""] * (len(shown) - 1)
        lines.append([r.model, r.target, r.compiler, *cells, _int(r.code_bytes), _int(r.ram_bytes)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) if i < 3 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            .rstrip() for line in lines]


def _incomplete(row: CompareRow) -> str:
    """What a row without a model total lacks. The plain C row's layers are not tuned: what
    they lack is a plain loop (the 16x8 kernels have none) or its run ("0 of 4 layers tuned"
    there read as if the plain module needed tuning)."""
    if row.compiler == PLAIN:
        return f"no plain loop for {row.workloads - row.solved} of {row.workloads} layers"
    return f"{row.solved} of {row.workloads} layers tuned"


def _figure(value: float) -> str:
    """Counts in full with thousands separators (never 1.43919e+06); small figures such as
    microjoules to four significant digits."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"


def _int(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
