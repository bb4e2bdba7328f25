"""bench/patches.py's pieces: the rows each stage layer computes (no recompute when cached),
and a table row's ratios against the module without patches and TFLite Micro's reference."""
from __future__ import annotations

from bench_scripts import load_bench

from edgetune.model import load_model

bench = load_bench("patches")


def test_computed_rows_show_the_recompute():
    model = load_model(bench.MODEL)
    assert bench.computed_rows(model, "0-3:1:cache,4-7:1:cache") == "48,48,48,24 | 24,24,24,12"
    assert bench.computed_rows(model, "0-3:1:recompute") == "117,71,71,24"
    assert bench.computed_rows(model, "") == "-"


def test_row_ratios_and_the_goal():
    plain = dict(instructions=1000, ram=80_000, arena=50_000)
    within = dict(instructions=1100, ram=35_000, arena=5_000)
    line = bench.row("p", within, plain, "r")
    assert "| 1.100 |" in line and "| 0.344 | yes |" in line  # 35,000 / 101,664
    assert "| no |" in bench.row("p", dict(within, ram=36_000), plain, "r")
