"""conv2d_s8: int8 2-D convolution (NHWC, batch 1) with per-output-channel requantisation,
TFLite's geometry (per-side padding, per-axis stride and dilation), in the TFLite / CMSIS-NN
int8 scheme (see convolution.py)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from edgetune.hal import Target
from edgetune.tuner import Config, Constraint, Space, choice, powers_of_two

from ..quant import requantize_per_channel
from ..render import render
from .base import OPT_LEVELS, Buffer, Kernel, KernelError, KernelIO, RenderedKernel
from .conv2d_s8_avx import AVX2, AVX512, VNNI
from .conv2d_s8_dsp import DSP
from .conv2d_s8_neon import NEON
from .convolution import (GEOMETRY_KEYS, MAX_REDUCTION, PAD_KEYS, check_elements, expand_geometry, geometry_of,
                          geometry_text, int8_tensor, quant_params, scratch_capacity, stack_budget)
from .matmul_s8_avx import AVX_PATHS, VNNI_PATHS, zero_offset
from .naive_path import naive_path
from .paths import Rule, VectorPath, anywhere, path_constraints, with_vector
from .weight_packing import Packing, pack_declaration, pack_rows, with_packed_weights

IM2COL_PIXELS = (1, 2, 4, 8, 16, 32, 64)
LAYOUTS = ("ohwi", "packed")
# The paths with a packed form: conv2d_s8_packed.c.j2's (c, mve), conv2d_s8_dsp.c.j2's,
# conv2d_s8_neon.c.j2's and the AVX ones (conv2d_s8_avx.c.j2).
PACKED_VECTORS = ("c", "mve", "dsp", "neon", *AVX_PATHS, *VNNI_PATHS)
HELIUM_BYTES = 16  # int8 lanes of one Helium Q register


def packing(kh: int, kw: int, cin: int, config: Mapping) -> Packing:
    """How layout=packed lays the weights out for a configuration (weight_packing.Packing):
    plain C and NEON read each output channel's row as it is (contiguous dot products);
    Helium interleaves the tile_oc channels of a tile in 16-byte chunks, along all of K for
    im2col, tap by tap (segments of cin) for the direct loop. The DSP path (conv2d_s8_dsp.c.j2)
    and the AVX ones (conv2d_s8_avx.c.j2) read whole rows like plain C."""
    k = kh * kw * cin
    if config["vector"] != "mve":
        return Packing(block=1, segment=k, lanes=HELIUM_BYTES)
    return Packing(block=int(config["tile_oc"]), segment=k if config["algo"] == "im2col" else cin,
                   lanes=HELIUM_BYTES)


def pack_weights(weights: np.ndarray, bias: np.ndarray, in_zero: int, config: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """OHWI weights [cout][kh][kw][cin] -> the packed weights (same shape and size, reordered) and the
    per-output-channel terms bias - in_zero * sum(w) of layout=packed, as the exported
    `<fn>_pack()` computes them in C. The VNNI paths read the input offset by 128 (u8): their
    term takes in_zero + 128 for in_zero."""
    rows = weights.reshape(weights.shape[0], -1)
    zero = in_zero + zero_offset(str(config["vector"]))
    packed, terms = pack_rows(rows, bias, zero, packing(*weights.shape[1:], config))
    return packed.reshape(weights.shape), terms


def plain_template(config: Config) -> str:
    """Plain C and Helium share one template per layout."""
    return "conv2d_s8_packed.c.j2" if config["layout"] == "packed" else "conv2d_s8.c.j2"


def plain_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    return [("plain C on packed weights leaves the dot products to the compiler (unroll=1)",
             lambda c: c["layout"] == "ohwi" or c["unroll"] == 1, ("layout", "unroll"))]


def mve_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    # One scalar accumulator per pixel and channel of a tile, and one Q register per
    # pixel chunk and weight chunk in flight (8 Q registers on Helium).
    return [("packed Helium tile needs tile_p + tile_oc <= 8 Q registers and tile_p * tile_oc <= 8 accumulators",
             lambda c: c["layout"] == "ohwi" or (c["tile_p"] + c["tile_oc"] <= 8 and c["tile_p"] * c["tile_oc"] <= 8),
             ("layout", "tile_p", "tile_oc"))]


# The vector paths of conv2d_s8, in the order of the `vector` parameter's values.
PATHS = (
    VectorPath("c", anywhere, plain_template, plain_rules),
    VectorPath("mve", with_vector("mve"), plain_template, mve_rules),
    AVX2,
    AVX512,
    *VNNI,
    DSP,
    NEON,
    naive_path("conv2d_s8_naive.c.j2", dict(algo="direct", im2col_pixels=1, tile_p=1, tile_oc=1, unroll=1,
                                            weight_sums="in_loop", layout="ohwi", fusion="fused")),
)


# `starting_points` on a target with Helium: packed weights, the fused epilogue, clang -O3, and
# three tilings that were the fastest measured on the MLPerf Tiny layers (M55, bench/resnet8_layers.py,
# bench/RESULTS.md). The first is ResNet-8's first convolution (cin=3): 194,714 instructions,
# where a default-budget tune of 60 trials on that layer had shipped 255,330 without reaching it.
HELIUM_START = dict(vector="mve", layout="packed", weight_sums="in_loop", fusion="fused", unroll=1,
                    compiler="clang", opt="O3")
HELIUM_TILINGS = (
    dict(algo="im2col", im2col_pixels=32, tile_p=4, tile_oc=1),  # narrow reductions: the first layers
    dict(algo="im2col", im2col_pixels=64, tile_p=2, tile_oc=3),  # 3x3 over 16 channels or more
    dict(algo="direct", im2col_pixels=1, tile_p=4, tile_oc=2),   # 1x1: pixel tiles on the direct loop
)


def tile_schedule(total: int, tile: int) -> tuple[int, int]:
    """(extent covered by full tiles, size of the remainder tile)."""
    return total - total % tile, total % tile


class Conv2dS8(Kernel):
    name = "conv2d_s8"
    # v2: the `layout` parameter (weights packed at export time); v3: TFLite's geometry
    # (per-side padding, per-axis stride and dilation).
    # v4: tuned on TFLite's quantisation (tuning_edge, convolution.TFLITE_CONVENTION), so a
    # v3 trial, measured on drawn shifts and clamps, is never mixed with a v4 one.
    version = 4
    tuning_edge = "tflite"
    shape_keys = ("h", "w", "cin", "cout", "kh", "kw", *GEOMETRY_KEYS)
    zero_allowed = PAD_KEYS
    description = ("int8 NHWC convolution, OHWI weights, per-channel requantisation, TFLite geometry (per-side "
                   "padding, per-axis stride/dilation), activation clamp; fused or unfused epilogue")
    template = "conv2d_s8.c.j2"
    paths = PATHS

    def example_shape(self) -> str:
        return "h=16,w=16,cin=32,cout=32,kh=3,kw=3,stride=1,dilation=1,pad=same"

    def expand_shape(self, items: dict[str, object]) -> dict[str, object]:
        return expand_geometry(items)

    def starting_points(self, target: Target, shape: Mapping[str, int]) -> tuple[dict, ...]:
        if "mve" not in (path.name for path in self.offered_paths(target)):
            return ()
        return tuple({**HELIUM_START, **tiling} for tiling in HELIUM_TILINGS)

    def check_shape(self, shape: dict[str, int]) -> None:
        geo = geometry_of(shape)
        geo.check()
        k = shape["kh"] * shape["kw"] * shape["cin"]
        if k > MAX_REDUCTION:
            raise KernelError(f"shape: kh*kw*cin = {k} exceeds {MAX_REDUCTION} (int32 accumulators could overflow)")
        check_elements(input=shape["h"] * shape["w"] * shape["cin"], weights=shape["cout"] * k,
                       output=geo.oh * geo.ow * shape["cout"])

    @staticmethod
    def scratch_bytes(shape: Mapping[str, int], config: Mapping) -> int:
        """Static memory a configuration needs: the im2col buffer and the unfused intermediate."""
        geo = geometry_of(shape)
        k = shape["kh"] * shape["kw"] * shape["cin"]
        col = config["im2col_pixels"] * k if config["algo"] == "im2col" else 0
        acc = geo.oh * geo.ow * shape["cout"] * 4 if config["fusion"] == "unfused" else 0
        sums = shape["cout"] * 4 if config["weight_sums"] == "precomputed" else 0
        zero_row = shape["cin"] if Conv2dS8.reads_zero_row(shape, config) else 0
        return col + acc + sums + zero_row

    scratch_reads = ("im2col_pixels", "algo", "fusion", "weight_sums", "layout", "vector")

    def scratch_estimate(self, shape: Mapping[str, int], config: Mapping) -> int | None:
        return self.scratch_bytes(shape, config)

    @staticmethod
    def reads_zero_row(shape: Mapping[str, int], config: Mapping) -> bool:
        """The packed (and every DSP) direct loop reads taps in the padding from a row of in_zero."""
        folded = config["layout"] == "packed" or config["vector"] == "dsp"
        return folded and config["algo"] == "direct" and geometry_of(shape).padded

    def space(self, target: Target, shape: Mapping[str, int]) -> Space:
        geo = geometry_of(shape)
        npix, cout = geo.oh * geo.ow, shape["cout"]
        capacity, stack = scratch_capacity(target), stack_budget(target)
        paths = self.offered_paths(target)
        vectors = [path.name for path in paths]
        # Values beyond the first one that covers a dimension only repeat that tile.
        covering_p = min(v for v in IM2COL_PIXELS if v >= min(npix, IM2COL_PIXELS[-1]))
        pointwise_taps = shape["kh"] == 1 and shape["kw"] == 1
        constraints = [
            Constraint("im2col_pixels applies to algo=im2col only",
                       lambda c: c["algo"] == "im2col" or c["im2col_pixels"] == IM2COL_PIXELS[0],
                       reads=("algo", "im2col_pixels")),
            Constraint("im2col_pixels larger than needed to cover the output", lambda c: c["im2col_pixels"] <= covering_p,
                       reads=("im2col_pixels",)),
            Constraint("im2col_pixels must be a multiple of tile_p",
                       lambda c: c["algo"] == "direct" or c["im2col_pixels"] % c["tile_p"] == 0,
                       reads=("algo", "im2col_pixels", "tile_p")),
            # A window of several taps reads each tile pixel's rows tap by tap with bounds checks:
            # measured slower than one pixel at a time (ResNet-8's 3x3 16->16: 1,191,057 for 2 x 4
            # against 964,749 for 1 x 4), so pixel tiles on the direct loop are 1x1 kernels' only.
            Constraint("tile_p on algo=direct needs Helium on packed weights and a 1x1 kernel (the other direct loops "
                       "compute one pixel at a time)",
                       lambda c: c["algo"] == "im2col" or c["tile_p"] == 1
                       or (pointwise_taps and c["vector"] == "mve" and c["layout"] == "packed"),
                       reads=("algo", "tile_p", "vector", "layout")),
            Constraint("tile_p larger than needed to cover the output pixels", lambda c: c["tile_p"] <= covering_p,
                       reads=("tile_p",)),
            Constraint("tile_oc larger than cout", lambda c: c["tile_oc"] <= cout or c["tile_oc"] == 1,
                       reads=("tile_oc",)),
            Constraint("unroll applies to the plain C path only", lambda c: c["vector"] == "c" or c["unroll"] == 1,
                       reads=("vector", "unroll")),
            Constraint("weight_sums applies to the MVE im2col path only",
                       lambda c: c["weight_sums"] == "in_loop" or (c["vector"] == "mve" and c["algo"] == "im2col"),
                       reads=("weight_sums", "vector", "algo")),
            Constraint(f"layout=packed has the {'/'.join(PACKED_VECTORS)} paths only",
                       lambda c: c["layout"] == "ohwi" or c["vector"] in PACKED_VECTORS, reads=("layout", "vector")),
            Constraint("weight_sums applies to layout=ohwi only (packed weights fold them into the term)",
                       lambda c: c["layout"] == "ohwi" or c["weight_sums"] == "in_loop", reads=("layout", "weight_sums")),
            Constraint(f"static buffers exceed the {capacity} bytes of scratch memory on {target.name}",
                       lambda c: self.scratch_bytes(shape, c) <= capacity,
                       reads=self.scratch_reads),
            Constraint(f"the fused row tile (tile_p * cout int32) exceeds {stack} bytes of stack on {target.name}",
                       lambda c: (c["algo"] == "direct" and c["layout"] == "ohwi" and c["vector"] != "mve")
                       or c["fusion"] == "unfused" or c["tile_p"] * cout * 4 <= stack,
                       reads=("algo", "layout", "vector", "fusion", "tile_p")),
            *path_constraints(paths, target, shape),
        ]
        params = [
            choice("algo", ["direct", "im2col"], "direct loop over taps, or a partial im2col buffer and a matrix product"),
            choice("im2col_pixels", IM2COL_PIXELS, "output pixels whose patches the im2col buffer holds"),
            powers_of_two("tile_p", 1, 4, "output pixels computed together (shares weight loads)"),
            choice("tile_oc", [1, 2, 3, 4], "output channels computed together (shares input loads)"),
            powers_of_two("unroll", 1, 4, "unroll factor of the reduction loop (plain C)"),
            choice("vector", vectors, "plain C (compiler's choice), Helium/MVE, NEON or AVX2/AVX-512/AVX(512)-VNNI intrinsics, "
                                      "or the Arm DSP extension"),
            choice("weight_sums", ["in_loop", "precomputed"], "MVE im2col: zero-point correction from weight sums "
                                                               "taken in the inner loop, or once per call into .bss"),
            choice("layout", LAYOUTS, "weights as given (OHWI) or packed at export time: reordered for the inner "
                                      "loop, bias and input zero point folded into a term per channel (pack_weights)"),
            choice("fusion", ["fused", "unfused"], "bias+requantise+clamp in the conv loop, or a second pass over "
                                                   "an int32 intermediate in memory"),
            choice("compiler", [c.name for c in target.compilers], "compiler from the target description"),
            choice("opt", OPT_LEVELS, "optimisation level"),
        ]
        return Space(params, constraints)

    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator, edge: str = "random") -> KernelIO:
        geo = geometry_of(shape)
        cin, cout = shape["cin"], shape["cout"]
        x = int8_tensor((shape["h"], shape["w"], cin), rng, edge)
        weights = int8_tensor((cout, shape["kh"], shape["kw"], cin), rng, edge)
        quant, params = quant_params(cout, rng, edge)
        return KernelIO(buffers=(Buffer("input", x), Buffer("weights", weights, weight=True), *quant,
                                 Buffer("output", np.zeros((geo.oh, geo.ow, cout), dtype=np.int8), is_output=True)),
                        params=params)

    def deployed_io(self, io: KernelIO, config: Config) -> KernelIO:
        """layout=packed variants take the packed weights and terms in place of the weights and bias."""
        if config["layout"] != "packed":
            return io
        weights, bias = io.buffers[1], io.buffers[2]
        return with_packed_weights(io, *pack_weights(weights.data, bias.data, dict(io.params)["in_zero"], config))

    def in_place_mode(self, shape: Mapping[str, int], config: Config) -> str:
        """Helium variants (conv2d_s8.c.j2, conv2d_s8_packed.c.j2 on the driver) write each
        result to the driver's sink. Unfused: the first pass reads the whole input into raw
        int32 accumulators, the second writes the output from them alone: "start", whatever
        the sizes. Fused, on a pointwise layer (1x1, stride 1, no padding): a pixel's (or an
        im2col chunk's) output is written after its input is read, in pixel order. With
        cout <= cin, pixel p's output ends at (p + 1) * cout <= (p + 1) * cin, input already
        read: "start". With cout > cin, ending where the input ends puts the input
        npix * (cout - cin) bytes after the output's start, and pixel p's output ends at
        (p + 1) * cout <= npix * (cout - cin) + (p + 1) * cin, again input already read: "end"."""
        if config["vector"] != "mve":
            return ""
        if config["fusion"] == "unfused":
            return "start"
        geo = geometry_of(shape)
        if (geo.kh, geo.kw, geo.stride_h, geo.stride_w) != (1, 1, 1, 1) or geo.padded:
            return "lag" if self.in_place_lag(shape, config) else ""
        return "start" if shape["cout"] <= shape["cin"] else "end"

    def in_place_lag(self, shape: Mapping[str, int], config: Config) -> int:
        """A fused Helium convolution of stride 1 and dilation 1 that keeps the input's size
        and channels (a ResNet block's 3x3) writes the output pixel by pixel, in order, each
        after every read of its window (direct: the pixel's accumulators, requantised once all
        channels are summed; im2col: a chunk's windows copied before any of its pixels is
        computed). Once pixels before q are written, the reads still to come start at the
        window of q, pad_top rows and pad_left columns back: pixel q - pad_top * w - pad_left.
        An output starting (pad_top * w + pad_left + 1) pixels before the input writes pixel
        p over input pixel p - pad_top * w - pad_left - 1, always behind them (one pixel more
        than the window's start, so a store never meets a byte of the window it is summing)."""
        geo = geometry_of(shape)
        if config["vector"] != "mve" or config["fusion"] != "fused" or shape["cin"] != shape["cout"] or \
                (geo.stride_h, geo.stride_w, geo.dilation_h, geo.dilation_w) != (1, 1, 1, 1) or \
                (geo.oh, geo.ow) != (shape["h"], shape["w"]) or (geo.kh, geo.kw) == (1, 1):
            return 0
        return (shape["pad_top"] * shape["w"] + shape["pad_left"] + 1) * shape["cin"]

    def extra_declarations(self, shape: Mapping[str, int], config: Config, fn: str) -> list[str]:
        return [pack_declaration(fn)] if config["layout"] == "packed" else []

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        geo = geometry_of(shape)
        x, w, bias, mult, shift = (buf.data for buf in io.buffers[:5])
        p = dict(io.params)
        patches = geo.patches(x.astype(np.int64), p["in_zero"]) - p["in_zero"]  # padding -> 0
        acc = np.einsum("yxabc,oabc->yxo", patches, w.astype(np.int64)) + bias.astype(np.int64)
        return [requantize_per_channel(acc, mult, shift, p["out_zero"], p["act_min"], p["act_max"])]

    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        geo = geometry_of(shape)
        npix, k = geo.oh * geo.ow, shape["kh"] * shape["kw"] * shape["cin"]
        ip, tp, toc = int(config["im2col_pixels"]), int(config["tile_p"]), int(config["tile_oc"])
        oc_full, oc_rem = tile_schedule(shape["cout"], toc)
        last_chunk = npix % ip
        last_full, last_rem = tile_schedule(last_chunk, tp)
        pack = packing(shape["kh"], shape["kw"], shape["cin"], config)
        variables = dict(**shape, layout=config["layout"], oh=geo.oh, ow=geo.ow, k=k, npix=npix, algo=config["algo"], ip=ip, tp=tp, toc=toc,
                         padded=geo.padded, geometry=geometry_text(shape),
                         block=pack.block, segment=pack.segment, zero_row=self.reads_zero_row(shape, config),
                         unroll=int(config["unroll"]), vector=config["vector"], fusion=config["fusion"],
                         precomputed_wsum=config["weight_sums"] == "precomputed",
                         oc_full=oc_full, oc_rem=oc_rem, full_chunks=npix // ip, last_chunk=last_chunk,
                         last_full=last_full, last_rem=last_rem, scratch_bytes=self.scratch_bytes(shape, config),
                         # Which requantisation helpers the variant calls (clang rejects unused ones).
                         scalar_rq=config["vector"] == "c", vector_rq=config["vector"] == "mve")
        if config["layout"] == "packed":  # every packed variant requantises whole rows (requant_rows)
            variables.update(scalar_rq=config["vector"] == "c", vector_rq=config["vector"] == "mve")
        return variables

    def render_naive(self, target: Target, shape: Mapping[str, int], compiler: str, cflags: tuple[str, ...]) -> RenderedKernel:
        """The plain loop nest, for benchmarks: what tuned variants are compared against."""
        geo = geometry_of(shape)
        fn = self.function_name(shape)
        source = render("conv2d_s8_naive.c.j2", dict(fn=fn, prefix=fn, header="kernel.h", oh=geo.oh, ow=geo.ow,
                                                     geometry=geometry_text(shape), **shape))
        return RenderedKernel(source=source, function=fn, declaration=self.declaration(shape, fn=fn),
                              compiler=compiler, cflags=cflags)
