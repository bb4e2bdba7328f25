"""Issue 29, goals 3 and 6: bench/model_ram.py's table (the fastest module's RAM and the one
under a bound of 0.7x TFLite Micro's, beside TFLite Micro's reference), and `model tune`'s
summary saying what its total is."""
from __future__ import annotations

import json
import shutil
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


def _printed_export(output: str) -> list[str]:
    import shlex
    line = next(line for line in output.splitlines() if line.startswith("  the module: "))
    words = shlex.split(line.removeprefix("  the module: "))
    assert words[:3] == ["edgetune", "model", "export"]
    return words[1:]


def test_tune_under_a_bound_prints_an_export_command_that_runs_as_printed(tmp_path, monkeypatch):
    """The command `model tune --max-ram` prints runs pasted: with the run's --target, its
    --db (only when not the default), an --out folder and the bound; then the module exists."""
    monkeypatch.chdir(tmp_path)
    model = write(tmp_path, "fc", fc_model(np.random.default_rng(12), (1, 24), 8))
    for db in ("m.db", "edgetune.db"):
        printed = CliRunner().invoke(main, ["model", "tune", str(model), "--target", "host", "--budget", "2", "--no-check",
                                            "--db", db, "--max-ram", "100000"])
        assert printed.exit_code == 0, printed.output
        args = _printed_export(printed.output)
        assert ("--db" in args) == (db == "m.db") and args[args.index("--target") + 1] == "host"
        exported = CliRunner().invoke(main, args)
        assert exported.exit_code == 0, exported.output
        out = tmp_path / args[args.index("--out") + 1]
        assert (out / "fc.h").is_file() and "RAM bound 100,000 bytes: planned" in exported.output
        shutil.rmtree(out)


def test_the_summary_counts_the_lean_trials_in_its_layers_best(tmp_path):
    """Trials measured beyond the budget (a --max-ram lean round) are counted in the table:
    the layer's trials, best and value are over all of them, so the table's total is the
    fastest variants' cost the RAM line quotes."""
    from edgetune.model.ram_fit import model_keys
    from edgetune.model.ram_tune import LeanRound, with_lean
    from edgetune.model.session import tune_model
    host = get_target("host")
    model = load_model(write(tmp_path, "fc", fc_model(np.random.default_rng(3), (1, 24), 8)))
    db = TuningDatabase(tmp_path / "m.db")
    summary = tune_model(model.layers, host, db, budget=1, baselines=False)
    layer = summary.layers[0]
    kernel, shape = KERNELS[layer.workload.kernel], layer.workload.shape_dict()
    more = tune(TuneRequest(kernel, host, shape, "random", 4, 1, 7), db)
    assert more.new_trials > 0
    key = model_keys(model)[0][0]
    after = with_lean(summary, db, (LeanRound(key, more.new_trials),))
    values = [r.trial.value(summary.objective) for r in db.proposals(layer.workload)]
    assert after.layers[0].trials == 1 + more.new_trials == len(values)
    assert after.layers[0].value == min(v for v in values if v is not None) <= layer.value
    assert after.spent == summary.spent and after.total == after.layers[0].value * after.layers[0].weight
