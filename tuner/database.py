"""The tuning database: every trial of every workload, in SQLite.

Each trial is committed the moment it completes, so a run killed at any point keeps
everything it finished; a (workload, configuration) pair is stored at most once, so a
resumed run never measures or records a configuration twice. Processes sharing the file
claim each configuration before measuring it (table claims: an owner and a lease), so
together they measure a budget once; each trial keeps its proposal number, the order a
resumed search replays (edgetune.tuner.resume). The file carries an
application tag and a schema version; a file that is not an edgetune database, or one
written by a newer edgetune, is refused with its path named and left untouched.
"""
from __future__ import annotations

import json
import os
import re
import socket
import threading
import sqlite3
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from edgetune.errors import EdgetuneError
from . import schema
from .objective import Bound, Goal
from .schema import LINE_VERSION, SCHEMA_VERSION
from .sharing import ImportedTrial, checked_goal, goal_from, parse_line, trial_json
from .space import Config
from .trial import Outcome, Trial, check_trial, replaceable

APPLICATION = "edgetune-tuning-db"
# Every column a Record is read from, in _record's order (never SELECT *: a migrated file
# may hold its columns in another order than a new one).
_COLUMNS = ("id, kernel, kernel_version, target, shape, toolchain, config, outcome, measured, error, info, strategy,"
            " seed, created, measured_by, measured_at, proposal, batch, asked")
_SHAPE_COLUMN = 4  # where `shape` is in _COLUMNS

# Whatever is stored may later reach a file name, a generated C comment or an identifier
# (export): names, shape keys and stamps are checked on the way in and on the way out.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")
SHAPE_KEY_RE = re.compile(r"[a-z_][a-z0-9_]{0,63}")
TOOLCHAIN_RE = re.compile(r"[A-Za-z0-9]{0,64}")


# A claim's lease: renewed by its owner's heartbeat every LEASE_S / 6; a claim whose lease
# ran out (its owner on another host stopped answering) is taken over. A dead owner on this
# host is noticed at once, without waiting for the lease.
LEASE_S = 120.0


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
    proposal: int | None = None  # the workload's proposal sequence number
    batch: int | None = None  # first proposal of the batch measured together; None: imported, migrated
    asked: bool = False  # the strategy asked for that batch (not given: seeds, re-measured trials)


@dataclass(frozen=True)
class Owner:
    """Who holds a claim: a host (its name and pid namespace), a process id, and that
    process's start time, so a recycled process id is not taken for the dead owner."""

    host: str
    pid: int
    started: str

    @classmethod
    def this_process(cls) -> "Owner":
        return cls(_host_identity(), os.getpid(), _process_start(os.getpid()))

    def is_dead_here(self) -> bool:
        """True when the owner is a process of this host that no longer runs."""
        if self.host != _host_identity():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # it runs, as another user
        started = _process_start(self.pid)
        if started == "zombie":
            return True
        # Another process under a recycled pid (when start times are known).
        return bool(started and self.started) and started != self.started


@dataclass(frozen=True)
class Claim:
    """A configuration proposed and being measured by `owner` (not a result)."""

    config: Config
    proposal: int
    batch: int | None
    strategy: str
    seed: int | None
    owner: Owner
    lease_until: float  # Unix time
    asked: bool = False  # a batch the strategy asked for (not given: seeds, re-measured trials)

    def expired(self, now: float | None = None) -> bool:
        """Free for another process: its lease ran out, or its owner died on this host."""
        return self.lease_until < (time.time() if now is None else now) or self.owner.is_dead_here()


def _host_identity() -> str:
    # Containers may share a host name; their pid namespaces differ (a pid seen from one
    # says nothing of another's), so the namespace is part of the host.
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}|{namespace}"


