"""What T32 code computes in its registers, as far as loop control needs it.

A kernel specialised to one shape counts its loops with constants, but the compiler hides
them: a counter spilled to the stack and reloaded, a pointer compared with another pointer
set up ten instructions before the loop, a flag toggled to run an outer loop twice. To learn
a loop's trip count (edgetune.targets.static_profile) we run its control path over values
that are a constant (int), a symbol plus a constant offset (`Symbol`: a register's value on
entry, a load from memory, anything not worked out) so that two pointers from one base
compare exactly, or nothing known. Stack slots are tracked like registers, named by their
address from the stack pointer however it is formed (`stack_slot`). Only the instructions that move, add or compare such values are
interpreted; every other instruction makes what it writes unknown.

Constants too wide for an immediate come from the literal pool (`ldr r3, [pc, #308]`: the
word at the end of the function) or from a movw/movt pair; an address comes the same ways,
with a relocation naming its symbol (`resolve_constants`: the word 0x80 relocated against
the scratch section is Symbol(section, 0x80), so a pointer stepped through that buffer
compares exactly with its end).
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Mapping

from .mix import Instruction

REGISTERS = frozenset({"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12",
                       "sl", "fp", "ip", "sb", "lr", "sp"})
# What a call may change (the AAPCS caller-saved registers).
CALL_CLOBBERS = frozenset({"r0", "r1", "r2", "r3", "ip", "r12", "lr"})
_MASK = 0xFFFFFFFF
_IMMEDIATE = re.compile(r"#(-?(?:0x[0-9a-f]+|\d+))")
_PRE_INDEXED = re.compile(r"\[(\w+)(?:,\s*#(-?(?:0x[0-9a-f]+|\d+)))?\]!")
_POST_INDEXED = re.compile(r"\[(\w+)\],\s*#(-?(?:0x[0-9a-f]+|\d+))")
_SHIFT = re.compile(r"(lsl|lsr|asr|ror)\s*#(\d+)")
_PC_RELATIVE = re.compile(r"\[pc(?:,\s*#(-?(?:0x[0-9a-f]+|\d+)))?\]")
_IT = re.compile(r"it[te]{0,3}")
_fresh_names = itertools.count()


@dataclass(frozen=True)
class Symbol:
    """An unknown value plus a known offset: two Symbols of one name differ by their offsets."""
    name: str
    offset: int = 0

    def plus(self, k: int) -> "Symbol":
        return Symbol(self.name, self.offset + k)


def unknown() -> Symbol:
    """A value nothing is known of (equal to no other)."""
    return Symbol(f"?{next(_fresh_names)}")


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
_ARITHMETIC = ("add", "sub", "rsb", *_BITWISE)


def _divided(a: int, b: int) -> int:
    """A signed division as sdiv does it: truncated toward zero, 0 for a zero divisor."""
    return (abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1) if b else 0


# Byte and halfword extensions (a counter below 256 narrowed before a multiply-shift division).
_EXTENDS = {"uxtb": lambda a: a & 0xFF, "uxth": lambda a: a & 0xFFFF,
            "sxtb": lambda a: ((a & 0xFF) ^ 0x80) - 0x80, "sxth": lambda a: ((a & 0xFFFF) ^ 0x8000) - 0x8000}
# Data-processing mnemonics whose "s" form sets the flags.
_FLAG_SETTING = frozenset({"add", "adc", "sub", "sbc", "rsb", "mov", "mvn", "neg", "lsl", "lsr", "asr", "ror", "rrx",
                           "and", "orr", "orn", "eor", "bic", "mul"})


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


def split_operands(text: str) -> list[str]:
    """Operands at top level ("r0, [r1, #4]" -> ["r0", "[r1, #4]"]), comments dropped."""
    return list(_split(text))


# The walk of a function (targets.branch_walk) reads the same few hundred instructions tens
# of thousands of times: their operands are parsed once.
@functools.lru_cache(maxsize=1 << 16)
def _split(text: str) -> tuple[str, ...]:
    text = text.split(";")[0].split("@")[0].strip()
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return tuple(parts)


@functools.lru_cache(maxsize=1 << 16)
def immediate(text: str) -> int | None:
    """The value of an immediate operand ("#48", "#0x30"); None for anything else."""
    match = _IMMEDIATE.fullmatch(text)
    return int(match.group(1), 0) if match else None


_ADDRESS = re.compile(r"\[(\w+)(?:,\s*(?:#(-?(?:0x[0-9a-f]+|\d+))|(\w+)(?:,\s*lsl\s*#(\d+))?))?\]!?")


def stack_slot(values: Values, operand: str) -> str | None:
    """The stack slot a memory operand addresses, as "sp+N" from the current stack pointer
    (`[sp, #8]`; `[r8, r1, lsl #2]` where r8 holds sp + 404 and r1 is 2): the same name for
    the same word however it is addressed. `[r7, #n]` with a frame pointer not known to be
    sp-based is "r7+n"; None for any other operand."""
    match = _ADDRESS.fullmatch(operand.strip())
    if not match:
        return None
    base, offset, index, shift = match.group(1), int(match.group(2) or "0", 0), match.group(3), match.group(4)
    if base == "sp" and index is None:
        return f"sp{offset:+d}"
    if base not in REGISTERS or (index is not None and index not in REGISTERS):
        return None
    step = 0 if index is None else values.get(index)
    if not isinstance(step, int):
        return None
    address, stack = add(values.get(base), offset + (step << int(shift or "0"))), values.get("sp")
    if isinstance(address, Symbol) and isinstance(stack, Symbol) and address.name == stack.name:
        return f"sp{address.offset - stack.offset:+d}"
    return f"r7{offset:+d}" if base == "r7" and index is None else None


def stepped_store(values: Values, insn: Instruction) -> tuple[int, int, bool] | None:
    """For a word store into the stack through a pointer it steps (`str r5, [r0], #4`,
    `str r5, [r0, #4]!`: an array of coordinates or accumulators filled in a loop), the
    offset from sp of the slot it writes now, the step, and whether the value stored is
    known; None for any other instruction."""
    ops = split_operands(insn.operands)
    if insn.mnemonic.split(".")[0] != "str" or not _one_address(ops):
        return None
    step = immediate(ops[2]) if len(ops) == 3 else (match := _PRE_INDEXED.search(insn.operands)) and int(
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


def _operand(values: Values, operands: list[str], i: int):
    """Operand i (a register or an immediate) with a following shift applied; None if it is
    neither."""
    if i >= len(operands):
        return None
    text = operands[i]
    value = immediate(text) if text.startswith("#") else values.get(text) if text in REGISTERS else None
    if value is not None and i + 1 < len(operands) and (shift := _SHIFT.fullmatch(operands[i + 1])):
        if not isinstance(value, int) or shift.group(1) == "ror":
            return unknown()
        value = signed(_BITWISE[shift.group(1)](value, int(shift.group(2))))
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
    base = insn.mnemonic.split(".")[0]
    ops = split_operands(insn.operands)
    new: dict = {}
    flags = "unchanged"
    if resolved is not None and ops and ops[0] in REGISTERS:
        new[ops[0]] = resolved
    elif base == "movt" and len(ops) == 2 and ops[0] in REGISTERS and (high := immediate(ops[1])) is not None:
        low = values.get(ops[0])
        new[ops[0]] = signed((low & 0xFFFF) | (high << 16)) if isinstance(low, int) else None
    elif base == "ldr" and _one_address(ops) and ops[0] in REGISTERS and (slot := stack_slot(values, ops[1])):
        new[ops[0]] = values.get(slot)
    elif base == "str" and _one_address(ops) and (slot := stack_slot(values, ops[1])):
        new[slot] = values.get(ops[0])
    elif base in ("ldrd", "strd") and len(ops) == 3 and (slot := stack_slot(values, ops[2])):
        base_register, offset = slot[:2], int(slot[2:])
        second = f"{base_register}{offset + 4:+d}"
        if base == "ldrd":
            new[ops[0]], new[ops[1]] = values.get(slot), values.get(second)
        else:
            new[slot], new[second] = values.get(ops[0]), values.get(ops[1])
    elif base.startswith(("ldm", "stm")) and "!" not in insn.operands and ops \
            and (first := stack_slot(values, f"[{ops[0]}]")) and first.startswith("sp"):
        new.update(_multiple_on_stack(values, base, first, _listed(insn.operands)))
    elif base in ("mov", "movs", "movw", "mvn", "mvns") and len(ops) >= 2 and ops[0] in REGISTERS:
        value = _operand(values, ops, 1)
        if base.startswith("mvn"):
            value = signed(~value) if isinstance(value, int) else None
        new[ops[0]] = value
        if base.endswith("s"):
            flags = (value, 0)
    elif base.rstrip("sw") in _ARITHMETIC and len(ops) >= 2 and ops[0] in REGISTERS:
        new[ops[0]], flags = _arithmetic(values, base, ops)
    elif base in ("cmp", "cmn") and len(ops) >= 2:
        a, b = values.get(ops[0]) if ops[0] in REGISTERS else None, _operand(values, ops, 1)
        if base == "cmn":
            b = -b if isinstance(b, int) else None
        flags = (a, b) if a is not None and b is not None else None
    elif base == "tst" and len(ops) >= 2:
        a, b = values.get(ops[0]) if ops[0] in REGISTERS else None, _operand(values, ops, 1)
        flags = (a & b, 0) if isinstance(a, int) and isinstance(b, int) else None
    elif (extended := _extended_or_multiplied(values, base, ops)) is not None:
        new.update(extended)
    elif base.startswith(("ldm", "stm", "push", "pop")) and ("!" in insn.operands or base in ("push", "pop")):
        new.update(_multiple_with_writeback(values, base, ops, insn.operands))
    elif base in ("dls", "dlstp", "wls", "wlstp") and len(ops) >= 2:
        count = values.get(ops[1]) if ops[1] in REGISTERS else None
        if base.endswith("tp"):
            # tail-predicated: lr counts elements, an iteration handles 128 bits of them
            lanes = 128 // int(insn.mnemonic.split(".")[1]) if "." in insn.mnemonic else 16
            count = math.ceil(count / lanes) if isinstance(count, int) else None
        new["lr"] = count
    elif base in ("le", "letp"):
        new["lr"] = subtract(values.get("lr"), 1)
    else:
        for name in _written(base, ops, insn.operands):
            new[name] = None
        if base == "teq" or base.endswith("s") and base[:-1] in _FLAG_SETTING:
            flags = None
    for match in _PRE_INDEXED.finditer(insn.operands):
        new[match.group(1)] = add(values.get(match.group(1)), int(match.group(2) or "0", 0))
    if match := _POST_INDEXED.search(insn.operands):
        new[match.group(1)] = add(values.get(match.group(1)), int(match.group(2), 0))
    for name, value in new.items():
        values.known[name] = unknown() if conditional or value is None else value
    if flags != "unchanged":
        values.flags = None if conditional else flags
    return frozenset(new)


def _one_address(ops: list[str]) -> bool:
    """Whether a load or store's operands are a register and one address: `[sp, #8]`, or
    post-indexed `[r0], #4` (the word at r0, then r0 steps: an array filled on the stack)."""
    return len(ops) == 2 or len(ops) == 3 and immediate(ops[2]) is not None


def _extended_or_multiplied(values: Values, base: str, ops: list[str]) -> dict | None:
    """What a byte or halfword extension, an extend-and-add, a multiply-accumulate or a long
    multiply writes (register -> value, None where unknown); None for any other instruction."""
    if not ops or not all(op in REGISTERS for op in ops):
        return None
    if base in _EXTENDS and len(ops) == 2:
        value = values.get(ops[1])
        return {ops[0]: _EXTENDS[base](value) if isinstance(value, int) else None}
    extend = base[:3] + base[4:]  # "uxtab" -> "uxtb"
    if len(base) == 5 and base[3] == "a" and extend in _EXTENDS and len(ops) == 3:
        # extend and add ("uxtab r0, r1, r2": r1 + (r2 & 0xff)), a column computed from a pixel counter
        value = values.get(ops[2])
        return {ops[0]: add(values.get(ops[1]), _EXTENDS[extend](value)) if isinstance(value, int) else None}
    if base in ("mla", "mls") and len(ops) == 4:
        # multiply and add or subtract: an address stepped by rows, a column left of a row
        a, b, c = (values.get(op) for op in ops[1:])
        product = signed(a * b) if isinstance(a, int) and isinstance(b, int) else None
        return {ops[0]: None if product is None else add(c, product) if base == "mla" else subtract(c, product)}
    if base in ("umull", "smull") and len(ops) == 4:
        # a division by a constant compiles to a multiply by its reciprocal, high word kept
        a, b = values.get(ops[2]), values.get(ops[3])
        if not (isinstance(a, int) and isinstance(b, int)):
            return {ops[0]: None, ops[1]: None}
        product = (a & _MASK) * (b & _MASK) if base == "umull" else a * b
        return {ops[0]: signed(product), ops[1]: signed(product >> 32)}
    return None


# Instructions that write no register (stores, compares, branches, hints, predication).
_WRITE_NOTHING = ("str", "cmp", "cmn", "tst", "teq", "b", "cbz", "cbnz", "tbb", "tbh", "it", "vpst", "vctp", "nop",
                  "dmb", "dsb", "isb", "vst")
# Instructions that write their first two operands where those are core registers: long
# multiplies, pair loads, vector reductions into core registers.
_WRITE_TWO = ("vmov", "vaddv", "vmladav", "vmlav", "vabav", "vminv", "vmaxv", "vaddlv", "vmlaldav", "smlal", "umlal",
              "smull", "umull", "ldrd", "umaal")


def _arithmetic(values: Values, base: str, ops: list[str]) -> tuple:
    """The result of an add, subtract or bitwise instruction, and the flags it sets ("s"
    forms; "unchanged" otherwise) as the pair of values they compare."""
    op = base.rstrip("sw")
    if len(ops) == 2 or (len(ops) == 3 and _SHIFT.fullmatch(ops[2])):  # "add r0, #4": r0 += 4
        a, b = values.get(ops[0]), _operand(values, ops, 1)
    else:
        a, b = values.get(ops[1]) if ops[1] in REGISTERS else None, _operand(values, ops, 2)
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


def _listed(raw: str) -> list[str]:
    """The core registers of a register list ("{r4, r5, lr}", "{r4-r7}")."""
    text = raw[raw.find("{"):raw.find("}") + 1]
    names = []
    for item in text.strip("{}").split(","):
        first, _, last = item.strip().partition("-")
        if last and first[1:].isdigit() and last[1:].isdigit():
            names += [f"r{n}" for n in range(int(first[1:]), int(last[1:]) + 1)]
        elif first in REGISTERS or first == "pc":
            names.append(first)
    return names


def _multiple_on_stack(values: Values, base: str, first: str, listed: list[str]) -> dict:
    """A load or store multiple from a register holding a stack address (no writeback): the
    listed registers from or to consecutive slots, from `first` up ("ia") or ending below it
    ("db")."""
    start = int(first[2:]) - (4 * len(listed) if "db" in base else 0)
    slots = [f"sp{start + 4 * k:+d}" for k in range(len(listed))]
    if base.startswith("ldm"):
        return {name: values.get(slot) for name, slot in zip(listed, slots) if name in REGISTERS}
    return {slot: values.get(name) for name, slot in zip(listed, slots)}


def _multiple_with_writeback(values: Values, base: str, ops: list[str], raw: str) -> dict:
    """A load or store multiple that steps its base register (push and pop step sp): the
    base moved by four bytes a register, down for "db" and push, up otherwise; the
    registers a load writes unknown."""
    listed = _listed(raw)
    pointer = "sp" if base in ("push", "pop") else ops[0].rstrip("!")
    down = base == "push" or "db" in base
    new: dict = {pointer: add(values.get(pointer), (-4 if down else 4) * len(listed))}
    if base.startswith(("ldm", "pop")):
        new.update({name: None for name in listed if name in REGISTERS})
    return new


def _written(base: str, ops: list[str], raw: str) -> set[str]:
    """The registers an instruction we do not interpret writes (made unknown)."""
    if base in ("bl", "blx"):
        return set(CALL_CLOBBERS)
    if base.startswith(("pop", "ldm", "vpop", "vldm")):
        # the registers in the list, and the base register only when written back ("!")
        listed = {name for name in _listed(raw) if name in REGISTERS} if base[0] != "v" else set()
        return listed | ({"sp"} if "pop" in base else {ops[0].rstrip("!")} if "!" in raw else set())
    if base.startswith(("push", "stm", "vpush", "vstm")):
        return {"sp"} if "push" in base else {ops[0].rstrip("!")} if "!" in raw else set()
    if base.startswith(_WRITE_NOTHING) and base not in ("bic", "bics", "bfi", "bfc"):
        return set()
    if base.startswith(_WRITE_TWO):
        return {name for name in ops[:2] if name in REGISTERS}
    if base.startswith("v"):
        return set()  # a vector instruction writes vector registers
    return {ops[0]} if ops and ops[0] in REGISTERS else set()


_CONDITIONS = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b, "ge": lambda a, b: a >= b, "gt": lambda a, b: a > b, "le": lambda a, b: a <= b,
    "mi": lambda a, b: a - b < 0, "pl": lambda a, b: a - b >= 0,
    "lo": lambda a, b: a & _MASK < b & _MASK, "cc": lambda a, b: a & _MASK < b & _MASK,
    "hs": lambda a, b: a & _MASK >= b & _MASK, "cs": lambda a, b: a & _MASK >= b & _MASK,
    "hi": lambda a, b: a & _MASK > b & _MASK, "ls": lambda a, b: a & _MASK <= b & _MASK,
}


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


_INVERSE = {"eq": "ne", "cs": "cc", "hs": "lo", "mi": "pl", "vs": "vc", "hi": "ls", "ge": "lt", "gt": "le"}
_INVERSE.update({b: a for a, b in list(_INVERSE.items())})


def run_block(values: Values, instructions, resolved=None) -> None:
    """Apply a block's instructions in order (`resolved`: resolve_constants' values of
    them). One an IT instruction makes conditional runs when the flags say its condition
    holds (`cmp r3, #1; ite eq; moveq r3, #256; movne r3, #512` with r3 known), is skipped
    when they say it does not, and otherwise leaves what it writes unknown."""
    slots: list[str] = []  # the conditions of the IT block's instructions still to come
    for k, insn in enumerate(instructions):
        base, _, size = insn.mnemonic.partition(".")
        if _IT.fullmatch(base):
            first = insn.operands.split()[0] if insn.operands.split() else ""
            slots = [first if x == "t" else _INVERSE.get(first, "") for x in "t" + base[2:]]
            continue
        constant = None if resolved is None else resolved[k]
        if not slots:
            execute(values, insn, resolved=constant)
            continue
        condition = slots.pop(0)
        holds = condition_holds(values.flags, condition) if base.endswith(condition) and condition else None
        if holds is None:
            execute(values, insn, conditional=True, resolved=constant)
        elif holds:
            plain = base[:-len(condition)] + ("." + size if size else "")
            execute(values, Instruction(insn.size, plain, insn.operands), resolved=constant)
