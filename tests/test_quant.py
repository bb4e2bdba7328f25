"""codegen.quant against an independent scalar model of TFLite's requantisation.

The model below is written from the TFLite / gemmlowp definitions with Python integers,
not from quant.py, so a shared mistake would need to be made twice.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetune.codegen.quant import requantize, rounding_rshift, sat_rdmulh

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

# Deterministic and without deadlines: the suite must not depend on the machine's speed.
CHECK = settings(max_examples=300, derandomize=True, deadline=None, database=None)


# --- the scalar reference ----------------------------------------------------------------------
def wrap_int32(v: int) -> int:
    v &= 0xFFFF_FFFF
    return v - 2**32 if v >= 2**31 else v


def c_div(a: int, b: int) -> int:
    """C's `/` on integers: the quotient truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def ref_srdhm(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul."""
    if a == INT32_MIN and b == INT32_MIN:
        return INT32_MAX  # the one product whose doubled high half does not fit
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return c_div(ab + nudge, 1 << 31)


def ref_rdbpot(x: int, exponent: int) -> int:
    """gemmlowp RoundingDivideByPOT: round to nearest, ties away from zero."""
    mask = (1 << exponent) - 1
    remainder = x & mask  # Python's & on negatives is two's complement: the low bits
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def ref_requantize(acc: int, multiplier: int, shift: int, zero: int) -> int:
    left, right = max(shift, 0), max(-shift, 0)
    x = wrap_int32(acc << left)  # the kernels shift as uint32 and reinterpret
    x = ref_srdhm(x, multiplier)
    if right:
        x = ref_rdbpot(x, right)
    return min(max(x + zero, -128), 127)


# Sanity of the model itself on values worked out by hand.
def test_reference_model_by_hand():
    assert c_div(-7, 2) == -3 and c_div(7, -2) == -3 and c_div(-8, 2) == -4
    assert ref_srdhm(1, 1 << 30) == 1  # +0.5 rounds up
    assert ref_srdhm(-1, 1 << 30) == 0  # -0.5 rounds up too (gemmlowp's nudge)
    assert ref_srdhm(INT32_MAX, INT32_MAX) == INT32_MAX - 1
    assert [ref_rdbpot(x, 1) for x in (-3, -2, -1, 1, 2, 3)] == [-2, -1, -1, 1, 1, 2]
    assert ref_rdbpot(-5, 2) == -1 and ref_rdbpot(-6, 2) == -2  # -1.25 -> -1, -1.5 -> -2


# --- requantize == the model -------------------------------------------------------------------
int32s = st.integers(INT32_MIN, INT32_MAX)
multipliers = st.integers(0, INT32_MAX)
shifts = st.integers(-31, 7)
zeros = st.integers(-128, 127)


def expected(accs, multiplier, shift, zero) -> list[int]:
    return [ref_requantize(a, multiplier, shift, zero) for a in accs]


@CHECK
@given(acc=int32s, multiplier=multipliers, shift=shifts, zero=zeros)
def test_requantize_scalar_matches_reference(acc, multiplier, shift, zero):
    got = requantize(np.array([acc]), multiplier, shift, zero)
    assert got.dtype == np.int8
    assert got.tolist() == expected([acc], multiplier, shift, zero)


@CHECK
@given(accs=st.lists(int32s, min_size=1, max_size=32), multiplier=multipliers, shift=shifts, zero=zeros)
def test_requantize_array_matches_reference(accs, multiplier, shift, zero):
    got = requantize(np.array(accs, dtype=np.int64).reshape(len(accs), 1), multiplier, shift, zero)
    assert got.shape == (len(accs), 1)  # shape is kept (the kernel's C matrix)
    assert got.ravel().tolist() == expected(accs, multiplier, shift, zero)


# Small accumulators and normalised multipliers are the realistic case: the values land
# inside [-128, 127] rather than at the clamps, so rounding is actually observed.
@CHECK
@given(acc=st.integers(-(1 << 20), 1 << 20), multiplier=st.integers(1 << 30, INT32_MAX),
       shift=st.integers(-20, 1), zero=zeros)
def test_requantize_matches_reference_in_the_unclamped_range(acc, multiplier, shift, zero):
    assert requantize(np.array([acc]), multiplier, shift, zero).tolist() == [ref_requantize(acc, multiplier, shift, zero)]


EDGE_ACCS = [0, 1, -1, 2, -2, 3, -3, 255, -256, 1 << 30, -(1 << 30), INT32_MAX, INT32_MIN, INT32_MIN + 1]
EDGE_MULTIPLIERS = [0, 1, 1 << 30, (1 << 30) + 1, INT32_MAX - 1, INT32_MAX]
EDGE_SHIFTS = [-31, -30, -16, -2, -1, 0, 1, 2, 7]
EDGE_ZEROS = [-128, -1, 0, 1, 127]