def _process_start(pid: int) -> str:
    """The process's start time since boot (Linux /proc), "zombie" for one that has
    exited but not been reaped, "" when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2:].split()
    return "zombie" if fields[0] in ("Z", "X") else fields[19]


class TuningDatabase:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise DatabaseError(f"{self.path}: is not a file")
        if not self.path.parent.exists():
            raise DatabaseError(f"{self.path}: folder {self.path.parent} does not exist")
        self.revaluer: Callable[[Workload, Trial], Trial] | None = None
        # Records by the row they were read from (its whole content, so an updated row is a
        # new key): `model tune` reads each layer's trials again every round, and parsing
        # and checking them was ~4% of its own CPU on the FC autoencoder.
        self._read: OrderedDict[tuple, Record] = OrderedDict()
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
            self._conn.create_function("replaceable", 3, _replaceable_row, deterministic=True)
        except sqlite3.Error as exc:  # e.g. a folder that takes no new files
            raise DatabaseError(f"{self.path}: cannot open ({exc})") from None
        try:
            _retry_while_locked(self._open)
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            if "unable to open" in str(exc) and not _writable(self.path):
                # A WAL database is opened with its -wal and -shm files beside it.
                raise DatabaseError(f"{self.path}: is read-only (the file or its folder: SQLite must write "
                                    f"{self.path.name}-wal and {self.path.name}-shm beside it)") from None
            raise DatabaseError(f"{self.path}: not a usable edgetune database ({exc})") from None
        except DatabaseError:
            self._conn.close()
            raise

    # --- opening ------------------------------------------------------------------------
    def _open(self) -> None:
        """Create, check or upgrade the file. Safe to repeat: every step re-reads the file."""
        # A file holding no table at all (new, empty, or being created by another process
        # this very moment) is created under the write lock; others are looked at first.
        if not self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            self._conn.execute("PRAGMA journal_mode=WAL")
            version = SCHEMA_VERSION if self._create() else self._check()
        else:
            # Look before writing anything: a foreign file must be left exactly as it was.
            version = self._check()
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        if version < SCHEMA_VERSION:
            self._migrate()

    def _create(self) -> bool:
        """Create the schema in an empty file; False when the file, looked at again under
        the write lock, is no longer empty (another process created it first)."""
        with self._transaction():
            if self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                return False
            for statement in schema.statements(SCHEMA_VERSION):
                self._conn.execute(statement)
            self._conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                                   [("application", APPLICATION), ("schema_version", str(SCHEMA_VERSION))])
        return True

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

    @contextmanager
    def _transaction(self):
        """One write transaction (taking the write lock at once); a file SQLite cannot
        write (read-only, immutable, on a read-only mount) is a DatabaseError naming it."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc):
                raise DatabaseError(f"{self.path}: is read-only; nothing can be stored in it ({exc})") from None
            raise DatabaseError(f"{self.path}: cannot write ({exc})") from None

    def close(self) -> None:
        self._conn.close()

    def revalue_with(self, revaluer: Callable[[Workload, Trial], Trial] | None) -> None:
        """Pass every trial read (records, trials, best) through `revaluer`, e.g. to
        recompute estimates from raw counts with current tables. What is stored, and what
        `export_jsonl` writes, stays as measured."""
        self.revaluer = revaluer
        self._read.clear()  # records read before were valued by the old revaluer

    # --- writing ------------------------------------------------------------------------
    def record(self, workload: Workload, trial: Trial, strategy: str, seed: int | None,
               created: str | None = None, claim: "Claim | None" = None) -> bool:
        """Store a trial; False when this configuration of the workload is already stored
        (unless the stored trial was lost with its machine, or timed out under a smaller run
        limit than the new one's: then the new one replaces it). A trial measured under
        `claim` keeps the claim's proposal number, batch and proposer, and the claim goes in
        the same transaction."""
        with self._transaction():
            if claim is None:
                return self._insert(workload, trial, strategy, seed, created)
            self._conn.execute("DELETE FROM claims WHERE workload = ? AND config_key = ?",
                               (workload.key(), claim.config.key()))
            return self._insert(workload, trial, claim.strategy, claim.seed, created, claim.proposal, claim.batch,
                                claim.asked)

    def _insert(self, workload: Workload, trial: Trial, strategy: str, seed: int | None, created: str | None,
                proposal: int | None = None, batch: int | None = None, asked: bool = False,
                import_batch: int | None = None) -> bool:
        created = created or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if proposal is None:
            proposal = self._next_proposal(workload)
        cursor = self._conn.execute(
            "INSERT INTO trials (workload, kernel, kernel_version, target, shape, toolchain, config_key,"
            " config, outcome, measured, error, info, strategy, seed, created, measured_by, measured_at,"
            " proposal, batch, asked, import_batch) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
            # A configuration is stored once; only a replaceable trial (tuner.trial.replaceable)
            # gives way to a new measurement, which keeps the old one's place in the proposal order.
            " ON CONFLICT (workload, config_key) DO UPDATE SET config = excluded.config,"
            " outcome = excluded.outcome, measured = excluded.measured, error = excluded.error,"
            " info = excluded.info, strategy = excluded.strategy, seed = excluded.seed, created = excluded.created,"
            " measured_by = excluded.measured_by, measured_at = excluded.measured_at, import_batch = excluded.import_batch"
            " WHERE replaceable(trials.outcome, json_extract(trials.info, '$.timeout_limit_s'),"
            " json_extract(excluded.info, '$.timeout_limit_s'))",
            (workload.key(), workload.kernel, workload.kernel_version, workload.target,
             json.dumps(dict(workload.shape)), workload.toolchain, trial.config.key(),
             json.dumps(list(map(list, trial.config.items))), trial.outcome.value,
             json.dumps(trial.values, sort_keys=True), trial.error, json.dumps(trial.info, sort_keys=True),
             strategy, seed, created, trial.measured_by, trial.measured_at, proposal, batch, int(asked),
             import_batch))
        return cursor.rowcount == 1

    def _next_proposal(self, workload: Workload) -> int:
        (last,) = self._conn.execute(
            "SELECT max(coalesce((SELECT max(proposal) FROM trials WHERE workload = ?), 0),"
            " coalesce((SELECT max(proposal) FROM claims WHERE workload = ?), 0))",
            (workload.key(), workload.key())).fetchone()
        return last + 1

    # --- processes sharing the file: claims ---------------------------------------------
    def claim(self, workload: Workload, configs: Sequence[Config], *, budget: int, owner: "Owner",
              strategy: str, seed: int | None, asked: bool, lease_s: float = LEASE_S,
              timeout_limit_s: float = 0.0) -> tuple[list["Claim"], int]:
        """Claim `configs` (in order) for measuring by `owner`, within the workload's
        budget: one transaction, so processes sharing the file never claim one
        configuration twice nor more than the budget together. A configuration already
        stored (not lost) or claimed is passed over; one whose stored trial was lost takes
        no room (its new trial replaces the lost one). The claims form one batch (numbered by
        its first proposal); `asked`: a strategy asked for it (rather than it being given).
        A stored timeout under a smaller run limit than `timeout_limit_s` is replaceable
        like a lost trial (it said the limit was short, not the configuration slow).
        Returns the claims made (in proposal order) and the room left in the budget."""
        with self._transaction():
            room = budget - self._used(workload)
            stored = self._stored_keys(workload, timeout_limit_s)  # key -> the stored trial may be replaced
            claimed = {key for (key,) in self._conn.execute("SELECT config_key FROM claims WHERE workload = ?",
                                                             (workload.key(),))}
            made: list[Claim] = []
            until = time.time() + lease_s
            for config in configs:
                key = config.key()
                if key in claimed or stored.get(key) is False:
                    continue
                replaces = key in stored  # a lost trial measured again takes its row's place
                if not replaces and room <= 0:
                    continue
                proposal = self._next_proposal(workload)
                batch = made[0].proposal if made else proposal
                claim = Claim(config, proposal, batch, strategy, seed, owner, until, asked)
                self._conn.execute(
                    "INSERT INTO claims (workload, config_key, config, proposal, batch, asked, strategy, seed,"
                    " owner_host, owner_pid, owner_started, lease_until) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (workload.key(), key, json.dumps(list(map(list, config.items))), proposal, batch,
                     int(asked), strategy, seed, owner.host, owner.pid, owner.started, until))
                claimed.add(key)
                made.append(claim)
                room -= not replaces
            return made, room

    def take_over(self, workload: Workload, claims: Sequence["Claim"], owner: "Owner",
                  lease_s: float = LEASE_S) -> list["Claim"]:
        """Make `owner` the owner of those of `claims` still held by a dead or silent
        owner (looked at again under the write lock): the ones it must now measure."""
        with self._transaction():
            now = time.time()
            current = {c.config.key(): c for c in self._read_claims(workload)}
            got = []
            for claim in claims:
                found = current.get(claim.config.key())
                if found is None or found.owner != claim.owner or not found.expired(now):
                    continue
                self._conn.execute("UPDATE claims SET owner_host = ?, owner_pid = ?, owner_started = ?,"
                                   " lease_until = ? WHERE workload = ? AND config_key = ?",
                                   (owner.host, owner.pid, owner.started, now + lease_s, workload.key(),
                                    claim.config.key()))
                got.append(replace(found, owner=owner, lease_until=now + lease_s))
            return got

    def drop_claims_over(self, workload: Workload, budget: int) -> set[str]:
        """Delete claims left by dead or silent owners, latest proposals first, while stored
        trials and claims together exceed `budget` (a run resumed with a smaller budget than
        the interrupted one's: what was claimed but never measured is not owed any more).
        Returns the configuration keys whose claims went."""
        with self._transaction():
            excess = self._used(workload) - budget
            if excess <= 0:
                return set()
            now = time.time()
            stale = [c for c in reversed(self._read_claims(workload)) if c.expired(now)][:excess]
            self._conn.executemany("DELETE FROM claims WHERE workload = ? AND config_key = ?",
                                   [(workload.key(), c.config.key()) for c in stale])
            return {c.config.key() for c in stale}

    def renew(self, owner: "Owner", lease_s: float = LEASE_S) -> None:
        """Extend the lease of every claim `owner` holds (its heartbeat)."""
        with self._transaction():
            self._conn.execute("UPDATE claims SET lease_until = ? WHERE owner_host = ? AND owner_pid = ?"
                               " AND owner_started = ?", (time.time() + lease_s, owner.host, owner.pid, owner.started))

    def release(self, owner: "Owner") -> None:
        """Give up `owner`'s claims (it stops early): their leases end now, so another
        process takes them over at once, in their proposal place."""
        with self._transaction():
            self._conn.execute("UPDATE claims SET lease_until = 0 WHERE owner_host = ? AND owner_pid = ?"
                               " AND owner_started = ?", (owner.host, owner.pid, owner.started))

    @contextmanager
    def heartbeat(self, owner: "Owner", lease_s: float = LEASE_S):
        """While the block runs, renew `owner`'s leases every lease_s / 6 from a thread of
        its own (with its own connection): a long measurement keeps its claims. Claims
        still held when the block ends (an error, Ctrl-C) are released."""
        stop = threading.Event()

        def beat():
            conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
            try:
                while not stop.wait(lease_s / 6):
                    conn.execute("UPDATE claims SET lease_until = ? WHERE owner_host = ? AND owner_pid = ?"
                                 " AND owner_started = ?", (time.time() + lease_s, owner.host, owner.pid,
                                                            owner.started))
            except sqlite3.Error:
                pass  # the main thread's next write reports what is wrong with the file
            finally:
                conn.close()

        thread = threading.Thread(target=beat, name="edgetune-claims-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            try:
                self.release(owner)
            except DatabaseError:
                pass  # unwritable: the leases run out on their own

    def claims(self, workload: Workload) -> list["Claim"]:
        """Configurations being measured (or left by a dead process), in proposal order.
        Never results: records, trials, best and exports do not see them."""
        return self._read_claims(workload)

    def used(self, workload: Workload) -> int:
        """How much of a budget the workload has used: trials stored (a lost one too: it is
        measured again in its place) and configurations claimed."""
        return self._used(workload)

    def _used(self, workload: Workload) -> int:
        # A claim on a lost trial's configuration will replace that row: counted once.
        (count,) = self._conn.execute(
            "SELECT (SELECT count(*) FROM trials WHERE workload = ?) + (SELECT count(*) FROM claims"
            " WHERE workload = ? AND config_key NOT IN (SELECT config_key FROM trials WHERE workload = ?))",
            (workload.key(), workload.key(), workload.key())).fetchone()
        return count

    def _stored_keys(self, workload: Workload, timeout_limit_s: float = 0.0) -> dict[str, bool]:
        """Each stored configuration's key -> whether a new measurement may replace it: lost
        with its machine, or a timeout under a smaller run limit than `timeout_limit_s`."""
        rows = self._conn.execute(
            "SELECT config_key, outcome, json_extract(info, '$.timeout_limit_s') FROM trials"
            " WHERE workload = ?", (workload.key(),))
        return {key: replaceable(Outcome(outcome), limit, timeout_limit_s) for key, outcome, limit in rows}

    def _read_claims(self, workload: Workload) -> list["Claim"]:
        rows = self._conn.execute(
            "SELECT config, proposal, batch, asked, strategy, seed, owner_host, owner_pid, owner_started, lease_until"
            " FROM claims WHERE workload = ? ORDER BY proposal", (workload.key(),))
        found = []
        for config, proposal, batch, asked, strategy, seed, host, pid, started, until in rows:
            try:
                items = Config(tuple((k, v) for k, v in json.loads(config)))
            except (ValueError, TypeError) as exc:
                raise DatabaseError(f"{self.path}: claim {proposal} is unusable ({exc})") from None
            found.append(Claim(items, proposal, batch, strategy, seed, Owner(host, pid, started), until, bool(asked)))
        return found

    # --- processes sharing the file: a model's rounds -------------------------------------
    def model_round(self, model: str, number: int) -> tuple[str, int] | None:
        """Round `number` of the model tuning `model` as decided: (workload key, trials);
        None while no process has reached it."""
        row = self._conn.execute("SELECT workload, trials FROM model_rounds WHERE model = ? AND number = ?",
                                 (model, number)).fetchone()
        return None if row is None else (row[0], int(row[1]))

    def decide_model_round(self, model: str, number: int, workload: str, trials: int) -> tuple[str, int]:
        """Record round `number` of `model` as (`workload`, `trials`) unless another process
        decided it first; returns the round as decided (one transaction: one winner)."""
        with self._transaction():
            self._conn.execute("INSERT OR IGNORE INTO model_rounds (model, number, workload, trials) VALUES (?,?,?,?)",
                               (model, number, workload, trials))
        return self.model_round(model, number)

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
    def export_jsonl(self, out, selection: "TrialSelection | None" = None) -> int:
        """Write every trial (or those `selection` picks) as one JSON object per line;
        returns how many."""
        where, args = selection.where() if selection is not None else ("1", ())
        count = 0
        for row in self._conn.execute(f"SELECT {_COLUMNS} FROM trials WHERE {where} ORDER BY id", args):
            if selection is not None and selection.shape is not None and \
                    _shape_of(row[_SHAPE_COLUMN]) != dict(selection.shape):
                continue
            record = self._record(row, revalue=False)  # as measured: the receiver prices with its own tables
            out.write(trial_json(record.workload, record.trial, record.strategy, record.seed, record.created,
                                 LINE_VERSION, self.goal(record.workload)) + "\n")
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
                    "INSERT INTO import_batches (source, imported_at, lines) VALUES (?, ?, ?)",
                    (source, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), len(parsed))).lastrowid
            for workload, trial, strategy, seed, created, goal in parsed:
                added += self._insert(workload, trial, strategy, seed, created, import_batch=batch)
                if goal is not None:
                    self._set_goal(workload, goal, replace=False)
            if batch is not None and not added:  # nothing new: no batch to list or remove
                self._conn.execute("DELETE FROM import_batches WHERE id = ?", (batch,))
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
                if selection.batch is not None and selection.where_columns() == ("import_batch",):
                    self._conn.execute("DELETE FROM import_batches WHERE id = ?", (selection.batch,))
        return len(ids)

    def batches(self) -> list["Batch"]:
        """Every import batch still on record, oldest first, with its trials still stored."""
        rows = self._conn.execute(
            "SELECT b.id, b.source, b.imported_at, b.lines, (SELECT COUNT(*) FROM trials t WHERE t.import_batch = b.id)"
            " FROM import_batches b ORDER BY b.id")
        return [Batch(*row) for row in rows]

    # --- reading ------------------------------------------------------------------------
    def records(self, workload: Workload) -> list[Record]:
        rows = self._conn.execute(f"SELECT {_COLUMNS} FROM trials WHERE workload = ? ORDER BY id", (workload.key(),))
        return [self._record(row) for row in rows]

    def proposals(self, workload: Workload, after_id: int = 0) -> list[Record]:
        """The stored trials (with row id above `after_id`) in the order the search
        proposed them, not the order they finished in (which depends on timing): what a
        resumed search replays."""
        rows = self._conn.execute(f"SELECT {_COLUMNS} FROM trials WHERE workload = ? AND id > ?"
                                  " ORDER BY proposal, id", (workload.key(), after_id))
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
        """The successful trial with the lowest value of `objective` (ties: the earliest
        proposed, not the first to finish), among those `allowed` accepts (e.g. within an
        energy bound)."""
        best = None
        for record in self.proposals(workload):
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
        key = (revalue and self.revaluer is not None, tuple(row))
        record = self._read.get(key)
        if record is not None:
            self._read.move_to_end(key)
        else:
            record = self._read[key] = self._parse_record(row, revalue)
            while len(self._read) > READ_CACHE_SIZE:
                self._read.popitem(last=False)
        return record

    def _parse_record(self, row, revalue: bool) -> Record:
        (rid, kernel, version, target, shape, toolchain, config, outcome, measured, error, info,
         strategy, seed, created, measured_by, measured_at, proposal, batch, asked) = row
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
        return Record(rid, workload, trial, strategy, seed, created, proposal, batch, bool(asked))


