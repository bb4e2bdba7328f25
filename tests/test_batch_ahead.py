"""Looking ahead at a live `transfer+code` search's next batch (edgetune.batch_ahead): a copy
of the search as it stands, scoring through a probe that compiles nothing, says what the next
batch's plan would compile; the search itself is untouched and proposes what it would have."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from edgetune import ahead
from edgetune.batch_ahead import BatchPlan, compile_batch_plan_ahead
from edgetune.live_rank import CompilesNeeded, ScoreProbe
from edgetune.tuner import Config, Outcome, Param, Space, Trial
from edgetune.tuner.code_explore import CodeRankedTransfer, KernelFit

SPACE = Space([Param("tile", (1, 2, 4, 8, 16)), Param("unroll", (1, 2, 4, 8)), Param("vector", ("c", "mve", "dsp"))])
FIT = KernelFit(0.95, 3)  # the code votes from the first plan


def cost(config: Config) -> float:
    return 100.0 * (1 + (config["vector"] != "mve")) + 7 * abs(np.log2(config["tile"]) - 2) + config["unroll"]


def estimate(config: Config) -> float:
    """The code's estimate: ranks the space as its cost does (the gate stays open)."""
    return cost(config) + 0.5 * config["unroll"]


@dataclass
class KnownScores:
    """What ScoreProbe reads of a live CodeScore: which candidates are compiled, and their scores."""

    compiled: set = field(default_factory=set)

    def is_compiled(self, config: Config) -> bool:
        return config.key() in self.compiled

    def compiled_score(self, config: Config) -> float:
        assert config.key() in self.compiled
        return estimate(config)


def searched(seed: int, told: int, scored: list) -> CodeRankedTransfer:
    """A search `told` trials in, then asked for a batch of two (not told): as it stands while
    that batch runs. `scored` collects every candidate it scores."""
    def score(config: Config) -> float:
        scored.append(config.key())
        return estimate(config)

    search = CodeRankedTransfer(SPACE, np.random.default_rng(seed), "instructions", score=score, kernel_fit=FIT,
                                screen=16, budget=40)
    while len(search.results) < told:
        batch = search.ask(2)
        search.tell([Trial(c, Outcome.OK, {"instructions": cost(c)}) for c in batch])
    search.ask(2)
    return search


def test_a_copy_scoring_with_another_score_proposes_what_the_search_would_and_leaves_it_alone():
    scored = []
    search = searched(1, 12, scored)
    before = list(scored)
    copy_scored = []
    copy = search.scoring_with(lambda c: copy_scored.append(c.key()) or estimate(c), None)
    proposed = copy.ask(6)
    assert scored == before  # the copy never scored through the search's own score
    assert copy_scored  # it scored through its own: a plan was made within six proposals
    assert search.ask(6) == proposed  # the search, asked now, proposes the same
    assert scored[len(before):] == copy_scored  # having scored the same candidates


def test_the_probe_names_what_the_next_plan_would_compile_and_nothing_once_it_is_compiled():
    scored = []
    search = searched(2, 12, scored)
    known = KnownScores({key for key in scored})
    probe = ScoreProbe(known)
    plan = BatchPlan(search.scoring_with(probe, probe.prefetch), probe, 6, lambda: True)
    needed = plan.needs()
    assert needed and not any(known.is_compiled(c) for c in needed)
    known.compiled.update(c.key() for c in needed)
    for _ in range(3):  # each step compiles what the copy waited on, until it waits on nothing
        more = plan.needs()
        known.compiled.update(c.key() for c in more)
    assert plan.needs() == ()
    with pytest.raises(CompilesNeeded):  # the snapshot itself was never asked: a copy of it still plans
        plan.snapshot.scoring_with(ScoreProbe(KnownScores()), None).ask(6)


def test_a_look_ahead_the_search_has_overtaken_finds_nothing_to_compile():
    scored = []
    search = searched(2, 12, scored)
    probe = ScoreProbe(KnownScores())
    assert BatchPlan(search.scoring_with(probe, probe.prefetch), probe, 6, lambda: False).needs() == ()


def test_nothing_is_queued_for_a_search_that_ranks_no_compiled_code_or_asks_for_nothing():
    scored = []
    search = searched(3, 4, scored)  # its score is a plain function, not a live CodeScore
    assert not compile_batch_plan_ahead(search, 2, (), lambda: True)
    assert not compile_batch_plan_ahead(object(), 2, (), lambda: True)
    assert ahead.busy() == 0


