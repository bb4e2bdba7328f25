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
"""


class DatabaseError(ValueError):
    """The database file cannot be used (foreign, corrupt, too new, unwritable)."""


@dataclass(frozen=True)
class Workload:
    """What is being tuned: a kernel template version, a shape, a target, and the toolchain
    that measures it (a fingerprint of compiler and emulator versions: a compiler upgrade
    starts a new workload, so nothing measured with the old one is reused by mistake)."""

    kernel: str
    kernel_version: int
    target: str
    shape: tuple[tuple[str, int], ...]
    toolchain: str = ""

    def problem_key(self) -> str:
        """The computation itself, independent of the tools that measure it."""
        shape = ",".join(f"{k}={v}" for k, v in self.shape)
        return f"{self.kernel}@v{self.kernel_version}/{self.target}/{shape}"

    def key(self) -> str:
        return f"{self.problem_key()}/{self.toolchain}" if self.toolchain else self.problem_key()

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
    def record(self, workload: Workload, trial: Trial, strategy: str, seed: int | None,
               created: str | None = None) -> bool:
        """Store a trial; False when this configuration of the workload is already stored."""
        with self._transaction():
            return self._insert(workload, trial, strategy, seed, created)

    def _insert(self, workload: Workload, trial: Trial, strategy: str, seed: int | None, created: str | None) -> bool:
        created = created or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cursor = self._conn.execute(
            "INSERT OR IGNORE INTO trials (workload, kernel, kernel_version, target, shape, toolchain, config_key,"
            " config, outcome, measured, error, info, strategy, seed, created)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (workload.key(), workload.kernel, workload.kernel_version, workload.target,
             json.dumps(dict(workload.shape)), workload.toolchain, trial.config.key(),
             json.dumps(list(map(list, trial.config.items))), trial.outcome.value,
             json.dumps(trial.values, sort_keys=True), trial.error, json.dumps(trial.info, sort_keys=True),
             strategy, seed, created))
        return cursor.rowcount == 1

    # --- sharing between machines: JSON lines ----------------------------------------------
    def export_jsonl(self, out) -> int:
        """Write every trial as one JSON object per line; returns how many."""
        count = 0
        for row in self._conn.execute("SELECT * FROM trials ORDER BY id"):
            record = self._record(row)
            w, t = record.workload, record.trial
            out.write(json.dumps({
                "format": "edgetune-trial", "schema_version": SCHEMA_VERSION,
                "workload": {"kernel": w.kernel, "kernel_version": w.kernel_version, "target": w.target,
                             # pairs, not an object: key order is part of the workload's identity
                             "shape": [list(pair) for pair in w.shape], "toolchain": w.toolchain},
                "config": [list(item) for item in t.config.items], "outcome": t.outcome.value, "values": t.values,
                "error": t.error, "info": t.info, "strategy": record.strategy, "seed": record.seed,
                "created": record.created}, sort_keys=True) + "\n")
            count += 1
        return count

    def import_jsonl(self, lines, source: str = "<input>") -> tuple[int, int]:
        """Add trials from JSON lines: (added, already present). All or nothing: a bad line
        names its number and nothing is imported."""
        parsed = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if data.get("format") != "edgetune-trial":
                    raise ValueError("not an edgetune trial record")
                if int(data["schema_version"]) > SCHEMA_VERSION:
                    raise ValueError(f"schema version {data['schema_version']} is newer than {SCHEMA_VERSION}")
                w = data["workload"]
                workload = Workload(str(w["kernel"]), int(w["kernel_version"]), str(w["target"]),
                                    tuple((str(k), int(v)) for k, v in w["shape"]), str(w.get("toolchain", "")))
                trial = Trial(config=Config(tuple((str(k), v) for k, v in data["config"])),
                              outcome=Outcome(data["outcome"]), values=dict(data["values"]),
                              error=str(data.get("error", "")), info=dict(data.get("info", {})))
                parsed.append((workload, trial, str(data.get("strategy", "")), data.get("seed"), str(data["created"])))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise DatabaseError(f"{source}: line {number}: {exc}") from None
        added = 0
        with self._transaction():
            for workload, trial, strategy, seed, created in parsed:
                added += self._insert(workload, trial, strategy, seed, created)
        return added, len(parsed) - added

    # --- reading ------------------------------------------------------------------------
    def records(self, workload: Workload) -> list[Record]:
        rows = self._conn.execute("SELECT * FROM trials WHERE workload = ? ORDER BY id", (workload.key(),))
        return [self._record(row) for row in rows]

    def trials(self, workload: Workload) -> list[Trial]:
        return [record.trial for record in self.records(workload)]

    def workloads(self, target: str | None = None) -> list[Workload]:
        query = "SELECT DISTINCT kernel, kernel_version, target, shape, toolchain FROM trials"
        args: tuple = ()
        if target is not None:
            query += " WHERE target = ?"
            args = (target,)
        workloads = [Workload(kernel, version, tgt, tuple(json.loads(shape).items()), toolchain)
                     for kernel, version, tgt, shape, toolchain in self._conn.execute(query + " ORDER BY id", args)]
        return list(dict.fromkeys(workloads))

    def best(self, workload: Workload, objective: str) -> Record | None:
        """The successful trial with the lowest value of `objective` (ties: the earliest)."""
        best = None
        for record in self.records(workload):
            value = record.trial.value(objective)
            if value is not None and (best is None or value < best.trial.value(objective)):
                best = record
        return best

    def _record(self, row) -> Record:
        (rid, _key, kernel, version, target, shape, toolchain, _config_key, config, outcome, measured, error, info,
         strategy, seed, created) = row
        workload = Workload(kernel, version, target, tuple(json.loads(shape).items()), toolchain)
        trial = Trial(config=Config(tuple((k, v) for k, v in json.loads(config))), outcome=Outcome(outcome),
                      values=json.loads(measured), error=error, info=json.loads(info))
        return Record(rid, workload, trial, strategy, seed, created)
