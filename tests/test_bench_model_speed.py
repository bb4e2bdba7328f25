"""Issue 29, goals 1-3: bench/model_speed.py's pieces. Its per-layer table (goal 2: the variant
the export ships never slower than the layer's default configuration or plain loop, both
measured in the same tune), its rows against TFLite Micro's and CMSIS-NN's reference
constants, and that those constants name the layers the issue names."""
from __future__ import annotations

import numpy as np
import pytest

from bench_scripts import load_bench
from edgetune.codegen.kernels.naive_path import NAIVE
from edgetune.model import load_model
from edgetune.model.session import compact_shape, default_seed, distinct_workloads, tune_model
from edgetune.tuner import TuningDatabase
from model_files import fc_model, write


@pytest.fixture(scope="module")
def bench():
    return load_bench("model_speed")


def test_a_layer_is_flagged_where_it_ships_slower_than_a_baseline(bench):
    layer = bench.LayerFigures((4,), "conv2d_s8 h=1,w=1,cin=128,cout=8,kh=1,kw=1", 4, 8_758, 8_800, 5_767, 5_770)
    assert layer.behind() == ("plain loop", "plain C")
    assert bench.LayerFigures((4,), "w", 4, 5_767, 8_800, 5_767, None).behind() == ()  # a tie is not behind
    assert bench.LayerFigures((4,), "w", 4, 900, 1_000, None, 899).behind() == ("plain C",)
    # Nothing shipped measured while a baseline was: behind it.
    assert bench.LayerFigures((4,), "w", 0, None, 1_000, None, None).behind() == ("default",)
    row = bench.layer_row("fc", layer)
    assert row == ("| fc | 4 | conv2d_s8 h=1,w=1,cin=128,cout=8,kh=1,kw=1 | 4 | 8,758 | 8,800 | 1.00 | 5,767 | 1.52 "
                   "| 5,770 | plain loop, plain C |")
    assert bench.layer_row("fc", bench.LayerFigures((0, 2), "w", 3, 10, None, 20, None)).endswith(
        "| 3 | 10 | - | - | 20 | 0.50 | - | nothing |")


@pytest.mark.qemu
def test_the_layer_figures_are_the_exported_trial_beside_the_tunes_own_baselines(bench, tmp_path, m55):
    """On a tiny tune (exact counts on the M55): the shipped figure is the fastest stored
    trial, the default and plain-loop figures are the trials of the two configurations every
    layer's first round measures, and the fastest is behind neither."""
    model = load_model(write(tmp_path, "fc", fc_model(np.random.default_rng(12), (1, 24), 8)))
    db = TuningDatabase(tmp_path / "m.db")
    # Nothing stored yet: the export would ship the default configuration, measured nowhere.
    assert bench.layer_figures(model, m55, db) == (bench.LayerFigures((0,), figures_name(model, m55), 0, None, None,
                                                                      None),)
    summary = tune_model(model.layers, m55, db, budget=4, baselines=False)
    [figures] = bench.layer_figures(model, m55, db, summary)
    [lw] = distinct_workloads(model.layers, m55)
    values = {r.trial.config.key(): r.trial.value("instructions") for r in db.proposals(lw.workload)}
    default = lw.kernel.tuning_space(m55, lw.shape).make(default_seed(lw, m55, ())).key()
    naive = [v for key, v in values.items() if f"vector={NAIVE}" in key]
    assert figures.trials == len(values) == 4 and figures.layers == (0,)
    assert figures.default == values[default] and [figures.naive] == naive
    assert figures.shipped == min(v for v in values.values() if v is not None) < figures.default
    assert figures.plain is None and figures.behind() == ()


def figures_name(model, target) -> str:
    [lw] = distinct_workloads(model.layers, target)
    return f"{lw.workload.kernel} {compact_shape(lw.shape)}"


