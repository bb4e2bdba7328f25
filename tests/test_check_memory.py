"""A finished `model tune` run again does not redo the TFLite Micro check (issue 31 item 11):
a variant found bit-exact is remembered by content, said so, and checked again when
anything it depends on changes or --recheck asks."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import edgetune.model_check as model_check
from edgetune.cli import main

from model_files import fc_model, write


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """(model tune with extra options -> its JSON, how many layers were run since the last call)."""
    ran = []
    real = model_check._run_layer

    def counting(*args, **kwargs):
        ran.append(args[0].index)
        return real(*args, **kwargs)

    monkeypatch.setattr(model_check, "_run_layer", counting)
    model = write(tmp_path, "fc", fc_model(np.random.default_rng(11), (1, 24), 8))

    def run(*extra: str):
        ran.clear()
        result = CliRunner().invoke(main, ["model", "tune", str(model), "--target", "host", "--budget", "3",
                                           "--db", str(tmp_path / "m.db"), "--json", *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.output), len(ran)

    return run


def test_a_finished_model_tune_run_again_remembers_its_check(runs):
    first, ran = runs()
    assert ran == 1 and [c["remembered"] for c in first["checks"]] == [False]
    again, ran = runs()
    assert ran == 0 and [c["remembered"] for c in again["checks"]] == [True]
    assert again["checks"][0]["ok"] and again["checks"][0]["config"] == first["checks"][0]["config"]


def test_another_seed_or_recheck_checks_again(runs):
    runs()
    _, ran = runs("--seed", "7")  # other inputs: another key
    assert ran == 1
    _, ran = runs("--recheck")
    assert ran == 1


def test_the_remembered_verdict_is_said_in_the_text_output(tmp_path):
    model = write(tmp_path, "fc", fc_model(np.random.default_rng(12), (1, 24), 8))
    args = ["model", "tune", str(model), "--target", "host", "--budget", "3", "--db", str(tmp_path / "m.db")]
    assert CliRunner().invoke(main, args).exit_code == 0
    output = CliRunner().invoke(main, args).output
    assert "1 remembered from an earlier check of the same model, variants, target and toolchain" in output
    assert "bit-exact with TFLite Micro on 2 inputs (remembered)" in output
