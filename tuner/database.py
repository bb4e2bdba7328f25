"""The tuning database: every trial of every workload, in SQLite.

Each trial is committed the moment it completes, so a run killed at any point keeps
everything it finished; a (workload, configuration) pair is stored at most once, so a
resumed run never measures or records a configuration twice. The file carries an
application tag and a schema version; a file that is not an edgetune database, or one
written by a newer edgetune, is refused with its path named and left untouched.
"""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .space import Config
from .trial import Outcome, Trial

SCHEMA_VERSION = 1
APPLICATION = "edgetune-tuning-db"

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workload TEXT NOT NULL,
    kernel TEXT NOT NULL,
    kernel_version INTEGER NOT NULL,
    target TEXT NOT NULL,
    shape TEXT NOT NULL,
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
"""


class DatabaseError(ValueError):
    """The database file cannot be used (foreign, corrupt, too new, unwritable)."""


@dataclass(frozen=True)
class Workload:
    """What is being tuned: a kernel template version, a shape, a target."""

    kernel: str
    kernel_version: int
    target: str
    shape: tuple[tuple[str, int], ...]

    def key(self) -> str:
        shape = ",".join(f"{k}={v}" for k, v in self.shape)
        return f"{self.kernel}@v{self.kernel_version}/{self.target}/{shape}"

    def shape_dict(self) -> dict[str, int]:
        return dict(self.shape)


@dataclass(frozen=True)
class Record:
    """A stored trial with where and when it came from."""

    id: int
    workload: Workload
    trial: Trial
    strategy: str
    seed: int | None
    created: str


class TuningDatabase:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise DatabaseError(f"{self.path}: is not a file")
        if not self.path.parent.exists():
            raise DatabaseError(f"{self.path}: folder {self.path.parent} does not exist")
        is_new = not self.path.exists() or self.path.stat().st_size == 0
        self._conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        try:
            # Look before writing anything: a foreign file must be left exactly as it was.
            if not is_new:
                self._check()
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            if is_new:
                self._create()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise DatabaseError(f"{self.path}: not a usable edgetune database ({exc})") from None
        except DatabaseError:
            self._conn.close()
            raise

    # --- opening ------------------------------------------------------------------------
    def _create(self) -> None:
        with self._transaction():
            for statement in filter(str.strip, _SCHEMA.split(";")):
                self._conn.execute(statement)
            self._conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                                   [("application", APPLICATION), ("schema_version", str(SCHEMA_VERSION))])

    def _check(self) -> None:
        tables = {row[0] for row in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" not in tables:
            raise DatabaseError(f"{self.path}: is a SQLite file but not an edgetune database (no meta table)")
        meta = dict(self._conn.execute("SELECT key, value FROM meta"))
        if meta.get("application") != APPLICATION:
            raise DatabaseError(f"{self.path}: is not an edgetune database (application {meta.get('application')!r})")
        try:
            version = int(meta.get("schema_version", "0"))
        except ValueError:
            raise DatabaseError(f"{self.path}: unreadable schema version {meta.get('schema_version')!r}") from None
        if version > SCHEMA_VERSION:
            raise DatabaseError(f"{self.path}: schema version {version} is newer than this edgetune "
                                f"understands ({SCHEMA_VERSION}); upgrade edgetune")
        # Older versions would be migrated here, one step at a time; version 1 is the first.

    def _transaction(self):
        conn = self._conn

        class _Tx:
            def __enter__(self):
                conn.execute("BEGIN IMMEDIATE")

            def __exit__(self, kind, value, tb):
                conn.execute("COMMIT" if kind is None else "ROLLBACK")
                return False

        return _Tx()

    def close(self) -> None:
        self._conn.close()

    # --- writing ------------------------------------------------------------------------
    def record(self, workload: Workload, trial: Trial, strategy: str, seed: int | None) -> bool:
        """Store a trial; False when this configuration of the workload is already stored."""
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self._transaction():
            cursor = self._conn.execute(
                "INSERT OR IGNORE INTO trials (workload, kernel, kernel_version, target, shape, config_key, config,"
                " outcome, measured, error, info, strategy, seed, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (workload.key(), workload.kernel, workload.kernel_version, workload.target,
                 json.dumps(dict(workload.shape)), trial.config.key(), json.dumps(list(map(list, trial.config.items))),
                 trial.outcome.value, json.dumps(trial.values, sort_keys=True), trial.error,
                 json.dumps(trial.info, sort_keys=True), strategy, seed, created))
            return cursor.rowcount == 1

    # --- reading ------------------------------------------------------------------------
    def records(self, workload: Workload) -> list[Record]:
        rows = self._conn.execute("SELECT * FROM trials WHERE workload = ? ORDER BY id", (workload.key(),))
        return [self._record(row) for row in rows]

    def trials(self, workload: Workload) -> list[Trial]:
        return [record.trial for record in self.records(workload)]

    def workloads(self, target: str | None = None) -> list[Workload]:
        query = "SELECT DISTINCT kernel, kernel_version, target, shape FROM trials"
        args: tuple = ()
        if target is not None:
            query += " WHERE target = ?"
            args = (target,)
        workloads = [Workload(kernel, version, tgt, tuple(json.loads(shape).items()))
                     for kernel, version, tgt, shape in self._conn.execute(query + " ORDER BY id", args)]
        return list(dict.fromkeys(workloads))

    def best(self, workload: Workload, objective: str, allowed: Callable[[Trial], bool] | None = None) -> Record | None:
        """The successful trial with the lowest value of `objective` (ties: the earliest),
        among those `allowed` accepts (e.g. within an energy bound)."""
        best = None
        for record in self.records(workload):
            if allowed is not None and not allowed(record.trial):
                continue
            value = record.trial.value(objective)
            if value is not None and (best is None or value < best.trial.value(objective)):
                best = record
        return best

    def _record(self, row) -> Record:
        (rid, _key, kernel, version, target, shape, _config_key, config, outcome, measured, error, info,
         strategy, seed, created) = row
        workload = Workload(kernel, version, target, tuple(json.loads(shape).items()))
        trial = Trial(config=Config(tuple((k, v) for k, v in json.loads(config))), outcome=Outcome(outcome),
                      values=json.loads(measured), error=error, info=json.loads(info))
        return Record(rid, workload, trial, strategy, seed, created)
