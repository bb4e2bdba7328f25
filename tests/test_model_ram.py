"""Issue 29, goals 3 and 6: bench/model_ram.py's table (the fastest module's RAM and the one
under a bound of 0.7x TFLite Micro's, beside TFLite Micro's reference), and `model tune`'s
summary saying what its total is."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from bench_scripts import load_bench
from edgetune.cli import main
from edgetune.codegen import KERNELS
from edgetune.model import load_model
from edgetune.model.export import export_model
from edgetune.session import TuneRequest, tune
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase
from model_files import fc_model, write

DS_CNN = Path(__file__).parent / "data" / "models" / "ds_cnn_kws.tflite"


def test_the_ram_row_gives_both_plans_their_ratio_to_tflite_micro_and_the_goal():
    bench = load_bench("model_ram")
    assert set(bench.TFLM_M55) == set(bench.MODEL_NAMES)
    fastest = dict(instructions=1_000, ram=40_000, flash=50_000)
    m = dict(source="x.db", bound=20_092, fastest=fastest, bounded=dict(instructions=1_040, ram=20_000, flash=50_000))
    row = bench.row("ds_cnn_kws", m)
    assert "| 1,000 | 40,000 | 1.39 | 20,092 | 1,040 | +4.0% | 20,000 | 0.70 | yes | 1,789,930 | 28,704 |" in row
    assert "| 0.71 | no |" in bench.row("ds_cnn_kws", dict(m, bounded=dict(m["bounded"], ram=20_400)))
    refused = bench.row("ds_cnn_kws", dict(m, bounded=dict(refused="--max-ram 20092: needs at least 21,000 bytes")))
    assert "| refused | - | - | - | no |" in refused and refused.endswith("ds_cnn_kws: --max-ram 20092: needs at least 21,000 bytes")


def test_model_tunes_summary_says_its_total_is_the_layers_measured_alone(tmp_path):
    model = write(tmp_path, "fc", fc_model(np.random.default_rng(12), (1, 24), 8))
    args = ["model", "tune", str(model), "--target", "host", "--budget", "3", "--no-check", "--db", str(tmp_path / "m.db")]
    output = CliRunner().invoke(main, args).output
    assert "sum of the tuned layers measured alone (" in output
    assert "not the module's figure: `edgetune model export` then `model verify` measure the module whole" in output
    assert "model instructions (tuned layers" not in output
    data = json.loads(CliRunner().invoke(main, [*args, "--json"]).output)
    assert data["total_is"].startswith("the sum of the tuned layers measured alone")
