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

from kernel_runs import assert_ok, run_config

FEW = settings(max_examples=6, derandomize=True, deadline=None, database=None)


def loop_model(shape, io):
    """conv2d_s8 written as the plain definition with Python integers (independent of the
    kernel module's numpy reference), then requantised per channel."""
    from edgetune.codegen.quant import requantize
    x, w, bias, mult, shift = (b.data for b in io.buffers[:5])
    p = dict(io.params)
    s, pad, d = shape["stride"], shape["pad"], shape["dilation"]
    oh = (shape["h"] + 2 * pad - d * (shape["kh"] - 1) - 1) // s + 1
    ow = (shape["w"] + 2 * pad - d * (shape["kw"] - 1) - 1) // s + 1
    out = np.zeros((oh, ow, shape["cout"]), dtype=np.int8)
    for oy in range(oh):
        for ox in range(ow):
            for o in range(shape["cout"]):
                acc = int(bias[o])
                for ky in range(shape["kh"]):
                    for kx in range(shape["kw"]):
                        iy, ix = oy * s - pad + ky * d, ox * s - pad + kx * d
                        if 0 <= iy < shape["h"] and 0 <= ix < shape["w"]:
                            for c in range(shape["cin"]):
                                acc += (int(x[iy, ix, c]) - p["in_zero"]) * int(w[o, ky, kx, c])
                out[oy, ox, o] = requantize(np.array([acc]), int(mult[o]), int(shift[o]), p["out_zero"],
                                            p["act_min"], p["act_max"])[0]
    return out


shapes = st.fixed_dictionaries({
    "h": st.integers(1, 7), "w": st.integers(1, 7), "cin": st.integers(1, 20), "cout": st.integers(1, 9),
    "kh": st.integers(1, 3), "kw": st.integers(1, 3), "stride": st.integers(1, 2), "pad": st.integers(0, 3),
    "dilation": st.integers(1, 2),
}).filter(lambda s: all(s["dilation"] * (s[k] - 1) + 1 <= s[a] + 2 * s["pad"] for k, a in (("kh", "h"), ("kw", "w"))))


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
])
def test_bad_shapes_name_the_problem(conv, text, fragment):
    with pytest.raises(KernelError, match=fragment):
        conv.parse_shape(text)


def test_padding_zero_and_large_padding_are_shapes(conv):
    assert conv.parse_shape("h=3,w=3,cin=1,cout=1,kh=3,kw=3,stride=1,pad=0,dilation=1")["pad"] == 0
    assert conv.parse_shape("h=1,w=1,cin=1,cout=1,kh=1,kw=1,stride=1,pad=4,dilation=1")["pad"] == 4


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