@pytest.mark.parametrize("multiplier, shift", list(itertools.product(EDGE_MULTIPLIERS, EDGE_SHIFTS)))
def test_requantize_edges_match_reference(multiplier, shift):
    for zero in EDGE_ZEROS:
        got = requantize(np.array(EDGE_ACCS), multiplier, shift, zero).tolist()
        assert got == expected(EDGE_ACCS, multiplier, shift, zero), (multiplier, shift, zero)


def test_exact_ties_round_away_from_zero():
    # INT32_MAX as multiplier is x * (1 - 2^-31): the high multiply keeps small x exactly,
    # so the right shift sees the tie itself: -1.5 -> -2, 1.5 -> 2, -0.5 -> -1, -2.5 -> -3.
    accs = [-3, 3, -1, 1, -5, 5, 0]
    assert requantize(np.array(accs), INT32_MAX, -1, 0).tolist() == [-2, 2, -1, 1, -3, 3, 0]
    assert expected(accs, INT32_MAX, -1, 0) == [-2, 2, -1, 1, -3, 3, 0]


def test_hand_computed_values():
    assert requantize(np.array([0]), 1 << 30, -3, 17).tolist() == [17]  # zero in, zero point out
    assert requantize(np.array([INT32_MAX, INT32_MIN]), INT32_MAX, 0, 0).tolist() == [127, -128]
    # 1000 * 0.5 / 2^3 = 62.5 -> 63 (tie away from zero), then + zero point -10.
    assert requantize(np.array([1000, -1000]), 1 << 30, -3, -10).tolist() == [53, -73]
    # The left shift wraps like the C kernels' uint32 shift: 2^30 << 1 becomes INT32_MIN.
    assert requantize(np.array([1 << 30]), INT32_MAX, 1, 0).tolist() == [-128]


def test_zero_multiplier_gives_the_zero_point():
    accs = np.array([INT32_MIN, -1, 0, 1, INT32_MAX])
    assert requantize(accs, 0, -5, -7).tolist() == [-7] * 5


def test_clamp_bounds_are_parameters():
    got = requantize(np.array([-1000, 0, 1000]), 1 << 30, 0, 0, lo=-6, hi=6)
    assert got.tolist() == [-6, 0, 6]


# --- the building blocks ----------------------------------------------------------------------------
@CHECK
@given(a=int32s, b=int32s)
def test_sat_rdmulh_matches_reference_over_full_int32(a, b):
    assert int(sat_rdmulh(np.array([a]), b)[0]) == ref_srdhm(a, b)


def test_sat_rdmulh_saturates_int32_min_squared():
    got = sat_rdmulh(np.array([INT32_MIN, INT32_MAX, -1, 0]), INT32_MIN)
    assert got.tolist() == [INT32_MAX, ref_srdhm(INT32_MAX, INT32_MIN), ref_srdhm(-1, INT32_MIN), 0]


@CHECK
@given(x=int32s, exponent=st.integers(1, 31))
def test_rounding_rshift_matches_reference(x, exponent):
    assert int(rounding_rshift(np.array([x]), exponent)[0]) == ref_rdbpot(x, exponent)


# --- limits ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("accs", [[INT32_MAX + 1], [INT32_MIN - 1], [0, 5, 2**40], [-(2**33), 0]])
def test_accumulator_outside_int32_is_an_overflow(accs):
    with pytest.raises(OverflowError):
        requantize(np.array(accs, dtype=np.int64), 1 << 30, -1, 0)


def test_empty_input_gives_empty_output():
    got = requantize(np.array([], dtype=np.int64), 1 << 30, -1, 0)
    assert got.shape == (0,) and got.dtype == np.int8


# --- one multiplier and shift per channel, in one pass -----------------------------------------
@CHECK
@given(data=st.data(), rows=st.integers(1, 4), channels=st.integers(1, 6), zero=zeros)
def test_per_channel_requantize_matches_the_reference_channel_by_channel(data, rows, channels, zero):
    """Each channel (the last axis) gets its own multiplier and shift, as if requantised alone:
    left and right shifts, the INT32_MIN product and the clamps mixed across channels."""
    from edgetune.codegen.quant import requantize_per_channel

    accs = data.draw(st.lists(st.lists(int32s, min_size=channels, max_size=channels), min_size=rows, max_size=rows))
    channel_multipliers = data.draw(st.lists(st.integers(INT32_MIN, INT32_MAX), min_size=channels, max_size=channels))
    channel_shifts = data.draw(st.lists(shifts, min_size=channels, max_size=channels))
    got = requantize_per_channel(np.array(accs, dtype=np.int64), np.array(channel_multipliers),
                                 np.array(channel_shifts), zero)
    want = [[ref_requantize(a, m, s, zero) for a, m, s in zip(row, channel_multipliers, channel_shifts)]
            for row in accs]
    assert got.dtype == np.int8 and got.tolist() == want
