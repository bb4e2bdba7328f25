"""An export appears whole or not at all: killed (SIGKILL) at any point, the old folder is
left exactly as it was; a finished export holds exactly the files its manifest lists (stale
sources of an earlier export are gone) and `verify` checks both; a manifest without the
values measured at export fails verify; a stored count that the exported code does not
reproduce on an emulator is refused naming the workload."""
from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.export import export_best
from edgetune.session import workload_of
from edgetune.targets import get_target
from edgetune.tuner import Outcome, Trial, TuningDatabase

pytestmark = pytest.mark.qemu
SHAPES = ("m=4,n=8,k=8", "m=2,n=4,k=8")


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A database with one workload exported (the old export), then a second one tuned."""
    root = tmp_path_factory.mktemp("atomic")
    db = root / "t.db"
    code, out = cli("tune", "matmul_s8", "--target", "cortex-m55", "--shape", SHAPES[0], "--budget", 2, "--db", db)
    assert code == 0, out
    code, out = cli("export", "--target", "cortex-m55", "--out", root / "old", "--db", db)
    assert code == 0, out
    code, out = cli("tune", "matmul_s8", "--target", "cortex-m55", "--shape", SHAPES[1], "--budget", 2, "--db", db)
    assert code == 0, out
    return root


# A driver that runs `edgetune export` and SIGKILLs itself on the n-th call of a function:
# deterministic kill points while files are written, while kernels run, at the swap.
DRIVER = """
import os, signal, sys
import importlib
module_name, attr, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
module = importlib.import_module(module_name)
owner = module
for part in attr.split(".")[:-1]:
    owner = getattr(owner, part)
name = attr.split(".")[-1]
original = getattr(owner, name)
calls = [0]
def wrapped(*args, **kwargs):
    calls[0] += 1
    if calls[0] == nth:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(*args, **kwargs)
setattr(owner, name, wrapped)
from edgetune.cli import main
sys.exit(main(sys.argv[4:]))
"""

KILL_POINTS = [
    ("edgetune.publish", "_write", 1),  # the first file of the new export
    ("edgetune.publish", "_write", 4),  # part-way through the files
    ("edgetune.targets.qemu", "QemuRunner.run", 2),  # measuring the exported code
    ("edgetune.codegen.manifest", "write_manifest", 2),  # the manifest with the exported values
    ("edgetune.publish", "_exchange", 1),  # right before the new folder replaces the old
]


@pytest.mark.parametrize("module,attr,nth", KILL_POINTS)
@pytest.mark.one_case
def test_killed_export_leaves_the_old_folder_intact(tuned, tmp_path, module, attr, nth):
    folder = tmp_path / "export"
    shutil.copytree(tuned / "old", folder)
    before = snapshot(folder)
    proc = subprocess.run([sys.executable, "-c", DRIVER, module, attr, str(nth), "export", "--target", "cortex-m55",
                           "--out", str(folder), "--db", str(tuned / "t.db")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert snapshot(folder) == before  # never half-written
    code, out = cli("verify", folder, "--target", "cortex-m55")
    assert code == 0, out
    # The next export finishes, replaces the old one whole and clears the killed run's leftovers.
    code, out = cli("export", "--target", "cortex-m55", "--out", folder, "--db", tuned / "t.db")
    assert code == 0, out
    assert len(json.loads((folder / "manifest.json").read_text())["kernels"]) == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".export")] == []


def test_reexport_leaves_no_stale_file_and_verify_names_an_extra_one(tuned, tmp_path):
    folder = tmp_path / "export"
    shutil.copytree(tuned / "old", folder)
    (folder / "et_matmul_s8_m1_n1_k1.c").write_text("/* a source of an earlier export */\n")
    code, out = cli("export", "--target", "cortex-m55", "--out", folder, "--db", tuned / "t.db")
    assert code == 0, out
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(snapshot(folder)) == {*manifest["files"], "manifest.json"}
    code, out = cli("verify", folder, "--target", "cortex-m55")
    assert code == 0, out
    (folder / "et_stale.c").write_text("int stale;\n")
    code, out = cli("verify", folder, "--target", "cortex-m55")
    assert code == 2 and "et_stale.c" in out and len(out.strip().splitlines()) == 1


def test_export_refuses_to_replace_a_folder_that_is_not_an_export(tuned, tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "main.c").write_text("int main(void) { return 0; }\n")
    code, out = cli("export", "--target", "cortex-m55", "--out", folder, "--db", tuned / "t.db")
    assert code == 2 and "src" in out
    assert snapshot(folder) == {"main.c": b"int main(void) { return 0; }\n"}


def test_verify_fails_on_a_manifest_without_exported_values(tuned, tmp_path):
    # export_best alone writes no measured values (as an export killed before measuring would).
    folder = export_best(TuningDatabase(tuned / "t.db"), get_target("cortex-m55"), tmp_path / "unmeasured",
                         objective="instructions").folder
    code, out = cli("verify", folder, "--target", "cortex-m55")
    assert code == 2 and "no value measured at export" in out and len(out.strip().splitlines()) == 1


def test_forged_stored_count_is_refused_naming_the_workload(tuned, tmp_path):
    db_path = tmp_path / "forged.db"
    with sqlite3.connect(tuned / "t.db") as source, sqlite3.connect(db_path) as copy:
        source.backup(copy)  # the database is in WAL mode: copy it through SQLite
    kernel, m55 = get_kernel("matmul_s8"), get_target("cortex-m55")
    shape = kernel.parse_shape(SHAPES[1])
    db = TuningDatabase(db_path)
    workload = workload_of(kernel, m55, shape)
    real = db.best(workload, "instructions")
    # A plain-C configuration claimed to take 1 instruction (as a forged `db import` would).
    forged = next(c for c in kernel.tuning_space(m55, shape) if c["vector"] == "c" and c != real.trial.config)
    db.record(workload, Trial(forged, Outcome.OK, {**real.trial.values, "instructions": 1}), "import", 0)
    db.close()
    folder = tmp_path / "export"
    code, out = cli("export", "--target", "cortex-m55", "--out", folder, "--db", db_path)
    assert code == 2
    assert len(out.strip().splitlines()) == 1
    assert "matmul_s8 m=2,n=4,k=8" in out and "instructions=1" in out
    assert not folder.exists()
