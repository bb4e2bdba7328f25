"""Tuning a model's layers together (app/model/session.py): identical layers tuned once, the
budget split by the task scheduler, the model's total, resumption, faults and exhaustion."""
from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgetune.codegen import get_kernel
from edgetune.model import load_model
from edgetune.model.module import default_config
from edgetune.model.session import (ModelTuneError, distinct_workloads, progress_line, similarity_group, starting_seeds,
                                    tune_model)
from edgetune.tuner import Constraint, Outcome, Space, TuningDatabase

from faulty import FaultyMatmul

CONV3 = "h=6,w=6,cin=4,cout=8,kh=3,kw=3,stride=1,pad=1,dilation=1"
DW3 = "h=6,w=6,c=8,kh=3,kw=3,stride=1,pad=1,dilation=1"
PW = "h=6,w=6,cin=8,cout=8,kh=1,kw=1,stride=1,pad=0,dilation=1"


@dataclass(frozen=True)
class Layer:
    """A hand-made layer with what tune_model reads of a model's layer."""

    index: int
    kernel: str | None
    shape: tuple
    macs: int


def layer(index, kernel, text, macs=1000):
    return Layer(index, kernel, tuple(get_kernel(kernel).parse_shape(text).items()), macs)


def small_model():
    """conv 3x3, then depthwise 3x3 + pointwise twice (the same shapes), and an untuned operator."""
    return [layer(0, "conv2d_s8", CONV3, 6 * 6 * 8 * 9 * 4), layer(1, "dwconv2d_s8", DW3, 6 * 6 * 8 * 9),
            layer(2, "conv2d_s8", PW, 6 * 6 * 8 * 8), layer(3, "dwconv2d_s8", DW3, 6 * 6 * 8 * 9),
            layer(4, "conv2d_s8", PW, 6 * 6 * 8 * 8), Layer(5, None, (), 0)]


def one_corner(kernel, constraint: Constraint):
    """`kernel` (a shipped one) cut down to a few configurations: an instance of a subclass of
    its class with an extra constraint on its tuning space."""

    class OneCorner(type(kernel)):
        def tuning_space(self, target, shape):
            space = super().tuning_space(target, shape)
            return Space(space.params, (*space.constraints, constraint))

    return OneCorner()


def stored(db, result):
    """(configuration, instructions) of a layer's stored trials, in proposal order."""
    return [(r.trial.config.key(), r.trial.values.get("instructions")) for r in db.proposals(result.workload)]


def test_identical_layers_are_one_workload_counted_as_often_as_they_occur(m55):
    workloads = distinct_workloads(small_model(), m55)
    assert [(lw.workload.kernel, lw.layers) for lw in workloads] == [
        ("conv2d_s8", (0,)), ("dwconv2d_s8", (1, 3)), ("conv2d_s8", (2, 4))]
    assert [lw.weight for lw in workloads] == [1, 2, 2]
    assert workloads[1].shape == get_kernel("dwconv2d_s8").parse_shape(DW3)
    # The same shape with its keys in another order is the same workload.
    pointwise = layer(6, "conv2d_s8", PW)
    shuffled = Layer(6, pointwise.kernel, tuple(reversed(pointwise.shape)), pointwise.macs)
    assert distinct_workloads([*small_model(), shuffled], m55)[2].layers == (2, 4, 6)


def test_a_tflite_models_layers_are_tuned_as_they_come_from_the_reader(m55):
    model = load_model(Path(__file__).parent / "data" / "models" / "ds_cnn_kws.tflite")
    workloads = distinct_workloads(model.layers, m55)
    assert [(lw.workload.kernel, lw.weight) for lw in workloads] == [
        ("conv2d_s8", 1), ("dwconv2d_s8", 4), ("conv2d_s8", 4), ("conv2d_s8", 1)]
    assert [similarity_group(lw) for lw in workloads] == ["conv2d_s8 10x4 narrow", "dwconv2d_s8 3x3",
                                                          "conv2d_s8 1x1", "conv2d_s8 1x1"]
    assert dict(workloads[0].shape)["pad_top"] == 4 and dict(workloads[0].shape)["pad_bottom"] == 5  # SAME


