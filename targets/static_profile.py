"""How many instructions a compiled variant runs, estimated from its code before it runs.

Static counts know no trip counts: a copy loop that runs once per pixel weighs what the
multiply loop that runs once per product does, and O3's loop versions and the blocks a
requantization skips count as if each ran (edgetune.tuner.product_rank's instructions per
product, which ranks the Cortex-M4's matmul_s8 spaces at 0.74-0.77). But a kernel is
specialised to one shape, so its loops run a number of times fixed at compile time; this
module works them out and weighs every block by how often it runs:

1. each function's control-flow graph and natural loops (targets.control_flow);
2. each loop's trip count, by running its control path over known values
   (targets.thumb_values) from the function's entry to the loop (the first iteration of every
   loop around it), then iteration after iteration until an exit that every iteration passes
   is taken (at most MAX_TRIPS); a loop whose count stays unknown (its bound is data, or the
   values are lost) counts UNKNOWN_TRIPS;
3. block frequencies from the edges' probabilities: a loop's exit 1/trips, a branch on the
   loop counters (a filter tap in the padding, an edge tile's test) as often as one walk of
   the function went each way (targets.branch_walk), a requantization's tests of its shift
   the way TFLite's negative exponents send them (targets.shift_sign), any other two-way
   branch one half (the sign of a product a rounding looks at);
4. the estimate: every block's instructions times its frequency, plus each call into a
   function of the same object times the callee's estimate for the constant arguments the
   call passes.

The values know the constants the code loads from its literal pool or builds with
movw/movt (an address as its relocated symbol plus offset), what an inner loop gives back
or leaves behind (a spilled counter reloaded; the pointer an exit compare found equal to
its end), divisions (a pixel counter split into row and column), coordinates a loop fills
into an array on the stack, and a requantization's INT32_MIN overflow guard (never taken).

T32 code only (the Cortex-M targets); other code has no estimate. On our seventeen recorded
spaces it ranks configurations at 0.965-1.0 (Spearman) where instructions per product
ranked them at 0.15-0.91 (docs/static-profile.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .branch_walk import walk_branches
from .control_flow import FlowGraph, dominators, flow_graph, natural_loops, reverse_postorder, target_address
from .mix import Instruction
from .shift_sign import shift_test_way
from .thumb_decode import decode
from .thumb_values import (REGISTERS, Symbol, Values, condition_holds, execute, flag_setter, immediate, is_known,
                           resolve_constants, run_decoded, split_operands, stepped_store, unknown)

MAX_TRIPS = 4096
UNKNOWN_TRIPS = 8  # a loop whose count we cannot work out: a guess, counted in `loops_unknown`
_RELOCATION = re.compile(r"^\s*([0-9a-f]+):\s+(R_ARM_\w+)\s+(\S+)")
_CALL_TYPES = frozenset({"R_ARM_THM_CALL", "R_ARM_THM_JUMP24"})
# Relocations that put a symbol's address in a register: a literal pool word, a movw/movt pair.
_ADDRESS_TYPES = frozenset({"R_ARM_ABS32", "R_ARM_THM_MOVW_ABS_NC", "R_ARM_THM_MOVT_ABS"})
_ARGUMENTS = ("r0", "r1", "r2", "r3")  # the AAPCS's argument registers


@dataclass(frozen=True)
class Relocations:
    """What an object's relocations say about its code, by (function, address): the callee
    of a call, the symbol whose address a literal word or a movw/movt holds."""
    calls: Mapping[tuple[str, int], str]
    addresses: Mapping[tuple[str, int], str]

    def of(self, function: str) -> dict[int, str]:
        """The address relocations of one function: address -> symbol."""
        return {at: symbol for (name, at), symbol in self.addresses.items() if name == function}


NO_RELOCATIONS = Relocations({}, {})


@dataclass(frozen=True)
class ProfileEstimate:
    instructions: float  # the estimated instructions one call runs
    loops: int  # natural loops in the code counted
    loops_unknown: int  # of which the trip count was not worked out


def _holds(left, right, condition: str) -> bool | None:
    """Whether a branch's condition holds on the values it compares (None: unknown)."""
    return None if left is None or right is None else condition_holds((left, right), condition)


