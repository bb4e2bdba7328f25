"""The static profile: trip counts worked out from T32 code, block frequencies, the estimate."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgetune.targets.code_features import listing_features, parse_listing
from edgetune.targets.control_flow import target_address
from edgetune.targets.mix import Instruction
from edgetune.targets.static_profile import UNKNOWN_TRIPS, FunctionProfile, estimate, read_relocations
from edgetune.targets.thumb_values import Symbol, resolve_constants

SPACES = Path(__file__).resolve().parent.parent / "app" / "ranking_spaces"


def listing(body: str, name: str = "f") -> str:
    """An objdump -dr listing of one function from "address: mnemonic operands" lines; a
    relocation of the line follows a "|" ("| R_ARM_ABS32 .scratch")."""
    lines = [f"Disassembly of section .text.{name}:", "", f"00000000 <{name}>:"]
    for row in body.strip().splitlines():
        row, _, relocation = row.partition("|")
        address, _, text = row.strip().partition(":")
        mnemonic, _, operands = text.strip().partition(" ")
        lines.append(f"  {address}:\t0000      \t{mnemonic}\t{operands.strip()}")
        if relocation.strip():
            kind, symbol = relocation.split()
            lines.append(f"\t\t\t{address}: {kind}\t{symbol}")
    return "\n".join(lines) + "\n"


def profile_of(text: str) -> FunctionProfile:
    items = parse_listing(text)
    return FunctionProfile([i.insn for i in items], [i.address for i in items], target_address, None,
                           read_relocations(text).of("f"))


def trips_by_header(profile: FunctionProfile) -> dict[int, int | None]:
    return {profile.addresses[profile.graph.blocks[h][0]]: t for h, t in profile.trips.items()}


# r2 counts 0, 32, ..., 256 (8 iterations of the 3-instruction body), then the return.
COUNTED = listing("""
 0: movs r2, #0
 2: adds r2, #32
 4: cmp.w r2, #256
 8: bne.n 2 <f+0x2>
 a: bx lr
