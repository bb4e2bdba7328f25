"""Features of compiled code (edgetune.targets.code_features): loops found from backward
branches, instruction classes of the innermost loops, on hand-checked listings and on real
compiled objects, and on a real kernel variant."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from edgetune.codegen import get_kernel
from edgetune.hal import INSTRUCTION_CLASSES
from edgetune.targets import get_target
from edgetune.targets.code_features import (FEATURE_NAMES, PROFILE_FEATURES, find_loops, listing_features, object_features,
                                            parse_listing, variant_features)
from edgetune.targets.mix import Instruction, multiplies
from edgetune.targets.runners import runner_for

# A dot product, clang -O3 for the Cortex-M55 (arm-none-eabi-objdump --architecture=armv8.1-m.main):
# one tail-predicated low-overhead loop of two vector loads, one vector MAC and LETP.
HELIUM_DOT = """
tiny.o:     file format elf32-littlearm


Disassembly of section .text:

00000000 <dot>:
   0:\tb580      \tpush\t{r7, lr}
   2:\t466f      \tmov\tr7, sp
   4:\t2a01      \tcmp\tr2, #1
   6:\tdb0d      \tblt.n\t24 <dot+0x24>
   8:\tf04f 0c00 \tmov.w\tip, #0
   c:\tf002 e001 \tdlstp.8\tlr, r2
  10:\tecb0 1e10 \tvldrb.u8\tq0, [r0], #16
  14:\tecb1 3e10 \tvldrb.u8\tq1, [r1], #16
  18:\teef2 cf20 \tvmlava.s8\tip, q1, q0
  1c:\tf01f c009 \tletp\tlr, 10 <dot+0x10>
  20:\t4660      \tmov\tr0, ip
  22:\tbd80      \tpop\t{r7, pc}
  24:\tf04f 0c00 \tmov.w\tip, #0
  28:\t4660      \tmov\tr0, ip
  2a:\tbd80      \tpop\t{r7, pc}
"""

# Two nested loops with ordinary branches (Armv7E-M): the inner one is 0x10..0x18.
NESTED = """
Disassembly of section .text.f:

00000000 <f>:
   0:\t2300      \tmovs\tr3, #0
   2:\t2200      \tmovs\tr2, #0
   4:\tbf00      \tnop
  10:\tf910 1b01 \tldrsb.w\tr1, [r0], #1
  14:\tfb01 3303 \tmla\tr3, r1, r3, r3
  16:\t3201      \tadds\tr2, #1
  18:\td1fa      \tbne.n\t10 <f+0x10>
  1a:\t3c01      \tsubs\tr4, #1
  1c:\td1f0      \tbne.n\t0 <f>
  1e:\tf000 f800 \tbl\t0 <g>
  22:\t4770      \tbx\tlr
"""

DOT_C = """#include <stdint.h>
int32_t dot(const int8_t *a, const int8_t *b, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}
"""


def test_a_helium_loop_is_counted_by_class():
    features = listing_features(parse_listing(HELIUM_DOT), a64=False)
    assert set(features) == set(FEATURE_NAMES) | set(PROFILE_FEATURES)
    assert features["loops"] == 1 and features["loop_depth"] == 1
    assert features["hot_instructions"] == 4  # 0x10 .. 0x1c
    assert (features["hot_vec_load"], features["hot_vec_mac"], features["hot_loop"]) == (2, 1, 1)
    assert features["hot_mac"] == features["hot_load"] == features["hot_alu"] == 0
    assert features["instructions"] == 15 and features["code_bytes"] == 44


def test_only_innermost_loops_are_hot_and_calls_are_not_loops():
    listing = parse_listing(NESTED)
    assert find_loops(listing, a64=False) == [(".text.f", 0, 0x1c), (".text.f", 0x10, 0x18)]
    features = listing_features(listing, a64=False)
    assert features["loops"] == 2 and features["loop_depth"] == 2
    assert features["hot_instructions"] == 4
    assert (features["hot_load"], features["hot_mac"], features["hot_alu"], features["hot_branch"]) == (1, 1, 1, 1)


@pytest.mark.skipif(not shutil.which("clang") or not shutil.which("arm-none-eabi-gcc"),
                    reason="needs the Arm compilers (scripts/setup.sh)")
@pytest.mark.parametrize("compiler, vector_mac, scalar_mac", [("clang", 1, 0), ("gcc", 0, 1)])
def test_a_compiled_dot_product(tmp_path, compiler, vector_mac, scalar_mac):
    """Clang vectorises the loop with one VMLAVA; GCC 12 keeps one scalar SMLABB per element."""
    target = get_target("cortex-m55")
    flags = target.compiler(compiler)
    (tmp_path / "dot.c").write_text(DOT_C)
    subprocess.run([flags.command, *flags.cflags, "-O3", "-c", "dot.c", "-o", "dot.o"], cwd=tmp_path, check=True)
    features = object_features(target.cost, tmp_path / "dot.o")
    assert features["loops"] >= 1
    assert features["hot_vec_mac"] == vector_mac and features["hot_mac"] == scalar_mac


def test_a_kernel_variants_features_follow_its_vector_path(tmp_path):
    kernel, target = get_kernel("fir_q15"), get_target("cortex-m55")
    shape = kernel.parse_shape("taps=32,block=64,rounding=nearest")
    space = kernel.space(target, shape)
    runner = runner_for(target)
    found = {}
    for vector in ("c", "mve"):
        config = next(c for c in space if c["vector"] == vector and c["compiler"] == "clang" and c["opt"] == "O3")
        workdir = tmp_path / vector
        workdir.mkdir()
        found[vector] = variant_features(runner, kernel, shape, config, workdir)
    assert found["mve"]["hot_vec_mac"] > 0 and found["c"]["hot_vec_mac"] == 0
    assert all(f["code_bytes"] > 0 and f["loops"] > 0 for f in found.values())


# Per pixel (outer loop 0x0..0x2a): an im2col copy loop (0x04..0x0c, no multiply), then the
# MAC loop (0x10..0x1e); static counts weigh both alike, mac_loop_* and copy_loop_* do not.
COPY_THEN_MAC = """
Disassembly of section .text.g:

00000000 <g>:
   0:\t2300      \tmovs\tr3, #0
   4:\tf810 1b01 \tldrb.w\tr1, [r0], #1
   8:\tf802 1b01 \tstrb.w\tr1, [r2], #1
   a:\t3c01      \tsubs\tr4, #1
   c:\td1fa      \tbne.n\t4 <g+0x4>
  10:\tf910 1b01 \tldrsb.w\tr1, [r0], #1
  14:\tf915 cb01 \tldrsb.w\tip, [r5], #1
  18:\tfb01 3303 \tmla\tr3, r1, ip, r3
  1c:\t3e01      \tsubs\tr6, #1
  1e:\td1f7      \tbne.n\t10 <g+0x10>
  20:\t3f01      \tsubs\tr7, #1
  2a:\td1e9      \tbne.n\t0 <g>
"""


def test_innermost_loops_with_a_multiply_are_told_from_copy_loops():
    features = listing_features(parse_listing(COPY_THEN_MAC), a64=False)
    assert features["loops"] == 3 and features["loop_depth"] == 2
    assert features["hot_instructions"] == 9 and features["hot_store"] == 1 and features["hot_load"] == 3
    assert features["mac_loops"] == 1 and features["mac_loop_instructions"] == 5
    assert (features["mac_loop_load"], features["mac_loop_mac"], features["mac_loop_store"]) == (2, 1, 0)
    assert features["copy_loop_instructions"] == 4
    assert sum(features[f"mac_loop_{name}"] for name in INSTRUCTION_CLASSES) == features["mac_loop_instructions"]


@pytest.mark.parametrize("mnemonic, operands, a64, products", [
    ("vmlava.s8", "ip, q1, q0", False, 16),  # Helium: 16 int8 lanes summed
    ("vmladava.s16", "r0, q1, q0", False, 8),
    ("vmla.i32", "q0, q1, r2", False, 4),
    ("vqrdmulh.s32", "q0, q0, r1", False, 0),  # a rescale, not a product summed
    ("smlad", "r3, r1, r2, r3", False, 2),  # two halfword products
    ("smlabb", "r3, r1, r2, r3", False, 1),
    ("mla", "r3, r1, ip, r3", False, 1),
    ("vldrb.u8", "q0, [r0], #16", False, 0),
    ("adds", "r2, #1", False, 0),
    ("sdot", "v0.4s, v1.16b, v2.16b", True, 16),  # 4 lanes of 4-byte dot products
    ("smlal2", "v0.4s, v1.8h, v2.8h", True, 4),
    ("madd", "w0, w1, w2, w0", True, 1),
])
def test_products_per_instruction(mnemonic, operands, a64, products):
    assert multiplies(Instruction(4, mnemonic, operands), a64) == products


def test_products_are_counted_in_the_whole_code_and_its_multiplying_loops():
    helium = listing_features(parse_listing(HELIUM_DOT), a64=False)
    assert (helium["multiplies"], helium["hot_multiplies"], helium["mac_loop_multiplies"]) == (16, 16, 16)
    copy_then_mac = listing_features(parse_listing(COPY_THEN_MAC), a64=False)
    # one MLA in the MAC loop; the copy loop multiplies nothing
    assert (copy_then_mac["multiplies"], copy_then_mac["mac_loop_multiplies"]) == (1, 1)
    assert copy_then_mac["mac_loop_instructions"] / copy_then_mac["mac_loop_multiplies"] == 5