@dataclass(frozen=True)
class ExitTest:
    """One iteration's test at a loop exit: the values its branch compares, the condition,
    and whether the loop is left when the condition holds."""
    left: object
    right: object
    condition: str
    leaves_when_holding: bool

    def verdict(self) -> str | None:
        holds = _holds(self.left, self.right, self.condition)
        if holds is None:
            return "unknown"
        return "exit" if holds == self.leaves_when_holding else None


@dataclass(frozen=True)
class Branch:
    """A block's two-way branch as the values at its end read it."""
    left: object
    right: object
    condition: str
    jumped: int | None  # the block it goes to when the condition holds
    fell: int | None  # and when it does not

    def way(self) -> int | None:
        """The block it goes to this time; None when the values do not tell."""
        holds = _holds(self.left, self.right, self.condition)
        return None if holds is None else self.jumped if holds else self.fell


def _offsets(test: ExitTest) -> tuple | None:
    """(name of the left's symbol, left offset, name of the right's, right offset): ints
    have no name; None for an unknown side."""
    def split(value):
        return (None, value) if isinstance(value, int) else (value.name, value.offset) if isinstance(value, Symbol) \
            else None
    left, right = split(test.left), split(test.right)
    return None if left is None or right is None else (*left, *right)


def _extrapolated_exit(history: list[dict[int, ExitTest]], exits: list[int], agreeing: bool) -> int | None:
    """When the last three iterations' exit tests moved by the same steps (a counter, a
    pointer), the iterations after the last one until the first exit, worked out without
    running them; 0 when the steps lead to no exit within MAX_TRIPS or the exits disagree;
    None when there is no such progression (then the loop is run on)."""
    if len(history) < 3 or any(set(h) != set(exits) for h in history[-3:]):
        return None
    steps = {}
    for b in exits:
        first, second, third = (_offsets(h[b]) for h in history[-3:])
        if first is None or second is None or third is None or first[0::2] != second[0::2] != third[0::2] \
                or first[0::2] != third[0::2]:
            return None
        step = (second[1] - first[1], second[3] - first[3])
        if step != (third[1] - second[1], third[3] - second[3]):
            return None
        steps[b] = (third, step)
    for ahead in range(1, MAX_TRIPS - len(history) + 1):
        verdicts = []
        for b in exits:
            (left_name, left, right_name, right), (left_step, right_step) = steps[b]
            last = history[-1][b]
            test = ExitTest(_value(left_name, left + ahead * left_step), _value(right_name, right + ahead * right_step),
                            last.condition, last.leaves_when_holding)
            verdicts.append(test.verdict())
            if not agreeing and verdicts[-1] is not None:
                break  # the first exit that decides, in the order the iteration reaches them
        if agreeing and len(set(verdicts)) > 1:
            return 0
        if verdicts[-1] == "exit" or (agreeing and verdicts[0] == "exit"):
            return ahead
        if "unknown" in verdicts:
            return 0
    return 0


def _value(name: str | None, offset: int):
    return offset if name is None else Symbol(name, offset)


