"""Vela runs for real: estimates parsed into values, refusals recorded as failed trials,
and `edgetune tune --device` with the same database and strategies as CPU kernels."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.npu import build_model, get_npu_operator, npu_space
from edgetune.hal import NpuMemoryMode
from edgetune.npu.session import npu_workload
from edgetune.session import TuneRequest, tune
from edgetune.targets.toolchain import MeasureError
from edgetune.targets.vela import VelaOptions, compile_model
from edgetune.tuner import Outcome, Trial, TuningDatabase

CONV = "h=16,w=16,cin=16,cout=32,kh=3,kw=3,stride=1,pad=1,dilation=1"


@pytest.fixture(scope="module")
def conv_model():
    op = get_npu_operator("conv2d_s8")
    return build_model(op.model(op.parse_shape(CONV), np.random.default_rng(0)))


def compile_conv(m55, model, tmp_path, npu="ethos-u55", macs=128, mode="Shared_Sram", optimise="Performance"):
    return compile_model(model, "conv2d_s8", m55, m55.npu(npu), VelaOptions(macs, mode, optimise, 131072, "HillClimb"),
                         tmp_path / f"{npu}-{macs}-{mode}-{optimise}")


def test_estimates_scale_with_the_mac_configuration(m55, conv_model, tmp_path):
    cycles = {}
    for macs in m55.npu("ethos-u55").macs_per_cycle:
        result = compile_conv(m55, conv_model, tmp_path, macs=macs)
        values = result.values
        assert values["layer_macs"] == 16 * 16 * 32 * 3 * 3 * 16
        assert values["total_cycles"] >= values["npu_cycles"] > 0
        assert values["sram_bytes"] > 0 and values["npu_layers"] == 1
        # Shared_Sram keeps the weights in flash: Vela reports off-chip memory and traffic.
        assert values["offchip_bytes"] > 0 and values["offchip_traffic_bytes"] > 0
        assert result.compiled.read_bytes()[4:8] == b"TFL3"
        cycles[macs] = values["npu_cycles"]
    # Twice the MACs: fewer cycles, but less than twice as few (memory and overheads).
    ordered = [cycles[m] for m in sorted(cycles)]
    assert all(a > b for a, b in zip(ordered, ordered[1:])), cycles
    assert ordered[0] / ordered[-1] < 256 / 32


def test_estimates_are_deterministic_and_follow_the_memory_mode(m55, conv_model, tmp_path):
    a = compile_conv(m55, conv_model, tmp_path / "a", mode="Sram_Only").values
    b = compile_conv(m55, conv_model, tmp_path / "b", mode="Sram_Only").values
    assert a == b
    assert a["offchip_bytes"] == 0 and a["offchip_traffic_bytes"] == 0  # Sram_Only: nothing off chip


def test_vela_refusing_an_operator_is_a_compile_error(m55, tmp_path):
    op = get_npu_operator("matmul_s8")
    model = build_model(op.model(op.parse_shape("m=1,n=4,k=70000"), np.random.default_rng(0)))
    with pytest.raises(MeasureError) as info:
        compile_model(model, "matmul_s8", m55, m55.npu("ethos-u55"),
                      VelaOptions(128, "Shared_Sram", "Performance", 131072, "HillClimb"), tmp_path)
    assert info.value.outcome is Outcome.COMPILE_ERROR
    assert "FullyConnected" in info.value.message and "NPU" in info.value.message


def test_a_configuration_vela_rejects_is_a_failed_trial(m55, tmp_path):
    # A board file that (wrongly) offers Dedicated_Sram on a U55 whose axi1 is read-only flash:
    # Vela refuses an arena there, and the trial records its reason.
    u55 = m55.npu("ethos-u55")
    bad = replace(u55, memory_modes=(NpuMemoryMode("Dedicated_Sram", "axi1", "axi1", "axi0"), *u55.memory_modes))
    target = replace(m55, npus=(bad,))
    op = get_npu_operator("dwconv2d_s8")
    shape = op.parse_shape("h=8,w=8,c=8,kh=3,kw=3,stride=1,pad=1,dilation=1")
    db = TuningDatabase(tmp_path / "e.db")
    summary = tune(TuneRequest(op, target, shape, strategy="exhaustive", budget=2, device=bad.name, macs=32), db)
    assert summary.trials == 2 and summary.failures == {"compile": 2} and summary.best is None
    for trial in db.trials(summary.workload):
        assert trial.config["memory_mode"] == "Dedicated_Sram"
        assert "arena_mem_area" in trial.error


def test_space_is_limited_by_the_hal(m55):
    op = get_npu_operator("conv2d_s8")
    shape = op.parse_shape(CONV)
    u55 = npu_space(m55, m55.npu("ethos-u55"), op, shape)
    assert u55.param("macs").values == (32, 64, 128, 256)
    assert "Dedicated_Sram" not in u55.param("memory_mode").values
    assert "Dedicated_Sram" in npu_space(m55, m55.npu("ethos-u65"), op, shape).param("memory_mode").values
    assert npu_space(m55, m55.npu("ethos-u55"), op, shape, macs=64).param("macs").values == (64,)
    small = replace(m55, memory=tuple(replace(r, size=65536) if r.name == "sram" else r for r in m55.memory))
    space = npu_space(small, small.npu("ethos-u55"), op, shape)
    assert all(c["arena_cache_size"] <= 65536 for c in space)  # the cache must fit the SRAM behind axi0


def cli(*args):
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.mark.smoke
def test_tune_device_reports_npu_estimates_and_resumes(tmp_path):
    db = str(tmp_path / "npu.db")
    args = ["tune", "conv2d_s8", "--target", "cortex-m55", "--device", "ethos-u55", "--shape", CONV,
            "--budget", "4", "--jobs", "2", "--seed", "3", "--db", db, "--json"]
    code, out = cli(*args)
    assert code == 0, out
    first = json.loads(out)
    assert first["trials"] == 4 and first["new_trials"] == 4 and first["objective"] == "total_cycles"
    best = first["best"]
    assert {"npu_cycles", "total_cycles", "sram_bytes"} <= set(best)
    assert set(best["config"]) == {"macs", "memory_mode", "optimise", "arena_cache_size", "tensor_allocator"}
    assert best["compiler_version"].startswith("vela ")
    code, out = cli(*args)
    again = json.loads(out)
    assert again["new_trials"] == 0 and again["best"]["config"] == best["config"]
    assert again["best"]["total_cycles"] == best["total_cycles"]
    code, out = cli("best", "conv2d_s8", "--device", "ethos-u55", "--shape", CONV, "--db", db, "--json")
    assert code == 0 and json.loads(out)["best"]["trial_id"] == best["trial_id"]
    # The stored trials are the same workload the library computes.
    from edgetune.targets import get_target
    target = get_target("cortex-m55")
    op = get_npu_operator("conv2d_s8")
    workload = npu_workload(op, target, target.npu("ethos-u55"), op.parse_shape(CONV))
    assert len(TuningDatabase(db).trials(workload)) == 4


def test_same_seed_same_configurations(tmp_path):
    results = []
    for name in ("a", "b"):
        code, out = cli("tune", "matmul_s8", "--device", "ethos-u65", "--shape", "m=4,n=16,k=32", "--budget", "3",
                        "--seed", "7", "--db", str(tmp_path / f"{name}.db"), "--json")
        assert code == 0, out
        results.append(json.loads(out)["best"])
    assert results[0]["config"] == results[1]["config"] and results[0]["total_cycles"] == results[1]["total_cycles"]


@pytest.mark.parametrize("args, culprit", [
    (["--device", "ethos-u85", "--shape", "m=1,n=1,k=1"], "ethos-u85"),
    (["--device", "ethos-u55", "--shape", "m=1,n=1"], "'k'"),
])
def test_bad_npu_input_is_one_line(tmp_path, args, culprit):
    code, out = cli("tune", "matmul_s8", *args, "--db", str(tmp_path / "e.db"))
    assert code == 2
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and culprit in lines[0], out
    assert not (tmp_path / "e.db").exists()  # rejected before anything was written


def test_unknown_npu_operator_is_one_line(tmp_path):
    code, out = cli("tune", "softmax_s8", "--device", "ethos-u55", "--shape", "n=4", "--db", str(tmp_path / "e.db"))
    assert code == 2 and "softmax_s8" in out and len(out.strip().splitlines()) == 1


# --- one tuning pipeline: the NPU gets what CPU tuning has ----------------------------------
MATMUL = "m=4,n=16,k=32"


def u65_matmul():
    from edgetune.targets import get_target
    target = get_target("cortex-m55")
    op = get_npu_operator("matmul_s8")
    shape = op.parse_shape(MATMUL)
    return target, op, shape, npu_space(target, target.npu("ethos-u65"), op, shape)


def test_a_lost_npu_trial_is_measured_again(tmp_path):
    target, op, shape, space = u65_matmul()
    db = TuningDatabase(tmp_path / "lost.db")
    workload = npu_workload(op, target, target.npu("ethos-u65"), shape)
    lost = list(space)[5]
    db.record(workload, Trial(lost, Outcome.EMULATOR_LOST, error="killed from outside"), "random", 0)
    summary = tune(TuneRequest(op, target, shape, "random", budget=2, seed=1, device="ethos-u65"), db)
    again = {t.config: t for t in db.trials(workload)}[lost]
    # Measured again in its place: the lost row does not count as a result, nor take a new budget slot.
    assert again.outcome is Outcome.OK and again.values["total_cycles"] > 0
    assert summary.trials == 2 and summary.failures == {}


def test_initial_configurations_are_measured_first_on_the_npu(tmp_path):
    _, _, _, space = u65_matmul()
    seed = list(space)[7].as_dict()
    text = ",".join(f"{k}={v}" for k, v in seed.items())
    code, out = cli("tune", "matmul_s8", "--device", "ethos-u65", "--shape", MATMUL, "--budget", "1",
                    "--initial", text, "--db", str(tmp_path / "i.db"), "--json")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["trials"] == 1 and summary["best"]["config"] == seed


def test_a_bad_initial_configuration_on_the_npu_is_one_line(tmp_path):
    code, out = cli("tune", "matmul_s8", "--device", "ethos-u65", "--shape", MATMUL, "--initial", "macs=3",
                    "--db", str(tmp_path / "e.db"))
    assert code == 2 and len(out.strip().splitlines()) == 1 and "'3' is not a value of parameter 'macs'" in out
    assert not (tmp_path / "e.db").exists()


@pytest.mark.parametrize("extra, reason", [
    (["--time-budget", "1e-9"], "time"),
    (["--patience", "1"], "patience"),
])
def test_npu_tuning_stops_by_the_same_rules(tmp_path, extra, reason):
    code, out = cli("tune", "matmul_s8", "--device", "ethos-u65", "--shape", MATMUL, "--budget", "100",
                    "--strategy", "random", *extra, "--db", str(tmp_path / "s.db"), "--json")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["stopped"] == reason and summary["trials"] < 100
