"""What a `transfer+code` model tune's next rounds will compile, found before they ask
(edgetune.ahead compiles it; a round's next batch: edgetune.batch_ahead).

On a board each trial leaves the host's cores idle for seconds while the board flashes and
runs; a search that then plans waits for its candidates to compile with the board idle. Two
things are known before they are asked for:

- a layer's screen (tuner.code_explore.screen_points) is fixed by the seed: the first one is
  queued before the layer's first round (compile_first_screen_ahead), the one its next
  round will draw when a round opens (LiveSearch.compile_screen_ahead);
- the next round's opening: beside each batch of a round, the layer the scheduler would
  choose as the round stands is opened as a copy of its search on the trials stored by
  then, with a probe in place of its score (live_rank.ScoreProbe), and asked for its first
  proposal; what it would wait on (its replay's plans, its gate, its own plan) is compiled,
  ahead of everything else, and it is asked again (compile_next_plan_ahead). The real
  round opens on every trial stored and plans again; what it shares with the copy is
  compiled already (DS-CNN on a paced board: bench/RESULTS.md).

Nothing here changes what a search chooses: a score is a pure function of the candidate
and a copy stores nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgetune.tuner import STRATEGIES, Claim, Config, Record, TuningDatabase, canonical_strategy
from edgetune.tuner.code_explore import screen_points, screen_size, screen_stream, votes_on_fit
from edgetune.tuner.resume import rebuild

from . import ahead
from .batch_ahead import compile_in_steps
from .live_rank import CompilesNeeded, ScoreProbe
from .session import SearchParts, TuneRequest, search_parts


def ranks_code(request: TuneRequest) -> bool:
    """Whether `request` is a search that ranks compiled CPU code (the only one compiling ahead)."""
    return STRATEGIES[canonical_strategy(request.strategy)].uses_code and request.device == "cpu"


def compile_first_screen_ahead(request: TuneRequest, db: TuningDatabase) -> int:
    """Queue the screen a `transfer+code` search of `request` not opened yet will take its
    first design points from, where the kernel's fit lets the code choose them
    (tuner.code_explore.votes_on_fit); returns how many were queued (0 for another strategy
    or device)."""
    if not ranks_code(request):
        return 0
    parts = search_parts(request, db)
    if parts.ranking is None or not votes_on_fit(parts.ranking["kernel_fit"]):
        return 0
    stream = screen_stream(np.random.default_rng(parts.request.seed))
    points = screen_points(parts.space, stream, screen_size(parts.request.budget))
    return parts.ranking["score"].ahead([parts.space.config_at(i) for i in points])


def compile_next_plan_ahead(request: TuneRequest, db: TuningDatabase) -> bool:
    """Queue, first, a job that compiles what a `transfer+code` search of `request` opened
    now would compile before it could make its first proposal, its replay of the stored
    trials included (NextPlan). Reads the database here, in the caller's thread; writes
    nothing. Returns whether a job was queued (not for a search that ranks no code)."""
    if not ranks_code(request):
        return False
    parts = search_parts(request, db)
    if parts.ranking is None:
        return False
    score = parts.ranking["score"]
    job = NextPlan(parts, tuple(db.proposals(parts.task.workload)), tuple(db.claims(parts.task.workload)))
    ahead.submit(score, job, score.jobs, first=True)
    return True


# A first proposal waits on up to four sets of compiles, one after the other: the replay's
# (a stored batch asked for again, its plan made on the trials stored since), its gate's
# score of the trials measured so far, its plan's shortlist, the draws of its random slots.
NEXT_PLAN_STEPS = 4


@dataclass(frozen=True)
class NextPlan:
    """The job compile_next_plan_ahead queues: on the search's parts and a snapshot of its
    stored proposals and claims, replay the search with a probe in place of its score
    (live_rank.ScoreProbe) and ask for its first proposal; compile what the probe says it
    waits on, and ask again, up to NEXT_PLAN_STEPS times (batch_ahead.compile_in_steps)."""

    parts: SearchParts
    records: tuple[Record, ...]
    claims: tuple[Claim, ...]

    def __call__(self) -> None:
        compile_in_steps(self.parts.ranking["score"], self.needs, NEXT_PLAN_STEPS)

    def needs(self) -> tuple[Config, ...]:
        """What the search's first proposal would compile next, before it could go on (():
        nothing, it is compiled)."""
        parts = self.parts
        probe = ScoreProbe(parts.ranking["score"])
        strategy = parts.strategy(ranking=probe.ranking(parts.ranking))
        try:
            resumed = rebuild(strategy, parts.space, self.records, self.claims,
                              (parts.request.strategy, parts.request.seed))
            resumed.strategy.ask(1)
        except CompilesNeeded as needed:
            return needed.configs
        return ()
