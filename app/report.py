"""`edgetune report`: plots and one static HTML page from a tuning database.

Per workload: convergence of the best-so-far value against evaluations (one line per
strategy that ran), the Pareto front of the objective against code size, how each
parameter's values affect the objective (a plot and a table), and the best configurations.
Every plot is of the value the workload was tuned to minimise, and names the workload in its
title (drawn, and in the PNG's Title field). Matplotlib's Agg backend renders without a display.
"""
from __future__ import annotations

import html
import statistics
import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never open a window
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from edgetune.errors import EdgetuneError
from edgetune.hal import TargetError  # noqa: E402
from edgetune.targets import get_target, target_names  # noqa: E402
from edgetune.tuner import Record, TuningDatabase, Workload  # noqa: E402

# When neither --objective nor the target's own unit applies (an NPU workload, a target file
# no longer shipped): the first of these the trials hold. total_cycles: Vela (NPU).
OBJECTIVE_PREFERENCE = ("instructions", "cycles", "time_ns", "total_cycles")
TOP_CONFIGURATIONS = 10  # rows of the best-configurations table
LOG_SCALE_SPAN = 20.0  # a log axis only when the values span more than this factor
DPI = 110


class ReportError(EdgetuneError, ValueError):
    """A report that cannot be made as asked (an objective no trial measured)."""


@dataclass(frozen=True)
class ReportResult:
    index: Path
    images: tuple[Path, ...]


@dataclass(frozen=True)
class Objective:
    name: str
    why: str  # how it was chosen, shown on the page


def measured_names(records: list[Record]) -> set[str]:
    return {key for r in records if not r.trial.outcome.failed for key in r.trial.values}


def target_unit(target_name: str) -> str | None:
    """The value a shipped target's runs minimise by default (`tune` without --objective)."""
    if target_name not in target_names():
        return None
    try:
        return get_target(target_name).measures
    except TargetError:  # a board file that no longer loads: fall back to the trials
        return None


def tuned_for(db: TuningDatabase, workload: Workload) -> str | None:
    """The objective `tune` stored with the workload, where the database keeps one (the
    workload goals of schema 3: `TuningDatabase.goal`); None where it keeps none."""
    goal_of = getattr(db, "goal", None)  # absent from databases without stored goals
    goal = goal_of(workload) if goal_of is not None else None
    return None if goal is None else goal.objective


def objective_of(records: list[Record], requested: str = "", unit: str | None = None,
                 tuned: str | None = None) -> Objective | None:
    """What to plot for a workload: --objective when given, else the objective it was tuned
    for (when stored), else the target's own unit (what `tune` minimises unless told
    otherwise), else the first of OBJECTIVE_PREFERENCE the trials hold. None when no
    successful trial has it."""
    present = measured_names(records)
    if requested:
        return Objective(requested, "--objective") if requested in present else None
    if tuned in present:
        return Objective(tuned, "what the workload was tuned for")
    if unit in present:
        return Objective(unit, "the target's own unit (tune's default)")
    name = next((name for name in OBJECTIVE_PREFERENCE if name in present), None)
    return None if name is None else Objective(name, "the first of " + ", ".join(OBJECTIVE_PREFERENCE) + " measured")


def workload_title(workload: Workload, objective: str) -> str:
    # ", " between the shape's keys: a browser and a plot title can break the line there (a
    # convolution's twelve keys joined by bare commas were one word wider than the page).
    shape = ", ".join(f"{k}={v}" for k, v in workload.shape)
    return f"{workload.kernel} {shape} on {workload.target}, minimising {objective}"


def figure_title(title: str, width_in: float, fontsize: float) -> str:
    """`title` broken into lines that fit a figure `width_in` inches wide: matplotlib's own
    wrapping breaks only where its text would cross the figure's edge, which a centred
    title crosses on both sides at once, so it was clipped at both ends."""
    per_line = max(20, int(width_in * 72 / (fontsize * 0.62)))  # a sans-serif glyph is ~0.6 em wide
    return textwrap.fill(title, per_line, break_long_words=True)


