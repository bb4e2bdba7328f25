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
  3  Sharing and resuming: trials.proposal, the workload's proposal sequence number (the
     order the search proposed trials in, not the order they finished in; rows migrated from
     version 2 get their id, the best order known), trials.batch (the first proposal number
     of the batch measured together; NULL for an imported or migrated trial) and
     trials.asked (1: the strategy asked for that batch; 0: it was given, e.g. --initial
     seeds or lost trials measured again); the table claims: a configuration some process
     has proposed and is measuring (owner host, pid and process start, lease end), never a
     result. Import batches: trials.import_batch, the `db import` a trial came from (NULL:
     measured here), and the table import_batches (id, source file, time of the import,
     lines read), so one import can be listed and removed as a whole (`edgetune db
     batches`, `db remove --batch`). Goals: the table workloads (objective and bounds a
     workload was tuned for; see WORKLOAD_GOALS).
  4  Model rounds: the table model_rounds, the rounds of a model's tuning (which layer's
     workload, how many trials) as the first process to reach each round decided it, so
     several `model tune` processes on one file follow one sequence of rounds and split the
     model's budget exactly (see MODEL_ROUNDS).
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Callable

# Schema 3's claims table (step `_proposals_and_claims`): configurations proposed and being
# measured by some process, never results. One text for new files and for the migration.
CLAIMS_TABLE = """
CREATE TABLE claims (
    workload TEXT NOT NULL,
    config_key TEXT NOT NULL,
    config TEXT NOT NULL,
    proposal INTEGER NOT NULL,
    batch INTEGER,
    asked INTEGER NOT NULL DEFAULT 0,
    strategy TEXT NOT NULL,
    seed INTEGER,
    owner_host TEXT NOT NULL,
    owner_pid INTEGER NOT NULL,
    owner_started TEXT NOT NULL,
    lease_until REAL NOT NULL,
    PRIMARY KEY (workload, config_key)
);
"""

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
    proposal INTEGER,
    batch INTEGER,
    asked INTEGER NOT NULL DEFAULT 0,
    import_batch INTEGER,
    UNIQUE (workload, config_key)
);
CREATE INDEX trials_by_target ON trials (target, kernel);
CREATE INDEX trials_by_machine ON trials (measured_by);
CREATE UNIQUE INDEX trials_by_proposal ON trials (workload, proposal);
CREATE TABLE import_batches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL,
    imported_at TEXT NOT NULL,
    lines INTEGER NOT NULL
);
CREATE INDEX trials_by_import_batch ON trials (import_batch);
""" + CLAIMS_TABLE + """
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

# Schema 4: the rounds of a model's tuning, keyed by what identifies that tuning (its layers'
# workloads, objective, bounds, scheduler, round size; edgetune.model.shared_rounds). A round is
# written once, by the first process to reach it; every other process follows it, so the
# model's budget is split between them as one workload's is by claims.
MODEL_ROUNDS = """
CREATE TABLE model_rounds (
    model TEXT NOT NULL,
    number INTEGER NOT NULL,
    workload TEXT NOT NULL,
    trials INTEGER NOT NULL,
    PRIMARY KEY (model, number)
);
"""
SCHEMAS[4] = SCHEMAS[3] + MODEL_ROUNDS
SCHEMA_VERSION = max(SCHEMAS)
# The schema version `db export` lines carry: the last version that changed what a line
# holds (schema 4 added a table lines do not carry), so older edgetunes still read them.
LINE_VERSION = 3


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
    _proposals_and_claims(conn)
    _import_batches(conn)
    _workload_goals(conn)


def _proposals_and_claims(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE trials ADD COLUMN proposal INTEGER")
    conn.execute("ALTER TABLE trials ADD COLUMN batch INTEGER")
    conn.execute("ALTER TABLE trials ADD COLUMN asked INTEGER NOT NULL DEFAULT 0")
    # Version 2 kept no proposal order: row order is the best there is. batch stays NULL
    # and asked 0, so a resumed search tells these trials rather than replaying them.
    conn.execute("UPDATE trials SET proposal = id")
    conn.execute("CREATE UNIQUE INDEX trials_by_proposal ON trials (workload, proposal)")
    conn.execute(CLAIMS_TABLE)


def _import_batches(conn: sqlite3.Connection) -> None:
    # Every trial stored so far was measured here or imported before batches existed: NULL.
    conn.execute("ALTER TABLE trials ADD COLUMN import_batch INTEGER")
    conn.execute("CREATE TABLE import_batches (id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL,"
                 " imported_at TEXT NOT NULL, lines INTEGER NOT NULL)")
    conn.execute("CREATE INDEX trials_by_import_batch ON trials (import_batch)")


def _workload_goals(conn: sqlite3.Connection) -> None:
    # A new table: every trial stays; workloads tuned before it have no stored goal.
    for statement in (s.strip() for s in WORKLOAD_GOALS.split(";")):
        if statement:
            conn.execute(statement)


def _model_rounds(conn: sqlite3.Connection) -> None:
    # A new table: no model run before it recorded its rounds; a resumed one records the
    # rounds it replays as it reaches them.
    conn.execute(MODEL_ROUNDS)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "record which machine measured each trial, and when", _measured_by_and_at),
    Migration(2, "store each trial's proposal order, claims of trials being measured, the import batch of each "
                 "imported trial, and the objective and bounds each workload is tuned for", _schema_3),
    Migration(3, "record the rounds of each model's tuning, so processes sharing the file split its budget",
              _model_rounds),
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
