"""conv2d_s8: shape limits, the HAL-derived scratch limit on im2col and unfused buffers, the
numpy reference against an independent loop model, and every variant run in QEMU (and
natively) bit-exact against that reference, on drawn and on edge shapes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetune.codegen import KernelError
from edgetune.codegen.kernels.convolution import scratch_capacity
from edgetune.hal import load_target
from edgetune.targets import target_file

from kernel_runs import assert_ok, geometry_shapes, run_config

FEW = settings(max_examples=6, derandomize=True, deadline=None, database=None)


def loop_model(shape, io):
    """conv2d_s8 written as TFLite's definition with Python integers (independent of the
    kernel module's numpy reference), then requantised per channel: the window of output
    (oy, ox) starts at oy*stride_h - pad_top, ox*stride_w - pad_left."""
    from edgetune.codegen.quant import requantize
    x, w, bias, mult, shift = (b.data for b in io.buffers[:5])
    p = dict(io.params)
    sh, sw, dh, dw = shape["stride_h"], shape["stride_w"], shape["dilation_h"], shape["dilation_w"]
    oh = (shape["h"] + shape["pad_top"] + shape["pad_bottom"] - dh * (shape["kh"] - 1) - 1) // sh + 1
    ow = (shape["w"] + shape["pad_left"] + shape["pad_right"] - dw * (shape["kw"] - 1) - 1) // sw + 1
    out = np.zeros((oh, ow, shape["cout"]), dtype=np.int8)
    for oy in range(oh):
        for ox in range(ow):
            for o in range(shape["cout"]):
                acc = int(bias[o])
                for ky in range(shape["kh"]):
                    for kx in range(shape["kw"]):
                        iy, ix = oy * sh - shape["pad_top"] + ky * dh, ox * sw - shape["pad_left"] + kx * dw
                        if 0 <= iy < shape["h"] and 0 <= ix < shape["w"]:
                            for c in range(shape["cin"]):
                                acc += (int(x[iy, ix, c]) - p["in_zero"]) * int(w[o, ky, kx, c])
                out[oy, ox, o] = requantize(np.array([acc]), int(mult[o]), int(shift[o]), p["out_zero"],
                                            p["act_min"], p["act_max"])[0]
    return out


shapes = geometry_shapes({"cin": st.integers(1, 20), "cout": st.integers(1, 9)}, size=7)


@settings(max_examples=40, derandomize=True, deadline=None, database=None)
@given(shape=shapes, seed=st.integers(0, 2**16), edge=st.sampled_from(["random", "extreme"]))
def test_reference_matches_the_loop_model(conv, shape, seed, edge):
    shape = conv.parse_shape(shape)
    io = conv.make_io(shape, np.random.default_rng(seed), edge=edge)
    assert np.array_equal(conv.reference(shape, io)[0], loop_model(shape, io))


@pytest.mark.parametrize("text, fragment", [
    ("h=4,w=4,cin=4,cout=4,kh=5,kw=1,stride=1,pad=0,dilation=1", "spans 5 along h"),
    ("h=4,w=4,cin=4,cout=4,kh=3,kw=3,stride=1,pad=0,dilation=2", "spans 5 along h"),
    ("h=64,w=64,cin=4000,cout=4,kh=3,kw=3,stride=1,pad=1,dilation=1", "exceeds 32767"),
    ("h=4,w=4,cin=4,cout=4,kh=3,kw=3,stride=0,pad=1,dilation=1", "stride=0 must be a positive"),
    ("h=4,w=4,cin=4,cout=4,kh=3,kw=3,stride=1,pad=-1,dilation=1", "pad=-1 must be a non-negative"),
    ("h=4,w=4,cin=4,cout=4,kh=3,kw=3,stride=1,pad_top=0,pad_bottom=0,pad_left=-1,pad_right=0",
     "pad_left=-1 must be a non-negative"),
    ("h=4,w=4,cin=4,cout=4,kh=3,kw=6,stride=1,pad_top=0,pad_bottom=0,pad_left=1,pad_right=0",
     "spans 6 along w"),
])
def test_bad_shapes_name_the_problem(conv, text, fragment):
    with pytest.raises(KernelError, match=fragment):
        conv.parse_shape(text)


def test_padding_zero_and_large_padding_are_shapes(conv):
    assert conv.parse_shape("h=3,w=3,cin=1,cout=1,kh=3,kw=3,stride=1,pad=0,dilation=1")["pad_top"] == 0
    big = conv.parse_shape("h=1,w=1,cin=1,cout=1,kh=1,kw=1,stride=1,pad=4,dilation=1")
    assert [big[k] for k in ("pad_top", "pad_bottom", "pad_left", "pad_right")] == [4, 4, 4, 4]


def pads(shape):
    return tuple(shape[k] for k in ("pad_top", "pad_bottom", "pad_left", "pad_right"))


def test_the_issues_same_layers_get_tflites_asymmetric_padding(conv):
    # MobileNetV1's first layer: 96x96x3, 3x3 stride 2 SAME -> 48x48, pads 0 top/left, 1 bottom/right.
    mobilenet = conv.parse_shape("h=96,w=96,cin=3,cout=8,kh=3,kw=3,stride=2,pad=same")
    assert pads(mobilenet) == (0, 1, 0, 1)
    assert (mobilenet["stride_h"], mobilenet["stride_w"], mobilenet["dilation_h"], mobilenet["dilation_w"]) == (2, 2, 1, 1)
    io = conv.make_io(mobilenet, np.random.default_rng(1))
    assert io.outputs()[0].data.shape == (48, 48, 8)
    # DS-CNN's first layer: 49x10x1, 10x4 stride 2 SAME -> 25x5, pads 4/5 and 1/1.
    dscnn = conv.parse_shape("h=49,w=10,cin=1,cout=64,kh=10,kw=4,stride=2,dilation=1,pad=same")
    assert pads(dscnn) == (4, 5, 1, 1)
    assert conv.make_io(dscnn, np.random.default_rng(1)).outputs()[0].data.shape == (25, 5, 64)
    # Symmetric pad=1 is not TFLite's SAME here: the windows start one row and column earlier.
    symmetric = conv.parse_shape("h=96,w=96,cin=3,cout=8,kh=3,kw=3,stride=2,pad=1")
    assert pads(symmetric) == (1, 1, 1, 1)
    assert not np.array_equal(conv.reference(mobilenet, io)[0], conv.reference(symmetric, io)[0])


def test_shorthands_expand_and_mix_with_full_keys(conv):
    full = conv.parse_shape("h=9,w=8,cin=2,cout=3,kh=3,kw=2,stride_h=2,stride_w=1,dilation_h=1,dilation_w=2,"
                            "pad_top=0,pad_bottom=2,pad_left=1,pad_right=0")
    assert conv.parse_shape("h=9,w=8,cin=2,cout=3,kh=3,kw=2,stride_h=2,stride_w=1,dilation_w=2,"
                            "pad_top=0,pad_bottom=2,pad_left=1,pad_right=0") == full  # dilation_h defaults to 1
    assert conv.parse_shape("h=9,w=8,cin=2,cout=3,kh=3,kw=3,stride=2,pad=SAME") == \
        conv.parse_shape("h=9,w=8,cin=2,cout=3,kh=3,kw=3,stride=2,pad=same")  # TFLite's spelling too
    valid = conv.parse_shape("h=9,w=8,cin=2,cout=3,kh=3,kw=3,stride=2,pad=valid")
    assert pads(valid) == (0, 0, 0, 0) and valid["stride_h"] == valid["stride_w"] == 2
    # A shorthand and an agreeing full key; per-axis SAME with per-axis strides.
    assert pads(conv.parse_shape("h=10,w=7,cin=1,cout=1,kh=3,kw=3,pad=1,pad_top=1,stride=1")) == (1, 1, 1, 1)
    same = conv.parse_shape("h=10,w=7,cin=1,cout=1,kh=4,kw=3,stride_h=3,stride_w=2,pad=same")
    # h: out 4, total (4-1)*3 + 4 - 10 = 3 -> 1/2; w: out 4, total (4-1)*2 + 3 - 7 = 2 -> 1/1.
    assert pads(same) == (1, 2, 1, 1)
    assert conv.parse_shape({"h": 10, "w": 7, "cin": 1, "cout": 1, "kh": 4, "kw": 3, "stride_h": 3, "stride_w": 2,
                             "pad": "same"}) == same


@pytest.mark.parametrize("text, fragment", [
    ("h=5,w=5,cin=1,cout=1,kh=3,kw=3,stride=1,pad=1,pad_top=2", "pad_top=2 contradicts pad=1"),
    ("h=5,w=5,cin=1,cout=1,kh=3,kw=3,stride=2,stride_w=1,pad=0", "stride_w=1 contradicts stride=2"),
    ("h=5,w=5,cin=1,cout=1,kh=3,kw=3,stride=1,pad=same,pad_bottom=0", "pad_bottom=0 contradicts pad=same"),
    ("h=5,w=5,cin=1,cout=1,kh=3,kw=3,stride=same,pad=1", "stride='same' must be a positive integer"),
    ("h=5,w=5,cin=1,cout=1,kh=3,kw=3,stride=1,pad=-2", "pad=-2 must be a non-negative integer"),
    ("h=5,w=5,cin=1,cout=1,kh=3,kw=3,stride=1,pad_top=1,pad_left=1,pad_right=1", "missing 'pad_bottom'"),
])
def test_inconsistent_or_incomplete_geometry_is_one_line_naming_the_key(conv, text, fragment):
    with pytest.raises(KernelError, match=fragment) as info:
        conv.parse_shape(text)
    assert "\n" not in str(info.value)


def test_scratch_limit_comes_from_the_hal(conv, m55):
    shape = conv.parse_shape("h=16,w=16,cin=128,cout=64,kh=3,kw=3,stride=1,pad=1,dilation=1")
    capacity = scratch_capacity(m55)
    fw = m55.firmware
    assert 0 < capacity < fw.data_reserved - fw.stack_size
    space = conv.space(m55, shape)
    configs = list(space)
    assert all(conv.scratch_bytes(shape, c) <= capacity for c in configs)
    # 64 pixels x 1152 bytes do not fit, 32 do; the 64 KiB unfused intermediate never fits.
    assert {c["im2col_pixels"] for c in configs if c["algo"] == "im2col"} == {1, 2, 4, 8, 16, 32}
    assert {c["fusion"] for c in configs} == {"fused"}
    # A board with twice the reserved data area offers more.
    bigger = load_target(target_file("cortex-m55"), overrides={"firmware": {"data_reserved": 0x2_0000}})
    assert scratch_capacity(bigger) == capacity + 0x1_0000
    assert 64 in {c["im2col_pixels"] for c in conv.space(bigger, shape) if c["algo"] == "im2col"}


def test_fused_row_tile_must_fit_the_stack(conv, m55):
    # 4 pixels x 2048 channels x 4 bytes = 32 KiB: more than a quarter of the 16 KiB stack.
    shape = conv.parse_shape("h=2,w=2,cin=1,cout=2048,kh=1,kw=1,stride=1,pad=0,dilation=1")
    fused_im2col = [c for c in conv.space(m55, shape) if c["algo"] == "im2col" and c["fusion"] == "fused"]
    assert fused_im2col == []
    assert any(c["algo"] == "direct" and c["fusion"] == "fused" for c in conv.space(m55, shape))
    small = conv.parse_shape("h=2,w=2,cin=1,cout=64,kh=1,kw=1,stride=1,pad=0,dilation=1")
    assert {c["tile_p"] for c in conv.space(m55, small) if c["algo"] == "im2col" and c["fusion"] == "fused"} == {1, 2, 4}


def test_no_mve_variant_on_the_host(conv, host):
    shape = conv.parse_shape(conv.example_shape())
    assert "mve" not in conv.space(host, shape).param("vector").values


@pytest.mark.qemu
@FEW
@given(shape=shapes, seed=st.integers(0, 2**16), pick=st.integers(0, 2**32), edge=st.sampled_from(["random", "extreme"]))
def test_drawn_variants_are_bit_exact_in_qemu(conv, m55, tmp_path_factory, shape, seed, pick, edge):
    shape = conv.parse_shape(shape)
    space = conv.space(m55, shape)
    legal = space.legal_indices()
    config = space.config_at(int(legal[pick % len(legal)]))
    assert_ok(run_config(conv, m55, shape, config.as_dict(), tmp_path_factory.mktemp("conv"), edge=edge, seed=seed))


EDGE_SHAPES = [
    "h=1,w=1,cin=1,cout=1,kh=1,kw=1,stride=1,pad=0,dilation=1",  # every dimension 1
    "h=7,w=5,cin=3,cout=5,kh=3,kw=3,stride=2,pad=2,dilation=1",  # odd channels, stride 2, pad > 1
    "h=9,w=8,cin=17,cout=7,kh=3,kw=3,stride=1,pad=2,dilation=2",  # dilation 2, K not a multiple of 16
    "h=2,w=3,cin=5,cout=3,kh=1,kw=1,stride=1,pad=3,dilation=1",  # pixels that see only padding
]
VARIANTS = [
    {"algo": "im2col", "vector": "mve", "tile_p": 4, "tile_oc": 2, "im2col_pixels": 8, "fusion": "fused", "compiler": "clang",
     "weight_sums": "precomputed"},
    {"algo": "im2col", "vector": "mve", "tile_p": 2, "tile_oc": 4, "im2col_pixels": 2, "fusion": "unfused", "compiler": "gcc",
     "weight_sums": "in_loop"},
    {"algo": "direct", "vector": "mve", "tile_oc": 4, "fusion": "unfused", "compiler": "gcc"},
    {"algo": "im2col", "vector": "c", "tile_p": 2, "tile_oc": 4, "unroll": 4, "im2col_pixels": 4, "fusion": "unfused",
     "compiler": "gcc", "opt": "O3"},
    {"algo": "direct", "vector": "c", "tile_oc": 2, "unroll": 2, "fusion": "fused", "compiler": "clang", "opt": "Os"},
]


@pytest.mark.qemu
@pytest.mark.parametrize("shape_text", EDGE_SHAPES)
def test_edge_shapes_every_variant_family(conv, m55, tmp_path, shape_text):
    shape = conv.parse_shape(shape_text)
    for index, variant in enumerate(VARIANTS):
        space = conv.space(m55, shape)
        wanted = {k: v for k, v in variant.items()
                  if any(c[k] == v for c in space)}  # tiles clipped to 1-sized dims are dropped
        assert_ok(run_config(conv, m55, shape, wanted, tmp_path, edge=("extreme" if index % 2 else "random"), seed=index))


def test_host_variants_are_bit_exact(conv, host, tmp_path):
    shape = conv.parse_shape("h=6,w=5,cin=7,cout=9,kh=3,kw=2,stride=2,pad=2,dilation=1")
    for variant in ({"algo": "im2col", "tile_p": 4, "tile_oc": 4, "unroll": 4, "compiler": "gcc", "opt": "O3",
                     "fusion": "unfused"},
                    {"algo": "direct", "tile_oc": 2, "compiler": "clang", "opt": "O2", "fusion": "fused"}):
        assert_ok(run_config(conv, host, shape, variant, tmp_path, edge="extreme", seed=3))
