"""The command line: the names other checks rely on, JSON shapes, and one-line errors
with exit status 2 that name what is wrong."""
from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.targets import target_file
from stored import stored_db

EDGETUNE = [sys.executable, "-m", "edgetune.cli"]


def cli(*args):
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_targets_json_lists_the_shipped_targets():
    code, out = cli("targets", "--json")
    assert code == 0
    targets = {t["name"]: t for t in json.loads(out)}
    assert {"cortex-m55", "host"} <= set(targets)
    m55 = targets["cortex-m55"]
    assert [v["name"] for v in m55["vector_units"]] == ["mve"]
    assert {m["name"] for m in m55["memory"]} >= {"itcm", "dtcm", "sram2"}
    assert m55["power"]["source"]


def test_targets_show_one():
    code, out = cli("targets", "show", "host", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["name"] == "host" and data["measures"] == "time_ns"
    assert "mve" not in [v["name"] for v in data["vector_units"]]


def test_kernels_json_lists_parameters():
    code, out = cli("kernels", "--json")
    assert code == 0
    kernels = {k["name"]: k for k in json.loads(out)}
    params = kernels["matmul_s8"]["parameters"]
    assert {"tile_m", "tile_n", "unroll_k", "vector", "compiler", "opt"} <= set(params)
    # The M55 has Helium and the DSP extension; every target the plain loop nest (naive)
    assert params["vector"]["values"] == ["c", "mve", "dsp", "naive"]


TUNE = ["tune", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2"]


def bad_inputs(folder: Path) -> None:
    """The files the cases below refer to as {name}: databases that are corrupt, foreign or
    too new, malformed target files, a file where a folder should be, bad JSON lines."""
    stored_db(folder)
    (folder / "corrupt.db").write_bytes(random.Random(0).randbytes(8192))
    (folder / "notes.db").write_text("my notes, not a database\n")
    conn = sqlite3.connect(folder / "other-app.db")
    conn.execute("CREATE TABLE foo (x INTEGER)")
    conn.commit()
    conn.close()
    stored_db(folder, "future.db")
    conn = sqlite3.connect(folder / "future.db")
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    host = target_file("host").read_text()
    (folder / "bad-key.toml").write_text(host.replace("timeout_s = ", 'timeout_s = "slow" # ', 1))
    (folder / "broken.toml").write_text(host + "\n[[compilers]\n")
    (folder / "blocker").write_text("a file, not a folder")
    (folder / "bad.jsonl").write_text('{"format": "edgetune-trial", "schema_version": 1, "workload": 3}\n')


# The list: a corrupt or foreign file, a malformed target TOML, an unknown kernel,
# target, parameter, objective or strategy, a bad shape, an unwritable output folder. Each is
# one line naming the culprit, exit status 2, and nothing stored changes. {name}: a file of
# bad_inputs; {db}: the stored database (passed wherever a command takes --db).
@pytest.mark.parametrize("args, culprit", [
    (["tune", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2", "--db", "{corrupt.db}"], "corrupt.db"),
    (["tune", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2", "--db", "{notes.db}"], "notes.db"),
    (["best", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2", "--db", "{other-app.db}"], "not an edgetune database"),
    (["report", "--db", "{future.db}", "--out", "{report}"], "schema version 99 is newer"),
    (["best", "matmul_s8", "--shape", "m=2,n=2,k=2", "--db", "{none.db}"], "none.db"),
    (["db", "import", "{bad.jsonl}", "--db", "{db}"], "bad.jsonl: line 1"),
    ([*TUNE[:3], "{bad-key.toml}", *TUNE[4:], "--db", "{db}"], "runner.timeout_s"),
    ([*TUNE[:3], "{broken.toml}", *TUNE[4:], "--db", "{db}"], "not valid TOML"),
    (["targets", "show", "{broken.toml}"], "broken.toml"),
    (["tune", "nokernel", "--shape", "m=1,n=1,k=1", "--db", "{db}"], "nokernel"),
    (["tune", "matmul_s8", "--target", "nosuch", "--shape", "m=1,n=1,k=1", "--db", "{db}"], "nosuch"),
    (["targets", "show", "nosuch"], "nosuch"),
    (["targets", "show", "/no/such/file.toml"], "/no/such/file.toml"),
    ([*TUNE, "--initial", "tile_q=1", "--db", "{db}"], "tile_q"),
    ([*TUNE, "--initial", "tile_m=3", "--db", "{db}"], "'3'"),
    ([*TUNE, "--objective", "bogus_value", "--db", "{db}"], "bogus_value"),
    ([*TUNE, "--constraint", "energy_uj<=lots", "--db", "{db}"], "energy_uj<=lots"),
    (["best", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2", "--objective", "cycles", "--db", "{db}"],
     "'cycles'"),
    ([*TUNE, "--strategy", "psychic", "--db", "{db}"], "psychic"),
    (["tune", "matmul_s8", "--shape", "m=1,n=1", "--db", "{db}"], "'k'"),
    (["tune", "matmul_s8", "--shape", "m=1,n=1,k=1,q=3", "--db", "{db}"], "'q'"),
    (["tune", "matmul_s8", "--shape", "m=0,n=1,k=1", "--db", "{db}"], "m=0"),
    (["tune", "matmul_s8", "--shape", "m=1;n=1", "--db", "{db}"], "m=1;n=1"),
    (["tune", "matmul_s8", "--shape", "m=1,n=1,k=99999", "--db", "{db}"], "k=99999"),
    (["export", "--target", "host", "--out", "{blocker}", "--db", "{db}"], "blocker"),
    (["export", "--target", "host", "--out", "{blocker}/sub", "--db", "{db}"], "blocker"),
    (["report", "--out", "{blocker}/sub", "--db", "{db}"], "blocker/sub"),
    (["report", "--out", "/proc/edgetune-report", "--db", "{db}"], "/proc/edgetune-report"),
    (["db", "export", "--out", "{blocker}/trials.jsonl", "--db", "{db}"], "blocker"),
    (["db", "export", "--out", "{db}", "--db", "{db}"], "the database itself"),
    (["record", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2", "--out", "/proc/space.json",
      "--db", "{db}"], "/proc/space.json"),
    ([*TUNE, "--db", "/proc/edgetune.db"], "/proc/edgetune.db"),
    (["verify", "{report}", "--target", "host"], "no such export folder"),
    ([*TUNE, "--budget", "lots", "--db", "{db}"], "--budget"),
    # Seeds are non-negative and fit the database's 64-bit integers; a time budget is finite.
    ([*TUNE, "--seed", "-1", "--db", "{db}"], "--seed"),
    ([*TUNE, "--seed", str(2**64), "--db", "{db}"], "--seed"),
    ([*TUNE, "--time-budget", "nan", "--db", "{db}"], "--time-budget nan"),
    (["verify", "{report}", "--seed", "-1"], "--seed"),
    (["model", "tune", "{notes.db}", "--seed", "-1", "--db", "{db}"], "--seed"),
    (["model", "verify", "{report}", "--target", "host", "--seed", "-1"], "--seed"),
    (["replay", "{bad.jsonl}", "--seed", "-1"], "--seed"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else None)
def test_bad_input_is_one_line_naming_the_culprit(args, culprit, tmp_path):
    bad_inputs(tmp_path)
    before = {path: path.read_bytes() for path in tmp_path.iterdir() if path.is_file()}
    names = {path.name: str(path) for path in [*before, tmp_path / "none.db", tmp_path / "report"]}
    args = [arg.replace("{db}", str(tmp_path / "stored.db")) for arg in args]
    for name, path in names.items():
        args = [arg.replace("{" + name + "}", path) for arg in args]
    code, out = cli(*args)
    assert code == 2, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgetune: error: ") and culprit in lines[0], out
    for path, content in before.items():  # nothing stored was overwritten, nothing was cleared
        assert path.read_bytes() == content, f"{path.name} changed"
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "report").exists()


@pytest.mark.smoke
@pytest.mark.qemu
def test_done_when_tune_twice_reports_twelve_and_the_same_best(tmp_path):
    """The skeleton's acceptance check, through the installed console script."""
    args = ["edgetune", "tune", "matmul_s8", "--target", "cortex-m55", "--shape", "m=16,n=16,k=32",
            "--budget", "12", "--jobs", "2", "--json"]
    exe = Path(sys.executable).parent / "edgetune"
    env = dict(os.environ)
    first = json.loads(subprocess.run([str(exe), *args[1:]], cwd=tmp_path, env=env, capture_output=True,
                                      text=True, check=True).stdout)
    second = json.loads(subprocess.run([str(exe), *args[1:]], cwd=tmp_path, env=env, capture_output=True,
                                       text=True, check=True).stdout)
    assert (tmp_path / "edgetune.db").exists()  # the default database in the working directory
    assert first["trials"] == 12 and first["new_trials"] == 12
    assert second["trials"] == 12 and second["new_trials"] == 0
    assert second["best"] == first["best"]
    for key in ("kernel", "target", "shape", "trials", "failed", "best"):
        assert key in first
    assert first["best"]["instructions"] > 0 and first["best"]["config"]["vector"] in ("c", "mve")

    best = json.loads(subprocess.run([str(exe), "best", "matmul_s8", "--target", "cortex-m55", "--shape",
                                      "m=16,n=16,k=32", "--json"], cwd=tmp_path, env=env, capture_output=True,
                                     text=True, check=True).stdout)
    assert best["best"] == first["best"]


@pytest.mark.smoke
def test_host_tune_reports_time_ns(tmp_path, host):
    code, out = cli("tune", "matmul_s8", "--target", "host", "--shape", "m=8,n=8,k=8", "--budget", "3",
                    "--db", str(tmp_path / "h.db"), "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["trials"] == 3 and data["best"]["time_ns"] > 0
    # Plain C, or the x86 vector paths this machine has (never Helium).
    assert data["best"]["config"]["vector"] in ["c"] + [p for p in ("avx2", "avx512") if host.has_vector(p)]


def test_initial_configuration_is_measured_first(tmp_path):
    config = "tile_m=2,tile_n=4,unroll_k=2,vector=c,layout=rowmajor,compiler=clang,opt=Os"
    db = tmp_path / "i.db"
    code, out = cli("tune", "matmul_s8", "--target", "host", "--shape", "m=4,n=4,k=4", "--budget", "1",
                    "--initial", config, "--db", str(db), "--json")
    assert code == 0, out
    from edgetune.tuner import TuningDatabase
    database = TuningDatabase(db)
    [workload] = database.workloads()
    [record] = database.records(workload)
    assert record.trial.config.as_dict() == dict(item.split("=") for item in config.split(",")) | {
        "tile_m": 2, "tile_n": 4, "unroll_k": 2}
    database.close()


def _break_target_loading(monkeypatch, exc: Exception):
    """A deliberately injected bug: loading a target raises what no input could cause."""
    import edgetune.cli.targets as cli_module

    def broken(name):
        raise exc

    monkeypatch.setattr(cli_module, "get_target", broken)


@pytest.mark.parametrize("exc", [ValueError("invalid literal for int() with base 10: 'x'"), KeyError("vector"),
                                 TypeError("unsupported operand")])
def test_a_bug_is_reported_as_a_bug_not_as_bad_input(monkeypatch, exc):
    monkeypatch.delenv("EDGETUNE_TRACEBACK", raising=False)
    _break_target_loading(monkeypatch, exc)
    result = CliRunner().invoke(main, ["targets", "show", "host"])
    assert result.exit_code == 70  # not 2, the status of bad input
    assert "edgetune: error:" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"edgetune: internal error: {type(exc).__name__}: ")
    assert "a bug in edgetune, not in your input" in line and "EDGETUNE_TRACEBACK=1" in line
    assert "Traceback" not in result.output


def test_a_bug_shows_its_traceback_on_request(monkeypatch):
    monkeypatch.setenv("EDGETUNE_TRACEBACK", "1")
    _break_target_loading(monkeypatch, ValueError("an internal inconsistency"))
    result = CliRunner().invoke(main, ["targets", "show", "host"])
    assert result.exit_code == 70
    assert "Traceback (most recent call last)" in result.stderr and "in broken" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("edgetune: internal error: ValueError: an internal inconsistency")


def test_a_user_error_is_still_one_line_and_status_2(monkeypatch):
    from edgetune.hal import TargetError

    _break_target_loading(monkeypatch, TargetError("host.toml: [core] clock_hz: expected an integer"))
    result = CliRunner().invoke(main, ["targets", "show", "host"])
    assert result.exit_code == 2
    assert result.stderr == "edgetune: error: host.toml: [core] clock_hz: expected an integer\n"


def test_every_user_facing_error_class_derives_from_the_root():
    """The classes the CLI used to list one by one (and the new ones): each is an EdgetuneError."""
    from edgetune.cli.errors import UserError
    from edgetune.cluster import ClusterError
    from edgetune.codegen import KernelError
    from edgetune.codegen.export import ExportError
    from edgetune.codegen.manifest import ManifestError
    from edgetune.npu import ModelBuildError, NpuOperatorError
    from edgetune.codegen.placement import PlacementError as BufferPlacementError
    from edgetune.errors import EdgetuneError
    from edgetune.hal import TargetError
    from edgetune.outputs import OutputError
    from edgetune.npu.layer_plan import NetworkError, PlanError
    from edgetune.report import ReportError
    from edgetune.sharing import SelectionError
    from edgetune.targets.toolchain import HarnessError, MeasureError, ToolMissing
    from edgetune.tuner import DatabaseError, SpaceError
    from edgetune.tuner.objective import ObjectiveError
    from edgetune.tuner.recorded import RecordedSpaceError
    from edgetune.tuner.sharing import LineError
    from edgetune.tuner.strategies import StrategyError

    for cls in (UserError, ClusterError, KernelError, ExportError, ManifestError, ModelBuildError, NpuOperatorError,
                BufferPlacementError, TargetError, OutputError, NetworkError, PlanError, ReportError,
                SelectionError, HarnessError, ToolMissing, DatabaseError, SpaceError, ObjectiveError,
                RecordedSpaceError, LineError, StrategyError):
        assert issubclass(cls, EdgetuneError), cls
    assert not issubclass(MeasureError, EdgetuneError)  # a fault in measured code is a failed trial, not input


def test_an_unknown_strategy_from_the_python_api_is_a_user_error():
    import numpy as np

    from edgetune.errors import EdgetuneError
    from edgetune.tuner import Space, make_strategy

    with pytest.raises(EdgetuneError, match="unknown strategy 'nope'"):
        make_strategy("nope", Space([]), np.random.default_rng(0))


@pytest.mark.parametrize("limits, culprit", [
    (dict(budget=-1), "--budget -1"), (dict(budget=0), "--budget 0"), (dict(jobs=0), "--jobs 0"),
    (dict(seed=-1), "--seed -1"), (dict(seed=2**64), "--seed"), (dict(patience=0), "--patience 0"),
    (dict(time_budget=float("nan")), "--time-budget nan"), (dict(time_budget=-5.0), "--time-budget -5.0"),
    (dict(budget="4"), "--budget '4'"),
])
def test_the_python_api_refuses_run_limits_naming_the_option(limits, culprit, tmp_path):
    import edgetune
    from edgetune.errors import EdgetuneError

    db = tmp_path / "api.db"
    with pytest.raises(EdgetuneError) as raised:
        edgetune.tune("matmul_s8", "m=2,n=2,k=2", target="host", db=db, **{"budget": 2, **limits})
    assert str(raised.value).startswith(culprit), raised.value
    with pytest.raises(EdgetuneError, match="--seed -1"):
        edgetune.verify(tmp_path, target="host", seed=-1)


def test_ctrl_c_in_a_model_run_exits_130_saying_what_is_kept(monkeypatch, tmp_path):
    """`tune` prints its own summary on Ctrl-C; every other command (here `model tune`) says
    it was interrupted and that the stored trials stay, with the shell's status for SIGINT."""
    from edgetune.cli import model_tune as model_tune_cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(model_tune_cli, "tune_model", interrupted)
    model = Path(__file__).parent / "data" / "models" / "fc_autoencoder_ad.tflite"
    result = CliRunner().invoke(main, ["model", "tune", str(model), "--target", "host", "--db", str(tmp_path / "m.db")])
    assert result.exit_code == 130, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["edgetune: interrupted (Ctrl-C); every trial already stored is kept: "
                     "run the same command again to resume"], result.stderr


def test_best_with_a_bound_no_trial_keeps_says_so_not_that_nothing_succeeded(tmp_path):
    db = stored_db(tmp_path)  # one successful host trial of matmul_s8 m=2,n=2,k=2, time_ns 10
    code, out = cli("best", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2", "--db", str(db),
                    "--constraint", "time_ns<=1")
    assert code == 1, out
    assert "(1 trials break them)" in out and "no successful trial within the constraints" in out, out
    assert "no successful trial yet" not in out


@pytest.mark.parametrize("command", [["db", "import", "{pipe}", "--db", "{db}"], ["replay", "{pipe}"]])
def test_a_pipe_given_as_an_input_file_is_refused_without_waiting_on_it(command, tmp_path):
    """Opening a FIFO for reading blocks until a writer comes: refused unopened, as target files are."""
    os.mkfifo(tmp_path / "trials.jsonl")
    args = [a.replace("{pipe}", str(tmp_path / "trials.jsonl")).replace("{db}", str(tmp_path / "t.db")) for a in command]
    result = subprocess.run([*EDGETUNE, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"edgetune: error: {tmp_path / 'trials.jsonl'}: not a regular file\n"
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("initial, culprit", [
    ({"tile_m": 99}, "'99' is not a value of parameter 'tile_m'"),
    ({"tile_q": 1}, "unknown parameter 'tile_q'"),
    ({"tile_m": "1;abort()"}, "is not NAME=VALUE"),
])
def test_the_python_api_checks_an_initial_mapping_as_it_checks_text(initial, culprit, tmp_path):
    """`initial=[{...}]` used to be dropped in silence when it was not a legal configuration."""
    import edgetune
    from edgetune.errors import EdgetuneError

    with pytest.raises(EdgetuneError, match=re.escape(culprit)):
        edgetune.tune("matmul_s8", "m=2,n=2,k=2", target="host", db=tmp_path / "api.db", initial=[initial], budget=1)
    assert not (tmp_path / "api.db").exists()
