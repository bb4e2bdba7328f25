"""dwconv2d_s8: int8 depthwise convolution (NHWC, batch 1) with TFLite's depth multiplier
(output channel o reads input channel o // mult), per-output-channel requantisation and
TFLite's geometry: per-side padding, per-axis stride and dilation (scheme: see convolution.py)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from edgetune.hal import Target
from edgetune.tuner import Config, Constraint, Space, choice, powers_of_two

from ..quant import requantize_per_channel
from ..render import render
from . import dwconv2d_s8_neon
from .dwconv2d_s8_neon import NEON
from .dwconv2d_s8_pixels import MVE_PIXELS
from .dwconv2d_s8_pixels import scratch_bytes as pixel_scratch_bytes
from .naive_path import naive_path
from .paths import Rule, VectorPath, anywhere, path_constraints, with_vector
from .base import OPT_LEVELS, Buffer, Kernel, KernelError, KernelIO, RenderedKernel
from .conv2d_s8 import tile_schedule
from .convolution import (GEOMETRY_KEYS, MAX_REDUCTION, PAD_KEYS, check_elements, expand_geometry, geometry_of,
                          geometry_text, int8_tensor, quant_params, scratch_capacity)
from .weight_packing import Packing, pack_declaration, pack_rows, with_packed_weights

LAYOUTS = ("hwc", "packed")


def pack_weights(weights: np.ndarray, bias: np.ndarray, in_zero: int, tile_c: int) -> tuple[np.ndarray, np.ndarray]:
    """[kh][kw][cout] weights (cout = c * mult) -> layout=packed: the weights of each tile_c
    output channel tile tap after tap ([cout / tile_c][kh][kw][tile_c], same size, returned in
    the original shape) and the per-channel terms bias - in_zero * sum(w), as the exported
    `<fn>_pack()` computes them."""
    rows = weights.reshape(-1, weights.shape[-1]).T  # one row of kh*kw taps per channel
    packed, terms = pack_rows(rows, bias, in_zero, Packing(block=tile_c, segment=1, lanes=16))
    return packed.reshape(weights.shape), terms

def padded_extent(shape: Mapping[str, int]) -> tuple[int, int]:
    """Rows and columns of the padded input that a 3x3 kernel's windows reach (taps=padded3x3)."""
    geo = geometry_of(shape)
    return ((geo.oh - 1) * shape["stride_h"] + 2 * shape["dilation_h"] + 1,
            (geo.ow - 1) * shape["stride_w"] + 2 * shape["dilation_w"] + 1)


def padded_copy_bytes(shape: Mapping[str, int]) -> int:
    rows, cols = padded_extent(shape)
    return rows * cols * shape["c"]


AVX2_LANES = 8  # int32 lanes of a 256-bit register: channels per vector on the AVX2 path


def channels_per_step(vector: str) -> int:
    """Channels one vector step of a path covers (plain C: MVE's four, the smallest tile_c)."""
    return {"avx2": AVX2_LANES, "neon": dwconv2d_s8_neon.LANES}.get(vector, 4)