class FunctionProfile:
    """One function's blocks, loops, trip counts and block frequencies."""

    def __init__(self, instructions: Sequence[Instruction], addresses: Sequence[int], target_of,
                 entry: Values | None = None, relocated: Mapping[int, str] | None = None):
        """`entry`: what is known on entry (the arguments a call passes; nothing by default),
        `relocated`: the function's address relocations (address -> symbol)."""
        self.instructions = instructions
        self.decoded = [decode(insn) for insn in instructions]  # read once: the walk runs them many times
        self.addresses = addresses
        self.target_of = target_of
        self.entry = entry or Values()
        self.resolved = resolve_constants(addresses, instructions, relocated or {})
        self.graph: FlowGraph = flow_graph(addresses, instructions, target_of)
        self.dom = dominators(self.graph)
        self.loops = natural_loops(self.graph, self.dom)
        self.order = reverse_postorder(self.graph, self.dom)
        self._equalities: dict[tuple[int, int], tuple[str, str] | None] = {}
        writes, self.stepped_stores = self._writes_per_block()
        self.written_in = {h: frozenset().union(*(writes[b] for b in body)) for h, body in self.loops.items()}
        self.kept_in: dict[int, frozenset[str]] = {}
        for h in sorted(self.loops, key=lambda h: len(self.loops[h])):  # a loop's inner loops first
            self.kept_in[h] = self._kept(h)
        self._entries: dict[frozenset[int], dict[int, Values]] = {}
        self._shift_ways: dict[int, list[float] | None] = {}
        self.trips = {h: self._trip_count(h) for h in self.loops}
        # the branches inside loops that test counters, not data, as often as they go each
        # way; the loops whose count only the walk saw, as many times as it saw them run
        walked = walk_branches(self, self.trips, UNKNOWN_TRIPS)
        self.shares = walked.shares
        self.trips.update(walked.trips)

    def block(self, b: int) -> Sequence[Instruction]:
        start, end = self.graph.blocks[b]
        return self.instructions[start:end]

    def run(self, state: Values, start: int, end: int) -> None:
        """Run instructions start..end-1 on `state`, with the constants the code shows."""
        run_decoded(state, self.decoded[start:end], self.resolved[start:end])

    def _writes_per_block(self) -> tuple[dict[int, frozenset[str]], dict[int, list[tuple[int, int, bool]]]]:
        """What each block writes (registers, stack slots), its stores' addresses read with
        the values of one pass in which every loop runs its first iteration, so that a store
        through a pointer into the stack names the slot it writes there; and each block's
        stores that step such a pointer (thumb_values.stepped_store: the first slot's offset
        from sp, the step, whether the value is known), whose later slots the writes do not
        name (the walk, targets.branch_walk, works out how far they reach)."""
        writes: dict[int, frozenset[str]] = {}
        stepped_stores: dict[int, list[tuple[int, int, bool]]] = {}
        out: dict[int, Values] = {}
        every_loop = frozenset(self.loops)
        for b in self.order:
            state = self._state_into(b, 0, self.entry, out, every_loop)
            written: set[str] = set()
            for insn, constant in zip(self.block(b), self.resolved[slice(*self.graph.blocks[b])]):
                if state is not None and (stepped := stepped_store(state, insn)) is not None:
                    stepped_stores.setdefault(b, []).append(stepped)
                written |= execute(state if state is not None else Values(), insn, resolved=constant)
            writes[b] = frozenset(written)
            if state is not None:
                out[b] = state
        for b in range(len(self.graph)):  # blocks no path reaches
            writes.setdefault(b, frozenset())
        return writes, stepped_stores

    def is_back_edge(self, u: int, v: int) -> bool:
        return v in self.dom.get(u, ())

    @staticmethod
    def _meet(states: list[Values]) -> Values | None:
        """What paths merging at a block agree on; the rest unknown."""
        if not states:
            return None
        if len(states) == 1:
            return states[0].copy()
        names = set().union(*(s.known for s in states))
        merged = Values()
        for name in names:
            seen = [s.known.get(name) for s in states]
            merged.known[name] = seen[0] if seen[0] is not None and all(v == seen[0] for v in seen) else unknown()
        merged.flags = states[0].flags if all(s.flags == states[0].flags for s in states) else None
        return merged

    def _forward(self, start: int, values: Values, region, first_iteration_of, on_block=None):
        """One pass over `region` in reverse postorder from `start`, back edges left out: the
        values at the end of every block. At the header of a loop not in
        `first_iteration_of` what the loop writes becomes unknown (it ran some times)."""
        out: dict[int, Values] = {}
        for b in self.order:
            if b not in region:
                continue
            state = self._state_into(b, start, values, out, first_iteration_of)
            if state is None:
                continue
            self.run(state, *self.graph.blocks[b])
            out[b] = state
            if on_block is not None and (verdict := on_block(b, state)) is not None:
                return verdict
        return out

    def _state_into(self, b: int, start: int, values: Values, out: dict[int, Values], first_iteration_of):
        """The values on entry to block b in a _forward pass (None: no path reached it yet)."""
        if b == start:
            return values.copy()
        state = self._meet([self.refined(p, b, out[p]) for p in self.graph.predecessors[b]
                            if p in out and not self.is_back_edge(p, b)])
        if state is not None and b in self.loops and b not in first_iteration_of:
            for name in self.written_in[b] - self.kept_in[b]:
                state.known[name] = unknown()
            state.flags = None
        return state

    def refined(self, p: int, b: int, state: Values) -> Values:
        """The values along edge p -> b: where p's branch goes this way only when a register
        equals an operand (a pointer loop's `cmp r1, lr; bne` falling through, a `cbz`
        taken), the one known of the two stands for the other, so what the loop leaves
        behind (the pointer at its end) is known after it."""
        equality = self._equal_edge(p, b)
        if equality is None:
            return state
        register, operand = equality
        other = immediate(operand) if operand.startswith("#") else state.known.get(operand)
        mine = state.known.get(register)
        if is_known(other) and not is_known(mine):
            state = state.copy()
            state.known[register] = other
        elif is_known(mine) and not is_known(other) and not operand.startswith("#"):
            state = state.copy()
            state.known[operand] = mine
        return state

    def _equal_edge(self, p: int, b: int) -> tuple[str, str] | None:
        if (p, b) not in self._equalities:
            self._equalities[(p, b)] = self._equality(p, b)
        return self._equalities[(p, b)]

    def _overflow_guard(self, u: int, v: int) -> bool:
        """Whether edge u -> v is taken only when a value equals INT32_MIN: the guard of a
        saturating doubling multiply (requantization), which only INT32_MIN x INT32_MIN
        overflows; the code almost never goes that way."""
        equality = self._equal_edge(u, v)
        return equality is not None and (value := immediate(equality[1])) is not None and value & 0xFFFFFFFF == 1 << 31

    def _equality(self, p: int, b: int) -> tuple[str, str] | None:
        """(register, operand) that edge p -> b is taken only when equal; None for no such edge."""
        block = self.block(p)
        last = block[-1]
        base = last.mnemonic.split(".")[0]
        if len(set(self.graph.successors[p])) != 2:
            return None
        jumped = self.addresses[self.graph.blocks[b][0]] == self.target_of(last)
        if base in ("cbz", "cbnz"):
            return (split_operands(last.operands)[0], "#0") if jumped == (base == "cbz") else None
        if base not in ("beq", "bne") or jumped != (base == "beq"):
            return None
        k = flag_setter(block[:-1])
        if k is None:
            return None
        ops = split_operands(block[k].operands)
        # "it eq; cmpeq": the branch is taken only when both compares were equal
        if block[k].mnemonic.split(".")[0] not in ("cmp", "cmpeq") or len(ops) != 2:
            return None
        after = set().union(*(execute(Values(), insn) for insn in block[k:-1]))  # the compare's writes too
        return (ops[0], ops[1]) if ops[0] not in after and ops[1] not in after else None

    def _kept(self, h: int) -> frozenset[str]:
        """What loop h writes but gives back by the end of every iteration (a counter of an
        outer loop spilled to the stack, the register reused, and reloaded): each name
        written starts the iteration as a symbol of its own, and keeps its entry value on
        every iteration when every latch sees that symbol again."""
        body = self.loops[h]
        start = Values({name: Symbol(f"@{name}") for name in self.written_in[h]})
        out = self._forward(h, start, body, frozenset())
        latches = [out[x] for x in body if h in self.graph.successors[x] and x in out]
        return frozenset(name for name in self.written_in[h]
                         if latches and all(state.known.get(name) == start.known[name] for state in latches))

    def call_arguments(self, calls: set[int]) -> dict[int, tuple]:
        """For the calls at instruction indices `calls`, the arguments (r0-r3) passed the
        same every time the call is made, as sorted (register, value) pairs: constants and
        relocated addresses (values that mean the same in the callee)."""
        found: dict[int, tuple] = {}
        if not calls:
            return found
        out: dict[int, Values] = {}
        for b in self.order:
            state = self._state_into(b, 0, self.entry, out, frozenset())
            if state is None:
                continue
            start, end = self.graph.blocks[b]
            for i in sorted(calls & set(range(start, end))):
                before = state.copy()
                self.run(before, start, i)
                found[i] = tuple((r, v) for r in _ARGUMENTS if _passable(v := before.known.get(r)))
            self.run(state, start, end)
            out[b] = state
        return found

    def _entry_values(self, h: int) -> Values | None:
        """The values on entry to loop h's first iteration (in the first iteration of every
        loop around it)."""
        around = frozenset(g for g, body in self.loops.items() if h in body)
        if around not in self._entries:
            self._entries[around] = self._forward(0, self.entry, self.dom.keys(), around)
        out = self._entries[around]
        return self._meet([out[p] for p in self.graph.predecessors[h] if p in out and p not in self.loops[h]])

    def branch(self, b: int, values: Values) -> Branch | None:
        """Block b's two-way branch read with `values`: what it compares, and where it goes
        when the condition holds (jumped) and when not (fell); None for no branch we read."""
        last = self.block(b)[-1]
        base = last.mnemonic.split(".")[0]
        if base in ("le", "letp"):
            left, right, condition = values.get("lr"), 0, "gt"  # taken while the count lasts
        elif base in ("cbz", "cbnz"):
            left, right, condition = values.get(split_operands(last.operands)[0]), 0, "eq" if base == "cbz" else "ne"
        elif base.startswith("b") and len(base) == 3:
            (left, right), condition = values.flags or (None, None), base[1:]
        else:
            return None
        target = self.target_of(last)
        successors = self.graph.successors[b]
        jumped = next((v for v in successors if self.addresses[self.graph.blocks[v][0]] == target), None)
        fell = next((v for v in successors if v != jumped), None)
        return Branch(left, right, condition, jumped, fell)

    def _exit_test(self, b: int, values: Values, body) -> ExitTest | None:
        """What block b's branch compares this time, and which way leaves the loop; None
        when it is no branch we read or neither way leaves."""
        branch = self.branch(b, values)
        if branch is None:
            return None
        leaves_jumping = branch.jumped is not None and branch.jumped not in body
        leaves_falling = branch.fell is not None and branch.fell not in body
        if leaves_jumping == leaves_falling:
            return None
        return ExitTest(branch.left, branch.right, branch.condition, leaves_jumping)

    def _trip_count(self, h: int) -> int | None:
        body = self.loops[h]
        latches = [x for x in body if h in self.graph.successors[x]]
        values = self._entry_values(h)
        # Blocks of this loop's own level (not of a loop inside it) that can leave it.
        exiting = {u for u in body if any(v not in body for v in self.graph.successors[u])
                   and not any(u in inner for g, inner in self.loops.items() if g != h and g in body)}
        # Only exits every iteration passes decide the count (a `break` on data does not):
        # one that dominates every latch, or else the exits together when every path from
        # the header to a latch passes one of them (GCC's O3 copies the compare and branch
        # into both arms of an if) and they agree.
        exits = [u for u in self.order if u in exiting and all(u in self.dom[latch] for latch in latches)]
        latch_exits = [] if exits or not self._cuts(h, exiting, latches) else sorted(exiting)
        if values is None or not exits and not latch_exits:
            return None
        history: list[dict[int, ExitTest]] = []

        def check(b, state):
            if b not in exits:
                return None
            test = self._exit_test(b, state, body)
            if test is not None:
                history[-1][b] = test
            return None if test is None else test.verdict()

        for n in range(1, MAX_TRIPS + 1):
            history.append({})
            verdict = self._forward(h, values, body, {h}, check)
            if verdict == "exit":
                return n
            if not isinstance(verdict, dict):
                return None
            if latch_exits:
                for b in latch_exits:
                    if b in verdict and (test := self._exit_test(b, verdict[b], body)) is not None:
                        history[-1][b] = test
                # the exits must agree: what they test is the same count on every path
                seen = {history[-1][b].verdict() if b in history[-1] else None for b in latch_exits if b in verdict}
                if seen == {"exit"}:
                    return n
                if seen != {None}:
                    return None
            if (ahead := _extrapolated_exit(history, exits or latch_exits, bool(latch_exits))) is not None:
                return n + ahead if ahead > 0 else None
            values = self._meet([verdict[latch] for latch in latches if latch in verdict])
            if values is None:
                return None
        return None

    def _cuts(self, h: int, blocks: set[int], latches: list[int]) -> bool:
        """Whether every path from header h to a latch passes one of `blocks`."""
        if not blocks or h in blocks:
            return bool(blocks)
        seen, stack = {h}, [h]
        while stack:
            for v in self.graph.successors[stack.pop()]:
                if v in self.loops[h] and v not in seen and v != h and v not in blocks:
                    if v in latches:
                        return False
                    seen.add(v)
                    stack.append(v)
        return h not in latches

    def frequencies(self) -> np.ndarray:
        """How often each block runs per call: the edge probabilities' flow equations solved.
        A loop with no way out (a listing cut short, a deliberate hang) has no solution; its
        back edges are then taken to leave once in MAX_TRIPS."""
        n = len(self.graph)
        entry = np.zeros(n)
        entry[0] = 1.0
        for leak in (0.0, 1 / MAX_TRIPS):
            flow = np.eye(n)
            for u, successors in enumerate(self.graph.successors):
                for v, p in zip(successors, self._edge_probabilities(u, successors)):
                    flow[v, u] -= p * (1 - leak) if self.is_back_edge(u, v) else p
            try:
                return np.linalg.solve(flow, entry)
            except np.linalg.LinAlgError:
                continue
        return np.ones(n)  # a cycle that is no natural loop (irreducible code): every block once

    def _edge_probabilities(self, u: int, successors) -> list[float]:
        if len(successors) < 2:
            return [1.0] * len(successors)
        if u in self.shares:
            return [self.shares[u].get(v, 0.0) for v in successors]
        guarded = [self._overflow_guard(u, v) for v in successors]
        if any(guarded):
            return [0.0 if taken_never else 1.0 for taken_never in guarded]
        a, b = successors
        for h in sorted(self.loops, key=lambda h: len(self.loops[h])):  # the innermost loop first
            body = self.loops[h]
            if u in body and (a in body) != (b in body):
                stay = 1 - 1 / (self.trips[h] or UNKNOWN_TRIPS)
                return [stay, 1 - stay] if a in body else [1 - stay, stay]
        return self.shift_way(u) or [0.5, 0.5]

    def shift_way(self, u: int) -> list[float] | None:
        """Block u's branch's edge probabilities (1 and 0) when it tests a requantization's
        shift, which TFLite's negative exponents decide (targets.shift_sign); else None."""
        if u not in self._shift_ways:
            self._shift_ways[u] = shift_test_way(self, u)
        return self._shift_ways[u]


