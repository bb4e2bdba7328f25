"""The SQLite tuning database: round trips, de-duplication, best(), resume, and refusing
files that are not (or not yet) edgetune databases without touching them."""
from __future__ import annotations

import io
import json
import multiprocessing
import os
import random
import shlex
import sqlite3
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from edgetune.tuner import DatabaseError, Outcome, Space, Trial, TuningDatabase, Workload, choice

SPACE = Space([choice("tile", [1, 2, 4, 8]), choice("compiler", ["gcc", "clang"]), choice("fast", [False, True])])
W1 = Workload("matmul_s8", 1, "cortex-m55", (("m", 16), ("n", 16), ("k", 32)))
W2 = Workload("matmul_s8", 1, "host", (("m", 16), ("n", 16), ("k", 32)))
W3 = Workload("matmul_s8", 2, "cortex-m55", (("m", 4), ("n", 8), ("k", 2)))


def cfg(i: int):
    return SPACE.config_at(i)


@pytest.fixture
def db(tmp_path):
    database = TuningDatabase(tmp_path / "tune.db")
    yield database
    database.close()


def test_record_and_read_back(db):
    trial = Trial(cfg(5), Outcome.OK, values={"instructions": 123456, "time_ns": 1.5},
                  info={"compiler": "arm-none-eabi-gcc 12.2", "region": "dtcm"})
    assert db.record(W1, trial, "random", 7) is True
    [record] = db.records(W1)
    assert record.trial == trial  # config (with its bool value), outcome, values, error, info
    assert record.trial.config["fast"] is True and record.trial.config["tile"] == 2
    assert record.workload == W1
    assert (record.strategy, record.seed) == ("random", 7)
    assert db.trials(W1) == [trial]
    assert db.records(W2) == []


def test_failed_trial_keeps_its_error(db):
    trial = Trial(cfg(0), Outcome.COMPILE_ERROR, error="kernel.c:3: error: expected ';'")
    db.record(W1, trial, "exhaustive", None)
    [record] = db.records(W1)
    assert record.trial == trial and record.trial.outcome is Outcome.COMPILE_ERROR
    assert record.seed is None


def test_same_config_is_stored_once(db):
    assert db.record(W1, Trial(cfg(1), Outcome.OK, {"instructions": 10}), "random", 0) is True
    assert db.record(W1, Trial(cfg(1), Outcome.OK, {"instructions": 99}), "random", 0) is False
    assert db.record(W1, Trial(cfg(1), Outcome.CRASH), "random", 1) is False
    [record] = db.records(W1)
    assert record.trial.values == {"instructions": 10}  # the first measurement stays
    # The same configuration of another workload is a different trial.
    assert db.record(W2, Trial(cfg(1), Outcome.OK, {"instructions": 10}), "random", 0) is True


def test_best_is_the_minimum_over_ok_trials(db):
    rows = [
        (0, Outcome.OK, {"instructions": 500}),
        (1, Outcome.OK, {"instructions": 300}),
        (2, Outcome.WRONG_ANSWER, {"instructions": 1}),  # fast but wrong: never best
        (3, Outcome.CRASH, {"instructions": 2}),
        (4, Outcome.OK, {"time_ns": 5}),  # no value for this objective
        (5, Outcome.OK, {"instructions": 300}),  # tie: the earlier one wins
        (6, Outcome.OK, {"instructions": 400}),
    ]
    for i, outcome, values in rows:
        db.record(W1, Trial(cfg(i), outcome, values), "random", 0)
    best = db.best(W1, "instructions")
    assert best.trial.config == cfg(1)
    assert best.trial.value("instructions") == 300
    assert db.best(W1, "time_ns").trial.config == cfg(4)
    assert db.best(W1, "energy_uj") is None


def test_best_with_only_failed_trials_is_none(db):
    db.record(W1, Trial(cfg(0), Outcome.TIMEOUT, {"instructions": 1}), "random", 0)
    db.record(W1, Trial(cfg(1), Outcome.TOO_LARGE), "random", 0)
    assert db.best(W1, "instructions") is None
    assert db.best(W2, "instructions") is None  # no trials at all


def test_workloads_are_distinct_and_filter_by_target(db):
    for w in (W1, W2, W1, W3, W2):
        for i in range(3):
            db.record(w, Trial(cfg(i), Outcome.OK, {"instructions": i}), "random", 0)
    assert db.workloads() == [W1, W2, W3]
    assert db.workloads("cortex-m55") == [W1, W3]
    assert db.workloads("host") == [W2]
    assert db.workloads("cortex-a53") == []


