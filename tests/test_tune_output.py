"""What `edgetune tune` says: why a run stopped (every reason), the stored best in the
progress line of a resumed run, and Ctrl-C: stored trials kept, the summary printed, exit 130."""
from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.cli.summary import STOP_REASONS
from edgetune.progress import ProgressDisplay
from edgetune.tuner import Bound, Config, Outcome, Trial, TuningDatabase

EDGETUNE = str(Path(sys.executable).parent / "edgetune")
HOST_TUNE = ["tune", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2", "--jobs", "1"]


VECTOR_ADD = Path(__file__).resolve().parents[1] / "examples" / "kernels" / "vector_add"


def tune(*args):
    if "--kernel-file" in args:  # the example kernel of one's own instead of matmul_s8
        result = CliRunner().invoke(main, ["tune", "vector_add", "--target", "host", "--shape", "size=16",
                                           "--jobs", "1", *args])
        return result.exit_code, result.output
    result = CliRunner().invoke(main, [*HOST_TUNE, *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("extra, reason", [
    (["--budget", "2"], "budget"),
    # the example kernel's 12 configurations built by gcc: a space walked whole in seconds
    (["--budget", "1000", "--compiler", "gcc", "--kernel-file", str(VECTOR_ADD)], "exhausted"),
    (["--budget", "1000", "--time-budget", "0.001"], "time"),
    (["--budget", "1000", "--patience", "1", "--strategy", "random"], "patience"),
])
def test_every_stopping_reason_is_said_in_the_human_output(tmp_path, extra, reason):
    if reason == "time":
        # Trials stored first: a 1 ms time budget may end before its first trial does, and a
        # workload with no successful trial exits 1 whatever stopped it.
        assert tune("--budget", "2", "--db", str(tmp_path / "t.db"))[0] == 0
    code, out = tune(*extra, "--db", str(tmp_path / "t.db"))
    assert code == 0, out
    assert f"  stopped: {STOP_REASONS[reason]}\n" in out
    # The same run again, as JSON, on the same database (an exhausted space is not walked twice).
    code, data = tune(*extra, "--db", str(tmp_path / "t.db"), "--json")
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
    from edgetune.cli.tune import _tune_all
    from edgetune.session import TuneRequest

    db = tmp_path / "t.db"
    assert tune("--budget", "4", "--db", str(db))[0] == 0
    stored = TuningDatabase(db)
    (workload,) = stored.workloads()
    best = stored.best(workload, "time_ns").trial.values["time_ns"]
    made = []
    monkeypatch.setattr("edgetune.cli.tune.ProgressDisplay",
                        lambda *a, **k: made.append(k) or ProgressDisplay(*a, stream=io.StringIO(), **k))
    request = TuneRequest(matmul, host, {"m": 2, "n": 2, "k": 2}, budget=5, objective="time_ns")
    summaries, interrupted = _tune_all([request], stored, None, show_progress=True)
    assert not interrupted and summaries[0].trials == 5
    assert made and made[0]["best"] == best


def _stored(path: Path) -> list[tuple[str, str, str]]:
    """(configuration, outcome, measured values) of every stored trial, read without
    writing (the run under test holds the database)."""
    if not path.exists():
        return []
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT config_key, outcome, measured FROM trials ORDER BY config_key").fetchall()
    except sqlite3.OperationalError:  # the schema is not there yet
        return []


def ctrl_c_once_stored(command: list[str], db: Path, trials: int, **popen) -> tuple[int, str, str]:
    """Start a run in a process group of its own, send the group SIGINT (a terminal's Ctrl-C)
    once the database holds `trials` trials; its exit status and output. Whatever fails on
    the way, nothing of the run is left behind, tuning on to the end of its budget."""
    proc = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)
    try:
        deadline = time.monotonic() + 300
        while len(_stored(db)) < trials and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        return proc.returncode, out, err
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group is gone: the run and all it started ended
            pass
        proc.communicate()


@pytest.mark.usefixtures("sigint_as_at_a_terminal")
@pytest.mark.parametrize("target, shape", [("host", "m=16,n=16,k=16"), ("cortex-m55", "m=8,n=8,k=16")])
@pytest.mark.one_case
def test_ctrl_c_keeps_the_trials_prints_the_summary_and_exits_130(tmp_path, target, shape):
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it: the compilers and
    emulators die with the run. Nothing they did under the signal may pass for the variant's
    own failure, neither in the database nor in the build cache."""
    db, cache = tmp_path / "int.db", tmp_path / "cache"
    args = ["tune", "matmul_s8", "--target", target, "--shape", shape, "--jobs", "2", "--db", str(db)]
    env = {**os.environ, "EDGETUNE_CACHE": str(cache)}
    status, out, err = ctrl_c_once_stored([EDGETUNE, *args, "--budget", "2000"], db, 3, cwd=tmp_path, env=env)
    assert status == 130, (out, err)
    assert "Aborted!" not in err and "Traceback" not in err, err
    assert "stopped: interrupted" in out, out
    kept = _stored(db)
    assert len(kept) >= 3
    assert f"{len(kept)} trials stored ({len(kept)} new)" in out  # the summary counts what is stored
    lost = {"emulator_lost", "device_lost"}
    assert all(outcome in {"ok"} | lost for _, outcome, _ in kept), kept  # no compile error made by the signal
    failures = [m.read_text() for m in cache.rglob("meta.json") if '"error"' in m.read_text()]
    assert failures == []  # and none cached, to be replayed on resume

    again = subprocess.run([EDGETUNE, *args, "--budget", str(len(kept) + 1), "--json"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=True)
    assert json.loads(again.stdout)["trials"] == len(kept) + 1
    after = {key: (outcome, values) for key, outcome, values in _stored(db)}
    for key, outcome, values in kept:  # every measured trial kept as it was; lost ones measured again
        assert after[key] == (outcome, values) if outcome == "ok" else after[key][0] not in lost


@pytest.mark.usefixtures("sigint_as_at_a_terminal")
def test_ctrl_c_during_npu_tuning_keeps_the_trials_and_exits_130(tmp_path):
    db = tmp_path / "npu.db"
    args = ["tune", "conv2d_s8", "--device", "ethos-u55", "--target", "cortex-m55", "--shape",
            "h=16,w=16,cin=16,cout=32,kh=3,kw=3,stride=1,pad=1,dilation=1", "--jobs", "2", "--db", str(db)]
    status, out, err = ctrl_c_once_stored([EDGETUNE, *args, "--budget", "2000"], db, 2, cwd=tmp_path)
    kept = _stored(db)
    assert status == 130 and "Traceback" not in err and "Aborted!" not in err, (out, err)
    assert "stopped: interrupted" in out and f"{len(kept)} trials stored ({len(kept)} new)" in out, out


@pytest.mark.usefixtures("sigint_as_at_a_terminal")
def test_a_build_tool_killed_from_outside_is_a_lost_trial_never_cached(tmp_path, monkeypatch):
    from edgetune.targets.buildcache import ArtifactStore
    from edgetune.targets.toolchain import ToolKilled, run_tool

    with pytest.raises(ToolKilled, match="killed by SIGINT") as err:
        run_tool(["sh", "-c", "kill -INT $$"], cwd=tmp_path)
    assert err.value.outcome.lost  # measured again on resume
    monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / "cache"))
    store, calls = ArtifactStore("images"), []

    def interrupted():
        calls.append(1)
        run_tool(["sh", "-c", "kill -INT $$"], cwd=tmp_path)

    for _ in range(2):
        with pytest.raises(ToolKilled):
            store.get_or_build("ab" * 32, tmp_path, interrupted)
    assert calls == [1, 1]  # built again, not replayed from the cache
    with pytest.raises(Exception, match=r"exit 3"):  # an ordinary failure is still the variant's
        run_tool(["sh", "-c", "exit 3"], cwd=tmp_path)


CTRL_C_TESTS = ("test_a_build_tool_killed_from_outside_is_a_lost_trial_never_cached",
                "test_ctrl_c_keeps_the_trials_prints_the_summary_and_exits_130[host-m=16,n=16,k=16]")


def test_the_ctrl_c_tests_pass_when_the_suite_starts_with_sigint_ignored(tmp_path):
    """As under `nohup pytest &` or a CI runner that ignores SIGINT: the ignoring reaches the
    xdist worker and everything it starts, and the Ctrl-C tests still pass because they set
    the handling they rely on (without it the first does not raise, the second tunes on)."""
    def ignoring_sigint():
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    ids = [f"{Path(__file__).resolve()}::{name}" for name in CTRL_C_TESTS]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1", "-q",
                           "--basetemp", str(tmp_path / "inner"), *ids], cwd=tmp_path, preexec_fn=ignoring_sigint,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and f"{len(CTRL_C_TESTS)} passed" in proc.stdout, proc.stdout + proc.stderr
