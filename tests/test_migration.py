"""Schema migrations: a database file written by an older edgetune (built here exactly as
that release wrote it, from the schema text kept in edgetune.tuner.schema) opens, is
upgraded in place in one transaction, keeps every trial, and resumes without duplicates;
a step that fails (or a kill) mid-upgrade leaves the old file as it was; a newer file is
refused; old JSON lines still import."""
from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from edgetune.session import TuneRequest, tune, workload_of
from edgetune.tuner import DatabaseError, Outcome, Space, Trial, TuningDatabase, Workload, choice, schema

SPACE = Space([choice("tile", [1, 2, 4, 8]), choice("compiler", ["gcc", "clang"])])
W = Workload("matmul_s8", 2, "cortex-m55", (("m", 4), ("n", 8), ("k", 2)), "0123456789ab")


def write_v1(path: Path, rows: list[tuple[Workload, Trial, str, int | None, str]]) -> None:
    """A version-1 file as edgetune 0.1 wrote it: WAL mode, the v1 schema, its meta rows,
    and its 15-column insert."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN IMMEDIATE")
    for statement in schema.statements(1):
        conn.execute(statement)
    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                     [("application", "edgetune-tuning-db"), ("schema_version", "1")])
    for workload, trial, strategy, seed, created in rows:
        conn.execute(
            "INSERT OR IGNORE INTO trials (workload, kernel, kernel_version, target, shape, toolchain, config_key,"
            " config, outcome, measured, error, info, strategy, seed, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (workload.key(), workload.kernel, workload.kernel_version, workload.target,
             json.dumps(dict(workload.shape)), workload.toolchain, trial.config.key(),
             json.dumps(list(map(list, trial.config.items))), trial.outcome.value,
             json.dumps(trial.values, sort_keys=True), trial.error, json.dumps(trial.info, sort_keys=True),
             strategy, seed, created))
    conn.execute("COMMIT")
    conn.close()


def v1_rows() -> list:
    return [(W, Trial(SPACE.config_at(i), Outcome.OK if i % 3 else Outcome.COMPILE_ERROR,
                      {"instructions": 1000 - i} if i % 3 else {}, "" if i % 3 else "kernel.c:1: error",
                      {"compiler_version": "gcc 12.2"}), "random", 7, f"2026-11-0{i + 1}T10:00:00Z")
            for i in range(5)]


def schema_version(path: Path) -> int:
    conn = sqlite3.connect(str(path))
    try:
        return int(dict(conn.execute("SELECT key, value FROM meta"))["schema_version"])
    finally:
        conn.close()


def layout(path: Path) -> tuple:
    """Columns (name, type, not null) of trials and the index names: the parts of a schema
    a migration must reproduce."""
    conn = sqlite3.connect(str(path))
    try:
        tables = sorted(row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"))
        columns = {table: sorted((row[1], row[2], row[3]) for row in conn.execute(f"PRAGMA table_info({table})"))
                   for table in tables}
        indexes = sorted(row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='index'"))
        return columns, indexes
    finally:
        conn.close()


def test_a_version_1_file_is_upgraded_in_place_and_keeps_every_trial(tmp_path):
    path = tmp_path / "old.db"
    write_v1(path, v1_rows())
    assert schema_version(path) == 1
    db = TuningDatabase(path)
    try:
        records = db.records(W)
        assert [(r.trial, r.strategy, r.seed, r.created) for r in records] == \
            [(t, s, seed, c) for _, t, s, seed, c in v1_rows()]
        assert all(r.trial.measured_by is None and r.trial.measured_at is None for r in records)
        assert db.best(W, "instructions").trial.config == SPACE.config_at(4)
        # The upgraded file takes new trials with the new columns filled.
        new = Trial(SPACE.config_at(6), Outcome.OK, {"instructions": 5}, measured_by="farm-3/board-a",
                    measured_at="2026-11-29T12:00:00Z")
        assert db.record(W, new, "random", 7) and not db.record(W, v1_rows()[0][1], "random", 7)
        assert db.records(W)[-1].trial == new
    finally:
        db.close()
    assert schema_version(path) == schema.SCHEMA_VERSION == 4
    fresh = tmp_path / "fresh.db"
    TuningDatabase(fresh).close()
    assert layout(path) == layout(fresh)  # the migration yields exactly what a new file gets
    TuningDatabase(path).close()  # and opening it again changes nothing
    assert schema_version(path) == schema.SCHEMA_VERSION


def test_every_migration_step_is_registered_once_in_order():
    sources = [step.source for step in schema.MIGRATIONS]
    assert sources == list(range(1, schema.SCHEMA_VERSION))
    assert set(schema.SCHEMAS) == set(range(1, schema.SCHEMA_VERSION + 1))


def failing_step(kind):
    """Migration steps that do the real work and then fail: by an exception, or by
    the process being killed outright."""
    real = schema.MIGRATIONS[0]

    def apply(conn):
        real.apply(conn)
        conn.execute("UPDATE trials SET error = 'half-migrated'")
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("disk on fire")

    return (schema.Migration(1, real.what, apply),)


def assert_still_version_1(path: Path, before: list) -> None:
    """Readable as the old release reads it: version 1, the v1 columns, the same rows."""
    conn = sqlite3.connect(str(path))
    try:
        assert dict(conn.execute("SELECT key, value FROM meta"))["schema_version"] == "1"
        columns = [row[1] for row in conn.execute("PRAGMA table_info(trials)")]
        assert "measured_by" not in columns and len(columns) == 16
        assert conn.execute("SELECT * FROM trials ORDER BY id").fetchall() == before
    finally:
        conn.close()


def test_a_failing_migration_step_leaves_the_version_1_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "old.db"
    write_v1(path, v1_rows())
    before_bytes = path.read_bytes()
    conn = sqlite3.connect(str(path))
    before = conn.execute("SELECT * FROM trials ORDER BY id").fetchall()
    conn.close()
    monkeypatch.setattr(schema, "MIGRATIONS", failing_step("raise"))
    with pytest.raises(DatabaseError) as info:
        TuningDatabase(path)
    assert str(path) in str(info.value) and "disk on fire" in str(info.value) and "left as it was" in str(info.value)
    assert path.read_bytes() == before_bytes
    assert_still_version_1(path, before)
    monkeypatch.undo()
    db = TuningDatabase(path)  # the real migration still works on it afterwards
    try:
        assert [r.trial for r in db.records(W)] == [t for _, t, _, _, _ in v1_rows()]
    finally:
        db.close()


def test_a_process_killed_mid_migration_leaves_the_version_1_file_usable(tmp_path):
    path = tmp_path / "old.db"
    write_v1(path, v1_rows())
    conn = sqlite3.connect(str(path))
    before = conn.execute("SELECT * FROM trials ORDER BY id").fetchall()
    conn.close()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_migration
        from edgetune.tuner import TuningDatabase, schema
        schema.MIGRATIONS = test_migration.failing_step("kill")
        TuningDatabase({str(path)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert_still_version_1(path, before)  # SQLite rolls the hot journal back on next open
    db = TuningDatabase(path)
    try:
        assert len(db.records(W)) == 5
    finally:
        db.close()
    assert schema_version(path) == schema.SCHEMA_VERSION


def test_a_file_from_a_newer_edgetune_is_refused_untouched(tmp_path):
    path = tmp_path / "future.db"
    write_v1(path, v1_rows())
    conn = sqlite3.connect(str(path))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(schema.SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match=f"schema version {schema.SCHEMA_VERSION + 1} is newer"):
        TuningDatabase(path)
    assert path.read_bytes() == before


def test_version_1_json_lines_still_import(tmp_path):
    # A line exactly as edgetune 0.1's `db export` wrote it: no measured_by/measured_at.
    line = {"format": "edgetune-trial", "schema_version": 1,
            "workload": {"kernel": W.kernel, "kernel_version": W.kernel_version, "target": W.target,
                         "shape": [list(p) for p in W.shape], "toolchain": W.toolchain},
            "config": [["tile", 4], ["compiler", "clang"]], "outcome": "ok", "values": {"instructions": 77},
            "error": "", "info": {}, "strategy": "genetic", "seed": 3, "created": "2026-10-01T08:00:00Z"}
    db = TuningDatabase(tmp_path / "new.db")
    try:
        assert db.import_jsonl([json.dumps(line)]).added == 1
        [record] = db.records(W)
        assert record.trial.config.as_dict() == {"tile": 4, "compiler": "clang"}
        assert record.trial.values == {"instructions": 77} and record.trial.measured_by is None
        assert (record.strategy, record.seed, record.created) == ("genetic", 3, "2026-10-01T08:00:00Z")
        out = io.StringIO()
        db.export_jsonl(out)
        exported = json.loads(out.getvalue())
        assert exported["schema_version"] == schema.LINE_VERSION and exported["measured_by"] is None
    finally:
        db.close()


def test_a_resumed_tuning_run_on_an_upgraded_file_measures_nothing_twice(tmp_path, matmul, host):
    """Trials measured for real, stored in a version-1 file, then the run is resumed on it."""
    shape = {"m": 3, "n": 4, "k": 5}
    scratch = TuningDatabase(tmp_path / "scratch.db")
    tune(TuneRequest(matmul, host, shape, strategy="random", budget=3, seed=1), scratch)
    workload = workload_of(matmul, host, shape)
    old = scratch.records(workload)
    scratch.close()
    path = tmp_path / "old.db"
    write_v1(path, [(workload, r.trial, r.strategy, r.seed, r.created) for r in old])

    db = TuningDatabase(path)
    try:
        summary = tune(TuneRequest(matmul, host, shape, strategy="random", budget=6, seed=1), db)
        records = db.records(workload)
    finally:
        db.close()
    assert summary.trials == 6 and summary.new_trials == 3
    keys = [r.trial.config.key() for r in records]
    assert len(set(keys)) == 6 and keys[:3] == [r.trial.config.key() for r in old]
    assert [r.trial.measured_by for r in records[:3]] == [None] * 3  # measured before schema 2: unknown
    assert all(r.trial.measured_by and r.trial.measured_at for r in records[3:])  # stamped by this run


def write_v2(path: Path, rows: list[tuple[Workload, Trial, str, int | None, str]]) -> None:
    """A version-2 file as edgetune wrote it before proposal order and claims: the v2
    schema and its 17-column insert; rows in the given (completion) order."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN IMMEDIATE")
    for statement in schema.statements(2):
        conn.execute(statement)
    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                     [("application", "edgetune-tuning-db"), ("schema_version", "2")])
    for workload, trial, strategy, seed, created in rows:
        conn.execute(
            "INSERT INTO trials (workload, kernel, kernel_version, target, shape, toolchain, config_key,"
            " config, outcome, measured, error, info, strategy, seed, created, measured_by, measured_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (workload.key(), workload.kernel, workload.kernel_version, workload.target,
             json.dumps(dict(workload.shape)), workload.toolchain, trial.config.key(),
             json.dumps(list(map(list, trial.config.items))), trial.outcome.value,
             json.dumps(trial.values, sort_keys=True), trial.error, json.dumps(trial.info, sort_keys=True),
             strategy, seed, created, "host-a", created))
    conn.execute("COMMIT")
    conn.close()


