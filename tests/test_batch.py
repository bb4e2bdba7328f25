"""Batched evaluation (edgetune.targets.batch): several variants per image and per emulator
boot give exactly the trials one-at-a-time evaluation gives, on the M55 in QEMU and on the
host, with crashes, hangs, wrong answers and build failures in the middle of a batch; a
seeded run with batches and two jobs is reproducible and resumes to the same end."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edgetune.codegen import get_kernel
from edgetune.codegen.kernels.user_loader import load_kernel_file
from edgetune.hal import load_target
from edgetune.evaluate import Evaluator
from edgetune.session import TuneRequest, search_space, tune, workload_inputs, workload_of
from edgetune.targets import batch, get_target, iobuf, target_file
from edgetune.targets.qemu import _read_counts
from edgetune.tuner import Outcome, TuningDatabase

from faulty import FaultyMatmul
from stored import live_claims, stored_count

EDGETUNE = str(Path(sys.executable).parent / "edgetune")
SHAPE = "m=4,n=4,k=4"
# tile_m picks the variant; FaultyMatmul renders its fault for tile_m == 2 (the middle one).
TILES = (1, 4, 2, 1, 4)
OTHERS = [{"tile_n": 4, "unroll_k": 1, "vector": "c", "compiler": "gcc", "opt": "O2"},
          {"tile_n": 2, "unroll_k": 2, "vector": "c", "compiler": "clang", "opt": "O3"},
          {"tile_n": 4, "unroll_k": 1, "vector": "c", "compiler": "gcc", "opt": "O2"},
          {"tile_n": 1, "unroll_k": 4, "vector": "c", "compiler": "gcc", "opt": "Os"},
          {"tile_n": 1, "unroll_k": 1, "vector": "c", "compiler": "clang", "opt": "O2"}]


def evaluator_for(kernel, target, shape_text, tmp_path, name):
    shape = kernel.parse_shape(shape_text)
    space = search_space(kernel, target, shape, target.measures)
    io = workload_inputs(kernel, workload_of(kernel, target, shape))
    folder = tmp_path / name
    folder.mkdir()
    return Evaluator(kernel, target, shape, space, io, folder), space


def faulty_configs(space):
    configs = []
    for tile_m, others in zip(TILES, OTHERS):
        values = {"tile_m": tile_m, "layout": "rowmajor", **others}
        configs.append(space.make({**space.config_at(int(space.legal_indices()[0])).as_dict(), **values}))
    return configs


def assert_same_trials(batched, alone):
    assert [t.config for t in batched] == [t.config for t in alone]
    for got, want in zip(batched, alone):
        assert got.outcome is want.outcome, (got.config.key(), got.error, want.error)
        assert got.values == want.values, got.config.key()
        assert bool(got.error) == bool(want.error)


def both_ways(kernel, target, shape_text, tmp_path, configs_of):
    """(batched trials, one-at-a-time trials, the batching evaluator) of the same configurations."""
    batching, space = evaluator_for(kernel, target, shape_text, tmp_path, "batched")
    single, _ = evaluator_for(kernel, target, shape_text, tmp_path, "alone")
    configs = configs_of(space)
    return batching.evaluate_batch(configs), [single(c) for c in configs], batching


# --- the M55 in QEMU -----------------------------------------------------------------------------
@pytest.mark.qemu
def test_batched_and_alone_give_equal_counts_and_estimates_on_the_m55(matmul, m55, tmp_path):
    """Drawn configurations of every kind (paths, compilers, layouts, buffer placements):
    the same instruction counts, instruction mixes, memory accesses and estimates."""
    def drawn(space):
        indices = np.random.default_rng(11).choice(space.legal_indices(), 10, replace=False)
        return [space.config_at(int(i)) for i in indices]

    shape = matmul.parse_shape("m=8,n=8,k=16")
    space = matmul.tuning_space(m55, shape)  # placements not pinned: several images per batch
    single = Evaluator(matmul, m55, shape, space, workload_inputs(matmul, workload_of(matmul, m55, shape)), tmp_path)
    configs = drawn(space)
    batched = single.evaluate_batch(configs)
    alone = [single(c) for c in configs]
    assert_same_trials(batched, alone)
    assert all(t.outcome is Outcome.OK for t in batched)
    assert all("mix" in t.values and "cycles" in t.values for t in batched)
    placement = [(t.config["weights_in"], t.config["activations_in"]) for t in batched]
    assert len(set(placement)) > 1  # the drawn set spans placements, so images were split by placement
    # One image per placement (ten variants fit one): each trial shares its image with every
    # drawn configuration of its placement, and with no other.
    assert [t.info["batch"] for t in batched] == [placement.count(p) for p in placement]
    assert max(t.info["batch"] for t in batched) >= 2


@pytest.mark.qemu
@pytest.mark.parametrize("fault, outcome", [
    ("trap", Outcome.CRASH),
    ("bad_store", Outcome.CRASH),
    ("hang", Outcome.TIMEOUT),
    ("zeros", Outcome.WRONG_ANSWER),
    ("syntax", Outcome.COMPILE_ERROR),
    ("huge", Outcome.TOO_LARGE),
    ("overrun", Outcome.OVERRUN),  # right answers, one byte written past its output (issue 27)
])
def test_a_fault_mid_batch_is_its_own_trial_and_the_rest_count_as_alone(m55_quick, tmp_path, fault, outcome):
    batched, alone, _ = both_ways(FaultyMatmul(fault), m55_quick, SHAPE, tmp_path, faulty_configs)
    assert_same_trials(batched, alone)
    assert [t.outcome for t in batched] == [Outcome.OK, Outcome.OK, outcome, Outcome.OK, Outcome.OK]
    assert "batch" not in batched[2].info  # measured alone
    if fault in ("trap", "bad_store", "hang", "overrun"):
        # It stopped its image: the two before it kept their results from the image of five,
        # the two after it ran in an image of their own.
        assert [batched[i].info["batch"] for i in (0, 1, 3, 4)] == [5, 5, 2, 2]
    elif fault in ("syntax", "huge"):
        assert [batched[i].info["batch"] for i in (0, 1, 3, 4)] == [4, 4, 4, 4]  # left out of the image


@pytest.mark.qemu
def test_the_batch_size_follows_the_targets_memory(matmul, m55):
    shape = matmul.parse_shape("m=16,n=16,k=32")
    io = matmul.make_io(shape, np.random.default_rng(0))
    plan = iobuf.plan_io(m55, io, None)
    assert batch.fit_by_data(m55, io, plan) == batch.MAX_BATCH  # ~2 KiB blocks: DTCM holds 16
    big = matmul.parse_shape("m=128,n=256,k=512")  # a 160 KiB block: DTCM (448 KiB free) holds 2
    io = matmul.make_io(big, np.random.default_rng(0))
    plan = iobuf.plan_io(m55, io, None)
    fits = batch.fit_by_data(m55, io, plan)
    room = m55.io_capacity(plan.regions[0])
    assert fits == room // batch.strides(io, plan)[0] and 1 <= fits < batch.MAX_BATCH


# --- the host ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def host_quick():
    return load_target(target_file("host"), overrides={"runner": {"timeout_s": 3}})


@pytest.mark.parametrize("fault, outcome", [
    ("trap", Outcome.CRASH),
    ("bad_store", Outcome.CRASH),
    # a hang runs out its timeout twice (batched, then alone): the M55's case above stays in
    # the default tier, this one is slow
    pytest.param("hang", Outcome.TIMEOUT, marks=pytest.mark.slow),
    ("zeros", Outcome.WRONG_ANSWER),
    ("syntax", Outcome.COMPILE_ERROR),
    ("overrun", Outcome.OVERRUN),
])
def test_host_batches_give_the_outcomes_of_one_at_a_time(host_quick, tmp_path, fault, outcome):
    batched, alone, _ = both_ways(FaultyMatmul(fault), host_quick, SHAPE, tmp_path, faulty_configs)
    assert [t.outcome for t in batched] == [t.outcome for t in alone]
    assert [t.outcome for t in batched] == [Outcome.OK, Outcome.OK, outcome, Outcome.OK, Outcome.OK]
    assert all(t.values["time_ns"] > 0 for t in batched if t.outcome is Outcome.OK)
    if fault in ("trap", "bad_store", "hang", "overrun"):
        assert [batched[i].info["batch"] for i in (0, 1, 3, 4)] == [5, 5, 2, 2]


# --- user kernels ------------------------------------------------------------------------------------
@pytest.mark.qemu
def test_a_user_kernel_runs_batched_with_the_counts_of_one_at_a_time(m55, tmp_path):
    kernel = load_kernel_file(Path(__file__).parent.parent / "examples" / "kernels" / "vector_add")

    def some(space):
        return [space.config_at(int(i)) for i in space.legal_indices()[:4]]

    batched, alone, evaluator = both_ways(kernel, m55, "size=64", tmp_path, some)
    assert_same_trials(batched, alone)
    assert all(t.outcome is Outcome.OK and t.info["batch"] == 4 for t in batched)
    assert evaluator.alone_reason == ""


HELPER_KERNEL = '''import edgetune as et

KERNEL = et.KernelDef(
    name="scale_helper", shape=("size",), source="scale.c",
    args=[et.Output("c", "int32", "size"), et.Input("a", "int32", "size"), et.Scalar("n", "size")],
    params={"factor": [1, 2, 3]}, reference=lambda shape, inputs: inputs["a"] * 3, tolerance=0,
    example_shape="size=16", description="a kernel with a global helper of its own")
'''
HELPER_SOURCE = '''#include <stdint.h>
int32_t scale_helper_factor(void) { return 3; }
void scale_helper(int32_t *c, const int32_t *a, int32_t n)
{
    for (int i = 0; i < n; i++) c[i] = a[i] * scale_helper_factor() + 0 * factor;
}
'''


@pytest.mark.qemu
def test_a_kernel_whose_variants_share_a_global_symbol_falls_back_to_one_at_a_time(m55, tmp_path):
    folder = tmp_path / "scale_helper"
    folder.mkdir()
    (folder / "kernel.py").write_text(HELPER_KERNEL)
    (folder / "scale.c").write_text(HELPER_SOURCE)
    kernel = load_kernel_file(folder)

    def every(space):
        return [space.config_at(int(i)) for i in space.legal_indices()]

    batched, alone, evaluator = both_ways(kernel, m55, "size=16", tmp_path, every)
    assert_same_trials(batched, alone)
    assert all(t.outcome is Outcome.OK and "batch" not in t.info for t in batched)
    assert "scale_helper_factor" in evaluator.alone_reason  # the reason names the symbol
    assert evaluator.batches() is False
    later = evaluator.evaluate_batch(every(evaluator.space)[:2])  # the rest of the session: alone, saying why
    assert all("scale_helper_factor" in t.info["batch_refused"] for t in later)


# --- the pieces --------------------------------------------------------------------------------------
def test_images_are_packed_by_code_size_in_proposal_order():
    assert batch.pack_by_code([10, 10, 10], capacity=25, limit=8) == [[0, 1], [2]]
    assert batch.pack_by_code([10] * 5, capacity=100, limit=2) == [[0, 1], [2, 3], [4]]
    assert batch.pack_by_code([50, 5, 5], capacity=20, limit=8) == [[0], [1, 2]]  # too big: alone


def test_a_killed_runs_counts_keep_the_regions_that_closed(tmp_path):
    counts = tmp_path / "counts.txt"
    counts.write_text("pc 0 0x100 2\nregion 2\npc 1 0x200 40\nregion 41\npc 2 0x300 7\nregi")
    read = _read_counts(counts)
    assert read.regions == (2, 41)  # the cut-off line of the region that never closed is ignored
    assert read.pcs_in(1) == {0x200: 40}


def test_the_variant_table_names_each_glue_apart():
    text = batch.variant_table(["int et_glue_check(void);", "int et_glue_check(void);"], [(0x100,), (0x200,)])
    assert text.count("#define et_glue_check et_variant_check_") == 2
    assert "{et_variant_check_1, et_variant_run_1, et_segments_1}" in text
    assert "(uint8_t *)(uintptr_t)0x200u" in text and "et_variant_count = 2u" in text
    assert batch.as_table(text, ()) == text  # a table stays as it is


# --- whole runs: reproducible, resumable -------------------------------------------------------------
TUNE = ["tune", "matmul_s8", "--target", "cortex-m55", "--shape", "m=8,n=8,k=16", "--budget", "12",
        "--jobs", "2", "--seed", "3", "--batch", "3", "--json"]


def stored_rows(path: Path):
    db = TuningDatabase(path)
    (workload,) = db.workloads()
    return sorted((r.trial.config.key(), r.trial.outcome.value, r.trial.values.get("instructions"))
                  for r in db.records(workload))


@pytest.mark.qemu
@pytest.mark.slow
def test_a_batched_seeded_run_repeats_and_resumes_after_kills_to_the_same_end(tmp_path):
    def env(name):
        return {**os.environ, "EDGETUNE_CACHE": str(tmp_path / f"cache-{name}")}

    def run(db: Path, name: str) -> dict:
        out = subprocess.run([EDGETUNE, *TUNE, "--db", str(db)], cwd=tmp_path, env=env(name), capture_output=True,
                             text=True, check=True).stdout
        return json.loads(out)

    first, second = run(tmp_path / "first.db", "first"), run(tmp_path / "second.db", "second")
    assert stored_rows(tmp_path / "first.db") == stored_rows(tmp_path / "second.db")
    assert first["best"]["config"] == second["best"]["config"] and first["trials"] == 12
    killed = tmp_path / "killed.db"
    inside = 0
    # Each run is killed once it has stored one more trial and holds the claims of its next
    # round: between a round's claims and its trials. Waiting on the claims, not on a delay,
    # keeps the kills inside the runs however fast the machine is; a run that ends first
    # (its round stored the last trials) is not counted, and the next run has less to do.
    for _ in range(8):
        if inside >= 3 or stored_count(killed) >= 12:
            break
        target = stored_count(killed) + (1 if inside else 0)
        proc = subprocess.Popen([EDGETUNE, *TUNE, "--db", str(killed)], cwd=tmp_path, env=env("killed"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None and not (stored_count(killed) >= target and live_claims(killed, proc.pid)):
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        inside += proc.wait() == -signal.SIGKILL
    assert inside >= 3  # kills landed inside runs, between a round's claims and its trials
    done = run(killed, "killed")
    assert done["trials"] == 12
    assert stored_rows(killed) == stored_rows(tmp_path / "first.db")
    assert TuningDatabase(killed).claims(TuningDatabase(killed).workloads()[0]) == []


@pytest.mark.qemu
def test_a_tuning_run_batched_and_one_at_a_time_stores_the_same_trials(matmul, m55, tmp_path):
    """The random strategy proposes the same configurations whatever the round size, so a
    whole session can be compared: the same trials, with --batch and with --batch 1."""
    shape = matmul.parse_shape("m=8,n=8,k=16")
    stored = {}
    for size in (4, 1):
        db = TuningDatabase(tmp_path / f"batch{size}.db")
        summary = tune(TuneRequest(matmul, m55, shape, "random", 8, 2, 5, batch=size), db)
        stored[size] = sorted((t.config.key(), t.outcome.value, t.values.get("instructions"), t.values.get("cycles"))
                              for t in db.trials(summary.workload))
        assert summary.new_trials == 8
        batched = [t.info.get("batch") for t in db.trials(summary.workload)]
        assert (max(batched) if size > 1 else set(batched)) == (4 if size > 1 else {None})
    assert stored[4] == stored[1]


def test_the_progress_line_shows_where_the_time_went():
    from io import StringIO

    from edgetune.progress import ProgressDisplay
    from edgetune.tuner import Config, Trial

    out = StringIO()
    show = ProgressDisplay("instructions", stream=out, clock=lambda: 0.0)
    info = {"seconds_compile": 0.3, "seconds_link": 0.05, "seconds_run": 0.1}
    show(1, 4, Trial(Config((("a", 1),)), Outcome.OK, values={"instructions": 10},
                     info={**info, "run_seconds_search": 0.0, "run_seconds_database": 0.05}))
    show(2, 4, Trial(Config((("a", 2),)), Outcome.OK, values={"instructions": 12},
                     info={**info, "run_seconds_search": 0.1, "run_seconds_database": 0.1}))
    # compile 0.6 s, link 0.1, run 0.2, search 0.1 and database 0.1 (the session's totals so far)
    assert out.getvalue().rstrip().endswith("compile 55% link 9% run 18% search 9% database 9%")


# --- a board over a serial link: one flash for several variants ------------------------------------
@pytest.mark.qemu
@pytest.mark.slow
@pytest.mark.parametrize("fault, outcome", [(None, Outcome.OK), ("trap", Outcome.CRASH), ("zeros", Outcome.WRONG_ANSWER)])
def test_serial_board_batches_count_as_one_at_a_time(tmp_path, fault, outcome):
    serial = load_target(target_file("an547-serial"), overrides={"runner": {"timeout_s": 5}})
    kernel = FaultyMatmul(fault) if fault else get_kernel("matmul_s8")

    batched, alone, _ = both_ways(kernel, serial, SHAPE, tmp_path, lambda space: faulty_configs(space)[1:])
    assert_same_trials(batched, alone)
    assert [t.outcome for t in batched] == [Outcome.OK, outcome, Outcome.OK, Outcome.OK]
    assert all(t.values["cycles"] > 0 for t in batched if t.outcome is Outcome.OK)
    if fault is None:
        assert {t.info["batch"] for t in batched} == {4}  # one flash, four variants
    else:
        assert "batch" not in batched[1].info and batched[0].info["batch"] == 4


def test_a_round_asks_no_more_than_a_model_guided_strategy_plans_at_once():
    from edgetune.session import within_plan
    from edgetune.tuner import make_strategy

    space = get_kernel("matmul_s8").space(get_target("cortex-m55"), get_kernel("matmul_s8").parse_shape(SHAPE))
    rng = np.random.default_rng(0)
    model, plain = make_strategy("transfer", space, rng, "instructions"), make_strategy("random", space, rng, "instructions")
    assert model.batch == 8 and within_plan(16, 2, model) == 4  # rounds of 2 x 4 = its plan of 8
    assert within_plan(16, 1, model) == 8 and within_plan(2, 2, model) == 2
    assert within_plan(16, 2, plain) == 16  # the random search learns nothing between rounds