""")


def test_a_counted_loop_runs_its_constant_trips():
    profile = profile_of(COUNTED)
    assert trips_by_header(profile) == {2: 8}
    assert np.allclose(profile.frequencies(), [1, 8, 1])
    found = estimate({"f": ([i.address for i in parse_listing(COUNTED)], [i.insn for i in parse_listing(COUNTED)])},
                     None, "f")
    assert found.instructions == pytest.approx(1 + 8 * 3 + 1) and found.loops_unknown == 0


# The counter lives in a stack slot (spilled), reloaded, stepped and stored each iteration.
SPILLED = listing("""
 0: movs r0, #5
 2: str r0, [sp, #8]
 4: ldr r0, [sp, #8]
 6: subs r0, #1
 8: str r0, [sp, #8]
 a: bne.n 4 <f+0x4>
 c: bx lr
""")

# A pointer walks from r1 + 0 to r1 + 48 by 4 bytes, compared with an end pointer built
# from the same base before the loop: 12 iterations, whatever r1 is.
POINTERS = listing("""
 0: add.w r3, r1, #48
 4: ldr.w r0, [r1], #4
 8: cmp r1, r3
 a: bne.n 4 <f+0x4>
 c: bx lr
""")

# Helium: a tail-predicated loop over 100 bytes, 16 a time: 7 iterations.
TAIL_PREDICATED = listing("""
 0: movs r2, #100
 2: dlstp.8 lr, r2
 6: vldrb.u8 q0, [r0], #16
 a: letp lr, 6 <f+0x6>
 e: bx lr
""")

# An outer loop run twice by a flag the compiler toggles (clang, tile_m = m / 2), around an
# inner loop of 4.
FLAG_AND_NESTED = listing("""
 0: movs r0, #1
 2: str r0, [sp, #8]
 4: movs r2, #0
 6: adds r2, #1
 8: cmp r2, #4
 a: bne.n 6 <f+0x6>
 c: ldr r0, [sp, #8]
 e: lsls r0, r0, #31
 10: mov.w r0, #0
 14: str r0, [sp, #8]
 16: bne.n 4 <f+0x4>
 18: bx lr
""")

# 3,000 iterations: worked out from the first three, whose compare moved by one each time
# (static_profile._extrapolated_exit), not by running all of them; the answer is the same.
LONG = listing("""
 0: movs r2, #0
 2: adds r2, #1
 4: cmp.w r2, #3000
 8: bne.n 2 <f+0x2>
 a: bx lr
""")

# The bound is loaded from memory: no count to work out.
DATA_BOUND = listing("""
 0: ldr r3, [r0, #0]
 2: movs r2, #0
 4: adds r2, #1
 6: cmp r2, r3
 8: blt.n 4 <f+0x4>
 a: bx lr
""")


# A pointer into a scratch buffer stepped 16 bytes a time to the buffer's end, both
# addresses loaded from the literal pool (relocated words at 0x10 and 0x14): 8 iterations.
LITERAL_POOL = listing("""
 0: ldr.w r2, [pc, #12]
 4: ldr r3, [pc, #12]
 6: adds r2, #16
 8: cmp r3, r2
 a: bne.n 6 <f+0x6>
 c: bx lr
 e: nop
 10: .word 0x00000000 | R_ARM_ABS32 .scratch
 14: .word 0x00000080 | R_ARM_ABS32 .scratch
""")

# A bound too wide for an immediate, built by movw/movt: 100,000 in steps of 100.
WIDE_BOUND = listing("""
 0: movw r3, #34464
 4: movt r3, #1
 8: movs r2, #0
 a: adds r2, #100
 c: cmp r2, r3
 e: bne.n a <f+0xa>
 10: bx lr
""")

# The outer counter (r5) is spilled inside the inner loop, its register reused and reloaded:
# the inner loop gives it back, so the outer loop's 5 iterations are still counted.
KEPT_ACROSS_INNER = listing("""
 0: movs r5, #0
 2: movs r2, #0
 4: str r5, [sp, #8]
 6: movs r5, #7
 8: ldr r5, [sp, #8]
 a: adds r2, #1
 c: cmp r2, #3
 e: bne.n 4 <f+0x4>
 10: adds r5, #1
 12: cmp r5, #5
 14: bne.n 2 <f+0x2>
 16: bx lr
""")

# A load multiple with writeback steps its base 8 bytes a time to 64 bytes on: 8 iterations.
LOAD_MULTIPLE = listing("""
 0: add.w r3, r1, #64
 4: ldmia r1!, {r4, r5}
 6: cmp r1, r3
 8: bne.n 4 <f+0x4>
 a: bx lr
""")

# A bound stored into an array on the stack through a pointer and an index register, read
# back with a load multiple: the same slot (sp + 20) however it is addressed, 6 iterations.
STACK_ARRAY = listing("""
 0: add.w r8, sp, #16
 4: movs r1, #1
 6: movs r2, #6
 8: str.w r2, [r8, r1, lsl #2]
 c: ldmia.w r8, {r4, r5}
 10: movs r3, #0
 12: adds r3, #1
 14: cmp r3, r5
 16: bne.n 12 <f+0x12>
 18: bx lr
""")


@pytest.mark.parametrize("text, expected", [
    (SPILLED, {4: 5}), (POINTERS, {4: 12}), (TAIL_PREDICATED, {6: 7}), (FLAG_AND_NESTED, {4: 2, 6: 4}),
    (LONG, {2: 3000}), (DATA_BOUND, {4: None}), (LITERAL_POOL, {6: 8}), (WIDE_BOUND, {10: 1000}),
    (KEPT_ACROSS_INNER, {2: 5, 4: 3}), (LOAD_MULTIPLE, {4: 8}), (STACK_ARRAY, {0x12: 6}),
], ids=["spilled", "pointers", "tail-predicated", "flag-and-nested", "long", "data-bound", "literal-pool",
        "wide-bound", "kept-across-inner", "load-multiple", "stack-array"])
def test_trip_counts_the_compiler_hides(text, expected):
    assert trips_by_header(profile_of(text)) == expected


def test_an_unknown_count_is_guessed_and_said():
    items = parse_listing(DATA_BOUND)
    found = estimate({"f": ([i.address for i in items], [i.insn for i in items])}, None, "f")
    assert found.loops_unknown == 1 and found.loops == 1
    assert found.instructions == pytest.approx(2 + UNKNOWN_TRIPS * 3 + 1)


# A pointer loop inside a pointer loop: the inner one steps r1 a byte at a time to r2; on
# its way out r1 equals r2, so the outer compare of r1 with r0 + 64 counts 4 rounds of 16.
POINTER_LEFT_AT_END = listing("""
 0: add.w r3, r0, #64
 4: mov r1, r0
 6: add.w r2, r1, #16
 a: strb r5, [r1], #1
 e: cmp r1, r2
 10: bne.n a <f+0xa>
 12: cmp r1, r3
 14: bne.n 6 <f+0x6>
 16: bx lr
""")


def test_a_loop_left_on_an_equal_compare_leaves_its_pointer_known():
    assert trips_by_header(profile_of(POINTER_LEFT_AT_END)) == {6: 4, 10: 16}


# A branch on the loop counter, not the data (a filter tap in the padding): taken for i = 0
# and 1 of 10, so the two instructions it skips run 8 times, not 5.
COUNTER_BRANCH = listing("""
 0: movs r4, #0
 2: cmp r4, #2
 4: blt.n a <f+0xa>
 6: adds r1, #1
 8: adds r1, #1
 a: adds r4, #1
 c: cmp r4, #10
 e: bne.n 2 <f+0x2>
 10: bx lr
""")

# A triangular nest: the inner loop runs i + 1 times for i = 0..3, 10 in all (its count on
# the outer loop's first iteration is 1; the walk sees every exit).
TRIANGULAR = listing("""
 0: movs r4, #0
 2: movs r2, #0
 4: adds r2, #1
 6: cmp r2, r4
 8: ble.n 4 <f+0x4>
 a: adds r4, #1
 c: cmp r4, #4
 e: bne.n 2 <f+0x2>
 10: bx lr
""")

# A pixel counter split into row and column: a division by 5 (udiv) gives the row, the
# column is the counter less 5 rows (mls), less one (uxtab with -1: the tap left of it);
# the tap is skipped on the first column (2 pixels of 10), and on the first row (5) by the
# row test, so the body at 0x18 runs 4 times.
PIXEL_SPLIT = listing("""
 0: movs r0, #0
 2: movs r6, #5
 4: mov.w r5, #4294967295
 8: udiv r3, r0, r6
 c: cmp r3, #0
 e: beq.n 1e <f+0x1e>
 10: mls r2, r3, r6, r0
 14: uxtab r2, r5, r2
 18: cmp r2, #0
 1a: blt.n 1e <f+0x1e>
 1c: adds r1, #1
 1e: adds r0, #1
 20: cmp r0, #10
 22: bne.n 8 <f+0x8>
 24: bx lr
""")

# The guard of a saturating doubling multiply: only INT32_MIN x INT32_MIN takes the branch
# at 0xa past 0xc, or gets past GCC's split guard (`cmp; bne; cmp; beq` from 0xe) to 0x14:
# both counted as never taken.
OVERFLOW_GUARD = listing("""
 0: cmp.w r1, #2147483648
 4: it eq
 6: cmpeq.w r2, #2147483648
 a: beq.n e <f+0xe>
 c: adds r0, #1
 e: cmp.w r1, #2147483648
 12: bne.n 1a <f+0x1a>
 14: cmp.w r2, #2147483648
 18: beq.n 1c <f+0x1c>
 1a: adds r0, #2
 1c: bx lr
""")

# A tile's coordinates filled into a stack array by a stepped pointer (`str.w r3, [r0], #4`),
# then tested: coords[1] = 1 + r4 for r4 = 0..3 is above 3 once, so 0x1a runs 3 times. The
# fill loop is walked each time (jumped over, its array would keep the last walked values).
COORDINATES_ON_STACK = listing("""
 0: sub sp, #16
 2: movs r4, #0
 4: mov r0, sp
 6: movs r2, #0
 8: adds r3, r2, r4
 a: str.w r3, [r0], #4
 e: adds r2, #1
 10: cmp r2, #2
 12: bne.n 8 <f+0x8>
 14: ldr r1, [sp, #4]
 16: cmp r1, #3
 18: bgt.n 1c <f+0x1c>
 1a: adds r5, #1
 1c: adds r4, #1
 1e: cmp r4, #4
 20: bne.n 4 <f+0x4>
 22: add sp, #16
 24: bx lr
""")


@pytest.mark.parametrize("text, expected", [
    (COUNTER_BRANCH, [1, 10, 8, 10, 1]), (TRIANGULAR, [1, 4, 10, 4, 1]),
    (COORDINATES_ON_STACK, [1, 4, 8, 4, 3, 4, 1]),
    (PIXEL_SPLIT, [1, 10, 5, 4, 10, 1]), (OVERFLOW_GUARD, [1, 1, 1, 0, 1, 1]),
], ids=["counter-branch", "triangular", "coordinates-on-stack", "pixel-split", "overflow-guard"])
def test_the_walk_counts_branches_on_counters(text, expected):
    assert np.allclose(profile_of(text).frequencies(), expected)


def test_a_requantization_branch_counts_half():
    # The branch at 4 skips one instruction half of the time: 0.5 of it per call.
    text = listing("""
 0: cmp r0, #0
 2: ble.n 6 <f+0x6>
 4: adds r1, #1
 6: bx lr
""")
    assert np.allclose(profile_of(text).frequencies(), [1, 0.5, 1])


# The requantization's shift tests under TFLite's convention (negative exponents: the
# rounding right shift always runs). GCC tests the loaded exponent (negated at 0xa for the
# count): `ble` to the right shift is taken, `beq` past the rounding never.
SHIFT_TESTS_GCC = listing("""
 0: ldr r1, [r0, #4]
 2: cmp r1, #0
 4: ble.n a <f+0xa>
 6: lsls r2, r1
 8: b.n 14 <f+0x14>
 a: rsb r5, r1, #0
 e: cmp r1, #0
 10: beq.n 14 <f+0x14>
 12: asrs r2, r5
 14: bx lr
""")
# clang negates it first, zeroes the count when the exponent is positive (never, here) and
# skips the rounding when the count is below 1 (never).
SHIFT_TESTS_CLANG = listing("""
 0: ldr r2, [r0, #4]
 2: negs r4, r2
 4: cmp r2, #0
 6: it gt
 8: movgt r4, #0
 a: lsl.w r1, r1, r3
 e: cmp r4, #1
 10: blt.n 16 <f+0x16>
 12: asrs r0, r4
 14: adds r0, #1
 16: bx lr
""")
# GCC's depthwise code negates the exponent on the right shift's path (0x14) and zeroes the
# count on the left's (8); the count then decides the rounding (`cbz` at 0xc: never taken).
SHIFT_TESTS_GCC_JOINED = listing("""
 0: ldr r2, [r0]
 2: cmp r2, #0
 4: ble.n 14 <f+0x14>
 6: lsls r3, r2
 8: movs r1, #0
 a: adds r3, #1
 c: cbz r1, 12 <f+0x12>
 e: asrs r3, r1
 10: adds r3, #1
 12: bx lr
 14: rsb r1, r2, #0
 18: b.n a <f+0xa>
""")
# clang for the Cortex-M55 (Armv8.1-M): the count is the exponent negated, or zero.
SHIFT_TESTS_CLANG_M55 = listing("""
 0: ldr r4, [r0]
 2: cmp r4, #0
 4: mov.w r5, #0
 8: csneg r4, r5, r4, gt
 c: cmp r4, #1
 e: blt.n 14 <f+0x14>
 10: asrs r0, r4
 12: adds r0, #1
 14: bx lr
""")
# A count compared equal to 1: 1 is, 20 is not; the convention does not decide it.
SHIFT_COUNT_UNDECIDED = listing("""
 0: ldr r2, [r0, #4]
 2: negs r4, r2
 4: cmp r4, #1
 6: beq.n a <f+0xa>
 8: asrs r0, r4
 a: bx lr
""")


@pytest.mark.parametrize("text, expected", [
    (SHIFT_TESTS_GCC, [1, 0, 1, 1, 1]), (SHIFT_TESTS_CLANG, [1, 1, 1]),
    (SHIFT_TESTS_GCC_JOINED, [1, 0, 1, 1, 1, 1]), (SHIFT_TESTS_CLANG_M55, [1, 1, 1]),
    (SHIFT_COUNT_UNDECIDED, [1, 0.5, 1]),
], ids=["gcc", "clang", "gcc-joined", "clang-m55", "undecided"])
def test_a_requantization_shift_test_goes_the_way_negative_exponents_send_it(text, expected):
    assert np.allclose(profile_of(text).frequencies(), expected)


CALLS = """
Disassembly of section .text.helper:

00000000 <helper>:
   0:\t3001      \tadds\tr0, #1
   2:\t4770      \tbx\tlr

Disassembly of section .text.kernel:

00000000 <kernel>:
   0:\tb580      \tpush\t{r7, lr}
   2:\tf7ff fffe \tbl\t0 <kernel>
\t\t\t2: R_ARM_THM_CALL\thelper
   6:\tf7ff fffe \tbl\t0 <kernel>
\t\t\t6: R_ARM_THM_CALL\thelper
   a:\tbd80      \tpop\t{r7, pc}

Disassembly of section .text.kernel_pack:

00000000 <kernel_pack>:
   0:\t4770      \tbx\tlr
"""


def test_calls_into_the_object_count_and_other_functions_do_not():
    assert read_relocations(CALLS).calls == {("kernel", 2): "helper", ("kernel", 6): "helper"}
    features = listing_features(parse_listing(CALLS), a64=False, entry="kernel", relocations=read_relocations(CALLS))
    assert features["profile_instructions"] == pytest.approx(4 + 2 * 2)  # kernel_pack is not run
    assert listing_features(parse_listing(CALLS), a64=False)["profile_instructions"] == pytest.approx(4 + 2 + 1)



# A helper filling `n` rows (r3) called with 2 and then with 1, and once more inside a loop
# with the loop's counter (no one value: its count is unknown there).
FILL_CALLS = listing("""
 0: movs r2, #0
 2: adds r2, #1
 4: cmp r2, r3
 6: blt.n 2 <f+0x2>
 8: bx lr
""", "fill") + listing("""
 0: push {r4, lr}
 2: movs r3, #2
 4: bl 0 <kernel> | R_ARM_THM_CALL fill
 8: movs r3, #1
 a: bl 0 <kernel> | R_ARM_THM_CALL fill
 e: pop {r4, pc}
""", "kernel")


def test_a_helper_is_profiled_for_the_constants_each_call_passes():
    items = parse_listing(FILL_CALLS)
    functions = {name: ([i.address for i in items if i.section.endswith(name)],
                        [i.insn for i in items if i.section.endswith(name)]) for name in ("fill", "kernel")}
    found = estimate(functions, read_relocations(FILL_CALLS), "kernel")
    # kernel's 6, fill with n = 2 (1 + 2 x 3 + 1) and with n = 1 (1 + 3 + 1)
    assert found.instructions == pytest.approx(6 + 8 + 5) and found.loops_unknown == 0
    # a relocated literal is its symbol plus the word, an unrelocated one the word
    words = [Instruction(4, ".word", "0x80"), Instruction(4, ".word", "0x10")]
    assert resolve_constants([0, 4, 8], [Instruction(4, "ldr.w", "r0, [pc, #0]"), *words],
                             {4: ".scratch"})[0] == Symbol(".scratch", 0x80)
    assert resolve_constants([0, 4, 8], [Instruction(4, "ldr.w", "r0, [pc, #4]"), *words], {4: ".scratch"})[0] == 0x10


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("clang") or not shutil.which("arm-none-eabi-gcc"),
                    reason="needs the Arm compilers (scripts/setup.sh)")
def test_the_estimate_follows_what_qemu_counted(tmp_path):
    """The oracle: instructions QEMU counted for 60 configurations of a recorded Cortex-M4
    space (app/ranking_spaces), against the profile of their code compiled now."""
    from edgetune.codegen import get_kernel
    from edgetune.targets import get_target
    from edgetune.targets.code_features import variant_features
    from edgetune.targets.runners import runner_for
    from scipy.stats import spearmanr

    data = json.loads(gzip.decompress((SPACES / "matmul_s8-cortex-m4-m16n16k32.json.gz").read_bytes()))
    kernel, target = get_kernel(data["kernel"]), get_target(data["target"])
    shape = dict(data["shape"])
    space = kernel.space(target, shape)
    entries = [e for e in data["entries"] if e.get("outcome", "ok") == "ok"]
    picked = entries[::len(entries) // 60][:60]
    runner = runner_for(target)
    estimated, counted = [], []
    for n, entry in enumerate(picked):
        config = space.config_at(space.index_of({p.name: entry["config"].get(p.name, p.values[0])
                                                 for p in space.params}))
        workdir = tmp_path / str(n)
        workdir.mkdir()
        estimated.append(variant_features(runner, kernel, shape, config, workdir)["profile_instructions"])
        counted.append(entry["values"]["instructions"])
    estimated, counted = np.array(estimated), np.array(counted, dtype=float)
    assert spearmanr(estimated, counted).correlation > 0.85
    assert np.median(np.abs(estimated / counted - 1)) < 0.10


def test_values_follow_moves_and_offsets_and_forget_what_they_cannot_know():
    from edgetune.targets.mix import Instruction
    from edgetune.targets.thumb_values import Symbol, Values, condition_holds, execute, run_block

    values = Values()
    for mnemonic, operands in (("add.w", "r3, r1, #48"), ("ldr.w", "r0, [r1], #4"), ("str", "r3, [sp, #8]"),
                               ("ldr", "r2, [sp, #8]"), ("cmp", "r1, r2")):
        execute(values, Instruction(4, mnemonic, operands))
    assert values.get("r2") == Symbol("r1", 48) and values.get("r1") == Symbol("r1", 4)
    assert condition_holds(values.flags, "lo") is True and condition_holds(values.flags, "eq") is False
    assert isinstance(values.get("r0"), Symbol) and values.get("r0").name.startswith("?")  # loaded: unknown
    # In an IT block a write happens when the known flags say so, is skipped when they say
    # not, and is unknown when they do not tell (r0 was loaded).
    run_block(values, [Instruction(2, "movs", "r4, #1"), Instruction(2, "ite", "gt"), Instruction(2, "movgt", "r4, #0"),
                       Instruction(2, "movle", "r4, #7")])
    assert values.get("r4") == 0
    run_block(values, [Instruction(2, "cmp", "r0, #1"), Instruction(2, "it", "gt"), Instruction(2, "movgt", "r4, #9")])
    assert not isinstance(values.get("r4"), int)
    assert condition_holds((Symbol("a"), Symbol("b")), "eq") is None  # two unknowns: no verdict
    # divisions truncate toward zero (udiv reads its operands unsigned); extend-and-add adds
    # the low byte; multiply-subtract takes the product from the third operand
    values = Values()
    for mnemonic, operands in (("mov.w", "r0, #4294967289"), ("movs", "r1, #2"), ("sdiv", "r2, r0, r1"),
                               ("udiv", "r3, r0, r1"), ("uxtab", "r4, r1, r0"), ("mls", "r5, r1, r1, r4")):
        execute(values, Instruction(4, mnemonic, operands))
    assert [values.get(r) for r in ("r2", "r3", "r4", "r5")] == [-3, 0x7FFFFFFC, 2 + 0xF9, 2 + 0xF9 - 4]


def test_an_instruction_is_read_once_into_its_kind_operands_and_writes():
    from edgetune.targets import thumb_decode as d
    from edgetune.targets.mix import Instruction

    load = d.decode(Instruction(4, "ldr.w", "r0, [sp, #8]"))
    assert (load.kind, load.target, load.address.on_stack, load.written) == (d.LOAD, "r0", "sp+8", {"r0"})
    assert d.decode(Instruction(4, "ldr.w", "r0, [sp, #8]")) is load  # cached: the walk reads it once
    stepped = d.decode(Instruction(4, "str.w", "r5, [r0], #4"))
    assert (stepped.kind, stepped.post_indexed, stepped.pre_indexed) == (d.STORE, ("r0", 4), ())
    assert d.decode(Instruction(4, "ldrd", "r2, r3, [r1, #8]!")).pre_indexed == (("r1", 8),)
    shifted = d.decode(Instruction(4, "add.w", "r3, r1, r2, lsl #2"))
    assert (shifted.kind, shifted.first, shifted.second) == (d.ARITHMETIC, "r1", d.Operand("r2", None, ("lsl", 2)))
    assert d.decode(Instruction(2, "ite", "gt")).it_slots == ("gt", "le")
    call = d.decode(Instruction(4, "bl", "0 <memcpy>"))
    assert call.kind == d.OTHER and call.written == d.CALL_CLOBBERS
    assert d.decode(Instruction(4, "smlabb", "r0, r1, r2, r3")).written == {"r0"}
    assert d.decode(Instruction(4, "subs", "r3, #1")).kind == d.ARITHMETIC
    assert d.decode(Instruction(4, "teq", "r3, r2")).clobbers_flags
