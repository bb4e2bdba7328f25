"""A model's per-layer report (`edgetune model report`): per tuned layer (each operator a
kernel serves), its best stored trial against its plain C loop nest (-O3, measured in the
target's emulator now, as `model tune` does: edgetune.model.session.measure_baseline), and
its share of the model's tuned-layer total, as a bar chart (PNG) and a table (HTML).

Only the tuned layers are measured: the library operators (ADD, pooling, SOFTMAX...) have no
trials in the database and are listed, not costed.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from edgetune.model import Model
from edgetune.hal import Target
from edgetune.tuner import TuningDatabase

from .session import distinct_workloads, measure_baseline
from edgetune.report import DPI, STYLE, ReportError, plt, ticker
from edgetune.session import goal_of

PLOT = "layers.png"
INDEX = "index.html"


@dataclass(frozen=True)
class LayerRow:
    index: int  # operator index
    op: str
    kernel: str
    shape: str
    tuned: float | None  # best stored trial's objective value; None: no feasible trial
    trial: int | None
    plain: float | None  # the plain loop nest; None when it could not run

    def share(self, total: float | None, value: float | None) -> float | None:
        return None if not total or value is None else value / total


@dataclass(frozen=True)
class ModelReport:
    model: Model
    target: Target
    objective: str
    rows: tuple[LayerRow, ...]
    untuned: tuple[tuple[int, str], ...]  # (operator index, builtin) of the library operators

    @property
    def tuned_total(self) -> float | None:
        return None if any(r.tuned is None for r in self.rows) else sum(r.tuned for r in self.rows)

    @property
    def plain_total(self) -> float | None:
        return None if any(r.plain is None for r in self.rows) else sum(r.plain for r in self.rows)


def model_report(model: Model, target: Target, db: TuningDatabase, objective: str = "") -> ModelReport:
    """Each tuned layer's best trial (by `objective`, default the target's unit, within the
    bounds it was tuned for) and its plain loop, measured once per distinct workload."""
    objective = objective or target.measures
    by_index = {layer.index: layer for layer in model.layers}
    rows = []
    for lw in distinct_workloads(model.layers, target):
        goal = goal_of(db, lw.workload, target, objective)
        record = db.best(lw.workload, goal.objective, goal.allows)
        plain = measure_baseline(lw, target, objective)
        for index in lw.layers:
            layer = by_index[index]
            rows.append(LayerRow(index, layer.op, layer.kernel, layer.shape_text,
                                 None if record is None else record.trial.value(objective),
                                 None if record is None else record.id, plain))
    rows.sort(key=lambda r: r.index)
    untuned = tuple((layer.index, layer.op) for layer in model.layers if layer.kernel is None)
    return ModelReport(model, target, objective, tuple(rows), untuned)


def layers_figure(report: ModelReport, title: str):
    """Grouped horizontal bars, one pair per layer (tuned, plain), labelled with the tuned
    layer's share of the model's tuned total."""
    rows = report.rows
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.42 * len(rows)))
    y = range(len(rows))
    tuned = [r.tuned or 0 for r in rows]
    plain = [r.plain or 0 for r in rows]
    ax.barh([i + 0.2 for i in y], plain, height=0.4, color="#bbbbbb", label="plain C loop nest (-O3)")
    ax.barh([i - 0.2 for i in y], tuned, height=0.4, color="#1f77b4", label="tuned (best trial)")
    total = report.tuned_total
    for i, r in zip(y, rows):
        share = r.share(total, r.tuned)
        if share is not None:
            ax.text(r.tuned, i - 0.2, f" {100 * share:.1f}%", va="center", fontsize=8)
    ax.set_yticks(list(y), [f"op {r.index} {r.op}" for r in rows], fontsize=8)
    ax.invert_yaxis()  # the model's order, top to bottom
    ax.set_xlabel(f"{report.objective} per layer (label: the layer's share of the tuned layers' total)")
    ax.set_title(title, fontsize=10)
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))  # no "1e6" offset
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="lower right", fontsize=8)  # tuned first, as drawn
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def _cell(value: float | None) -> str:
    return "&ndash;" if value is None else f"{value:.0f}"


def _pct(value: float | None) -> str:
    return "&ndash;" if value is None else f"{100 * value:.1f}%"


def _table(report: ModelReport) -> str:
    tuned_total, plain_total = report.tuned_total, report.plain_total
    head = ("<tr><th>operator</th><th>op</th><th>kernel and shape</th><th>trial</th>"
            f"<th>tuned {report.objective}</th><th>share (tuned)</th><th>plain {report.objective}</th>"
            "<th>share (plain)</th><th>plain / tuned</th></tr>")
    lines = [head]
    for r in report.rows:
        ratio = None if r.tuned is None or r.plain is None or not r.tuned else r.plain / r.tuned
        lines.append(f"<tr><td>{r.index}</td><td>{html.escape(r.op)}</td>"
                     f"<td><code>{html.escape(r.kernel)} {html.escape(r.shape)}</code></td>"
                     f"<td>{'' if r.trial is None else r.trial}</td><td>{_cell(r.tuned)}</td>"
                     f"<td>{_pct(r.share(tuned_total, r.tuned))}</td><td>{_cell(r.plain)}</td>"
                     f"<td>{_pct(r.share(plain_total, r.plain))}</td>"
                     f"<td>{'&ndash;' if ratio is None else f'{ratio:.2f}x'}</td></tr>")
    lines.append(f"<tr><th colspan=4>tuned layers, total</th><th>{_cell(tuned_total)}</th><th></th>"
                 f"<th>{_cell(plain_total)}</th><th></th><th></th></tr>")
    return "<table>" + "\n".join(lines) + "</table>"


def write_model_report(report: ModelReport, db: TuningDatabase, out_dir: Path) -> tuple[Path, Path]:
    """DIR/layers.png and DIR/index.html; returns (index, plot)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ReportError(f"--out {out_dir}: exists and is not a folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    name = Path(report.model.path).name
    title = f"{name} on {report.target.name}: {report.objective} per tuned layer"
    fig = layers_figure(report, title)
    plot = out_dir / PLOT
    fig.savefig(plot, dpi=DPI, metadata={"Title": title, "Software": "edgetune model report"})
    plt.close(fig)
    untuned = ", ".join(f"{i} {html.escape(op)}" for i, op in report.untuned) or "none"
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style></head>
<body><h1>{html.escape(name)} on {html.escape(report.target.name)}</h1>
<p>Database: {html.escape(str(db.path))}. Tuned: each layer's best stored trial. Plain: the kernel's plain C
loop nest built with gcc -O3, measured in the target's emulator for this report. Shares are of the tuned
layers' total; the library operators (not tuned, not measured here): {untuned}.</p>
<img src="{PLOT}" alt="{html.escape(title)}">
{_table(report)}
</body></html>
"""
    index = out_dir / INDEX
    index.write_text(page, encoding="utf-8")
    return index, plot
