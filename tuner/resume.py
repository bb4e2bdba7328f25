"""Rebuilding a search from the database, so that where a run ends does not depend on
timing: not on the order trials finished in, nor on where the run was killed.

A search asks its strategy for a batch, measures it (trials finish in any order), and
tells the strategy the batch in proposal order. The database keeps each trial's proposal
number and batch, and claims for configurations still being measured. To resume, the
strategy is driven again from its seed over the stored proposals in proposal order:

- a batch that this strategy and seed asked for is asked for again (on a copy of the
  strategy); when the copy proposes exactly the stored batch, it is that batch replayed
  and the copy goes on, told the stored trials in proposal order — the same asks and tells
  the interrupted run made, so the strategy ends in the same state;
- anything else (seeded configurations, imports, other strategies or seeds, a batch the
  strategy would not propose again, and every batch after the first it would not propose
  again) is told as stored trials, before the next ask, as a run starting on that database
  would have told it.

The last batch may be incomplete: the interrupted run's claims on it (a dead owner's) are
taken over and measured, and then the batch is told, as the uninterrupted run would.
The result is a pure function of the seed and the stored proposals.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Sequence

from .database import Claim, Record
from .space import Config, Space, SpaceError
from .trial import Trial


@dataclass(frozen=True)
class Resumed:
    """The rebuilt strategy and what is left to measure of the stored proposals."""

    strategy: object
    batch: tuple[Config, ...] = ()  # the interrupted batch, in proposal order
    batch_trials: dict = field(default_factory=dict)  # Config -> Trial: its members already stored
    # (point of the space, stored claim): the batch's members a dead owner left claimed,
    # to take over; and other claims left by dead or silent owners.
    batch_claims: tuple[tuple[Config, Claim], ...] = ()
    orphans: tuple[tuple[Config, Claim], ...] = ()
    # What the rebuild looked at: stored configuration keys and the highest row id, so the
    # search later tells only what other processes store after it.
    seen: frozenset = frozenset()
    last_id: int = 0

    @classmethod
    def nothing_to_replay(cls, strategy, records: Sequence[Record]) -> "Resumed":
        """For a caller that told `records` to `strategy` itself."""
        return cls(strategy, seen=frozenset(r.trial.config.key() for r in records),
                   last_id=max((r.id for r in records), default=0))


@dataclass(frozen=True)
class _Entry:
    proposal: int
    batch: int | None
    asked: bool
    label: tuple[str, int | None]
    config: Config
    trial: Trial | None = None  # None: a claim
    claim: Claim | None = None


def rebuild(strategy, space: Space, records: Sequence[Record], claims: Sequence[Claim],
            label: tuple[str, int | None], now: float | None = None) -> Resumed:
    """Drive `strategy` (fresh from its seed) over the stored proposals; see the module."""
    groups = _groups(_entries(space, records, claims))
    foreign: list[Trial] = []
    seen = frozenset(r.trial.config.key() for r in records)
    last_id = max((r.id for r in records), default=0)
    orphans: list[tuple[Config, Claim]] = []
    diverged = False  # a batch this strategy asked for is not what it proposes now
    for position, group in enumerate(groups):
        live = any(e.claim is not None and not e.claim.expired(now) for e in group)
        stored = [e for e in group if e.trial is not None]
        last_left = position == len(groups) - 1 and len(stored) < len(group) and not live
        if not diverged and group[0].asked and not live and all(e.label == label for e in group):
            strategy.tell(foreign)
            foreign = []
            attempt = copy.deepcopy(strategy, {id(space): space})
            if attempt.ask(len(group)) == [e.config for e in group]:
                if len(stored) == len(group):
                    attempt.tell([e.trial for e in group])
                    strategy = attempt
                    continue
                if last_left:
                    return _left(attempt, group, orphans, seen, last_id)
            else:
                # The strategy learns from more than this workload's trials (other layers' and
                # workloads' priors, stored since): once it proposes otherwise, the later
                # batches were planned from a state it no longer reaches, and asking again for
                # each (a model fit per batch) only costs. They are told as stored trials.
                diverged = True
        if last_left and group[0].batch is not None:
            # Being measured when the run stopped, but not to be asked again (given: seeds,
            # trials measured again; or another strategy's): finished first, told whole.
            strategy.tell(foreign)
            return _left(strategy, group, orphans, seen, last_id)
        for entry in group:
            if entry.trial is not None:
                foreign.append(entry.trial)
            else:
                # Being measured elsewhere, or to be taken over: never proposed again here.
                strategy.skip([entry.config])
                if entry.claim.expired(now):
                    orphans.append((entry.config, entry.claim))
    strategy.tell(foreign)
    return Resumed(strategy, orphans=tuple(orphans), seen=seen, last_id=last_id)


def _left(strategy, group: list["_Entry"], orphans, seen, last_id) -> Resumed:
    """The interrupted batch: what of it is stored, and the claims to take over."""
    return Resumed(strategy, tuple(e.config for e in group), {e.config: e.trial for e in group if e.trial is not None},
                   tuple((e.config, e.claim) for e in group if e.claim is not None), tuple(orphans), seen, last_id)


def _as_point(space: Space, config: Config) -> Config | None:
    """A stored configuration as a legal point of `space` (a parameter added since takes
    its default), or None when it is outside it."""
    try:
        point = space.make(config.as_dict())
    except SpaceError:
        return None
    return point if space.is_legal(point) else None


def _entries(space: Space, records: Sequence[Record], claims: Sequence[Claim]) -> list[_Entry]:
    entries = []
    for record in records:
        point = _as_point(space, record.trial.config)
        if point is not None and record.proposal is not None:
            trial = Trial(point, record.trial.outcome, record.trial.values, record.trial.error, record.trial.info,
                          record.trial.measured_by, record.trial.measured_at)
            entries.append(_Entry(record.proposal, record.batch, record.asked, (record.strategy, record.seed), point,
                                  trial=trial))
    for claim in claims:
        point = _as_point(space, claim.config)
        if point is not None:
            entries.append(_Entry(claim.proposal, claim.batch, claim.asked, (claim.strategy, claim.seed), point,
                                  claim=claim))
    return sorted(entries, key=lambda e: e.proposal)


def _groups(entries: list[_Entry]) -> list[list[_Entry]]:
    """Entries measured together form one group (by batch); one with no batch (imported,
    migrated) is its own."""
    groups: list[list[_Entry]] = []
    by_batch: dict[int, list[_Entry]] = {}
    for entry in entries:
        if entry.batch is None:
            groups.append([entry])
        elif entry.batch in by_batch:
            by_batch[entry.batch].append(entry)
        else:
            by_batch[entry.batch] = [entry]
            groups.append(by_batch[entry.batch])
    return groups
