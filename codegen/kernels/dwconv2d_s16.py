"""dwconv2d_s16: depthwise convolution (NHWC, batch 1) of int16 activations with int8
weights, TFLite's 16x8 scheme (sixteen.py), depth multiplier and geometry; a model's 16x8
DEPTHWISE_CONV_2D runs on it.

Its space: channels computed together (tile_c), plain C or Helium (four channels per vector:
the loads widen int16 inputs and int8 weights to int32 lanes, VMUL and VADD sum a tap's products in
int32, which holds kh*kw <= 511 of them, and the sums go to 64 bits for the bias; with a depth multiplier
the inputs are gathered, VLDRH.S32 at the channels (o + lane) / mult), the compiler and its
optimisation level."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from edgetune.hal import Target
from edgetune.tuner import Config, Constraint, Space, choice, powers_of_two

from .base import OPT_LEVELS, Buffer, Kernel, KernelError, KernelIO
from .conv2d_s8 import tile_schedule
from .conv2d_s16 import check_bias_bits
from .convolution import GEOMETRY_KEYS, PAD_KEYS, check_elements, expand_geometry, geometry_of, geometry_text
from .paths import VectorPath, anywhere, path_constraints, with_vector
from .sixteen import MAX_REDUCTION_16, int16_tensor, quant16_params, requantize16

MVE_LANES = 4  # int32 lanes of a Helium Q register
MVE_MAX_TAPS = 511  # products of |x| <= 2^15, |w| <= 2^7 an int32 lane sums without overflow


def mve_rules(target: Target, shape: Mapping[str, int]):
    return [(f"the Helium path sums at most {MVE_MAX_TAPS} taps in int32 lanes, tile_c a multiple of {MVE_LANES}",
             lambda c: shape["kh"] * shape["kw"] <= MVE_MAX_TAPS and c["tile_c"] % MVE_LANES == 0, ("tile_c",))]


PATHS = (
    VectorPath("c", anywhere, "dwconv2d_s16.c.j2"),
    VectorPath("mve", with_vector("mve"), "dwconv2d_s16.c.j2", mve_rules),
)


class DwConv2dS16(Kernel):
    name = "dwconv2d_s16"
    version = 1
    shape_keys = ("h", "w", "c", "mult", "kh", "kw", *GEOMETRY_KEYS, "bias_bits")
    shape_defaults = (("mult", 1), ("bias_bits", 64))
    zero_allowed = PAD_KEYS
    description = ("int16 x int8 depthwise NHWC convolution (TFLite's 16x8 scheme), depth multiplier, int64 bias, "
                   "per-channel requantisation, TFLite geometry")
    template = "dwconv2d_s16.c.j2"
    paths = PATHS

    def example_shape(self) -> str:
        return "h=16,w=16,c=32,mult=1,kh=3,kw=3,stride=1,dilation=1,pad=same,bias_bits=64"

    def expand_shape(self, items: dict[str, object]) -> dict[str, object]:
        return expand_geometry(items)

    def check_shape(self, shape: dict[str, int]) -> None:
        check_bias_bits(shape)
        geo = geometry_of(shape)
        geo.check()
        if shape["kh"] * shape["kw"] > MAX_REDUCTION_16:
            raise KernelError(f"shape: kh*kw = {shape['kh'] * shape['kw']} exceeds {MAX_REDUCTION_16}")
        cout = shape["c"] * shape["mult"]
        check_elements(input=shape["h"] * shape["w"] * shape["c"], output=geo.oh * geo.ow * cout,
                       weights=shape["kh"] * shape["kw"] * cout)

    def space(self, target: Target, shape: Mapping[str, int]) -> Space:
        cout = shape["c"] * shape["mult"]
        paths = self.offered_paths(target)
        constraints = [
            Constraint("tile_c larger than needed to cover the output channels (c * mult)",
                       lambda c: c["tile_c"] <= max(MVE_LANES, 1 << (cout - 1).bit_length()), reads=("tile_c",)),
            *path_constraints(paths, target, shape),
        ]
        params = [
            powers_of_two("tile_c", 1, 16, "channels computed together"),
            choice("vector", [p.name for p in paths], "plain C (compiler's choice) or Helium/MVE"),
            choice("compiler", [c.name for c in target.compilers], "compiler from the target description"),
            choice("opt", OPT_LEVELS, "optimisation level"),
        ]
        return Space(params, constraints)

    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator, edge: str = "random") -> KernelIO:
        geo = geometry_of(shape)
        cout = shape["c"] * shape["mult"]
        x = int16_tensor((shape["h"], shape["w"], shape["c"]), rng, edge)
        if edge == "extreme":
            weights = rng.choice(np.array([-127, 127], dtype=np.int8), size=(shape["kh"], shape["kw"], cout))
        else:
            weights = rng.integers(-127, 128, size=(shape["kh"], shape["kw"], cout), dtype=np.int8)
        quant, params = quant16_params(cout, rng, edge, shape["bias_bits"])
        return KernelIO(buffers=(Buffer("input", x), Buffer("weights", weights, weight=True), *quant,
                                 Buffer("output", np.zeros((geo.oh, geo.ow, cout), dtype=np.int16), is_output=True)),
                        params=params)

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        geo = geometry_of(shape)
        x, w, bias, mult, shift = (buf.data for buf in io.buffers[:5])
        p = dict(io.params)
        patches = geo.patches(x.astype(np.int64), 0)[..., np.arange(w.shape[-1]) // shape["mult"]]
        acc = np.einsum("yxabc,abc->yxc", patches, w.astype(np.int64))
        return [requantize16(acc, bias, mult, shift, shape["bias_bits"], p["act_min"], p["act_max"])]

    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        geo = geometry_of(shape)
        cout = shape["c"] * shape["mult"]
        tc = int(config["tile_c"])
        c_full, c_rem = tile_schedule(cout, tc)
        return dict(**shape, oh=geo.oh, ow=geo.ow, cout=cout, padded=geo.padded, geometry=geometry_text(shape),
                    tc=tc, c_full=c_full, c_rem=c_rem, vector=config["vector"])
