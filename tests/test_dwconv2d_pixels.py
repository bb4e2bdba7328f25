"""dwconv2d_s8's Helium path with output pixels across the lanes (vector=mve_pixels): the
plane geometry (which axis the lanes run along, the stride phases, what is copied), the
space's rules, and variants run in QEMU bit-exact against the reference on drawn shapes,
edge shapes (odd channel counts, depth multipliers, strides, dilations, one-sided padding)
and the MLPerf Tiny depthwise layers, and against TFLite Micro on drawn layers (with the
padded input copy, taps=padded3x3, too)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st

from edgetune.codegen.kernels.dwconv2d_s8_pixels import axes, axis_of, fill_runs, pixel_variables, plane_of
from edgetune.tuner import Config

from kernel_checks import draw_conv_shape, run_against_tflm
from kernel_runs import assert_ok, check_drawn_variants, complete, geometry_shapes, run_config


def test_lanes_run_along_the_axis_that_wastes_fewest_lanes(dw):
    ds_cnn = dw.parse_shape("h=25,w=5,c=64,kh=3,kw=3,stride=1,pad=1,dilation=1")
    assert axis_of(ds_cnn, 1) == "h"  # 5 columns of 25 rows: 5 x 3 lanes idle; 25 rows of 5: 25 x 3
    assert axis_of(dw.parse_shape("h=48,w=48,c=8,kh=3,kw=3,stride=1,pad=1,dilation=1"), 4) == "w"
    assert axis_of(dw.parse_shape("h=6,w=6,c=8,kh=3,kw=3,stride=1,pad=1,dilation=1"), 1) == "w"  # a tie


def test_the_plane_splits_rows_into_stride_phases(dw):
    shape = dw.parse_shape("h=48,w=48,c=16,kh=3,kw=3,stride=2,pad=same")  # pads 0/1 on both axes
    lane, outer = axes(shape)["w"], axes(shape)["h"]
    plane = plane_of(outer, lane, 4)
    assert plane.rows == 49 and plane.used == 49  # (24 - 1) * 2 + 2 + 1
    assert plane.run >= 25 and plane.row_len == 2 * plane.run
    # Even input columns go to phase 0, odd ones to phase 1; column 48 (padding) is never copied.
    assert fill_runs(lane, plane) == [(0, 24, 0), (1, 24, plane.run)]
    variables = pixel_variables(None, shape, Config((("tile_p", 1),)))
    # Tap (ky, kx) reads row ky, phase kx % 2, entry kx // 2; its weights row is ky * 3 + kx.
    assert variables["taps"][:3] == [(0, 0), (plane.run, 1), (1, 2)]
    assert variables["taps"][3] == (plane.row_len, 3)


def test_padding_past_the_taps_reach_is_not_copied(dw):
    shape = dw.parse_shape("h=5,w=7,c=3,kh=3,kw=3,stride_h=1,stride_w=3,pad_top=2,pad_bottom=0,"
                           "pad_left=1,pad_right=0,dilation=1")
    lane = axes(shape)["w"]
    plane = plane_of(axes(shape)["h"], lane, 4)
    copied = sorted(first + lane.stride * k for first, count, _ in fill_runs(lane, plane) for k in range(count))
    assert copied == [x for x in range(7) if x + 1 < plane.used]


def test_space_rules(dw, m55):
    space = dw.space(m55, dw.parse_shape("h=8,w=8,c=16,kh=3,kw=3,stride=1,pad=1,dilation=1"))
    pixels = [c for c in space if c["vector"] == "mve_pixels"]
    assert {c["tile_p"] for c in pixels} == {1, 2, 4} and {c["taps"] for c in pixels} == {"loop", "unrolled3x3"}
    assert {c["tile_c"] for c in pixels} == {4} and {c["layout"] for c in pixels} == {"hwc"}


def test_a_plane_larger_than_the_scratch_memory_is_not_offered(dw, m55):
    space = dw.space(m55, dw.parse_shape("h=400,w=400,c=1,kh=3,kw=3,stride=1,pad=1,dilation=1"))
    assert not any(c["vector"] == "mve_pixels" for c in space)
    assert any(c["vector"] == "mve" for c in space)


@pytest.mark.qemu
def test_drawn_shapes_are_bit_exact(dw, m55, tmp_path):
    shapes = geometry_shapes({"c": st.integers(1, 21), "mult": st.sampled_from([1, 1, 2, 3])})
    check_drawn_variants(dw, [m55], shapes, "mve_pixels", tmp_path, examples=16)


@pytest.mark.qemu
@pytest.mark.parametrize("shape_text", [
    "h=1,w=1,c=1,kh=1,kw=1,stride=1,pad=0,dilation=1",
    "h=9,w=7,c=13,kh=3,kw=3,stride=2,pad=2,dilation=1",   # odd channels, stride 2, pad > 1
    "h=8,w=9,c=5,kh=3,kw=3,stride=1,pad=1,dilation=2",    # dilated
    "h=8,w=7,c=5,mult=3,kh=3,kw=3,stride=1,pad=1",        # depth multiplier 3
    "h=6,w=9,c=4,mult=2,kh=3,kw=3,stride_h=2,stride_w=1,pad=same",
    "h=7,w=8,c=6,kh=3,kw=3,stride_h=1,stride_w=2,dilation_h=2,dilation_w=1,"
    "pad_top=2,pad_bottom=0,pad_left=0,pad_right=1",      # per-axis steps, one-sided padding
    "h=11,w=5,c=3,kh=5,kw=2,stride_h=3,stride_w=1,pad_top=0,pad_bottom=3,pad_left=1,pad_right=0,dilation=1",
    "h=25,w=5,c=17,kh=3,kw=3,stride=1,pad=1,dilation=1",  # lanes along the height
])
def test_edge_shapes(dw, m55, tmp_path, shape_text):
    shape = dw.parse_shape(shape_text)
    variants = [{"tile_p": 1, "taps": "unrolled3x3", "compiler": "clang", "opt": "O3"},
                {"tile_p": 2, "taps": "loop", "compiler": "gcc", "opt": "O2"},
                {"tile_p": 4, "taps": "unrolled3x3", "compiler": "gcc", "opt": "O3"},
                {"tile_p": 4, "taps": "loop", "compiler": "clang", "opt": "Os"}]
    space = dw.space(m55, shape)
    for index, variant in enumerate(variants):
        wanted = {"vector": "mve_pixels", **{k: v for k, v in variant.items() if any(c[k] == v for c in space)}}
        assert_ok(run_config(dw, m55, shape, wanted, tmp_path, edge=("extreme" if index % 2 else "random"), seed=index))


@pytest.mark.qemu
@pytest.mark.parametrize("shape_text", [
    "h=25,w=5,c=64,kh=3,kw=3,stride=1,pad=1,dilation=1",  # DS-CNN
    "h=48,w=48,c=16,kh=3,kw=3,stride=2,pad=same",          # MobileNetV1-0.25's first stride-2 layer
    "h=3,w=3,c=256,kh=3,kw=3,stride=1,pad=1,dilation=1",   # its last
])
def test_mlperf_layers_are_bit_exact(dw, m55, tmp_path, shape_text):
    shape = dw.parse_shape(shape_text)
    for index, tile_p in enumerate((1, 4)):
        assert_ok(run_config(dw, m55, shape, {"vector": "mve_pixels", "tile_p": tile_p, "taps": "unrolled3x3",
                                             "compiler": "clang", "opt": "O3"}, tmp_path, edge="extreme", seed=index))


@pytest.mark.qemu
def test_drawn_layers_equal_tflite_micro(dw, m55, tmp_path):
    """Drawn layers with real TFLite quantisation, judged by TFLite Micro's output: the pixel
    path on every one, the padded input copy (taps=padded3x3) wherever the kernel is 3x3."""
    rng = np.random.default_rng(19)
    drawn = [draw_conv_shape(dw, rng) for _ in range(4)]
    drawn.append(dw.parse_shape("h=7,w=6,c=5,mult=2,kh=3,kw=3,stride_h=2,stride_w=1,pad_top=0,pad_bottom=2,"
                                "pad_left=1,pad_right=0,dilation=1"))
    for index, shape in enumerate(drawn):
        space = dw.space(m55, shape)
        variants = [{"vector": "mve_pixels", "compiler": ("clang", "gcc")[index % 2]}]
        if any(c["taps"] == "padded3x3" for c in space):
            variants.append({"vector": "mve", "taps": "padded3x3", "layout": "packed", "compiler": "clang"})
        for values in variants:
            config = complete(space, values)
            assert_ok(run_against_tflm(dw, m55, shape, config, tmp_path, rng, edge=("random", "extreme")[index % 2]))
