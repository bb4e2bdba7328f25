"""Issue 29, goal 2: a layer whose plain loop nest is faster than everything its trials found
ships that loop (its `naive` path, codegen/kernels/naive_path.py), and the module stays
bit-exact with TFLite Micro."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgetune.codegen.manifest import read_manifest
from edgetune.model import load_model
from edgetune.model.export import export_model
from edgetune.model.session import tune_model
from edgetune.model.verify import verify_model
from edgetune.tuner import TuningDatabase

DS_CNN = Path(__file__).parent / "data" / "models" / "ds_cnn_kws.tflite"


@pytest.mark.slow
@pytest.mark.qemu
def test_the_plain_loop_ships_where_it_is_fastest_and_runs_bit_exact(m55, tmp_path):
    # Two trials per layer: the kernel's default configuration (plain C direct loop, -O2) and
    # the plain loop nest (-O3). On DS-CNN's first convolution (cin=1, 10x4, stride 2) the
    # loop nest wins by far: it is the variant exported.
    model = load_model(DS_CNN)
    db = TuningDatabase(tmp_path / "t.db")
    summary = tune_model(model.layers, m55, db, budget=8, round_trials=2, seed=0)
    first = next(r for r in summary.layers if 0 in r.layers)
    default, naive = (r.trial for r in db.proposals(first.workload)[:2])
    assert naive.config["vector"] == "naive" and naive.values["instructions"] < default.values["instructions"]
    assert first.best.trial.config["vector"] == "naive" and first.value == first.baseline
    export_model(DS_CNN, m55, db, tmp_path / "module")
    shipped = {(entry.kernel, tuple(sorted(entry.shape_dict.items()))): dict(entry.config)
               for entry in read_manifest(tmp_path / "module").kernels}
    assert shipped[("conv2d_s8", tuple(sorted(first.workload.shape)))]["vector"] == "naive"
    outcome = verify_model(tmp_path / "module", m55, 2, seed=3)
    assert outcome.ok, [i.problem for i in outcome.inferences if i.problem]
    assert "naive" in {config["vector"] for config in shipped.values()}
