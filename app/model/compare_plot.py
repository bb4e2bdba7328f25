"""The plot of `edgetune model compare --plot`: per model and target, each compiler's tuned
module as a fraction of the plain C module's figure in the target's own unit (instructions in
an emulator, time on the host), so runs on targets whose units differ share one axis.

Imported only to plot: matplotlib costs a second at start-up (edgetune.report)."""
from __future__ import annotations

from pathlib import Path

from edgetune.report import DPI, plt

from .compare import ANY, CompareRow, against_plain

COLOURS = {ANY: "#1f77b4", "gcc": "#ff7f0e", "clang": "#2ca02c"}


def write_compare_plot(rows: list[CompareRow], units: dict[str, str], path: Path) -> int:
    """Draw the rows that have a plain C reference into `path` (PNG); `units` maps a target to
    its unit. Returns the number of bars drawn (0: nothing to draw, no file written)."""
    ratios = [(row, ratio) for target, unit in units.items()
              for row, ratio in against_plain([r for r in rows if r.target == target], unit)]
    if not ratios:
        return 0
    groups = list(dict.fromkeys((r.model, r.target) for r, _ in ratios))
    compilers = list(dict.fromkeys(r.compiler for r, _ in ratios))
    width = 0.8 / len(compilers)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(groups) + 2), 4.2))
    for k, compiler in enumerate(compilers):
        xs, heights = [], []
        for g, group in enumerate(groups):
            for row, ratio in ratios:
                if (row.model, row.target) == group and row.compiler == compiler:
                    xs.append(g - 0.4 + width * (k + 0.5))
                    heights.append(ratio)
        bars = ax.bar(xs, heights, width=width * 0.95, color=COLOURS.get(compiler, "#9467bd"),
                      label=f"tuned, {compiler} {'(best of the compilers)' if compiler == ANY else ''}".strip())
        ax.bar_label(bars, labels=[f"{h:.2f}" for h in heights], fontsize=7, padding=1)
    ax.axhline(1.0, color="#777777", linewidth=1, linestyle="--", label="plain C module (gcc -O3) = 1")
    ax.set_xticks(range(len(groups)), [f"{model}\n{target} ({units[target]})" for model, target in groups],
                  fontsize=8)
    ax.set_ylim(0, 1.45 * max(1.0, *(ratio for _, ratio in ratios)))  # room for the legend above the line
    ax.set_ylabel("tuned / plain C (lower is faster)")
    ax.set_title("Tuned modules against the plain C module, per model and target", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, metadata={"Title": "edgetune model compare", "Software": "edgetune model compare"})
    plt.close(fig)
    return len(ratios)
