"""Nothing is lost: a tuning run killed with SIGKILL at random moments resumes with every
trial it completed and no duplicates, and ends where an uninterrupted run ends. Trials move
between machines as JSON lines. Reports render from a real database."""
from __future__ import annotations

import io
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.report import best_so_far, pareto_front
from edgetune.session import resume_search, search_loop
from edgetune.tuner import (DatabaseError, Outcome, Space, Trial, TuningDatabase, Workload, choice, make_strategy,
                            powers_of_two)
from stored import stored_count

EDGETUNE = str(Path(sys.executable).parent / "edgetune")
# The case of issue 13.2: with two jobs, trials finish in any order.
TUNE = ["tune", "matmul_s8", "--target", "cortex-m55", "--shape", "m=8,n=16,k=16", "--budget", "20",
        "--jobs", "2", "--seed", "7", "--json"]
ONE_AT_A_TIME = ["--batch", "1"]  # trials stored one by one, so kills can land between any two


def rows(db_path):
    db = TuningDatabase(db_path)
    (workload,) = db.workloads()
    return [(r.trial.config.key(), r.trial.values.get("instructions")) for r in db.records(workload)]


@pytest.mark.qemu
@pytest.mark.slow  # whole tune commands in QEMU; the in-process runs below check the same in the default tier
def test_sigkill_at_random_moments_with_two_jobs_ends_where_an_uninterrupted_run_ends(tmp_path):
    # Each run builds its own variants (a cache of its own): trials take long enough for
    # kills to land inside batches, as they do on a first tune.
    def env(name):
        return {**os.environ, "EDGETUNE_CACHE": str(tmp_path / f"cache-{name}")}

    straight = tmp_path / "straight.db"
    expected = json.loads(subprocess.run([EDGETUNE, *TUNE, *ONE_AT_A_TIME, "--db", str(straight)], cwd=tmp_path,
                                         env=env("straight"), capture_output=True, text=True, check=True).stdout)
    killed = tmp_path / "killed.db"
    rng = np.random.default_rng(2024)  # the kill points are themselves reproducible
    # A kill point: once the run has stored `more` trials more (0: while it starts and
    # rebuilds its search), a random moment later, so kills land between a batch's claim and
    # its trials and between its two trials.
    seen: list = []
    inside: list[bool] = []  # the run was still going when killed
    for more, delay in zip(rng.integers(0, 2, size=20), rng.uniform(0.0, 0.15, size=20)):
        target = len(seen) + more
        proc = subprocess.Popen([EDGETUNE, *TUNE, *ONE_AT_A_TIME, "--db", str(killed)], cwd=tmp_path,
                                env=env("killed"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None and stored_count(killed) < target:
            time.sleep(0.01)
        time.sleep(delay)
        inside.append(proc.poll() is None)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if killed.exists():
            now = rows(killed) if TuningDatabase(killed).workloads() else []
            assert set(seen) <= set(now)  # nothing completed before a kill disappears
            assert len({key for key, _ in now}) == len(now)  # and nothing is stored twice
            seen = now
    assert inside == [True] * 20  # every kill point fell inside a run
    done = json.loads(subprocess.run([EDGETUNE, *TUNE, *ONE_AT_A_TIME, "--db", str(killed)], cwd=tmp_path,
                                     env=env("killed"), capture_output=True, text=True, check=True).stdout)
    assert done["trials"] == expected["trials"] == 20
    assert sorted(rows(killed)) == sorted(rows(straight))  # the same configurations, the same counts
    assert {k: done["best"][k] for k in ("config", "instructions")} == \
        {k: expected["best"][k] for k in ("config", "instructions")}
    assert TuningDatabase(killed).claims(TuningDatabase(killed).workloads()[0]) == []


@pytest.mark.qemu
@pytest.mark.slow  # whole tune commands in QEMU; the in-process runs below check the same in the default tier
def test_two_tune_commands_on_one_database_split_the_budget(tmp_path):
    shared = tmp_path / "shared.db"
    procs = [subprocess.Popen([EDGETUNE, *TUNE, "--db", str(shared)], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [proc.communicate() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    summaries = [json.loads(out) for out, _ in outputs]
    assert sum(s["new_trials"] for s in summaries) == 20  # not 40: the budget was split
    assert len(rows(shared)) == 20 and len({key for key, _ in rows(shared)}) == 20
    db = TuningDatabase(shared)
    assert db.claims(db.workloads()[0]) == []


# --- resuming is a pure function of (seed, stored proposals): no emulator needed --------------
SPACE = Space([powers_of_two("bx", 1, 32), powers_of_two("by", 1, 32), choice("unroll", [1, 2, 3, 4]),
               choice("opt", ["O2", "O3", "Os"])])
FAKE = Workload("fake_kernel", 1, "fake-target", (("n", 8),))


def fake_value(config) -> int:
    c = config.as_dict()
    return (abs(c["bx"] - 8) + 1) * (abs(c["by"] - 4) + 2) * 97 + c["unroll"] * 13 + {"O2": 5, "O3": 0, "Os": 9}[c["opt"]]


class Interrupted(Exception):
    """Stands in for a kill: raised by the evaluation of the n-th trial."""


def fake_submitter(pool, rng, fail_at=None, log=None, hang=False):
    """Evaluations that finish in a random order (a random short sleep), as parallel builds
    and runs do; the `fail_at`-th one interrupts the run instead. Each evaluation started
    is appended to `log` (a file); `hang`: evaluations never finish."""
    count = [0]

    def evaluate(config, pause):
        if log is not None:
            with open(log, "a") as out:
                out.write(config.key() + "\n")
        while hang:
            time.sleep(1)
        time.sleep(pause)
        if fail_at is not None and count[0] >= fail_at:
            raise Interrupted
        count[0] += 1
        return Trial(config, Outcome.OK, {"instructions": fake_value(config)})

    return lambda config: pool.submit(evaluate, config, float(rng.uniform(0, 0.004)))


def fake_tune(path, strategy, seed, budget, jobs=2, timing=0, fail_at=None, log=None, hang=False, initial=()):
    """What `edgetune tune` does with a database, on the fake workload: rebuild the search
    from the stored proposals, then run the search loop."""
    from concurrent.futures import ThreadPoolExecutor

    db = TuningDatabase(path)
    try:
        search = make_strategy(strategy, SPACE, np.random.default_rng(seed), "instructions")
        start = resume_search(db, FAKE, SPACE, search, (strategy, seed), initial)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            submit = fake_submitter(pool, np.random.default_rng(timing), fail_at, log, hang)
            try:
                search_loop(start.resumed.strategy, submit, db, FAKE, budget=budget, jobs=jobs,
                            stored=len(start.done), label=(strategy, seed), pending=start.pending,
                            resumed=start.resumed)
            except Interrupted:
                pass
        return sorted((r.trial.config.key(), r.trial.values["instructions"]) for r in db.records(FAKE))
    finally:
        db.close()


def swap_ids(path, first, second):
    """Exchange two rows' ids: what completion order does to row order."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE trials SET id = -1 WHERE id = ?", (first,))
    conn.execute("UPDATE trials SET id = ? WHERE id = ?", (first, second))
    conn.execute("UPDATE trials SET id = ? WHERE id = -1", (second,))
    conn.execute("COMMIT")
    conn.close()


STRATEGY_NAMES = ["transfer", "annealing", "genetic", "bandit"]


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_swapping_two_rows_ids_does_not_change_where_a_resumed_run_ends(tmp_path, strategy):
    straight = fake_tune(tmp_path / "straight.db", strategy, seed=7, budget=30, timing=1)
    for pair in ((3, 4), (1, 9), (12, 5)):
        path = tmp_path / f"swapped-{pair[0]}-{pair[1]}.db"
        fake_tune(path, strategy, seed=7, budget=14, timing=2)
        swap_ids(path, *pair)
        resumed = fake_tune(path, strategy, seed=7, budget=30, timing=3)
        assert resumed == straight, pair


# Seeds measured before the search (as `tune --initial` and an export's old best give).
SEEDS = ({"bx": 1, "by": 1, "unroll": 1, "opt": "Os"}, {"bx": 32, "by": 32, "unroll": 4, "opt": "O2"},
         {"bx": 2, "by": 16, "unroll": 2, "opt": "O3"})


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
@pytest.mark.parametrize("initial", [(), SEEDS], ids=["asked", "seeded"])
def test_runs_interrupted_at_random_points_end_where_an_uninterrupted_one_ends(tmp_path, strategy, initial):
    straight = fake_tune(tmp_path / "straight.db", strategy, seed=3, budget=26, timing=1, initial=initial)
    rng = np.random.default_rng(11)
    path = tmp_path / "interrupted.db"
    for attempt in range(8):
        fake_tune(path, strategy, seed=3, budget=26, timing=attempt + 5, fail_at=int(rng.integers(0, 6)),
                  initial=initial)
    done = fake_tune(path, strategy, seed=3, budget=26, timing=99, initial=initial)
    assert len(done) == 26 and done == straight
    assert TuningDatabase(path).claims(FAKE) == []


def test_an_interrupted_batch_of_seeds_is_finished_and_told_whole(tmp_path):
    from edgetune.tuner import Owner
    from edgetune.tuner.resume import rebuild

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = Owner(Owner.this_process().host, child.pid, "1")
    db = TuningDatabase(tmp_path / "seeded.db")
    first, second = (SPACE.make(values) for values in SEEDS[:2])
    claims, _ = db.claim(FAKE, [first, second], budget=10, owner=dead, strategy="random", seed=1, asked=False)
    assert [c.batch for c in claims] == [claims[0].proposal] * 2 and not any(c.asked for c in claims)
    db.record(FAKE, Trial(second, Outcome.OK, {"instructions": 5}), "random", 1, claim=claims[1])
    search = make_strategy("random", SPACE, np.random.default_rng(1), "instructions")
    resumed = rebuild(search, SPACE, db.proposals(FAKE), db.claims(FAKE), ("random", 1))
    # The stored half is not told on its own: the batch is finished, then told in proposal order.
    assert resumed.batch == (first, second) and list(resumed.batch_trials) == [second]
    assert [point for point, _ in resumed.batch_claims] == [first] and resumed.orphans == ()
    assert search.results == {}


def _fake_process(path, barrier, index, log):
    barrier.wait()
    fake_tune(path, "transfer", seed=5, budget=24, timing=index, log=log)


@pytest.mark.parametrize("processes", [2, 4])
def test_processes_sharing_a_database_split_the_budget_exactly(tmp_path, processes):
    # The same command in every process (same strategy, same seed): the hardest case, as
    # every process wants to propose the same configurations next.
    path = tmp_path / "shared.db"
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(processes)
    logs = [tmp_path / f"measured-{i}.txt" for i in range(processes)]
    workers = [context.Process(target=_fake_process, args=(path, barrier, i, logs[i])) for i in range(processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert [worker.exitcode for worker in workers] == [0] * processes
    measured = [line for log in logs if log.exists() for line in log.read_text().splitlines()]
    assert len(measured) == 24 and len(set(measured)) == 24  # the budget, and nothing measured twice
    db = TuningDatabase(path)
    assert sorted(r.trial.config.key() for r in db.records(FAKE)) == sorted(measured)
    assert db.claims(FAKE) == []
    assert sum(1 for log in logs if log.exists()) > 1  # the work was shared


def _hanging_process(path, log):
    fake_tune(path, "transfer", seed=5, budget=10, log=log, hang=True)


def test_a_killed_process_s_claims_are_taken_over(tmp_path):
    path = tmp_path / "shared.db"
    TuningDatabase(path).close()
    context = multiprocessing.get_context("fork")
    hung = context.Process(target=_hanging_process, args=(path, tmp_path / "hung.txt"))
    hung.start()
    claimed = []
    for _ in range(600):  # until it has claimed its first batch
        claimed = TuningDatabase(path).claims(FAKE)
        if claimed:
            break
        time.sleep(0.05)
    assert [c.owner.pid for c in claimed] == [hung.pid] * 2
    os.kill(hung.pid, signal.SIGKILL)
    hung.join()
    log = tmp_path / "taker.txt"
    stored = fake_tune(path, "transfer", seed=5, budget=10, log=log)
    assert len(stored) == 10 and TuningDatabase(path).claims(FAKE) == []
    assert {c.config.key() for c in claimed} <= {key for key, _ in stored}  # measured by the taker
    assert len(log.read_text().splitlines()) == 10
    # And it ends where one process alone would have (same seed, the claimed batch replayed).
    assert stored == fake_tune(tmp_path / "alone.db", "transfer", seed=5, budget=10)


def _tuned_db(tmp_path):
    db_path = tmp_path / "a.db"
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--target", "host", "--shape", "m=4,n=6,k=5",
                                       "--budget", "4", "--db", str(db_path)])
    assert result.exit_code == 0, result.output
    return db_path


def test_jsonl_round_trip_between_databases(tmp_path):
    source = _tuned_db(tmp_path)
    dump = tmp_path / "trials.jsonl"
    assert CliRunner().invoke(main, ["db", "export", "--db", str(source), "--out", str(dump)]).exit_code == 0
    assert len(dump.read_text().splitlines()) == 4
    target = tmp_path / "b.db"
    first = CliRunner().invoke(main, ["db", "import", str(dump), "--db", str(target)])
    again = CliRunner().invoke(main, ["db", "import", str(dump), "--db", str(target)])
    assert "imported 4 trials (0 already present)" in first.output
    assert "imported 0 trials (4 already present)" in again.output
    a, b = TuningDatabase(source), TuningDatabase(target)
    assert a.workloads() == b.workloads()
    assert [r.trial for r in a.records(a.workloads()[0])] == [r.trial for r in b.records(b.workloads()[0])]
    assert [r.created for r in a.records(a.workloads()[0])] == [r.created for r in b.records(b.workloads()[0])]


def test_jsonl_import_is_all_or_nothing_and_names_the_line(tmp_path):
    source = _tuned_db(tmp_path)
    buffer = io.StringIO()
    TuningDatabase(source).export_jsonl(buffer)
    lines = buffer.getvalue().splitlines()
    lines.insert(2, '{"format": "edgetune-trial", "schema_version": 1}')
    target = TuningDatabase(tmp_path / "c.db")
    with pytest.raises(DatabaseError, match="line 3"):
        target.import_jsonl(lines, source="shared.jsonl")
    assert target.workloads() == []


def test_report_writes_plots_and_a_page(tmp_path):
    db_path = _tuned_db(tmp_path)
    result = CliRunner().invoke(main, ["report", "--db", str(db_path), "--out", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report" / "index.html").read_text()
    pngs = sorted((tmp_path / "report").glob("*.png"))
    assert len(pngs) == 3
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.name in page
    assert "matmul_s8" in page and "best time_ns" in page


def test_best_so_far_and_pareto_front():
    assert best_so_far([None, 5.0, 7.0, None, 3.0, 4.0]) == [None, 5.0, 5.0, 5.0, 3.0, 3.0]
    points = [(1, 9, 0), (2, 5, 1), (3, 6, 2), (4, 1, 3), (5, 1, 4)]
    assert [p[2] for p in pareto_front(points)] == [0, 1, 3]


def test_progress_line_counts_failures_rate_and_time_left():
    from edgetune.progress import ProgressDisplay
    from edgetune.tuner import Config, Outcome, Trial

    now = [100.0]
    out = io.StringIO()
    show = ProgressDisplay("instructions", stream=out, clock=lambda: now[0])
    config = Config((("tile_m", 1),))
    now[0] += 2.0
    show(3, 10, Trial(config, Outcome.OK, values={"instructions": 500}))
    now[0] += 2.0
    show(4, 10, Trial(config, Outcome.CRASH, error="fault"))
    last = out.getvalue().rsplit("\r\x1b[K", 1)[1]
    assert last.startswith("[   4/10] best instructions=500 | crash 1 | 30 trials/min | 12 s left")
    assert "new best instructions=500" in out.getvalue()


def test_a_rebuild_asks_no_more_once_the_strategy_proposes_otherwise(tmp_path, monkeypatch):
    """A strategy that learns from other workloads' trials (model tune's layers) proposes
    otherwise once those grow: the batches after the first it would not ask for again are
    told as stored trials, without asking (each ask was a model fit), and nothing is lost."""
    from edgetune.tuner import Owner
    from edgetune.tuner.resume import rebuild

    me = Owner.this_process()
    db = TuningDatabase(tmp_path / "diverged.db")
    probe = make_strategy("random", SPACE, np.random.default_rng(1), "instructions")
    first = probe.ask(2)
    other = [c for c in SPACE if c not in first][:4]  # batches the strategy did not propose

    def store(configs, value):
        claims, _ = db.claim(FAKE, configs, budget=10, owner=me, strategy="random", seed=1, asked=True)
        for claim in claims:
            db.record(FAKE, Trial(claim.config, Outcome.OK, {"instructions": value}), "random", 1, claim=claim)

    store(first, 9)
    store(other[:2], 8)
    store(other[2:], 7)
    search = make_strategy("random", SPACE, np.random.default_rng(1), "instructions")
    asks = []
    original = type(search).ask
    monkeypatch.setattr(type(search), "ask", lambda self, n=1: asks.append(n) or original(self, n))
    resumed = rebuild(search, SPACE, db.proposals(FAKE), db.claims(FAKE), ("random", 1))
    assert asks == [2, 2]  # the first batch replayed, the second not proposed again: no third ask
    assert len(resumed.strategy.results) == 6  # every stored trial told


def test_meanwhile_runs_beside_each_batch_while_its_trials_are_measured(tmp_path):
    """A search's `meanwhile` (work for the host while trials run: a board flashing) is called
    once per batch, after the batch is claimed and submitted and before its trials are
    stored, and changes nothing the search stores."""
    from concurrent.futures import ThreadPoolExecutor

    from edgetune.session import SearchRun

    def run(db, meanwhile=None):
        search = make_strategy("random", SPACE, np.random.default_rng(4), "instructions")
        with ThreadPoolExecutor(max_workers=2) as pool:
            SearchRun(search, fake_submitter(pool, np.random.default_rng(0)), db, FAKE, budget=6, jobs=2, stored=0,
                      label=("random", 4)).until(6, meanwhile)
        return [r.trial.config.key() for r in db.proposals(FAKE)]

    seen = []
    db = TuningDatabase(tmp_path / "with.db")
    with_it = run(db, lambda batch: seen.append((len(db.records(FAKE)), len(db.claims(FAKE)))))
    without = run(TuningDatabase(tmp_path / "without.db"))
    assert seen == [(0, 2), (2, 2), (4, 2)]  # each batch claimed and being measured, the ones before stored
    assert with_it == without and len(with_it) == 6
