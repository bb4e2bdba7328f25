"""A model's activations in one arena: every intermediate tensor gets an offset, tensors whose
lifetimes overlap never share bytes, and an operator that may write its output over an
input (app/model/ops `in_place`) gets both at one offset when that input dies there.

Offsets are assigned greedily by size (the largest buffer first, each at the lowest
16-byte-aligned offset where it overlaps no already placed buffer that is alive at the same
time): the heuristic TFLite Micro's greedy memory planner documents, and the "greedy by
size" strategy of Pisarchyk and Lee, "Efficient Memory Management for Deep Neural Net
Inference" (2020). Helium and NEON loads want 16-byte alignment, so every offset and the
arena size are multiples of 16.

Lifetimes are positions in the schedule (the order the module runs its operators): a
tensor is alive from the step that writes it to the last step that reads it, inclusive.

A tuned layer's scratch (im2col rows, padded copies, unfused accumulators: codegen/scratch.py)
is planned the same way, as a buffer alive during its own step only (TFLite Micro's scratch
buffers, requested by an operator and placed in its arena, live as long): it takes bytes
free while that layer runs, beside its input and output, and no memory beside the arena.
Its entry has a negative id (scratch_id), so tensor indexes and scratch never collide.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Mapping

ALIGN = 16


class PlanError(ValueError):
    """An inconsistent request (a bug of the caller, not user input)."""


@dataclass(frozen=True)
class TensorLife:
    tensor: int  # the model's tensor index
    nbytes: int
    first: int  # the step that writes it
    last: int  # the last step that reads it (== first when nothing does)

    def overlaps(self, other: "TensorLife") -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class Allocation:
    tensor: int
    offset: int
    nbytes: int
    first: int
    last: int
    shares: int | None = None  # the tensor it was put on in place, if any

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


@dataclass(frozen=True)
class MemoryPlan:
    allocations: tuple[Allocation, ...]  # by tensor index
    arena_bytes: int  # the peak: the arena's size (a multiple of ALIGN)
    alignment: int = ALIGN
    # Allocations over the model's input buffer (offsets from its start), not in the arena:
    # a patch plan's module writes over its input once read (app/model/patch_module.py).
    over_input: tuple[Allocation, ...] = ()

    def offset(self, tensor: int) -> int:
        return self.by_tensor()[tensor].offset

    def by_tensor(self) -> dict[int, Allocation]:
        return {a.tensor: a for a in self.allocations}

    @property
    def tensors(self) -> tuple[Allocation, ...]:
        """The model's tensors (the layers' scratch left out)."""
        return tuple(a for a in self.allocations if a.tensor >= 0)

    @property
    def scratch(self) -> dict[int, Allocation]:
        """step position -> the scratch planned for it (in the arena or over the input)."""
        return {-1 - a.tensor: a for a in (*self.allocations, *self.over_input) if a.tensor < 0}

    @property
    def total_bytes(self) -> int:
        """What the tensors would take without sharing (each aligned)."""
        return sum(aligned(a.nbytes) for a in self.allocations)


def scratch_id(step: int) -> int:
    """The plan's id of the scratch of the step at position `step` of the schedule."""
    return -1 - step


def aligned(n: int, alignment: int = ALIGN) -> int:
    return (n + alignment - 1) // alignment * alignment


@dataclass
class _Group:
    """Tensors that share bytes (an in-place chain): its span and size; each member at its
    shift from the group's offset (0 but for outputs that end where their input ends)."""
    members: list[int]
    nbytes: int
    first: int
    last: int
    shifts: dict[int, int] | None = None
    rects: list[tuple[int, int, int, int]] | None = None  # (shift, aligned size, first, last) per member

    def shift(self, member: int) -> int:
        return (self.shifts or {}).get(member, 0)

    def add_at_end(self, out: int, nbytes: int, source: int, source_bytes: int, alignment: int) -> None:
        """`out` ending where `source` ends (on an aligned shift at or before that), the group
        grown at its front when it does not fit."""
        shifts = {m: self.shift(m) for m in self.members}
        shift = (shifts[source] + source_bytes - nbytes) // alignment * alignment
        bump = max(0, -shift)
        self.shifts = {m: v + bump for m, v in shifts.items()}
        self.shifts[out] = shift + bump
        self.nbytes = max(self.nbytes + bump, shift + bump + nbytes)

    def add_before(self, out: int, nbytes: int, source: int, lag: int, alignment: int) -> None:
        """`out` starting `lag` bytes (rounded up to the alignment) before `source` starts, the
        group grown at its front when it does not fit."""
        shifts = {m: self.shift(m) for m in self.members}
        shift = shifts[source] - aligned(lag, alignment)
        bump = max(0, -shift)
        self.shifts = {m: v + bump for m, v in shifts.items()}
        self.shifts[out] = shift + bump
        self.nbytes = max(self.nbytes + bump, shift + bump + nbytes)


