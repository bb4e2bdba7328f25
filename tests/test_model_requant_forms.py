"""A model module compiles only the Helium requantisation forms its layers take
(app/model/module.py `_requant_forms`, KernelBase.render's `requant_forms`): the layers'
quantisation is constant there, so the other fast forms would be dead code. The general form
is always compiled and serves any call, so the module stays right even for parameters it was
not rendered for (checked in QEMU against TFLite Micro)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import KERNELS
from edgetune.model import module as model_module
from edgetune.model import load_model
from edgetune.codegen.quant import requant_form
from edgetune.model.verify import verify_model
from edgetune.session import TuneRequest, tune
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

DS_CNN = Path(__file__).parent / "data" / "models" / "ds_cnn_kws.tflite"
FORM_BRANCH = re.compile(r"if \(form == (\d)\) \w+_(?:body|run)\(")  # the per-call dispatch
WANTED = {"conv2d_s8": {"vector": "mve", "layout": "packed", "algo": "im2col"}, "dwconv2d_s8": {"vector": "mve"}}


@pytest.mark.parametrize("shifts, out_zero, lo, hi, form", [
    ([-5, -7, -1], 3, -128, 127, 1),
    ([-5, -7, -1], -128, -128, 127, 1),
    ([-5, -7], -128, -128, 60, 2),      # a fused ReLU6-like clamp
    ([-5, 0, -2], 0, -128, 127, 3),     # a shift of 0 among them
    ([0, 0], 0, -20, 127, 3),
    ([-5, 1], 0, -128, 127, 0),         # a left shift: the general form
    ([-5, -3], 200, -128, 127, 0),      # out_zero outside int8
    ([-5, -3], 0, -129, 127, 0),
    ([-5, -3], 0, -128, 128, 0),
])
def test_the_form_is_the_one_the_c_chooses(shifts, out_zero, lo, hi, form):
    assert requant_form(np.array(shifts, dtype=np.int32), out_zero, lo, hi) == form


def _db_on_helium(tmp_path, target, model) -> TuningDatabase:
    """A database whose only trial per workload is a Helium variant with per-call forms."""
    db = TuningDatabase(tmp_path / "t.db")
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        shape = kernel.parse_shape(dict(w.shape))
        config = next(c for c in kernel.tuning_space(target, shape)
                      if all(c.as_dict().get(k) == v for k, v in WANTED[w.kernel].items())
                      and FORM_BRANCH.search(kernel.render(target, shape, c).source))
        tune(TuneRequest(kernel, target, shape, "random", 1, 1, 0, initial=(config.as_dict(),)), db)
    return db


def _layer_forms(model) -> dict[str, set[int]]:
    forms: dict[str, set[int]] = {}
    for layer in model.layers:
        if layer.kernel is None:
            continue
        shift = next(c.data for c in layer.constants if c.name == "shift")
        p = dict(layer.params)
        forms.setdefault(layer.kernel, set()).add(requant_form(shift, p["out_zero"], p["act_min"], p["act_max"]))
    return forms


@pytest.mark.qemu
def test_a_module_compiles_its_layers_forms_only_and_stays_exact(tmp_path, monkeypatch):
    m55 = get_target("cortex-m55")
    model = load_model(DS_CNN)
    db = _db_on_helium(tmp_path, m55, model)
    out = tmp_path / "m"
    printed = CliRunner().invoke(main, ["model", "export", str(DS_CNN), "--target", "cortex-m55", "--db", str(db.path),
                                        "--out", str(out)])
    assert printed.exit_code == 0, printed.output
    taken = _layer_forms(model)
    branched = 0
    for source in out.glob("ds_cnn_kws_*conv2d_s8_l*.c"):
        kernel = "dwconv2d_s8" if "_dwconv2d_s8_" in source.name else "conv2d_s8"
        found = {int(f) for f in FORM_BRANCH.findall(source.read_text())}
        if found or "_requant_form(" in source.read_text():
            branched += 1
            assert found <= {1, 2, 3}
            assert found <= taken[kernel] - {0}, (source.name, found, taken)
    assert branched, "no exported variant chose its requantisation per call"
    assert verify_model(out, m55, 2, layers=True).ok
    # Rendered for forms its calls do not take (none: the general form only), the module
    # still computes TFLite Micro's results: the general form serves any call.
    monkeypatch.setattr(model_module, "_requant_forms",
                        lambda model, steps: {s.function: () for s in steps if s.kernel is not None})
    general = tmp_path / "general"
    printed = CliRunner().invoke(main, ["model", "export", str(DS_CNN), "--target", "cortex-m55", "--db", str(db.path),
                                        "--out", str(general)])
    assert printed.exit_code == 0, printed.output
    assert not any(FORM_BRANCH.search(p.read_text()) for p in general.glob("*.c"))
    outcome = verify_model(general, m55, 2, layers=True)
    assert outcome.ok, (outcome.layer_problem, [i.problem for i in outcome.inferences])