def test_layers_of_one_kernel_filter_window_and_vector_fill_are_similar(m55):
    model = [*small_model(), layer(6, "conv2d_s8", "h=3,w=3,cin=16,cout=4,kh=1,kw=1,stride=1,pad=0,dilation=1"),
             layer(7, "matmul_s8", "m=4,n=4,k=8"), layer(8, "matmul_s8", "m=4,n=4,k=16"),
             layer(9, "conv2d_s8", "h=6,w=6,cin=64,cout=8,kh=3,kw=3,stride=1,pad=1,dilation=1"),
             layer(10, "dwconv2d_s8", "h=6,w=6,c=16,kh=3,kw=3,stride=1,pad=1,dilation=1")]
    groups = [similarity_group(lw) for lw in distinct_workloads(model, m55)]
    # Reductions (cin, k) or depthwise channels narrower than one 16-lane int8 vector are
    # grouped apart: they cannot reach a wider layer's MACs per cycle.
    assert groups == ["conv2d_s8 3x3 narrow", "dwconv2d_s8 3x3 narrow", "conv2d_s8 1x1 narrow", "conv2d_s8 1x1",
                      "matmul_s8 narrow", "matmul_s8", "conv2d_s8 3x3", "dwconv2d_s8 3x3"]


def test_the_narrow_first_layers_of_resnet8_and_mobilenet_are_grouped_apart(m55):
    """ResNet-8's first convolution (cin=3) took 156 of 288 trials, MobileNet's 1x1 8->16 476
    of 640, each hoping for the throughput of wider layers of its group (bench/RESULTS.md)."""
    for name, narrow in (("resnet8_cifar10", {"h=32,w=32,cin=3"}), ("mobilenet_v1_025_vww",
                                                                        {"h=96,w=96,cin=3", "h=48,w=48,c=8", "h=48,w=48,cin=8"})):
        workloads = distinct_workloads(load_model(Path(__file__).parent / "data" / "models" / f"{name}.tflite").layers, m55)
        found = {",".join(f"{k}={lw.shape[k]}" for k in ("h", "w", "cin", "c") if k in lw.shape)
                 for lw in workloads if similarity_group(lw).endswith(" narrow")}
        assert found == narrow, name


@pytest.mark.parametrize("bad, message", [
    (Layer(7, "conv3d_s8", (("h", 4),), 1), r"^layer 7 \(conv3d_s8\): .*conv3d_s8"),
    (Layer(8, "conv2d_s8", (("h", 4), ("w", 4)), 1), r"^layer 8 \(conv2d_s8\): "),
    (layer(9, "conv2d_s8", "h=400,w=400,cin=64,cout=64,kh=3,kw=3,stride=1,pad=1,dilation=1"),
     r"^layer 9 \(conv2d_s8\): .*"),
])
def test_a_layer_that_cannot_be_tuned_is_named_before_anything_is_measured(m55, tmp_path, bad, message):
    db = TuningDatabase(tmp_path / "m.db")
    with pytest.raises(ModelTuneError, match=message):
        tune_model([*small_model(), bad], m55, db, budget=4)
    assert db.workloads() == []


def test_a_model_without_tunable_layers_is_refused(m55, tmp_path):
    with pytest.raises(ModelTuneError, match="no layer"):
        tune_model([Layer(0, None, (), 0)], m55, TuningDatabase(tmp_path / "m.db"), budget=4)


def test_a_bad_budget_or_scheduler_is_refused(m55, tmp_path):
    db = TuningDatabase(tmp_path / "m.db")
    with pytest.raises(ModelTuneError, match="budget -1"):
        tune_model(small_model(), m55, db, budget=-1)
    with pytest.raises(Exception, match="unknown scheduler 'fair'"):
        tune_model(small_model(), m55, db, budget=4, scheduler="fair")


@pytest.mark.qemu
def test_the_budget_is_spent_across_layers_and_the_total_is_weight_times_best(m55, tmp_path):
    db = TuningDatabase(tmp_path / "m.db")
    shown = []
    heard = []
    summary = tune_model(small_model(), m55, db, budget=12, round_trials=2, jobs=2, seed=3,
                         progress=shown.append, trial_progress=lambda done, budget, trial: heard.append(trial))
    assert len(heard) == 12
    assert summary.spent == 12 == sum(result.trials for result in summary.layers)
    assert summary.untuned == (5,) and summary.objective == "instructions"
    for result in summary.layers:
        trials = db.trials(result.workload)
        assert result.trials == len(trials) >= 2  # everyone had the warm-up round
        assert result.value == min(t.values["instructions"] for t in trials if t.outcome is Outcome.OK)
        assert result.baseline is not None and result.baseline > 0  # the plain loop nest ran
    assert summary.total == sum(r.weight * r.value for r in summary.layers)
    assert summary.baseline_total == sum(r.weight * r.baseline for r in summary.layers)
    assert [s.spent for s in shown] == [2, 4, 6, 8, 10, 12] and shown == list(summary.rounds)
    assert shown[0].total is None and shown[0].missing == 2 and shown[-1].total == summary.total
    assert all(a.total >= b.total for a, b in zip(shown[2:], shown[3:]))  # the total never rises
    assert "| tuned layers alone: instructions=" in progress_line(shown[-1], "instructions")


