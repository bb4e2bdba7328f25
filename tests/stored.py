"""A database that already holds a trial, for tests that check a refused command leaves
what is stored exactly as it was."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from edgetune.codegen import get_kernel
from edgetune.session import workload_of
from edgetune.targets import get_target
from edgetune.tuner import Outcome, Trial, TuningDatabase


def stored_db(folder: Path, name: str = "stored.db") -> Path:
    """`folder/name` holding one successful host trial of matmul_s8 m=2,n=2,k=2 (the first
    legal configuration), recorded as a tuning run records it."""
    path = folder / name
    if path.exists():
        return path
    kernel, target = get_kernel("matmul_s8"), get_target("host")
    shape = {"m": 2, "n": 2, "k": 2}
    space = kernel.space(target, shape)
    config = space.config_at(int(space.legal_indices()[0]))
    db = TuningDatabase(path)
    db.record(workload_of(kernel, target, shape), Trial(config, Outcome.OK, {"time_ns": 10.0}), "random", 0)
    db.close()
    return path


def stored_count(path: Path) -> int:
    """Trials in the database file at `path` as another process sees it (0 before it exists
    or has its tables): for tests that kill a tuning run once it has stored some."""
    if not path.exists():
        return 0
    conn = sqlite3.connect(str(path), timeout=30)
    try:
        return conn.execute("SELECT count(*) FROM trials").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        conn.close()


def live_claims(path: Path, pid: int) -> int:
    """Claims in the database file at `path` held by the running process `pid` (a tuning
    run between claiming a round's configurations and storing their trials); 0 before the
    tables exist. Claims left by killed runs have other, dead owners."""
    if not path.exists():
        return 0
    conn = sqlite3.connect(str(path), timeout=30)
    try:
        return conn.execute("SELECT count(*) FROM claims WHERE owner_pid = ? AND lease_until > 0",
                            (pid,)).fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        conn.close()
