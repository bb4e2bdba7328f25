"""dwconv2d_s8: the numpy reference against an independent loop model, the space's rules
(3x3 special case only for 3x3 kernels, MVE tiles that fit the HAL's vector registers),
and variants run in QEMU and natively, bit-exact, on drawn and edge shapes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetune.codegen import KernelError
from edgetune.codegen.quant import requantize
from edgetune.model.module import default_config

from kernel_runs import assert_ok, geometry_shapes, run_config


def loop_model(shape, io):
    """TFLite's DEPTHWISE_CONV_2D with Python integers: output channel o = c * mult + m reads
    input channel c; the window of output (oy, ox) starts at oy*stride_h - pad_top,
    ox*stride_w - pad_left."""
    x, w, bias, mult, shift = (b.data for b in io.buffers[:5])
    p = dict(io.params)
    sh, sw, dh, dw = shape["stride_h"], shape["stride_w"], shape["dilation_h"], shape["dilation_w"]
    oh = (shape["h"] + shape["pad_top"] + shape["pad_bottom"] - dh * (shape["kh"] - 1) - 1) // sh + 1
    ow = (shape["w"] + shape["pad_left"] + shape["pad_right"] - dw * (shape["kw"] - 1) - 1) // sw + 1
    out = np.zeros((oh, ow, shape["c"] * shape["mult"]), dtype=np.int8)
    for oy in range(oh):
        for ox in range(ow):
            for c in range(shape["c"]):
                for m in range(shape["mult"]):
                    o = c * shape["mult"] + m
                    acc = int(bias[o])
                    for ky in range(shape["kh"]):
                        for kx in range(shape["kw"]):
                            iy, ix = oy * sh - shape["pad_top"] + ky * dh, ox * sw - shape["pad_left"] + kx * dw
                            if 0 <= iy < shape["h"] and 0 <= ix < shape["w"]:
                                acc += (int(x[iy, ix, c]) - p["in_zero"]) * int(w[ky, kx, o])
                    out[oy, ox, o] = requantize(np.array([acc]), int(mult[o]), int(shift[o]), p["out_zero"],
                                                p["act_min"], p["act_max"])[0]
    return out


shapes = geometry_shapes({"c": st.integers(1, 21), "mult": st.sampled_from([1, 1, 2, 3])})


@settings(max_examples=40, derandomize=True, deadline=None, database=None)
@given(shape=shapes, seed=st.integers(0, 2**16), edge=st.sampled_from(["random", "extreme"]))
def test_reference_matches_the_loop_model(dw, shape, seed, edge):
    shape = dw.parse_shape(shape)
    io = dw.make_io(shape, np.random.default_rng(seed), edge=edge)
    assert np.array_equal(dw.reference(shape, io)[0], loop_model(shape, io))


def test_shape_errors_name_the_key(dw):
    with pytest.raises(KernelError, match="spans 3 along w"):
        dw.parse_shape("h=4,w=1,c=4,kh=1,kw=3,stride=1,pad=0,dilation=1")
    with pytest.raises(KernelError, match="missing 'c'"):
        dw.parse_shape("h=4,w=4,kh=3,kw=3,stride=1,pad=1,dilation=1")


def test_space_rules(dw, m55):
    space_3x3 = dw.space(m55, dw.parse_shape("h=8,w=8,c=16,kh=3,kw=3,stride=1,pad=1,dilation=1"))
    assert {c["taps"] for c in space_3x3} == {"loop", "unrolled3x3", "padded3x3"}
    space_5x5 = dw.space(m55, dw.parse_shape("h=8,w=8,c=16,kh=5,kw=5,stride=1,pad=2,dilation=1"))
    assert {c["taps"] for c in space_5x5} == {"loop"}
    registers = m55.vector_unit("mve").registers
    assert all(c["tile_p"] * c["tile_c"] // 4 + 2 <= registers for c in space_3x3 if c["vector"] == "mve")
    assert any(c["tile_p"] * c["tile_c"] // 4 + 2 > registers for c in space_3x3 if c["vector"] == "c")


@pytest.mark.qemu
@settings(max_examples=6, derandomize=True, deadline=None, database=None)
@given(shape=shapes, seed=st.integers(0, 2**16), pick=st.integers(0, 2**32), edge=st.sampled_from(["random", "extreme"]))
def test_drawn_variants_are_bit_exact_in_qemu(dw, m55, tmp_path_factory, shape, seed, pick, edge):
    shape = dw.parse_shape(shape)
    space = dw.space(m55, shape)
    legal = space.legal_indices()
    config = space.config_at(int(legal[pick % len(legal)]))
    assert_ok(run_config(dw, m55, shape, config.as_dict(), tmp_path_factory.mktemp("dw"), edge=edge, seed=seed))


@pytest.mark.qemu
@pytest.mark.parametrize("shape_text", [
    "h=1,w=1,c=1,kh=1,kw=1,stride=1,pad=0,dilation=1",
    "h=9,w=7,c=13,kh=3,kw=3,stride=2,pad=2,dilation=1",   # 3x3, odd channels, stride 2, pad > 1
    # the slow tier (5 s each): dilation, multipliers 3 and 2 (the per-axis shape below keeps
    # dilation in the default tier, tests/test_dwconv2d_pixels.py the multipliers)
    pytest.param("h=8,w=9,c=5,kh=3,kw=3,stride=1,pad=1,dilation=2", marks=pytest.mark.slow),  # interior, border
    pytest.param("h=8,w=7,c=5,mult=3,kh=3,kw=3,stride=1,pad=1", marks=pytest.mark.slow),  # 15 output channels
    pytest.param("h=6,w=9,c=4,mult=2,kh=3,kw=3,stride_h=2,stride_w=1,pad=same", marks=pytest.mark.slow),
    "h=7,w=8,c=6,kh=3,kw=3,stride_h=1,stride_w=2,dilation_h=2,dilation_w=1,"
    "pad_top=2,pad_bottom=0,pad_left=0,pad_right=1",      # per-axis steps, one-sided padding
])
@pytest.mark.one_case(1)
def test_edge_shapes(dw, m55, tmp_path, shape_text):
    shape = dw.parse_shape(shape_text)
    variants = [{"vector": "mve", "tile_c": 8, "tile_p": 2, "taps": "unrolled3x3", "compiler": "clang"},
                {"vector": "mve", "tile_c": 4, "tile_p": 4, "compiler": "gcc", "opt": "O3"},
                {"vector": "c", "tile_c": 16, "tile_p": 2, "taps": "unrolled3x3", "compiler": "gcc"},
                {"vector": "mve", "tile_c": 16, "tile_p": 1, "layout": "packed", "taps": "unrolled3x3", "compiler": "gcc"},
                {"vector": "c", "tile_c": 8, "tile_p": 2, "layout": "packed", "compiler": "clang"},
                # The input copied with its padding first (3x3 shapes only; others skip these).
                {"vector": "mve", "tile_c": 8, "tile_p": 2, "taps": "padded3x3", "layout": "packed", "compiler": "clang"},
                {"vector": "mve", "tile_c": 4, "tile_p": 4, "taps": "padded3x3", "compiler": "gcc", "opt": "O3"},
                {"vector": "c", "tile_c": 16, "tile_p": 1, "taps": "padded3x3", "layout": "packed", "compiler": "gcc"}]
    space = dw.space(m55, shape)
    for index, variant in enumerate(variants):
        if variant.get("taps") == "padded3x3" and not any(c["taps"] == "padded3x3" for c in space):
            continue
        wanted = {k: v for k, v in variant.items() if any(c[k] == v for c in space)}
        assert_ok(run_config(dw, m55, shape, wanted, tmp_path, edge=("extreme" if index % 2 else "random"), seed=index))


def test_default_configuration_is_helium_pixels_where_offered_and_keeps_the_plain_loop_a_point(dw, m55, m4):
    # The first legal point is what an untuned layer runs and what `model tune` measures
    # first; on the M55 it is the pixel-lane Helium path at clang -O3, with the tap loop, so
    # that the plain loop nest (vector=naive, the same tile values) is still a point of the space.
    shape = dw.parse_shape("h=25,w=5,c=64,kh=3,kw=3,stride=1,pad=1,dilation=1")
    first = default_config(dw, m55, shape)
    assert (first["vector"], first["compiler"], first["opt"], first["taps"]) == ("mve_pixels", "clang", "O3", "loop")
    space = dw.tuning_space(m55, shape)
    assert space.is_legal(space.make({**first.as_dict(), "vector": "naive", "compiler": "gcc", "opt": "O3"}))
    plain = default_config(dw, m4, shape)  # no Helium: plain C, the target's first compiler, -O2
    assert (plain["vector"], plain["compiler"], plain["opt"]) == ("c", m4.compilers[0].name, "O2")


def test_a_padded_copy_larger_than_the_scratch_memory_is_not_offered(dw, m55):
    small = dw.space(m55, dw.parse_shape("h=6,w=6,c=128,kh=3,kw=3,stride=1,pad=1,dilation=1"))
    assert any(c["taps"] == "padded3x3" for c in small)
    large = dw.space(m55, dw.parse_shape("h=96,w=96,c=64,kh=3,kw=3,stride=1,pad=1,dilation=1"))  # 98*98*64 bytes
    assert not any(c["taps"] == "padded3x3" for c in large) and any(c["taps"] == "unrolled3x3" for c in large)


def test_host_variants_are_bit_exact(dw, host, tmp_path):
    shape = dw.parse_shape("h=7,w=6,c=11,kh=3,kw=3,stride=1,pad=2,dilation=1")
    for variant in ({"tile_c": 8, "tile_p": 4, "taps": "unrolled3x3", "compiler": "gcc", "opt": "O3"},
                    {"tile_c": 4, "tile_p": 1, "taps": "loop", "compiler": "clang", "opt": "O2"}):
        assert_ok(run_config(dw, host, shape, variant, tmp_path, edge="extreme", seed=5))
