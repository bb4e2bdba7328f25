"""What a T32 instruction is, read once: its operands, its memory address, the kind of effect
targets.thumb_values interprets, and what it writes when that effect is not interpreted.

A function's walk (targets.branch_walk) runs the same few hundred instructions hundreds of
thousands of times. Reading each one's text again at every run (splitting the operands,
matching half a dozen patterns, trying the kinds in turn) was most of the time a
candidate's code features took (2026-12-04: 2.3 M runs of an instruction over 72 recorded
variants, 0.26 s a variant, two thirds of it in that reading). `decode` does it once per
distinct instruction; thumb_values applies the result to the values.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .mix import Instruction

REGISTERS = frozenset({"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12",
                       "sl", "fp", "ip", "sb", "lr", "sp"})
# What a call may change (the AAPCS caller-saved registers).
CALL_CLOBBERS = frozenset({"r0", "r1", "r2", "r3", "ip", "r12", "lr"})
_IMMEDIATE = re.compile(r"#(-?(?:0x[0-9a-f]+|\d+))")
PRE_INDEXED = re.compile(r"\[(\w+)(?:,\s*#(-?(?:0x[0-9a-f]+|\d+)))?\]!")
_POST_INDEXED = re.compile(r"\[(\w+)\],\s*#(-?(?:0x[0-9a-f]+|\d+))")
_SHIFT = re.compile(r"(lsl|lsr|asr|ror)\s*#(\d+)")
_ADDRESS = re.compile(r"\[(\w+)(?:,\s*(?:#(-?(?:0x[0-9a-f]+|\d+))|(\w+)(?:,\s*lsl\s*#(\d+))?))?\]!?")
_IT = re.compile(r"it[te]{0,3}")
INVERSE = {"eq": "ne", "cs": "cc", "hs": "lo", "mi": "pl", "vs": "vc", "hi": "ls", "ge": "lt", "gt": "le"}
INVERSE.update({b: a for a, b in list(INVERSE.items())})

# Byte and halfword extensions (a counter below 256 narrowed before a multiply-shift division).
EXTENDS = {"uxtb": lambda a: a & 0xFF, "uxth": lambda a: a & 0xFFFF,
           "sxtb": lambda a: ((a & 0xFF) ^ 0x80) - 0x80, "sxth": lambda a: ((a & 0xFFFF) ^ 0x8000) - 0x8000}
_ARITHMETIC = frozenset({"add", "sub", "rsb", "and", "orr", "eor", "bic", "lsl", "lsr", "asr", "mul", "udiv", "sdiv"})
# Data-processing mnemonics whose "s" form sets the flags.
_FLAG_SETTING = frozenset({"add", "adc", "sub", "sbc", "rsb", "mov", "mvn", "neg", "lsl", "lsr", "asr", "ror", "rrx",
                           "and", "orr", "orn", "eor", "bic", "mul"})
# Instructions that write no register (stores, compares, branches, hints, predication).
_WRITE_NOTHING = ("str", "cmp", "cmn", "tst", "teq", "b", "cbz", "cbnz", "tbb", "tbh", "it", "vpst", "vctp", "nop",
                  "dmb", "dsb", "isb", "vst")
# Instructions that write their first two operands where those are core registers: long
# multiplies, pair loads, vector reductions into core registers.
_WRITE_TWO = ("vmov", "vaddv", "vmladav", "vmlav", "vabav", "vminv", "vmaxv", "vaddlv", "vmlaldav", "smlal", "umlal",
              "smull", "umull", "ldrd", "umaal")

# The kinds of effect thumb_values interprets, tried in this order; an instruction of none
# of them (or a load or store whose address turns out not to be on the stack) makes what
# it writes unknown (`Decoded.written`).
MOVT, LOAD, STORE, PAIR, MULTIPLE_ON_STACK, MOVE, ARITHMETIC, COMPARE, TEST, EXTEND, EXTEND_AND_ADD, \
    MULTIPLY_ACCUMULATE, LONG_MULTIPLY, MULTIPLE_WITH_WRITEBACK, LOOP_START, LOOP_END, OTHER = range(17)


@dataclass(frozen=True)
class Address:
    """A memory operand: `[base, #offset]` or `[base, index, lsl #shift]`."""
    base: str
    offset: int
    index: str | None
    shift: int
    on_stack: str | None  # its slot's name ("sp+8") when it is sp plus a constant


@dataclass(frozen=True)
class Operand:
    """A register or an immediate, with the shift that follows it (`r2, lsl #2`)."""
    register: str | None
    value: int | None  # the immediate (None: a register, or an immediate not read)
    shift: tuple[str, int] | None


@dataclass(frozen=True)
class Decoded:
    base: str  # the mnemonic before any "." ("ldr" of "ldr.w")
    suffix: str  # after it ("w", "s32"; "" for none)
    ops: tuple[str, ...]
    kind: int
    target: str | None  # the first operand, where it is a core register
    address: Address | None  # a load's or store's (a pair's third operand; ldm/stm's base)
    first: str | None  # the register an arithmetic, compare or test reads first
    second: Operand | None  # the operand it reads next (a move's source)
    listed: tuple[str, ...]  # a register list's core registers
    written: frozenset[str]  # what it makes unknown when its effect is not interpreted
    clobbers_flags: bool  # when not interpreted: it sets the flags to something unknown
    pre_indexed: tuple[tuple[str, int], ...]  # base registers written back before the access
    post_indexed: tuple[str, int] | None  # a base register stepped after it (`[r0], #4`)
    it_slots: tuple[str, ...] | None  # an IT instruction's conditions, one per instruction it covers
    source: Instruction  # the instruction read


def split_operands(text: str) -> list[str]:
    """Operands at top level ("r0, [r1, #4]" -> ["r0", "[r1, #4]"]), comments dropped."""
    return list(_split(text))


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


@functools.lru_cache(maxsize=1 << 16)
def address(operand: str) -> Address | None:
    """A memory operand read (`[sp, #8]`, `[r8, r1, lsl #2]`); None for any other operand."""
    match = _ADDRESS.fullmatch(operand.strip())
    if not match:
        return None
    base, offset, index = match.group(1), int(match.group(2) or "0", 0), match.group(3)
    on_stack = f"sp{offset:+d}" if base == "sp" and index is None else None
    return Address(base, offset, index, int(match.group(4) or "0"), on_stack)


def one_address(ops) -> bool:
    """Whether a load or store's operands are a register and one address: `[sp, #8]`, or
    post-indexed `[r0], #4` (the word at r0, then r0 steps: an array filled on the stack)."""
    return len(ops) == 2 or len(ops) == 3 and immediate(ops[2]) is not None


def listed(raw: str) -> list[str]:
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


def _operand(ops, i: int) -> Operand | None:
    """Operand i as a register or an immediate with the shift after it; None if it is neither."""
    if i >= len(ops):
        return None
    text = ops[i]
    shift = _SHIFT.fullmatch(ops[i + 1]) if i + 1 < len(ops) else None
    shifted = (shift.group(1), int(shift.group(2))) if shift else None
    if text.startswith("#"):
        return Operand(None, immediate(text), shifted)
    return Operand(text, None, shifted) if text in REGISTERS else None


def written(base: str, ops, raw: str) -> frozenset[str]:
    """The registers an instruction we do not interpret writes (made unknown)."""
    if base in ("bl", "blx"):
        return CALL_CLOBBERS
    if base.startswith(("pop", "ldm", "vpop", "vldm")):
        # the registers in the list, and the base register only when written back ("!")
        names = {name for name in listed(raw) if name in REGISTERS} if base[0] != "v" else set()
        return frozenset(names | ({"sp"} if "pop" in base else {ops[0].rstrip("!")} if "!" in raw else set()))
    if base.startswith(("push", "stm", "vpush", "vstm")):
        return frozenset({"sp"} if "push" in base else {ops[0].rstrip("!")} if "!" in raw else set())
    if base.startswith(_WRITE_NOTHING) and base not in ("bic", "bics", "bfi", "bfc"):
        return frozenset()
    if base.startswith(_WRITE_TWO):
        return frozenset(name for name in ops[:2] if name in REGISTERS)
    if base.startswith("v"):
        return frozenset()  # a vector instruction writes vector registers
    return frozenset({ops[0]} if ops and ops[0] in REGISTERS else ())


def extension_of(base: str) -> str:
    """The extension an extend-and-add applies ("uxtab" -> "uxtb")."""
    return base[:3] + base[4:]


def _extend_or_multiply(base: str, ops) -> int | None:
    """EXTEND, EXTEND_AND_ADD, MULTIPLY_ACCUMULATE or LONG_MULTIPLY, on core registers only;
    None for any other instruction."""
    if not ops or not all(op in REGISTERS for op in ops):
        return None
    if base in EXTENDS and len(ops) == 2:
        return EXTEND
    if len(base) == 5 and base[3] == "a" and extension_of(base) in EXTENDS and len(ops) == 3:
        return EXTEND_AND_ADD
    if len(ops) == 4:
        return MULTIPLY_ACCUMULATE if base in ("mla", "mls") else LONG_MULTIPLY if base in ("umull", "smull") else None
    return None


def _kind(base: str, ops, raw: str) -> int:
    if base == "movt" and len(ops) == 2 and ops[0] in REGISTERS and immediate(ops[1]) is not None:
        return MOVT
    if base == "ldr" and one_address(ops) and ops[0] in REGISTERS:
        return LOAD
    if base == "str" and one_address(ops):
        return STORE
    if base in ("ldrd", "strd") and len(ops) == 3:
        return PAIR
    if base.startswith(("ldm", "stm")) and "!" not in raw and ops:
        return MULTIPLE_ON_STACK
    if base in ("mov", "movs", "movw", "mvn", "mvns") and len(ops) >= 2 and ops[0] in REGISTERS:
        return MOVE
    if base.rstrip("sw") in _ARITHMETIC and len(ops) >= 2 and ops[0] in REGISTERS:
        return ARITHMETIC
    if base in ("cmp", "cmn") and len(ops) >= 2:
        return COMPARE
    if base == "tst" and len(ops) >= 2:
        return TEST
    if (kind := _extend_or_multiply(base, ops)) is not None:
        return kind
    if base.startswith(("ldm", "stm", "push", "pop")) and ("!" in raw or base in ("push", "pop")):
        return MULTIPLE_WITH_WRITEBACK
    if base in ("dls", "dlstp", "wls", "wlstp") and len(ops) >= 2:
        return LOOP_START
    if base in ("le", "letp"):
        return LOOP_END
    return OTHER


def _reads(kind: int, base: str, ops) -> tuple[str | None, Operand | None]:
    """The register read first and the operand read next, for the kinds that read them."""
    if kind == MOVE:
        return None, _operand(ops, 1)
    if kind == ARITHMETIC:
        if len(ops) == 2 or (len(ops) == 3 and _SHIFT.fullmatch(ops[2])):  # "add r0, #4": r0 += 4
            return ops[0], _operand(ops, 1)
        return (ops[1] if ops[1] in REGISTERS else None), _operand(ops, 2)
    if kind in (COMPARE, TEST):
        return (ops[0] if ops[0] in REGISTERS else None), _operand(ops, 1)
    return None, None


@functools.lru_cache(maxsize=1 << 16)
def decode(insn: Instruction) -> Decoded:
    """`insn` read once (cached: a walk runs each instruction many times)."""
    base, _, suffix = insn.mnemonic.partition(".")
    ops = _split(insn.operands)
    raw = insn.operands
    kind = _kind(base, ops, raw)
    place = {LOAD: 1, STORE: 1, PAIR: 2}.get(kind)
    where = address(ops[place]) if place is not None else address(f"[{ops[0]}]") if kind == MULTIPLE_ON_STACK else None
    first, second = _reads(kind, base, ops)
    it_slots = None
    if _IT.fullmatch(base):
        condition = raw.split()[0] if raw.split() else ""
        it_slots = tuple(condition if x == "t" else INVERSE.get(condition, "") for x in "t" + base[2:])
    post = _POST_INDEXED.search(raw)
    return Decoded(
        base, suffix, ops, kind, ops[0] if ops and ops[0] in REGISTERS else None, where, first, second,
        tuple(listed(raw)) if kind in (MULTIPLE_ON_STACK, MULTIPLE_WITH_WRITEBACK) else (),
        written(base, ops, raw), base == "teq" or base.endswith("s") and base[:-1] in _FLAG_SETTING,
        tuple((m.group(1), int(m.group(2) or "0", 0)) for m in PRE_INDEXED.finditer(raw)),
        (post.group(1), int(post.group(2), 0)) if post else None, it_slots, insn)
