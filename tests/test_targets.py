"""Every QEMU target runs for real: Cortex-M4 (AN386), Cortex-M7 (AN500), Cortex-A53 and
Cortex-A72 (virt, bare-metal AArch64), plus a user's board that extends a core file."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.export import export_best
from edgetune.codegen.placement import fit_problem
from edgetune.codegen.kernels.base import RenderedKernel
from edgetune.hal import load_target
from edgetune.evaluate import Evaluator
from edgetune.session import TuneRequest, tune
from edgetune.targets import get_target, iobuf, target_file
from edgetune.targets.runners import runner_for
from edgetune.tuner import Outcome, TuningDatabase

from faulty import FaultyMatmul

pytestmark = pytest.mark.qemu

NEW_TARGETS = ["cortex-m4", "cortex-m7", "cortex-a53", "cortex-a72"]
EXAMPLE_BOARD = Path(target_file("cortex-m4")).parent / "examples" / "my-m4-board.toml"
CONFIG = {"tile_m": 2, "tile_n": 8, "unroll_k": 2, "vector": "c", "layout": "rowmajor", "compiler": "gcc", "opt": "O2"}


def evaluate(kernel, target, shape_text, config, tmp_path, seed=7):
    shape = kernel.parse_shape(shape_text)
    space = kernel.space(target, shape)
    io = kernel.make_io(shape, np.random.default_rng(seed))
    return Evaluator(kernel, target, shape, space, io, tmp_path)(space.make(config))


def build_once(kernel, target, shape_text, config, workdir):
    shape = kernel.parse_shape(shape_text)
    io = kernel.make_io(shape, np.random.default_rng(3))
    runner = runner_for(target)
    build = runner.build(kernel, shape, io, kernel.render(target, shape, kernel.space(target, shape).make(config)), workdir)
    return build, io


@pytest.mark.parametrize("name", NEW_TARGETS)
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_edge_shape_is_bit_exact_with_every_measured_value(matmul, tmp_path, name, compiler):
    target = get_target(name)
    trial = evaluate(matmul, target, "m=5,n=13,k=7", {**CONFIG, "compiler": compiler}, tmp_path)
    assert trial.outcome is Outcome.OK, trial.error
    for value in ("instructions", "cycles", "energy_uj", "power_mw", "code_bytes", "ram_bytes"):
        assert trial.values[value] > 0, value
    # The mix accounts for every counted instruction, and the estimate follows from it.
    assert sum(trial.values["mix"].values()) == trial.values["instructions"]
    estimate = target.cost.estimate(trial.values["mix"], target.core.clock_hz)
    assert trial.values["cycles"] == pytest.approx(estimate.cycles, abs=0.1)
    # The per-class energies are tied to the target's power envelope: a busy kernel draws
    # more than idle and at most 1.5x the active figure.
    assert target.power.idle_mw < trial.values["power_mw"] <= 1.5 * target.power.active_mw


@pytest.mark.parametrize("name", NEW_TARGETS)
def test_the_space_offers_only_legal_points(matmul, name):
    target = get_target(name)
    space = matmul.space(target, matmul.parse_shape("m=16,n=16,k=32"))
    values = {p.name: tuple(p.values) for p in space.params}
    assert "mve" not in values["vector"]  # no MVE on M4, M7, A53 or A72
    # NEON where the target file describes it (the A-cores).
    assert ("neon" in values["vector"]) == name.startswith("cortex-a")
    # The DSP extension's path exactly where the HAL lists it (M4 and M7; A-profile has none).
    assert ("dsp" in values["vector"]) == target.has_extension("dsp") == name.startswith("cortex-m")
    assert values["compiler"] == tuple(c.name for c in target.compilers)


@pytest.mark.parametrize("built_for, run_on", [("cortex-m4", "cortex-m7"), ("cortex-a53", "cortex-a72")])
def test_one_image_counts_the_same_on_both_machines(matmul, tmp_path, built_for, run_on):
    # docs/measurements.md: an500 runs AN386 images with identical counts; QEMU models no
    # pipeline, so a53 and a72 count alike. Estimated cycles differ: the cost models do.
    build, io = build_once(matmul, get_target(built_for), "m=8,n=8,k=16", CONFIG, tmp_path)
    first, _ = runner_for(get_target(built_for)).run(build, io)
    second, _ = runner_for(get_target(run_on)).run(build, io)
    assert first["instructions"] == second["instructions"]
    assert first["mix"] == second["mix"]
    assert first["cycles"] != second["cycles"]


def test_a53_counts_and_estimates_repeat_and_grow_with_the_work(matmul, tmp_path):
    a53 = get_target("cortex-a53")
    small = [evaluate(matmul, a53, "m=4,n=8,k=16", CONFIG, tmp_path).values for _ in range(2)]
    large = evaluate(matmul, a53, "m=8,n=8,k=16", CONFIG, tmp_path).values
    assert small[0] == small[1]  # instructions, mix, cycles and energy alike
    for value in ("instructions", "cycles", "energy_uj"):
        assert large[value] > small[0][value]


def test_targets_json_lists_six_targets_with_memory_vector_units_and_power():
    result = CliRunner().invoke(main, ["targets", "--json"])
    assert result.exit_code == 0, result.output
    targets = {t["name"]: t for t in json.loads(result.output)}
    # The six core targets, plus boards reached over a serial port (the emulated AN547 example).
    # and the A72 under Linux, counted in QEMU's user mode.
    assert set(targets) == {"cortex-m4", "cortex-m7", "cortex-m55", "cortex-a53", "cortex-a72", "host", "an547-serial",
                            "cortex-a72-linux"}
    assert targets["an547-serial"]["runner"] == "serial"
    assert targets["cortex-a72-linux"]["runner"] == "qemu-user"
    for name in NEW_TARGETS + ["cortex-m55"]:
        t = targets[name]
        assert t["memory"] and t["power"]["active_mw"] > t["power"]["idle_mw"] and t["cost"]["source"]
        assert "cycles" in t["measured_values"] and "energy_uj" in t["measured_values"]
    assert [v["name"] for v in targets["cortex-a53"]["vector_units"]] == ["neon"]
    assert [v["name"] for v in targets["cortex-a72"]["vector_units"]] == ["neon"]
    assert targets["cortex-m4"]["vector_units"] == [] and targets["cortex-m7"]["vector_units"] == []
    assert targets["cortex-m4"]["core"]["clock_hz"] == 25_000_000


@pytest.mark.parametrize("fault, outcome", [("trap", Outcome.CRASH), ("hang", Outcome.TIMEOUT),
                                            ("zeros", Outcome.WRONG_ANSWER)])
def test_a64_faults_become_classified_failed_trials(tmp_path, fault, outcome):
    # The A64 exception vectors exit through semihosting with the fault status; a hang is
    # killed at the (shortened) timeout; a wrong answer exits normally and fails the check.
    quick = load_target(target_file("cortex-a53"), overrides={"runner": {"timeout_s": 3}})
    trial = evaluate(FaultyMatmul(fault, always=True), quick, "m=4,n=4,k=4", {**CONFIG, "tile_n": 4}, tmp_path)
    assert trial.outcome is outcome, trial.error


def test_example_user_board_loads_and_tunes(tmp_path):
    board = load_target(EXAMPLE_BOARD)
    m4 = get_target("cortex-m4")
    assert board.name == "my-m4-board" and board.core.clock_hz == 168_000_000
    assert [m.size for m in board.memory] == [1024 * 1024, 192 * 1024]
    assert board.core.isa == m4.core.isa and board.compilers == m4.compilers  # inherited
    assert board.cost.static_mw == 2.0 and board.cost.classes == m4.cost.classes
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--target", str(EXAMPLE_BOARD), "--shape", "m=8,n=8,k=16",
                                       "--budget", "2", "--db", str(tmp_path / "t.db"), "--json"])
    assert result.exit_code == 0, result.output
    best = json.loads(result.output)["best"]
    assert json.loads(result.output)["target"] == "my-m4-board"
    assert best["instructions"] > 0 and best["energy_uj"] > 0


@pytest.mark.smoke
@pytest.mark.parametrize("name", NEW_TARGETS)
def test_cli_tune_succeeds_on_every_new_target(tmp_path, name):
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--target", name, "--shape", "m=16,n=16,k=32",
                                       "--budget", "6", "--db", str(tmp_path / "t.db"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["trials"] == 6 and data["failed"] == 0, data["failures"]
    for value in ("instructions", "cycles", "energy_uj", "code_bytes", "ram_bytes"):
        assert data["best"][value] > 0


def test_objective_and_constraint_pick_the_best_feasible_trial(tmp_path):
    db = str(tmp_path / "t.db")
    args = ["--target", "cortex-m4", "--shape", "m=8,n=8,k=16", "--db", db, "--json"]
    result = CliRunner().invoke(main, ["tune", "matmul_s8", *args, "--budget", "6", "--seed", "5"])
    assert result.exit_code == 0, result.output
    stored = TuningDatabase(db)
    (workload,) = stored.workloads()
    trials = [t for t in stored.trials(workload) if not t.outcome.failed]
    sizes = sorted(t.values["code_bytes"] for t in trials)
    limit = sizes[len(sizes) // 2]  # about half the trials are within the bound
    feasible = [t for t in trials if t.values["code_bytes"] <= limit]
    result = CliRunner().invoke(main, ["best", "matmul_s8", *args, "--objective", "energy_uj",
                                       "--constraint", f"code_bytes<={limit}"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["objective"] == "energy_uj" and data["constraints"] == [f"code_bytes<={limit}"]
    assert data["infeasible"] == len(trials) - len(feasible)
    assert data["best"]["energy_uj"] == min(t.values["energy_uj"] for t in feasible)
    assert data["best"]["code_bytes"] <= limit


@pytest.mark.parametrize("extra, culprit", [
    (["--objective", "joules"], "'joules'"),
    (["--constraint", "energy_uj<3"], "'energy_uj<3'"),
    (["--constraint", "energy_uj<=lots"], "'energy_uj<=lots'"),
    (["--constraint", "cycles<=10", "--target", "host"], "'cycles'"),
    (["--objective", "time_ns"], "'time_ns'"),
])
def test_bad_objective_or_constraint_is_one_line_naming_it(tmp_path, extra, culprit):
    args = ["tune", "matmul_s8", "--target", "cortex-m4", "--shape", "m=4,n=4,k=4", "--db", str(tmp_path / "t.db")]
    result = CliRunner().invoke(main, args + extra)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0], result.output
    assert not (tmp_path / "t.db").exists()  # refused before anything was opened


@pytest.mark.parametrize("name", ["cortex-a53", "cortex-m4"])
def test_export_builds_for_the_target_and_matches_numpy(matmul, tmp_path, name):
    target = get_target(name)
    db = TuningDatabase(tmp_path / "t.db")
    shape = matmul.parse_shape("m=5,n=13,k=7")
    tune(TuneRequest(matmul, target, shape, "random", 3, 2, 1), db)
    result = export_best(db, target, tmp_path / "export", objective="instructions")
    io = matmul.make_io(shape, np.random.default_rng(99), edge="extreme")  # inputs never seen while tuning
    workdir = tmp_path / "build"
    workdir.mkdir()
    runner = runner_for(target)
    # A packed-layout variant is called with packed weights, as firmware would call it.
    (entry,) = json.loads((result.folder / "manifest.json").read_text())["kernels"]
    deployed = matmul.deployed_io(io, matmul.tuning_space(target, shape).make(entry["config"]))
    values, raw = runner.run(runner.build_export(matmul, shape, deployed, result.folder, workdir), deployed)
    assert np.array_equal(iobuf.unpack_outputs(io, raw)[0], matmul.reference(shape, io)[0])
    assert values["instructions"] > 0


LIBC_BODY = """
#include <stdint.h>
#include "kernel.h"
void *memset(void *dest, int byte, unsigned long n);
void *memcpy(void *dest, const void *src, unsigned long n);
void *memmove(void *dest, const void *src, unsigned long n);
{decl}
{{
    (void)b; (void)bias; (void)a_zero; (void)b_zero; (void)c_zero; (void)multiplier; (void)shift;
    volatile unsigned long fill = 37, copy = 27, move = 20; /* runtime sizes: real calls */
    memset(c, 0x5a, fill);
    memcpy(c + 37, a + 3, copy);
    memmove(c + 1, c + 30, move);   /* forward: source above destination */
    memmove(c + 45, c + 40, move - 4); /* backward: overlapping, destination above source */
}}
"""


class LibcCalls(FaultyMatmul):
    """Calls the A64 start-up's memset/memcpy/memmove with odd sizes and overlaps."""

    def __init__(self):
        super().__init__("zeros", always=True)

    def render(self, target, shape, config, **kwargs):
        fn = self.function_name(shape)
        decl = self.declaration(shape, fn=fn)
        return RenderedKernel(LIBC_BODY.format(decl=decl), fn, decl, str(config["compiler"]), (f"-{config['opt']}",))


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_a64_memset_memcpy_memmove_behave_like_the_c_library(tmp_path, compiler):
    a53, kernel = get_target("cortex-a53"), LibcCalls()
    build, io = build_once(kernel, a53, "m=8,n=8,k=8", {**CONFIG, "compiler": compiler}, tmp_path)
    _, raw = runner_for(a53).run(build, io)
    a = io.buffers[0].data.view(np.uint8).ravel()
    want = np.zeros(64, dtype=np.uint8)
    want[:37] = 0x5A
    want[37:64] = a[3:30]
    want[1:21] = want[30:50].copy()
    want[45:61] = want[40:56].copy()
    assert np.array_equal(np.frombuffer(raw, dtype=np.uint8), want)


