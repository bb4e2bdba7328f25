"""The NEON (AArch64 Advanced SIMD) variants of matmul_s8: which tiles the space offers.

Both layouts run from matmul_s8_neon.c.j2. The limits below keep a block's accumulators
and operands inside the unit's vector registers (32 on Armv8-A), so the compiler need not
spill inside the k loop; the template is correct for any tile, these only prune slow ones.
"""
from __future__ import annotations

from typing import Mapping

from edgetune.hal import Target

from .paths import Rule, VectorPath, with_vector

TEMPLATE = "matmul_s8_neon.c.j2"


def rowmajor_registers(tile_m: int, tile_n: int) -> int:
    """Row-major: two int32x4 accumulators per row and 8 columns, one widened B vector per
    8 columns, the zero point of B and one broadcast of A."""
    vectors = -(-tile_n // 8)
    return 2 * tile_m * vectors + vectors + 2


def packed_registers(tile_m: int, tile_n: int) -> int:
    """Packed: one int32x4 accumulator per output, one vector per row of A, one column of B
    and two int16 product vectors in flight."""
    return tile_m * tile_n + tile_m + 3


def neon_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    """The limits of vector="neon" configurations (codegen/kernels/paths.py)."""
    registers = target.vector_unit("neon").registers

    def fits(c) -> bool:
        count = packed_registers if c["layout"] == "packed" else rowmajor_registers
        return count(c["tile_m"], c["tile_n"]) <= registers

    return [
        (f"NEON block needs more than the {registers} vector registers", fits, ("layout", "tile_m", "tile_n")),
        ("packed NEON unrolls 16-element steps: 16 * unroll_k must not exceed k",
         lambda c: c["layout"] != "packed" or c["unroll_k"] == 1 or 16 * c["unroll_k"] <= shape["k"],
         ("layout", "unroll_k")),
    ]


NEON = VectorPath("neon", with_vector("neon"), TEMPLATE, neon_rules)
