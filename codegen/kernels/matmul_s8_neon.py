"""The NEON (AArch64 Advanced SIMD) variants of matmul_s8: which tiles the space offers.

Both layouts run from matmul_s8_neon.c.j2. The limits below keep a block's accumulators
and operands inside the unit's vector registers (32 on Armv8-A), so the compiler need not
spill inside the k loop; the template is correct for any tile, these only prune slow ones.
"""
from __future__ import annotations

from typing import Mapping

from edgetune.hal import VectorUnit
from edgetune.tuner import Constraint

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


def neon_constraints(unit: VectorUnit, shape: Mapping[str, int]) -> list[Constraint]:
    """Constraints on vector="neon" configurations (the others pass untouched)."""
    registers = unit.registers

    def fits(c) -> bool:
        if c["vector"] != "neon":
            return True
        count = packed_registers if c["layout"] == "packed" else rowmajor_registers
        return count(c["tile_m"], c["tile_n"]) <= registers

    return [
        Constraint(f"NEON block needs more than the {registers} vector registers", fits),
        Constraint("packed NEON unrolls 16-element steps: 16 * unroll_k must not exceed k",
                   lambda c: c["vector"] != "neon" or c["layout"] != "packed"
                   or c["unroll_k"] == 1 or 16 * c["unroll_k"] <= shape["k"]),
    ]
