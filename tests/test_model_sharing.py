"""Issue 27 harm 3: two or three `model tune` processes on one database split the model's
budget exactly (as kernel tunes split a workload's), whatever their seeds, and each reports
what is stored: the same layers, trials and bests."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from edgetune.tuner import TuningDatabase

MODEL = Path(__file__).parent / "data" / "models" / "ds_cnn_kws.tflite"  # the smallest committed model
EDGETUNE = str(Path(sys.executable).with_name("edgetune"))


def _stored(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as conn:
        return (conn.execute("SELECT count(*) FROM trials").fetchone()[0],
                conn.execute("SELECT count(*) FROM claims").fetchone()[0])


@pytest.mark.parametrize("processes", [2, pytest.param(3, marks=pytest.mark.slow)])  # three: one more row
def test_model_tunes_sharing_a_database_split_the_budget_exactly(tmp_path, processes):
    db = tmp_path / "same.db"
    TuningDatabase(db).close()  # created before the race: the race is about the budget
    args = [EDGETUNE, "model", "tune", str(MODEL), "--target", "host", "--budget", "6", "--db", str(db), "--json"]
    procs = [subprocess.Popen([*args, "--seed", str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed in range(processes)]
    results = [proc.communicate(timeout=600) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * processes, [err for _, err in results]
    assert _stored(db) == (6, 0)
    reports = [json.loads(out) for out, _ in results]
    per_layer = [sorted((w["layers"], w["trials"], w["best"]) for w in report["workloads"]) for report in reports]
    assert all(report["spent"] == 6 for report in reports)
    assert all(layers == per_layer[0] for layers in per_layer)  # every process reports what is stored
    assert sum(trials for _, trials, _ in per_layer[0]) == 6
    assert all(best is not None for _, _, best in per_layer[0])
