"""A workload's identity covers what a measurement depends on; estimates on top of it are
recomputed from stored raw counts (docs/workload-identity.md). A user's board file is
edited between runs: the clock, wait states and cost table re-price stored trials without
measuring anything; the memory map or the flags make a new workload, measured again; an
untouched file reuses everything."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.hal import load_target
from edgetune.codegen import get_kernel
from edgetune.identity import measurement_fingerprint, recompute_estimates
from edgetune.session import workload_of
from edgetune.targets import target_file
from edgetune.tuner import TuningDatabase

pytestmark = pytest.mark.qemu

SHAPE = "m=4,n=8,k=16"
SHIPPED = target_file("cortex-m55").read_text(encoding="utf-8").replace('name = "cortex-m55"\ndescription',
                                                                        'name = "myboard"\ndescription', 1)
EDITS = {
    "clock": ("clock_hz = 32_000_000", "clock_hz = 16_000_000"),
    "wait_states": ('name = "dtcm"\nkind = "tcm"\n', 'name = "dtcm"\nkind = "tcm"\nwait_states = 3\naccess_pj = 20\n'),
    "cost": ('alu = { cycles = 1, unit = "scalar", energy_pj = 18 }',
             'alu = { cycles = 2, unit = "scalar", energy_pj = 30 }'),
    "memory_map": ("base = 0x2100_0000\nsize = 0x0040_0000", "base = 0x2100_0000\nsize = 0x0020_0000"),
    "flags": ('cflags = ["-march=armv8.1-m.main+mve.fp+fp.dp", "-mfloat-abi=hard", "-mthumb"]',
              'cflags = ["-march=armv8.1-m.main+mve.fp+fp.dp", "-mfloat-abi=hard", "-mthumb", "-fno-inline"]'),
}


def board(path: Path, *edits: str) -> Path:
    text = SHIPPED
    for name in edits:
        old, new = EDITS[name]
        assert old in text, name  # the edit must really change the file
        text = text.replace(old, new, 1)
    path.write_text(text, encoding="utf-8")
    return path


def copy_db(source: Path, copy: Path) -> Path:
    """A copy of a database in WAL mode, committed pages included."""
    with sqlite3.connect(source) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    return copy


def cli(*args) -> dict:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def tune(db: Path, board_file: Path, budget: int = 3) -> dict:
    return cli("tune", "matmul_s8", "--target", board_file, "--shape", SHAPE, "--budget", budget, "--db", db, "--json")


def stored(db: Path, board_file: Path) -> dict[str, dict]:
    """Values of the stored trials as `best`/`tune` read them, keyed by configuration."""
    target = load_target(board_file)
    database = TuningDatabase(db)
    kernel = get_kernel("matmul_s8")
    recompute_estimates(database, target)
    trials = database.trials(workload_of(kernel, target, kernel.parse_shape(SHAPE)))
    database.close()
    return {t.config.key(): t.values for t in trials if not t.outcome.failed}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    root = tmp_path_factory.mktemp("identity")
    first = tune(root / "t.db", board(root / "board.toml"))
    assert first["new_trials"] == 3
    return root, first


@pytest.mark.parametrize("edit", ["clock", "wait_states", "cost"])
def test_editing_an_estimate_reprices_stored_trials_without_measuring(tuned, tmp_path, edit):
    root, first = tuned
    db = copy_db(root / "t.db", tmp_path / "t.db")
    before = stored(db, root / "board.toml")
    edited = board(tmp_path / "board.toml", edit)
    assert measurement_fingerprint(load_target(edited)) == measurement_fingerprint(load_target(root / "board.toml"))
    after = stored(db, edited)
    target = load_target(edited)
    assert len(after) == len(before) > 0
    assert after.keys() == before.keys()
    for old, new in zip(before.values(), after.values()):
        assert new["instructions"] == old["instructions"] and new["mix"] == old["mix"]  # the measurement stays
        assert new["energy_uj"] != old["energy_uj"]  # every edit here changes the energy estimate
        if edit != "clock":  # the clock only stretches static power over time
            assert new["cycles"] > old["cycles"]
        assert {k: new[k] for k in ("cycles", "energy_uj", "power_mw")} == \
            target.estimated_values(new["mix"], new["accesses"])
    again = tune(db, edited)  # a resumed run: every trial is there, nothing is measured
    assert again["new_trials"] == 0 and again["trials"] == 3
    best = cli("best", "matmul_s8", "--target", edited, "--shape", SHAPE, "--db", db, "--json")["best"]
    assert best["energy_uj"] in {values["energy_uj"] for values in after.values()}


def test_a_repriced_trial_equals_a_fresh_measurement_under_the_edited_file(tuned, tmp_path):
    root, first = tuned
    db = copy_db(root / "t.db", tmp_path / "t.db")
    edited = board(tmp_path / "board.toml", "clock", "wait_states", "cost")
    repriced = stored(db, edited)
    fresh_db = tmp_path / "fresh.db"
    fresh = tune(fresh_db, edited)
    assert fresh["new_trials"] == 3  # same seed: the same three configurations
    assert stored(fresh_db, edited) == repriced


@pytest.mark.parametrize("edit", ["memory_map", "flags"])
def test_editing_what_a_measurement_depends_on_makes_a_new_workload(tuned, tmp_path, edit):
    root, first = tuned
    db = copy_db(root / "t.db", tmp_path / "t.db")
    edited = board(tmp_path / "board.toml", edit)
    assert measurement_fingerprint(load_target(edited)) != measurement_fingerprint(load_target(root / "board.toml"))
    summary = tune(db, edited)
    assert summary["new_trials"] == 3 and summary["trials"] == 3  # measured again, under its own identity
    assert len(TuningDatabase(db).workloads("myboard")) == 2  # the old workload is kept as it was


def test_an_untouched_file_reuses_everything(tuned, tmp_path):
    root, first = tuned
    db = copy_db(root / "t.db", tmp_path / "t.db")
    again = tune(db, board(tmp_path / "board.toml"))
    assert again["new_trials"] == 0 and again["best"] == first["best"]
    assert stored(db, tmp_path / "board.toml") == stored(root / "t.db", root / "board.toml")


def test_report_prices_a_board_files_trials_with_its_current_tables(tuned, tmp_path):
    root, first = tuned
    db = copy_db(root / "t.db", tmp_path / "t.db")
    before = min(values["cycles"] for values in stored(db, root / "board.toml").values())
    edited = board(tmp_path / "board.toml", "cost")
    after = min(values["cycles"] for values in stored(db, edited).values())
    assert after != before
    for extra, shown in (((), before), (("--target", edited), after)):
        result = CliRunner().invoke(main, ["report", "--db", str(db), "--out", str(tmp_path / "r"),
                                           "--objective", "cycles", *map(str, extra)])
        assert result.exit_code == 0, result.output
        page = (tmp_path / "r" / "index.html").read_text()
        assert f"<th>best cycles</th><td>{shown:g}</td>" in page  # the stale figure without the file


def test_a_mix_that_cannot_be_priced_keeps_its_stored_figures(tuned):
    from edgetune.identity import Estimates
    from edgetune.tuner import Config, Outcome, Trial

    root, _ = tuned
    target = load_target(root / "board.toml")
    kernel = get_kernel("matmul_s8")
    workload = workload_of(kernel, target, kernel.parse_shape(SHAPE))
    estimates = Estimates()
    estimates.add(target)
    values = {"instructions": 10, "cycles": 12.0, "mix": {"teleport": 10}, "accesses": {}}
    trial = Trial(Config((("tile_m", 1),)), Outcome.OK, values)
    assert estimates(workload, trial) == trial
    priced = estimates(workload, Trial(Config((("tile_m", 1),)), Outcome.OK, {**values, "mix": {"alu": 10}}))
    assert priced.values["cycles"] == target.estimated_values({"alu": 10}, {})["cycles"] != 12.0


def test_a_harness_that_counts_differently_makes_a_new_workload(monkeypatch):
    """A runner's harness_version is part of the fingerprint once it passes 1 (the serial
    harness is at 2: its variant table moved SysTick counts); a bump gives a new workload."""
    from edgetune.targets import get_target
    from edgetune.targets.serialboard import SerialRunner
    serial = get_target("an547-serial")
    assert SerialRunner.harness_version >= 2
    before = measurement_fingerprint(serial)
    monkeypatch.setattr(SerialRunner, "harness_version", SerialRunner.harness_version + 1)
    assert measurement_fingerprint(serial) != before
