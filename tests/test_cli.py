"""The command line: the names other checks rely on, JSON shapes, and one-line errors
with exit status 2 that name what is wrong."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli import main

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
    assert params["vector"]["values"] == ["c", "mve"]


@pytest.mark.parametrize("args, culprit", [
    (["tune", "nokernel", "--shape", "m=1,n=1,k=1"], "nokernel"),
    (["tune", "matmul_s8", "--target", "nosuch", "--shape", "m=1,n=1,k=1"], "nosuch"),
    (["tune", "matmul_s8", "--shape", "m=1,n=1"], "'k'"),
    (["tune", "matmul_s8", "--shape", "m=1,n=1,k=1,q=3"], "'q'"),
    (["tune", "matmul_s8", "--shape", "m=0,n=1,k=1"], "m=0"),
    (["tune", "matmul_s8", "--shape", "m=1;n=1"], "m=1;n=1"),
    (["tune", "matmul_s8", "--shape", "m=1,n=1,k=99999"], "k=99999"),
    (["tune", "matmul_s8", "--shape", "m=1,n=1,k=1", "--strategy", "psychic"], "psychic"),
    (["targets", "show", "nosuch"], "nosuch"),
    (["targets", "show", "/no/such/file.toml"], "/no/such/file.toml"),
])
def test_bad_input_is_one_line_naming_the_culprit(args, culprit, tmp_path):
    code, out = cli(*args, "--db", str(tmp_path / "e.db")) if args[0] == "tune" else cli(*args)
    assert code == 2
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and culprit in lines[0], out
    if args[0] == "tune":
        assert not (tmp_path / "e.db").exists()  # rejected before anything was written


def test_foreign_database_is_refused_and_left_alone(tmp_path):
    db = tmp_path / "notes.db"
    db.write_text("my notes, not a database\n")
    code, out = cli("tune", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2", "--db", str(db))
    assert code == 2 and str(db) in out
    assert db.read_text() == "my notes, not a database\n"


def test_best_without_database_is_an_error(tmp_path):
    code, out = cli("best", "matmul_s8", "--shape", "m=2,n=2,k=2", "--db", str(tmp_path / "none.db"))
    assert code == 2 and "none.db" in out


def test_export_into_a_file_path_is_an_error(tmp_path):
    db = tmp_path / "h.db"
    assert cli("tune", "matmul_s8", "--target", "host", "--shape", "m=2,n=3,k=4", "--budget", "2", "--db", str(db))[0] == 0
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    code, out = cli("export", "--target", "host", "--out", str(blocker), "--db", str(db))
    assert code == 2 and "blocker" in out


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


def test_host_tune_reports_time_ns(tmp_path, host):
    code, out = cli("tune", "matmul_s8", "--target", "host", "--shape", "m=8,n=8,k=8", "--budget", "3",
                    "--db", str(tmp_path / "h.db"), "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["trials"] == 3 and data["best"]["time_ns"] > 0
    # Plain C, or the x86 vector paths this machine has (never Helium).
    assert data["best"]["config"]["vector"] in ["c"] + [p for p in ("avx2", "avx512") if host.has_vector(p)]
