"""Which way a requantization's tests of its shift go, read from the code.

TFLite's per-channel requantization multiplies by a fixed-point multiplier and then shifts by
an exponent: left when it is positive, right with rounding when it is negative. The converter
gives negative exponents for int8 layers whose effective scale is below one half, which is
every layer of the MLPerf Tiny models we ship and every tuning input
(codegen.kernels.convolution.TFLITE_CONVENTION: exponents in [-20, -1]). So the rounding right
shift runs on every output, while a branch the values cannot decide counts one half
(targets.static_profile): a 1x1 convolution's GCC variants were undercounted by a constant
8% of their instructions, its clang variants by 3% (QEMU, 2026-12-04), enough to rank a
slower build first.

The exponent itself is data (a per-channel array), but the code says which register holds
it: the compiler negates it to get the right shift's count. A two-way branch on `cmp rA, #0`,
`cmp rA, #1`, `cbz rA` or `cbnz rA` is decided here when every definition of rA reaching it
(along each path into its block, back edges left out) is

- a negation (`negs rA, rS`, `rsb rA, rS, #0`, Armv8.1-M's `csneg rA, rZero, rS, gt`): the
  right shift's count, taken as 1 and as 20; a count set to zero on another path (GCC's left
  shift path, clang's `it gt; movgt rA, #0`) is where the exponent would be positive, which
  the convention never runs, so it is left out;
- a load that a negation reads soon after (or at the start of a block the test branches
  to): the exponent, taken as -1 and as -20;

and the condition comes out the same at both ends. Anything else stays undecided. The walk
(targets.branch_walk) follows these tests the same way, so a path only a positive exponent
takes is not walked.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from .thumb_decode import INVERSE, Decoded, immediate
from .thumb_values import Values, condition_holds, flag_setter

# The convention's exponents (TFLITE_CONVENTION) at both ends, and the right shift's counts.
EXPONENTS = (-1, -20)
RIGHT_SHIFTS = (1, 20)
# How far after a load a negation of it still marks it as the exponent (GCC loads it before
# the multiply, 30-odd instructions ahead of the negation).
_NEGATION_REACH = 40
# ... or among the first instructions of the blocks the test branches to (GCC's depthwise
# code negates it on the right shift's path).
_SUCCESSOR_REACH = 4
# How many blocks to look back through for the definitions reaching a test.
_SEARCH_BLOCKS = 16
# The roles of a value the tests read: a right shift's count, zero, the exponent itself.
RIGHT, ZERO, EXPONENT = "right shift", "zero", "exponent"


@dataclass(frozen=True)
class Near:
    """Where a negation marks a loaded value as the exponent: the instructions after the
    load up to `until`, and `successors` (the starts of the blocks the test branches to)."""
    until: int
    successors: tuple[int, ...]


def _is_negation(d: Decoded, target: str | None = None, source: str | None = None) -> bool:
    """`neg(s) target, source`, `rsb(s) target, source, #0`, or Armv8.1-M's conditional
    negation `csneg target, other, source, cond` (either register any when None)."""
    if d.base in ("neg", "negs") and len(d.ops) == 2 or d.base in ("rsb", "rsbs") and len(d.ops) == 3 \
            and immediate(d.ops[2]) == 0:
        negated = d.ops[1]
    elif d.base == "csneg" and len(d.ops) == 4:
        negated = d.ops[2]
    else:
        return False
    return (target is None or d.ops[0] == target) and (source is None or negated == source)


def _zero_before(profile, j: int, start: int, register: str) -> bool:
    """Whether `register` was last set to zero before instruction j, from instruction `start`
    (its block's first) on."""
    for k in range(j - 1, start - 1, -1):
        if register in _writes(profile.decoded[k]):
            return _zeroes(profile.decoded[k], register)
    return False


def _is_conditional_move(d: Decoded) -> bool:
    """`mov<cond>` inside an IT block."""
    return d.base[:3] == "mov" and d.base[3:] in INVERSE


def _zeroes(d: Decoded, register: str) -> bool:
    """`mov(s) register, #0`, or `mov<cond> register, #0` (a right shift's count clamped at
    zero inside an IT block)."""
    return ((d.base in ("mov", "movs") or _is_conditional_move(d)) and len(d.ops) == 2 and d.ops[0] == register
            and immediate(d.ops[1]) == 0)


def _writes(d: Decoded) -> frozenset[str]:
    """The registers an instruction writes, base registers written back included."""
    stepped = {base for base, _ in d.pre_indexed} | ({d.post_indexed[0]} if d.post_indexed else set())
    return d.written | stepped


def _role(profile, j: int, start: int, register: str, near: Near) -> str | None:
    """What instruction j (of the block from instruction `start`) makes of `register`: RIGHT,
    ZERO, EXPONENT, or None (anything else)."""
    d = profile.decoded[j]
    if _is_negation(d, target=register):
        # clang for Armv8.1-M: `mov r5, #0; cmp r4, #0; csneg r4, r5, r4, gt`: the count or zero
        return RIGHT if d.base != "csneg" or _zero_before(profile, j, start, d.ops[1]) else None
    if _zeroes(d, register):
        return ZERO
    if d.base.startswith("ldr") and d.target == register:
        after = itertools.chain(range(j + 1, near.until), near.successors)
        if any(_is_negation(profile.decoded[m], source=register) for m in after):
            return EXPONENT
    return None


def _reaching_roles(profile, b: int, before: int, register: str, near: Near) -> set[str] | None:
    """The roles of every definition of `register` that reaches instruction `before` of block
    b, along every path into it (back edges left out: the value of this iteration); None when
    one is of no role, or a path reaches the entry (an argument) or runs long."""
    roles: set[str] = set()
    seen = {b}
    stack = [(b, before)]
    while stack:
        block, end = stack.pop()
        start = profile.graph.blocks[block][0]
        defined = False
        for j in range(end - 1, start - 1, -1):
            if register not in _writes(profile.decoded[j]):
                continue
            role = _role(profile, j, start, register, near)
            if role is None:
                return None
            roles.add(role)
            if not (role == ZERO and _is_conditional_move(profile.decoded[j])):
                defined = True  # what a conditional zeroing skips reaches too: look on
                break
        if defined:
            continue
        # (profile.dom holds the blocks reachable from the entry: a literal pool is not)
        entering = [p for p in profile.graph.predecessors[block]
                    if p in profile.dom and not profile.is_back_edge(p, block)]
        if not entering or len(seen) + len(entering) > _SEARCH_BLOCKS:
            return None
        for p in entering:
            if p not in seen:
                seen.add(p)
                stack.append((p, profile.graph.blocks[p][1]))
    return roles


def _values_at(profile, u: int, compare: int, register: str) -> tuple[int, int] | None:
    """The values the convention gives `register` at the compare (RIGHT_SHIFTS, EXPONENTS),
    or None. A right shift's count set to zero on some path (where the exponent would be
    positive: the left shift's path, clang's conditional move) is the count on the others."""
    heads = [range(first, min(last, first + _SUCCESSOR_REACH))
             for first, last in (profile.graph.blocks[v] for v in profile.graph.successors[u])]
    near = Near(min(len(profile.decoded), compare + _NEGATION_REACH), tuple(itertools.chain(*heads)))
    roles = _reaching_roles(profile, u, compare, register, near)
    if not roles:
        return None
    if RIGHT in roles and roles <= {RIGHT, ZERO}:
        return RIGHT_SHIFTS
    return EXPONENTS if roles == {EXPONENT} else None


def shift_test_way(profile, u: int) -> list[float] | None:
    """Edge probabilities (1 and 0) of block u's two-way branch when it tests a shift's sign
    under the convention; None when it does not, or the convention's two ends disagree.
    `profile`: a static_profile.FunctionProfile (graph, decoded instructions, back edges)."""
    branch = profile.branch(u, Values())  # its condition and its ways (what it compares: unknown here)
    if branch is None or branch.jumped is None or branch.fell is None:
        return None
    start, end = profile.graph.blocks[u]
    last = profile.decoded[end - 1]
    if last.base in ("cbz", "cbnz") and last.ops:  # compares its register with 0
        compare, register, bound = end - 1, last.ops[0], 0
    elif last.base[:1] == "b" and branch.condition in INVERSE:
        compare = flag_setter(profile.instructions[start:end - 1])
        if compare is None:
            return None
        compare += start
        flags_from = profile.decoded[compare]
        if flags_from.base != "cmp" or len(flags_from.ops) != 2 or immediate(flags_from.ops[1]) not in (0, 1):
            return None
        register, bound = flags_from.ops[0], immediate(flags_from.ops[1])
    else:
        return None
    values = _values_at(profile, u, compare, register)
    if values is None:
        return None
    verdicts = {condition_holds((value, bound), branch.condition) for value in values}
    if len(verdicts) != 1 or None in verdicts:
        return None
    way = branch.jumped if verdicts.pop() else branch.fell
    return [1.0 if v == way else 0.0 for v in profile.graph.successors[u]]