def _groups(lives: dict[int, TensorLife], in_place: Mapping[int, int], grows: frozenset[int] = frozenset(),
            ends: frozenset[int] = frozenset(), alignment: int = ALIGN, bump: int = 1 << 30,
            lags: Mapping[int, int] | None = None) -> dict[int, _Group]:
    """Merge each in-place output into its input's group when the input dies at the step
    that writes the output (a later read would see overwritten bytes otherwise). An output
    larger than its input joins only when it is in `grows` (its operator reads the whole
    input before writing) or `ends` (it is written in order, so that ending where its input
    ends keeps every write behind the reads), and the group grows to it. An output in `lags`
    starts that many bytes before its input (its operator writes each byte only after the
    reads that far ahead are done: a 3x3 convolution in pixel order)."""
    group_of = {t: t for t in lives}
    groups = {t: _Group([t], life.nbytes, life.first, life.last) for t, life in lives.items()}
    for out in sorted(in_place, key=lambda t: lives[t].first if t in lives else -1):
        source = in_place[out]
        if out not in lives or source not in lives:
            continue
        home = group_of[source]
        g = groups[home]
        if g.last != lives[out].first or lives[source].last != lives[out].first or \
                (lives[out].nbytes > g.nbytes and out not in grows and out not in ends):
            continue  # the input is read later, or the output would not fit where it is
        if out in (lags or {}):
            g.add_before(out, lives[out].nbytes, source, lags[out], alignment)
        elif out in ends and lives[out].nbytes > lives[source].nbytes:
            if len(g.members) > bump and g.shift(source) + lives[source].nbytes < lives[out].nbytes:
                continue
            g.add_at_end(out, lives[out].nbytes, source, lives[source].nbytes, alignment)
        else:
            g.nbytes = max(g.nbytes, g.shift(source) + lives[out].nbytes)
            if g.shift(source):
                g.shifts[out] = g.shift(source)
        g.members.append(out)
        g.last = max(g.last, lives[out].last)
        group_of[out] = home
        del groups[out]
    return groups


# The orders buffers are placed in, each tried, the lowest peak kept (the first on a tie):
# greedy by size, then by first use (the schedule's order: what a layer's scratch, large and
# alive for one step, needs when the size order puts all of it first and pushes the tensors
# alive beside it above it), then by size times lifetime.
_ORDERS = (lambda g: (-g.nbytes, g.first), lambda g: (g.first, -g.nbytes),
           lambda g: (-g.nbytes * (g.last - g.first + 1), g.first))


RESTARTS = 48  # seeded shuffles of the groups tried after the fixed orders


def _orders(groups: dict[int, _Group]):
    """The fixed orders, then RESTARTS seeded shuffles (the same every run): a greedy order
    misses alternations a few steps apart (in-place depthwise layers whose scratch must sit
    beside the tensor that the convolution after them writes), which some shuffle finds."""
    yield from _ORDERS
    rank = random.Random(len(groups))
    homes = sorted(groups)
    for _ in range(RESTARTS if len(groups) > 2 else 0):
        shuffled = rank.sample(homes, len(homes))
        position = {id(groups[h]): n for n, h in enumerate(shuffled)}
        yield lambda g, position=position: (position[id(g)],)


def _lowest(rects: list[tuple[int, int, int, int]], placed: list[tuple[int, int, int, int]]) -> int:
    """The lowest offset (aligned, as every shift and placed end is) at which none of the
    group's (shift, size, first, last) rectangles overlaps a placed (start, end, first, last)
    one alive at the same time: each member checked at its own size and lifetime, so a
    long in-place chain does not hold its largest member's bytes for its whole span."""
    pairs = [(sh, n, a, b) for sh, n, f, l in rects for a, b, pf, pl in placed if pf <= l and f <= pl]
    for offset in sorted({0, *(b - sh for sh, _, _, b in pairs if b - sh > 0)}):
        if all(offset + sh + n <= a or b <= offset + sh for sh, n, a, b in pairs):
            return offset
    raise PlanError("no offset found")  # unreachable: past every placed end nothing overlaps


