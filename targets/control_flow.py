"""The control-flow graph of one function's disassembly: basic blocks, dominators, natural loops.

Loops found from address ranges (a backward branch and everything between it and its target)
overlap when a compiler lays a loop out with its latch far from its header, as clang's O3 does
for tiled kernels: one instruction then counts in several loops. Natural loops (a back edge
u -> h where h dominates u, and the blocks that reach u without passing h) count each block in
the loops that really repeat it, which is what edgetune.targets.static_profile needs to weigh
blocks by how often they run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from .mix import Instruction

# The first operand that is a hex address followed by objdump's symbolic form: "12 <dot+0x12>".
_TARGET = re.compile(r"(?:^|[\s,])([0-9a-f]+) <[^>]*>")
COND_SUFFIXES = frozenset({"eq", "ne", "cs", "cc", "hs", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt",
                           "le"})


def target_address(insn: Instruction) -> int | None:
    """The address an instruction's operands name as objdump prints a direct target; None
    when they name none."""
    match = _TARGET.search(insn.operands)
    return int(match.group(1), 16) if match else None


def flow_kind(insn: Instruction) -> str | None:
    """How an instruction ends a block: "call" (returns to the next one), "return", "jump"
    (never falls through), "branch" (may fall through), "table" (tbb/tbh: targets unknown to
    us), or None for an instruction that does not transfer control (T32 mnemonics)."""
    base = insn.mnemonic.split(".")[0]
    operands = insn.operands.split(";")[0]
    if base in ("bl", "blx"):
        return "call"
    if base == "bx" and operands.strip().startswith("lr") or base in ("pop", "ldm", "ldmia") and "pc" in operands:
        return "return"
    if base in ("cbz", "cbnz", "le", "letp", "wls", "wlstp"):
        return "branch"
    if base == "b":
        return "jump"
    if base.startswith("b") and base[1:] in COND_SUFFIXES:
        return "branch"
    if base in ("tbb", "tbh"):
        return "table"
    return None


@dataclass(frozen=True)
class FlowGraph:
    """Blocks as [start, end) ranges of instruction indices; block 0 is the entry."""
    blocks: tuple[tuple[int, int], ...]
    successors: tuple[tuple[int, ...], ...]
    predecessors: tuple[tuple[int, ...], ...]

    def __len__(self) -> int:
        return len(self.blocks)


def flow_graph(addresses: Sequence[int], instructions: Sequence[Instruction],
               target_of: Callable[[Instruction], int | None]) -> FlowGraph:
    """The blocks of one function's instructions (in address order) and their edges;
    `target_of` gives a direct branch's target address."""
    index = {address: i for i, address in enumerate(addresses)}
    leaders = {0}
    for i, insn in enumerate(instructions):
        kind = flow_kind(insn)
        if kind in ("branch", "jump", "return", "table"):
            target = target_of(insn)
            if target in index:
                leaders.add(index[target])
            if i + 1 < len(instructions):
                leaders.add(i + 1)
    starts = sorted(leaders)
    blocks = tuple((start, starts[n + 1] if n + 1 < len(starts) else len(instructions)) for n, start in enumerate(starts))
    block_at = {start: n for n, (start, _) in enumerate(blocks)}
    successors = []
    for n, (_, end) in enumerate(blocks):
        last = instructions[end - 1]
        kind = flow_kind(last)
        out = []
        if kind in ("branch", "jump"):
            target = target_of(last)
            if target in index and index[target] in block_at:
                out.append(block_at[index[target]])
        if kind not in ("jump", "return", "table") and n + 1 < len(blocks) and n + 1 not in out:
            out.append(n + 1)
        successors.append(tuple(out))
    predecessors: list[list[int]] = [[] for _ in blocks]
    for u, outs in enumerate(successors):
        for v in outs:
            predecessors[v].append(u)
    return FlowGraph(blocks, tuple(successors), tuple(tuple(p) for p in predecessors))


def dominators(graph: FlowGraph) -> dict[int, frozenset[int]]:
    """Each block reachable from the entry, with the blocks that dominate it (itself included)."""
    reachable, stack = {0}, [0]
    while stack:
        for v in graph.successors[stack.pop()]:
            if v not in reachable:
                reachable.add(v)
                stack.append(v)
    everything = frozenset(reachable)
    dom = {b: everything for b in reachable}
    dom[0] = frozenset({0})
    changed = True
    while changed:
        changed = False
        for b in sorted(reachable - {0}):
            incoming = [dom[p] for p in graph.predecessors[b] if p in reachable]
            new = frozenset.intersection(*incoming) | {b}
            if new != dom[b]:
                dom[b], changed = new, True
    return dom


def natural_loops(graph: FlowGraph, dom: dict[int, frozenset[int]]) -> dict[int, frozenset[int]]:
    """Loops by header: the blocks of every back edge's natural loop (back edges to one header
    make one loop)."""
    loops: dict[int, set[int]] = {}
    for u in dom:
        for h in graph.successors[u]:
            if h in dom[u]:
                body = loops.setdefault(h, {h})
                stack = [u]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(graph.predecessors[x])
    return {h: frozenset(body) for h, body in loops.items()}


def reverse_postorder(graph: FlowGraph, dom: dict[int, frozenset[int]]) -> list[int]:
    """The reachable blocks in reverse postorder of the graph without its back edges: every
    block after all of its forward predecessors."""
    seen, order = {0}, []
    stack = [(0, iter(graph.successors[0]))]
    while stack:
        block, successors = stack[-1]
        for v in successors:
            if v not in seen and v not in dom[block]:
                seen.add(v)
                stack.append((v, iter(graph.successors[v])))
                break
        else:
            order.append(block)
            stack.pop()
    return order[::-1]
