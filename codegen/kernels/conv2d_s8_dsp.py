"""The Arm DSP-extension path of conv2d_s8 (vector="dsp", template conv2d_s8_dsp.c.j2):
where it applies and what the template needs beyond the shared variables.

Both weight layouts keep each output channel's K = kh*kw*cin weights contiguous (OHWI as
given; layout=packed with one channel per block, the same order), so the inner loops are
SXTB16/SMLAD dot products on raw bytes with the input zero point folded into a per-channel
term: given packed (from <fn>_pack) or computed per call on the stack (layout=ohwi).
"""
from __future__ import annotations

from typing import Mapping

from edgetune.hal import Target
from edgetune.tuner import Config

from .convolution import stack_budget
from .dsp import DSP_CFLAGS
from .paths import Rule, VectorPath, with_extension

TEMPLATE = "conv2d_s8_dsp.c.j2"
# Core registers left for accumulators: 13 usable (r0-r12, lr) minus the tile's operand
# pairs and pointers; as matmul_s8's DSP tile, at most 8 int32 accumulators.
MAX_ACCUMULATORS = 8


def dsp_stack_bytes(shape: Mapping[str, int], config: Mapping) -> int:
    """Local arrays of a DSP variant: the per-call terms (layout=ohwi) and the fused epilogue's
    raw accumulators (one pixel for direct, tile_p pixels for im2col)."""
    cout = shape["cout"]
    terms = cout * 4 if config["layout"] == "ohwi" else 0
    pixels = 1 if config["algo"] == "direct" else int(config["tile_p"])
    raw = pixels * cout * 4 if config["fusion"] == "fused" else 0
    return terms + raw


def dsp_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    stack = stack_budget(target)
    return [
        (f"DSP tile needs tile_p * tile_oc <= {MAX_ACCUMULATORS} int32 accumulators in core registers",
         lambda c: c["tile_p"] * c["tile_oc"] <= MAX_ACCUMULATORS, ("tile_p", "tile_oc")),
        (f"DSP terms and fused accumulators exceed {stack} bytes of stack on {target.name}",
         lambda c: dsp_stack_bytes(shape, c) <= stack, ("layout", "algo", "tile_p", "fusion")),
    ]


def dsp_variables(target: Target, shape: Mapping[str, int], config: Config) -> dict:
    return dict(layout=config["layout"])  # conv2d_s8_dsp.c.j2 serves both layouts


DSP = VectorPath("dsp", with_extension("dsp"), TEMPLATE, dsp_rules, cflags=DSP_CFLAGS, variables=dsp_variables)
