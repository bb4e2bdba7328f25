"""The x86 vector paths of matmul_s8: AVX2, AVX-512 and, on packed weights, AVX-VNNI and
AVX512-VNNI (template matmul_s8_avx.c.j2).

Both weight layouts have their own inner loop, and both stay exact in int32:
- packed (B transposed): each output is a contiguous int8 dot product. Sixteen (AVX2) or
  thirty-two (AVX-512) bytes of a row of A and of a column of B are sign-extended to int16
  and multiplied pairwise with VPMADDWD into int32 lanes; |a*b| <= 2^14, so a pair sum never
  saturates (VPMADDUBSW would: it adds two u8*s8 products in saturating int16).
- rowmajor: B is read row by row. Rows k and k+1 are interleaved byte-wise and
  sign-extended, so each int32 lane holds the pair (b[k][n], b[k+1][n]) minus b_zero; one
  VPMADDWD with the broadcast pair (a[k] - a_zero, a[k+1] - a_zero) adds two MACs per
  column. Operands minus zero points lie in [-255, 255], products in 65025: exact again.
- VNNI (avxvnni, avx512vnni; layout=packed only): VPDPBUSD multiplies four unsigned bytes
  by four signed bytes and adds the four products to an int32 lane: 4 MACs per int32 lane
  per instruction, with no widening. A is int8, so each byte of A is offset by 128 (XOR
  0x80) into u8: a' = a + 128 in [0, 255]. Then
      sum_k (a - a_zero)(b - b_zero) = sum_k (a' - (a_zero + 128))(b - b_zero),
  the packed identity with a' for a and a_zero + 128 for a_zero: pack_weights() with that
  offset zero point folds -128 * sum_k b into the column term at pack time, and the kernel
  takes the row term from a' (sum_k a' = sum_k a + 128 K). A product of a u8 and an s8 byte
  lies in [-32640, 32385] and the non-saturating VPDPBUSD (unlike VPDPBUSDS and VPMADDUBSW)
  adds the four to the lane modulo 2^32 (Intel SDM vol. 2C, VPDPBUSD), so the dot products
  are exact whenever the true accumulator fits in int32 (the same bound as the other paths).
Requantisation is vectorised eight lanes at a time, bit-exact with common/requantize.c.j2.
"""
from __future__ import annotations

from typing import Mapping

from edgetune.hal import Target
from edgetune.tuner import Config

from .paths import Rule, VectorPath, with_vector

# Vector path -> (HAL vector unit, int32 lanes of one accumulator, int8 elements of A and B
# one step of the packed dot product consumes).
AVX_PATHS = {"avx2": ("avx2", 8, 16), "avx512": ("avx512", 16, 32)}
# The same for the VNNI paths: one VPDPBUSD step consumes four bytes per int32 lane.
VNNI_PATHS = {"avxvnni": ("avxvnni", 8, 32), "avx512vnni": ("avx512vnni", 16, 64)}
VNNI_A_OFFSET = 128  # added to every int8 of A (XOR 0x80) to make it the u8 operand of VPDPBUSD
TEMPLATE = "matmul_s8_avx.c.j2"


def zero_offset(vector: str) -> int:
    """What a path adds to A (and so to a_zero in the packed column term): 128 on VNNI."""
    return VNNI_A_OFFSET if vector in VNNI_PATHS else 0


def rowmajor_width(vector: str) -> int:
    """Columns of C one row-major AVX accumulator covers (tile_n comes in whole multiples)."""
    return AVX_PATHS[vector][1]


def avx_rules(name: str):
    """Register and step limits of one AVX path, from the HAL's register counts."""
    unit, lanes, step = AVX_PATHS[name]

    def rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
        registers = target.vector_unit(unit).registers
        return [
            # Packed: tile_m * tile_n accumulators, one vector per row of A and one of B in flight.
            (f"{name} packed tile needs tile_m * tile_n + tile_m + 1 <= {registers} vector registers",
             lambda c: c["layout"] != "packed" or c["tile_m"] * c["tile_n"] + c["tile_m"] + 1 <= registers,
             ("layout", "tile_m", "tile_n")),
            (f"{name} packed unrolls {step}-element steps: {step} * unroll_k must not exceed k",
             lambda c: c["layout"] != "packed" or c["unroll_k"] == 1 or step * c["unroll_k"] <= shape["k"],
             ("layout", "unroll_k")),
            # Row-major: tile_n in whole accumulators of `lanes` columns; per accumulator column
            # one vector of B pairs, per row one vector of A pairs, one broadcast.
            (f"{name} row-major tile_n must be a multiple of {lanes} int32 lanes and its accumulators "
             f"(tile_m + 1) * tile_n / {lanes} + tile_m + 1 must fit {registers} vector registers",
             lambda c: c["layout"] != "rowmajor"
             or (c["tile_n"] % lanes == 0 and (c["tile_m"] + 1) * (c["tile_n"] // lanes) + c["tile_m"] + 1 <= registers),
             ("layout", "tile_m", "tile_n")),
            # The row-major loop already unrolls a whole vector of A (lanes pairs of k).
            (f"{name} row-major unrolls {2 * lanes} steps of k itself (unroll_k=1)",
             lambda c: c["layout"] != "rowmajor" or c["unroll_k"] == 1, ("layout", "unroll_k")),
        ]
    return rules


def vnni_rules(name: str):
    """A VNNI path: packed weights only (the offset of A lives in the packed column term), the
    packed tile's registers (plus the 0x80 constant) and whole unrolled steps."""
    unit, _, step = VNNI_PATHS[name]

    def rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
        registers = target.vector_unit(unit).registers
        return [
            (f"{name} runs on packed weights only (layout=packed: A's offset of {VNNI_A_OFFSET} is folded into "
             "the column term at pack time)", lambda c: c["layout"] == "packed", ("layout",)),
            (f"{name} packed tile needs tile_m * tile_n + tile_m + 2 <= {registers} vector registers",
             lambda c: c["tile_m"] * c["tile_n"] + c["tile_m"] + 2 <= registers, ("tile_m", "tile_n")),
            (f"{name} packed unrolls {step}-element steps: {step} * unroll_k must not exceed k",
             lambda c: c["unroll_k"] == 1 or step * c["unroll_k"] <= shape["k"], ("unroll_k",)),
        ]
    return rules


def avx_template_vars(target: Target, shape: Mapping[str, int], config: Config) -> dict:
    """What matmul_s8_avx.c.j2 needs beyond the shared blocking variables."""
    vector = str(config["vector"])
    _, lanes, step = {**AVX_PATHS, **VNNI_PATHS}[vector]
    tn = int(config["tile_n"])
    return dict(lanes=lanes, step=step, packed=config["layout"] == "packed",
                avx512=lanes == 16, vnni=vector in VNNI_PATHS, zero_offset=zero_offset(vector),
                groups=(tn + 7) // 8,  # eight-column groups of the packed reduction
                chunks=tn // lanes if config["layout"] == "rowmajor" else 0,
                k_tail=shape["k"] % step)


AVX2, AVX512 = (VectorPath(name, with_vector(unit), TEMPLATE, avx_rules(name), variables=avx_template_vars)
                for name, (unit, _, _) in AVX_PATHS.items())
VNNI = tuple(VectorPath(name, with_vector(unit), TEMPLATE, vnni_rules(name), variables=avx_template_vars)
             for name, (unit, _, _) in VNNI_PATHS.items())