def test_buffers_in_slower_memory_cost_stalls_not_instructions(matmul, tmp_path):
    # The same variant with its I/O block in the M55's DTCM (zero wait) and in SRAM2 (2 wait
    # states, an estimate): identical instructions and mix; the loads and stores that touch
    # the buffers are charged to SRAM2, and each costs its region's wait states.
    m55 = get_target("cortex-m55")
    slow = load_target(target_file("cortex-m55"), overrides={"firmware": {"io_regions": ["sram2"]}})
    config = {**CONFIG, "vector": "mve"}
    fast_trial = evaluate(matmul, m55, "m=8,n=8,k=16", config, tmp_path)
    slow_trial = evaluate(matmul, slow, "m=8,n=8,k=16", config, tmp_path)
    fast, slower = fast_trial.values, slow_trial.values
    assert fast_trial.outcome is Outcome.OK and slow_trial.outcome is Outcome.OK, slow_trial.error
    assert fast["instructions"] == slower["instructions"] and fast["mix"] == slower["mix"]
    assert "sram2" not in fast["accesses"] and slower["accesses"]["sram2"] > 0
    assert sum(fast["accesses"].values()) == sum(slower["accesses"].values())
    sram2 = slow.region("sram2")
    assert slower["cycles"] == pytest.approx(fast["cycles"] + slower["accesses"]["sram2"] * sram2.wait_states, abs=0.2)
    assert slower["energy_uj"] > fast["energy_uj"]


