"""`edgetune place MODEL.tflite`: every operator planned, NPU layers compiled by Vela from
the model's own weights, boards without an NPU planned all on the CPU."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.model import load_model
from edgetune.model.graph import read_graph
from edgetune.model import op_measure
from edgetune.model import plan as model_plan
from edgetune.model.export import export_model
from edgetune.model.verify import operator_model, verify_model
from edgetune.hal import load_target
from edgetune.targets import buildcache, get_target, target_file
from edgetune.targets.toolchain import ToolMissing
from edgetune.model.plan import npu_option
from edgetune.session import goal_of, workload_of
from edgetune.targets.vela import compile_model
from edgetune.tuner import TuningDatabase

from model_files import chain_model, network_model, write


def _place(*args):
    return CliRunner().invoke(main, ["place", *map(str, args)])


def _tune(model: Path, target: str, db: Path, budget: int) -> None:
    result = CliRunner().invoke(main, ["model", "tune", str(model), "--target", target, "--budget", str(budget),
                                       "--db", str(db), "--jobs", "1", "--no-check", "--json"])
    assert result.exit_code == 0, result.output


def _stored_best(db_path: Path, target, layer) -> int:
    kernel = get_kernel(layer.kernel)
    workload = workload_of(kernel, target, kernel.parse_shape(dict(layer.shape)))
    db = TuningDatabase(db_path)
    goal = goal_of(db, workload, target, "", ())
    return int(np.ceil(db.best(workload, goal.objective, goal.allows).trial.values[target.measures]))


@pytest.mark.qemu
def test_place_a_model_on_the_m55_with_its_npu(tmp_path, m55):
    model_path = write(tmp_path, "chain.tflite", chain_model(np.random.default_rng(3)))
    db = tmp_path / "t.db"
    _tune(model_path, "cortex-m55", db, 3)
    result = _place(model_path, "--target", "cortex-m55", "--db", db, "--out", tmp_path / "plan", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    model = load_model(model_path)
    assert [row["index"] for row in plan["operators"]] == [layer.index for layer in model.layers]
    for row, layer in zip(plan["operators"], model.layers):
        assert row["cpu_cycles"] == _stored_best(db, m55, layer)  # the database's best trial
        assert row["npu_cycles"] and row["npu_cycles"] > 0  # Vela compiled the real layer
        chosen = row["cpu_cycles"] if row["device"] == "cpu" else row["compute_cycles"]
        assert row["compute_cycles"] == chosen
    totals = sum(r["compute_cycles"] + r["invoke_cycles"] + r["copy_in_cycles"] for r in plan["operators"])
    assert plan["total_cycles"] == totals + plan["copy_out_cycles"]
    # The plan is the cheapest: never worse than everything on either side.
    assert plan["total_cycles"] <= plan["all_cpu_cycles"] and plan["total_cycles"] <= plan["all_npu_cycles"]
    for row in plan["operators"]:
        if row["device"] == "npu":
            assert (tmp_path / "plan" / row["model"]).read_bytes()[4:8] == b"TFL3"


def test_vela_receives_the_layers_own_weights(tmp_path, m55, monkeypatch):
    model_path = write(tmp_path, "chain.tflite", chain_model(np.random.default_rng(5)))
    layer = load_model(model_path).layers[1]
    npu = m55.npu("ethos-u55")
    compiled_models = []

    def spy(model, *args):
        compiled_models.append(model)
        return compile_model(model, *args)

    monkeypatch.setattr(model_plan, "compile_model", spy)
    option = npu_option(layer, m55, npu, max(npu.macs_per_cycle))
    assert option.cycles is not None and option.compiled[4:8] == b"TFL3", option.note
    assert len(compiled_models) == len(npu.memory_modes) and set(compiled_models) == {option.model}
    given = read_graph(write(tmp_path, "given", compiled_models[0]))  # what Vela was given
    sent = [t.data for t in given.tensors if t.constant]
    own = [t.data for t in layer.tensors if t is not None and t.constant]
    assert sent == own and len(own) == 2  # weights and bias, byte for byte
    weights = next(t for t in layer.tensors if t is not None and t.constant and t.dtype == "int8")
    assert weights.data in option.model  # the bytes are stored in the model Vela compiled


@pytest.mark.qemu
def test_place_a_model_on_a_board_without_an_npu_is_all_cpu(tmp_path, m4, own_cache):
    model_path = write(tmp_path, "net.tflite", network_model(np.random.default_rng(1)))
    db = tmp_path / "t.db"  # empty: tuned layers cost their plain loop, measured
    result = _place(model_path, "--target", "cortex-m4", "--db", db, "--out", tmp_path / "plan")
    assert result.exit_code == 0, result.output
    assert "all on the CPU" in result.output and "-> NPU" not in result.output
    assert "plain C loop nest" in result.output and "estimate: 1 cycle per element" not in result.output
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert {row["device"] for row in plan["operators"]} == {"cpu"}
    assert plan["npu"] is None and plan["total_cycles"] == plan["all_cpu_cycles"]
    model = load_model(model_path)
    for row, layer in zip(plan["operators"], model.layers):
        if layer.kernel is None:  # a library operator: what the emulator counts of it alone
            assert row["cpu_basis"] == "measured" and "run alone on cortex-m4" in row["cpu_note"]
            assert row["cpu_cycles"] == _alone(tmp_path, model, layer, m4), row
        else:
            assert row["cpu_basis"] == "plain-loop"
    softmax = next(r for r in plan["operators"] if r["op"] == "SOFTMAX")
    assert softmax["cpu_cycles"] != 4 + 4  # not the estimate (4 elements read, 4 written)
    assert "CPU figures: 5 plain loop (measured), 3 measured alone" in result.output
    assert not (tmp_path / "plan" / "npu").exists()


def _alone(tmp_path: Path, model, layer, target) -> int:
    """The operator alone in a model, exported and run in the emulator: its instruction count."""
    data, _ = operator_model(model, layer.operator)
    path = write(tmp_path, f"alone{layer.index}.tflite", data)
    export_model(path, target, None, tmp_path / f"alone{layer.index}", name="alone")
    outcome = verify_model(tmp_path / f"alone{layer.index}", target, n_inputs=1)
    assert outcome.ok, outcome
    return outcome.inferences[0].instructions


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A cache folder of the test's own: nothing another test measured is found in it."""
    monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.qemu