@pytest.mark.qemu
def test_every_layers_first_trial_is_the_default_configuration_export_would_run(m55, tmp_path):
    # So the variant a layer exports is never slower than the default configuration (the
    # FC autoencoder's 128->8 layer exported at 8,758 instructions after 4 trials, its
    # default runs 5,775): the default is measured in the warm-up round, before any proposal.
    db = TuningDatabase(tmp_path / "m.db")
    summary = tune_model(small_model(), m55, db, budget=6, round_trials=2, baselines=False, seed=4)
    for result in summary.layers:
        kernel = get_kernel(result.workload.kernel)
        first = db.proposals(result.workload)[0]
        assert first.trial.config.as_dict() == default_config(kernel, m55, result.workload.shape_dict()).as_dict()
        assert not first.asked and first.trial.outcome is Outcome.OK
        assert result.value <= first.trial.values["instructions"]
    assert summary.spent == 6 and [r.trials for r in summary.layers] == [2, 2, 2]


@pytest.mark.qemu
def test_every_layers_second_trial_is_its_plain_loop_nest_as_the_baseline_measures_it(m55, tmp_path):
    # Issue 29, goal 2: the plain loop is a point of the space (vector=naive), measured at
    # gcc -O3 like the baseline, so no layer exports a variant slower than its own plain loop.
    db = TuningDatabase(tmp_path / "m.db")
    summary = tune_model(small_model(), m55, db, budget=6, round_trials=2, seed=4)
    for result in summary.layers:
        second = db.proposals(result.workload)[1].trial
        assert second.config["vector"] == "naive" and (second.config["compiler"], second.config["opt"]) == ("gcc", "O3")
        assert second.outcome is Outcome.OK and second.values["instructions"] == result.baseline
        assert result.value <= result.baseline


@pytest.mark.qemu
def test_a_layer_measures_the_best_configuration_a_similar_layer_found_first(m55, tmp_path):
    # Two 1x1 convolutions (one similarity group): the second one's warm-up round measures its
    # default, its plain loop nest, then the first one's best so far, then the kernel's first
    # starting point (the others and the strategy's proposals come later).
    wide = "h=6,w=6,cin=8,cout=16,kh=1,kw=1,stride=1,pad=0,dilation=1"
    db = TuningDatabase(tmp_path / "m.db")
    layers = [layer(0, "conv2d_s8", PW), layer(1, "conv2d_s8", wide)]
    summary = tune_model(layers, m55, db, budget=8, round_trials=4, baselines=False, seed=2, scheduler="even")
    first, second = (db.proposals(result.workload) for result in summary.layers)
    best = min((r for r in first[:4] if r.trial.outcome is Outcome.OK), key=lambda r: r.trial.values["instructions"])
    default = default_config(get_kernel("conv2d_s8"), m55, summary.layers[1].workload.shape_dict()).as_dict()
    assert best.trial.config.as_dict() != default  # the first layer's strategy found better than its default
    assert second[0].trial.config.as_dict() == default and not second[0].asked
    assert second[1].trial.config["vector"] == "naive" and not second[1].asked
    assert second[2].trial.config.as_dict() == best.trial.config.as_dict() and not second[2].asked
    starts = [c for c in starting_seeds(distinct_workloads(layers, m55)[1], m55, ())
              if c != best.trial.config.as_dict()]
    assert second[3].trial.config.as_dict() == starts[0] and not second[3].asked and summary.spent == 8


