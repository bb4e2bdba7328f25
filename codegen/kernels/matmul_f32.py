"""matmul_f32: float32 C[MxN] = A[MxK] x B[KxN] + bias[N], row-major.

Variants follow the GotoBLAS/BLIS structure (Goto and van de Geijn, "Anatomy of
high-performance matrix multiplication", ACM TOMS 2008): cache blocks of kc x nc of B and
mc x kc of A, optionally packed into contiguous 64-byte aligned slivers, and a
register-blocked micro-kernel that keeps a tile_m x tile_n block of C in vector registers
for the whole kc loop. Every piece is a tunable parameter.

Correctness is checked against a float64 numpy reference with the tolerance of the
standard summation error bound (Higham, "Accuracy and Stability of Numerical Algorithms",
2nd ed., section 3.1): each element of C is a sum of K products plus the bias, so for any
order of evaluation (blocking, FMA or not)
    |got - exact| <= gamma_(K+1) * (|A| @ |B| + |bias|),  gamma_n = n*u / (1 - n*u),
with u = 2^-24 (float32 unit roundoff). The check allows twice that (TOLERANCE_FACTOR),
which also covers rounding the float64 reference itself to float32.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from edgetune.hal import Target
from edgetune.tuner import Config, Constraint, Space, choice

from ..render import render
from .paths import VectorPath, anywhere, path_constraints, with_vector
from .base import Buffer, Kernel, KernelIO, RenderedKernel, check_elements, describe_mismatch

UNIT_ROUNDOFF = 2.0 ** -24
TOLERANCE_FACTOR = 2.0

# float32 lanes of each vector path's registers, as the template writes them.
LANES = {"c": 1, "avx2": 8, "avx512": 16, "mve": 4, "neon": 4}
KC_VALUES = (64, 128, 256, 512)
MC_VALUES = (32, 64, 128, 256, 512)
NC_VALUES = (256, 1024, 4096)
PACK_MODES = ("none", "b", "ab")
HOST_TILES_M, HOST_TILES_N = (1, 2, 4, 6, 8, 12, 14), (8, 16, 32, 48, 64)
SMALL_TILES_M, SMALL_TILES_N = (1, 2, 3, 4, 6), (4, 8, 12, 16)
# NEON's 32 registers also hold an 8 x 12 block (24 accumulators, 3 of B, 2 of A).
NEON_TILES_M = (1, 2, 3, 4, 6, 8)
# The M55's packing scratch lives in the harness's .bss next to the stack (firmware
# data_reserved minus the stack); keep this much of it for everything else.
EMBEDDED_BSS_MARGIN = 8 * 1024


def tolerance(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Per-element bound on |got - exact| (see the module docstring)."""
    k = a.shape[1]
    gamma = (k + 1) * UNIT_ROUNDOFF / (1 - (k + 1) * UNIT_ROUNDOFF)
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(bias.astype(np.float64))
    return TOLERANCE_FACTOR * gamma * magnitude


def covering(values: tuple[int, ...], size: int) -> int:
    """The smallest value that covers `size` (larger ones only repeat its work)."""
    return min([v for v in values if v >= size] or [max(values)])


def blocking(shape: Mapping[str, int], config: Mapping) -> dict[str, int]:
    """Effective block sizes for a shape: mc a multiple of tile_m, nc of tile_n, none larger
    than the (tile-rounded) matrix, so the scratch is never bigger than needed."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    tm, tn = int(config["tile_m"]), int(config["tile_n"])
    mc = max(tm, int(config["mc"]) // tm * tm)
    nc = max(tn, int(config["nc"]) // tn * tn)
    return {"kc": min(int(config["kc"]), k), "mc": min(mc, -(-m // tm) * tm), "nc": min(nc, -(-n // tn) * tn)}


def lane_chunks(tile_m: int) -> list[tuple[int, int]]:
    """(first row, rows) pieces of a tile_m-row step of a packed A sliver that NEON loads as
    one vector each: 4 rows in a Q register, 2 in a D register, 1 as a scalar. None reads
    past the tile_m values of its step."""
    chunks, start = [], 0
    for width in (4, 2, 1):
        while tile_m - start >= width:
            chunks.append((start, width))
            start += width
    return chunks


def scratch_bytes(shape: Mapping[str, int], config: Mapping) -> int:
    """Static packing memory a variant reserves (its .bss), in bytes."""
    blocks = blocking(shape, config)
    pack = config["pack"]
    a_bytes = 4 * blocks["mc"] * blocks["kc"] if pack == "ab" else 0
    b_bytes = 4 * blocks["kc"] * blocks["nc"] if pack in ("b", "ab") else 0
    return a_bytes + b_bytes


REGISTERS_RULE = "tile_n must be whole vectors of the path and the accumulators must fit its registers"


def float32_lanes(target: Target, vector: str) -> int:
    """float32 lanes of a path's vectors on a target (1: plain C)."""
    return target.vector_unit(vector).lanes_for("float32") if vector != "c" else 1