def test_place_measures_library_operators_once(tmp_path, own_cache, monkeypatch):
    model_path = write(tmp_path, "net.tflite", network_model(np.random.default_rng(1)))
    args = ("--target", "cortex-m4", "--db", tmp_path / "t.db", "--json")
    first = json.loads(_place(model_path, *args, "--out", tmp_path / "p1").output)
    library = [r for r in first["operators"] if r["kernel"] is None]
    assert library and all(r["cpu_basis"] == "measured" and r["cpu_note"].startswith("measured:") for r in library)
    assert len(list((own_cache / "op-counts").glob("*.json"))) == len(library)
    assert {u.part: u.entries for u in buildcache.usage(own_cache)}["op-counts"] == len(library)  # `cache info`

    def measured_again(*args):
        raise AssertionError("a cached operator was measured again")

    monkeypatch.setattr(op_measure, "_run_alone", measured_again)
    result = _place(model_path, *args, "--out", tmp_path / "p2")
    assert result.exit_code == 0, result.output
    second = json.loads(result.output)
    for a, b in zip(first["operators"], second["operators"]):
        assert a["cpu_cycles"] == b["cpu_cycles"]
        if a["kernel"] is None:
            assert b["cpu_note"].startswith("cached measurement:"), b


@pytest.mark.qemu
def test_place_falls_back_to_the_estimate_without_an_emulator(tmp_path, own_cache, monkeypatch):
    model_path = write(tmp_path, "net.tflite", network_model(np.random.default_rng(1)))

    class NoEmulator:
        def check_tools(self):
            raise ToolMissing("qemu-system-arm: not found on PATH")

    monkeypatch.setattr(op_measure, "runner_for", lambda target: NoEmulator())
    result = _place(model_path, "--target", "cortex-m4", "--db", tmp_path / "t.db", "--out", tmp_path / "plan")
    assert result.exit_code == 0, result.output
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    softmax = next(r for r in plan["operators"] if r["op"] == "SOFTMAX")
    assert softmax["cpu_cycles"] == 4 + 4 and softmax["cpu_basis"] == "estimated"  # 4 elements read, 4 written
    assert "not measured: qemu-system-arm: not found on PATH" in softmax["cpu_note"]
    estimated = [r for r in plan["operators"] if r["kernel"] is None]
    assert all(r["cpu_basis"] == "estimated" for r in estimated)
    names = ", ".join(f"op {r['index']} {r['op']}" for r in estimated)
    assert f"3 estimated ({names}: 1 cycle per element, not measured)" in result.output
    assert not (own_cache / "op-counts").exists()


