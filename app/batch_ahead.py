"""What a live `transfer+code` search's next batch will compile, compiled while the batch
before it runs (on a board: live_rank.AHEAD_RUNNERS).

The search asks for a batch; while the board flashes and runs it the host's cores are
idle; when it returns, the search is told its trials and asked for the next batch, and a
plan made then waits for its shortlist to compile (a plan of 8 ranks its model's best 32:
about 5 s on two jobs) with the board idle. Beside each batch, a copy of the search as it
stands (that batch asked, its trials not told) with a probe for a score
(live_rank.ScoreProbe, which raises where the search would compile) is asked for the next
batch: the trials in flight are told to it at the values their code predicts
(CodeRankedTransfer.believed), and where its plan runs out, what the plan would compile is
compiled ahead (first in edgetune.ahead's queue). The real plan, made on the measured
values, shared 79% of the copy's shortlist (matmul_s8 on the M55, 48 trials, 3 seeds; 40%
planned without the trials in flight). A copy stores nothing, and a score is a pure
function of the candidate: what the search chooses is unchanged.

`compile_in_steps` is the loop this and edgetune.search_ahead's look-ahead share.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from edgetune.tuner import Config
from edgetune.tuner.code_explore import CodeRankedTransfer

from . import ahead
from .live_rank import CodeScore, CompilesNeeded, ScoreProbe

# A batch's plan waits on up to two sets of compiles: the gate's score of the trials told
# since it was last decided, then the plan's shortlist (or a random slot's draws).
BATCH_PLAN_STEPS = 2


def compile_in_steps(score: CodeScore, needs: Callable[[], tuple[Config, ...]], steps: int) -> None:
    """Up to `steps` times: find what a copy of a search would compile next (`needs`, () when
    nothing), queue it first, and compile it here (other background threads take a share).
    Gives way once a search waits on scores (it compiles what it needs itself) or the tune
    cancels the score's work (ahead.stopping)."""
    for _ in range(steps):
        needed = needs()
        if not needed or _giving_way(score):
            return
        score.ahead(needed, first=True)
        for config in needed:
            if _giving_way(score):
                return  # what is queued waits for the search, which compiles what it needs
            score.features(config)  # compiled here, by another thread, or waited for


def _giving_way(score: CodeScore) -> bool:
    """A search waits on scores (it compiles what it needs), or the tune is done with them."""
    return ahead.searching() or ahead.stopping(score)


@dataclass(frozen=True)
class BatchPlan:
    """The job compile_batch_plan_ahead queues: asks a fresh copy of `snapshot` (never asked
    itself) for `asks` proposals, compiles what the copy would wait on, and asks again,
    while the live search has not asked for its next batch yet (`current`)."""

    snapshot: CodeRankedTransfer
    probe: ScoreProbe
    asks: int
    current: Callable[[], bool]

    def __call__(self) -> None:
        compile_in_steps(self.probe.score, self.needs, BATCH_PLAN_STEPS)

    def needs(self) -> tuple[Config, ...]:
        """What the next batch would compile before it could be proposed (() also once the
        live search has asked for it: it is too late)."""
        if not self.current():
            return ()
        attempt = self.snapshot.scoring_with(self.probe, self.probe.prefetch)
        try:
            attempt.ask(self.asks)
        except CompilesNeeded as needed:
            return needed.configs
        return ()


def compile_batch_plan_ahead(strategy: object, asks: int, in_flight: Sequence[Config],
                             current: Callable[[], bool]) -> bool:
    """Beside a batch of a live search: queue, first, a job compiling what `strategy` (the
    search's, the batch `in_flight` asked for and not told) would compile when next asked
    for `asks` proposals, while `current()` says it has not been. Copies the strategy here,
    in the caller's thread (the live one is not touched while its batch runs), and tells the
    copy the batch at the values its code predicts (CodeRankedTransfer.believed). Returns
    whether a job was queued: not for a strategy that ranks no compiled code, nor with
    nothing to ask."""
    if asks <= 0 or not isinstance(strategy, CodeRankedTransfer) or not isinstance(strategy.score, CodeScore):
        return False
    probe = ScoreProbe(strategy.score)
    snapshot = strategy.scoring_with(probe, probe.prefetch)
    snapshot.tell(snapshot.believed(in_flight))
    ahead.submit(strategy.score, BatchPlan(snapshot, probe, asks, current), strategy.score.jobs, first=True)
    return True
