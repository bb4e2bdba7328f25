"""`edgetune model tune MODEL.tflite`: the four MLPerf Tiny models tuned on the M55 with small
budgets, every tuned layer's best variant then bit-exact with TFLite Micro on the model's own
weights (app/model/check.py); a layer that differs is named and fails the run; bad input is
one line, exit 2, and the database is left as it was."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import edgetune.model.check as model_check
from edgetune.cli import main
from edgetune.model import load_model

MODELS = Path(__file__).parent / "data" / "models"
MLPERF_TINY = ("ds_cnn_kws", "mobilenet_v1_025_vww", "resnet8_cifar10", "fc_autoencoder_ad")


def _tune(*args):
    return CliRunner().invoke(main, ["model", "tune", *map(str, args)])


def _trials(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0]


@pytest.mark.qemu
@pytest.mark.slow
@pytest.mark.parametrize("name", MLPERF_TINY)
def test_an_mlperf_tiny_model_tunes_on_the_m55_and_every_tuned_layer_is_tflite_micro(name, tmp_path):
    path = MODELS / f"{name}.tflite"
    model = load_model(path)
    distinct = len(model.workloads())
    db = tmp_path / "t.db"
    result = _tune(path, "--target", "cortex-m55", "--budget", 2 * distinct, "--db", db, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["spent"] == 2 * distinct == _trials(db)
    assert {tuple(sorted(w["layers"])) for w in data["workloads"]} == {tuple(w.layers) for w in model.workloads()}
    assert all(w["best"] is not None and w["trials"] >= 1 for w in data["workloads"])
    # Every tuned operator of the model was checked against TFLite Micro, and matched.
    assert [c["layer"] for c in data["checks"]] == [layer.index for layer in model.tuned]
    assert all(c["ok"] and c["inputs"] == 2 for c in data["checks"]), data["checks"]
    assert data["total"] == sum(len(w["layers"]) * w["best"] for w in data["workloads"])


@pytest.mark.qemu
def test_a_layer_that_differs_from_tflite_micro_is_named_and_the_run_fails(tmp_path, monkeypatch):
    real = model_check.layer_case

    def off_by_one_on_layer_1(layer, rng, edge="random"):
        io, want = real(layer, rng, edge)
        if layer.index == 1:
            want = want.copy()
            want.flat[3] = np.int8(want.flat[3] ^ 1)
        return io, want

    monkeypatch.setattr(model_check, "layer_case", off_by_one_on_layer_1)
    result = _tune(MODELS / "ds_cnn_kws.tflite", "--target", "cortex-m55", "--budget", 4, "--db", tmp_path / "t.db",
                    "--recheck")  # a verdict remembered by another test would not run the doctored check
    assert result.exit_code == 1, result.output
    line = next(l for l in result.output.splitlines() if l.strip().startswith("layer   1 "))
    assert "DIFFERS" in line and "1 of 8000 outputs differ from TFLite Micro; first at" in line
    assert "layer   3 DEPTHWISE_CONV_2D" in result.output  # the same workload's other layers are checked too
    assert result.output.count("bit-exact with TFLite Micro") == 9


def test_a_budget_smaller_than_the_distinct_workloads_is_refused_before_anything_runs(tmp_path):
    db = tmp_path / "t.db"
    result = _tune(MODELS / "ds_cnn_kws.tflite", "--budget", 3, "--db", db)
    assert result.exit_code == 2
    assert "--budget 3" in result.output and "4 distinct workloads" in result.output
    assert "without --budget, 512" in result.output  # DS-CNN's default: the floor, not 4 x 32
    assert not db.exists()


def test_the_default_budget_is_32_trials_per_workload_and_never_under_512():
    """A model of few workloads gets the time a larger one's tune takes (docs/models-tuning.md):
    DS-CNN's 4 workloads 512 trials, MobileNet-VWW's 20 their 640."""
    from edgetune.cli.options import default_model_budget

    assert [default_model_budget(n) for n in (1, 4, 9, 16, 17, 20)] == [512, 512, 512, 512, 544, 640]


@pytest.mark.parametrize("content, message", [
    (b"", "too short"),
    (b"\x00" * 64, "not a TFLite model"),
])
def test_a_file_that_is_no_model_is_one_line_and_the_database_is_untouched(tmp_path, content, message):
    db = tmp_path / "t.db"
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(content)
    result = _tune(bad, "--db", db)
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and str(bad) in result.output
    assert not db.exists()


def test_an_unknown_target_or_scheduler_is_refused(tmp_path):
    assert _tune(MODELS / "ds_cnn_kws.tflite", "--target", "no-such-board", "--db", tmp_path / "t.db").exit_code == 2
    assert _tune(MODELS / "ds_cnn_kws.tflite", "--scheduler", "fastest", "--db", tmp_path / "t.db").exit_code == 2


def test_the_summary_names_a_layer_still_slower_than_its_plain_loop(capsys):
    from edgetune.cli.model_tune import print_model_summary
    from edgetune.model.session import LayerResult, ModelSummary
    from edgetune.tuner import Workload

    def result(layers, value, plain):
        workload = Workload("conv2d_s8", 4, "cortex-m55", (("h", len(layers)),))
        return LayerResult(workload, layers, 100, 16, None, value, plain)

    summary = ModelSummary("cortex-m55", "instructions", "gradient", 32, 32,
                           (result((4,), 8758.0, 5767.0), result((1, 2), 3000.0, 91177.0)))
    print_model_summary(summary)
    lines = [line for line in capsys.readouterr().out.splitlines() if "slower than the plain C loop" in line]
    assert lines == ["  layers 4: the best of 16 trials is slower than the plain C loop (8,758 against 5,767)"]


def test_the_summary_says_why_a_layer_has_no_plain_loop_and_counts_in_the_singular(capsys):
    """A 16x8 model's table showed '-' for every plain C loop and ratio, unexplained, over
    "1 distinct workloads": the 16-bit convolutions have no plain loop nest to measure."""
    from edgetune.cli.model_tune import print_model_summary
    from edgetune.model.session import LayerResult, ModelSummary
    from edgetune.tuner import Workload

    def result(kernel, plain):
        return LayerResult(Workload(kernel, 1, "cortex-m55", (("h", 4),)), (0,), 100, 1, None, 500.0, plain)

    print_model_summary(ModelSummary("cortex-m55", "instructions", "gradient", 1, 1, (result("dwconv2d_s16", None),)))
    printed = capsys.readouterr().out
    assert "over 1 distinct workload (" in printed
    assert "  plain C '-': dwconv2d_s16 has no plain C loop nest to measure against" in printed.splitlines()
    print_model_summary(ModelSummary("cortex-m55", "instructions", "gradient", 2, 2,
                                     (result("conv2d_s8", None), result("conv2d_s8", 900.0))))
    printed = capsys.readouterr().out
    assert "over 2 distinct workloads (" in printed
    assert "  plain C '-': its plain loop was not measured (the target has no gcc, or it failed)" \
        in printed.splitlines()
    print_model_summary(ModelSummary("cortex-m55", "instructions", "gradient", 1, 1, (result("conv2d_s8", 900.0),)))
    assert "plain C '-'" not in capsys.readouterr().out


def test_the_checked_layers_verdicts_line_up_whatever_the_kernels_name():
    from edgetune.cli.model_tune import check_lines
    from edgetune.model.check import LayerCheck

    lines = check_lines([LayerCheck(0, "CONV_2D", "conv2d_s8", "c", 2),
                         LayerCheck(1, "CUSTOM", "leaky_relu_s8", "c", 2, oracle="leaky_relu_s8's reference"),
                         LayerCheck(2, "UNIDIRECTIONAL_SEQUENCE_LSTM", "my_lstm_kernel", "c", 2)])
    assert len({line.index("bit-exact") for line in lines}) == 1, lines
    assert len({line.index(kernel) for line, kernel in zip(lines, ("conv2d_s8", "leaky_relu_s8", "my_lstm"))}) == 1
