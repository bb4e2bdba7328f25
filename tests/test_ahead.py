"""Compiling ahead (edgetune.ahead, CodeScore.ahead): queued work waits while a search waits
on scores, runs otherwise, can be dropped, survives a job that raises; a candidate is
compiled once whoever asks first, and what was compiled ahead is what the search would have
compiled itself."""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from edgetune import ahead, live_rank
from edgetune.codegen import get_kernel
from edgetune.targets import get_target
from edgetune.tuner.product_rank import ProductRanker

ROOT = Path(__file__).resolve().parents[1]


def wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_queued_work_waits_while_a_search_waits_on_scores_then_runs():
    ran = []
    with ahead.foreground():
        ahead.submit("a", lambda: ran.append(1), workers=2)
        ahead.submit("a", lambda: ran.append(2), workers=2)
        time.sleep(0.2)
        assert ran == [] and ahead.busy("a") == 2
    assert wait_until(lambda: sorted(ran) == [1, 2])
    assert ahead.busy("a") == 0


def test_cancel_drops_one_owners_queued_work_and_a_raising_job_stops_nothing():
    ran = []

    def boom():
        raise OSError("disk full")

    with ahead.foreground():
        ahead.submit("mine", lambda: ran.append("mine"), workers=1)
        ahead.submit("other", boom, workers=1)
        ahead.submit("other", lambda: ran.append("other"), workers=1)
        assert ahead.cancel("mine") == 1
    assert wait_until(lambda: ran == ["other"])
    assert ahead.busy() == 0


def test_cancel_drops_what_a_running_job_queues_and_tells_it_to_stop():
    started, go, seen = threading.Event(), threading.Event(), []

    def stepping():  # as search_ahead.NextPlan: queues work, checks whether to go on
        started.set()
        go.wait(10)
        for _ in range(500):
            if ahead.stopping("steps"):
                seen.append("stopped")
                return
            ahead.submit("steps", lambda: seen.append("queued ran"), workers=1)
            time.sleep(0.01)

    ahead.submit("steps", stepping, workers=1)
    assert started.wait(10)
    with ahead.foreground():  # nothing queued starts meanwhile
        go.set()
        time.sleep(0.05)
        ahead.cancel("steps")
    assert seen == ["stopped"] and ahead.busy("steps") == 0
    assert not ahead.stopping("steps")


def counting_score(monkeypatch, seconds: float = 0.0) -> tuple[live_rank.CodeScore, list]:
    """A CodeScore of the M55's matmul whose compile is counted (and slowed by `seconds`)."""
    kernel, target = get_kernel("matmul_s8"), get_target("cortex-m55")
    shape = {"m": 4, "n": 8, "k": 16}
    score = live_rank.CodeScore(live_rank.LiveRanker(ProductRanker(), None, ()), kernel, target, shape, True, 2)
    compiled, real = [], live_rank.CodeScore._compile

    def compile_counted(self, config):
        compiled.append(config.key())
        time.sleep(seconds)
        return real(self, config)

    monkeypatch.setattr(live_rank.CodeScore, "_compile", compile_counted)
    return score, compiled


@pytest.mark.qemu
def test_a_candidate_compiled_ahead_is_what_the_search_gets_without_compiling_it_again(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / "cache"))
    score, compiled = counting_score(monkeypatch)
    space = score.kernel.tuning_space(score.target, score.shape)
    configs = [space.config_at(int(i)) for i in space.legal_indices()[:3]]
    assert score.ahead(configs) == 3
    assert wait_until(lambda: len(score.compiled) == 3, 120)
    before = list(compiled)
    fresh, _ = counting_score(monkeypatch)
    for config in configs:
        assert score.features(config) == fresh.features(config)  # the same code read the same way
    assert sorted(before) == sorted(c.key() for c in configs)
    assert score.ahead(configs) == 0  # nothing left to do ahead
    assert score.waited == [] and len(score.busy) == 3  # the search never waited: all was done ahead


@pytest.mark.qemu
def test_a_search_asking_for_a_candidate_being_compiled_ahead_waits_for_that_compile(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / "cache"))
    score, compiled = counting_score(monkeypatch, seconds=0.5)
    space = score.kernel.tuning_space(score.target, score.shape)
    config = space.config_at(int(space.legal_indices()[0]))
    score.ahead([config])
    assert wait_until(lambda: compiled == [config.key()])  # started in the background
    asked = threading.Thread(target=score.prefetch, args=([config, config],))
    asked.start()
    asked.join(120)
    assert compiled == [config.key()]  # compiled once
    assert score(config) is not None and len(score.waited) == 1