def _path_without(tmp_path: Path, program: str) -> str:
    """A PATH of one folder linking every program on this PATH but `program`."""
    import os
    import shutil

    folder = tmp_path / "bin"
    folder.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        for entry in Path(directory).glob("*") if Path(directory).is_dir() else ():
            link = folder / entry.name
            if entry.name != program and not link.exists() and shutil.which(entry.name) == str(entry):
                link.symlink_to(entry)
    return str(folder)


def test_place_an_untuned_layer_without_the_emulator_is_one_line_naming_it(tmp_path, own_cache, monkeypatch):
    model_path = write(tmp_path, "net.tflite", network_model(np.random.default_rng(1)))
    monkeypatch.setenv("PATH", _path_without(tmp_path, "qemu-system-arm"))
    result = _place(model_path, "--target", "cortex-m4", "--db", tmp_path / "t.db", "--out", tmp_path / "plan")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.strip().splitlines()[-1] == (
        "edgetune: error: operator 0 (CONV_2D): conv2d_s8 has no trial in t.db, and its plain C loop cannot be "
        "measured on cortex-m4: qemu-system-arm: not found on PATH (run scripts/setup.sh to install the toolchains)")


@pytest.mark.qemu
def test_place_ds_cnn_folds_its_shape_chain_and_measures_the_rest(tmp_path, own_cache, m4):
    model_path = Path(__file__).parent / "data" / "models" / "ds_cnn_kws.tflite"
    result = _place(model_path, "--target", "cortex-m4", "--db", tmp_path / "t.db", "--out", tmp_path / "p", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["op"]: r for r in json.loads(result.output)["operators"]}
    for op in ("SHAPE", "STRIDED_SLICE", "PACK"):  # the export computes the RESHAPE's shape: no code
        assert rows[op]["cpu_cycles"] == 0 and rows[op]["cpu_basis"] == "folded"
    model = load_model(model_path)
    pool = next(layer for layer in model.layers if layer.op == "AVERAGE_POOL_2D")
    assert rows["AVERAGE_POOL_2D"]["cpu_cycles"] == _alone(tmp_path, model, pool, m4)
    assert rows["AVERAGE_POOL_2D"]["cpu_cycles"] > 25 * 5 * 64 + 64  # more than the estimate (elements touched)


def test_place_a_model_with_an_unknown_device_is_one_line(tmp_path):
    model_path = write(tmp_path, "chain.tflite", chain_model(np.random.default_rng(3)))
    result = _place(model_path, "--target", "cortex-m55", "--device", "ethos-u99", "--out", tmp_path / "p")
    assert result.exit_code == 2 and "ethos-u99" in result.output and "Traceback" not in result.output