def test_the_model_row_gives_each_goal_its_ratio_and_verdict(bench):
    row = dict(name="ds_cnn_kws", budget=512, cpu=100.0, own=12.0, wall=150.0, alone=880_000.0,
               tuned=bench.Module(894_965, 20_000, 60_000), plain=bench.Module(17_000_000, 48_000, 50_000),
               layers=(bench.LayerFigures((0,), "w", 9, 10, 11, 12), bench.LayerFigures((1,), "w", 9, 13, 11, 12)))
    line = bench.model_row(row)
    # 894,965 / 1,789,930 = 0.5 exactly: goal 1 holds; 20,000 / 28,704 = 0.70 (0.6968): goal 3 holds.
    assert line.startswith("| ds_cnn_kws (512) | 894,965 | 1,789,930 | 0.50 | yes | 20,000 | 28,704 | 0.70 | yes | 60,000 "
                           "| 147,984 | 0.41 | 17,000,000 | 48,000 | 50,000 | 880,000 | 1 of 2 | 100 | 12 | 150 |")
    slower = bench.model_row(dict(row, tuned=bench.Module(894_966, 20_100, 60_000)))
    assert "| 0.50 | no | 20,100 | 28,704 | 0.70 | no |" in slower


def test_the_bounded_row_judges_the_module_under_the_ram_bound_on_both_goals(bench):
    row = dict(name="resnet8_cifar10", bound=39_468, lean=3, tuned=bench.Module(2_358_450, 52_910, 124_686),
               bounded=dict(instructions=2_370_613, ram=37_482, flash=128_314, how="--max-ram"))
    # 2,370,613 / 4,814,439 = 0.49 and 37,482 / 56,384 = 0.66: both hold; 0.5% slower than the fastest.
    assert bench.bounded_row(row) == ("| resnet8_cifar10 | 39,468 | 3 | --max-ram | 2,370,613 | 0.49 | yes | 37,482 | 0.66 "
                                      "| yes | 128,314 | 0.60 | +0.5% |")
    over = bench.bounded_row(dict(row, bounded=dict(instructions=2_500_000, ram=40_000, flash=128_314)))
    assert "| 0.52 | no | 40,000 | 0.71 | no |" in over
    refused = bench.bounded_row(dict(row, bounded=dict(refused="no variant fits")))
    assert "refused: no variant fits" in refused


def test_cmsis_nn_rows_compare_the_layer_serving_the_named_operator(bench):
    layers = (bench.LayerFigures((0,), "w0", 9, 14_294, 1, 1), bench.LayerFigures((4,), "w2", 9, 1_100, 1, 1))
    rows = bench.cmsis_rows("fc_autoencoder_ad", layers)
    assert rows == ["| fc_autoencoder_ad | 4: fully connected 128 -> 8 | 1,100 | 1,077 | 1.02 | no |",
                    "| fc_autoencoder_ad | 0: fully connected 640 -> 128 | 14,294 | 40,942 | 0.35 | yes |"]
    assert bench.cmsis_rows("resnet8_cifar10", layers) == []


MODELS = load_bench("model_ram").MODELS


@pytest.mark.parametrize("name, index, kernel, shape", [
    ("ds_cnn_kws", 0, "conv2d_s8", dict(cin=1, kh=10, kw=4, stride_h=2, stride_w=2)),
    ("fc_autoencoder_ad", 4, "conv2d_s8", dict(cin=128, cout=8)),
    ("fc_autoencoder_ad", 0, "conv2d_s8", dict(cin=640, cout=128)),
    ("mobilenet_v1_025_vww", 23, "dwconv2d_s8", dict(stride_h=2, stride_w=2, c=128)),
])
def test_the_cmsis_nn_constants_name_the_layers_issue_29_names(bench, name, index, kernel, shape):
    assert (name, index) in bench.CMSIS_NN_M55
    model = load_model(MODELS / f"{name}.tflite")
    layer = next(layer for layer in model.layers if layer.index == index)
    assert layer.kernel == kernel and shape.items() <= dict(layer.shape).items()
    if kernel == "dwconv2d_s8":  # the last stride-2 depthwise layer
        strided = [l.index for l in model.layers if l.kernel == kernel and dict(l.shape)["stride_h"] == 2]
        assert strided[-1] == index
