"""The x86 vector paths of conv2d_s8: AVX2, AVX-512 and, on packed weights, AVX-VNNI and
AVX512-VNNI (template conv2d_s8_avx.c.j2).

Every output is a dot product of int8 rows that lie contiguous along the reduction: the
weights of one output channel (OHWI rows, or layout=packed rows, which keep that order with
block=1) against one tap's cin input channels (algo=direct) or one im2col row of
K = kh*kw*cin (algo=im2col). Sixteen (AVX2) or thirty-two (AVX-512) bytes of each are
sign-extended to int16 and multiplied pairwise with VPMADDWD into int32 lanes, as in
matmul_s8's packed AVX path (matmul_s8_avx.py):
- layout=ohwi: the input minus in_zero, in [-255, 255], times a weight in [-128, 127]: a pair
  sum is at most 65280 in magnitude, exact. Taps in the padding are skipped (direct) or hold
  in_zero (im2col), so they add 0.
- layout=packed: the raw input times the weight (in_zero is folded into the per-channel term
  by pack_weights), padded taps read in_zero like the C path of conv2d_s8_packed.c.j2.
- vector=avxvnni / avx512vnni (layout=packed only): the raw input bytes, XOR 0x80 (x + 128,
  unsigned), times the weight bytes, four products per int32 lane per VPDPBUSD, 32 or 64
  bytes a step, no widening (see matmul_s8_avx.py for why it is exact). pack_weights folds
  the offset into the term: bias - (in_zero + 128) * sum(w); padded taps read in_zero, which
  the XOR turns into in_zero + 128, so they still add 0 after the term.
The lanes of a tile row's accumulators are summed together (up to four channels, one
vector of sums); the rows of int32 accumulators are then requantised eight channels at a time (common/requantize_avx_channels.c.j2, bit-exact with the
scalar common/requantize.c.j2).
"""
from __future__ import annotations

from typing import Mapping

from edgetune.hal import Target
from edgetune.tuner import Config

from .matmul_s8_avx import AVX_PATHS, VNNI_A_OFFSET, VNNI_PATHS, zero_offset
from .paths import Rule, VectorPath, with_vector

TEMPLATE = "conv2d_s8_avx.c.j2"
MAX_TILE_OC = 4  # the channels of a tile row whose lane sums one 128-bit vector holds


def conv_avx_rules(name: str):
    """Register limits of one AVX path from the HAL's register count: tile_p * tile_oc vector
    accumulators, one input vector per pixel of the tile, one weight vector in flight, and
    (layout=ohwi) the broadcast input zero point."""
    def rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
        registers = target.vector_unit(AVX_PATHS[name][0]).registers
        return [
            (f"the AVX paths sum at most {MAX_TILE_OC} channels of a tile row together (tile_oc <= {MAX_TILE_OC})",
             lambda c: c["tile_oc"] <= MAX_TILE_OC, ("tile_oc",)),
            (f"{name} tile needs tile_p * tile_oc + tile_p + 1 (+1 for layout=ohwi) <= {registers} vector registers",
             lambda c: c["tile_p"] * c["tile_oc"] + c["tile_p"] + 1 + (c["layout"] == "ohwi") <= registers,
             ("tile_p", "tile_oc", "layout")),
        ]
    return rules


def conv_vnni_rules(name: str):
    """A VNNI path: packed weights only (the input's offset of 128 lives in the packed term),
    the AVX tile limits with one more register (the 0x80 constant)."""
    def rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
        registers = target.vector_unit(VNNI_PATHS[name][0]).registers
        return [
            (f"{name} runs on packed weights only (layout=packed: the input's offset of {VNNI_A_OFFSET} is folded "
             "into the per-channel term at pack time)", lambda c: c["layout"] == "packed", ("layout",)),
            (f"the AVX paths sum at most {MAX_TILE_OC} channels of a tile row together (tile_oc <= {MAX_TILE_OC})",
             lambda c: c["tile_oc"] <= MAX_TILE_OC, ("tile_oc",)),
            (f"{name} tile needs tile_p * tile_oc + tile_p + 2 <= {registers} vector registers",
             lambda c: c["tile_p"] * c["tile_oc"] + c["tile_p"] + 2 <= registers, ("tile_p", "tile_oc")),
        ]
    return rules


def conv_avx_template_vars(target: Target, shape: Mapping[str, int], config: Config) -> dict:
    """What conv2d_s8_avx.c.j2 needs beyond conv2d_s8's shared variables."""
    vector = str(config["vector"])
    _, lanes, step = {**AVX_PATHS, **VNNI_PATHS}[vector]
    return dict(avx512=lanes == 16, step=step, packed=config["layout"] == "packed", vnni=vector in VNNI_PATHS,
                zero_offset=zero_offset(vector))


AVX2, AVX512 = (VectorPath(name, with_vector(unit), TEMPLATE, conv_avx_rules(name), variables=conv_avx_template_vars)
                for name, (unit, _, _) in AVX_PATHS.items())
VNNI = tuple(VectorPath(name, with_vector(unit), TEMPLATE, conv_vnni_rules(name), variables=conv_avx_template_vars)
             for name, (unit, _, _) in VNNI_PATHS.items())
