"""Baked headers: the export compiles for its target without edgetune and computes what
numpy computes, reached through the shape dispatcher as a user's firmware would."""
from __future__ import annotations

import hashlib
import json
import subprocess

import numpy as np
import pytest

from edgetune.codegen.export import ExportError
from edgetune.export import export_best
from edgetune.session import TuneRequest, tune
from edgetune.targets import iobuf
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import MeasureError
from edgetune.tuner import Outcome, TuningDatabase

SHAPES = ["m=16,n=16,k=32", "m=5,n=13,k=7"]


def tuned_db(kernel, target, path, shapes, budget=6):
    db = TuningDatabase(path)
    for shape in shapes:
        tune(TuneRequest(kernel, target, kernel.parse_shape(shape), "random", budget, 2, 1), db)
    return db


def run_export(kernel, target, folder, shape_text, tmp_path, edge="random", seed=99):
    shape = kernel.parse_shape(shape_text)
    io = kernel.make_io(shape, np.random.default_rng(seed), edge=edge)  # inputs never seen while tuning
    expected = kernel.reference(shape, io)[0]
    # The firmware passes weights in the form the exported variant takes (packed or not).
    manifest = json.loads((folder / "manifest.json").read_text())
    for entry in manifest["kernels"]:
        if entry["kernel"] == kernel.name and entry["shape"] == shape:
            io = kernel.deployed_io(io, kernel.tuning_space(target, shape).make(entry["config"]))
    runner = runner_for(target)
    workdir = tmp_path / f"build-{shape_text.replace(',', '_').replace('=', '')}-{edge}"
    workdir.mkdir()
    build = runner.build_export(kernel, shape, io, folder, workdir)
    values, raw = runner.run(build, io)
    return values, iobuf.unpack_outputs(io, raw)[0], expected


@pytest.mark.qemu
def test_m55_export_builds_and_matches_numpy_in_qemu(matmul, m55, tmp_path):
    db = tuned_db(matmul, m55, tmp_path / "t.db", SHAPES)
    result = export_best(db, m55, tmp_path / "export", objective="instructions")
    assert len(result.entries) == 2
    for shape in SHAPES:
        for edge in ("random", "extreme"):
            values, got, want = run_export(matmul, m55, result.folder, shape, tmp_path, edge=edge)
            assert np.array_equal(got, want), (shape, edge)
            assert values["instructions"] > 0


@pytest.mark.qemu
def test_export_dispatcher_rejects_an_untuned_shape(matmul, m55, tmp_path):
    db = tuned_db(matmul, m55, tmp_path / "t.db", SHAPES[1:], budget=3)
    folder = export_best(db, m55, tmp_path / "export", objective="instructions").folder
    with pytest.raises(MeasureError) as info:
        run_export(matmul, m55, folder, "m=3,n=3,k=3", tmp_path)
    assert info.value.outcome is Outcome.RUNTIME_ERROR


@pytest.mark.qemu
def test_export_carries_provenance_and_checksums(matmul, m55, tmp_path):
    db = tuned_db(matmul, m55, tmp_path / "t.db", SHAPES[1:], budget=4)
    result = export_best(db, m55, tmp_path / "export", objective="instructions")
    entry = result.entries[0]
    best = db.best(db.workloads(m55.name)[0], "instructions")
    source = (result.folder / entry.source).read_text()
    assert f"instructions={best.trial.values['instructions']:g}" in source
    assert f"trial {best.id} of t.db" in source
    assert entry.config_text in source
    header = result.header.read_text()
    assert entry.function in header and "int et_matmul_s8(" in header
    manifest = json.loads(result.manifest.read_text())
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((result.folder / name).read_bytes()).hexdigest() == digest
    assert manifest["kernels"][0]["config"] == best.trial.config.as_dict()


def test_host_export_builds_natively_and_matches_numpy(matmul, host, tmp_path):
    db = tuned_db(matmul, host, tmp_path / "h.db", ["m=7,n=9,k=5"], budget=3)
    result = export_best(db, host, tmp_path / "export", objective="time_ns")
    values, got, want = run_export(matmul, host, result.folder, "m=7,n=9,k=5", tmp_path)
    assert np.array_equal(got, want)
    assert values["time_ns"] > 0


def test_exported_header_compiles_on_its_own(matmul, host, tmp_path):
    db = tuned_db(matmul, host, tmp_path / "h.db", ["m=3,n=4,k=5"], budget=2)
    result = export_best(db, host, tmp_path / "export", objective="time_ns")
    user = tmp_path / "user.c"
    user.write_text('#include "edgetune_kernels.h"\nint use(void) { return et_matmul_s8(3, 4, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0); }\n')
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I", str(result.folder), "-c", str(user),
                    "-o", str(tmp_path / "user.o")], check=True)


def test_export_of_an_empty_database_names_the_target(host, tmp_path):
    db = TuningDatabase(tmp_path / "empty.db")
    with pytest.raises(ExportError, match="host"):
        export_best(db, host, tmp_path / "export", objective="time_ns")
    assert not (tmp_path / "export").exists()
