"""The inputs tuning measures follow the deployment (issue 29, goal 5): the int8 kernels draw
TFLite's conventions (symmetric weights, negative shifts, the whole int8 clamp), a model's
layers are tuned on the requantisation form their own quantisation takes, and the workload
key says which draw a stored trial was measured on."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.codegen.kernels.base import KernelError
from edgetune.codegen.kernels.zero_points import parse_zero_points, with_zero_points, zero_point_names
from edgetune.codegen.quant import requant_form
from edgetune.evaluate import Evaluator
from edgetune.model import load_model
from edgetune.model.session import distinct_workloads
from edgetune.session import workload_inputs, workload_of
from edgetune.tuner import TuningDatabase

PACKED_MVE = "tile_m=1,tile_n=4,unroll_k=1,vector=mve,layout=packed,compiler=gcc,opt=O2"
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


def test_zero_points_of_the_users_choice_set_the_tuning_draw_and_are_a_workload_of_their_own(m55):
    # `tune --zero-point`: the deployment's asymmetric weights measured, never mixed with
    # the trials on TFLite's symmetric ones.
    matmul = get_kernel("matmul_s8")
    shape = matmul.parse_shape("m=8,n=16,k=32")
    chosen = with_zero_points(matmul, shape, {"b_zero": 5, "a_zero": -3})
    plain, own = workload_of(matmul, m55, shape), workload_of(chosen, m55, shape)
    params = dict(workload_inputs(chosen, own).params)
    assert (params["b_zero"], params["a_zero"]) == (5, -3)
    assert dict(workload_inputs(matmul, plain).params)["b_zero"] == 0 and matmul.tuning_zero_points == ()
    assert own.key() != plain.key() and own.problem_key() == plain.problem_key()
    again = with_zero_points(matmul, shape, {"a_zero": -3, "b_zero": 5})
    assert workload_of(again, m55, shape).key() == own.key()  # the order given does not matter
    # The buffers are the draw's own: only the named parameters change.
    drawn = workload_inputs(matmul, own)
    assert all((a.data == b.data).all() for a, b in zip(drawn.buffers, workload_inputs(chosen, own).buffers))


@pytest.mark.parametrize("flag, message", [
    ("w_zero=1", "matmul_s8 has no zero point 'w_zero' (its zero points are a_zero, b_zero, c_zero)"),
    ("b_zero=128", "out of the range [-128, 127]"),
    ("b_zero", "give NAME=INTEGER"),
])
def test_a_bad_zero_point_is_refused_naming_the_flag(flag, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--shape", "m=8,n=16,k=32", "--target", "cortex-m55",
                                       "--budget", "1", "--db", "never.db", "--zero-point", flag])
    assert result.exit_code == 2 and message in result.stderr and "--zero-point" in result.stderr
    assert not Path("never.db").exists()


def test_a_conv_has_the_activation_zero_points_only(m55):
    conv = get_kernel("conv2d_s8")
    shape = conv.parse_shape(conv.example_shape())
    assert zero_point_names(conv, shape) == ("in_zero", "out_zero")
    with pytest.raises(KernelError, match="no zero point 'w_zero'"):
        with_zero_points(conv, shape, {"w_zero": 1})
    assert parse_zero_points(("in_zero=-128", " out_zero = 7")) == {"in_zero": -128, "out_zero": 7}


@pytest.mark.qemu
def test_tune_measures_the_zero_points_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = {}
    for label, extra in (("tflite", []), ("b_zero=5", ["--zero-point", "b_zero=5"])):
        result = CliRunner().invoke(main, ["tune", "matmul_s8", "--shape", "m=8,n=16,k=32", "--target", "cortex-m55",
                                           "--budget", "1", "--initial", PACKED_MVE, "--json", *extra])
        assert result.exit_code == 0, result.output
        runs[label] = json.loads(result.stdout)["best"]["instructions"]
    # The packed Helium kernel's b_zero != 0 branch adds the row term: another count.
    assert runs["tflite"] != runs["b_zero=5"]
    workloads = TuningDatabase(tmp_path / "edgetune.db").workloads("cortex-m55")
    assert len(workloads) == 2 and len({w.problem_key() for w in workloads}) == 1
