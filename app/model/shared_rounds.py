"""Several `model tune` processes on one database split the model's budget exactly, as
kernel tunes split a workload's budget through claims (edgetune.tuner.database). Two
things make it so:

- one sequence of rounds: each round (which layer, how many trials) is decided by the
  first process to reach it and recorded in the database; the others follow it, whatever
  their seed or their timing;
- a round ends for every process only once its trials are stored: a process whose own
  part of a round is done waits for the trials other processes are still measuring (their
  claims), so every process sees the same trials, the same best and the same history when
  the next round is decided, and reports what is stored rather than what it measured.

A single process decides every round itself and never waits, as before.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from edgetune.tuner import Bound, TuningDatabase, Workload

POLL_S = 0.2  # how often a process waiting for another's trials looks at the database


def model_key(layers: Sequence[tuple[str, int]], objective: str, bounds: Sequence[Bound], scheduler: str,
              round_size: int) -> str:
    """What identifies one model's tuning in a database: its layers' workload keys with their
    weights, the objective and bounds, the scheduler and the round size. Not the seed nor
    the budget: runs that differ only in those share one sequence of rounds."""
    text = json.dumps({"layers": [list(layer) for layer in layers], "objective": objective,
                       "bounds": [[bound.name, bound.limit] for bound in bounds], "scheduler": scheduler,
                       "round": round_size}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class SharedRounds:
    """The rounds of one model's tuning as the database records them."""

    db: TuningDatabase
    model: str

    def next_round(self, number: int, choose: Callable[[], str | None], size: int,
                   room: int) -> tuple[str, int] | None:
        """Round `number`: (workload key, trials, at most `room`). Decided by this process
        (`choose`, the scheduler) when no other process has reached it yet; None when it is
        undecided and the scheduler has nothing left to tune. A round is recorded whole
        (`size` trials) even when this run's budget ends inside it, so a run resumed with a
        larger budget completes that round as an uninterrupted run would have."""
        decided = self.db.model_round(self.model, number)
        if decided is None:
            chosen = choose()
            if chosen is None:
                return None
            decided = self.db.decide_model_round(self.model, number, chosen, size)
        key, trials = decided
        return key, min(trials, room)


def wait_for_round(db: TuningDatabase, workload: Workload, count: int, measure_left: Callable[[], None],
                   poll_s: float = POLL_S) -> None:
    """Return once the workload's first `count` proposals hold no claim, i.e. are stored
    (or were never made: the space ran out). Claims among them left by a dead or silent
    process are measured here (`measure_left`: the round's tuning session again, which takes
    them over); a claim of a live process is waited for."""
    seen_left: set[tuple[int, str]] = set()
    while True:
        owed = _owed_claims(db, workload, count)
        if not owed:
            return
        if all(claim.expired() for claim in owed):
            left = {(claim.proposal, claim.config.key()) for claim in owed}
            if left == seen_left:
                return  # the session took none of them over: waiting could never end
            seen_left = left
            measure_left()
            continue
        time.sleep(poll_s)


def _owed_claims(db: TuningDatabase, workload: Workload, count: int) -> list:
    claims = db.claims(workload)
    if not claims:
        return []
    proposals = sorted([*(record.proposal or 0 for record in db.proposals(workload)),
                        *(claim.proposal for claim in claims)])[:count]
    last = proposals[-1] if proposals else 0
    return [claim for claim in claims if claim.proposal <= last]
