"""The NEON (AArch64 Advanced SIMD) variants of dwconv2d_s8: which tiles the space offers.

dwconv2d_s8_neon.c.j2 takes channels eight at a time (one int16x8 of widened inputs or
weights, two int32x4 accumulators per pixel). The register limit keeps a tile's
accumulators, the bias they start from and the tap's weights inside the unit's vector
registers (32 on Armv8-A), so the compiler need not spill inside the tap loop; the template
is correct for any tile, the limit only prunes slow ones.
"""
from __future__ import annotations

from typing import Mapping

from edgetune.hal import Target

from .paths import Rule, VectorPath, with_vector

TEMPLATE = "dwconv2d_s8_neon.c.j2"
LANES = 8  # channels per step: int8 widened to one int16x8 vector


def tile_registers(tile_p: int, tile_c: int) -> int:
    """Per group of eight channels: two accumulators per pixel, two bias vectors, the tap's
    widened weights; plus the widened input being multiplied and the in_zero vector."""
    groups = tile_c // LANES
    return groups * (2 * tile_p + 2 + 1) + 2


def neon_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    """The limits of vector="neon" configurations."""
    registers = target.vector_unit("neon").registers
    return [(f"NEON tile_c must be a multiple of {LANES} and its tile must fit the {registers} vector registers",
             lambda c: c["tile_c"] % LANES == 0 and tile_registers(c["tile_p"], c["tile_c"]) <= registers,
             ("tile_c", "tile_p"))]


NEON = VectorPath("neon", with_vector("neon"), TEMPLATE, neon_rules)
