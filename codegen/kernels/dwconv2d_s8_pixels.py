"""dwconv2d_s8's Helium path with output pixels across the lanes (vector="mve_pixels").

MVE has no integer vector-by-vector multiply-accumulate: with channels across the lanes (the
`mve` path) a tap costs a VMUL and a VADD per four MACs. With four output pixels of one
channel across the lanes, the tap's weight is one scalar and a tap is one VMLA (vector by
scalar, VMLA.S32 Qda, Qn, Rm) per four MACs. For that the kernel first copies one input
channel at a time into a small plane (the channel's pixels contiguous, the padding filled
with in_zero once per call, each row split into stride phases so that every tap's four
inputs are one contiguous VLDRB.S32), then sweeps the plane with the channel's weights held
in core registers and scatters the four requantised outputs (VSTRB.32 with offsets).

The lanes run along the output's width or, when that wastes fewer lanes (a narrow map such
as DS-CNN's 25x5), along its height: `axis_of` picks the axis whose last group of lanes is
fullest. This module computes the plane's geometry for the template
(dwconv2d_s8_mve_pixels.c.j2); the padding's in_zero entries are what the bias term
`bias - in_zero * sum(w)` takes back out, so borders are exact without bounds checks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from edgetune.hal import Target
from edgetune.tuner import Config

from .convolution import geometry_of, scratch_capacity
from .paths import Rule, VectorPath, with_vector

TEMPLATE = "dwconv2d_s8_mve_pixels.c.j2"
LANES = 4  # int32 lanes of a 128-bit vector: output pixels per vector


@dataclass(frozen=True)
class Axis:
    """One spatial axis seen from the plane: input extent and element stride in the NHWC
    input, kernel extent, stride, dilation, leading padding, output extent and output stride."""
    n_in: int
    in_stride: int
    k: int
    stride: int
    dilation: int
    pad: int
    n_out: int
    out_stride: int
    tap_stride: int  # step of the weight row index ([kh][kw] flattened) per tap along this axis


def axes(shape: Mapping[str, int]) -> dict[str, Axis]:
    geo = geometry_of(shape)
    cout = shape["c"] * shape["mult"]
    return {
        "h": Axis(shape["h"], shape["w"] * shape["c"], shape["kh"], shape["stride_h"], shape["dilation_h"],
                  shape["pad_top"], geo.oh, geo.ow * cout, shape["kw"]),
        "w": Axis(shape["w"], shape["c"], shape["kw"], shape["stride_w"], shape["dilation_w"],
                  shape["pad_left"], geo.ow, cout, 1),
    }


def axis_of(shape: Mapping[str, int], tile_p: int) -> str:
    """The axis the lanes run along: the one whose groups of 4 * tile_p lanes leave fewest
    lanes idle over the whole output (ties: the width, which keeps a vector's scattered
    outputs closest)."""
    group = LANES * tile_p
    named = axes(shape)
    idle = {"w": -named["w"].n_out % group * named["h"].n_out, "h": -named["h"].n_out % group * named["w"].n_out}
    return "w" if idle["w"] <= idle["h"] else "h"


@dataclass(frozen=True)
class Plane:
    """A channel's padded plane: rows along the outer axis, each row `phases` runs of
    `run` entries (entry j of a row lies in run j % stride at j // stride)."""
    rows: int
    run: int
    row_len: int
    used: int  # padded lane positions the taps reach (entries past it are never written)

    @property
    def size(self) -> int:
        return self.rows * self.row_len


def plane_of(outer: Axis, lane: Axis, group: int) -> Plane:
    rows = (outer.n_out - 1) * outer.stride + (outer.k - 1) * outer.dilation + 1
    used = (lane.n_out - 1) * lane.stride + (lane.k - 1) * lane.dilation + 1
    groups = -(-lane.n_out // group)
    # Tail groups load whole vectors: a run holds every lane of every group plus the taps' reach.
    run = max(-(-used // lane.stride), groups * group + (lane.k - 1) * lane.dilation // lane.stride)
    return Plane(rows, run, run * lane.stride, used)


def fill_runs(lane: Axis, plane: Plane) -> list[tuple[int, int, int]]:
    """Per stride phase: (first input lane position, positions copied, offset in the row)."""
    runs = []
    for phase in range(lane.stride):
        first = (phase - lane.pad) % lane.stride
        last = min(lane.n_in, plane.used - lane.pad)  # input positions past the taps' reach are not copied
        count = max(0, -(-(last - first) // lane.stride))
        if count:
            runs.append((first, count, phase * plane.run + (first + lane.pad) // lane.stride))
    return runs


def pixel_variables(target: Target, shape: Mapping[str, int], config: Config) -> dict:
    tile_p = int(config["tile_p"])
    along = axis_of(shape, tile_p)
    named = axes(shape)
    lane, outer = named[along], named["h" if along == "w" else "w"]
    group = LANES * tile_p
    plane = plane_of(outer, lane, group)
    taps = [(ko * outer.dilation * plane.row_len + (kl * lane.dilation % lane.stride) * plane.run
             + kl * lane.dilation // lane.stride, ko * outer.tap_stride + kl * lane.tap_stride)
            for ko in range(outer.k) for kl in range(lane.k)]
    # The fill gathers eight pixels at a time (16-bit offsets) when the farthest offset fits.
    fill_lanes = 8 if 7 * lane.stride * lane.in_stride <= 0xFFFF else 4
    return dict(along=along, outer=outer, lane=lane, plane=plane, group=group, taps=taps,
                fl=fill_lanes, fb=128 // fill_lanes, row_acc=-(-lane.n_out // group) * group,
                n_full=lane.n_out // group, rem=lane.n_out % group,
                fill_rows=min(outer.n_in, plane.rows - outer.pad), fill_runs=fill_runs(lane, plane),
                # The fast requantisation stores eight outputs per scatter (16-bit offsets) when they fit.
                pair_scatter=7 * lane.out_stride <= 0xFFFF)


def scratch_bytes(shape: Mapping[str, int], tile_p: int) -> int:
    """Static memory of a variant: the plane, the int32 accumulators of one output channel and
    every output channel's int32 term."""
    named = axes(shape)
    along = axis_of(shape, tile_p)
    lane, outer = named[along], named["h" if along == "w" else "w"]
    group = LANES * tile_p
    terms = 4 * -(-shape["c"] * shape["mult"] // LANES) * LANES
    return plane_of(outer, lane, group).size + 4 * outer.n_out * -(-lane.n_out // group) * group + terms


def pixel_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    capacity = scratch_capacity(target)
    registers = target.vector_unit("mve").registers
    return [
        # tile_c and layout mean nothing here: one value each, so the space holds no duplicates.
        ("vector=mve_pixels takes one channel at a time (tile_c=4), the weights as given (layout=hwc) and pads "
         "its own planes (taps=loop or unrolled3x3)",
         lambda c: c["tile_c"] == 4 and c["layout"] == "hwc" and c["taps"] != "padded3x3", ("tile_c", "layout", "taps")),
        (f"vector=mve_pixels: tile_p accumulators, one input and two clamp vectors exceed {registers} vector registers",
         lambda c: c["tile_p"] + 3 <= registers, ("tile_p",)),
        (f"vector=mve_pixels: the channel plane and accumulators exceed the {capacity} bytes of scratch memory "
         f"on {target.name}", lambda c: scratch_bytes(shape, int(c["tile_p"])) <= capacity, ("tile_p",)),
    ]


MVE_PIXELS = VectorPath("mve_pixels", with_vector("mve"), TEMPLATE, pixel_rules, variables=pixel_variables)
