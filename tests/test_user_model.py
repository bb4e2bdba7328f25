"""Kernels of the user's own serving a model's operators (docs/own-kernel.md, "Serve a
model's operator"): examples/kernels/leaky_relu_s8 serves a CUSTOM LeakyRelu (judged by its
reference) and the builtin LEAKY_RELU (judged by TFLite Micro), through model show, tune,
export, verify, report and place on the host and the M55; every mistake in an adapter is one
line naming the operator and its index, exit 2."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen.kernels import KERNELS, SHIPPED, register_kernel, unregister_kernel
from edgetune.codegen.kernels.user_loader import load_kernel_file
from edgetune.model import load_model
from edgetune.model.oracle import oracle_output, run_tflm
from edgetune.model.reference import model_output, segments, sub_model

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "kernels" / "leaky_relu_s8"
MODEL = EXAMPLE / "leaky_net.tflite"
SCRIPT = ROOT / "scripts" / "make_custom_op_model.py"


@pytest.fixture(autouse=True)
def _forget_user_kernels():
    yield
    forget_user_kernels()


@pytest.fixture(scope="module")
def builtin_model(tmp_path_factory) -> Path:
    """The example's model with TFLite's builtin LEAKY_RELU instead of the CUSTOM operator."""
    out = tmp_path_factory.mktemp("builtin") / "leaky_builtin.tflite"
    subprocess.run([sys.executable, str(SCRIPT), "--builtin", "--out", str(out)], check=True, capture_output=True)
    return out


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgetune: error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def kernel_variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """A copy of the example with one edit of kernel.py (and another kernel name)."""
    folder = tmp_path / name
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__", "*.tflite"))
    text = (folder / "kernel.py").read_text()
    assert old in text
    text = text.replace(old, new).replace('name="leaky_relu_s8"', f'name="{name}"')
    (folder / "kernel.py").write_text(text)
    return folder


def forget_user_kernels() -> None:
    """As a new process starts: no kernel of the user's own registered."""
    for name in set(KERNELS) - SHIPPED:
        unregister_kernel(name)


# --- the model and what serves it ------------------------------------------------------------
def test_the_committed_model_is_what_the_script_builds(tmp_path):
    out = tmp_path / "m.tflite"
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], check=True, capture_output=True)
    assert out.read_bytes() == MODEL.read_bytes()


def test_a_custom_operator_no_kernel_serves_is_named_with_its_index():
    one_line_error(cli("model", "show", str(MODEL)), "CUSTOM (LeakyRelu) (2x: operators 1, 3)", "no kernel loaded serves",
                   "CUSTOM:LeakyRelu")


def test_a_custom_operator_no_kernel_serves_names_what_the_loaded_kernels_declare(tmp_path):
    """A typo'd operators key (the custom code's case) shows beside the operator's real one."""
    typo = kernel_variant(tmp_path, "leaky_typo", '"CUSTOM:LeakyRelu": custom_leaky_relu',
                          '"CUSTOM:Leakyrelu": custom_leaky_relu')
    one_line_error(cli("model", "show", str(MODEL), "--kernel-file", str(typo)), "CUSTOM (LeakyRelu) (2x: operators 1, 3)",
                   "no kernel loaded serves", "the kernels loaded serve CUSTOM:Leakyrelu (leaky_typo), LEAKY_RELU "
                   "(leaky_typo)")