def test_reopening_keeps_everything(tmp_path):
    path = tmp_path / "tune.db"
    first = TuningDatabase(path)
    trials = [Trial(cfg(i), Outcome.OK if i % 2 else Outcome.CRASH, {"instructions": 100 - i}, info={"i": i})
              for i in range(6)]
    for t in trials:
        first.record(W1, t, "random", 3)
    first.close()

    again = TuningDatabase(path)
    try:
        assert again.trials(W1) == trials
        assert again.workloads() == [W1]
        assert again.best(W1, "instructions").trial == trials[5]
        # A resumed run never records a configuration twice, but can add new ones.
        assert again.record(W1, trials[0], "random", 3) is False
        assert again.record(W1, Trial(cfg(7), Outcome.OK, {"instructions": 1}), "random", 3) is True
        assert len(again.records(W1)) == 7
    finally:
        again.close()


def test_empty_file_becomes_a_database(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    database = TuningDatabase(path)
    try:
        assert database.record(W1, Trial(cfg(0), Outcome.OK), "random", 0)
    finally:
        database.close()


# --- files that must be refused and left alone --------------------------------------------------
def refuse_untouched(path: Path, *words: str) -> str:
    """Opening `path` raises DatabaseError naming it (and `words`); its bytes do not change."""
    before = path.read_bytes()
    with pytest.raises(DatabaseError) as info:
        TuningDatabase(path)
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message, message
    assert path.read_bytes() == before, f"{path} was modified by a refused open"
    return message


def test_random_bytes_are_refused(tmp_path):
    path = tmp_path / "noise.db"
    path.write_bytes(random.Random(0).randbytes(8192))
    refuse_untouched(path)


def test_text_file_is_refused(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 50)
    refuse_untouched(path)


def test_foreign_sqlite_file_is_refused_and_not_modified(tmp_path):
    path = tmp_path / "other-app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE foo (x INTEGER)")
    conn.execute("INSERT INTO foo VALUES (42)")
    conn.commit()
    conn.close()
    refuse_untouched(path, "not an edgetune database")


def test_sqlite_with_another_applications_meta_is_refused(tmp_path):
    path = tmp_path / "other-meta.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('application', 'someone-else')")
    conn.commit()
    conn.close()
    refuse_untouched(path, "someone-else")


