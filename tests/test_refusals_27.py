"""Issue 27, the inputs that ended in an internal error (exit 70), a hang, a wrong
acceptance or a file left behind: each is now one line naming the culprit, exit status 2,
with nothing stored and no file created. bench/robustness.py counts the same classes
through the installed command."""
from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import edgetune.publish as publish
from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor, read_graph
from edgetune.model import ModelError
from edgetune.session import workload_of
from edgetune.targets import get_target
from edgetune.tuner import DatabaseError, Outcome, Trial, TuningDatabase

EDGETUNE = str(Path(sys.executable).with_name("edgetune"))
SHAPE = {"m": 2, "n": 2, "k": 2}
CONFIG = {"tile_m": 1, "tile_n": 1, "unroll_k": 1, "vector": "c", "layout": "rowmajor", "compiler": "gcc", "opt": "O2"}
EXAMPLE_KERNEL = Path(__file__).parents[1] / "examples" / "kernels" / "vector_add"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(result, *fragments) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[-1].startswith("edgetune: error: "), result.output
    for fragment in fragments:
        assert fragment in lines[-1], lines[-1]
    return lines[-1]


def host_db(folder: Path) -> Path:
    """One honest host trial of matmul_s8 m=2,n=2,k=2, as a tuning run stores it."""
    path = folder / "t.db"
    kernel, target = get_kernel("matmul_s8"), get_target("host")
    db = TuningDatabase(path)
    db.record(workload_of(kernel, target, SHAPE), Trial(kernel.tuning_space(target, SHAPE).make(CONFIG), Outcome.OK,
                                                         {"time_ns": 10.0, "code_bytes": 400, "ram_bytes": 12}),
              "random", 0)
    db.close()
    return path


# --- export --------------------------------------------------------------------------------------
@pytest.mark.parametrize("objective", ["code_bytes", "ram_bytes"])
def test_export_by_a_figure_no_run_measures_exports_the_stored_one(tmp_path, objective):
    db = host_db(tmp_path)
    result = run("export", "--target", "host", "--db", db, "--out", tmp_path / "out", "--objective", objective)
    assert result.exit_code == 0, result.output
    kernel = json.loads((tmp_path / "out" / "manifest.json").read_text())["kernels"][0]
    assert kernel["exported_value"] == {"code_bytes": 400, "ram_bytes": 12}[objective]


def test_export_into_the_current_folder_is_refused(tmp_path, monkeypatch):
    db = host_db(tmp_path)
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path / "out")
    one_line(run("export", "--target", "host", "--db", db, "--out", "."), "--out .", "current folder")
    assert os.listdir(tmp_path / "out") == []


def test_an_export_folder_name_too_long_is_refused(tmp_path):
    db = host_db(tmp_path)
    one_line(run("export", "--target", "host", "--db", db, "--out", tmp_path / ("a" * 300)), "300 bytes")


def test_a_full_disk_while_exporting_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    db = host_db(tmp_path)

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(publish, "_write", full)
    one_line(run("export", "--target", "host", "--db", db, "--out", tmp_path / "out"), "No space left")
    assert not [p.name for p in tmp_path.iterdir() if not p.name.startswith("t.db")]


