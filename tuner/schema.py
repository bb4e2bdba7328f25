"""The tuning database's schema, every version of it, and the steps between versions.

`SCHEMAS[n]` is the exact text release n created files with. Old texts stay here for good:
tests build files the way an older edgetune wrote them and check they upgrade. To change
the schema, add `SCHEMAS[n + 1]` (what a new file gets) and one `Migration(n, n + 1, ...)`
that turns a version-n file into exactly that; `migrate` runs the missing steps in order,
all in the caller's single transaction.

History:
  1  first release
  2  trials.measured_by (host, or host/board resource, that built and ran the trial) and
     trials.measured_at (UTC time the measurement finished, by that machine's clock), so a
     farm of hosts and boards can tell which one produced an outlier. NULL: unknown (trials
     stored by version 1, or lost on a cluster before any machine measured them).
  3  trials.batch: the `db import` batch a trial came from (NULL: measured here), and the
     table batches (id, source file, time of the import, lines read), so one import can be
     listed and removed as a whole (`edgetune db batches`, `db remove --batch`); the table
     workloads (objective and bounds a workload was tuned for; see WORKLOAD_GOALS).
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Callable

SCHEMAS: dict[int, str] = {
    1: """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workload TEXT NOT NULL,
    kernel TEXT NOT NULL,
    kernel_version INTEGER NOT NULL,
    target TEXT NOT NULL,
    shape TEXT NOT NULL,
    toolchain TEXT NOT NULL,
    config_key TEXT NOT NULL,
    config TEXT NOT NULL,
    outcome TEXT NOT NULL,
    measured TEXT NOT NULL,
    error TEXT NOT NULL,
    info TEXT NOT NULL,
    strategy TEXT NOT NULL,
    seed INTEGER,
    created TEXT NOT NULL,
    UNIQUE (workload, config_key)
);
CREATE INDEX trials_by_target ON trials (target, kernel);
""",
    2: """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workload TEXT NOT NULL,
    kernel TEXT NOT NULL,
    kernel_version INTEGER NOT NULL,
    target TEXT NOT NULL,
    shape TEXT NOT NULL,
    toolchain TEXT NOT NULL,
    config_key TEXT NOT NULL,
    config TEXT NOT NULL,
    outcome TEXT NOT NULL,
    measured TEXT NOT NULL,
    error TEXT NOT NULL,
    info TEXT NOT NULL,
    strategy TEXT NOT NULL,
    seed INTEGER,
    created TEXT NOT NULL,
    measured_by TEXT,
    measured_at TEXT,
    UNIQUE (workload, config_key)
);
CREATE INDEX trials_by_target ON trials (target, kernel);
CREATE INDEX trials_by_machine ON trials (measured_by);
""",
    # schema 3: import batches (with WORKLOAD_GOALS below)
    3: """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workload TEXT NOT NULL,
    kernel TEXT NOT NULL,
    kernel_version INTEGER NOT NULL,
    target TEXT NOT NULL,
    shape TEXT NOT NULL,
    toolchain TEXT NOT NULL,
    config_key TEXT NOT NULL,
    config TEXT NOT NULL,
    outcome TEXT NOT NULL,
    measured TEXT NOT NULL,
    error TEXT NOT NULL,
    info TEXT NOT NULL,
    strategy TEXT NOT NULL,
    seed INTEGER,
    created TEXT NOT NULL,
    measured_by TEXT,
    measured_at TEXT,
    batch INTEGER,
    UNIQUE (workload, config_key)
);
CREATE INDEX trials_by_target ON trials (target, kernel);
CREATE INDEX trials_by_machine ON trials (measured_by);
CREATE TABLE batches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL,
    imported_at TEXT NOT NULL,
    lines INTEGER NOT NULL
);
CREATE INDEX trials_by_batch ON trials (batch);
""",
}

# Schema 3, its second part:
# A `workloads` table: the objective and bounds (JSON [[name, limit], ...]) each workload
# was last tuned for, so `export`, `verify`, `best` and `place` choose what `tune` searched
# for. No row: the workload predates it, or was never tuned here (imported trials of a
# line without a goal); commands then use the target's own unit, unbounded.
WORKLOAD_GOALS = """
CREATE TABLE workloads (
    workload TEXT PRIMARY KEY,
    objective TEXT NOT NULL,
    bounds TEXT NOT NULL,
    updated TEXT NOT NULL
);
"""
SCHEMAS[3] += WORKLOAD_GOALS
SCHEMA_VERSION = max(SCHEMAS)


def statements(version: int) -> list[str]:
    return [s.strip() for s in SCHEMAS[version].split(";") if s.strip()]


@dataclass(frozen=True)
class Migration:
    """One step: a file at `source` becomes a file at `source + 1`."""

    source: int
    what: str
    apply: Callable[[sqlite3.Connection], None]


def _measured_by_and_at(conn: sqlite3.Connection) -> None:
    # ADD COLUMN keeps every row; old rows read NULL (unknown), which is the truth.
    conn.execute("ALTER TABLE trials ADD COLUMN measured_by TEXT")
    conn.execute("ALTER TABLE trials ADD COLUMN measured_at TEXT")
    conn.execute("CREATE INDEX trials_by_machine ON trials (measured_by)")


def _schema_3(conn: sqlite3.Connection) -> None:
    _import_batches(conn)
    _workload_goals(conn)


def _import_batches(conn: sqlite3.Connection) -> None:
    # Every trial stored so far was measured here or imported before batches existed: NULL.
    conn.execute("ALTER TABLE trials ADD COLUMN batch INTEGER")
    conn.execute("CREATE TABLE batches (id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL,"
                 " imported_at TEXT NOT NULL, lines INTEGER NOT NULL)")
    conn.execute("CREATE INDEX trials_by_batch ON trials (batch)")


def _workload_goals(conn: sqlite3.Connection) -> None:
    # A new table: every trial stays; workloads tuned before it have no stored goal.
    for statement in (s.strip() for s in WORKLOAD_GOALS.split(";")):
        if statement:
            conn.execute(statement)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "record which machine measured each trial, and when", _measured_by_and_at),
    Migration(2, "record the import batch of each imported trial; store the objective and bounds each "
                 "workload is tuned for", _schema_3),
)


def migrate(conn: sqlite3.Connection, version: int, steps: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Bring a file at `version` to SCHEMA_VERSION inside the caller's open transaction;
    returns the new version. Any exception leaves the rollback to the caller."""
    by_source = {step.source: step for step in steps}
    while version < SCHEMA_VERSION:
        step = by_source.get(version)
        if step is None:
            raise LookupError(f"no migration from schema version {version}")
        step.apply(conn)
        version += 1
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    return version