def test_starting_points_are_legal_helium_configurations_only_where_helium_and_their_compiler_are(m55, m4):
    # ResNet-8's first convolution, a 3x3 over 16 channels and a 1x1 with a stride: each gets
    # the kernel's starting points that are legal for it, whole configurations of its space.
    shapes = ["h=32,w=32,cin=3,cout=16,kh=3,kw=3,stride=1,dilation=1,pad=same",
              "h=16,w=16,cin=32,cout=32,kh=3,kw=3,stride=1,dilation=1,pad=same",
              "h=16,w=16,cin=32,cout=64,kh=1,kw=1,stride=2,dilation=1,pad=valid"]
    lws = distinct_workloads([layer(i, "conv2d_s8", text) for i, text in enumerate(shapes)], m55)
    for lw in lws:
        starts = starting_seeds(lw, m55, ())
        space = lw.kernel.tuning_space(m55, lw.shape)
        pointwise = lw.shape["kh"] == 1
        # the direct loop's pixel tiles are 1x1 kernels' only: a 3x3 layer gets the two im2col ones
        assert len(starts) == (3 if pointwise else 2) and all(space.is_legal(space.make(c)) for c in starts)
        assert {(c["vector"], c["layout"], c["compiler"]) for c in starts} == {("mve", "packed", "clang")}
        assert starting_seeds(lw, m55, ("gcc",)) == ()  # a run limited to gcc: not clang's starting points
    assert starting_seeds(distinct_workloads([layer(0, "conv2d_s8", shapes[0])], m4)[0], m4, ()) == ()  # no Helium
    assert starting_seeds(distinct_workloads([layer(0, "dwconv2d_s8", DW3)], m55)[0], m55, ()) == ()  # none offered


@pytest.mark.qemu
def test_each_round_opens_one_search_that_learns_from_every_other_layers_trials_so_far(m55, tmp_path, monkeypatch):
    """A layer's search is opened once per round it measures (the round's wait reuses it) and
    learns from every trial the other layers have stored by then, so the layers teach each
    other as the rounds go (a search kept from its first round learnt from what few trials
    were stored then: DS-CNN's default tune ended 22% slower, 1,676,741 against 1,374,925
    instructions in its tuned layers)."""
    import edgetune.session as session

    opened = []
    real_open = session.LiveSearch._open

    def counted_open(search, *args):
        opened.append((str(search.workload), sum(len(p.trials) for p in search.prior)))
        return real_open(search, *args)

    monkeypatch.setattr(session.LiveSearch, "_open", counted_open)
    summary = tune_model(small_model(), m55, TuningDatabase(tmp_path / "m.db"), budget=12, round_trials=2,
                         baselines=False)
    assert len(summary.rounds) == 6 and summary.spent == 12
    assert len(opened) == len(summary.rounds)  # one search a round
    kernels = {str(r.workload): r.workload.kernel for r in summary.layers}
    for n, (workload, priors) in enumerate(opened):
        # every trial stored so far of the other layers of the same kernel (each round adds 2)
        same_kernel = [w for w, _ in opened[:n] if w != workload and kernels[w] == kernels[workload]]
        assert priors == 2 * len(same_kernel), (n, workload, priors)


def similar_model():
    """Three 1x1 convolutions of different shapes (one similarity group: each round measures
    the others' best configurations first) and a 3x3 one."""
    return [layer(0, "conv2d_s8", PW), layer(1, "conv2d_s8", "h=6,w=6,cin=8,cout=16,kh=1,kw=1,stride=1,pad=0,dilation=1"),
            layer(2, "conv2d_s8", CONV3), layer(3, "conv2d_s8", "h=3,w=3,cin=16,cout=8,kh=1,kw=1,stride=1,pad=0,dilation=1")]


@pytest.mark.qemu
@pytest.mark.parametrize("model", [small_model, similar_model])
@pytest.mark.one_case
def test_the_same_seed_resumed_in_steps_ends_where_an_uninterrupted_run_ends(m55, tmp_path, model):
    # One variant per image (batch=1): the interruption below is emulated by a run one trial
    # long, which is what a killed one-at-a-time round leaves; a batched round is asked whole
    # (a kill mid-round resumes by replaying it: test_a_run_killed_mid_round_...).
    one = dict(round_trials=2, seed=5, baselines=False, batch=1)
    straight_db = TuningDatabase(tmp_path / "straight.db")
    straight = tune_model(model(), m55, straight_db, budget=12, **one)
    db = TuningDatabase(tmp_path / "steps.db")
    early = tune_model(model(), m55, db, budget=6, **one)
    assert [r.workload for r in early.rounds] == [r.workload for r in straight.rounds[:3]]
    # Round 4 interrupted after one of its two trials (one asked at a time): what a killed
    # run leaves stored, left here by a run whose budget ends there.
    interrupted = tune_model(model(), m55, db, budget=7, **one)
    assert interrupted.rounds[-1].workload == straight.rounds[3].workload
    assert interrupted.rounds[-1].layer_trials == straight.rounds[3].layer_trials - 1
    resumed = tune_model(model(), m55, db, budget=12, **one)
    assert [r.workload for r in resumed.rounds] == [r.workload for r in straight.rounds]
    assert [stored(db, r) for r in resumed.layers] == [stored(straight_db, r) for r in straight.layers]
    assert resumed.total == straight.total
    again = tune_model(model(), m55, db, budget=12, **one)
    assert [stored(db, r) for r in again.layers] == [stored(straight_db, r) for r in straight.layers]