def _one_region_board(tmp_path: Path, region: str = "dtcm") -> Path:
    path = tmp_path / "one-region.toml"
    path.write_text(f'extends = "cortex-m55"\nname = "one-region"\n[firmware]\nio_regions = ["{region}"]\n')
    return path


def test_a_workload_no_io_region_holds_is_refused_once_before_any_trial(tmp_path):
    """A 646 KB I/O block in a board whose only I/O region (DTCM) has 448 KiB free: one line
    naming the region, exit 2, nothing stored; it used to be one too_large trial per variant."""
    db = tmp_path / "t.db"
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--target", str(_one_region_board(tmp_path)),
                                       "--shape", "m=800,n=800,k=8", "--budget", "9", "--db", str(db)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "firmware.io_regions" in lines[0] and "dtcm 458752" in lines[0] and "one-region.toml" in lines[0]
    assert not db.exists() or TuningDatabase(db).workloads() == []


def test_a_workload_some_placement_holds_is_not_refused(matmul, tmp_path):
    shape = matmul.parse_shape("m=800,n=800,k=8")
    io = matmul.make_io(shape, np.random.default_rng(0))
    assert "dtcm" in fit_problem(load_target(_one_region_board(tmp_path)), io)
    assert fit_problem(get_target("cortex-m55"), io) is None  # sram2 holds it
    assert fit_problem(get_target("host"), io) is None  # the host places nothing