OPEN_PATIENCE_S = 30.0
READ_CACHE_SIZE = 8192  # records kept by row: a few MB


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def _retry_while_locked(step: Callable[[], None]) -> None:
    """Run `step`, again while SQLite says the file is locked: switching a new file to
    WAL (done by whichever process creates it) makes others' reads fail at once with
    "database is locked" instead of waiting on the busy timeout."""
    deadline = time.monotonic() + OPEN_PATIENCE_S
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


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
            parsed.append(_checked(parse_line(line, LINE_VERSION), check))
        except ValueError as exc:  # LineError, a Workload's own refusal, the check's
            raise DatabaseError(f"{source}: line {number}: {exc}") from None
    return parsed


def _checked(line: ImportedTrial, check: ImportCheck | None) -> tuple:
    workload = Workload(*line.workload)
    trial = line.trial if check is None else check(workload, line.trial)
    # A check that knows targets (the application's) also checks the goal's value names.
    check_goal = getattr(check, "check_goal", None)
    goal = line.goal if check_goal is None or line.goal is None else check_goal(workload, line.goal)
    return workload, trial, line.strategy, line.seed, line.created, goal


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
            ("import_batch", self.batch), ("id", self.trial)) if value is not None]

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


def _replaceable_row(outcome: str, limit_s: object, new_limit_s: object) -> bool:
    """tuner.trial.replaceable over a stored row's outcome text, for SQL (record's upsert)."""
    return replaceable(Outcome(outcome), limit_s, new_limit_s)