# --- deep nesting, huge numbers, damaged databases ------------------------------------------------
def test_json_and_toml_nested_too_deep_are_one_line(tmp_path):
    db = host_db(tmp_path)
    (tmp_path / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    one_line(run("db", "import", tmp_path / "deep.jsonl", "--db", db), "line 1", "nested too deep")
    (tmp_path / "deep.toml").write_text("a = " + "[" * 5000 + "\n")
    one_line(run("tune", "matmul_s8", "--target", tmp_path / "deep.toml", "--shape", "m=2,n=2,k=2", "--db", db),
             "deep.toml", "nested too deep")


def test_a_shape_of_thousands_of_digits_is_one_line(tmp_path):
    one_line(run("tune", "matmul_s8", "--target", "host", "--shape", f"m={'1' * 5001},n=2,k=2", "--db",
                 tmp_path / "t.db"), "m=", "5001 digits")


def test_a_database_damaged_part_way_is_said_to_be(tmp_path, monkeypatch):
    db = host_db(tmp_path)

    def malformed(*args, **kwargs):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(TuningDatabase, "export_jsonl", malformed)
    one_line(run("db", "export", "--db", db, "--out", "-"), "damaged", "malformed", "-wal")


# --- user kernels ----------------------------------------------------------------------------------
def _kernel_folder(tmp_path: Path, **changes) -> Path:
    folder = tmp_path / "k"
    folder.mkdir()
    text = (EXAMPLE_KERNEL / "kernel.py").read_text()
    for old, new in changes.items():
        text = text.replace(old, new, 1)
    (folder / "kernel.py").write_text(text)
    (folder / "vector_add.c").write_text((EXAMPLE_KERNEL / "vector_add.c").read_text())
    return folder


def test_a_kernel_source_that_is_a_fifo_is_refused_not_read(tmp_path):
    folder = _kernel_folder(tmp_path, **{'source="vector_add.c"': 'source="f.c"'})
    os.mkfifo(folder / "f.c")
    proc = subprocess.run([EDGETUNE, "kernels", "--kernel-file", str(folder)], capture_output=True, text=True,
                          timeout=120)  # before the fix: blocked for ever on the FIFO
    assert proc.returncode == 2 and "'f.c' is not a regular file" in proc.stderr, proc.stderr


@pytest.mark.parametrize("version", ['"../../x"', "10**100", "True", "-1"])
def test_a_kernel_version_that_is_no_small_whole_number_is_refused(tmp_path, version):
    folder = _kernel_folder(tmp_path, **{'name="vector_add",': f'name="vector_add", version={version},'})
    one_line(run("kernels", "--kernel-file", folder), "kernel vector_add: version", "not a whole number")


# --- model graphs ----------------------------------------------------------------------------------
Q = Quantization((0.05,), (0,))


def _fc_graph(tmp_path: Path, name: str, extra_ops=(), inputs=(0,), reads=0) -> Path:
    """x (1x6) -> FULLY_CONNECTED with constant weights -> y (1x3); `reads`: the tensor the
    layer reads, `extra_ops` more operators."""
    weights = constant(1, "w", np.ones((3, 6), dtype=np.int8), Quantization((0.01,), (0,), 0))
    tensors = [Tensor(0, "x", (1, 6), "int8", Q), weights, Tensor(2, "y", (1, 3), "int8", Q),
               Tensor(3, "z", (1, 6), "int8", Q)]
    ops = [Operator(0, "FULLY_CONNECTED", (reads, 1, -1), (2,), "FullyConnectedOptions", ()), *extra_ops]
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(build_model(tensors, ops, list(inputs), [2]))
    return path


@pytest.mark.parametrize("name, build, fragments", [
    ("two_writers", dict(extra_ops=(Operator(1, "FULLY_CONNECTED", (0, 1, -1), (2,), "FullyConnectedOptions", ()),)),
     ("tensor 2 (y) is written by operator 0", "and operator 1")),
    ("orphan", dict(reads=3), ("operator 0 (FULLY_CONNECTED) reads tensor 3 (z)", "no operator writes")),
    ("constant_input", dict(inputs=(0, 1)), ("model input tensor 1 (w) holds constant data",)),
])
def test_a_graph_whose_tensors_have_no_single_source_is_refused(tmp_path, name, build, fragments):
    path = _fc_graph(tmp_path, name, **build)
    with pytest.raises(ModelError) as info:
        read_graph(path)
    assert all(f in str(info.value) for f in fragments), str(info.value)
    db = host_db(tmp_path)
    one_line(run("model", "export", path, "--target", "host", "--db", db, "--out", tmp_path / "out"), *fragments)
    assert not (tmp_path / "out").exists()


# --- db import: wrongly accepted lines, and no file left by a failed import ------------------------
def _m55_line(**changes) -> str:
    kernel, target = get_kernel("matmul_s8"), get_target("cortex-m55")
    w = workload_of(kernel, target, SHAPE)
    config = kernel.tuning_space(target, SHAPE).config_at(int(kernel.tuning_space(target, SHAPE).legal_indices()[0]))
    data = {"format": "edgetune-trial", "schema_version": 3,
            "workload": {"kernel": w.kernel, "kernel_version": w.kernel_version, "target": w.target,
                         "shape": [list(p) for p in w.shape], "toolchain": w.toolchain},
            "config": [list(item) for item in config.items], "outcome": "ok",
            "values": {"instructions": 119, "cycles": 144.0, "code_bytes": 1068, "ram_bytes": 20,
                       "mix": {"alu": 33, "load": 22}, "accesses": {"dtcm": 33}},
            "error": "", "info": {}, "strategy": "random", "seed": 0, "created": "2026-11-01T00:00:00Z",
            "goal": {"objective": "instructions", "bounds": []}}
    for path, value in changes.items():
        node, keys = data, path.split("__")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return json.dumps(data)


@pytest.mark.parametrize("changes, fragment", [
    (dict(workload__toolchain=""), "workload.toolchain"),
    (dict(values__time_ns=5.0), "values.time_ns"),
    (dict(values__speed=5), "values.speed"),
    (dict(values__mix={"warp": 1}), "values.mix.warp"),
    (dict(values__instructions=2 ** 64), "values.instructions"),
    (dict(created="2026-13-45T99:00:00Z"), "created"),
    (dict(goal__objective="rm"), "goal.objective"),
])
def test_db_import_refuses_a_line_no_measurement_could_write(tmp_path, changes, fragment):
    db = host_db(tmp_path)
    before = db.read_bytes()
    (tmp_path / "in.jsonl").write_text(_m55_line() + "\n" + _m55_line(**changes) + "\n")
    one_line(run("db", "import", tmp_path / "in.jsonl", "--db", db), "line 2", fragment)
    assert db.read_bytes() == before
    (tmp_path / "good.jsonl").write_text(_m55_line() + "\n")  # the unchanged line is fine
    assert run("db", "import", tmp_path / "good.jsonl", "--db", db).exit_code == 0


@pytest.mark.parametrize("where", ["create", "store"])
def test_a_failed_import_into_a_new_database_leaves_no_file(tmp_path, monkeypatch, where):
    (tmp_path / "in.jsonl").write_text(_m55_line() + "\n")
    name = "store_imported" if where == "store" else "_create"

    def full(self, *args, **kwargs):
        if where == "create":
            self._conn.execute("PRAGMA journal_mode=WAL")  # as far as SQLite got: a file exists
        raise DatabaseError(f"{self.path}: cannot write (database or disk is full)")

    monkeypatch.setattr(TuningDatabase, name, full)
    one_line(run("db", "import", tmp_path / "in.jsonl", "--db", tmp_path / "new.db"), "disk is full")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]
