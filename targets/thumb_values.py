"""What T32 code computes in its registers, as far as loop control needs it.

A kernel specialised to one shape counts its loops with constants, but the compiler hides
them: a counter spilled to the stack and reloaded, a pointer compared with another pointer
set up ten instructions before the loop, a flag toggled to run an outer loop twice. To learn
a loop's trip count (edgetune.targets.static_profile) we run its control path over values
that are a constant (int), a symbol plus a constant offset (`Symbol`: a register's value on
entry, a load from memory, anything not worked out) so that two pointers from one base
compare exactly, or nothing known. Stack slots are tracked like registers, named by their
address from the stack pointer however it is formed (`stack_slot`). Only the instructions
that move, add or compare such values are interpreted; every other instruction makes what
it writes unknown. Each instruction is read once (targets.thumb_decode) and applied here.

Constants too wide for an immediate come from the literal pool (`ldr r3, [pc, #308]`: the
word at the end of the function) or from a movw/movt pair; an address comes the same ways,
with a relocation naming its symbol (`resolve_constants`: the word 0x80 relocated against
the scratch section is Symbol(section, 0x80), so a pointer stepped through that buffer
compares exactly with its end).
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Sequence

from .mix import Instruction
from .thumb_decode import (ARITHMETIC, COMPARE, EXTEND, EXTEND_AND_ADD, EXTENDS, LOAD, LONG_MULTIPLY, LOOP_END,
                           LOOP_START, MOVE, MOVT, MULTIPLE_ON_STACK, MULTIPLE_WITH_WRITEBACK, MULTIPLY_ACCUMULATE,
                           PAIR, PRE_INDEXED, REGISTERS, STORE, TEST, Address, Decoded, Operand, address, decode,
                           extension_of, immediate, one_address, split_operands)

_MASK = 0xFFFFFFFF
_PC_RELATIVE = re.compile(r"\[pc(?:,\s*#(-?(?:0x[0-9a-f]+|\d+)))?\]")
_fresh_names = itertools.count()


class Symbol(NamedTuple):
    """An unknown value plus a known offset: two Symbols of one name differ by their offsets.
    (A named tuple rather than a frozen dataclass: the walk, targets.branch_walk, makes about
    a million of them per variant, and a tuple is made and compared in C.)"""
    name: str
    offset: int = 0

    def plus(self, k: int) -> "Symbol":
        return Symbol(self.name, self.offset + k)


def unknown() -> Symbol:
    """A value nothing is known of (equal to no other)."""
    return Symbol("?" + str(next(_fresh_names)))


def signed(x: int) -> int:
    x &= _MASK
    return x - (1 << 32) if x >> 31 else x


def add(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return signed(a + b)
    if isinstance(a, Symbol) and isinstance(b, int):
        return a.plus(b)
    if isinstance(a, int) and isinstance(b, Symbol):
        return b.plus(a)
    return unknown()


def subtract(a, b):
    if isinstance(b, int):
        return add(a, -b)
    if isinstance(a, Symbol) and isinstance(b, Symbol) and a.name == b.name:
        return a.offset - b.offset
    return unknown()


_BITWISE = {"and": lambda a, b: a & b, "orr": lambda a, b: a | b, "eor": lambda a, b: a ^ b,
            "bic": lambda a, b: a & ~b, "lsl": lambda a, b: a << b, "lsr": lambda a, b: (a & _MASK) >> b,
            "asr": lambda a, b: signed(a) >> b, "mul": lambda a, b: a * b,
            # divisions (a pixel counter split into row and column); by zero they give 0 on Armv7-M/v8-M
            "udiv": lambda a, b: (a & _MASK) // (b & _MASK) if b & _MASK else 0,
            "sdiv": lambda a, b: _divided(signed(a), signed(b))}


def _divided(a: int, b: int) -> int:
    """A signed division as sdiv does it: truncated toward zero, 0 for a zero divisor."""
    return (abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1) if b else 0


@dataclass
class Values:
    """Registers and stack slots ("sp+8") with their values, and the last comparison that set
    the flags, as (left, right) values (None when unknown)."""
    known: dict = field(default_factory=dict)
    flags: tuple | None = None

    def get(self, name: str):
        value = self.known.get(name)
        if value is None:
            value = Symbol(name) if name in REGISTERS else unknown()
            self.known[name] = value
        return value

    def copy(self) -> "Values":
        return Values(dict(self.known), self.flags)


def stack_slot(values: Values, operand: str) -> str | None:
    """The stack slot a memory operand addresses, as "sp+N" from the current stack pointer
    (`[sp, #8]`; `[r8, r1, lsl #2]` where r8 holds sp + 404 and r1 is 2): the same name for
    the same word however it is addressed. `[r7, #n]` with a frame pointer not known to be
    sp-based is "r7+n"; None for any other operand."""
    where = address(operand)
    return None if where is None else _slot(values, where)


def _slot(values: Values, where: Address) -> str | None:
    if where.on_stack is not None:
        return where.on_stack
    base, index = where.base, where.index
    if base not in REGISTERS or (index is not None and index not in REGISTERS):
        return None
    step = 0 if index is None else values.get(index)
    if not isinstance(step, int):
        return None
    at, stack = add(values.get(base), where.offset + (step << where.shift)), values.get("sp")
    if isinstance(at, Symbol) and isinstance(stack, Symbol) and at.name == stack.name:
        return f"sp{at.offset - stack.offset:+d}"
    return f"r7{where.offset:+d}" if base == "r7" and index is None else None


def stepped_store(values: Values, insn: Instruction) -> tuple[int, int, bool] | None:
    """For a word store into the stack through a pointer it steps (`str r5, [r0], #4`,
    `str r5, [r0, #4]!`: an array of coordinates or accumulators filled in a loop), the
    offset from sp of the slot it writes now, the step, and whether the value stored is
    known; None for any other instruction."""
    ops = split_operands(insn.operands)
    if insn.mnemonic.split(".")[0] != "str" or not one_address(ops):
        return None
    step = immediate(ops[2]) if len(ops) == 3 else (match := PRE_INDEXED.search(insn.operands)) and int(
        match.group(2) or "0", 0)
    offset = sp_offset(stack_slot(values, ops[1]))
    if not step or offset is None:
        return None
    return offset, step, is_known(values.get(ops[0]))


_SP_SLOT = re.compile(r"sp([+-]\d+)")


def sp_offset(name: str | None) -> int | None:
    """The offset from the stack pointer of a slot named by `stack_slot` ("sp+136" -> 136);
    None for any other name (a register, a frame-pointer slot "r7+8")."""
    match = _SP_SLOT.fullmatch(name) if name else None
    return int(match.group(1)) if match else None


def is_known(value) -> bool:
    """Whether a value is known (a constant or a symbol plus offset), not an unknown."""
    return isinstance(value, int) or isinstance(value, Symbol) and not value.name.startswith("?")


def _value_of(values: Values, operand: Operand | None):
    """A register's or immediate's value with its shift applied; None for no such operand."""
    if operand is None:
        return None
    value = operand.value if operand.register is None else values.get(operand.register)
    if value is not None and operand.shift is not None:
        if not isinstance(value, int) or operand.shift[0] == "ror":
            return unknown()
        value = signed(_BITWISE[operand.shift[0]](value, operand.shift[1]))
    return value


def resolve_constants(addresses, instructions, relocated: Mapping[int, str]) -> list:
    """For each instruction, the value it puts in its register that the code alone shows:
    a pc-relative load's literal word, a movw/movt's relocated symbol (`relocated`: address
    -> symbol of the function's data relocations, objdump -r); None for any other."""
    words = {a: i for a, i in zip(addresses, instructions) if i.mnemonic == ".word"}
    found = []
    for address, insn in zip(addresses, instructions):
        base, value = insn.mnemonic.split(".")[0], None
        if base == "ldr" and (match := _PC_RELATIVE.search(insn.operands)):
            at = ((address + 4) & ~3) + int(match.group(1) or "0", 0)
            word = words.get(at)
            literal = immediate("#" + word.operands.split()[0]) if word is not None and word.operands else None
            if literal is not None:
                value = Symbol(relocated[at], signed(literal)) if at in relocated else signed(literal)
        elif base in ("movw", "movt") and address in relocated:
            ops = split_operands(insn.operands)
            addend = immediate(ops[1]) if len(ops) == 2 else None
            if addend is not None:  # the pair's addend, sign-extended from 16 bits (REL)
                value = Symbol(relocated[address], (addend & 0xFFFF) - ((addend & 0x8000) << 1))
        found.append(value)
    return found


def execute(values: Values, insn: Instruction, conditional: bool = False, resolved=None) -> frozenset[str]:
    """Apply one instruction to `values`; what it writes (registers, stack slots). A
    `conditional` instruction (in an IT block) leaves what it writes unknown; `resolved`: the
    value resolve_constants found it puts in its register."""
    return apply(values, decode(insn), conditional, resolved)


def apply(values: Values, insn: Decoded, conditional: bool = False, resolved=None) -> frozenset[str]:
    """execute() of an instruction decoded (targets.thumb_decode). A load or store whose
    address is not on the stack is an instruction not interpreted: what it writes, unknown."""
    return frozenset(_apply(values, insn, conditional, resolved))


def _apply(values: Values, insn: Decoded, conditional: bool, resolved) -> dict:
    """apply(), returning what it wrote as a dict (a run of a block does not ask)."""
    kind, ops = insn.kind, insn.ops
    new: dict = {}
    flags = "unchanged"
    if resolved is not None and insn.target is not None:
        new[insn.target] = resolved
    elif kind == MOVT:
        low = values.get(ops[0])
        new[ops[0]] = signed((low & 0xFFFF) | (immediate(ops[1]) << 16)) if isinstance(low, int) else None
    elif kind == LOAD and (slot := _slot(values, insn.address)):
        new[ops[0]] = values.get(slot)
    elif kind == STORE and (slot := _slot(values, insn.address)):
        new[slot] = values.get(ops[0])
    elif kind == PAIR and (slot := _slot(values, insn.address)):
        second = f"{slot[:2]}{int(slot[2:]) + 4:+d}"
        if insn.base == "ldrd":
            new[ops[0]], new[ops[1]] = values.get(slot), values.get(second)
        else:
            new[slot], new[second] = values.get(ops[0]), values.get(ops[1])
    elif kind == MULTIPLE_ON_STACK and (first := _slot(values, insn.address)) and first.startswith("sp"):
        new.update(_multiple_on_stack(values, insn.base, first, insn.listed))
    elif kind == MOVE:
        value = _value_of(values, insn.second)
        if insn.base.startswith("mvn"):
            value = signed(~value) if isinstance(value, int) else None
        new[ops[0]] = value
        if insn.base.endswith("s"):
            flags = (value, 0)
    elif kind == ARITHMETIC:
        new[ops[0]], flags = _arithmetic(values, insn)
    elif kind == COMPARE:
        a, b = values.get(insn.first) if insn.first else None, _value_of(values, insn.second)
        if insn.base == "cmn":
            b = -b if isinstance(b, int) else None
        flags = (a, b) if a is not None and b is not None else None
    elif kind == TEST:
        a, b = values.get(insn.first) if insn.first else None, _value_of(values, insn.second)
        flags = (a & b, 0) if isinstance(a, int) and isinstance(b, int) else None
    elif kind in (EXTEND, EXTEND_AND_ADD, MULTIPLY_ACCUMULATE, LONG_MULTIPLY):
        new.update(_extended_or_multiplied(values, insn))
    elif kind == MULTIPLE_WITH_WRITEBACK:
        new.update(_multiple_with_writeback(values, insn.base, ops, insn.listed))
    elif kind == LOOP_START:
        count = values.get(ops[1]) if ops[1] in REGISTERS else None
        if insn.base.endswith("tp"):
            # tail-predicated: lr counts elements, an iteration handles 128 bits of them
            lanes = 128 // int(insn.suffix) if insn.suffix else 16
            count = math.ceil(count / lanes) if isinstance(count, int) else None
        new["lr"] = count
    elif kind == LOOP_END:
        new["lr"] = subtract(values.get("lr"), 1)
    else:
        for name in insn.written:
            new[name] = None
        if insn.clobbers_flags:
            flags = None
    for name, step in insn.pre_indexed:
        new[name] = add(values.get(name), step)
    if insn.post_indexed is not None:
        name, step = insn.post_indexed
        new[name] = add(values.get(name), step)
    for name, value in new.items():
        values.known[name] = unknown() if conditional or value is None else value
    if flags != "unchanged":
        values.flags = None if conditional else flags
    return new


def _extended_or_multiplied(values: Values, insn: Decoded) -> dict:
    """What a byte or halfword extension, an extend-and-add, a multiply-accumulate or a long
    multiply writes (register -> value, None where unknown), by the kind decode gave it."""
    base, ops = insn.base, insn.ops
    if insn.kind == EXTEND:
        value = values.get(ops[1])
        return {ops[0]: EXTENDS[base](value) if isinstance(value, int) else None}
    if insn.kind == EXTEND_AND_ADD:
        # "uxtab r0, r1, r2": r1 + (r2 & 0xff), a column computed from a pixel counter
        value = values.get(ops[2])
        return {ops[0]: add(values.get(ops[1]), EXTENDS[extension_of(base)](value)) if isinstance(value, int) else None}
    if insn.kind == MULTIPLY_ACCUMULATE:
        # multiply and add or subtract: an address stepped by rows, a column left of a row
        a, b, c = (values.get(op) for op in ops[1:])
        product = signed(a * b) if isinstance(a, int) and isinstance(b, int) else None
        return {ops[0]: None if product is None else add(c, product) if base == "mla" else subtract(c, product)}
    # umull, smull: a division by a constant compiles to a multiply by its reciprocal, high word kept
    a, b = values.get(ops[2]), values.get(ops[3])
    if not (isinstance(a, int) and isinstance(b, int)):
        return {ops[0]: None, ops[1]: None}
    product = (a & _MASK) * (b & _MASK) if base == "umull" else a * b
    return {ops[0]: signed(product), ops[1]: signed(product >> 32)}


def _arithmetic(values: Values, insn: Decoded) -> tuple:
    """The result of an add, subtract or bitwise instruction, and the flags it sets ("s"
    forms; "unchanged" otherwise) as the pair of values they compare."""
    base = insn.base
    op = base.rstrip("sw")
    a, b = values.get(insn.first) if insn.first else None, _value_of(values, insn.second)
    if a is None or b is None:
        result = None
    elif op in ("add", "sub", "rsb"):
        result = add(a, b) if op == "add" else subtract(a, b) if op == "sub" else subtract(b, a)
    elif isinstance(a, int) and isinstance(b, int):
        result = signed(_BITWISE[op](a, b))
    else:
        result = None
    if base == "subs":
        return result, ((a, b) if a is not None and b is not None else None)
    if base == "adds":
        return result, ((a, -b) if a is not None and isinstance(b, int) else None)
    return result, ((result, 0) if base.endswith("s") else "unchanged")


def _multiple_on_stack(values: Values, base: str, first: str, listed) -> dict:
    """A load or store multiple from a register holding a stack address (no writeback): the
    listed registers from or to consecutive slots, from `first` up ("ia") or ending below it
    ("db")."""
    start = int(first[2:]) - (4 * len(listed) if "db" in base else 0)
    slots = [f"sp{start + 4 * k:+d}" for k in range(len(listed))]
    if base.startswith("ldm"):
        return {name: values.get(slot) for name, slot in zip(listed, slots) if name in REGISTERS}
    return {slot: values.get(name) for name, slot in zip(listed, slots)}


def _multiple_with_writeback(values: Values, base: str, ops, listed) -> dict:
    """A load or store multiple that steps its base register (push and pop step sp): the
    base moved by four bytes a register, down for "db" and push, up otherwise; the
    registers a load writes unknown."""
    pointer = "sp" if base in ("push", "pop") else ops[0].rstrip("!")
    down = base == "push" or "db" in base
    new: dict = {pointer: add(values.get(pointer), (-4 if down else 4) * len(listed))}
    if base.startswith(("ldm", "pop")):
        new.update({name: None for name in listed if name in REGISTERS})
    return new


_CONDITIONS = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b, "ge": lambda a, b: a >= b, "gt": lambda a, b: a > b, "le": lambda a, b: a <= b,
    "mi": lambda a, b: a - b < 0, "pl": lambda a, b: a - b >= 0,
    "lo": lambda a, b: a & _MASK < b & _MASK, "cc": lambda a, b: a & _MASK < b & _MASK,
    "hs": lambda a, b: a & _MASK >= b & _MASK, "cs": lambda a, b: a & _MASK >= b & _MASK,
    "hi": lambda a, b: a & _MASK > b & _MASK, "ls": lambda a, b: a & _MASK <= b & _MASK,
}


