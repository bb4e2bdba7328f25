"""`--compiler NAME` (issue 31 item 9): a run measures only variants its compilers build,
and what it reports best, and checks, is one of them; a firmware built with one toolchain
then gets no object measured with the other."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.session import workload_of
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

from model_files import fc_model, write

SHAPE = "m=4,n=8,k=8"


def _compilers(db: Path, shape: str = SHAPE) -> list[str]:
    kernel, target = get_kernel("matmul_s8"), get_target("host")
    database = TuningDatabase(db)
    try:
        return [t.config["compiler"] for t in database.trials(workload_of(kernel, target, kernel.parse_shape(shape)))]
    finally:
        database.close()


def _tune(db: Path, *extra: str):
    return CliRunner().invoke(main, ["tune", "matmul_s8", "--shape", SHAPE, "--target", "host", "--db", str(db),
                                     "--seed", "3", *extra])


def test_tune_with_a_compiler_measures_and_reports_only_its_variants(tmp_path):
    db = tmp_path / "t.db"
    free = _tune(db, "--budget", "8")
    assert free.exit_code == 0 and "gcc" in _compilers(db), free.output  # both compilers stored
    chosen = _tune(db, "--budget", "14", "--compiler", "clang")
    assert chosen.exit_code == 0, chosen.output
    stored = _compilers(db)
    assert stored[8:] and set(stored[8:]) == {"clang"}, stored  # the run measured clang only
    best_line = next(line for line in chosen.output.splitlines() if "compiler=" in line)
    assert "compiler=clang" in best_line, chosen.output  # its best is a clang variant, whatever gcc stored


def test_a_compiler_the_target_lacks_is_refused_naming_its_compilers(tmp_path):
    result = _tune(tmp_path / "t.db", "--budget", "2", "--compiler", "icc")
    assert result.exit_code == 2
    assert "--compiler icc: host has no compiler of that name (its compilers: gcc, clang)" in result.output
    assert not (tmp_path / "t.db").exists() or _compilers(tmp_path / "t.db") == []


def test_model_tune_with_a_compiler_measures_counts_and_checks_only_its_variants(tmp_path):
    model = write(tmp_path, "fc", fc_model(np.random.default_rng(5), (1, 16), 8))
    db = tmp_path / "m.db"

    def model_tune(budget: int, *extra: str):
        result = CliRunner().invoke(main, ["model", "tune", str(model), "--target", "host", "--budget", str(budget),
                                           "--db", str(db), "--seed", "1", "--json", *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    model_tune(6)  # both compilers stored
    before = _stored(db)
    assert "clang" in before, before
    summary = model_tune(12, "--compiler", "gcc")
    assert set(_stored(db)[len(before):]) == {"gcc"}
    assert all(w["config"]["compiler"] == "gcc" for w in summary["workloads"])  # counted: gcc's only
    assert summary["checks"] and all(c["ok"] and "compiler=gcc" in c["config"] for c in summary["checks"])


def _stored(db: Path) -> list[str]:
    database = TuningDatabase(db)
    try:
        return [t.config["compiler"] for w in database.workloads() for t in database.trials(w)]
    finally:
        database.close()


def test_model_export_with_a_compiler_takes_only_its_variants(tmp_path):
    model = write(tmp_path, "fc", fc_model(np.random.default_rng(6), (1, 16), 8))
    db = tmp_path / "m.db"
    tuned = CliRunner().invoke(main, ["model", "tune", str(model), "--target", "host", "--budget", "8", "--db",
                                      str(db), "--no-check", "--seed", "2"])
    assert tuned.exit_code == 0 and {"gcc", "clang"} <= set(_stored(db)), tuned.output
    for compiler in ("gcc", "clang"):
        out = tmp_path / f"module-{compiler}"
        result = CliRunner().invoke(main, ["model", "export", str(model), "--target", "host", "--db", str(db),
                                           "--out", str(out), "--compiler", compiler, "--json"])
        assert result.exit_code == 0, result.output
        kernels = json.loads((out / "manifest.json").read_text())["kernels"]
        assert kernels and all(k["config"]["compiler"] == compiler for k in kernels), kernels
