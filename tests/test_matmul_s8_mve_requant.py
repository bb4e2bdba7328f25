"""matmul_s8's Helium requantisation on packed weights, run in QEMU against the numpy reference
on inputs built to catch the ways it can go wrong:

- ties: small operands, so most accumulators requantise into int8's range, and shift -1
  (every odd VQRDMULH result is a tie; ties must go away from zero, negatives down) and
  shifts down to -31;
- the sign fix fused into VQRDMLAH (the sign of the accumulator, not of the product):
  accumulators next to the int32 limits, multipliers 0, 2^30 and 2^31 - 1;
- both signs of the shift, b_zero == 0 (the branch that drops the row term) and b_zero != 0;
- the lane order of the stored outputs: odd N, N not a multiple of 8, blocks of 2 and 4
  quads, tile_m > 1 and a last band of fewer rows."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.codegen.kernels.base import Buffer, KernelIO
from edgetune.evaluate import Evaluator

from kernel_runs import assert_ok, complete

INT32_MAX = (1 << 31) - 1


def small_io(shape, rng, *, b_zero, shift, multiplier, c_zero=3):
    """Operands in [-4, 4] and a small bias: accumulators of a few hundred, most of which land
    inside int8 after requantisation (the rounding is visible, not clamped away)."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    a = rng.integers(-4, 5, size=(m, k), dtype=np.int8)
    b = rng.integers(-4, 5, size=(k, n), dtype=np.int8)
    bias = rng.integers(-200, 201, size=n, dtype=np.int32)
    return make_io(a, b, bias, a_zero=1, b_zero=b_zero, c_zero=c_zero, multiplier=multiplier, shift=shift)


def limit_io(shape, rng, *, b_zero, shift, multiplier):
    """Biases within a few thousand of the int32 limits (half the columns high, half low):
    the accumulators reach them, VQRDMLAH must neither wrap nor lose the sign."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    a = rng.integers(-4, 5, size=(m, k), dtype=np.int8)
    b = rng.integers(-4, 5, size=(k, n), dtype=np.int8)
    margin = 4 * 9 * k + 2000
    bias = np.where(np.arange(n) % 2 == 0, INT32_MAX - margin, -INT32_MAX - 1 + margin).astype(np.int32)
    bias += rng.integers(-1000, 1001, size=n).astype(np.int32)
    return make_io(a, b, bias, a_zero=0, b_zero=b_zero, c_zero=-5, multiplier=multiplier, shift=shift)


def make_io(a, b, bias, **params):
    m, n = a.shape[0], b.shape[1]
    return KernelIO(buffers=(Buffer("a", a), Buffer("b", b, weight=True), Buffer("bias", bias, weight=True),
                             Buffer("c", np.zeros((m, n), np.int8), is_output=True)),
                    params=tuple((name, params[name]) for name in ("a_zero", "b_zero", "c_zero", "multiplier", "shift")))


def run(matmul, m55, shape_text, values, io, tmp_path):
    shape = matmul.parse_shape(shape_text)
    space = matmul.space(m55, shape)
    config = complete(space, {"vector": "mve", "layout": "packed", **values})
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    assert_ok(Evaluator(matmul, m55, shape, space, io, work)(config))


# (shape, tile): unpaired quads, pairs of quads (each stored before the next), N odd and not a
# multiple of 8, tile_m > 1.
TILES = [
    ("m=3,n=13,k=37", {"tile_m": 2, "tile_n": 8, "unroll_k": 2, "compiler": "clang"}),
    ("m=5,n=21,k=48", {"tile_m": 1, "tile_n": 16, "unroll_k": 1, "compiler": "gcc"}),
    ("m=4,n=27,k=100", {"tile_m": 2, "tile_n": 8, "unroll_k": 1, "compiler": "gcc"}),
    ("m=2,n=9,k=20", {"tile_m": 1, "tile_n": 4, "unroll_k": 1, "compiler": "clang"}),
    ("m=5,n=24,k=16", {"tile_m": 2, "tile_n": 8, "unroll_k": 1, "compiler": "clang"}),
    ("m=3,n=45,k=24", {"tile_m": 2, "tile_n": 32, "unroll_k": 1, "compiler": "clang"}),  # 4 pairs, 13 left
    ("m=1,n=70,k=33", {"tile_m": 1, "tile_n": 32, "unroll_k": 2, "compiler": "gcc"}),
]


@pytest.mark.matrix
@pytest.mark.qemu
@pytest.mark.parametrize("shape_text,values", TILES)
@pytest.mark.parametrize("b_zero", [0, -3])
@pytest.mark.parametrize("shift", [-1, -2, -5, 0, 2])
def test_ties_round_away_from_zero_in_every_lane(matmul, m55, shape_text, values, b_zero, shift, tmp_path):
    # 2^30 is one half exactly, so VQRDMULH itself rounds half of the accumulators and the
    # shift's rounding sees many ties; at -5 a multiplier of about 1 keeps outputs in range.
    multiplier = (1 << 31) - 1 if shift < -2 else 1 << 30
    shape = matmul.parse_shape(shape_text)
    io = small_io(shape, np.random.default_rng(abs(shift) + 10 * abs(b_zero)), b_zero=b_zero, shift=shift,
                  multiplier=multiplier)
    assert len(np.unique(matmul.reference(shape, io)[0])) > 4  # outputs not all clamped away
    run(matmul, m55, shape_text, values, io, tmp_path)


@pytest.mark.matrix
@pytest.mark.qemu
@pytest.mark.parametrize("shape_text,values", TILES[:3])
@pytest.mark.parametrize("b_zero", [0, 2])
@pytest.mark.parametrize("shift,multiplier", [(-1, (1 << 31) - 1), (-31, (1 << 31) - 1), (-24, 1 << 30),
                                              (0, (1 << 31) - 1), (-5, 0)])
def test_accumulators_at_the_int32_limits(matmul, m55, shape_text, values, b_zero, shift, multiplier, tmp_path):
    shape = matmul.parse_shape(shape_text)
    io = limit_io(shape, np.random.default_rng(7), b_zero=b_zero, shift=shift, multiplier=multiplier)
    out = matmul.reference(shape, io)[0]  # (raises if an accumulator left int32)
    if multiplier:
        assert len(np.unique(out)) >= 2  # the high and the low columns both reach the output
    run(matmul, m55, shape_text, values, io, tmp_path)
