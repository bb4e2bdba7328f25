"""The Helium requantisation forms of conv2d_s8 and dwconv2d_s8 (issue 19): each call picks the
fast form (every shift <= 0 and an int8 out_zero: no left shift, saturating narrowing in place
of the clamps, the clamps kept where the activation range is narrower than int8) or the
general one. Every case below is judged bit-exact against the numpy reference (TFLite's
arithmetic), and against TFLite Micro on layers with real quantisation; the quantisation is
chosen so that a wrong choice of form or a wrong narrowing changes outputs: left shifts
mixed in among right shifts, shifts of 0 beside negative ones (the tie fix must skip them),
shifts of -1 (half of all values are ties), fused ReLU clamps, and accumulators that scale
past int16 in both directions with out_zero at the int8 limits."""
from __future__ import annotations

import importlib
from dataclasses import replace
from unittest import mock

import numpy as np
import pytest

from edgetune.evaluate import Evaluator

from kernel_checks import run_against_tflm
from kernel_runs import assert_ok, complete


def _shifts(rng, n, case):
    if case == "mixed signs":  # mostly right shifts, a few left ones: the general form
        shift = rng.integers(-9, 0, size=n)
        shift[rng.permutation(n)[:max(1, n // 4)]] = rng.integers(1, 4, size=max(1, n // 4))
        return shift
    if case == "zeros among negatives":
        return np.where(rng.random(n) < 0.5, 0, rng.integers(-6, 0, size=n))
    if case == "all zero":
        return np.zeros(n, dtype=np.int64)
    if case == "ties":
        return np.full(n, -1)
    return rng.integers(-10, 0, size=n)  # "all negative", "relu", "saturation"


def accumulators(kernel, shape, io) -> np.ndarray:
    """The int32 accumulators (bias included) of the kernel's numpy reference on io."""
    module = importlib.import_module(type(kernel).__module__)
    seen = {}
    with mock.patch.object(module, "requantize_per_channel", lambda acc, *rest: seen.setdefault("acc", acc)):
        kernel.reference(shape, io)
    return seen["acc"]


def quantised(kernel, shape, case, seed):
    """The kernel's own random inputs with the case's quantisation. Outside "saturation" each
    channel's bias centres its accumulators and its multiplier is set for its shift so that
    outputs spread over int8 instead of saturating, and the low bits a wrong form would get
    wrong show; "saturation" scales by about 1 with out_zero at an int8 limit, far past int16."""
    rng = np.random.default_rng(seed)
    io = kernel.make_io(shape, rng, edge="random")
    by_name = {b.name: b for b in io.buffers}
    n = by_name["shift"].data.size
    shift = _shifts(rng, n, case)
    out_zero = int(rng.integers(-100, 100))
    lo, hi = (max(out_zero, -128), 127) if case == "relu" else (-128, 127)
    if case == "saturation":
        out_zero = int(rng.choice([-128, 127]))
        data = {"bias": rng.choice(np.array([-(1 << 28), (1 << 28)]), size=n),
                "multiplier": np.full(n, (1 << 31) - 1), "shift": rng.integers(-3, 1, size=n)}
    else:
        acc = accumulators(kernel, shape, io).reshape(-1, n)
        bias = by_name["bias"].data.astype(np.int64) - np.round(acc.mean(axis=0)).astype(np.int64)
        spread = np.maximum(np.abs(acc - acc.mean(axis=0)).max(axis=0), 1.0)
        scale = 150.0 / spread  # outputs about +-150: mostly in range, some saturating
        multiplier = np.clip(np.round(scale * 2.0 ** (31 - shift)), 1, (1 << 31) - 1)
        data = {"bias": bias, "multiplier": multiplier, "shift": shift}
    buffers = tuple(replace(b, data=data[b.name].astype(b.data.dtype)) if b.name in data else b for b in io.buffers)
    params = {**dict(io.params), "out_zero": out_zero, "act_min": lo, "act_max": hi}
    return replace(io, buffers=buffers, params=tuple((k, params[k]) for k, _ in io.params))


CASES = ["all negative", "relu", "zeros among negatives", "all zero", "ties", "mixed signs", "saturation"]
CONV = [
    ("h=5,w=4,cin=8,cout=16,kh=1,kw=1,stride=1,pad=0,dilation=1",
     {"algo": "im2col", "vector": "mve", "tile_p": 2, "tile_oc": 3, "fusion": "fused", "compiler": "clang"}),
    ("h=4,w=5,cin=5,cout=12,kh=3,kw=3,stride=1,pad=1,dilation=1",  # eight fast channels, four general
     {"algo": "im2col", "vector": "mve", "tile_p": 1, "tile_oc": 2, "fusion": "unfused", "compiler": "gcc"}),
    ("h=6,w=3,cin=3,cout=9,kh=3,kw=3,stride=2,pad=1,dilation=1",
     {"algo": "im2col", "vector": "mve", "layout": "packed", "fusion": "fused", "compiler": "gcc"}),
]
DEPTHWISE = [
    ("h=5,w=6,c=12,kh=3,kw=3,stride=1,pad=1,dilation=1",
     {"vector": "mve", "tile_c": 8, "tile_p": 2, "taps": "unrolled3x3", "compiler": "clang"}),  # pairs and singles
    ("h=7,w=5,c=6,mult=2,kh=3,kw=3,stride=2,pad=1,dilation=1",
     {"vector": "mve", "tile_c": 4, "tile_p": 1, "taps": "padded3x3", "layout": "packed", "compiler": "gcc"}),
    ("h=5,w=13,c=5,kh=3,kw=3,stride=1,pad=1,dilation=1",  # a row of 13: one pair, one four, a tail of one
     {"vector": "mve_pixels", "tile_p": 1, "taps": "unrolled3x3", "compiler": "clang"}),
    ("h=25,w=5,c=3,kh=3,kw=3,stride=1,pad=1,dilation=1",  # lanes along the height, 25 of them
     {"vector": "mve_pixels", "tile_p": 2, "taps": "loop", "compiler": "gcc"}),
]


def run_case(kernel, target, shape_text, values, case, work, seed=0):
    shape = kernel.parse_shape(shape_text)
    space = kernel.space(target, shape)
    io = quantised(kernel, shape, case, seed)
    return Evaluator(kernel, target, shape, space, io, work)(complete(space, values))


@pytest.mark.matrix
@pytest.mark.qemu
@pytest.mark.parametrize("name, variants", [("conv", CONV), ("dw", DEPTHWISE)])
@pytest.mark.parametrize("case", CASES)
def test_every_form_is_bit_exact(request, m55, tmp_path, name, variants, case):
    kernel = request.getfixturevalue(name)
    for index, (shape_text, values) in enumerate(variants):
        assert_ok(run_case(kernel, m55, shape_text, values, case, tmp_path, seed=index))


@pytest.mark.qemu
@pytest.mark.parametrize("name, variants", [("conv", CONV), ("dw", DEPTHWISE)])
def test_right_shifts_only_take_the_shorter_form(request, m55, tmp_path, name, variants):
    """The same variant on the same accumulators executes fewer instructions when every
    shift is <= 0 than when one channel shifts left: the branch is taken once per call.
    (Counts are exact and deterministic in QEMU; channels-across variants only, whose form
    depends on the shifts.)"""
    kernel = request.getfixturevalue(name)
    for shape_text, values in variants:
        if values["vector"] != "mve":
            continue
        fast = run_case(kernel, m55, shape_text, values, "all negative", tmp_path)
        general = run_case(kernel, m55, shape_text, values, "mixed signs", tmp_path)
        assert_ok(fast)
        assert_ok(general)
        assert fast.values["instructions"] < general.values["instructions"]


@pytest.mark.qemu
@pytest.mark.parametrize("name, shape_text, values", [
    ("conv", "h=6,w=5,cin=4,cout=16,kh=3,kw=3,stride=1,pad=1,dilation=1",
     {"algo": "im2col", "vector": "mve", "tile_p": 2, "fusion": "fused", "compiler": "clang"}),
    ("conv", "h=5,w=5,cin=8,cout=10,kh=1,kw=1,stride=1,pad=0,dilation=1",
     {"algo": "im2col", "vector": "mve", "layout": "packed", "fusion": "unfused", "compiler": "gcc"}),
    ("dw", "h=7,w=9,c=12,kh=3,kw=3,stride=1,pad=1,dilation=1",
     {"vector": "mve", "tile_c": 8, "tile_p": 2, "taps": "unrolled3x3", "compiler": "clang"}),
    ("dw", "h=9,w=11,c=4,kh=3,kw=3,stride=1,pad=1,dilation=1",
     {"vector": "mve_pixels", "tile_p": 1, "taps": "unrolled3x3", "compiler": "gcc"}),
])
def test_real_tflite_quantisation_equals_tflite_micro(request, m55, tmp_path, name, shape_text, values):
    """Layers with TFLite's own quantisation (right shifts only: the fast form), random and
    saturating, judged by TFLite Micro."""
    kernel = request.getfixturevalue(name)
    rng = np.random.default_rng(1919)
    shape = kernel.parse_shape(shape_text)
    space = kernel.space(m55, shape)
    for edge in ("random", "extreme"):
        assert_ok(run_against_tflm(kernel, m55, shape, complete(space, values), tmp_path, rng, edge=edge))


def test_the_helium_direct_tile_keeps_its_pixel_row_within_the_stack(conv, m55):
    """The Helium direct tile requantises a pixel's cout accumulators from a stack row, so it
    is offered only where cout int32 fit a quarter of the stack; the plain-C one keeps none."""
    def direct_fused(text):
        return {c["vector"] for c in conv.space(m55, conv.parse_shape(text))
                if c["algo"] == "direct" and c["fusion"] == "fused" and c["layout"] == "ohwi"}
    large = direct_fused("h=2,w=2,cin=1,cout=2048,kh=1,kw=1,stride=1,pad=0,dilation=1")  # 8 KiB > 4 KiB
    assert "c" in large and "mve" not in large
    assert {"c", "mve"} <= direct_fused("h=2,w=2,cin=1,cout=64,kh=1,kw=1,stride=1,pad=0,dilation=1")