@pytest.mark.slow
@pytest.mark.qemu
def test_beside_each_batch_a_live_search_compiles_its_next_plan_ahead_and_chooses_the_same_trials(tmp_path, monkeypatch):
    """A live `transfer+code` tune of the M55's matmul as though on a board: beside each batch
    the next batch's plan is compiled in the background (given the time a board's trial
    leaves here); the search then scores candidates compiled ahead, and it measures the same
    configurations, in the same order, as a run that compiles nothing ahead."""
    import threading
    import time

    from edgetune import live_rank
    from edgetune.codegen import get_kernel
    from edgetune.session import LiveSearch, TuneRequest
    from edgetune.targets import get_target
    from edgetune.tuner import TuningDatabase

    compiled_ahead, real = [], live_rank.CodeScore._compile

    def compile_noted(self, config):
        if threading.current_thread().name.startswith("edgetune-ahead"):
            compiled_ahead.append(config.key())
        return real(self, config)

    monkeypatch.setattr(live_rank.CodeScore, "_compile", compile_noted)
    request = TuneRequest(get_kernel("matmul_s8"), get_target("cortex-m55"), {"m": 4, "n": 8, "k": 16},
                          "transfer+code", 14, jobs=2, seed=4)

    def tuned(name: str, look_ahead: bool) -> tuple[list[str], frozenset]:
        live_rank.forget_scores()
        monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / f"cache-{name}"))
        db = TuningDatabase(tmp_path / f"{name}.db")
        with LiveSearch(request, db) as search:
            def beside_batch(in_flight):
                search.compile_next_batch_ahead(in_flight)
                deadline = time.monotonic() + 120
                while ahead.busy() and time.monotonic() < deadline:  # a board's trial takes seconds
                    time.sleep(0.05)
            search.run(request.budget, beside_batch if look_ahead else None)
            strategy = search.start.resumed.strategy
            scored = frozenset(search.space.config_at(i).key() for i in strategy.scored_indices)
            return [r.trial.config.key() for r in db.proposals(search.workload)], scored

    plain, _ = tuned("plain", False)
    assert not compiled_ahead
    looked, scored = tuned("ahead", True)
    assert looked == plain  # the same trials, in proposal order
    assert compiled_ahead and scored & set(compiled_ahead)  # plans made ahead were scored by the search

    # `tune` on a board looks ahead beside its batches, and leaves nothing queued behind it
    from edgetune import session
    queued, real_queue = [], session.compile_batch_plan_ahead
    monkeypatch.setattr(session, "compile_batch_plan_ahead", lambda *a: queued.append(real_queue(*a)) or queued[-1])
    monkeypatch.setattr(live_rank, "AHEAD_RUNNERS", {"qemu"})
    live_rank.forget_scores()
    monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / "cache-tune"))
    db = TuningDatabase(tmp_path / "tune.db")
    session.tune(request, db)
    workload = session.workload_of(request.kernel, request.target, request.shape)
    assert [r.trial.config.key() for r in db.proposals(workload)] == plain
    assert queued and any(queued) and ahead.busy() == 0
    live_rank.forget_scores()


def test_only_a_search_ranking_code_on_a_board_looks_ahead_beside_its_batches(tmp_path, monkeypatch):
    from edgetune import live_rank
    from edgetune.codegen import get_kernel
    from edgetune.session import LiveSearch, TuneRequest
    from edgetune.targets import get_target
    from edgetune.tuner import TuningDatabase

    monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / "cache"))
    db = TuningDatabase(tmp_path / "t.db")

    def look_ahead(strategy: str):
        request = TuneRequest(get_kernel("matmul_s8"), get_target("cortex-m55"), {"m": 4, "n": 8, "k": 16},
                              strategy, 4, jobs=2, seed=1)
        with LiveSearch(request, db) as search:
            return search.batch_look_ahead()

    assert look_ahead("transfer+code") is None  # the emulator's trials take the host's cores
    monkeypatch.setattr(live_rank, "AHEAD_RUNNERS", {"qemu"})  # as though the emulator were a board
    assert look_ahead("transfer+code") is not None
    assert look_ahead("transfer") is None  # compiles no candidates
