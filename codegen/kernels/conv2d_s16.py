"""conv2d_s16: 2-D convolution (NHWC, batch 1) of int16 activations with int8 weights,
TFLite's 16x8 scheme (sixteen.py), TFLite's geometry; a model's 16x8 CONV_2D and
FULLY_CONNECTED (a 1x1 convolution over the rows) run on it.

Its space: output channels computed together (tile_oc: one input load serves them), the
plain C reduction's unrolling, plain C or Helium (the int16 inputs and the int8 weights
widened by the loads, VMLALDAVA summing eight products into a 64-bit accumulator, the
channel tail predicated), the compiler and its optimisation level."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from edgetune.hal import Target
from edgetune.tuner import Config, Constraint, Space, choice, powers_of_two

from .base import OPT_LEVELS, Buffer, Kernel, KernelError, KernelIO
from .conv2d_s8 import tile_schedule
from .convolution import GEOMETRY_KEYS, PAD_KEYS, check_elements, expand_geometry, geometry_of, geometry_text
from .paths import VectorPath, anywhere, path_constraints, with_vector
from .sixteen import BIAS_BITS, MAX_REDUCTION_16, int16_tensor, quant16_params, requantize16

PATHS = (
    VectorPath("c", anywhere, "conv2d_s16.c.j2"),
    VectorPath("mve", with_vector("mve"), "conv2d_s16.c.j2"),
)


def check_bias_bits(shape: Mapping[str, int]) -> None:
    if shape["bias_bits"] not in BIAS_BITS:
        raise KernelError(f"shape: bias_bits={shape['bias_bits']} must be 32 or 64 (the model's bias type)")


class Conv2dS16(Kernel):
    name = "conv2d_s16"
    version = 1
    shape_keys = ("h", "w", "cin", "cout", "kh", "kw", *GEOMETRY_KEYS, "bias_bits")
    shape_defaults = (("bias_bits", 64),)
    zero_allowed = PAD_KEYS
    description = ("int16 x int8 NHWC convolution (TFLite's 16x8 scheme), OHWI weights, int64 or int32 bias, "
                   "per-channel requantisation, TFLite geometry, activation clamp")
    template = "conv2d_s16.c.j2"
    paths = PATHS

    def example_shape(self) -> str:
        return "h=16,w=16,cin=32,cout=32,kh=3,kw=3,stride=1,dilation=1,pad=same,bias_bits=64"

    def expand_shape(self, items: dict[str, object]) -> dict[str, object]:
        return expand_geometry(items)

    def check_shape(self, shape: dict[str, int]) -> None:
        check_bias_bits(shape)
        geo = geometry_of(shape)
        geo.check()
        k = shape["kh"] * shape["kw"] * shape["cin"]
        if k > MAX_REDUCTION_16:
            raise KernelError(f"shape: kh*kw*cin = {k} exceeds {MAX_REDUCTION_16} (the 64-bit requantisation's range)")
        check_elements(input=shape["h"] * shape["w"] * shape["cin"], weights=shape["cout"] * k,
                       output=geo.oh * geo.ow * shape["cout"])

    def space(self, target: Target, shape: Mapping[str, int]) -> Space:
        paths = self.offered_paths(target)
        cout = shape["cout"]
        constraints = [
            Constraint("tile_oc larger than cout", lambda c: c["tile_oc"] <= cout or c["tile_oc"] == 1,
                       reads=("tile_oc",)),
            Constraint("unroll applies to the plain C path only", lambda c: c["vector"] == "c" or c["unroll"] == 1,
                       reads=("vector", "unroll")),
            *path_constraints(paths, target, shape),
        ]
        params = [
            choice("tile_oc", [1, 2, 3, 4], "output channels computed together (share input loads)"),
            powers_of_two("unroll", 1, 4, "unroll factor of the reduction loop (plain C)"),
            choice("vector", [p.name for p in paths], "plain C (compiler's choice) or Helium/MVE (VMLALDAVA)"),
            choice("compiler", [c.name for c in target.compilers], "compiler from the target description"),
            choice("opt", OPT_LEVELS, "optimisation level"),
        ]
        return Space(params, constraints)

    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator, edge: str = "random") -> KernelIO:
        geo = geometry_of(shape)
        cin, cout = shape["cin"], shape["cout"]
        x = int16_tensor((shape["h"], shape["w"], cin), rng, edge)
        if edge == "extreme":
            weights = rng.choice(np.array([-127, 127], dtype=np.int8), size=(cout, shape["kh"], shape["kw"], cin))
        else:
            weights = rng.integers(-127, 128, size=(cout, shape["kh"], shape["kw"], cin), dtype=np.int8)
        quant, params = quant16_params(cout, rng, edge, shape["bias_bits"])
        return KernelIO(buffers=(Buffer("input", x), Buffer("weights", weights, weight=True), *quant,
                                 Buffer("output", np.zeros((geo.oh, geo.ow, cout), dtype=np.int16), is_output=True)),
                        params=params)

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        geo = geometry_of(shape)
        x, w, bias, mult, shift = (buf.data for buf in io.buffers[:5])
        p = dict(io.params)
        patches = geo.patches(x.astype(np.int64), 0)  # padding: the zero point, 0
        acc = np.einsum("yxabc,oabc->yxo", patches, w.astype(np.int64))
        return [requantize16(acc, bias, mult, shift, shape["bias_bits"], p["act_min"], p["act_max"])]

    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        geo = geometry_of(shape)
        toc = int(config["tile_oc"])
        oc_full, oc_rem = tile_schedule(shape["cout"], toc)
        return dict(**shape, oh=geo.oh, ow=geo.ow, k=shape["kh"] * shape["kw"] * shape["cin"], padded=geo.padded,
                    geometry=geometry_text(shape), toc=toc, oc_full=oc_full, oc_rem=oc_rem,
                    unroll=int(config["unroll"]), vector=config["vector"])
