"""The tuning database: every trial of every workload, in SQLite.

Each trial is committed the moment it completes, so a run killed at any point keeps
everything it finished; a (workload, configuration) pair is stored at most once, so a
resumed run never measures or records a configuration twice. The file carries an
application tag and a schema version; a file that is not an edgetune database, or one
written by a newer edgetune, is refused with its path named and left untouched.
"""
from __future__ import annotations

import json
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgetune.errors import EdgetuneError
from . import schema
from .objective import Bound, Goal
from .schema import SCHEMA_VERSION
from .sharing import ImportedTrial, checked_goal, goal_from, parse_line, trial_json
from .space import Config
from .trial import Outcome, Trial, check_trial

APPLICATION = "edgetune-tuning-db"
# Every column a Record is read from, in _record's order (never SELECT *: a migrated file
# may hold its columns in another order than a new one).
_COLUMNS = ("id, kernel, kernel_version, target, shape, toolchain, config, outcome, measured, error, info, strategy,"
            " seed, created, measured_by, measured_at")

# Whatever is stored may later reach a file name, a generated C comment or an identifier
# (export): names, shape keys and stamps are checked on the way in and on the way out.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")
SHAPE_KEY_RE = re.compile(r"[a-z_][a-z0-9_]{0,63}")
TOOLCHAIN_RE = re.compile(r"[A-Za-z0-9]{0,64}")


class DatabaseError(EdgetuneError, ValueError):
    """The database file cannot be used (foreign, corrupt, too new, unwritable)."""