def test_newer_schema_version_is_refused(tmp_path):
    path = tmp_path / "future.db"
    TuningDatabase(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    refuse_untouched(path, "99")


def test_missing_parent_folder(tmp_path):
    path = tmp_path / "no" / "such" / "tune.db"
    with pytest.raises(DatabaseError, match="no/such"):
        TuningDatabase(path)
    assert not (tmp_path / "no").exists()  # nothing created on the way


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(DatabaseError, match="not a file"):
        TuningDatabase(tmp_path)


# --- processes sharing one file -----------------------------------------------------------------
def _open_at_once(path: str, barrier, index: int, errors) -> None:
    barrier.wait()
    try:
        database = TuningDatabase(path)
        try:
            database.record(W1, Trial(cfg(index), Outcome.OK, {"instructions": index}), "random", 0)
        finally:
            database.close()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        errors.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("attempt", range(5))
def test_many_processes_creating_one_new_file_at_once_all_succeed(tmp_path, attempt):
    path = tmp_path / f"new-{attempt}.db"
    context = multiprocessing.get_context("fork")
    count = 8
    barrier, errors = context.Barrier(count), context.Queue()
    workers = [context.Process(target=_open_at_once, args=(str(path), barrier, i, errors)) for i in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == [] and all(worker.exitcode == 0 for worker in workers)
    database = TuningDatabase(path)
    try:
        assert sorted(t.values["instructions"] for t in database.trials(W1)) == list(range(count))
    finally:
        database.close()


@contextmanager
def read_only(path: Path):
    """`path` made unwritable for this process: chmod for a normal user; for root, whom
    chmod does not stop, the immutable attribute (which stops root too)."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        yield
        path.chmod(0o644)
        return
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make a file read-only for root here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_database_is_one_line_naming_it_for_tune_and_import(tmp_path):
    # Separate processes, as a user runs them: SQLite shares open files between the
    # connections of one process, so an in-process writer could reuse a writable one.
    edgetune = str(Path(sys.executable).parent / "edgetune")
    path = tmp_path / "shared.db"
    args = [edgetune, "tune", "matmul_s8", "--target", "host", "--shape", "m=4,n=6,k=5", "--db", str(path)]
    subprocess.run([*args, "--budget", "2"], check=True, capture_output=True)
    # Trials the read-only file does not hold yet (another workload, tuned elsewhere).
    other = tmp_path / "other.db"
    subprocess.run([edgetune, "tune", "matmul_s8", "--target", "host", "--shape", "m=4,n=6,k=6", "--db", str(other),
                    "--budget", "1"], check=True, capture_output=True)
    dump = tmp_path / "trials.jsonl"
    subprocess.run([edgetune, "db", "export", "--db", str(other), "--out", str(dump)], check=True, capture_output=True)
    with read_only(path):
        before = path.read_bytes()
        for command in ([*args, "--budget", "4"], [edgetune, "db", "import", str(dump), "--db", str(path)]):
            result = subprocess.run(command, capture_output=True, text=True)
            assert result.returncode == 2, (command, result.stdout, result.stderr)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and str(path) in lines[0] and "read-only" in lines[0], result.stderr
        assert path.read_bytes() == before
        # Reading needs no write: exporting from it still works.
        subprocess.run([edgetune, "db", "export", "--db", str(path), "--out", str(tmp_path / "x.jsonl")],
                       check=True, capture_output=True)


# --- claims: configurations being measured ------------------------------------------------------
def test_claims_are_never_results_but_use_the_budget(db):
    from edgetune.tuner import Owner

    me = Owner.this_process()
    db.record(W1, Trial(cfg(0), Outcome.OK, {"instructions": 50}), "random", 0)
    claims, room = db.claim(W1, [cfg(0), cfg(1), cfg(2), cfg(3)], budget=3, owner=me, strategy="random", seed=0,
                            asked=True)
    # cfg(0) is stored: passed over; the budget of 3 leaves room for two claims.
    assert [c.config for c in claims] == [cfg(1), cfg(2)] and room == 0
    assert [c.proposal for c in claims] == [2, 3] and {c.batch for c in claims} == {2}
    assert db.used(W1) == 3
    assert [t.config for t in db.trials(W1)] == [cfg(0)] and db.workloads() == [W1]
    assert db.best(W1, "instructions").trial.config == cfg(0)
    out = io.StringIO()
    assert db.export_jsonl(out) == 1
    assert db.record(W1, Trial(cfg(2), Outcome.OK, {"instructions": 7}), "random", 0, claim=claims[1])
    [left] = db.claims(W1)
    assert left.config == cfg(1) and db.used(W1) == 3
    [_, stored] = db.proposals(W1)
    assert (stored.proposal, stored.batch) == (3, 2)


def test_a_claim_of_another_host_is_taken_over_only_when_its_lease_ran_out(db):
    from edgetune.tuner import Owner

    me = Owner.this_process()
    away = Owner("farm-7|pid:[1]", 4242, "99")
    [silent], _ = db.claim(W1, [cfg(1)], budget=9, owner=away, strategy="random", seed=0, asked=True, lease_s=-1)
    [busy], _ = db.claim(W1, [cfg(2)], budget=9, owner=away, strategy="random", seed=0, asked=True, lease_s=600)
    assert silent.expired() and not busy.expired()  # another host's pid says nothing here
    assert db.claim(W1, [cfg(1), cfg(2)], budget=9, owner=me, strategy="random", seed=0, asked=True)[0] == []
    [taken] = db.take_over(W1, [silent, busy], me)
    assert taken.config == cfg(1) and taken.owner == me and taken.proposal == silent.proposal
    assert db.take_over(W1, [silent], me) == []  # no longer the silent owner's
    # The heartbeat renews a lease; giving claims up ends theirs at once.
    [late], _ = db.claim(W1, [cfg(5)], budget=9, owner=away, strategy="random", seed=0, asked=True, lease_s=-1)
    db.renew(away)
    assert not next(c for c in db.claims(W1) if c.config == cfg(5)).expired()
    db.release(away)
    assert all(c.expired() for c in db.claims(W1) if c.owner == away)


def test_claims_beyond_a_smaller_budget_are_dropped_latest_first_and_only_when_unowned(db):
    """A run interrupted with a batch claimed, resumed with a smaller budget: the claims the
    new budget has no room for go (the latest proposals first); a live owner's stay."""
    from edgetune.tuner import Owner

    away = Owner("farm-7|pid:[1]", 4242, "99")
    db.record(W1, Trial(cfg(0), Outcome.OK, {"instructions": 50}), "random", 0)
    db.claim(W1, [cfg(1), cfg(2), cfg(3)], budget=9, owner=away, strategy="random", seed=0, asked=True, lease_s=-1)
    [live], _ = db.claim(W1, [cfg(4)], budget=9, owner=away, strategy="random", seed=0, asked=True, lease_s=600)
    assert db.used(W1) == 5
    assert db.drop_claims_over(W1, 9) == set()  # room for all: nothing goes
    assert db.drop_claims_over(W1, 3) == {cfg(3).key(), cfg(2).key()}
    assert [c.config for c in db.claims(W1)] == [cfg(1), cfg(4)] and db.used(W1) == 3
    assert db.drop_claims_over(W1, 1) == {cfg(1).key()}  # the live owner's claim stays
    assert [c.config for c in db.claims(W1)] == [live.config]


def test_a_dead_owner_on_this_host_is_noticed_at_once(db, tmp_path):
    from edgetune.tuner import Owner

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = Owner(Owner.this_process().host, child.pid, "1")
    [claim], _ = db.claim(W1, [cfg(3)], budget=9, owner=dead, strategy="random", seed=0, asked=True, lease_s=600)
    assert claim.expired()
    assert not db.claim(W1, [cfg(4)], budget=9, owner=Owner.this_process(), strategy="random", seed=0,
                        asked=True)[0][0].expired()


def test_a_database_on_a_read_only_mount_is_one_line_naming_it(tmp_path):
    # A read-only bind mount stops root too; it needs a mount namespace (unshare -m).
    edgetune = str(Path(sys.executable).parent / "edgetune")
    source, mount = tmp_path / "data", tmp_path / "ro"
    source.mkdir()
    mount.mkdir()
    path = source / "tune.db"
    subprocess.run([edgetune, "tune", "matmul_s8", "--target", "host", "--shape", "m=4,n=6,k=5", "--budget", "2",
                    "--db", str(path)], check=True, capture_output=True)
    remount = f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(mount))} && " \
              f"mount -o remount,bind,ro {shlex.quote(str(mount))}"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", remount], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no read-only bind mount here: {probe.stderr.strip()}")
    tune = [edgetune, "tune", "matmul_s8", "--target", "host", "--shape", "m=4,n=6,k=5", "--budget", "4",
            "--db", str(mount / "tune.db")]
    script = f"{remount} && exec {shlex.join(tune)}"
    result = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{mount}/tune.db" in lines[0] and "read-only" in lines[0], result.stderr


