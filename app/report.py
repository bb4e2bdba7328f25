"""`edgetune report`: plots and one static HTML page from a tuning database.

Per workload: convergence of the best-so-far value against evaluations (one line per
strategy that ran), the Pareto front of the objective against code size, and how each
parameter's values affect the objective. Matplotlib's Agg backend renders without a display.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never open a window
import matplotlib.pyplot as plt  # noqa: E402

from edgetune.tuner import Record, TuningDatabase, Workload  # noqa: E402

OBJECTIVE_PREFERENCE = ("cycles", "instructions", "time_ns")


@dataclass(frozen=True)
class ReportResult:
    index: Path
    images: tuple[Path, ...]


def objective_of(records: list[Record]) -> str | None:
    """The workload's primary measured value: the first of OBJECTIVE_PREFERENCE it has."""
    present = {key for r in records if not r.trial.outcome.failed for key in r.trial.values}
    return next((name for name in OBJECTIVE_PREFERENCE if name in present), None)


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


def _convergence(records: list[Record], objective: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    by_strategy: dict[str, list[float | None]] = {}
    for record in records:
        by_strategy.setdefault(record.strategy or "?", []).append(record.trial.value(objective))
    for strategy, values in sorted(by_strategy.items()):
        curve = best_so_far(values)
        xs = [i + 1 for i, v in enumerate(curve) if v is not None]
        ax.step(xs, [v for v in curve if v is not None], where="post", label=strategy)
    ax.set_xlabel("evaluations")
    ax.set_ylabel(f"best {objective} so far")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(title="strategy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pareto(records: list[Record], objective: str, path: Path) -> int:
    points = [(r.trial.values[objective], r.trial.values["code_bytes"], r.id) for r in records
              if not r.trial.outcome.failed and objective in r.trial.values and "code_bytes" in r.trial.values]
    front = pareto_front(points)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.scatter([p[0] for p in points], [p[1] for p in points], s=14, alpha=0.5, label="trials")
    ax.plot([p[0] for p in front], [p[1] for p in front], "o-", color="tab:red", label="Pareto front")
    ax.set_xlabel(objective)
    ax.set_ylabel("code bytes")
    ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return len(front)


def _parameters(records: list[Record], objective: str, path: Path) -> None:
    ok = [r.trial for r in records if r.trial.value(objective) is not None]
    names = [name for name, _ in ok[0].config.items] if ok else []
    cols = 3
    rows = max(1, (len(names) + cols - 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(10, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        values = sorted({t.config[name] for t in ok}, key=lambda v: (str(type(v)), v))
        groups = [[t.value(objective) for t in ok if t.config[name] == v] for v in values]
        ax.boxplot(groups, showfliers=True)
        ax.set_xticks(range(1, len(values) + 1), [str(v) for v in values])
        ax.set_title(name)
        ax.set_yscale("log")
        ax.grid(True, axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.suptitle(f"{objective} by parameter value (successful trials)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _section(workload: Workload, records: list[Record], objective: str | None, images: list[str], front: int) -> str:
    shape = ", ".join(f"{k}={v}" for k, v in workload.shape)
    failures: dict[str, int] = {}
    for r in records:
        if r.trial.outcome.failed:
            failures[r.trial.outcome.value] = failures.get(r.trial.outcome.value, 0) + 1
    rows = [("trials", str(len(records))),
            ("failed", ", ".join(f"{k} {v}" for k, v in sorted(failures.items())) or "none"),
            ("toolchain", workload.toolchain or "-")]
    if objective:
        best = min((r for r in records if r.trial.value(objective) is not None), key=lambda r: r.trial.value(objective))
        rows += [(f"best {objective}", f"{best.trial.value(objective):g}"), ("best configuration", best.trial.config.key()),
                 ("measured", best.created), ("Pareto-optimal trials (objective, code size)", str(front))]
    table = "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    imgs = "\n".join(f'<a href="{html.escape(i)}"><img src="{html.escape(i)}" alt="{html.escape(i)}"></a>' for i in images)
    title = f"{workload.kernel} ({shape}) on {workload.target}"
    return f"<section><h2>{html.escape(title)}</h2>\n<table>{table}</table>\n<div class=plots>{imgs}</div></section>"


def write_report(db: TuningDatabase, out_dir: Path) -> ReportResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    sections, images = [], []
    for number, workload in enumerate(db.workloads(), start=1):
        records = db.records(workload)
        objective = objective_of(records)
        names, front = [], 0
        if objective:
            stem = f"w{number:02d}"
            _convergence(records, objective, out_dir / f"{stem}-convergence.png")
            front = _pareto(records, objective, out_dir / f"{stem}-pareto.png")
            _parameters(records, objective, out_dir / f"{stem}-parameters.png")
            names = [f"{stem}-convergence.png", f"{stem}-pareto.png", f"{stem}-parameters.png"]
            images += [out_dir / n for n in names]
        sections.append(_section(workload, records, objective, names, front))
    body = "\n".join(sections) or "<p>The database holds no trials.</p>"
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>edgetune report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:80em}} table{{border-collapse:collapse;margin:1em 0}}
th,td{{border:1px solid #ccc;padding:.2em .6em;text-align:left}} img{{max-width:32em;margin:.3em}}</style></head>
<body><h1>edgetune report</h1><p>Database: {html.escape(str(db.path))}</p>
{body}
</body></html>
"""
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return ReportResult(index=index, images=tuple(images))