@pytest.mark.qemu
def test_a_layer_whose_every_trial_fails_is_reported_and_the_others_are_tuned(m55, tmp_path):
    broken = FaultyMatmul("trap", always=True)
    model = [layer(0, "matmul_s8", "m=4,n=4,k=8"), layer(1, "conv2d_s8", PW)]
    db = TuningDatabase(tmp_path / "m.db")
    summary = tune_model(model, m55, db, budget=14, round_trials=2, jobs=2,
                         kernels=lambda name: broken if name == "matmul_s8" else get_kernel(name))
    failed, conv = summary.layers
    # Warm-up, then first in line while it has no success, given up after 3 rounds.
    assert failed.trials == 6 and failed.value is None and failed.failures == {"crash": 6}
    assert conv.trials == 8 and conv.value is not None
    assert summary.spent == 14 and summary.total is None and summary.unsolved == (failed,)


@pytest.mark.qemu
def test_an_exhausted_layer_gets_no_more_trials_and_the_budget_goes_to_the_others(m55, tmp_path):
    tiny = one_corner(get_kernel("matmul_s8"), Constraint("plain C with gcc only",
                                                          lambda c: c["compiler"] == "gcc" and c["vector"] == "c",
                                                          reads=("compiler", "vector")))
    model = [layer(0, "matmul_s8", "m=1,n=1,k=1"), layer(1, "conv2d_s8", PW)]
    db = TuningDatabase(tmp_path / "m.db")
    summary = tune_model(model, m55, db, budget=14, round_trials=4, jobs=2, scheduler="even", baselines=False,
                         kernels=lambda name: tiny if name == "matmul_s8" else get_kernel(name))
    small, conv = summary.layers
    assert small.exhausted and small.trials == len(db.trials(small.workload)) == 6
    assert conv.trials == 8 and not conv.exhausted and summary.spent == 14
    assert [r.workload for r in summary.rounds] == [small.workload, conv.workload, small.workload, conv.workload]
    assert [r.layer_trials for r in summary.rounds] == [4, 4, 6, 8]


def test_the_host_tunes_a_model_too(host, tmp_path):
    summary = tune_model(small_model(), host, TuningDatabase(tmp_path / "m.db"), budget=6, round_trials=2, jobs=2)
    assert summary.objective == host.measures and summary.spent == 6
    assert summary.total is not None and summary.total > 0
    assert [r.trials for r in summary.layers] == [2, 2, 2]


# The killed run builds the same model as small_model() (a test module imports no other).
KILLED_RUN = textwrap.dedent("""
    import sys
    from dataclasses import dataclass
    from edgetune.codegen import get_kernel
    from edgetune.model.session import tune_model
    from edgetune.targets import get_target
    from edgetune.tuner import TuningDatabase

    @dataclass(frozen=True)
    class Layer:
        index: int
        kernel: str | None
        shape: tuple
        macs: int

    layers = [Layer(i, name, tuple(get_kernel(name).parse_shape(text).items()) if name else (), macs)
              for i, (name, text, macs) in enumerate(%r)]
    tune_model(layers, get_target("cortex-m55"), TuningDatabase(sys.argv[1]), budget=12, round_trials=2,
               jobs=2, seed=9, baselines=False)
""")


@pytest.mark.qemu
@pytest.mark.slow
def test_a_run_killed_mid_round_resumes_to_the_uninterrupted_result(m55, tmp_path):
    straight_db = TuningDatabase(tmp_path / "straight.db")
    straight = tune_model(small_model(), m55, straight_db, budget=12, round_trials=2, jobs=2, seed=9,
                          baselines=False)
    path = tmp_path / "killed.db"
    model = [(layer.kernel, ",".join(f"{k}={v}" for k, v in layer.shape), layer.macs) for layer in small_model()]
    child = subprocess.Popen([sys.executable, "-c", KILLED_RUN % (model,), str(path)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        if path.exists() and _count(path) >= 7:  # inside round 4
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert 0 < _count(path) < 12
    db = TuningDatabase(path)
    resumed = tune_model(small_model(), m55, db, budget=12, round_trials=2, jobs=2, seed=9, baselines=False)
    assert [r.workload for r in resumed.rounds] == [r.workload for r in straight.rounds]
    assert [stored(db, r) for r in resumed.layers] == [stored(straight_db, r) for r in straight.layers]


def _count(path) -> int:
    try:
        with sqlite3.connect(path, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    except sqlite3.Error:
        return 0