def best_so_far(values: list[float | None]) -> list[float | None]:
    best, out = None, []
    for value in values:
        if value is not None and (best is None or value < best):
            best = value
        out.append(best)
    return out


def pareto_front(points: list[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    """Points not dominated in both coordinates (both minimised), sorted by the first."""
    front, best_second = [], None
    for x, y, ident in sorted(points):
        if best_second is None or y < best_second:
            front.append((x, y, ident))
            best_second = y
    return front


def _log_axis(axis) -> None:
    """A log axis labelled in plain numbers at 1, 2 and 5 of each decade: matplotlib's
    default minor labels (2x10^4, 3x10^4, ...) overlap when the span is under two decades."""
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def _wide(values) -> bool:
    values = [v for v in values if v is not None and v > 0]
    return bool(values) and max(values) / min(values) > LOG_SCALE_SPAN


def convergence_figure(records: list[Record], objective: str, title: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    by_strategy: dict[str, list[float | None]] = {}
    for record in records:
        by_strategy.setdefault(record.strategy or "?", []).append(record.trial.value(objective))
    for strategy, values in sorted(by_strategy.items()):
        curve = best_so_far(values)
        xs = [i + 1 for i, v in enumerate(curve) if v is not None]
        ax.step(xs, [v for v in curve if v is not None], where="post", label=strategy)
    ax.set_xlabel("evaluations")
    ax.set_ylabel(f"best {objective} so far")
    if _wide([r.trial.value(objective) for r in records]):
        ax.set_yscale("log")
        _log_axis(ax.yaxis)
    ax.grid(True, alpha=0.3)
    ax.legend(title="strategy")
    ax.set_title("convergence", fontsize=10)
    fig.suptitle(figure_title(title, fig.get_figwidth(), 10), fontsize=10)
    return fig


def pareto_points(records: list[Record], objective: str) -> list[tuple[float, float, int]]:
    return [(r.trial.values[objective], r.trial.values["code_bytes"], r.id) for r in records
            if not r.trial.outcome.failed and objective in r.trial.values and "code_bytes" in r.trial.values]


def pareto_figure(records: list[Record], objective: str, title: str) -> Figure:
    points = pareto_points(records, objective)
    front = pareto_front(points)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.scatter([p[0] for p in points], [p[1] for p in points], s=14, alpha=0.5, label="trials")
    ax.plot([p[0] for p in front], [p[1] for p in front], "o-", color="tab:red", label="Pareto front")
    ax.set_xlabel(objective)
    ax.set_ylabel("code bytes")
    if _wide([p[0] for p in points]):
        ax.set_xscale("log")
        _log_axis(ax.xaxis)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title(f"{objective} against code size", fontsize=10)
    fig.suptitle(figure_title(title, fig.get_figwidth(), 10), fontsize=10)
    return fig


def _value_order(values) -> list:
    return sorted(values, key=lambda v: (str(type(v)), v))


def parameters_figure(records: list[Record], objective: str, title: str) -> Figure:
    ok = [r.trial for r in records if r.trial.value(objective) is not None]
    names = [name for name, _ in ok[0].config.items] if ok else []
    cols = 4 if len(names) > 6 else 3
    rows = max(1, (len(names) + cols - 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(13, 3.2 * rows + 0.8), squeeze=False)
    log = _wide([t.value(objective) for t in ok])
    for ax, name in zip(axes.flat, names):
        # Trials stored before a parameter existed lack it: they are left out of its plot.
        with_it = [(t.config.as_dict()[name], t.value(objective)) for t in ok if name in t.config.as_dict()]
        values = _value_order({value for value, _ in with_it})
        ax.boxplot([[measured for value, measured in with_it if value == v] for v in values], showfliers=True)
        labels = [str(v) for v in values]
        crowded = sum(len(label) + 2 for label in labels) > 26  # long labels side by side overlap: slant them
        ax.set_xticks(range(1, len(values) + 1), labels, rotation=30 if crowded else 0,
                      ha="right" if crowded else "center")
        ax.set_title(name, fontsize=11)
        ax.set_ylabel(objective, fontsize=9)
        if log:
            ax.set_yscale("log")
            _log_axis(ax.yaxis)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.suptitle(f"{figure_title(title, fig.get_figwidth(), 11)}\n{objective} by parameter value (successful trials)",
                 fontsize=11)
    fig.tight_layout()
    return fig


def _save(fig: Figure, path: Path, title: str) -> None:
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI, metadata={"Title": title, "Software": "edgetune report"})
    plt.close(fig)


@dataclass(frozen=True)
class ValueRow:
    """One value of one parameter over a workload's trials."""

    parameter: str
    value: str
    trials: int
    failed: int
    best: float | None
    median: float | None


def parameter_rows(records: list[Record], objective: str) -> list[ValueRow]:
    names = [name for name, _ in records[0].trial.config.items] if records else []
    rows = []
    for name in names:
        for value in _value_order({r.trial.config[name] for r in records if name in r.trial.config.as_dict()}):
            chosen = [r.trial for r in records if r.trial.config.as_dict().get(name) == value]
            measured = [v for t in chosen if (v := t.value(objective)) is not None]
            rows.append(ValueRow(name, str(value), len(chosen), sum(t.outcome.failed for t in chosen),
                                 min(measured, default=None), statistics.median(measured) if measured else None))
    return rows


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _parameter_table(records: list[Record], objective: str, best: Record) -> str:
    rows, out, chosen = parameter_rows(records, objective), [], best.trial.config.as_dict()
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.parameter] = counts.get(row.parameter, 0) + 1
    for row in rows:
        first = not out or out[-1][0] != row.parameter
        mark = ' class="best"' if str(chosen.get(row.parameter)) == row.value else ""
        head = f'<th rowspan="{counts[row.parameter]}">{html.escape(row.parameter)}</th>' if first else ""
        out.append((row.parameter, f"<tr{mark}>{head}<td>{html.escape(row.value)}</td><td class=n>{row.trials}</td>"
                                   f"<td class=n>{row.failed}</td><td class=n>{_num(row.best)}</td>"
                                   f"<td class=n>{_num(row.median)}</td></tr>"))
    header = (f"<tr><th>parameter</th><th>value</th><th>trials</th><th>failed</th><th>best {html.escape(objective)}</th>"
              f"<th>median {html.escape(objective)}</th></tr>")
    body = "\n".join(line for _, line in out)
    return (f'<h3>Parameters</h3>\n<p class=note>Each value\'s trials; the best configuration\'s values are '
            f'highlighted.</p>\n<div class=scroll><table class="params">{header}\n{body}</table></div>')


def _top_table(records: list[Record], objective: str) -> str:
    ok = sorted((r for r in records if r.trial.value(objective) is not None), key=lambda r: r.trial.value(objective))
    top = ok[:TOP_CONFIGURATIONS]
    names = [name for name, _ in top[0].trial.config.items]
    # A parameter every listed configuration shares is said once, not repeated in a column.
    same = [n for n in names if len({str(r.trial.config.as_dict().get(n)) for r in top}) == 1]
    names = [n for n in names if n not in same]
    extra = [v for v in ("code_bytes",) if v != objective and any(v in r.trial.values for r in top)]
    header = "".join(f"<th>{html.escape(h)}</th>" for h in ["#", objective, *extra, *names])
    lines = []
    for rank, r in enumerate(top, start=1):
        cells = [str(rank), _num(r.trial.value(objective)), *(_num(r.trial.value(v)) for v in extra)]
        cells += [str(r.trial.config.as_dict().get(n, "")) for n in names]
        lines.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    shared = ", ".join(f"{n}={top[0].trial.config.as_dict().get(n)}" for n in same)
    note = f"<p class=note>All of them: {html.escape(shared)}</p>\n" if shared else ""
    return (f"<h3>Best {len(top)} of {len(ok)} successful configurations</h3>\n{note}"
            f'<div class=scroll><table class="top"><tr>{header}</tr>\n' + "\n".join(lines) + "</table></div>")


def _summary_table(workload: Workload, records: list[Record], objective: Objective | None, front: int,
                   requested: str) -> str:
    failures: dict[str, int] = {}
    for r in records:
        if r.trial.outcome.failed:
            failures[r.trial.outcome.value] = failures.get(r.trial.outcome.value, 0) + 1
    rows = [("trials", str(len(records))),
            ("failed", ", ".join(f"{k} {v}" for k, v in sorted(failures.items())) or "none"),
            ("toolchain", toolchain_text(workload, records))]
    if objective is None:
        rows.append(("objective", f"no successful trial measured {requested}" if requested else "no successful trial"))
    else:
        best = _best(records, objective.name)
        rows += [("objective", f"{objective.name} ({objective.why})"),
                 (f"best {objective.name}", f"{best.trial.value(objective.name):g}"),
                 ("best configuration", best.trial.config.key().replace(",", ", ")), ("measured", best.created),
                 ("Pareto-optimal trials (objective, code size)", str(front))]
    return "<table class=summary>" + "\n".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows) + "</table>"


def toolchain_text(workload: Workload, records: list[Record]) -> str:
    """The compilers the trials were built with, by name and version line (the workload's
    toolchain fingerprint, a hash, follows in brackets: what tells two measurement setups apart)."""
    versions: dict[str, str] = {}
    for record in records:
        name = str(record.trial.config.as_dict().get("compiler", ""))
        version = str(record.trial.info.get("compiler_version", ""))
        if name and version and name not in versions:
            versions[name] = version
    shown = "; ".join(f"{name}: {version}" for name, version in sorted(versions.items())) or "-"
    return f"{shown} (fingerprint {workload.toolchain})" if workload.toolchain else shown


def _best(records: list[Record], objective: str) -> Record:
    return min((r for r in records if r.trial.value(objective) is not None), key=lambda r: r.trial.value(objective))


def _section(workload: Workload, records: list[Record], objective: Objective | None, images: list[str], front: int,
             requested: str, anchor: str = "", serves: str = "") -> str:
    shape = ", ".join(f"{k}={v}" for k, v in workload.shape)
    title = workload_title(workload, objective.name) if objective else f"{workload.kernel} {shape} on {workload.target}"
    served = f"<p class=serves>Serves {html.escape(serves)}</p>" if serves else ""
    parts = [f'<section id="{html.escape(anchor)}"><h2>{html.escape(title)}</h2>{served}',
             _summary_table(workload, records, objective, front, requested)]
    if objective is not None:
        pairs, wide = images[:2], images[2:]
        parts.append("<div class=pair>" + "".join(
            f'<a href="{html.escape(i)}"><img src="{html.escape(i)}" alt="{html.escape(i)}"></a>' for i in pairs) + "</div>")
        parts += [f'<a href="{html.escape(i)}"><img class=wide src="{html.escape(i)}" alt="{html.escape(i)}"></a>'
                  for i in wide]
        parts += [_parameter_table(records, objective.name, _best(records, objective.name)),
                  _top_table(records, objective.name)]
    parts.append("</section>")
    return "\n".join(parts)


STYLE = """body{font-family:sans-serif;margin:2em auto;max-width:84em;padding:0 1em;color:#222}
h1,h2,p{overflow-wrap:anywhere} h2{border-bottom:2px solid #ccc;padding-bottom:.2em;margin-top:2em} h3{margin-top:1.5em}
table.summary{max-width:100%} .serves{font-weight:bold} nav li{margin:.2em 0;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em} th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}
table.summary th{background:#f4f4f4;white-space:nowrap} td{overflow-wrap:anywhere} table.params th[rowspan]{background:#f4f4f4;vertical-align:top}
table.params tr.best td{background:#e6f2e6;font-weight:bold} td.n{text-align:right;font-variant-numeric:tabular-nums}
table.top tr:first-child{background:#f4f4f4} table.top td{font-variant-numeric:tabular-nums}
.pair{display:flex;flex-wrap:wrap;gap:.5em} .pair a{flex:1 1 min(30em,100%)} .pair img{width:100%} img.wide{width:100%;margin:.5em 0}
@media (max-width:40em){body{margin:1em auto;padding:0 .5em} table.summary th{white-space:normal}}
.note{color:#555;font-size:.9em} .scroll{overflow-x:auto}"""


def check_objective(db: TuningDatabase, requested: str) -> None:
    """--objective must be a value some successful trial of the database measured."""
    if not requested:
        return
    present = set().union(*(measured_names(db.records(w)) for w in db.workloads()))
    if requested not in present:
        known = ", ".join(sorted(present)) or "none"
        raise ReportError(f"--objective {requested}: no stored trial measured it (measured: {known})")


def served_layers(models) -> dict[tuple, list[str]]:
    """(kernel, shape items) -> "MODEL layers 1, 3" for every tuned layer of the models (files)."""
    from edgetune.codegen import get_kernel
    from edgetune.codegen.model import load_model

    found: dict[tuple, dict[str, list[int]]] = {}
    for path in map(Path, models):
        for layer in load_model(path).layers:
            if layer.kernel is None:
                continue
            shape = get_kernel(layer.kernel).parse_shape(dict(layer.shape))
            found.setdefault((layer.kernel, tuple(shape.items())), {}).setdefault(path.name, []).append(layer.index)
    return {key: [f"{name} layer{'s' if len(ix) > 1 else ''} {', '.join(map(str, ix))}" for name, ix in by.items()]
            for key, by in found.items()}


def write_report(db: TuningDatabase, out_dir: Path, objective: str = "", models=()) -> ReportResult:
    """One section per workload; `objective` (the --objective option) overrides each
    workload's own (objective_of); `models` (TFLite files): each workload names the layers
    of theirs it serves."""
    check_objective(db, objective)
    serving = served_layers(models)
    out_dir.mkdir(parents=True, exist_ok=True)
    sections, images, contents = [], [], []
    for number, workload in enumerate(db.workloads(), start=1):
        records = db.records(workload)
        chosen = objective_of(records, objective, target_unit(workload.target), tuned_for(db, workload))
        names, front = [], 0
        if chosen:
            stem, title = f"w{number:02d}", workload_title(workload, chosen.name)
            front = len(pareto_front(pareto_points(records, chosen.name)))
            for kind, make in (("convergence", convergence_figure), ("pareto", pareto_figure),
                               ("parameters", parameters_figure)):
                name = f"{stem}-{kind}.png"
                _save(make(records, chosen.name, title), out_dir / name, title)
                names.append(name)
            images += [out_dir / n for n in names]
        serves = "; ".join(serving.get((workload.kernel, tuple(workload.shape)), []))
        sections.append(_section(workload, records, chosen, names, front, objective, f"w{number:02d}", serves))
        shape = ", ".join(f"{k}={v}" for k, v in workload.shape)
        contents.append(f'<li><a href="#w{number:02d}">{html.escape(f"{workload.kernel} {shape} on {workload.target}")}'
                        f'</a>{html.escape(f" ({serves})" if serves else "")}</li>')
    body = "\n".join(sections) or "<p>The database holds no trials.</p>"
    nav = f"<nav><ul>{''.join(contents)}</ul></nav>" if len(contents) > 1 else ""
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>edgetune report</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{STYLE}</style></head>
<body><h1>edgetune report</h1><p>Database: {html.escape(str(db.path))}</p>
{nav}
{body}
</body></html>
"""
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return ReportResult(index=index, images=tuple(images))
