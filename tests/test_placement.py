"""`edgetune place`: network files, the placement model, and the exported plan, with Vela and
(for the CPU side) QEMU run for real."""
from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from ethosu.vela.tflite.BuiltinOperator import BuiltinOperator
from ethosu.vela.tflite.Model import Model

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.npu.layer_plan import NetworkError, export_plan, load_network, plan_network
from edgetune.session import TuneRequest, tune
from edgetune.tuner import TuningDatabase

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.toml"

MIXED = """
name = "mixed"
[[layers]]
name = "conv"
op = "conv2d_s8"
shape = { h = 4, w = 4, cin = 4, cout = 4, kh = 3, kw = 3, stride = 1, pad = 1, dilation = 1 }
[[layers]]
name = "dw"
op = "dwconv2d_s8"
shape = { h = 4, w = 4, c = 4, kh = 3, kw = 3, stride = 2, pad = "same", dilation = 1 }
[[layers]]
name = "fc"
op = "matmul_s8"
shape = { m = 1, n = 4, k = 16 }
"""


def write(tmp_path: Path, text: str, name: str = "net.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_network_file_loads_in_toml_and_json(tmp_path):
    net = load_network(write(tmp_path, MIXED))
    assert [layer.name for layer in net.layers] == ["conv", "dw", "fc"]
    assert net.layers[1].shape["pad"] == -1
    as_json = {"name": "mixed", "layers": [{"name": l.name, "op": l.operator.name, "shape": l.shape} for l in net.layers]}
    again = load_network(write(tmp_path, json.dumps(as_json), "net.json"))
    assert [l.shape for l in again.layers] == [l.shape for l in net.layers]


def test_a_layers_cpu_kernel_reads_the_same_geometry_as_its_npu_operator(tmp_path):
    """pad=same in a network file is TFLite's SAME on both devices: the CPU kernel's shape
    gets TFLite's asymmetric offsets (4x4 stride 2 3x3: 0 on top/left, 1 at bottom/right)."""
    from edgetune.npu.layer_plan import cpu_shape
    net = load_network(write(tmp_path, MIXED))
    conv, dw = (get_kernel(layer.operator.name).parse_shape(cpu_shape(layer)) for layer in net.layers[:2])
    assert [conv[k] for k in ("pad_top", "pad_bottom", "pad_left", "pad_right")] == [1, 1, 1, 1]
    assert [dw[k] for k in ("pad_top", "pad_bottom", "pad_left", "pad_right")] == [0, 1, 0, 1]
    assert dw["stride_h"] == dw["stride_w"] == 2 and dw["mult"] == 1
    assert net.layers[1].operator.output_shape(net.layers[1].shape)[1:3] == (2, 2)
    assert get_kernel("dwconv2d_s8").make_io(dw, np.random.default_rng(0)).outputs()[0].data.shape[:2] == (2, 2)


@pytest.mark.parametrize("old, new, where", [
    ("m = 1, n = 4, k = 16", "m = 1, n = 4, k = 17", "layers[2].shape: consumes 17"),
    ('op = "matmul_s8"', 'op = "softmax"', "layers[2].op: 'softmax'"),
    ('name = "dw"', 'name = "conv"', "layers[1].name: duplicate"),
    ("c = 4,", "c = 4, cout = 4,", "layers[1].shape: unknown key 'cout'"),
    ('name = "mixed"', 'name = "Mixed Net"', "name: expected"),
])
def test_bad_network_files_name_the_key(tmp_path, old, new, where):
    path = write(tmp_path, MIXED.replace(old, new, 1))
    with pytest.raises(NetworkError) as info:
        load_network(path)
    assert str(info.value).startswith(f"{path}: {where}"), str(info.value)


def npu_builtins(path: Path) -> list[tuple[int, bytes | None]]:
    data = path.read_bytes()
    model = Model.GetRootAsModel(data, 0)
    graph = model.Subgraphs(0)
    codes = [model.OperatorCodes(graph.Operators(i).OpcodeIndex()) for i in range(graph.OperatorsLength())]
    return [(code.BuiltinCode(), code.CustomCode()) for code in codes]


def syntax_check(folder: Path, header: str) -> None:
    source = folder / "check.c"
    source.write_text(f'#include "{header}"\nint main(void) {{ return 0; }}\n')
    subprocess.run(["arm-none-eabi-gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                    "-I", str(folder), str(source)], check=True, capture_output=True, text=True)
    source.unlink()


def test_a_layer_that_can_run_nowhere_is_one_line(tmp_path):
    net = write(tmp_path, 'name = "huge"\n[[layers]]\nname = "fc"\nop = "matmul_s8"\nshape = { m = 1, n = 4, k = 70000 }\n')
    result = CliRunner().invoke(main, ["place", str(net), "--db", str(tmp_path / "e.db"), "--out", str(tmp_path / "o"),
                                       "--npu-budget", "1"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "layer fc can run nowhere" in lines[0]
    assert "k=70000" in lines[0] and "could not run on NPU" in lines[0]


def test_place_the_example_network_end_to_end(tmp_path):
    out = tmp_path / "plan"
    result = CliRunner().invoke(main, ["place", str(EXAMPLE), "--target", "cortex-m55", "--device", "ethos-u55",
                                       "--db", str(tmp_path / "e.db"), "--out", str(out), "--npu-budget", "2"])
    assert result.exit_code == 0, result.output
    text = result.output
    for layer in ("conv1", "dw2", "fc3"):
        assert f"  {layer} (" in text
    assert "conv2d_s8 not tuned on cortex-m55" in text  # said so, and counted NPU-only
    assert "matmul_s8 not tuned on cortex-m55" in text
    plan = json.loads((out / "plan.json").read_text())
    assert [row["device"] for row in plan["layers"]] == ["npu", "npu", "npu"]
    assert plan["accelerator"] == "ethos-u55-256" and plan["all_cpu_cycles"] is None
    assert plan["total_cycles"] == plan["all_npu_cycles"] == sum(
        r["compute_cycles"] + r["invoke_cycles"] + r["copy_in_cycles"] for r in plan["layers"]) + plan["copy_out_cycles"]
    for row in plan["layers"]:
        model = out / row["model"]
        # Vela's output: the layer became one ethos-u custom operator carrying the command stream.
        assert (BuiltinOperator.CUSTOM, b"ethos-u") in npu_builtins(model)
    header = (out / "edgetune_plan.h").read_text()
    assert '"npu/fc3_vela.tflite"' in header and "#define ET_PLAN_FC3_DEVICE ET_PLAN_NPU" in header
    syntax_check(out, "edgetune_plan.h")
    # The models as C arrays: compiled for the M55, each array holds exactly Vela's file.
    obj = tmp_path / "models.o"
    subprocess.run(["arm-none-eabi-gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-mcpu=cortex-m55", "-fdata-sections",
                    "-c", str(out / "npu" / "edgetune_npu_models.c"), "-o", str(obj)], check=True, capture_output=True,
                   text=True)
    for row in plan["layers"]:
        dumped = tmp_path / f"{row['name']}.bin"
        subprocess.run(["arm-none-eabi-objcopy", "--dump-section", f".rodata.{row['model_symbol']}={dumped}", str(obj)],
                       check=True, capture_output=True, text=True)
        assert dumped.read_bytes() == (out / row["model"]).read_bytes()


@pytest.mark.qemu
def test_place_mixes_devices_and_is_optimal_under_its_model(tmp_path, m55):
    db = TuningDatabase(tmp_path / "e.db")
    matmul = get_kernel("matmul_s8")
    tune(TuneRequest(matmul, m55, matmul.parse_shape("m=1,n=4,k=16"), budget=2, jobs=2), db)
    network = load_network(write(tmp_path, MIXED))
    npu = m55.npu("ethos-u55")
    plan = plan_network(network, m55, npu, db, macs=128, npu_budget=2)
    assert plan.accelerator == "ethos-u55-128"

    # Recompute every assignment under the documented model; the plan must be the cheapest.
    app_in = m55.place_buffers(network.layers[0].input_bytes).name
    app_out = m55.place_buffers(network.layers[-1].output_bytes).name

    def copy(nbytes, a, b):
        return 0 if a == b else math.ceil(nbytes / npu.copy_bytes_per_cycle)

    def cost(devices):
        total, where = 0, app_in
        for lp, device in zip(plan.layers, devices):
            option = lp.cpu if device == "cpu" else lp.npu
            if option.cycles is None:
                return None
            total += option.cycles + (npu.invoke_cycles if device == "npu" else 0)
            total += copy(lp.layer.input_bytes, where, option.region)
            where = option.region
        return total + copy(network.layers[-1].output_bytes, where, app_out)

    costs = {devices: cost(devices) for devices in itertools.product(("cpu", "npu"), repeat=3)}
    feasible = {d: c for d, c in costs.items() if c is not None}
    assert set(feasible) == {("npu", "npu", "cpu"), ("npu", "npu", "npu")}  # only fc has a CPU kernel
    assert plan.total_cycles == min(feasible.values())
    assert cost(tuple(lp.device for lp in plan.layers)) == plan.total_cycles
    assert plan.all_npu_cycles == costs[("npu", "npu", "npu")]

    out = tmp_path / "plan"
    exported = export_plan(plan, db, out)
    devices = [lp.device for lp in plan.layers]
    assert len(exported.npu_models) == devices.count("npu")
    if devices[-1] == "cpu":
        assert exported.cpu_export is not None and len(exported.cpu_export.entries) == 1
        function = exported.cpu_export.entries[0].function
        assert function in (out / "edgetune_plan.h").read_text()
        assert (out / "cpu" / f"{function}.c").is_file()
        shutil.copy(out / "cpu" / "edgetune_kernels.h", out / "edgetune_kernels.h")
        syntax_check(out, "edgetune_kernels.h")
    else:
        assert exported.cpu_export is None
    syntax_check(out, "edgetune_plan.h")


@pytest.mark.parametrize("extra, culprit", [
    (["--device", "ethos-u85"], "ethos-u85"),
    (["--macs", "48"], "--macs"),
    (["--strategy", "genetic"], "place tunes the NPU with random search"),
    (["--strategy", "bogus"], "unknown strategy 'bogus' (known: "),  # the one strategy-name check
])
def test_place_bad_options_are_one_line(tmp_path, extra, culprit):
    net = write(tmp_path, MIXED)
    result = CliRunner().invoke(main, ["place", str(net), "--db", str(tmp_path / "e.db"), "--out", str(tmp_path / "o"),
                                       *extra])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0], result.output


def test_place_missing_network_file_is_one_line(tmp_path):
    result = CliRunner().invoke(main, ["place", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "nope.toml: no such network file" in result.output