def _place(groups: dict[int, _Group], order, alignment: int, pinned: int | None = None) -> tuple[dict[int, int], int]:
    """Each group at the lowest aligned offset where none of its members overlaps a member of
    a group placed before it (in `order`; the `pinned` tensor's group first, so at 0) alive at
    the same time; the offsets and the peak."""
    placed: list[tuple[int, int, int, int]] = []  # (start, end, first, last) of every placed member
    offsets: dict[int, int] = {}
    for home, g in sorted(groups.items(), key=lambda item: (pinned not in item[1].members, *order(item[1]), item[0])):
        offset = _lowest(g.rects, placed)
        placed += [(offset + sh, offset + sh + n, f, l) for sh, n, f, l in g.rects]
        offsets[home] = offset
    return offsets, max((end for _, end, _, _ in placed), default=0)


def plan_memory(lives: Iterable[TensorLife], in_place: Mapping[int, int] | None = None,
                alignment: int = ALIGN, grows: Iterable[int] = (), ends: Iterable[int] = (),
                lags: Mapping[int, int] | None = None, pinned: int | None = None) -> MemoryPlan:
    """Offsets for `lives` in one arena. `in_place` maps an output tensor to the input it may
    be written over (the operator allows it); it is honoured only when that input is not read
    after the output is written and the output is no larger (or in `grows`: its operator
    reads the whole input before it writes; or in `ends`: placed to end where its input ends;
    or in `lags`: output -> bytes it starts before its input). `pinned`: a tensor placed at
    offset 0 whatever the order (a buffer the caller owns, a patch plan's model input)."""
    lives = {life.tensor: life for life in lives}
    for life in lives.values():
        if life.nbytes < 0 or life.last < life.first:
            raise PlanError(f"tensor {life.tensor}: {life.nbytes} bytes alive from step {life.first} to {life.last}")
    best = None
    # Outputs ending where their input ends make rigid chains: tried with the chains grown at
    # their front, only while short (two members: a depthwise layer in place and the
    # pointwise one after it), never, and without them; the lowest peak kept (the first on a tie).
    for chains in ((frozenset(ends), 1 << 30), (frozenset(ends), 2), (frozenset(ends), 0),
                   (frozenset(), 0))[:4 if ends else 1]:
        groups = _groups(lives, in_place or {}, frozenset(grows), *chains[:1], alignment, chains[1], lags)
        for g in groups.values():
            g.rects = [(g.shift(m), aligned(lives[m].nbytes, alignment), lives[m].first, lives[m].last)
                       for m in g.members]
        offsets, peak = min((_place(groups, order, alignment, pinned) for order in _orders(groups)),
                            key=lambda p: p[1])
        if best is None or peak < best[2]:
            best = (groups, offsets, peak)
    groups, offsets, peak = best
    allocations = []
    for home, g in groups.items():
        for member in g.members:
            life = lives[member]
            allocations.append(Allocation(member, offsets[home] + g.shift(member), life.nbytes, life.first, life.last,
                                          None if member == home else g.members[g.members.index(member) - 1]))
    return MemoryPlan(tuple(sorted(allocations, key=lambda a: a.tensor)), aligned(peak, alignment), alignment)


def check_plan(plan: MemoryPlan, lives: Iterable[TensorLife], in_place: Mapping[int, int] | None = None) -> list[str]:
    """What is wrong with a plan (empty when nothing): overlapping live tensors that are not
    an allowed in-place pair, misaligned offsets, tensors past the arena."""
    problems = []
    allowed = {(o, i) for o, i in (in_place or {}).items()} | {(i, o) for o, i in (in_place or {}).items()}
    allocations = plan.allocations
    for a in allocations:
        if a.offset % plan.alignment:
            problems.append(f"tensor {a.tensor} at offset {a.offset} is not {plan.alignment}-byte aligned")
        if a.end > plan.arena_bytes:
            problems.append(f"tensor {a.tensor} ends at {a.end}, past the arena's {plan.arena_bytes} bytes")
    for n, a in enumerate(allocations):
        for b in allocations[n + 1:]:
            live = a.first <= b.last and b.first <= a.last
            if live and a.offset < b.end and b.offset < a.end and not _chained(plan, a.tensor, b.tensor, allowed):
                problems.append(f"tensors {a.tensor} and {b.tensor} are alive together and share bytes")
    return problems


def _chained(plan: MemoryPlan, a: int, b: int, allowed: set[tuple[int, int]]) -> bool:
    """a and b share bytes legitimately: one was put on the other in place, by an allowed pair."""
    by = plan.by_tensor()
    for x, y in ((a, b), (b, a)):
        if by[x].shares == y and (x, y) in allowed:
            return True
    return False
