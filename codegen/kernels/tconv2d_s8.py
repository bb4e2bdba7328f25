"""tconv2d_s8: int8 transposed convolution (NHWC, batch 1) with TFLite's TRANSPOSE_CONV
arithmetic: weights OHWI [cout][kh][kw][cin], per-output-channel requantisation, an int32 bias.

TFLite Micro scatters: input pixel (iy, ix) adds its products into the outputs
(iy * stride_h - pad_top + ky, ix * stride_w - pad_left + kx) of an int32 scratch image, then
requantises each. Integer sums do not depend on their order, so this kernel gathers instead:
output (oy, ox) sums the taps ky with (oy + pad_top - ky) divisible by stride_h and the row
(oy + pad_top - ky) / stride_h inside the input (likewise along x), which needs no scratch and
visits only taps that contribute (a stride-2 layer skips three quarters of the zero-inserted
convolution's products). The output size is a shape key: TRANSPOSE_CONV takes it as a tensor.

Parameters: `tile_c` output channels summed together (one read of the input channel run
serves them all), `vector` (plain C, or Helium: VMLADAVA.S8 sixteen products per instruction
along the input channels, the input zero point folded as in_zero * sum(w) by VADDVA.S8,
the channel tail predicated), `compiler`, `opt`."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from edgetune.hal import Target
from edgetune.tuner import Config, Constraint, Space, choice, powers_of_two

from ..quant import requantize_per_channel
from ..render import render
from .base import OPT_LEVELS, Buffer, Kernel, KernelError, KernelIO, RenderedKernel
from .convolution import MAX_REDUCTION, check_elements, int8_tensor, quant_params
from .paths import Rule, VectorPath, anywhere, path_constraints, with_vector

SHAPE_KEYS = ("h", "w", "cin", "cout", "kh", "kw", "stride_h", "stride_w", "pad_top", "pad_left", "oh", "ow")


def mve_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    """VMLADAVA and VADDVA write even core registers: two sums per channel of the tile, next
    to the pointers, leave room for at most four channels without spilling."""
    return [("the Helium path holds two scalar sums per channel: tile_c at most 4",
             lambda cfg: cfg["tile_c"] <= 4, ("tile_c",))]


PATHS = (
    VectorPath("c", anywhere, "tconv2d_s8.c.j2"),
    VectorPath("mve", with_vector("mve"), "tconv2d_s8.c.j2", mve_rules),
)


def gathered(shape: Mapping[str, int], x: np.ndarray, w: np.ndarray, in_zero: int) -> np.ndarray:
    """The int64 sums [oh][ow][cout] of TFLite's transposed convolution, scattered as TFLite
    Micro does (the reference the gathering C is checked against)."""
    s = shape
    acc = np.zeros((s["oh"] + s["kh"] + s["stride_h"] * s["h"], s["ow"] + s["kw"] + s["stride_w"] * s["w"], s["cout"]),
                   dtype=np.int64)
    xs = x.astype(np.int64) - in_zero  # [h][w][cin]
    contrib = np.einsum("yxc,okjc->yxkjo", xs, w.astype(np.int64))  # [h][w][kh][kw][cout]
    for ky in range(s["kh"]):
        for kx in range(s["kw"]):
            acc[ky:ky + s["stride_h"] * s["h"]:s["stride_h"], kx:kx + s["stride_w"] * s["w"]:s["stride_w"]] += \
                contrib[:, :, ky, kx]
    return acc[s["pad_top"]:s["pad_top"] + s["oh"], s["pad_left"]:s["pad_left"] + s["ow"]]


class TConv2dS8(Kernel):
    name = "tconv2d_s8"
    # v2: tuned on TFLite's quantisation (tuning_edge, convolution.TFLITE_CONVENTION), as the
    # convolutions are; a v1 trial, measured on drawn shifts and clamps, keeps its own key.
    version = 2
    tuning_edge = "tflite"
    shape_keys = SHAPE_KEYS
    zero_allowed = ("pad_top", "pad_left")
    description = ("int8 NHWC transposed convolution (TFLite's TRANSPOSE_CONV), gathered per output pixel, "
                   "per-channel requantisation")
    template = "tconv2d_s8.c.j2"
    paths = PATHS

    def example_shape(self) -> str:
        return "h=8,w=8,cin=16,cout=16,kh=3,kw=3,stride_h=2,stride_w=2,pad_top=0,pad_left=0,oh=16,ow=16"

    def check_shape(self, shape: dict[str, int]) -> None:
        if shape["pad_top"] >= shape["kh"] or shape["pad_left"] >= shape["kw"]:
            raise KernelError(f"shape: pad_top={shape['pad_top']}, pad_left={shape['pad_left']} must be below the "
                              f"kernel's kh={shape['kh']}, kw={shape['kw']}")
        if shape["kh"] * shape["kw"] * shape["cin"] > MAX_REDUCTION:
            raise KernelError(f"shape: kh*kw*cin = {shape['kh'] * shape['kw'] * shape['cin']} exceeds {MAX_REDUCTION} "
                              "(int32 accumulators could overflow)")
        check_elements(input=shape["h"] * shape["w"] * shape["cin"], output=shape["oh"] * shape["ow"] * shape["cout"],
                       weights=shape["kh"] * shape["kw"] * shape["cin"] * shape["cout"])

    def space(self, target: Target, shape: Mapping[str, int]) -> Space:
        paths = self.offered_paths(target)
        cover = max(1, 1 << (shape["cout"] - 1).bit_length())
        constraints = [Constraint("tile_c larger than needed to cover the output channels",
                                  lambda cfg: cfg["tile_c"] <= cover, reads=("tile_c",)),
                       *path_constraints(paths, target, shape)]
        params = [
            powers_of_two("tile_c", 1, 8, "output channels summed together (each input load serves them all)"),
            choice("vector", [p.name for p in paths], "plain C (compiler's choice) or Helium/MVE intrinsics"),
            choice("compiler", [cc.name for cc in target.compilers], "compiler from the target description"),
            choice("opt", OPT_LEVELS, "optimisation level"),
        ]
        return Space(params, constraints)

    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator, edge: str = "random") -> KernelIO:
        x = int8_tensor((shape["h"], shape["w"], shape["cin"]), rng, edge)
        weights = int8_tensor((shape["cout"], shape["kh"], shape["kw"], shape["cin"]), rng, edge)
        quant, params = quant_params(shape["cout"], rng, edge)
        return KernelIO(buffers=(Buffer("input", x), Buffer("weights", weights, weight=True), *quant,
                                 Buffer("output", np.zeros((shape["oh"], shape["ow"], shape["cout"]), dtype=np.int8),
                                        is_output=True)),
                        params=params)

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        x, w, bias, mult, shift = (buf.data for buf in io.buffers[:5])
        p = dict(io.params)
        acc = gathered(shape, x, w, p["in_zero"]) + bias.astype(np.int64)
        return [requantize_per_channel(acc, mult, shift, p["out_zero"], p["act_min"], p["act_max"])]

    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        return dict(**shape, tc=int(config["tile_c"]), vector=config["vector"])

    def argument_docs(self, shape: Mapping[str, int]) -> dict[str, tuple[str, str]]:
        """The export header's text for each argument (codegen/calling.py asks the kernel)."""
        from ..calling import MULTIPLIER, REQUANT, SHIFT, ZERO_POINT

        s, c = shape, shape["cout"]
        return {
            "input": ("in", f"input activations, int8, NHWC with batch 1: [h={s['h']}][w={s['w']}][c={s['cin']}]."),
            "weights": ("in", f"weights, int8, OHWI [cout={c}][kh={s['kh']}][kw={s['kw']}][cin={s['cin']}] "
                              "(TRANSPOSE_CONV's filter as TFLite stores it)."),
            "bias": ("in", f"bias, int32, one per output channel [{c}] (zeros for a layer without one)."),
            "multiplier": ("in", MULTIPLIER + f", one per output channel [{c}] (int32 array)."),
            "shift": ("in", SHIFT + f", one per output channel [{c}] (int32 array)."),
            "output": ("out", f"output activations, int8, NHWC [oh={s['oh']}][ow={s['ow']}][c={c}]; input pixel "
                              f"(iy, ix) reaches outputs (iy*{s['stride_h']} - {s['pad_top']} + ky, ix*{s['stride_w']} - "
                              f"{s['pad_left']} + kx): " + REQUANT.format(zero="out_zero", lo="act_min", hi="act_max") + "."),
            "in_zero": ("in", f"zero point of the input, in [-128, 127]: {ZERO_POINT}."),
            "out_zero": ("in", "zero point of the output, in [-128, 127], added after requantisation."),
            "act_min": ("in", "lower clamp of the output, in [-128, act_max] (a fused ReLU: out_zero)."),
            "act_max": ("in", "upper clamp of the output, in [act_min, 127]."),
        }

    def render_naive(self, target: Target, shape: Mapping[str, int], compiler: str, cflags: tuple[str, ...]) -> RenderedKernel:
        """TFLite Micro's loop as a programmer would port it (scatter into an int32 image, then
        requantise): what tuned variants are compared against."""
        fn = self.function_name(shape)
        source = render("tconv2d_s8_naive.c.j2", dict(fn=fn, prefix=fn, header="kernel.h", **shape))
        return RenderedKernel(source=source, function=fn, declaration=self.declaration(shape, fn=fn),
                              compiler=compiler, cflags=cflags)