def mve_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    unit = target.vector_unit("mve")
    lanes = unit.lanes_for("int32")
    # Accumulators plus one input and one weight vector must fit the Q registers.
    return [(f"MVE tile_p * tile_c / {lanes} accumulators + 2 exceed {unit.registers} vector registers",
             lambda cfg: cfg["tile_p"] * cfg["tile_c"] // lanes + 2 <= unit.registers, ("tile_p", "tile_c"))]


def avx2_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    registers = target.vector_unit("avx2").registers
    # Accumulators, the bias vectors they start from, one input and one weight vector.
    return [(f"AVX2 tile_c must be a multiple of {AVX2_LANES} and (tile_p + 1) * tile_c / {AVX2_LANES} + 2 "
             f"vectors must fit {registers} registers",
             lambda cfg: cfg["tile_c"] % AVX2_LANES == 0 and (cfg["tile_p"] + 1) * cfg["tile_c"] // AVX2_LANES + 2 <= registers,
             ("tile_c", "tile_p")),
            ("the AVX2 path reads the weights as given (layout=hwc)", lambda cfg: cfg["layout"] != "packed", ("layout",))]


# The vector paths of dwconv2d_s8, in the order of the `vector` parameter's values; plain C
# and Helium with channels across the lanes share dwconv2d_s8.c.j2; mve_pixels puts output
# pixels across the lanes (dwconv2d_s8_pixels.py).
PATHS = (
    VectorPath("c", anywhere, "dwconv2d_s8.c.j2"),
    VectorPath("mve", with_vector("mve"), "dwconv2d_s8.c.j2", mve_rules),
    NEON,
    VectorPath("avx2", with_vector("avx2"), "dwconv2d_s8_avx2.c.j2", avx2_rules),
    MVE_PIXELS,
    naive_path("dwconv2d_s8_naive.c.j2", dict(tile_c=4, tile_p=1, taps="loop", layout="hwc")),
)


# The default configuration where Helium is offered: the space's first legal point is what an
# untuned layer runs and what `model tune` measures first (edgetune.model.module.default_config), so
# the values are ordered to make it a fast one: output pixels across the lanes, the tap loop
# (the plain loop nest's other values, so its seed stays a point of the space), clang -O3.
# DS-CNN's depthwise 3x3 (25x5x64) on the M55: 82,575 instructions, the best of its space
# measured here; a default-budget tune had stopped at 99,400 without measuring it.
DEFAULT_VECTOR, DEFAULT_COMPILER, DEFAULT_OPT = "mve_pixels", "clang", "O3"


def default_first(target: Target, vectors: list[str]) -> tuple[list[str], list[str], list[str]]:
    """The `vector`, `compiler` and `opt` values in space order: DEFAULT_* first when the
    target offers mve_pixels (and the compiler), the table's and target's order otherwise."""
    compilers, opts = [cc.name for cc in target.compilers], list(OPT_LEVELS)
    if DEFAULT_VECTOR not in vectors:
        return vectors, compilers, opts
    def first(values: list[str], value: str) -> list[str]:
        return [value, *(v for v in values if v != value)] if value in values else values
    return first(vectors, DEFAULT_VECTOR), first(compilers, DEFAULT_COMPILER), first(opts, DEFAULT_OPT)


class DwConv2dS8(Kernel):
    name = "dwconv2d_s8"
    # v2: the `layout` parameter (weights packed at export time); v3: TFLite's geometry
    # (per-side padding, per-axis stride and dilation) and depth multiplier.
    # v4: tuned on TFLite's quantisation (tuning_edge, convolution.TFLITE_CONVENTION), so a
    # v3 trial, measured on drawn shifts and clamps, is never mixed with a v4 one.
    version = 4
    tuning_edge = "tflite"
    shape_keys = ("h", "w", "c", "mult", "kh", "kw", *GEOMETRY_KEYS)
    shape_defaults = (("mult", 1),)
    zero_allowed = PAD_KEYS
    description = ("int8 depthwise NHWC convolution, TFLite depth multiplier and geometry (per-side padding, "
                   "per-axis stride/dilation), per-channel requantisation, 3x3 special case")
    template = "dwconv2d_s8.c.j2"
    paths = PATHS

    def example_shape(self) -> str:
        return "h=16,w=16,c=32,mult=1,kh=3,kw=3,stride=1,dilation=1,pad=same"

    def expand_shape(self, items: dict[str, object]) -> dict[str, object]:
        return expand_geometry(items)

    def check_shape(self, shape: dict[str, int]) -> None:
        geo = geometry_of(shape)
        geo.check()
        if shape["kh"] * shape["kw"] > MAX_REDUCTION:
            raise KernelError(f"shape: kh*kw = {shape['kh'] * shape['kw']} exceeds {MAX_REDUCTION} "
                              "(int32 accumulators could overflow)")
        cout = shape["c"] * shape["mult"]
        check_elements(input=shape["h"] * shape["w"] * shape["c"], output=geo.oh * geo.ow * cout,
                       weights=shape["kh"] * shape["kw"] * cout)

    scratch_reads = ("taps", "layout", "vector", "tile_p")

    def scratch_estimate(self, shape: Mapping[str, int], config: Mapping) -> int | None:
        """The padded copy (taps=padded3x3), the row of in_zero (layout=packed on a padded
        layer) or mve_pixels' plane and accumulators."""
        if config["vector"] == "mve_pixels":
            return pixel_scratch_bytes(shape, int(config["tile_p"]))
        padded = config["taps"] == "padded3x3"
        zero_row = config["layout"] == "packed" and geometry_of(shape).padded and not padded
        return (padded_copy_bytes(shape) if padded else 0) + (shape["c"] if zero_row else 0)

    def space(self, target: Target, shape: Mapping[str, int]) -> Space:
        c = shape["c"] * shape["mult"]  # output channels: what the channel tiles cover
        constraints = [
            Constraint("taps=unrolled3x3 and taps=padded3x3 need a 3x3 kernel",
                       lambda cfg: cfg["taps"] == "loop" or (shape["kh"] == 3 and shape["kw"] == 3), reads=("taps",)),
            Constraint("tile_c larger than needed to cover the output channels (c * mult)",
                       lambda cfg: cfg["tile_c"] <= max(channels_per_step(cfg["vector"]), 1 << (c - 1).bit_length()),
                       reads=("tile_c", "vector")),
        ]
        if geometry_of(shape).padded:  # the packed loop reads taps in the padding from a static row of in_zero
            capacity, row = scratch_capacity(target), shape["c"]
            constraints.append(Constraint(f"the packed layout's {row}-byte row of in_zero exceeds the {capacity} bytes "
                                          f"of scratch memory on {target.name}",
                                          lambda cfg: cfg["layout"] != "packed" or row <= capacity, reads=("layout",)))
        padded_bytes, capacity = padded_copy_bytes(shape), scratch_capacity(target)
        constraints.append(Constraint(f"taps=padded3x3: the {padded_bytes}-byte padded copy of the input exceeds the "
                                      f"{capacity} bytes of scratch memory on {target.name}",
                                      lambda cfg: cfg["taps"] != "padded3x3" or padded_bytes <= capacity, reads=("taps",)))
        paths = self.offered_paths(target)
        constraints += path_constraints(paths, target, shape)
        vectors, compilers, opts = default_first(target, [path.name for path in paths])
        params = [
            powers_of_two("tile_c", 4, 16, "channels computed together"),
            powers_of_two("tile_p", 1, 4, "output pixels computed together (share weight loads)"),
            choice("taps", ["loop", "unrolled3x3", "padded3x3"],
                   "tap loop with bounds checks, or (3x3 only) nine unrolled taps without checks inside the input, "
                   "or (3x3 only) the input copied with its padding first, so that every tile runs them unchecked"),
            choice("layout", LAYOUTS, "weights as given ([kh][kw][c * mult]) or packed at export time: each channel tile's "
                                      "taps contiguous, bias and input zero point folded into a term per channel"),
            choice("vector", vectors, "plain C (compiler's choice) or Helium/MVE, NEON or AVX2 intrinsics"),
            choice("compiler", compilers, "compiler from the target description"),
            choice("opt", opts, "optimisation level"),
        ]
        return Space(params, constraints)

    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator, edge: str = "random") -> KernelIO:
        geo = geometry_of(shape)
        cout = shape["c"] * shape["mult"]
        x = int8_tensor((shape["h"], shape["w"], shape["c"]), rng, edge)
        weights = int8_tensor((shape["kh"], shape["kw"], cout), rng, edge)  # TFLite's [1][kh][kw][c * mult]
        quant, params = quant_params(cout, rng, edge)
        return KernelIO(buffers=(Buffer("input", x), Buffer("weights", weights, weight=True), *quant,
                                 Buffer("output", np.zeros((geo.oh, geo.ow, cout), dtype=np.int8), is_output=True)),
                        params=params)

    def deployed_io(self, io: KernelIO, config: Config) -> KernelIO:
        """layout=packed variants take the packed weights and terms in place of the weights and bias."""
        if config["layout"] != "packed":
            return io
        weights, bias = io.buffers[1], io.buffers[2]
        return with_packed_weights(io, *pack_weights(weights.data, bias.data, dict(io.params)["in_zero"], int(config["tile_c"])))

    def in_place_mode(self, shape: Mapping[str, int], config: Config) -> str:
        """"start" for two families, which read all they need before writing over it.
        vector=mve_pixels with mult=1: channel by channel, the channel's input is gathered
        into the plane, then its output channel scattered; output byte (pixel q, channel c)
        is input byte (q, c) of a channel already gathered (q < the input's pixels, the
        channel counts equal), as TinyEngine's in-place depthwise. taps=padded3x3 on the
        driver: the whole input is copied with its padding first, and only the copy is read."""
        if config["vector"] == "mve_pixels":
            geo = geometry_of(shape)
            return "start" if shape["mult"] == 1 and geo.oh * geo.ow <= shape["h"] * shape["w"] else ""
        return "start" if config["taps"] == "padded3x3" else ""

    def extra_declarations(self, shape: Mapping[str, int], config: Config, fn: str) -> list[str]:
        return [pack_declaration(fn)] if config["layout"] == "packed" else []

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        geo = geometry_of(shape)
        x, w, bias, mult, shift = (buf.data for buf in io.buffers[:5])
        p = dict(io.params)
        patches = geo.patches(x.astype(np.int64), p["in_zero"]) - p["in_zero"]  # [oh, ow, kh, kw, c]
        patches = patches[..., np.arange(w.shape[-1]) // shape["mult"]]  # output channel o reads o // mult
        acc = np.einsum("yxabc,abc->yxc", patches, w.astype(np.int64)) + bias.astype(np.int64)
        return [requantize_per_channel(acc, mult, shift, p["out_zero"], p["act_min"], p["act_max"])]

    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        geo = geometry_of(shape)
        npix = geo.oh * geo.ow
        tc, tp = int(config["tile_c"]), int(config["tile_p"])
        cout = shape["c"] * shape["mult"]
        c_full, c_rem = tile_schedule(cout, tc)
        p_full, p_rem = tile_schedule(npix, tp)
        lanes = channels_per_step(config["vector"])  # channels per vector step (MVE: 4 int32 lanes)
        padded_copy = config["taps"] == "padded3x3"
        padded_h, padded_w = padded_extent(shape)
        return dict(**shape, padded_copy=padded_copy, padded_h=padded_h, padded_w=padded_w,
                    left_w=min(shape["pad_left"], padded_w), copied_w=max(0, min(shape["w"], padded_w - shape["pad_left"])), cout=cout, padded=geo.padded, geometry=geometry_text(shape), oh=geo.oh, ow=geo.ow,
                    npix=npix, tc=tc, tv=tc // lanes, tp=tp, vector=config["vector"],
                    unrolled3x3=config["taps"] in ("unrolled3x3", "padded3x3"), packed=config["layout"] == "packed",
                    c_full=c_full, c_rem=c_rem, p_full=p_full, p_rem=p_rem)

    def render_naive(self, target: Target, shape: Mapping[str, int], compiler: str, cflags: tuple[str, ...]) -> RenderedKernel:
        """The plain loop nest, for benchmarks: what tuned variants are compared against."""
        geo = geometry_of(shape)
        fn = self.function_name(shape)
        source = render("dwconv2d_s8_naive.c.j2", dict(fn=fn, prefix=fn, header="kernel.h", oh=geo.oh, ow=geo.ow,
                                                       cout=shape["c"] * shape["mult"], geometry=geometry_text(shape),
                                                       **shape))
        return RenderedKernel(source=source, function=fn, declaration=self.declaration(shape, fn=fn),
                              compiler=compiler, cflags=cflags)
