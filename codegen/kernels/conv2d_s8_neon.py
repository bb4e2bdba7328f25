"""The NEON (AArch64 Advanced SIMD) variants of conv2d_s8: which configurations the space offers.

conv2d_s8_neon.c.j2 runs on packed weights (one contiguous row of kh*kw*cin weights per
output channel, the plain layout of weight_packing.Packing with block 1), both algorithms
and both fusions. The register limit keeps an im2col tile's int32x4 accumulators, its pixel
and weight vectors and two int16 product vectors inside the unit's vector registers (32 on
Armv8-A), so the compiler need not spill inside the reduction loop; the template is correct
for any tile, the limit only prunes slow ones.
"""
from __future__ import annotations

from typing import Mapping

from edgetune.hal import Target

from .paths import Rule, VectorPath, with_vector

TEMPLATE = "conv2d_s8_neon.c.j2"


def tile_registers(tile_p: int, tile_oc: int) -> int:
    """One accumulator per pixel and channel of the tile, one vector per pixel row and per
    channel's weights, two int16 product vectors in flight."""
    return tile_p * tile_oc + tile_p + tile_oc + 2


def neon_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    """The limits of vector="neon" configurations."""
    registers = target.vector_unit("neon").registers
    return [
        ("the NEON path runs on packed weights (layout=packed)", lambda c: c["layout"] == "packed", ("layout",)),
        (f"NEON tile needs more than the {registers} vector registers",
         lambda c: tile_registers(c["tile_p"], c["tile_oc"]) <= registers, ("tile_p", "tile_oc")),
    ]


NEON = VectorPath("neon", with_vector("neon"), TEMPLATE, neon_rules)