def _host_with_timeout(seconds: float):
    from dataclasses import replace
    host = get_target("host")
    return replace(host, runner=replace(host.runner, timeout_s=seconds))


def test_timeouts_under_a_smaller_limit_are_measured_again_when_it_grows(tmp_path):
    """A target file with too short a timeout stores every variant as a timeout; those say
    nothing about the configurations, so once the limit grows they are measured again (and
    under the same limit they stand). The hanging kernel times out under any limit: the
    counts, not the timing, are what is checked."""
    hang = FaultyMatmul("hang", always=True)
    shape = hang.parse_shape("m=2,n=2,k=2")
    db = TuningDatabase(tmp_path / "t.db")
    first = tune(TuneRequest(hang, _host_with_timeout(0.5), shape, budget=2, jobs=2, seed=3), db)
    assert first.failures == {"timeout": 2} and first.new_trials == 2
    assert {t.info["timeout_limit_s"] for t in db.trials(first.workload)} == {0.5}
    same = tune(TuneRequest(hang, _host_with_timeout(0.5), shape, budget=2, jobs=2, seed=3), db)
    assert same.new_trials == 0 and same.trials == 2
    longer = tune(TuneRequest(hang, _host_with_timeout(1.0), shape, budget=2, jobs=2, seed=3), db)
    assert longer.new_trials == 2 and longer.trials == 2 and longer.failures == {"timeout": 2}
    assert {t.info["timeout_limit_s"] for t in db.trials(first.workload)} == {1.0}
    shorter = tune(TuneRequest(hang, _host_with_timeout(0.5), shape, budget=2, jobs=2, seed=3), db)
    assert shorter.new_trials == 0  # a timeout under a larger limit is a result under a smaller one


def test_a_stored_timeout_gives_way_only_to_a_trial_under_a_larger_limit(tmp_path):
    from edgetune.tuner import Config, Trial, Workload
    db = TuningDatabase(tmp_path / "t.db")
    workload = Workload("matmul_s8", 1, "host", (("m", 2),), "x")
    config = Config((("tile_m", 1),))
    timeout = Trial(config, Outcome.TIMEOUT, info={"timeout_limit_s": 1.0})
    assert db.record(workload, timeout, "random", 0)
    assert not db.record(workload, Trial(config, Outcome.TIMEOUT, info={"timeout_limit_s": 1.0}), "random", 0)
    assert not db.record(workload, Trial(config, Outcome.OK, {"time_ns": 5.0}, info={"timeout_limit_s": 0.5}),
                         "random", 0)
    assert db.record(workload, Trial(config, Outcome.OK, {"time_ns": 5.0}, info={"timeout_limit_s": 2.0}), "random", 0)
    (stored,) = db.trials(workload)
    assert stored.outcome is Outcome.OK
    assert not db.record(workload, Trial(config, Outcome.OK, {"time_ns": 4.0}, info={"timeout_limit_s": 9.0}),
                         "random", 0)  # a result is never replaced