@pytest.mark.qemu
def test_model_report_shows_each_layers_share_tuned_against_plain(tmp_path, m55):
    model_path = write(tmp_path, "chain.tflite", chain_model(np.random.default_rng(3)))
    db = tmp_path / "t.db"
    _tune(model_path, "cortex-m55", db, 3)
    result = CliRunner().invoke(main, ["model", "report", str(model_path), "--target", "cortex-m55", "--db", str(db),
                                       "--out", str(tmp_path / "rep"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    model = load_model(model_path)
    assert [r["index"] for r in report["layers"]] == [layer.index for layer in model.tuned]
    page = (tmp_path / "rep" / "index.html").read_text()
    for row, layer in zip(report["layers"], model.tuned):
        assert row["tuned"] == _stored_best(db, m55, layer)  # the database's figure
        assert row["plain"] > 0  # the plain loop nest, measured (one trial per layer need not beat it)
        assert f"<td>{row['plain'] / row['tuned']:.2f}x</td>" in page
        share = 100 * row["tuned"] / report["tuned_total"]
        assert f"<td>{row['tuned']:.0f}</td><td>{share:.1f}%</td><td>{row['plain']:.0f}</td>" in page
    assert report["tuned_total"] == sum(r["tuned"] for r in report["layers"])
    assert (tmp_path / "rep" / "layers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'src="layers.png"' in page


def test_model_report_without_a_database_is_one_line(tmp_path):
    model_path = write(tmp_path, "chain.tflite", chain_model(np.random.default_rng(3)))
    result = CliRunner().invoke(main, ["model", "report", str(model_path), "--target", "cortex-m55",
                                       "--db", str(tmp_path / "none.db"), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 2 and "none.db" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "rep").exists()


@pytest.mark.parametrize("extra, culprit", [(["--macs", "99"], "--macs"), (["--target", "cortex-m99"], "cortex-m99")])
def test_place_a_model_with_bad_options_is_one_line(tmp_path, extra, culprit):
    model_path = write(tmp_path, "chain.tflite", chain_model(np.random.default_rng(3)))
    result = _place(model_path, "--db", tmp_path / "t.db", "--out", tmp_path / "p", *extra)
    assert result.exit_code == 2 and culprit in result.output and "Traceback" not in result.output
    assert not (tmp_path / "p").exists() and not (tmp_path / "t.db").exists()


def test_place_to_an_out_folder_that_cannot_be_made_is_one_line(tmp_path, own_cache):
    model_path = write(tmp_path, "chain.tflite", chain_model(np.random.default_rng(3)))
    (tmp_path / "blocker").write_text("a file, where the folder's parent would be")
    result = _place(model_path, "--target", "host", "--db", tmp_path / "t.db", "--out", tmp_path / "blocker" / "plan")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.strip().splitlines()[-1].startswith(f"edgetune: error: {tmp_path / 'blocker' / 'plan'}: "
                                                             "cannot create it")


def test_place_asking_for_an_npu_the_board_lacks_is_one_line(tmp_path):
    model_path = write(tmp_path, "chain.tflite", chain_model(np.random.default_rng(3)))
    result = _place(model_path, "--target", "cortex-m4", "--device", "ethos-u55", "--db", tmp_path / "t.db",
                    "--out", tmp_path / "p")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.strip().splitlines()[-1] == ("edgetune: error: --device ethos-u55: cortex-m4 has no NPU (leave "
                                                      "--device out, or --device none, to plan everything on the CPU)")
    assert not (tmp_path / "p").exists() and not (tmp_path / "t.db").exists()


def test_place_a_file_that_is_no_model_is_one_line(tmp_path):
    model_path = write(tmp_path, "broken.tflite", b"\x18\x00\x00\x00TFL3" + b"\x00" * 8)
    result = _place(model_path, "--db", tmp_path / "t.db", "--out", tmp_path / "p")
    assert result.exit_code == 2 and "broken.tflite" in result.output and "Traceback" not in result.output


@pytest.mark.qemu
def test_place_by_cycles_prices_library_operators_from_the_cost_table(tmp_path, own_cache, m55):
    model_path = write(tmp_path, "net.tflite", network_model(np.random.default_rng(1)))
    result = _place(model_path, "--target", "cortex-m55", "--device", "none", "--objective", "cycles",
                    "--db", tmp_path / "t.db", "--out", tmp_path / "p", "--json")
    assert result.exit_code == 0, result.output
    model = load_model(model_path)
    softmax = next(layer for layer in model.layers if layer.op == "SOFTMAX")
    row = json.loads(result.output)["operators"][softmax.index]
    data, _ = operator_model(model, softmax.operator)
    export_model(write(tmp_path, "alone.tflite", data), m55, None, tmp_path / "alone", name="alone")
    first = verify_model(tmp_path / "alone", m55, n_inputs=1).inferences[0]
    assert row["cpu_cycles"] == math.ceil(dict(first.values)["cycles"]) != first.instructions
    assert row["cpu_note"].endswith("cycles run alone on cortex-m55")
    # Cached, and its stored mix priced again by a cost table edited since (the table is no part of the key).
    slower = load_target(target_file("cortex-m55"), overrides={"cost": {"classes": {"alu": {"cycles": 3}}}})
    count = op_measure.measure_library_op(model, softmax, slower, "cycles")
    mix = dict(first.mix)
    assert count.cached and count.value == math.ceil(slower.estimated_values(mix["mix"], mix["accesses"])["cycles"])
    assert count.value > row["cpu_cycles"]


@pytest.mark.qemu
def test_a_library_operators_cache_key_is_its_workload_not_its_place(tmp_path, m4, m55):
    model = load_model(write(tmp_path, "net.tflite", network_model(np.random.default_rng(1))))
    softmax = next(layer for layer in model.layers if layer.op == "SOFTMAX")
    elsewhere = replace(softmax, index=99, operator=replace(softmax.operator, index=99))
    key = op_measure.cache_key(model, softmax, m4)
    assert op_measure.cache_key(model, elsewhere, m4) == key  # the same operator at another index
    assert op_measure.cache_key(model, softmax, m55) != key  # another target (toolchain, memory map)
    pool = next(layer for layer in model.layers if layer.op == "AVERAGE_POOL_2D")
    assert op_measure.cache_key(model, pool, m4) != key


@pytest.mark.qemu
def test_a_library_operator_that_cannot_be_run_alone_keeps_the_estimate_and_says_why(tmp_path, own_cache, monkeypatch):
    model = load_model(write(tmp_path, "net.tflite", network_model(np.random.default_rng(1))))
    softmax = next(layer for layer in model.layers if layer.op == "SOFTMAX")

    def refused(*args, **kwargs):
        raise RuntimeError("Didn't find op for builtin opcode 'SOFTMAX'")

    monkeypatch.setattr(op_measure, "verify_model", refused)
    option = model_plan.library_option(model, softmax, get_target("cortex-m4"), "cpu")
    assert option.basis == "estimated" and option.cycles == 4 + 4
    assert "not measured: TFLite Micro cannot run it alone: Didn't find op" in option.note
    assert not list((own_cache / "op-counts").glob("*.json"))  # nothing stored for it


def test_place_on_the_host_turns_its_times_into_cycles_at_its_clock(tmp_path, own_cache):
    """The host measures time_ns: the plan adds up CPU cycles, so each time is converted at the
    core clock (and the note keeps the time measured), not added up as if it were cycles."""
    import re

    model_path = write(tmp_path, "net.tflite", network_model(np.random.default_rng(1)))
    host = get_target("host")
    result = _place(model_path, "--target", "host", "--db", tmp_path / "t.db", "--json", "--out", tmp_path / "p")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    converted = 0
    for row in plan["operators"]:
        if row["cpu_cycles"] == 0:  # folded
            continue
        ns, cycles = (int(v) for v in re.search(r"(\d+) time_ns.*?(\d+) cycles at", row["cpu_note"]).groups())
        assert row["cpu_cycles"] == cycles == math.ceil(ns * host.core.clock_hz / 1e9), row
        converted += 1
    assert converted >= 3
    assert plan["total_cycles"] == sum(row["cpu_cycles"] for row in plan["operators"])