@dataclass(frozen=True)
class Workload:
    """What is being tuned: a kernel template version, a shape, a target, and what measures
    it (`toolchain`: a fingerprint of the compiler and emulator versions and of the parts of
    the target description a measurement depends on, computed by the application: a
    compiler upgrade or an edited memory map starts a new workload, so nothing measured
    under the old one is reused by mistake)."""

    kernel: str
    kernel_version: int
    target: str
    shape: tuple[tuple[str, int], ...]
    toolchain: str = ""

    def __post_init__(self):
        # A workload's names end up in exported identifiers, comments and file names, and
        # arrive from imported files and edited databases: only plain names pass.
        for what, value in (("kernel", self.kernel), ("target", self.target)):
            if not isinstance(value, str) or not NAME_RE.fullmatch(value):
                raise ValueError(f"workload {what} {value!r} is not a plain name")
        if not isinstance(self.kernel_version, int) or isinstance(self.kernel_version, bool):
            raise ValueError(f"workload kernel_version {self.kernel_version!r} is not an integer")
        for item in self.shape:
            if (not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str)
                    or not SHAPE_KEY_RE.fullmatch(item[0]) or not isinstance(item[1], int) or isinstance(item[1], bool)):
                raise ValueError(f"workload shape item {item!r} is not NAME=INTEGER")
        if not isinstance(self.toolchain, str) or not TOOLCHAIN_RE.fullmatch(self.toolchain):
            raise ValueError(f"workload toolchain {self.toolchain!r} is not a fingerprint")

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
        self.revaluer: Callable[[Workload, Trial], Trial] | None = None
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        except sqlite3.Error as exc:  # e.g. a folder that takes no new files
            raise DatabaseError(f"{self.path}: cannot open ({exc})") from None
        try:
            # Look before writing anything: a foreign file must be left exactly as it was.
            version = SCHEMA_VERSION if is_new else self._check()
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            if is_new:
                self._create()
            elif version < SCHEMA_VERSION:
                self._migrate()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise DatabaseError(f"{self.path}: not a usable edgetune database ({exc})") from None
        except DatabaseError:
            self._conn.close()
            raise

    # --- opening ------------------------------------------------------------------------
    def _create(self) -> None:
        with self._transaction():
            for statement in schema.statements(SCHEMA_VERSION):
                self._conn.execute(statement)
            self._conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                                   [("application", APPLICATION), ("schema_version", str(SCHEMA_VERSION))])

    def _version(self) -> int:
        value = dict(self._conn.execute("SELECT key, value FROM meta")).get("schema_version", "0")
        try:
            return int(value)
        except ValueError:
            raise DatabaseError(f"{self.path}: unreadable schema version {value!r}") from None

    def _check(self) -> int:
        """The schema version of an existing file, which must be an edgetune database that
        this edgetune can read (itself, or after migrating)."""
        tables = {row[0] for row in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" not in tables:
            raise DatabaseError(f"{self.path}: is a SQLite file but not an edgetune database (no meta table)")
        meta = dict(self._conn.execute("SELECT key, value FROM meta"))
        if meta.get("application") != APPLICATION:
            raise DatabaseError(f"{self.path}: is not an edgetune database (application {meta.get('application')!r})")
        version = self._version()
        if version > SCHEMA_VERSION:
            raise DatabaseError(f"{self.path}: schema version {version} is newer than this edgetune "
                                f"understands ({SCHEMA_VERSION}); upgrade edgetune")
        if version < 1:
            raise DatabaseError(f"{self.path}: schema version {version} was never written by edgetune")
        return version

    def _migrate(self) -> None:
        """Upgrade an older file in place, every step in one transaction: a failure (or a
        kill) part-way leaves the file exactly at its old version, still usable by the
        edgetune that wrote it. The version is read again under the write lock, so two
        processes opening one old file at once migrate it once."""
        try:
            with self._transaction():
                schema.migrate(self._conn, self._version(), schema.MIGRATIONS)
        except Exception as exc:  # noqa: BLE001 - whatever stopped a step, the file is still the old one
            raise DatabaseError(f"{self.path}: upgrading to schema version {SCHEMA_VERSION} failed "
                                f"({type(exc).__name__}: {exc}); the file was left as it was") from None

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

    def revalue_with(self, revaluer: Callable[[Workload, Trial], Trial] | None) -> None:
        """Pass every trial read (records, trials, best) through `revaluer`, e.g. to
        recompute estimates from raw counts with current tables. What is stored, and what
        `export_jsonl` writes, stays as measured."""
        self.revaluer = revaluer

    # --- writing ------------------------------------------------------------------------
    def record(self, workload: Workload, trial: Trial, strategy: str, seed: int | None,
               created: str | None = None) -> bool:
        """Store a trial; False when this configuration of the workload is already stored
        (unless the stored trial was lost with its machine, or timed out under a smaller run
        limit than the new one's: then the new one replaces it)."""
        with self._transaction():
            return self._insert(workload, trial, strategy, seed, created)

    def _insert(self, workload: Workload, trial: Trial, strategy: str, seed: int | None, created: str | None,
                batch: int | None = None) -> bool:
        created = created or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cursor = self._conn.execute(
            "INSERT INTO trials (workload, kernel, kernel_version, target, shape, toolchain, config_key,"
            " config, outcome, measured, error, info, strategy, seed, created, measured_by, measured_at, batch)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
            # A configuration is stored once; only a trial whose machine was lost under it
            # (it says nothing about the configuration) gives way to a new measurement.
            " ON CONFLICT (workload, config_key) DO UPDATE SET config = excluded.config,"
            " outcome = excluded.outcome, measured = excluded.measured, error = excluded.error,"
            " info = excluded.info, strategy = excluded.strategy, seed = excluded.seed, created = excluded.created,"
            " measured_by = excluded.measured_by, measured_at = excluded.measured_at, batch = excluded.batch"
            f" WHERE trials.outcome IN ({', '.join(repr(o.value) for o in Outcome if o.lost)})"
            # ... and a timeout under a smaller run limit than the new trial's (edgetune.session.timed_out_below).
            f" OR trials.outcome = '{Outcome.TIMEOUT.value}' AND coalesce(json_extract(trials.info, '$.timeout_limit_s'), 0)"
            " < coalesce(json_extract(excluded.info, '$.timeout_limit_s'), 0)",
            (workload.key(), workload.kernel, workload.kernel_version, workload.target,
             json.dumps(dict(workload.shape)), workload.toolchain, trial.config.key(),
             json.dumps(list(map(list, trial.config.items))), trial.outcome.value,
             json.dumps(trial.values, sort_keys=True), trial.error, json.dumps(trial.info, sort_keys=True),
             strategy, seed, created, trial.measured_by, trial.measured_at, batch))
        return cursor.rowcount == 1

    # --- what each workload is tuned for ------------------------------------------------------
    def set_goal(self, workload: Workload, goal: Goal) -> None:
        """Remember the objective and bounds `workload` is tuned for (the last run's)."""
        with self._transaction():
            self._set_goal(workload, goal)

    def _set_goal(self, workload: Workload, goal: Goal, replace: bool = True) -> None:
        self._conn.execute(
            "INSERT INTO workloads (workload, objective, bounds, updated) VALUES (?,?,?,?)"
            + (" ON CONFLICT (workload) DO UPDATE SET objective = excluded.objective, bounds = excluded.bounds,"
               " updated = excluded.updated" if replace else " ON CONFLICT (workload) DO NOTHING"),
            (workload.key(), checked_goal(goal).objective, json.dumps([[b.name, b.limit] for b in goal.bounds]),
             time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))

    def goal(self, workload: Workload) -> Goal | None:
        """The goal `workload` was last tuned for; None when none is stored."""
        row = self._conn.execute("SELECT objective, bounds FROM workloads WHERE workload = ?",
                                 (workload.key(),)).fetchone()
        if row is None:
            return None
        try:
            return goal_from(row[0], json.loads(row[1]))
        except (ValueError, TypeError) as exc:  # a hand-edited or damaged row
            raise DatabaseError(f"{self.path}: the stored goal of {workload.key()} is unusable ({exc})") from None

    # --- sharing between machines: JSON lines ----------------------------------------------
    def export_jsonl(self, out) -> int:
        """Write every trial as one JSON object per line; returns how many."""
        count = 0
        for row in self._conn.execute(f"SELECT {_COLUMNS} FROM trials ORDER BY id"):
            record = self._record(row, revalue=False)  # as measured: the receiver prices with its own tables
            out.write(trial_json(record.workload, record.trial, record.strategy, record.seed, record.created,
                                 SCHEMA_VERSION, self.goal(record.workload)) + "\n")
            count += 1
        return count

    def import_jsonl(self, lines, source: str = "<input>", check: ImportCheck | None = None) -> ImportResult:
        """Add trials from JSON lines (of this schema version or an older one), as one batch.
        All or nothing: a bad line names its number and field, and nothing is imported."""
        return self.store_imported(read_jsonl(lines, source, check), source)

    def store_imported(self, parsed: list["ParsedLine"], source: str) -> ImportResult:
        """Store lines `read_jsonl` accepted, in one transaction, as one batch (none when
        every configuration was already stored). A line's goal is stored only for a workload
        that has none here: this machine's tuning decides."""
        added, batch = 0, None
        with self._transaction():
            if parsed:
                batch = self._conn.execute(
                    "INSERT INTO batches (source, imported_at, lines) VALUES (?, ?, ?)",
                    (source, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), len(parsed))).lastrowid
            for workload, trial, strategy, seed, created, goal in parsed:
                added += self._insert(workload, trial, strategy, seed, created, batch)
                if goal is not None:
                    self._set_goal(workload, goal, replace=False)
            if batch is not None and not added:  # nothing new: no batch to list or remove
                self._conn.execute("DELETE FROM batches WHERE id = ?", (batch,))
                batch = None
        return ImportResult(added, len(parsed) - added, batch)

    # --- removing -----------------------------------------------------------------------
    def remove(self, selection: "TrialSelection", dry_run: bool = False) -> int:
        """Delete the trials `selection` picks (all in one transaction); returns how many
        went (or, with dry_run, would go)."""
        where, args = selection.where()
        with self._transaction():
            ids = [rid for rid, shape in self._conn.execute(f"SELECT id, shape FROM trials WHERE {where}", args)
                   if selection.shape is None or _shape_of(shape) == dict(selection.shape)]
            if not dry_run:
                self._conn.executemany("DELETE FROM trials WHERE id = ?", [(rid,) for rid in ids])
                if selection.batch is not None and selection.where_columns() == ("batch",):
                    self._conn.execute("DELETE FROM batches WHERE id = ?", (selection.batch,))
        return len(ids)

    def batches(self) -> list["Batch"]:
        """Every import batch still on record, oldest first, with its trials still stored."""
        rows = self._conn.execute(
            "SELECT b.id, b.source, b.imported_at, b.lines, (SELECT COUNT(*) FROM trials t WHERE t.batch = b.id)"
            " FROM batches b ORDER BY b.id")
        return [Batch(*row) for row in rows]

    # --- reading ------------------------------------------------------------------------
    def records(self, workload: Workload) -> list[Record]:
        rows = self._conn.execute(f"SELECT {_COLUMNS} FROM trials WHERE workload = ? ORDER BY id", (workload.key(),))
        return [self._record(row) for row in rows]

    def trials(self, workload: Workload) -> list[Trial]:
        return [record.trial for record in self.records(workload)]

    def workloads(self, target: str | None = None) -> list[Workload]:
        query = "SELECT DISTINCT kernel, kernel_version, target, shape, toolchain FROM trials"
        args: tuple = ()
        if target is not None:
            query += " WHERE target = ?"
            args = (target,)
        workloads = [self._workload(kernel, version, tgt, shape, toolchain)
                     for kernel, version, tgt, shape, toolchain in self._conn.execute(query + " ORDER BY id", args)]
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

    def _workload(self, kernel, version, target, shape, toolchain) -> Workload:
        try:
            return Workload(kernel, version, target, tuple(json.loads(shape).items()), toolchain)
        except (ValueError, TypeError, AttributeError) as exc:  # a hand-edited or damaged row
            raise DatabaseError(f"{self.path}: a stored workload is unusable ({exc})") from None

    def _record(self, row, revalue: bool = True) -> Record:
        (rid, kernel, version, target, shape, toolchain, config, outcome, measured, error, info,
         strategy, seed, created, measured_by, measured_at) = row
        try:
            workload = self._workload(kernel, version, target, shape, toolchain)
        except DatabaseError as exc:
            raise DatabaseError(f"{exc}: trial {rid}; remove it with `edgetune db remove --trial {rid}`") from None
        try:
            trial = Trial(config=Config(tuple((k, v) for k, v in json.loads(config))), outcome=Outcome(outcome),
                          values=json.loads(measured), error=error, info=json.loads(info),
                          measured_by=measured_by, measured_at=measured_at)
            # Stored by other means (an older edgetune, a hand edit): a NaN, a negative or a
            # string value would become or break the best, so it stops the reading instead.
            check_trial(trial)
        except (ValueError, TypeError) as exc:
            raise DatabaseError(f"{self.path}: trial {rid} is unusable ({exc}); "
                                f"remove it with `edgetune db remove --trial {rid}`") from None
        if revalue and self.revaluer is not None:
            trial = self.revaluer(workload, trial)
        return Record(rid, workload, trial, strategy, seed, created)