def test_a_version_2_file_gets_proposal_order_and_claims(tmp_path):
    path = tmp_path / "v2.db"
    write_v2(path, v1_rows())
    db = TuningDatabase(path)
    try:
        records = db.proposals(W)
        # Version 2 kept no proposal order: row order is the best known, and no trial is
        # taken for a strategy's batch (a resumed search tells them, never replays them).
        assert [r.proposal for r in records] == [r.id for r in records] == sorted(r.id for r in records)
        assert all(r.batch is None for r in records)
        assert [r.trial.config for r in records] == [t.config for _, t, _, _, _ in v1_rows()]
        assert all(r.trial.measured_by == "host-a" for r in records)
        assert db.claims(W) == []
        new = Trial(SPACE.config_at(6), Outcome.OK, {"instructions": 5})
        assert db.record(W, new, "random", 7)
        assert db.proposals(W)[-1].proposal == len(records) + 1
    finally:
        db.close()
    assert schema_version(path) == schema.SCHEMA_VERSION
    fresh = tmp_path / "fresh.db"
    TuningDatabase(fresh).close()
    assert layout(path) == layout(fresh)
    conn = sqlite3.connect(str(path))
    try:
        migrated_claims = conn.execute("PRAGMA table_info(claims)").fetchall()
    finally:
        conn.close()
    conn = sqlite3.connect(str(fresh))
    try:
        assert migrated_claims and migrated_claims == conn.execute("PRAGMA table_info(claims)").fetchall()
    finally:
        conn.close()


