"""The dynamic instruction mix of a run: per-PC execution counts from the QEMU plugin joined
with a disassembly of the image, each instruction sorted into one of the HAL's instruction
classes (edgetune.hal.cost.INSTRUCTION_CLASSES).

Taken branches are not counted by the plugin; they are inferred: a conditional branch at
PC p ran count(p) times and its fall-through successor p+size ran count(p+size) times, so
at least count(p) - count(p+size) of its executions were taken. That is exact unless the
fall-through instruction is also the target of another branch (then taken is
under-estimated). Calls, returns and unconditional branches are always taken.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterable, Mapping

from edgetune.hal import INSTRUCTION_CLASSES, CostModel, MemoryRegion
from edgetune.tuner import Outcome

from .toolchain import run_tool


@dataclass(frozen=True)
class Instruction:
    size: int
    mnemonic: str  # lower case, as objdump prints it (e.g. "ldr.w", "vldrb.s32", "b.ne")
    operands: str


_COND = "eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al"
_THUMB_BRANCH = re.compile(rf"^(b|bl|blx|bx)({_COND})?$")
_Q_REGISTER = re.compile(r"\bq[0-7]\b")
_A64_VECTOR = re.compile(r"\bv\d+\.|\{\s*v\d+|\bq\d+\b")
_MVE_MAC = ("vmla", "vmls", "vmul", "vfma", "vfms", "vqdmul", "vqrdmul", "vqdml", "vqrdml", "vrmla", "vrmls", "vrmul")
_NEON_MAC = ("mla", "mls", "mul", "smlal", "umlal", "smlsl", "umlsl", "smull", "umull", "sdot", "udot", "fmla", "fmls",
             "fmul", "sqdmul", "sqrdmul", "sqdml", "pmul")


def disassemble(cost: CostModel, image: Path, workdir: Path,
                wanted: Collection[int] | None = None) -> dict[int, Instruction]:
    """Every instruction of the image's code sections (or those at the `wanted` addresses:
    the ones a run executed), by address."""
    proc = run_tool([cost.disassembler, "-d", *cost.disassembler_flags, str(image)], cwd=workdir,
                    outcome=Outcome.RUNTIME_ERROR)
    listing: dict[int, Instruction] = {}
    for line in proc.stdout.splitlines():
        head, colon, _ = line.partition(":")
        if not colon:
            continue
        try:
            address = int(head, 16)
        except ValueError:
            continue
        if wanted is not None and address not in wanted:
            continue
        fields = line.split("\t")
        if len(fields) < 3 or not fields[0].strip().endswith(":"):
            continue
        raw = fields[1].replace(" ", "")
        if not raw or any(c not in "0123456789abcdef" for c in raw):
            continue
        listing[address] = Instruction(len(raw) // 2, fields[2].strip().lower(), fields[3].strip() if len(fields) > 3 else "")
    return listing


@functools.lru_cache(maxsize=1 << 16)
def classify_thumb(insn: Instruction) -> str:
    """Class of a T32 instruction (Armv7E-M, Armv8.1-M with MVE)."""
    full = insn.mnemonic
    base = full.split(".")[0]
    ops = insn.operands
    if base in ("dls", "dlstp", "wls", "wlstp", "le", "letp", "lctp"):
        return "loop"
    if base.startswith("v"):
        if base in ("vctp", "vpst", "vpnot"):
            return "alu"  # predicate set-up runs in the scalar pipeline
        if _Q_REGISTER.search(ops):
            if base.startswith(("vldr", "vld2", "vld4")):
                return "vec_load"
            if base.startswith(("vstr", "vst2", "vst4")):
                return "vec_store"
            return "vec_mac" if base.startswith(_MVE_MAC) else "vec_alu"
        if base.startswith(("vldr", "vldm", "vpop")):
            return "load"
        if base.startswith(("vstr", "vstm", "vpush")):
            return "store"
        return "fp"
    if base in ("cbz", "cbnz", "tbb", "tbh") or _THUMB_BRANCH.match(base):
        return "branch"
    if base in ("pop", "ldm", "ldmia") and "pc" in ops:
        return "branch"  # a return: always taken
    if base.startswith(("ldr", "ldm", "lda", "pop")):
        return "load"
    if base.startswith(("str", "stm", "stl", "push")):
        return "store"
    if base in ("sdiv", "udiv"):
        return "div"
    if base.startswith(("mla", "mls", "smla", "umla", "umaal", "smlsd", "smlsl", "smmla", "smmls")):
        return "mac"
    if base.startswith(("mul", "smul", "umul", "smmul", "smuad", "smusd")):
        return "mul"
    return "alu"


# Scalar instructions that multiply two halfword pairs at once (Armv7E-M's DSP extension).
_DUAL_MULTIPLIES = ("smlad", "smlsd", "smuad", "smusd", "smlald", "smlsld")
# Multiplies that keep the high half of each product: a rescale (requantization), not the
# products a kernel sums.
_SCALING = ("vqdmulh", "vqrdmulh", "vmulh", "vrmulh", "sqdmulh", "sqrdmulh")
_ELEMENT_BITS = re.compile(r"[suif](8|16|32|64)$")
_A64_ARRANGEMENT = re.compile(r"\bv\d+\.(\d+)[bhsd]\b")  # the lanes of the first vector operand


def multiplies(insn: Instruction, a64: bool) -> int:
    """How many products one instruction computes: the lanes of a vector multiply(-accumulate)
    (an MVE vmladav.s8 sums 16, a NEON sdot into v.4s 16), 2 for a dual 16-bit multiply
    (smlad), 1 for any other scalar multiply, 0 for everything else. Instructions per
    product in a kernel's multiplying loops is a trip-count-free measure of how much work
    each loop iteration does (edgetune.targets.code_features)."""
    name = insn.mnemonic
    base = name.split(".")[0]
    if base.startswith(_SCALING):
        return 0
    kind = classify_a64(insn) if a64 else classify_thumb(insn)
    if kind in ("mac", "mul"):
        return 2 if base.startswith(_DUAL_MULTIPLIES) else 1
    if kind != "vec_mac":
        return 0
    if a64:
        match = _A64_ARRANGEMENT.search(insn.operands)
        if not match:
            return 1
        lanes = int(match.group(1))
        return lanes * 4 if base in ("sdot", "udot") else lanes  # a dot product sums 4 bytes per lane
    match = _ELEMENT_BITS.search(name)
    return 128 // int(match.group(1)) if match else 4  # MVE: 128-bit Q registers


def thumb_branch_is_conditional(insn: Instruction) -> bool:
    base = insn.mnemonic.split(".")[0]
    if base in ("cbz", "cbnz"):
        return True
    match = _THUMB_BRANCH.match(base)
    return bool(match and match.group(2) and match.group(2) != "al")


@functools.lru_cache(maxsize=1 << 16)
def classify_a64(insn: Instruction) -> str:
    """Class of an A64 instruction (Armv8-A with Advanced SIMD)."""
    name, ops = insn.mnemonic, insn.operands
    base = name.split(".")[0]
    if name.startswith("b.") or base in ("b", "bl", "br", "blr", "ret", "cbz", "cbnz", "tbz", "tbnz"):
        return "branch"
    vector = bool(_A64_VECTOR.search(ops))
    if base.startswith("ld"):
        return "vec_load" if vector else "load"
    if base.startswith("st"):
        return "vec_store" if vector else "store"
    if vector:
        return "vec_mac" if base.startswith(_NEON_MAC) else "vec_alu"
    if base in ("sdiv", "udiv"):
        return "div"
    if base in ("madd", "msub", "smaddl", "umaddl", "smsubl", "umsubl"):
        return "mac"
    if base in ("mul", "mneg", "smull", "umull", "smulh", "umulh", "smnegl", "umnegl"):
        return "mul"
    if base.startswith("f") or base in ("scvtf", "ucvtf"):
        return "fp"
    return "alu"


def a64_branch_is_conditional(insn: Instruction) -> bool:
    return insn.mnemonic.startswith("b.") or insn.mnemonic in ("cbz", "cbnz", "tbz", "tbnz")


def instruction_mix(per_pc: Mapping[int, int], listing: Mapping[int, Instruction], a64: bool) -> tuple[dict[str, int], int]:
    """(instructions per class, instructions whose PC the disassembly did not hold).

    Unlisted PCs (none in a normal image) are counted as `alu` so the mix always sums to
    the measured instruction count."""
    classify = classify_a64 if a64 else classify_thumb
    conditional = a64_branch_is_conditional if a64 else thumb_branch_is_conditional
    mix = dict.fromkeys(INSTRUCTION_CLASSES, 0)
    unlisted = 0
    for pc, count in per_pc.items():
        insn = listing.get(pc)
        if insn is None:
            unlisted += count
            mix["alu"] += count
            continue
        kind = classify(insn)
        if kind == "branch":
            taken = count
            if conditional(insn):
                taken = max(0, count - per_pc.get(pc + insn.size, 0))
            mix["branch_taken"] += taken
            mix["branch"] += count - taken
        else:
            mix[kind] += count
    return {k: v for k, v in mix.items() if v}, unlisted


MEMORY_CLASSES = ("load", "store", "vec_load", "vec_store")
UNMAPPED = "unmapped"


def instruction_fetches(per_pc: Mapping[int, int], regions: Iterable[MemoryRegion]) -> dict[str, int]:
    """Instructions executed from each region that charges for an access (wait states or
    energy): code a model's code plan put outside a zero-wait code region (app/model/code_plan.py)
    stalls on every fetch there. Regions that charge nothing are left out, so a run whose
    code lives in a TCM reports what it reported before fetches were priced."""
    priced = tuple(r for r in regions if r.wait_states or r.access_pj)
    counts: dict[str, int] = {}
    for pc, count in per_pc.items():
        name = next((r.name for r in priced if r.base <= pc < r.end), None)
        if name is not None:
            counts[name] = counts.get(name, 0) + count
    return counts


def memory_accesses(per_pc: Mapping[int, int], listing: Mapping[int, Instruction], addresses: Mapping[int, int],
                    a64: bool, regions: Iterable[MemoryRegion]) -> dict[str, int]:
    """Load and store instructions executed, by the memory region of their data.

    The plugin reports the last data address each PC touched; a load or store is charged to
    the region holding it (a PC whose accesses span two regions is charged to the last one).
    Addresses in no described region count as `unmapped` and cost nothing extra."""
    classify = classify_a64 if a64 else classify_thumb
    regions = tuple(regions)
    counts: dict[str, int] = {}
    for pc, count in per_pc.items():
        insn = listing.get(pc)
        if insn is None or classify(insn) not in MEMORY_CLASSES or pc not in addresses:
            continue
        address = addresses[pc]
        name = next((r.name for r in regions if r.base <= address < r.end), UNMAPPED)
        counts[name] = counts.get(name, 0) + count
    return counts
