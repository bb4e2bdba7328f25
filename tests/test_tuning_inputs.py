"""The inputs tuning measures follow the deployment (issue 29, goal 5): the int8 kernels draw
TFLite's conventions (symmetric weights, negative shifts, the whole int8 clamp), a model's
layers are tuned on the requantisation form their own quantisation takes, and the workload
key says which draw a stored trial was measured on."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetune.codegen import get_kernel
from edgetune.codegen.quant import requant_form
from edgetune.evaluate import Evaluator
from edgetune.model import load_model
from edgetune.model.session import distinct_workloads
from edgetune.session import workload_inputs, workload_of

MODELS = sorted((Path(__file__).parent / "data" / "models").glob("*.tflite"))


def form_of(buffers, params) -> int:
    shifts = next(b.data for b in buffers if b.name == "shift")
    p = dict(params)
    return requant_form(shifts, p["out_zero"], p["act_min"], p["act_max"])


@pytest.mark.parametrize("path", MODELS, ids=[p.stem for p in MODELS])
def test_every_committed_models_layer_is_tuned_on_the_requantisation_form_it_runs(path, m55):
    model = load_model(path)
    by_index = {layer.index: layer for layer in model.layers}
    for lw in distinct_workloads(model.layers, m55):
        tuned = workload_inputs(lw.kernel, lw.workload)
        own = {form_of(by_index[i].constants, by_index[i].params) for i in lw.layers}
        assert own == {form_of(tuned.buffers, tuned.params)}, (lw.workload.key(), own)


def test_matmul_s8_is_tuned_with_symmetric_weights_and_drawn_otherwise(m55):
    matmul = get_kernel("matmul_s8")
    for text in ("m=4,n=4,k=4", "m=64,n=64,k=64", "m=1,n=10,k=640"):
        shape = matmul.parse_shape(text)
        params = dict(workload_inputs(matmul, workload_of(matmul, m55, shape)).params)
        assert params["b_zero"] == 0 and params["shift"] < 0
    drawn = [dict(matmul.make_io(matmul.parse_shape("m=4,n=4,k=4"), np.random.default_rng(s)).params)["b_zero"]
             for s in range(8)]
    assert any(b != 0 for b in drawn)  # the checks' fresh inputs still reach every branch


def test_the_new_draw_is_a_new_workload_key(m55):
    # A database's trials measured on the old draw keep their key (the kernel version in it)
    # and are never mixed with trials on the new inputs.
    for name, old in (("matmul_s8", 4), ("conv2d_s8", 3), ("dwconv2d_s8", 3), ("tconv2d_s8", 1)):
        kernel = get_kernel(name)
        workload = workload_of(kernel, m55, kernel.parse_shape(kernel.example_shape()))
        assert kernel.tuning_edge == "tflite" and workload.kernel_version == old + 1
        assert f"{name}@v{old + 1}/" in workload.key()
    assert get_kernel("matmul_f32").tuning_edge == "random"


@pytest.mark.qemu
def test_the_tuned_measurement_is_the_deployed_branch_of_matmul_s8(m55, tmp_path):
    # The Helium packed kernel drops the row term when b_zero == 0 (TFLite's weights): the
    # count tuning stores is that branch's, not the asymmetric one's.
    matmul = get_kernel("matmul_s8")
    shape = matmul.parse_shape("m=8,n=16,k=32")
    space = matmul.tuning_space(m55, shape)
    config = next(c for c in space if c["vector"] == "mve" and c["layout"] == "packed" and c["compiler"] == "gcc")
    tuned = workload_inputs(matmul, workload_of(matmul, m55, shape))
    asymmetric = type(tuned)(buffers=tuned.buffers, params=tuple(dict(tuned.params, b_zero=5).items()))
    counts = [Evaluator(matmul, m55, shape, space, io, tmp_path)(config).values["instructions"]
              for io in (tuned, asymmetric)]
    assert counts[0] != counts[1]