def flag_setter(instructions: Sequence[Instruction]) -> int | None:
    """The index of the last of `instructions` that sets the flags (the compare a branch
    after them reads); None when none does."""
    for k in range(len(instructions) - 1, -1, -1):
        probe = Values(flags=())
        execute(probe, instructions[k])
        if probe.flags != ():
            return k
    return None


def condition_holds(flags: tuple | None, condition: str) -> bool | None:
    """Whether a branch condition holds on the flags a comparison of (left, right) set; None
    when the values are not both known (or the same symbol at known offsets)."""
    if flags is None or condition not in _CONDITIONS:
        return None
    a, b = flags
    if isinstance(a, Symbol) and isinstance(b, Symbol) and a.name == b.name:
        a, b = a.offset, b.offset
    if not (isinstance(a, int) and isinstance(b, int)):
        return None
    return _CONDITIONS[condition](signed(a), signed(b))


def run_block(values: Values, instructions, resolved=None) -> None:
    """Apply a block's instructions in order (`resolved`: resolve_constants' values of
    them). One an IT instruction makes conditional runs when the flags say its condition
    holds (`cmp r3, #1; ite eq; moveq r3, #256; movne r3, #512` with r3 known), is skipped
    when they say it does not, and otherwise leaves what it writes unknown."""
    run_decoded(values, [decode(insn) for insn in instructions], resolved)


def run_decoded(values: Values, instructions: Sequence[Decoded], resolved=None) -> None:
    """run_block() of instructions decoded (targets.thumb_decode)."""
    slots: list[str] = []  # the conditions of the IT block's instructions still to come
    for k, insn in enumerate(instructions):
        if insn.it_slots is not None:
            slots = list(insn.it_slots)
            continue
        constant = None if resolved is None else resolved[k]
        if not slots:
            _apply(values, insn, False, constant)
            continue
        condition = slots.pop(0)
        base = insn.base
        holds = condition_holds(values.flags, condition) if base.endswith(condition) and condition else None
        if holds is None:
            _apply(values, insn, True, constant)
        elif holds:
            plain = base[:-len(condition)] + ("." + insn.suffix if insn.suffix else "")
            execute(values, Instruction(insn.source.size, plain, insn.source.operands), resolved=constant)