def test_a_version_2_file_gains_workload_goals_and_keeps_its_trials(tmp_path):
    """Schema 3's "workload goals" step: a version-2 file (as 0.2 wrote it) opens, keeps
    every trial, has no goal for its old workloads, and stores goals afterwards."""
    from edgetune.tuner import Bound, Goal

    path = tmp_path / "v2.db"
    write_v2(path, v1_rows())
    db = TuningDatabase(path)
    try:
        assert schema_version(path) == schema.SCHEMA_VERSION
        assert [r.trial.config for r in db.records(W)] == [t.config for _, t, _, _, _ in v1_rows()]
        assert db.goal(W) is None  # tuned before goals were stored: commands use the target's unit
        goal = Goal("cycles", (Bound("energy_uj", 2.123456789),))
        db.set_goal(W, goal)
        assert db.goal(W) == goal  # the limit exactly, not as printed
        db.set_goal(W, Goal("instructions"))
        assert db.goal(W) == Goal("instructions")  # the last run's goal
        assert len(db.records(W)) == 5
    finally:
        db.close()
    fresh = tmp_path / "fresh.db"
    TuningDatabase(fresh).close()
    assert layout(path) == layout(fresh)


def test_goals_travel_with_json_lines_and_never_overwrite_a_local_one(tmp_path):
    from edgetune.tuner import Bound, Goal

    source = TuningDatabase(tmp_path / "a.db")
    source.record(W, v1_rows()[1][1], "random", 1)
    source.set_goal(W, Goal("cycles", (Bound("code_bytes", 4096),)))
    out = io.StringIO()
    source.export_jsonl(out)
    source.close()
    lines = out.getvalue().splitlines()
    fresh = TuningDatabase(tmp_path / "b.db")
    assert fresh.import_jsonl(lines).added == 1
    assert fresh.goal(W) == Goal("cycles", (Bound("code_bytes", 4096.0),))
    local = TuningDatabase(tmp_path / "c.db")
    local.set_goal(W, Goal("energy_uj"))
    local.import_jsonl(lines)
    assert local.goal(W) == Goal("energy_uj")
    bad = json.loads(lines[0])
    bad["goal"] = {"objective": "cycles; DROP", "bounds": []}
    with pytest.raises(DatabaseError, match="line 1: .*cycles; DROP"):
        fresh.import_jsonl([json.dumps(bad)])
