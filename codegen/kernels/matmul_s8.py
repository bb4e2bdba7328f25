"""matmul_s8: int8 A[MxK] x int8 B[KxN] -> int8 C[MxN], int32 accumulation, per-tensor
requantisation (TFLite / CMSIS-NN convention), bias per output column."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from edgetune.hal import Target
from edgetune.tuner import Config, Constraint, Space, choice, powers_of_two

from ..quant import requantize
from ..render import render
from .base import OPT_LEVELS, Buffer, Kernel, KernelError, KernelIO, RenderedKernel, check_elements
from .dsp import DSP_CFLAGS
from .matmul_s8_avx import AVX2, AVX512, AVX_PATHS, VNNI, rowmajor_width, zero_offset
from .matmul_s8_neon import NEON
from .naive_path import naive_path
from .paths import Rule, VectorPath, anywhere, path_constraints, with_extension, with_vector

MAX_K = 32767  # keeps K * 255 * 255 + |bias| inside int32 (see the template's limits)
LAYOUTS = ("rowmajor", "packed")


QUAD = 4  # columns whose dot products Helium computes together (one int32x4 of sums)
CHUNK = 16  # bytes of one column's K run per Helium load (one VLDRB.8 of 16 lanes)


def pack_weights(b: np.ndarray, bias: np.ndarray, a_zero: int, b_zero: int,
                 group: int = 1, pair: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The packed weights of layout=packed, as the exported `<fn>_pack()` computes them in C:
    b_packed = B transposed (N x K, int8), col_term[n] = bias[n] - a_zero * sum_k b[k][n]
    + K * a_zero * b_zero (int32). With them the kernel computes
    sum_k (a - a_zero)(b - b_zero) + bias = dot(a_row, b_col) - b_zero * sum_k a + col_term.
    The kernel adds the three terms modulo 2^32, so col_term is kept modulo 2^32 too: a bias
    next to the int32 limits stays exact whenever the true accumulator fits in int32.

    group > 1 (the Helium path, group = min(tile_n, 4), a quad of columns computed together):
    the columns of each block of `group` take turns every 16 elements of K (column 0's k 0-15, column 1's k 0-15, ..., column 0's
    k 16-31, ...; a last block narrower than `group` and a last chunk shorter than 16 the
    same way), so a quad's dot products read one stream with one pointer: one register for
    all of its columns instead of one each. group=1 is B transposed.

    pair (Helium blocks of two quads or more, pack_pairs): first, in each whole group of eight
    columns, the even columns go before the odd ones (columns 0 2 4 6 1 3 5 7), in the stream
    and in col_term alike, so two quads narrow into one int16x8 with column j in lane j."""
    k, n = b.shape
    col_term = (bias.astype(np.int64) - a_zero * b.astype(np.int64).sum(axis=0) + k * a_zero * b_zero)
    wrapped = (col_term & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    transposed = np.ascontiguousarray(b.T).astype(np.int8)
    if pair:
        order = paired_order(n)
        transposed, wrapped = np.ascontiguousarray(transposed[order]), np.ascontiguousarray(wrapped[order])
    if group == 1:
        return transposed, wrapped
    stream = [transposed[n0:n0 + group, k0:k0 + CHUNK].ravel()
              for n0 in range(0, n, group) for k0 in range(0, k, CHUNK)]
    return np.concatenate(stream).reshape(n, k), wrapped


PAIRED = (0, 2, 4, 6, 1, 3, 5, 7)  # a group of eight columns as two quads: evens, then odds


def paired_order(n: int) -> np.ndarray:
    """The columns in pack_weights(..., pair=True) order: position p holds column order[p]."""
    order = np.arange(n)
    for g in range(0, n - n % 8, 8):
        order[g:g + 8] = [g + j for j in PAIRED]
    return order


def pack_pairs(config: Config) -> bool:
    """Helium blocks of two quads or more narrow them in pairs (pack_weights' pair)."""
    return config["layout"] == "packed" and config["vector"] == "mve" and int(config["tile_n"]) >= 2 * QUAD


def pack_group(config: Config) -> int:
    """How many columns take turns in the packed stream (pack_weights' group)."""
    if config["layout"] == "packed" and config["vector"] == "mve":
        return min(int(config["tile_n"]), QUAD)  # Helium computes a block a quad of columns at a time
    return 1


def quads(config: Mapping) -> int:
    return (int(config["tile_n"]) + QUAD - 1) // QUAD


def live_quads(config: Mapping) -> int:
    """Quads of a Helium packed block whose sums stay live while the next quad's dot products
    run: all before it, or (blocks narrowing pairs) the first quad of the pair."""
    return 1 if int(config["tile_n"]) >= 2 * QUAD else quads(config) - 1


def plain_template(config: Config) -> str:
    """Plain C and MVE share one template per layout."""
    return "matmul_s8_packed.c.j2" if config["layout"] == "packed" else "matmul_s8.c.j2"


def plain_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    return [("plain C on packed weights leaves the k loop to the compiler (unroll_k=1)",
             lambda c: c["layout"] != "packed" or c["unroll_k"] == 1, ("layout", "unroll_k"))]


def mve_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    unit = target.vector_unit("mve")
    lanes = unit.lanes_for("int32")
    return [
        (f"MVE row-major tile_n must be a multiple of {lanes} int32 lanes",
         lambda c: c["layout"] != "rowmajor" or c["tile_n"] % lanes == 0, ("layout", "tile_n")),
        # Packed: a block is computed a quad of columns at a time; while a quad's dot
        # products run, one Q register per row of A, two for the stream of B and the sums of
        # the quads done are live (in blocks of 8+ columns only the pair's first quad: each
        # pair is stored before the next starts), and the quad's tile_m x 4 sums accumulate
        # in core registers.
        (f"MVE packed tile needs tile_m * (quads done and live) + tile_m + 2 <= {unit.registers} Q registers and "
         f"tile_m * min(tile_n, 4) <= 8 accumulators",
         lambda c: c["layout"] != "packed" or (c["tile_m"] * live_quads(c) + c["tile_m"] + 2 <= unit.registers
                                               and c["tile_m"] * min(c["tile_n"], QUAD) <= 8),
         ("layout", "tile_m", "tile_n")),
        ("packed MVE unrolls 16-element steps: 16 * unroll_k must not exceed k",
         lambda c: c["layout"] != "packed" or c["unroll_k"] == 1 or 16 * c["unroll_k"] <= shape["k"],
         ("layout", "unroll_k")),
    ]


def dsp_template(config: Config) -> str:
    return "matmul_s8_dsp.c.j2" if config["layout"] == "packed" else "matmul_s8_dsp_rowmajor.c.j2"


def dsp_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    """Where vector="dsp" (matmul_s8_dsp.c.j2 on packed weights, matmul_s8_dsp_rowmajor.c.j2
    on row-major ones) applies: accumulators and operand pairs live in the 13 usable core
    registers, and unrolling takes whole steps of 4 along K."""
    return [
        ("DSP tile needs tile_m * tile_n <= 8 int32 accumulators in core registers",
         lambda c: c["tile_m"] * c["tile_n"] <= 8, ("tile_m", "tile_n")),
        ("DSP unrolls 4-element steps: 4 * unroll_k must not exceed k",
         lambda c: c["unroll_k"] == 1 or 4 * c["unroll_k"] <= shape["k"], ("unroll_k",)),
    ]


# The vector paths of matmul_s8, in the order of the `vector` parameter's values.
PATHS = (
    VectorPath("c", anywhere, plain_template, plain_rules),
    VectorPath("mve", with_vector("mve"), plain_template, mve_rules),
    NEON,
    VectorPath("dsp", with_extension("dsp"), dsp_template, dsp_rules, cflags=DSP_CFLAGS),
    AVX2,
    AVX512,
    *VNNI,
    naive_path("matmul_s8_naive.c.j2", dict(tile_m=1, tile_n=1, unroll_k=1, layout="rowmajor")),
)


class MatmulS8(Kernel):
    name = "matmul_s8"
    # v2: the `layout` parameter (weights packed at export time); v3: Helium's packed stream;
    # v4: Helium blocks of 8+ columns pack each group of eight evens first (narrowed in pairs);
    # v5: tuned on TFLite's conventions (tuning_edge: b_zero 0, negative shifts), so a v4
    # trial, measured on drawn zero points, is never mixed with a v5 one
    version = 5
    tuning_edge = "tflite"
    shape_keys = ("m", "n", "k")
    description = "int8 matrix multiply, int32 accumulation, requantised to int8 (fully connected layers)"
    template = "matmul_s8.c.j2"
    paths = PATHS

    def check_shape(self, shape: dict[str, int]) -> None:
        if shape["k"] > MAX_K:
            raise KernelError(f"shape: k={shape['k']} exceeds {MAX_K} (int32 accumulators would overflow)")
        check_elements(a=shape["m"] * shape["k"], b=shape["k"] * shape["n"], output=shape["m"] * shape["n"])

    def space(self, target: Target, shape: Mapping[str, int]) -> Space:
        paths = self.offered_paths(target)
        constraints = [
            Constraint("tile_m larger than m", lambda c: c["tile_m"] <= shape["m"] or c["tile_m"] == 1, reads=("tile_m",)),
            Constraint("unroll_k larger than k", lambda c: c["unroll_k"] <= shape["k"] or c["unroll_k"] == 1,
                       reads=("unroll_k",)),
            *path_constraints(paths, target, shape),
        ]
        # tile_n beyond the first tile that covers n only repeats that tile.
        # (Row-major MVE and AVX need whole vectors; other tiles may be narrower.)
        widths = {"mve": 4, **{name: rowmajor_width(name) for name in AVX_PATHS}}
        cover = {width: min(t for t in (1, 2, 4, 8, 16, 32) if t >= max(width, min(shape["n"], 32)))
                 for width in (1, *widths.values())}
        constraints.append(Constraint("tile_n larger than needed to cover n", lambda c: c["tile_n"] <= cover[
            widths.get(c["vector"], 1) if c["layout"] == "rowmajor" else 1], reads=("tile_n", "vector", "layout")))
        vectors = [path.name for path in paths]
        params = [
            powers_of_two("tile_m", 1, 8, "rows of C computed together"),
            powers_of_two("tile_n", 1, 32, "columns of C computed together"),
            powers_of_two("unroll_k", 1, 8, "unroll factor of the reduction loop"),
            choice("vector", vectors, "plain C (compiler's choice), intrinsics of a vector unit the target has "
                                      "(Helium/MVE, NEON, AVX2, AVX-512, AVX(512)-VNNI) or the Arm DSP extension"),
            choice("layout", LAYOUTS, "weights as given (rowmajor) or packed at export time: B transposed plus "
                                      "per-column terms folding bias and zero points (pack_weights)"),
            choice("compiler", [c.name for c in target.compilers], "compiler from the target description"),
            choice("opt", OPT_LEVELS, "optimisation level"),
        ]
        return Space(params, constraints)

    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator, edge: str = "random") -> KernelIO:
        m, n, k = shape["m"], shape["n"], shape["k"]
        if edge == "extreme":
            # Saturating corners: most negative/positive values and zero points.
            a = rng.choice(np.array([-128, 127], dtype=np.int8), size=(m, k))
            b = rng.choice(np.array([-128, 127], dtype=np.int8), size=(k, n))
            a_zero, b_zero, c_zero = 127, -128, int(rng.choice([-128, 127]))
        else:
            a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
            b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
            a_zero, b_zero, c_zero = (int(x) for x in rng.integers(-128, 128, size=3))
        if edge == "tflite":  # TFLite's int8 weights are symmetric: the b_zero == 0 branch (TFLITE_CONVENTION)
            b_zero = 0
        bias = rng.integers(-(1 << 16), 1 << 16, size=n, dtype=np.int32)
        # Typical multipliers are normalised to [2^30, 2^31); shifts mostly negative.
        multiplier = int(rng.integers(1 << 30, (1 << 31) - 1))
        shift = (int(rng.integers(-20, 2)) if edge == "random" else int(rng.integers(-20, 0)) if edge == "tflite"
                 else -int(rng.integers(0, 32)))
        return KernelIO(
            buffers=(Buffer("a", a), Buffer("b", b, weight=True), Buffer("bias", bias, weight=True),
                     Buffer("c", np.zeros((m, n), dtype=np.int8), is_output=True)),
            params=(("a_zero", a_zero), ("b_zero", b_zero), ("c_zero", c_zero),
                    ("multiplier", multiplier), ("shift", shift)))

    def deployed_io(self, io: KernelIO, config: Config) -> KernelIO:
        """layout=packed variants take b_packed and col_term in place of b and bias (same
        sizes and types, so the entry point's signature is the same for every variant)."""
        if config["layout"] != "packed":
            return io
        a, b, bias, c = io.buffers
        params = dict(io.params)
        # The VNNI paths read A offset by 128 (u8): the column term takes a_zero + 128 for a_zero.
        a_zero = params["a_zero"] + zero_offset(str(config["vector"]))
        b_packed, col_term = pack_weights(b.data, bias.data, a_zero, params["b_zero"], pack_group(config),
                                            pack_pairs(config))
        return KernelIO(buffers=(a, Buffer("b", b_packed, weight=True), Buffer("bias", col_term, weight=True), c),
                        params=io.params)

    def extra_declarations(self, shape: Mapping[str, int], config: Config, fn: str) -> list[str]:
        if config["layout"] != "packed":
            return []
        return [f"void {fn}_pack(const int8_t *b, const int32_t *bias, int32_t a_zero, int32_t b_zero, "
                "int8_t *b_packed, int32_t *col_term)"]

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        a, b, bias = (buf.data.astype(np.int64) for buf in io.buffers[:3])
        p = dict(io.params)
        acc = (a - p["a_zero"]) @ (b - p["b_zero"]) + bias
        return [requantize(acc, p["multiplier"], p["shift"], p["c_zero"])]

    def render_naive(self, target: Target, shape: Mapping[str, int], compiler: str, cflags: tuple[str, ...]) -> RenderedKernel:
        """The plain triple loop, for benchmarks: what tuned variants are compared against."""
        fn = self.function_name(shape)
        source = render("matmul_s8_naive.c.j2", dict(fn=fn, prefix=fn, header="kernel.h", **shape))
        return RenderedKernel(source=source, function=fn, declaration=self.declaration(shape, fn=fn),
                              compiler=compiler, cflags=cflags)

    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        m, n, k = shape["m"], shape["n"], shape["k"]
        tm, tn, uk = int(config["tile_m"]), int(config["tile_n"]), int(config["unroll_k"])
        m_full, n_full = m - m % tm, n - n % tn
        bands = []
        if m_full:
            bands.append({"start": 0, "stop": m_full, "rows": tm})
        if m % tm:
            bands.append({"start": m_full, "stop": m, "rows": m % tm})
        variables = dict(m=m, n=n, k=k, tm=tm, tn=tn, uk=uk, tv=tn // 4, vector=config["vector"],
                         bands=bands, n_full=n_full, n_rem=n % tn, m_rem=m % tm, layout=config["layout"],
                         group=pack_group(config), pair=pack_pairs(config), chunk=CHUNK, quads=quads(config))
        return variables