def test_model_show_names_the_users_kernel_as_serving_the_custom_operators():
    result = cli("model", "show", str(MODEL), "--kernel-file", str(EXAMPLE), "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    served = {layer["index"]: (layer["kernel"], layer["user_kernel"], layer["oracle"]) for layer in shown["layers"]}
    assert served == {0: ("conv2d_s8", False, "tflm"), 1: ("leaky_relu_s8", True, "reference"),
                      2: ("dwconv2d_s8", False, "tflm"), 3: ("leaky_relu_s8", True, "reference")}
    # The two LeakyRelu operators have other scales but one shape: one workload.
    assert [(w["kernel"], w["layers"]) for w in shown["workloads"]] == [
        ("conv2d_s8", [0]), ("leaky_relu_s8", [1, 3]), ("dwconv2d_s8", [2])]
    text = cli("model", "show", str(MODEL), "--kernel-file", str(EXAMPLE)).output
    assert "leaky_relu_s8 (w1), yours: its reference is the oracle" in text


def test_the_adapter_gives_each_operator_its_own_scalars():
    register_kernel(load_kernel_file(EXAMPLE))
    model = load_model(MODEL)
    first, second = model.layers[1], model.layers[3]
    assert first.shape == second.shape == (("n", 512),)
    assert dict(first.params)["in_zero"] == model.tensors[model.operators[1].inputs[0]].quantization.zero_points[0]
    assert first.params != second.params


def test_the_kernels_reference_is_tflite_micros_leaky_relu(builtin_model):
    """The builtin LEAKY_RELU is judged by TFLite Micro; the example's arithmetic agrees
    with it bit for bit, on random and saturating inputs."""
    kernel = register_kernel(load_kernel_file(EXAMPLE))
    model = load_model(builtin_model)
    rng = np.random.default_rng(5)
    for layer in (model.layers[1], model.layers[3]):
        assert layer.kernel == "leaky_relu_s8" and layer.oracle == "tflm"
        for x in (rng.integers(-128, 128, size=layer.input_shape, dtype=np.int8),
                  rng.choice(np.array([-128, 127], dtype=np.int8), size=layer.input_shape)):
            want = oracle_output(layer, x)
            (got,) = kernel.reference(layer.shape_dict, layer.io(x))
            assert np.array_equal(got, want)


def test_the_whole_model_oracle_runs_tflite_micro_around_the_custom_operators(builtin_model):
    """TFLite Micro on the parts between the CUSTOM operators, the reference on them: the
    same outputs as TFLite Micro on the builtin model (same tensors, LEAKY_RELU builtin)."""
    register_kernel(load_kernel_file(EXAMPLE))
    custom, builtin = load_model(MODEL), load_model(builtin_model)
    assert [(kind, [op.index for op in ops]) for kind, ops in segments(custom)] == [
        ("tflm", [0]), ("reference", [1]), ("tflm", [2]), ("reference", [3])]
    with pytest.raises(RuntimeError):  # why: TFLite Micro has no kernel for the custom operator
        run_tflm(MODEL.read_bytes(), [np.zeros((1, 8, 8, 4), np.int8)])
    rng = np.random.default_rng(9)
    for _ in range(3):
        x = rng.integers(-128, 128, size=(1, 8, 8, 4), dtype=np.int8)
        (want,) = run_tflm(builtin_model.read_bytes(), [x])
        assert np.array_equal(model_output(custom, MODEL.read_bytes(), x), want)


def test_a_sub_model_of_several_operators_is_tflite_micros_model_on_them(builtin_model):
    register_kernel(load_kernel_file(EXAMPLE))
    model = load_model(builtin_model)
    x = np.random.default_rng(2).integers(-128, 128, size=(1, 8, 8, 4), dtype=np.int8)
    data, inputs, outputs = sub_model(model, model.operators[:2], {model.operators[2].inputs[0]})
    assert inputs == [0] and outputs == [model.operators[1].outputs[0]]
    (head,) = run_tflm(data, [x])
    data, inputs, outputs = sub_model(model, model.operators[2:], set())
    (whole,) = run_tflm(data, [head])
    assert np.array_equal(whole, run_tflm(builtin_model.read_bytes(), [x])[0])


# --- mistakes: one line, exit 2 ----------------------------------------------------------------
@pytest.mark.parametrize("old, new, needles", [
    ("    return _binding(op, options[\"alpha\"])", "    return 1 / 0",
     ("operator 1 (CUSTOM (LeakyRelu)), kernel bad_adapter", "its adapter raised ZeroDivisionError",
      "/bad_adapter/kernel.py:")),  # the adapter's line that raised
    ('shape={"n": x.elements}', 'shape={"size": x.elements}',
     ("operator 1 (CUSTOM (LeakyRelu))", "its adapter's shape has no key 'n'")),
    ('input="x", output="y"', 'input="y", output="y"', ("operator 1", "binds 'y' to the operator's input")),
    ("scalars=dict(in_zero=in_zero,", "scalars=dict(in_zer0=in_zero,", ("operator 1", "scalar 'in_zer0'")),
    ('output="y",', 'output="y", constants={"x": 0},', ("operator 1", "constant for 'x'")),
    ("    return _binding(op, options[\"alpha\"])", "    return {'n': 512}", ("operator 1", "not an edgetune.Binding")),
    ('shape={"n": x.elements}', 'shape={"n": x.elements // 2}', ("operator 1", "is int8[1, 8, 8, 8], but buffer 'x'")),
])
def test_a_wrong_adapter_is_one_line_naming_the_operator(tmp_path, old, new, needles):
    folder = kernel_variant(tmp_path, "bad_adapter", old, new)
    one_line_error(cli("model", "show", str(MODEL), "--kernel-file", str(folder)), *needles)


def test_two_kernels_claiming_one_operator_are_refused(tmp_path):
    other = kernel_variant(tmp_path, "leaky_twin", "unroll\": [1, 2, 4]", "unroll\": [1, 2]")
    one_line_error(cli("model", "show", str(MODEL), "--kernel-file", str(EXAMPLE), "--kernel-file", str(other)),
                   "operator 1 (CUSTOM (LeakyRelu)) is claimed by 2 kernels (leaky_relu_s8, leaky_twin)")


def test_a_users_kernel_claiming_a_builtin_edgetune_serves_comes_first(tmp_path):
    folder = kernel_variant(tmp_path, "my_conv", '"LEAKY_RELU": builtin_leaky_relu', '"CONV_2D": lambda op: 1 / 0')
    one_line_error(cli("model", "show", str(MODEL), "--kernel-file", str(folder)),
                   "operator 0 (CONV_2D), kernel my_conv: its adapter raised ZeroDivisionError")


def test_a_bad_operators_key_is_refused_when_the_kernel_loads(tmp_path):
    folder = kernel_variant(tmp_path, "bad_key", '"CUSTOM:LeakyRelu": custom_leaky_relu',
                            '"CUSTOM": custom_leaky_relu')
    one_line_error(cli("model", "show", str(MODEL), "--kernel-file", str(folder)), "operators key 'CUSTOM'")


def test_an_operators_key_naming_no_builtin_is_refused_with_the_nearest_name(tmp_path):
    folder = kernel_variant(tmp_path, "typo_key", '"CUSTOM:LeakyRelu": custom_leaky_relu',
                            '"LEAKYRELU": custom_leaky_relu')
    one_line_error(cli("model", "show", str(MODEL), "--kernel-file", str(folder)),
                   "operators key 'LEAKYRELU': TFLite has no builtin operator 'LEAKYRELU'")
    one_line_error(cli("model", "show", str(MODEL), "--kernel-file", str(folder)), "did you mean LEAKY_RELU?")


# --- tune, export, verify on the host --------------------------------------------------------
def _tune_export_verify(tmp_path: Path, model: Path, target: str, budget: int, kernel: Path = EXAMPLE) -> dict:
    db, out = str(tmp_path / "m.db"), str(tmp_path / "module")
    tuned = cli("model", "tune", str(model), "--kernel-file", str(kernel), "--target", target, "--budget", str(budget),
                "--jobs", "1", "--db", db, "--json")
    assert tuned.exit_code == 0, tuned.output
    summary = json.loads(tuned.output)
    exported = cli("model", "export", str(model), "--kernel-file", str(kernel), "--target", target, "--db", db,
                   "--out", out)
    assert exported.exit_code == 0, exported.output
    verified = cli("model", "verify", out, "--kernel-file", str(kernel), "--target", target, "--inputs", "3",
                   "--layers")
    assert verified.exit_code == 0, verified.output
    return dict(summary=summary, export=exported.output, verify=verified.output, db=db, out=out)


def test_a_custom_operator_model_tunes_exports_and_verifies_on_the_host(tmp_path):
    run = _tune_export_verify(tmp_path, MODEL, "host", 9)
    summary = run["summary"]
    leaky = next(w for w in summary["workloads"] if w["kernel"] == "leaky_relu_s8")
    assert leaky["layers"] == [1, 3] and leaky["trials"] >= 1 and leaky["best"] is not None
    oracles = {c["layer"]: c["oracle"] for c in summary["checks"]}
    assert oracles == {0: "TFLite Micro", 1: "leaky_relu_s8's reference", 2: "TFLite Micro",
                       3: "leaky_relu_s8's reference"}
    assert all(c["ok"] for c in summary["checks"])
    assert "leaky_net_leaky_relu_s8_l1  (tuned)" in run["export"]
    assert "cannot run its CUSTOM operators" in run["export"]
    assert "4 inferences bit-exact with TFLite Micro with leaky_relu_s8's reference, every operator too" in run["verify"]
    manifest = json.loads((Path(run["out"]) / "manifest.json").read_text())
    recorded = {k["kernel"]: k.get("definition", "") for k in manifest["kernels"]}
    assert recorded["leaky_relu_s8"] == load_kernel_file(EXAMPLE).definition and recorded["conv2d_s8"] == ""
    # Without the kernel, or with another definition of it, verify refuses: exit 2, one line.
    forget_user_kernels()
    one_line_error(cli("model", "verify", run["out"], "--target", "host"), "'leaky_relu_s8' is a kernel of your own")
    changed = kernel_variant(tmp_path, "leaky_relu_s8", "unroll\": [1, 2, 4]", "unroll\": [1, 2, 4, 8]")
    forget_user_kernels()
    one_line_error(cli("model", "verify", run["out"], "--target", "host", "--kernel-file", str(changed)),
                   "changed since export")
    # model report and place read the same database with the kernel.
    forget_user_kernels()
    report = cli("model", "report", str(MODEL), "--kernel-file", str(EXAMPLE), "--target", "host", "--db", run["db"],
                 "--out", str(tmp_path / "report"), "--json")
    assert report.exit_code == 0, report.output
    rows = {r["index"]: r for r in json.loads(report.output)["layers"]}
    assert rows[1]["kernel"] == rows[3]["kernel"] == "leaky_relu_s8" and rows[1]["tuned"] == leaky["best"]
    assert rows[1]["plain"] is None  # no plain loop of edgetune's for a kernel of your own
    placed = cli("place", str(MODEL), "--kernel-file", str(EXAMPLE), "--target", "host", "--db", run["db"],
                 "--out", str(tmp_path / "plan"), "--json")
    assert placed.exit_code == 0, placed.output
    ops = {op["index"]: op for op in json.loads(placed.output)["operators"]}
    assert ops[1]["device"] == "cpu" and f"tuned leaky_relu_s8" in ops[1]["cpu_note"]


def test_a_builtin_operator_a_users_kernel_serves_is_judged_by_tflite_micro(tmp_path, builtin_model):
    run = _tune_export_verify(tmp_path, builtin_model, "host", 6)
    checks = {c["layer"]: c for c in run["summary"]["checks"]}
    assert checks[1]["oracle"] == checks[3]["oracle"] == "TFLite Micro" and checks[1]["ok"]
    assert "inferences bit-exact with TFLite Micro, every operator too" in run["verify"]


def test_where_the_users_kernel_and_tflite_micro_disagree_tflite_micro_is_right(tmp_path, builtin_model):
    """A kernel whose reference and C agree with each other (so every trial passes) but
    not with TFLite Micro: the check after tuning says so and the command exits 1."""
    wrong = kernel_variant(tmp_path, "leaky_off_by_one", "scalars=dict(in_zero=in_zero,",
                           "scalars=dict(in_zero=in_zero + 1,")
    result = cli("model", "tune", str(builtin_model), "--kernel-file", str(wrong), "--target", "host", "--budget", "6",
                 "--jobs", "1", "--db", str(tmp_path / "w.db"), "--json")
    assert result.exit_code == 1, result.output
    checks = {c["layer"]: c for c in json.loads(result.output)["checks"]}
    assert checks[0]["ok"] and checks[2]["ok"]
    assert not checks[1]["ok"] and "differ from TFLite Micro" in checks[1]["problem"]


# --- on the M55 ------------------------------------------------------------------------------
@pytest.mark.qemu
def test_a_custom_operator_model_tunes_exports_and_verifies_on_the_m55(tmp_path):
    run = _tune_export_verify(tmp_path, MODEL, "cortex-m55", 6)
    leaky = next(w for w in run["summary"]["workloads"] if w["kernel"] == "leaky_relu_s8")
    assert leaky["best"] is not None and leaky["best"] > 0
    assert all(c["ok"] for c in run["summary"]["checks"])
    assert "on cortex-m55: 4 inferences bit-exact with TFLite Micro with leaky_relu_s8's reference" in run["verify"]


# --- an operator with weights, a plain C kernel, the weight before the input ------------------
CHANNEL_MUL = '''
import numpy as np
import edgetune as et

def reference(shape, inputs):
    x, w = inputs["x"].astype(np.int32), inputs["w"].astype(np.int32)
    product = x.reshape(-1, shape["c"]) * w
    return np.clip(product >> inputs["shift"], -128, 127).astype(np.int8).reshape(-1)

def adapt(op):
    x, w = op.inputs
    return et.Binding(shape={"n": x.elements, "c": w.elements}, input="x", output="y",
                      constants={"w": w.array()}, scalars={"shift": int(op.custom_options[0])})

KERNEL = et.KernelDef(
    name="channel_mul_s8", shape=("n", "c"), source="channel_mul.c",
    args=[et.Weight("w", "int8", "c"), et.Input("x", "int8", "n"), et.Output("y", "int8", "n"),
          et.Scalar("count", "n"), et.Scalar("channels", "c"), et.Scalar("shift", 3)],
    params={"UNROLL": [1, 2]}, restrictions=["c % UNROLL == 0"], reference=reference,
    operators={"CUSTOM:ChannelMul": adapt})
'''
CHANNEL_MUL_C = '''#include <stdint.h>
void channel_mul_s8(const int8_t *w, const int8_t *x, int8_t *y, int32_t count, int32_t channels, int32_t shift)
{
    for (int i = 0; i < count; i += channels)
        for (int j = 0; j < channels; j += UNROLL)
            for (int u = 0; u < UNROLL; u++) {
                int32_t v = ((int32_t)x[i + j + u] * w[j + u]) >> shift;
                y[i + j + u] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v);
            }
}
'''


def channel_mul_model(rng) -> bytes:
    """CONV_2D 1x1 (4x4x3 -> 4x4x8), then CUSTOM ChannelMul by a constant int8 [8] with shift 2."""
    from edgetune.model.builder import build_model, constant
    from edgetune.model.graph import Operator, Quantization, Tensor

    q = lambda scale, zero: Quantization((float(np.float32(scale)),), (zero,))
    tensors = [Tensor(0, "input", (1, 4, 4, 3), "int8", q(0.05, 1)),
               constant(1, "w", rng.integers(-127, 128, size=(8, 1, 1, 3), dtype=np.int8),
                        Quantization((float(np.float32(0.01)),) * 8, (0,) * 8, 0)),
               constant(2, "b", rng.integers(-500, 500, size=8, dtype=np.int32),
                        Quantization((float(np.float32(0.0005)),) * 8, (0,) * 8, 0)),
               Tensor(3, "conv", (1, 4, 4, 8), "int8", q(0.02, -5)),
               constant(4, "scale", rng.integers(-127, 128, size=8, dtype=np.int8)),
               Tensor(5, "output", (1, 4, 4, 8), "int8", q(0.02, 0))]
    conv = Operator(0, "CONV_2D", (0, 1, 2), (3,), "Conv2DOptions",
                    (("padding", 0), ("strideH", 1), ("strideW", 1), ("fusedActivationFunction", 0)))
    mul = Operator(1, "CUSTOM", (3, 4), (5,), custom_code="ChannelMul", custom_options=bytes([2]))
    return build_model(tensors, [conv, mul], [0], [5])


def test_an_operators_weights_reach_the_kernel_in_its_argument_order(tmp_path):
    folder = tmp_path / "channel_mul"
    folder.mkdir()
    (folder / "kernel.py").write_text(CHANNEL_MUL)
    (folder / "channel_mul.c").write_text(CHANNEL_MUL_C)
    model_path = tmp_path / "mul.tflite"
    model_path.write_bytes(channel_mul_model(np.random.default_rng(4)))
    kernel = register_kernel(load_kernel_file(folder))
    model = load_model(model_path)
    layer = model.layers[1]
    assert layer.shape == (("n", 128), ("c", 8)) and dict(layer.params) == {"count": 128, "channels": 8, "shift": 2}
    io = layer.io(np.arange(128, dtype=np.int8) - 64)
    assert [b.name for b in io.buffers] == ["w", "x", "y"]
    assert np.array_equal(io.buffers[0].data, model.tensors[4].array())
    # The whole-model oracle: TFLite Micro on the convolution, the reference on the custom operator.
    x = np.random.default_rng(1).integers(-128, 128, size=(1, 4, 4, 3), dtype=np.int8)
    (conv_out,) = run_tflm(sub_model(model, model.operators[:1], {3})[0], [x])
    (want,) = kernel.reference(layer.shape_dict, layer.io(np.asarray(conv_out).reshape(-1)))
    assert np.array_equal(model_output(model, model_path.read_bytes(), x).reshape(-1), want)
    run = _tune_export_verify(tmp_path, model_path, "host", 4, kernel=folder)
    assert all(c["ok"] for c in run["summary"]["checks"])
    assert {c["layer"]: c["oracle"] for c in run["summary"]["checks"]} == {0: "TFLite Micro",
                                                                          1: "channel_mul_s8's reference"}
    module = (Path(run["out"]) / "mul.c").read_text()
    assert "mul_l1_w[8]" in module  # the operator's weights as a const array of the module
    assert "bit-exact with TFLite Micro with channel_mul_s8's reference, every operator too" in run["verify"]


def test_an_upper_case_parameter_survives_the_manifest(tmp_path):
    """Kernel Tuner's #define parameters are often upper case (UNROLL): an export's
    manifest records them and verify reads it back."""
    folder = tmp_path / "channel_mul"
    folder.mkdir()
    (folder / "kernel.py").write_text(CHANNEL_MUL)
    (folder / "channel_mul.c").write_text(CHANNEL_MUL_C)
    db, out = str(tmp_path / "k.db"), str(tmp_path / "out")
    tuned = cli("tune", "--kernel-file", str(folder), "--shape", "n=64,c=8", "--target", "host", "--budget", "2",
                "--db", db)
    assert tuned.exit_code == 0, tuned.output
    exported = cli("export", "--kernel-file", str(folder), "--target", "host", "--db", db, "--out", out)
    assert exported.exit_code == 0, exported.output
    assert '"UNROLL"' in (Path(out) / "manifest.json").read_text()
    verified = cli("verify", out, "--kernel-file", str(folder), "--db", db, "--tolerance", "1000")
    assert verified.exit_code == 0, verified.output
