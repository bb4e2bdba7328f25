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
        """step position -> the scratch planned for it."""
        return {-1 - a.tensor: a for a in self.allocations if a.tensor < 0}

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
    """Tensors that share one offset (an in-place chain): its span and size."""
    members: list[int]
    nbytes: int
    first: int
    last: int


def _groups(lives: dict[int, TensorLife], in_place: Mapping[int, int], grows: frozenset[int] = frozenset()) -> dict[int, _Group]:
    """Merge each in-place output into its input's group when the input dies at the step
    that writes the output (a later read would see overwritten bytes otherwise). An output
    larger than its input joins only when it is in `grows` (its operator reads the whole
    input before writing), and the group grows to it."""
    group_of = {t: t for t in lives}
    groups = {t: _Group([t], life.nbytes, life.first, life.last) for t, life in lives.items()}
    for out in sorted(in_place, key=lambda t: lives[t].first if t in lives else -1):
        source = in_place[out]
        if out not in lives or source not in lives:
            continue
        home = group_of[source]
        g = groups[home]
        if g.last != lives[out].first or lives[source].last != lives[out].first or \
                (lives[out].nbytes > g.nbytes and out not in grows):
            continue  # the input is read later, or the output would not fit where it is
        g.nbytes = max(g.nbytes, lives[out].nbytes)
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


def _place(groups: dict[int, _Group], order, alignment: int) -> tuple[dict[int, int], int]:
    """Each group at the lowest aligned offset where it overlaps no group placed before it
    (in `order`) that is alive at the same time; the offsets and the peak."""
    placed: list[tuple[int, int, _Group]] = []  # (offset, size, group)
    offsets: dict[int, int] = {}
    for home, g in sorted(groups.items(), key=lambda item: (*order(item[1]), item[0])):
        size = aligned(g.nbytes, alignment)
        offset = 0
        for start, length, other in sorted(((o, s, og) for o, s, og in placed
                                             if og.first <= g.last and g.first <= og.last), key=lambda p: p[0]):
            if offset + size <= start:
                break
            offset = max(offset, aligned(start + length, alignment))
        placed.append((offset, size, g))
        offsets[home] = offset
    return offsets, max((o + s for o, s, _ in placed), default=0)


def plan_memory(lives: Iterable[TensorLife], in_place: Mapping[int, int] | None = None,
                alignment: int = ALIGN, grows: Iterable[int] = ()) -> MemoryPlan:
    """Offsets for `lives` in one arena. `in_place` maps an output tensor to the input it may
    be written over (the operator allows it); it is honoured only when that input is not read
    after the output is written and the output is no larger (or in `grows`: its operator
    reads the whole input before it writes)."""
    lives = {life.tensor: life for life in lives}
    for life in lives.values():
        if life.nbytes < 0 or life.last < life.first:
            raise PlanError(f"tensor {life.tensor}: {life.nbytes} bytes alive from step {life.first} to {life.last}")
    groups = _groups(lives, in_place or {}, frozenset(grows))
    offsets, peak = min((_place(groups, order, alignment) for order in _orders(groups)), key=lambda placed: placed[1])
    allocations = []
    for home, g in groups.items():
        for member in g.members:
            life = lives[member]
            allocations.append(Allocation(member, offsets[home], life.nbytes, life.first, life.last,
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