def register_path(name: str, accumulators_and_operands) -> VectorPath:
    """A vector path whose rule is: tile_n in whole vectors, and
    `accumulators_and_operands(tile_m, vectors_n)` registers (the tile_m x tile_n block of
    accumulators plus B vectors and the broadcast of A) within the unit's register file."""
    def rules(target: Target, shape: Mapping[str, int]):
        lanes, registers = float32_lanes(target, name), target.vector_unit(name).registers

        def fits(c) -> bool:
            return c["tile_n"] % lanes == 0 and accumulators_and_operands(c["tile_m"], c["tile_n"] // lanes) <= registers
        return [(REGISTERS_RULE, fits, ("tile_m", "tile_n"))]
    return VectorPath(name, with_vector(name), "matmul_f32.c.j2", rules)


# One template for every path; per path, the registers a block takes.
PATHS = (
    VectorPath("c", anywhere, "matmul_f32.c.j2"),
    # x86: the accumulators, the B vectors of a k step and one broadcast of A.
    register_path("avx2", lambda tm, vn: tm * vn + vn + 1),
    register_path("avx512", lambda tm, vn: tm * vn + vn + 1),
    # MVE: A comes from a core register (VFMA Qd, Qn, Rm).
    register_path("mve", lambda tm, vn: tm * vn + 2),
    # NEON: A as lanes of vectors (FMLA by element): ceil(tile_m / 4) of them.
    register_path("neon", lambda tm, vn: tm * vn + vn + -(-tm // 4)),
)


class MatmulF32(Kernel):
    name = "matmul_f32"
    version = 1
    shape_keys = ("m", "n", "k")
    description = "float32 matrix multiply with bias, packed and register-blocked (GEMM)"
    template = "matmul_f32.c.j2"
    paths = PATHS

    def check_shape(self, shape: dict[str, int]) -> None:
        check_elements(a=shape["m"] * shape["k"], b=shape["k"] * shape["n"], output=shape["m"] * shape["n"])

    def space(self, target: Target, shape: Mapping[str, int]) -> Space:
        m, n, k = shape["m"], shape["n"], shape["k"]
        paths = self.offered_paths(target)
        vectors = [path.name for path in paths]
        wide = target.has_vector("avx2") or target.has_vector("avx512")
        tiles_m, tiles_n = (HOST_TILES_M, HOST_TILES_N) if wide else (SMALL_TILES_M, SMALL_TILES_N)
        if target.has_vector("neon"):
            tiles_m = NEON_TILES_M
        lanes = {path.name: float32_lanes(target, path.name) for path in paths}
        top = {"tile_m": covering(tiles_m, m), "kc": covering(KC_VALUES, k), "mc": covering(MC_VALUES, m),
               "nc": covering(NC_VALUES, n)}
        # The widest useful tile_n is the first one of whole vectors that covers n.
        top_n = {name: covering(tuple(t for t in tiles_n if t % lanes[name] == 0), n) for name in vectors}
        constraints = [
            *path_constraints(paths, target, shape),
            Constraint("a block size larger than needed to cover the matrix",
                       lambda c: all(c[key] <= top[key] for key in top) and c["tile_n"] <= top_n[c["vector"]],
                       reads=(*top, "tile_n", "vector")),
            Constraint("mc smaller than tile_m or nc smaller than tile_n",
                       lambda c: c["mc"] >= c["tile_m"] and c["nc"] >= c["tile_n"],
                       reads=("mc", "tile_m", "nc", "tile_n")),
            Constraint("unroll_k larger than kc", lambda c: c["unroll_k"] <= min(c["kc"], k) or c["unroll_k"] == 1,
                       reads=("unroll_k", "kc")),
        ]
        if target.firmware is not None:
            budget = target.firmware.data_reserved - target.firmware.stack_size - EMBEDDED_BSS_MARGIN
            constraints.append(Constraint(f"packing scratch exceeds the {budget} bytes of static RAM available",
                                          lambda c: scratch_bytes(shape, c) <= budget,
                                          reads=("tile_m", "tile_n", "mc", "nc", "kc", "pack")))
        params = [
            choice("tile_m", tiles_m, "rows of the register-blocked micro-tile"),
            choice("tile_n", tiles_n, "columns of the micro-tile (whole vectors on a vector path)"),
            choice("kc", KC_VALUES, "cache block of the reduction dimension"),
            choice("mc", MC_VALUES, "cache block of rows of A (rounded down to a multiple of tile_m)"),
            choice("nc", NC_VALUES, "cache block of columns of B (rounded down to a multiple of tile_n)"),
            choice("pack", PACK_MODES, "copy blocks into contiguous aligned slivers: none, B only, A and B"),
            choice("unroll_k", (1, 2, 4), "unroll factor of the micro-kernel's k loop"),
            choice("vector", vectors, "plain C (compiler's choice) or intrinsics of a vector unit the target has"),
            choice("compiler", [c.name for c in target.compilers], "compiler from the target description"),
            choice("opt", ("O2", "O3"), "optimisation level"),
        ]
        return Space(params, constraints)

    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator, edge: str = "random") -> KernelIO:
        m, n, k = shape["m"], shape["n"], shape["k"]
        if edge == "extreme":
            # Magnitudes spread over many binades with cancelling signs: the hard case for
            # a reassociated sum, still far from overflow.
            a = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-20, 20, size=(m, k))).astype(np.float32)
            b = (rng.standard_normal((k, n)) * 2.0 ** rng.integers(-20, 20, size=(k, n))).astype(np.float32)
        else:
            a = rng.uniform(-1, 1, size=(m, k)).astype(np.float32)
            b = rng.uniform(-1, 1, size=(k, n)).astype(np.float32)
        bias = rng.uniform(-1, 1, size=n).astype(np.float32)
        return KernelIO(buffers=(Buffer("a", a), Buffer("b", b, weight=True), Buffer("bias", bias, weight=True),
                                 Buffer("c", np.zeros((m, n), dtype=np.float32), is_output=True)),
                        params=())

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        a, b, bias = (buf.data.astype(np.float64) for buf in io.buffers[:3])
        return [(a @ b + bias).astype(np.float32)]

    def compare(self, shape: Mapping[str, int], io: KernelIO, name: str, got: np.ndarray,
                want: np.ndarray) -> str | None:
        a, b, bias = (buf.data for buf in io.buffers[:3])
        exact = a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64)
        bad = ~(np.abs(got.astype(np.float64) - exact) <= tolerance(a, b, bias))  # NaN in got counts as wrong
        return describe_mismatch(name, bad, got, want, "outside the tolerance 2*gamma_(K+1)*(|A||B|+|bias|)")

    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        m, n, k = shape["m"], shape["n"], shape["k"]
        tm, tn = int(config["tile_m"]), int(config["tile_n"])
        vector = str(config["vector"])
        lanes = LANES[vector]  # the path's own template variables
        blocks = blocking(shape, config)
        return dict(m=m, n=n, k=k, tm=tm, tn=tn, vector=vector, lanes=lanes, nv=tn // lanes if lanes > 1 else 0,
                    a_chunks=lane_chunks(tm),
                    kc=blocks["kc"], mc=blocks["mc"], nc=blocks["nc"], uk=int(config["unroll_k"]),
                    pack_a=config["pack"] == "ab", pack_b=config["pack"] in ("b", "ab"),
                    scratch=scratch_bytes(shape, config), tolerance_factor=TOLERANCE_FACTOR)

    def render_naive(self, target: Target, shape: Mapping[str, int], compiler: str, cflags: tuple[str, ...]) -> RenderedKernel:
        """The plain loop nest, for benchmarks: what tuned variants are compared against."""
        fn = self.function_name(shape)
        source = render("matmul_f32_naive.c.j2", dict(fn=fn, header="kernel.h", **shape))
        return RenderedKernel(source=source, function=fn, declaration=self.declaration(shape, fn=fn),
                              compiler=compiler, cflags=cflags)