@pytest.mark.qemu
def test_a_model_tune_compiles_screens_ahead_and_chooses_the_same_trials_as_without(tmp_path, monkeypatch):
    """DS-CNN's depthwise layer and first convolution on the M55 (the code designs from the start
    on both kernels' fits), compiling ahead as on a board: the layers' screens are queued
    before their rounds ask, and beside each batch of a round, what the next round's opening
    compiles; the rounds measure the same configurations as the tune the emulator gets,
    which compiles nothing ahead."""
    from edgetune.model import load_model
    from edgetune.model import session as model_session
    from edgetune.tuner import TuningDatabase

    model = load_model(ROOT / "tests" / "data" / "models" / "ds_cnn_kws.tflite")
    layers = [next(layer for layer in model.layers if layer.kernel == kernel) for kernel in ("dwconv2d_s8", "conv2d_s8")]
    queued, queued_first = [], []
    real = live_rank.CodeScore.ahead

    def counted(self, configs, first=False):
        queued.append(real(self, configs, first))
        if first:
            queued_first.append(queued[-1])
        return queued[-1]

    monkeypatch.setattr(live_rank.CodeScore, "ahead", counted)

    def tuned(name: str) -> list[tuple[str, list[str]]]:
        live_rank.forget_scores()
        monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / f"cache-{name}"))
        db = TuningDatabase(tmp_path / f"{name}.db")
        model_session.tune_model(layers, get_target("cortex-m55"), db, budget=8, strategy="transfer+code", seed=3,
                                 jobs=2, baselines=False)
        return [(w.key(), [r.trial.config.key() for r in db.proposals(w)]) for w in db.workloads()]  # proposal order

    monkeypatch.setattr(live_rank, "AHEAD_RUNNERS", {"qemu"})  # as though the emulator were a board
    ahead_run = tuned("ahead")
    assert queued and sum(queued) >= 32  # a layer's first screen at least (8 per trial of its round)
    assert queued_first and sum(queued_first) > 0  # and, beside a round's batches, the next round's opening
    monkeypatch.undo()
    queued.clear()
    monkeypatch.setattr(live_rank.CodeScore, "ahead", counted)
    assert not live_rank.compiles_ahead(get_target("cortex-m55"))  # the emulator's trials take the host's cores
    assert tuned("plain") == ahead_run and not queued
    live_rank.forget_scores()


def test_cancel_waits_for_the_owners_running_job():
    started, release, finished = threading.Event(), threading.Event(), []

    def slow():
        started.set()
        release.wait(10)
        finished.append(1)

    ahead.submit("slow", slow, workers=1)
    assert started.wait(10)
    threading.Timer(0.3, release.set).start()
    ahead.cancel("slow")
    assert finished == [1]  # it returned once the job was done


@pytest.mark.slow
@pytest.mark.qemu
def test_the_next_plan_found_ahead_is_what_the_search_then_compiles_and_nothing_is_stored(tmp_path, monkeypatch):
    """compile_next_plan_ahead opens a copy of a search on what is stored (replayed, as a
    model's round opens it again with a larger budget) and compiles, in the background,
    what its first proposal waits on, step by step (the gate's score of the 8 trials, the
    plan's shortlist); the search opened afterwards on the same trials compiles nothing more
    for that proposal, and the copy stored and claimed nothing."""
    from edgetune.search_ahead import compile_next_plan_ahead
    from edgetune.session import LiveSearch, TuneRequest
    from edgetune.tuner import TuningDatabase

    monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / "cache"))
    live_rank.forget_scores()
    compiled, real = [], live_rank.CodeScore._compile
    monkeypatch.setattr(live_rank.CodeScore, "_compile", lambda self, c: compiled.append(c.key()) or real(self, c))
    db = TuningDatabase(tmp_path / "t.db")
    request = TuneRequest(get_kernel("matmul_s8"), get_target("cortex-m55"), {"m": 4, "n": 8, "k": 16},
                          "transfer+code", 8, jobs=2, seed=5)
    with LiveSearch(request, db) as first_round:
        first_round.run(8)
    rows = [(r.trial.config.key(), r.proposal) for r in db.proposals(first_round.workload)]
    compiled.clear()
    assert compile_next_plan_ahead(replace(request, budget=12), db)
    assert wait_until(lambda: ahead.busy() == 0, 300) and compiled
    assert [(r.trial.config.key(), r.proposal) for r in db.proposals(first_round.workload)] == rows
    assert db.claims(first_round.workload) == []
    found_ahead = set(compiled)
    with LiveSearch(replace(request, budget=12), db) as next_round:
        next_round.start.resumed.strategy.ask(1)
    assert set(compiled) == found_ahead  # the search's first proposal compiled nothing more
    live_rank.forget_scores()
