"""`edgetune model compare` (issue 31 item 13): one table of model x target x compiler from
the database, totals counted as `model tune` counts them."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from edgetune.cli import main

from model_files import fc_model, write


def test_the_comparison_holds_a_row_per_compiler_and_any_with_model_tunes_totals(tmp_path):
    model = write(tmp_path, "fc.tflite", fc_model(np.random.default_rng(41), (1, 16), 8))
    db = tmp_path / "m.db"
    tuned = CliRunner().invoke(main, ["model", "tune", str(model), "--target", "host", "--budget", "8", "--db",
                                      str(db), "--no-check", "--json"])
    assert tuned.exit_code == 0, tuned.output
    summary = json.loads(tuned.output)
    result = CliRunner().invoke(main, ["model", "compare", str(model), "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    rows = {(r["target"], r["compiler"]): r for r in json.loads(result.output)}
    assert set(rows) == {("host", "any"), ("host", "gcc"), ("host", "clang")}
    best = rows[("host", "any")]
    assert best["totals"]["time_ns"] == summary["total"] and best["solved"] == best["workloads"] == 1
    used = summary["workloads"][0]["config"]["compiler"]
    assert rows[("host", used)]["totals"] == best["totals"]  # the best of any is its compiler's best
    assert all(r["totals"].get("time_ns", float("inf")) >= best["totals"]["time_ns"] for r in rows.values())
    text = CliRunner().invoke(main, ["model", "compare", str(model), "--db", str(db)]).output.splitlines()
    assert text[0].split()[:4] == ["model", "target", "compiler", "time_ns"] and len(text) == 4
    assert len({line.index("host") for line in text[1:]}) == 1  # columns line up


def test_the_plain_c_module_is_a_row_beside_the_tuned_ones_and_the_plot_reads_them_against_it(tmp_path):
    """--plain measures the plain C module (the figure `model tune` prints as plain), --plot
    draws each tuned row as a fraction of it; in QEMU the counts are exact, so they agree."""
    model = write(tmp_path, "fc.tflite", fc_model(np.random.default_rng(42), (1, 16), 8))
    db = tmp_path / "m.db"
    tuned = CliRunner().invoke(main, ["model", "tune", str(model), "--target", "cortex-m55", "--budget", "4",
                                      "--db", str(db), "--no-check", "--json"])
    assert tuned.exit_code == 0, tuned.output
    summary = json.loads(tuned.output)
    plot = tmp_path / "compare.png"
    result = CliRunner().invoke(main, ["model", "compare", str(model), "--db", str(db),
                                                       "--plot", str(plot), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["compiler"]: r for r in json.loads(result.stdout)}
    assert rows["plain C"]["totals"]["instructions"] == summary["plain_total"]
    assert rows["any"]["totals"]["instructions"] == summary["total"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"plot: {plot}" in result.stderr


def test_a_plot_path_that_is_a_folder_is_refused_in_one_line_before_anything_runs(tmp_path):
    result = CliRunner().invoke(main, ["model", "compare", "x.tflite", "--plot", str(tmp_path)])
    assert result.exit_code == 2 and "--plot" in result.output and "is a directory" in result.output


def test_an_incomplete_plain_row_says_what_it_lacks_not_that_its_layers_are_untuned():
    """A 16x8 model's `--plain` row read "0 of 4 layers tuned": its kernels have no plain loop."""
    from edgetune.model.compare import ANY, PLAIN, CompareRow, compare_table

    rows = [CompareRow("kws.tflite", "cortex-m55", ANY, 4, 4, (("instructions", 857793.0),), 1284, 4672),
            CompareRow("kws.tflite", "cortex-m55", "clang", 4, 0, (), None, None),
            CompareRow("kws.tflite", "cortex-m55", PLAIN, 4, 1, (), None, None)]
    lines = compare_table(rows)
    assert "0 of 4 layers tuned" in lines[2] and "857,793" in lines[1]
    assert "no plain loop for 3 of 4 layers" in lines[3] and "tuned" not in lines[3]
