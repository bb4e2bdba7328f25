"""Issue 29, goals 3 and 6: bench/model_ram.py's table (the module's RAM beside TFLite Micro's
reference and beside the layout with the scratch outside the arena, from the same export),
and `model tune`'s summary saying what its total is."""
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


def test_the_ram_row_gives_the_ratio_to_tflite_micro_and_the_goal():
    bench = load_bench("model_ram")
    assert set(bench.TFLM_M55) == set(bench.MODEL_NAMES)
    m = dict(source="x.db", instructions=1_000, ram=20_000, flash=50_000, arena=16_000, beside=52_000)
    row = bench.row("ds_cnn_kws", m)
    assert "| 20,000 | 52,000 | 28,704 | 0.70 | yes |" in row and "| 50,000 | 147,984 | 0.34 |" in row
    assert "| no |" in bench.row("ds_cnn_kws", dict(m, ram=20_200))


def test_scratch_beside_is_the_tensors_arena_plus_the_largest_scratch(tmp_path):
    """The reference column: what the same variants took with their scratch in one static
    area beside a tensors-only arena; here with im2col convolutions on the host."""
    bench = load_bench("model_ram")
    host = get_target("host")
    model = load_model(DS_CNN)
    db = TuningDatabase(tmp_path / "t.db")
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        shape = kernel.parse_shape(dict(w.shape))
        wanted = {"algo": "im2col"} if w.kernel == "conv2d_s8" else {"taps": "padded3x3"}
        config = next(c for c in kernel.tuning_space(host, shape) if all(c.as_dict()[k] == v for k, v in wanted.items()))
        tune(TuneRequest(kernel, host, shape, "random", 1, 1, 0, initial=(config.as_dict(),)), db)
    rendered = export_model(DS_CNN, host, db, tmp_path / "m").rendered
    beside = bench.scratch_beside(model, rendered, 502)
    assert beside == 16_000 + rendered.arena_scratch.nbytes + 502  # DS-CNN's tensors: two 8,000-byte activations
    assert rendered.plan.arena_bytes + 502 < beside  # the scratch planned into the arena takes less


def test_model_tunes_summary_says_its_total_is_the_layers_measured_alone(tmp_path):
    model = write(tmp_path, "fc", fc_model(np.random.default_rng(12), (1, 24), 8))
    args = ["model", "tune", str(model), "--target", "host", "--budget", "3", "--no-check", "--db", str(tmp_path / "m.db")]
    output = CliRunner().invoke(main, args).output
    assert "sum of the tuned layers measured alone (" in output
    assert "not the module's figure: `edgetune model export` then `model verify` measure the module whole" in output
    assert "model instructions (tuned layers" not in output
    data = json.loads(CliRunner().invoke(main, [*args, "--json"]).output)
    assert data["total_is"].startswith("the sum of the tuned layers measured alone")