ImportCheck = Callable[[Workload, Trial], Trial]
ParsedLine = tuple  # (Workload, Trial, strategy, seed, created, Goal or None)


def read_jsonl(lines, source: str = "<input>", check: ImportCheck | None = None) -> list[ParsedLine]:
    """Every line of a JSON-lines file checked, before anything is stored: DatabaseError
    names the first bad line's number and field. `check` (the application's: is the
    configuration legal in the kernel's space?) returns the trial with its configuration in
    the space's own form, or raises ValueError naming the field."""
    parsed = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed.append(_checked(parse_line(line, SCHEMA_VERSION), check))
        except ValueError as exc:  # LineError, a Workload's own refusal, the check's
            raise DatabaseError(f"{source}: line {number}: {exc}") from None
    return parsed


def _checked(line: ImportedTrial, check: ImportCheck | None) -> tuple:
    workload = Workload(*line.workload)
    trial = line.trial if check is None else check(workload, line.trial)
    return workload, trial, line.strategy, line.seed, line.created, line.goal


@dataclass(frozen=True)
class ImportResult:
    added: int
    present: int  # lines whose configuration was already stored
    batch: int | None  # the batch the added trials belong to (None: nothing added)


@dataclass(frozen=True)
class Batch:
    id: int
    source: str
    imported_at: str
    lines: int
    stored: int  # its trials still in the database


@dataclass(frozen=True)
class TrialSelection:
    """Which trials `remove` deletes: every field given must match (at least one given).
    A shape matches whatever the order of its keys."""

    kernel: str | None = None
    kernel_version: int | None = None
    target: str | None = None
    shape: tuple[tuple[str, int], ...] | None = None
    batch: int | None = None
    trial: int | None = None

    def _clauses(self) -> list[tuple[str, object]]:
        return [(column, value) for column, value in (
            ("kernel", self.kernel), ("kernel_version", self.kernel_version), ("target", self.target),
            ("batch", self.batch), ("id", self.trial)) if value is not None]

    def where_columns(self) -> tuple[str, ...]:
        return tuple(column for column, _ in self._clauses()) + (("shape",) if self.shape is not None else ())

    def where(self) -> tuple[str, tuple]:
        clauses = self._clauses()
        if not clauses:
            raise ValueError("a removal must name what to remove (a kernel, a batch or a trial)")
        return " AND ".join(f"{column} = ?" for column, _ in clauses), tuple(value for _, value in clauses)


def _shape_of(text: str) -> dict | None:
    try:
        shape = json.loads(text)
    except ValueError:
        return None
    return shape if isinstance(shape, dict) else None