def _passable(value) -> bool:
    """Whether a caller's value means the same in its callee: a known value, not a symbol of
    the caller's registers (its stack pointer, an argument it was given)."""
    return is_known(value) and not (isinstance(value, Symbol) and value.name in REGISTERS)


def estimate(functions: Mapping[str, tuple[Sequence[int], Sequence[Instruction]]],
             relocations: Relocations | None, entry: str | None) -> ProfileEstimate:
    """The estimate for one call of `entry` (a function name; None or absent: every function
    once, for objects whose entry point is not known), from each function's (addresses,
    instructions) and the object's relocations (the calls' callees, the addresses the code
    loads). A function called with constant arguments (a helper filling `n` rows, called
    with 2 and with 1) is profiled for each set of them."""
    relocations = relocations or NO_RELOCATIONS
    profiles: dict[tuple, FunctionProfile] = {}  # built for the calls a run makes, as they are made
    costs: dict[tuple, float] = {}

    def cost(name: str, arguments: tuple, active: frozenset[str]) -> float:
        if (name, arguments) in costs:
            return costs[(name, arguments)]
        addresses, instructions = functions[name]
        profile = profiles[(name, arguments)] = FunctionProfile(
            instructions, addresses, target_address, Values(dict(arguments)), relocations.of(name))
        callees = {i: callee for i, address in enumerate(addresses)
                   if (callee := relocations.calls.get((name, address))) in functions and callee not in active}
        passed = profile.call_arguments(set(callees))
        freq = profile.frequencies()
        total = 0.0
        for b, (start, end) in enumerate(profile.graph.blocks):
            total += freq[b] * (end - start)
            for i in range(start, end):
                if i in callees and i in passed:
                    total += freq[b] * cost(callees[i], passed[i], active | {callees[i]})
        costs[(name, arguments)] = total
        return total

    roots = [entry] if entry in functions else list(functions)
    instructions = sum(cost(name, (), frozenset({name})) for name in roots)
    return ProfileEstimate(instructions, sum(len(p.loops) for p in profiles.values()),
                           sum(t is None for p in profiles.values() for t in p.trips.values()))


def read_relocations(listing_text: str) -> Relocations:
    """The call and address relocations of an `objdump -dr` listing."""
    calls, addresses, function = {}, {}, ""
    for line in listing_text.splitlines():
        if line.startswith("Disassembly of section "):
            function = line.removeprefix("Disassembly of section ").rstrip(":").removeprefix(".text.")
            continue
        match = _RELOCATION.match(line)
        if match:
            at, kind, symbol = int(match.group(1), 16), match.group(2), match.group(3)
            if kind in _CALL_TYPES:
                calls[(function, at)] = symbol
            elif kind in _ADDRESS_TYPES:
                addresses[(function, at)] = symbol
    return Relocations(calls, addresses)
