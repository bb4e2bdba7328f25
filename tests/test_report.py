"""`edgetune report`: it plots what the workload was tuned to minimise (or --objective),
every plot names the workload, and the page holds every parameter in a readable table."""
from __future__ import annotations

from html.parser import HTMLParser

import pytest
from click.testing import CliRunner
from PIL import Image

import edgetune.report as report
from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.session import workload_of
from edgetune.targets import get_target
from edgetune.tuner import Outcome, Trial, TuningDatabase

SHAPE = {"m": 4, "n": 4, "k": 8}


def _m55_db(tmp_path, count=12):
    """A cortex-m55 workload (its own unit: instructions) whose instruction and cycle
    orders disagree, so plotting the wrong one shows."""
    kernel, target = get_kernel("matmul_s8"), get_target("cortex-m55")
    space = kernel.tuning_space(target, SHAPE)
    workload = workload_of(kernel, target, SHAPE)
    db = TuningDatabase(tmp_path / "r.db")
    for i, index in enumerate(space.legal_indices()[:count]):
        values = {"instructions": 1000 + 37 * ((i * 5) % count), "cycles": 9000 - 101 * i, "code_bytes": 400 + 13 * i}
        db.record(workload, Trial(space.config_at(int(index)), Outcome.OK, values), "random", 0)
    db.record(workload, Trial(space.config_at(int(space.legal_indices()[count])), Outcome.CRASH, error="x"), "random", 0)
    return db, workload


def _figures(monkeypatch):
    saved = {}
    real = report._save

    def keep(fig, path, title):
        saved[path.name] = (fig, title)
        real(fig, path, title)

    monkeypatch.setattr(report, "_save", keep)
    return saved


def _plotted(saved, name):
    fig, title = saved[name]
    return fig, title, fig.axes[0]


def test_default_objective_is_the_targets_own_unit_not_cycles(tmp_path, monkeypatch):
    db, workload = _m55_db(tmp_path)
    saved = _figures(monkeypatch)
    report.write_report(db, tmp_path / "out")
    records = db.records(workload)
    instructions = [r.trial.value("instructions") for r in records]
    _, _, ax = _plotted(saved, "w01-convergence.png")
    assert list(ax.get_lines()[0].get_ydata()) == [v for v in report.best_so_far(instructions) if v is not None]
    _, _, ax = _plotted(saved, "w01-pareto.png")
    assert sorted(ax.collections[0].get_offsets()[:, 0]) == sorted(v for v in instructions if v is not None)
    page = (tmp_path / "out" / "index.html").read_text()
    assert "best instructions" in page and "best cycles" not in page


def test_every_plot_names_kernel_shape_target_and_objective(tmp_path, monkeypatch):
    db, _ = _m55_db(tmp_path)
    saved = _figures(monkeypatch)
    result = report.write_report(db, tmp_path / "out")
    assert {p.name for p in result.images} == set(saved) and len(saved) == 3
    for name, (fig, title) in saved.items():
        for part in ("matmul_s8", "m=4, n=4, k=8", "cortex-m55", "instructions"):
            assert part in title, (name, title)
        assert title in fig._suptitle.get_text().replace("\n", " ")  # drawn on the image (broken into lines)
        assert Image.open(tmp_path / "out" / name).text["Title"] == title  # and in the PNG's Title field


class _Tables(HTMLParser):
    """The cells of the page's parameter table, row by row: [(tag, has rowspan, text), ...]."""

    def __init__(self):
        super().__init__()
        self.in_params, self.rows, self.cell = False, [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.in_params = dict(attrs).get("class") == "params"
        elif self.in_params and tag == "tr":
            self.rows.append([])
        elif self.in_params and tag in ("th", "td"):
            self.cell = [tag, "rowspan" in dict(attrs), ""]

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[2] += data

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self.cell is not None:
            self.rows[-1].append(tuple(self.cell))
            self.cell = None
        elif tag == "table":
            self.in_params = False

    def values(self) -> list[tuple[str, str]]:
        """(parameter, value) per body row: a parameter's name heads its first row (rowspan)."""
        pairs, parameter = [], None
        for cells in self.rows[1:]:  # the first row is the header
            if cells[0][1]:
                parameter, cells = cells[0][2], cells[1:]
            pairs.append((parameter, cells[0][2]))
        return pairs


def test_the_page_has_a_table_with_every_parameter_and_value(tmp_path):
    db, workload = _m55_db(tmp_path)
    report.write_report(db, tmp_path / "out")
    parser = _Tables()
    parser.feed((tmp_path / "out" / "index.html").read_text())
    records = db.records(workload)
    expected = {(name, str(r.trial.config[name])) for r in records for name, _ in r.trial.config.items}
    assert parser.rows[0][0][2] == "parameter"
    assert set(parser.values()) == expected and len(parser.values()) == len(expected)


def test_objective_option_chooses_what_is_plotted(tmp_path, monkeypatch):
    db, workload = _m55_db(tmp_path)
    db.close()
    saved = _figures(monkeypatch)
    result = CliRunner().invoke(main, ["report", "--db", str(tmp_path / "r.db"), "--out", str(tmp_path / "out"),
                                       "--objective", "cycles"])
    assert result.exit_code == 0, result.output
    cycles = [r.trial.value("cycles") for r in TuningDatabase(tmp_path / "r.db").records(workload)]
    _, title, ax = _plotted(saved, "w01-convergence.png")
    assert "minimising cycles" in title
    assert list(ax.get_lines()[0].get_ydata()) == [v for v in report.best_so_far(cycles) if v is not None]
    assert "best cycles" in (tmp_path / "out" / "index.html").read_text()


def test_an_objective_no_trial_measured_is_one_line_and_writes_nothing(tmp_path):
    db, _ = _m55_db(tmp_path)
    db.close()
    result = CliRunner().invoke(main, ["report", "--db", str(tmp_path / "r.db"), "--out", str(tmp_path / "out"),
                                       "--objective", "energy_uj"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "--objective energy_uj" in lines[0], result.output
    assert "instructions" in lines[0]  # names what was measured
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("present, unit, expected", [
    ({"instructions", "cycles"}, "instructions", "instructions"),
    ({"instructions", "cycles"}, "cycles", "cycles"),  # a target whose own unit is cycles
    ({"total_cycles"}, None, "total_cycles"),  # an NPU workload: no shipped target of that name
    ({"time_ns", "code_bytes"}, "time_ns", "time_ns"),
])
def test_objective_of_prefers_the_targets_unit(present, unit, expected):
    from edgetune.tuner import Config, Record
    trial = Trial(Config((("tile_m", 1),)), Outcome.OK, {name: 1.0 for name in present})
    records = [Record(1, None, trial, "random", 0, "")]
    assert report.objective_of(records, "", unit).name == expected


def test_the_objective_a_workload_was_tuned_for_wins_over_the_targets_unit(tmp_path, monkeypatch):
    """Where the database stores each workload's goal (TuningDatabase.goal), that objective
    is plotted; --objective still overrides it."""
    from types import SimpleNamespace

    db, workload = _m55_db(tmp_path)
    monkeypatch.setattr(db, "goal", lambda w: SimpleNamespace(objective="cycles") if w == workload else None,
                        raising=False)
    saved = _figures(monkeypatch)
    report.write_report(db, tmp_path / "out")
    assert "minimising cycles" in saved["w01-convergence.png"][1]
    assert "what the workload was tuned for" in (tmp_path / "out" / "index.html").read_text()
    report.write_report(db, tmp_path / "again", objective="instructions")
    assert "minimising instructions" in saved["w01-convergence.png"][1]
