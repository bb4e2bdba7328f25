"""What `edgetune tune` says: why a run stopped (every reason), the stored best in the
progress line of a resumed run, and Ctrl-C: stored trials kept, the summary printed, exit 130."""
from __future__ import annotations

import io
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli import STOP_REASONS, main
from edgetune.progress import ProgressDisplay
from edgetune.tuner import Bound, Config, Outcome, Trial, TuningDatabase

EDGETUNE = str(Path(sys.executable).parent / "edgetune")
HOST_TUNE = ["tune", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2", "--jobs", "1"]


def tune(*args):
    result = CliRunner().invoke(main, [*HOST_TUNE, *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("extra, reason", [
    (["--budget", "2"], "budget"),
    (["--budget", "1000"], "exhausted"),  # m=n=k=2 has 144 legal configurations on the host
    (["--budget", "1000", "--time-budget", "0.001"], "time"),
    (["--budget", "1000", "--patience", "1", "--strategy", "random"], "patience"),
])
def test_every_stopping_reason_is_said_in_the_human_output(tmp_path, extra, reason):
    code, out = tune(*extra, "--db", str(tmp_path / "t.db"))
    assert code == 0, out
    assert f"  stopped: {STOP_REASONS[reason]}\n" in out
    code, data = tune(*extra, "--db", str(tmp_path / "j.db"), "--json")
    assert json.loads(data)["stopped"] == reason  # the text says what the JSON says


def test_best_prints_no_stopping_reason(tmp_path):
    db = tmp_path / "t.db"
    assert tune("--budget", "2", "--db", str(db))[0] == 0
    result = CliRunner().invoke(main, ["best", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2",
                                       "--db", str(db)])
    assert result.exit_code == 0 and "stopped:" not in result.output


def test_progress_starts_from_the_stored_best_not_this_runs():
    out = io.StringIO()
    show = ProgressDisplay("instructions", stream=out, best=680.0)
    show(11, 20, Trial(Config((("tile_m", 1),)), Outcome.OK, values={"instructions": 1817}))
    assert "best instructions=680" in out.getvalue() and "1817" not in out.getvalue()
    assert "new best" not in out.getvalue()  # 1817 is worse than what the database holds
    show(12, 20, Trial(Config((("tile_m", 2),)), Outcome.OK, values={"instructions": 600}))
    assert "new best instructions=600" in out.getvalue()


def test_progress_ignores_a_best_that_breaks_a_constraint():
    out = io.StringIO()
    show = ProgressDisplay("instructions", stream=out, bounds=(Bound("code_bytes", 100.0),))
    show(1, 5, Trial(Config((("tile_m", 1),)), Outcome.OK, values={"instructions": 5, "code_bytes": 900}))
    assert "no success yet" in out.getvalue() and "new best" not in out.getvalue()


def test_resumed_run_shows_the_stored_best(tmp_path, monkeypatch, matmul, host):
    """Through the command's own loop: the display of a resumed run starts from the database's best."""
    from edgetune.cli import _tune_all
    from edgetune.session import TuneRequest

    db = tmp_path / "t.db"
    assert tune("--budget", "4", "--db", str(db))[0] == 0
    stored = TuningDatabase(db)
    (workload,) = stored.workloads()
    best = stored.best(workload, "time_ns").trial.values["time_ns"]
    made = []
    monkeypatch.setattr("edgetune.cli.ProgressDisplay",
                        lambda *a, **k: made.append(k) or ProgressDisplay(*a, stream=io.StringIO(), **k))
    request = TuneRequest(matmul, host, {"m": 2, "n": 2, "k": 2}, budget=5, objective="time_ns")
    summaries, interrupted = _tune_all([request], stored, None, show_progress=True)
    assert not interrupted and summaries[0].trials == 5
    assert made and made[0]["best"] == best


def _stored_count(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT count(*) FROM trials").fetchone()[0]
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0


def test_ctrl_c_keeps_the_trials_prints_the_summary_and_exits_130(tmp_path):
    db = tmp_path / "int.db"
    args = ["tune", "matmul_s8", "--target", "host", "--shape", "m=16,n=16,k=16", "--budget", "2000",
            "--jobs", "2", "--db", str(db)]
    proc = subprocess.Popen([EDGETUNE, *args], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while _stored_count(db) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "Aborted!" not in err and "Traceback" not in err, err
    assert "stopped: interrupted" in out, out
    kept = _stored_count(db)
    assert kept >= 3
    assert f"{kept} trials stored ({kept} new)" in out  # the summary counts what is stored
    again = subprocess.run([EDGETUNE, *args[:-4], "--budget", str(kept + 1), "--db", str(db), "--json"],
                           cwd=tmp_path, capture_output=True, text=True, check=True)
    resumed = json.loads(again.stdout)
    assert resumed["trials"] == kept + 1 and resumed["new_trials"] == 1  # nothing stored was lost
