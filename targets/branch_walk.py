"""How often each two-way branch inside a kernel's loops goes each way, from one walk of the
function over known values.

The static profile weighs a branch that is no loop's exit at one half. In convolution code
many such branches test the loop counters, not the data: whether a filter tap falls in the
padding (`iy >= 0 && iy < H && ...`), whether a pixel tile is the last. Over DS-CNN's 25x5
depthwise layer 84% of the taps are inside, so counting the tap's multiply loop half the
time (a quarter, behind two such tests) put the estimate at 0.57 of QEMU's count.

The walk runs the function once the way the values say, block by block, from its entry
(targets.thumb_values: constants, symbol + offset): a branch whose values are known goes
that way and is counted; a requantization's test of its shift goes the way TFLite's negative
exponents send it (targets.shift_sign); any other the values do not decide (a requantization
testing the sign of its product) alternates, and its loop exits follow the trip counts already worked out. Loops with no
branch worth walking (none, or only ones the values never decide) whose first runs went as
their count said are not walked again: the walk jumps over them, what they change unknown,
so a multiply loop of a million runs costs little; a loop whose runs differ (a triangular
nest) is walked each time. At most WALK_INSTRUCTIONS instructions are run (about 0.15 s,
each instruction read once by targets.thumb_decode); a walk cut short gives the shares of
the iterations it saw (DS-CNN's depthwise layer at GCC's O3: 17 of its 31 pixel groups).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from .thumb_values import sp_offset, unknown

WALK_INSTRUCTIONS = 100_000
VERIFY_RUNS = 2  # a loop is jumped over once this many of its runs have gone as its count said


@dataclass(frozen=True)
class WalkResult:
    # two-way branches the values always decided: block -> {successor: share of the times}
    shares: dict[int, dict[int, float]]
    # loops whose count was not worked out, but whose every exit the walk decided: mean iterations
    trips: dict[int, float]


def walk_branches(profile, trips: dict[int, int | None], guess: int) -> WalkResult:
    """Walk `profile` (a static_profile.FunctionProfile) whose loops' trip counts are `trips`
    (None: not worked out, `guess` iterations then)."""
    walk = _Walk(profile, trips, guess)
    walk.run()
    # A loop's exits count once the walk has seen the loop left (a walk cut short inside a
    # loop saw its exits stay, not how often they leave), and only when it decided every
    # branch in the loop: an exit's share is a share of the times the walk reached it, which
    # the flow equations reproduce only if they reach it as often (a branch before it at one
    # half may send twice the iterations to an exit the walk took once in four).
    complete = {h for h, body in walk.profile.loops.items() if walk.runs.get(h) and not body & walk.undecided}
    shares = {u: {v: n / sum(ways.values()) for v, n in ways.items()} for u, ways in walk.went.items()
              if u not in walk.undecided and (walk.leaves[u] is None or walk.leaves[u] in complete)}
    seen = {h: sum(runs) / len(runs) for h, runs in walk.runs.items()
            if runs and trips[h] is None and h not in walk.guessed}
    return WalkResult(shares, seen)


class _Walk:
    def __init__(self, profile, trips: dict[int, int | None], guess: int):
        self.profile, self.known = profile, {h for h, t in trips.items() if t is not None}
        self.trips = {h: guess if t is None else t for h, t in trips.items()}
        self.graph = profile.graph
        by_size = sorted(profile.loops, key=lambda h: len(profile.loops[h]))
        # the innermost loop each two-way block can leave (None: it leaves none, a plain branch)
        self.leaves: dict[int, int | None] = {}
        for u, successors in enumerate(self.graph.successors):
            if len(successors) == 2:
                self.leaves[u] = next((h for h in by_size if u in profile.loops[h]
                                       and any(v not in profile.loops[h] for v in successors)), None)
        self.plain_in = {h: [u for u in body if u in self.leaves and self.leaves[u] is None]
                         for h, body in profile.loops.items()}
        # a loop is jumped over only when its count, and those of the loops in it, are known
        self.countable = {h: all(g in self.known for g in profile.loops if g in body)
                          for h, body in profile.loops.items()}
        # loops that store values they know into an array on the stack (the coordinates of a
        # tile's pixels, which later branches test): walked every time, so they stay known
        self.fills_known = {h: any(known for b in body for _, _, known in profile.stepped_stores.get(b, ()))
                            for h, body in profile.loops.items()}
        self.swept = {h: self._swept(h) for h in profile.loops}
        self.runs: dict[int, list[int]] = defaultdict(list)  # each loop's iterations, run by run
        self.guessed: set[int] = set()  # loops left on a guess at least once
        self.went: dict[int, Counter] = defaultdict(Counter)
        self.undecided: set[int] = set()
        self._toggle: dict[int, int] = {}

    def run(self) -> None:
        state = self.profile.entry.copy()
        iteration: dict[int, int] = {}
        b, previous, budget = 0, None, WALK_INSTRUCTIONS
        while budget > 0:
            if b in self.profile.loops:
                if previous is not None and self.profile.is_back_edge(previous, b):
                    iteration[b] += 1
                else:
                    iteration[b] = 1
                    if (exit_edge := self._jump_over(b, state)) is not None:
                        previous, b = exit_edge
                        state = self.profile.refined(previous, b, state)
                        continue
            start, end = self.graph.blocks[b]
            self.profile.run(state, start, end)
            budget -= end - start
            successors = self.graph.successors[b]
            if not successors:
                return  # the function returned
            previous, b = b, successors[0] if len(successors) == 1 else self._way(b, state, iteration)
            if b is None:
                return  # a branch we do not read

    def _way(self, b: int, state, iteration: dict[int, int]) -> int | None:
        branch = self.profile.branch(b, state)
        if branch is None:
            return None
        way, loop = branch.way(), self.leaves.get(b)
        if way is None:
            self.undecided.add(b)
        if way is None and loop is not None:  # a loop's exit: leave once its trips are done
            stay = next(v for v in self.graph.successors[b] if v in self.profile.loops[loop])
            way = next(v for v in self.graph.successors[b] if v != stay)
            if iteration.get(loop, 0) < self.trips[loop]:
                return stay
            self.guessed.add(loop)
        elif way is None:
            if (convention := self.profile.shift_way(b)) is not None:  # a requantization's shift test
                return self.graph.successors[b][convention.index(1.0)]
            self._toggle[b] = 1 - self._toggle.get(b, 1)
            return branch.jumped if self._toggle[b] else branch.fell
        else:
            self.went[b][way] += 1
        for h, body in self.profile.loops.items():
            if b in body and way not in body:
                self.runs[h].append(iteration.get(h, 0))
        return way

    def _jump_over(self, h: int, state) -> tuple[int, int] | None:
        """The edge the walk goes on by when loop h need not be walked (its count and its
        inner loops' known, and seen to be its count on the runs walked so far; its plain
        branches all seen undecided, or none): the loop's one way out, with what it changes
        unknown. None: walk it."""
        runs = self.runs.get(h, [])
        if not self.countable[h] or any(u not in self.undecided for u in self.plain_in[h]) \
                or len(runs) < VERIFY_RUNS or any(n != self.trips[h] for n in runs) or self.fills_known[h]:
            return None
        body = self.profile.loops[h]
        exits = {(u, v) for u in body for v in self.graph.successors[u] if v not in body}
        if len(exits) != 1:
            return None
        for name in self.profile.written_in[h] - self.profile.kept_in[h]:
            state.known[name] = unknown()
        if self.swept[h]:
            for name in list(state.known):
                offset = sp_offset(name)
                if offset is not None and any(first <= offset <= last for first, last in self.swept[h]):
                    state.known[name] = unknown()
        state.flags = None
        return exits.pop()

    def _swept(self, h: int) -> list[tuple[int, int]]:
        """The stack offsets (first, last) loop h's stepping stores can reach in one run: each
        store runs once per iteration of every loop around it inside h (counts known, as a
        jumped loop's are), its pointer stepping each time."""
        loops = self.profile.loops
        swept = []
        for b in loops[h]:
            runs = 1
            for g, body in loops.items():
                if b in body and body <= loops[h]:
                    runs *= self.trips[g]
            for first, step, _ in self.profile.stepped_stores.get(b, ()):
                last = first + step * (runs - 1)
                swept.append((min(first, last), max(first, last)))
        return swept
