"""Tuning runs end to end: budget, resume without re-measuring, seeded reproducibility,
faults recorded while the run goes on."""
from __future__ import annotations

import pytest

from edgetune.session import TuneRequest, tune, workload_of
from edgetune.tuner import Outcome, TuningDatabase

from faulty import FaultyMatmul

pytestmark = pytest.mark.qemu
SHAPE = "m=8,n=12,k=16"


def run(kernel, target, db_path, budget, seed=0, jobs=2, strategy="random"):
    db = TuningDatabase(db_path)
    shape = kernel.parse_shape(SHAPE)
    summary = tune(TuneRequest(kernel, target, shape, strategy, budget, jobs, seed), db)
    return db, summary


def counts(db, kernel, target):
    workload = workload_of(kernel, target, kernel.parse_shape(SHAPE))
    return {t.config.key(): t.values.get("instructions") for t in db.trials(workload)}


def test_budget_is_the_number_of_stored_trials(matmul, m55, tmp_path):
    db, summary = run(matmul, m55, tmp_path / "a.db", budget=6)
    assert summary.trials == 6 and summary.new_trials == 6
    assert summary.best is not None
    ok = [t for t in db.trials(summary.workload) if t.outcome is Outcome.OK]
    assert summary.best.trial.values["instructions"] == min(t.values["instructions"] for t in ok)


def test_rerun_measures_nothing_new_and_keeps_the_best(matmul, m55, tmp_path):
    _, first = run(matmul, m55, tmp_path / "a.db", budget=5)
    _, again = run(matmul, m55, tmp_path / "a.db", budget=5)
    assert again.new_trials == 0 and again.trials == 5
    assert again.best.trial.config == first.best.trial.config
    assert again.best.id == first.best.id


def test_same_seed_gives_identical_counts_in_fresh_databases(matmul, m55, tmp_path):
    db1, _ = run(matmul, m55, tmp_path / "a.db", budget=6, seed=11)
    db2, _ = run(matmul, m55, tmp_path / "b.db", budget=6, seed=11, jobs=1)
    assert counts(db1, matmul, m55) == counts(db2, matmul, m55)
    db3, _ = run(matmul, m55, tmp_path / "c.db", budget=6, seed=12)
    assert set(counts(db3, matmul, m55)) != set(counts(db1, matmul, m55))


def test_resumed_run_ends_where_an_uninterrupted_one_does(matmul, m55, tmp_path):
    run(matmul, m55, tmp_path / "resumed.db", budget=3, seed=5)
    resumed, summary = run(matmul, m55, tmp_path / "resumed.db", budget=7, seed=5)
    assert summary.new_trials == 4
    straight, _ = run(matmul, m55, tmp_path / "straight.db", budget=7, seed=5)
    assert counts(resumed, matmul, m55) == counts(straight, matmul, m55)


def test_faulty_variants_are_recorded_and_tuning_goes_on(m55, tmp_path):
    kernel = FaultyMatmul("trap")
    db, summary = run(kernel, m55, tmp_path / "f.db", budget=16, seed=3, strategy="random")
    trials = db.trials(summary.workload)
    crashed = [t for t in trials if t.outcome is Outcome.CRASH]
    assert crashed and all(t.config["tile_m"] == 2 for t in crashed)
    assert any(t.outcome is Outcome.OK for t in trials)
    assert summary.failures == {"crash": len(crashed)}
    assert summary.best.trial.config["tile_m"] != 2


def test_exhaustive_stops_when_the_space_is_spent(matmul, m55, tmp_path):
    db = TuningDatabase(tmp_path / "x.db")
    shape = matmul.parse_shape("m=1,n=1,k=1")
    space_size = len(matmul.space(m55, shape))
    summary = tune(TuneRequest(matmul, m55, shape, "exhaustive", space_size + 10, 2, 0), db)
    assert summary.trials == space_size