def test_a_lost_trial_measured_again_takes_no_more_of_the_budget(db):
    from edgetune.tuner import Owner

    me = Owner.this_process()
    db.record(W1, Trial(cfg(0), Outcome.OK, {"instructions": 9}), "random", 0)
    db.record(W1, Trial(cfg(1), Outcome.EMULATOR_LOST, error="killed by signal 9"), "random", 0)
    assert db.used(W1) == 2  # the lost trial is a row of the budget
    # Budget full: a new configuration gets no claim; the lost one does, in its row's place.
    claims, room = db.claim(W1, [cfg(2), cfg(1)], budget=2, owner=me, strategy="random", seed=0, asked=False)
    assert [c.config for c in claims] == [cfg(1)] and room == 0 and db.used(W1) == 2
    assert db.record(W1, Trial(cfg(1), Outcome.OK, {"instructions": 4}), "random", 0, claim=claims[0])
    assert db.used(W1) == 2 and db.claims(W1) == [] and len(db.trials(W1)) == 2


def test_one_rule_says_which_stored_trials_give_way_to_a_new_measurement():
    from edgetune.tuner import replaceable
    assert replaceable(Outcome.EMULATOR_LOST, None, 0) and replaceable(Outcome.DEVICE_LOST, 5.0, 1.0)
    assert replaceable(Outcome.TIMEOUT, 0.5, 1.0) and replaceable(Outcome.TIMEOUT, None, 1.0)
    assert not replaceable(Outcome.TIMEOUT, 1.0, 1.0) and not replaceable(Outcome.TIMEOUT, 2.0, 1.0)
    assert not replaceable(Outcome.TIMEOUT, None, 0)  # no limit known either side: it stands
    assert replaceable(Outcome.TIMEOUT, "9", 1.0)  # a limit that is not a number counts as unrecorded
    assert not any(replaceable(o, 0.5, 9.0) for o in Outcome if not o.lost and o is not Outcome.TIMEOUT)


def test_records_read_again_follow_a_new_revaluer_and_an_updated_row(db):
    """Records are kept by the row they were read from: reading again gives the same record,
    but a new revaluer, or a row changed under the reader (another process replaced a trial),
    is seen at once."""
    db.record(W1, Trial(cfg(0), Outcome.OK, {"instructions": 50}), "random", 0)
    [first] = db.records(W1)
    assert db.records(W1) == [first]
    db.revalue_with(lambda workload, trial: Trial(trial.config, trial.outcome, {"instructions": 5}))
    assert db.records(W1)[0].trial.values == {"instructions": 5}
    db.revalue_with(lambda workload, trial: Trial(trial.config, trial.outcome, {"instructions": 6}))
    assert db.records(W1)[0].trial.values == {"instructions": 6}
    db.revalue_with(None)
    assert db.records(W1)[0].trial.values == {"instructions": 50}
    db._conn.execute("UPDATE trials SET measured = ? WHERE workload = ?", (json.dumps({"instructions": 40}), W1.key()))
    assert db.records(W1)[0].trial.values == {"instructions": 40}
