"""Element-wise int8 operators whose output depends on one input value only: LOGISTIC, TANH,
HARD_SWISH and LEAKY_RELU. Each computes TFLite Micro's int8 arithmetic in numpy (below, per
operator); the C looks the result up in a table of the 256 possible outputs that this
arithmetic gives, built at export. The table is exact by construction (every input value is
in it), so the C is as exact as the numpy arithmetic, which is checked bit for bit against
TFLite Micro (tests/test_ops_lookup.py). On Helium, 16 values a step are looked up with one
gather load (VLDRB.U8 with byte offsets).

LOGISTIC and TANH (TFLite Micro's reference_integer_ops, gemmlowp's fixed point): the input
less its zero point, if inside the radius where the result is not already saturated, is
scaled to a Q4.27 number by (m, left shift) = s_in * 2^27 split by frexp; then
  logistic(a) = 1 / (1 + exp(-|a|)) for a > 0, 1 - that for a < 0, 1/2 at 0 (Q0.31);
  tanh(a) = (1 - exp(-2|a|)) / (1 + exp(-2|a|)) with a's sign, 0 at 0 (Q0.31);
exp on non-positive values and the Newton-Raphson reciprocal are SOFTMAX's (softmax.py). The
Q0.31 result is rounded to 8 fraction bits (LOGISTIC, then less 128) or 7 (TANH), saturated.
TFLite requires LOGISTIC's output at scale 1/256 and zero point -128, TANH's at 1/128 and 0.

HARD_SWISH (TFLite's reference_ops::HardSwish, int16 fixed point): x * relu6(x + 3) / 6 with
the input on a "hi-res" scale s_in / 128, the output multiplier and the "relu-ish" multiplier
(the input rescaled so that 3.0 is 32768) as int16 fixed-point numbers.

LEAKY_RELU (reference_ops::QuantizeLeakyRelu): x - z_in scaled by s_in / s_out where it is
>= 0, by s_in * alpha / s_out below, plus z_out, saturated.
"""
from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass, fields

import numpy as np

from ..arithmetic import quantize_multiplier, round_half_away
from ..graph import Graph, Operator
from .base import ElementWise, OperatorReader, int8_input, one_to_one, scale, zero_point
from .fixedpoint import INT32_MAX, c_divide, multiply_by_quantized_multiplier, rounding_divide_by_pot, sat_rdmulh, wrap32
from .softmax import exp_on_negative_values, one_over_one_plus_x, rescale

INT8_VALUES = np.arange(-128, 128, dtype=np.int64)
INPUT_INTEGER_BITS = 4  # LOGISTIC's and TANH's input is a Q4.27 number
INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1


@dataclass(frozen=True)
class LookupOp(ElementWise):
    """An element-wise operator as a table of its 256 results."""

    template = "lookup.c.j2"

    @abstractmethod
    def values(self, x: np.ndarray) -> np.ndarray:
        """TFLite Micro's int8 output for int8 input values (int64 arrays)."""

    def table(self) -> tuple[int, ...]:
        return tuple(int(v) for v in self.values(INT8_VALUES))

    def reference(self, x) -> np.ndarray:
        x = int8_input(x, (self.elements,), "input").astype(np.int64)
        return self.values(x).astype(np.int8)

    def describe(self) -> str:
        return ", ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self) if f.name != "index")

    def variables(self) -> dict:
        return dict(super().variables(), table=self.table(), op_name=self.op)


# --- LOGISTIC and TANH -----------------------------------------------------------------------
@dataclass(frozen=True)
class SigmoidLike(LookupOp):
    """LOGISTIC's and TANH's shared input stage: the zero point, the radius beyond which the
    output saturates, and the multiplier to Q4.27."""

    zero_in: int
    multiplier: int
    left_shift: int
    radius: int

    def q4(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(x - zero point, that value in Q4.27 where it lies inside the radius)."""
        d = x - self.zero_in
        inside = np.clip(d, -self.radius + 1, self.radius - 1)  # outside values are saturated anyway
        return d, multiply_by_quantized_multiplier(inside, self.multiplier, self.left_shift)

    def saturated(self, d: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where(d <= -self.radius, -128, np.where(d >= self.radius, 127, y))


@dataclass(frozen=True)
class LogisticParams(SigmoidLike):
    op = "LOGISTIC"

    def values(self, x: np.ndarray) -> np.ndarray:
        d, a = self.q4(x)
        positive = exp_on_negative_values(wrap32(-np.abs(a)), INPUT_INTEGER_BITS)
        if_positive = one_over_one_plus_x(positive)
        q0 = np.where(a == 0, 1 << 30, np.where(a > 0, if_positive, wrap32(INT32_MAX - if_positive)))
        y = np.clip(rounding_divide_by_pot(q0, 31 - 8) - 128, -128, 127)
        return self.saturated(d, y)


def _newton_one_minus_x_over_one_plus_x(x: np.ndarray) -> np.ndarray:
    """(1 - x) / (1 + x) for x in [0, 1] in Q0.31: 1 / (1 + x) (the Newton-Raphson steps of
    one_over_one_plus_x, before its last rescaling) doubled, less one."""
    from .softmax import FORTY_EIGHT_SEVENTEENTHS, MINUS_THIRTY_TWO_SEVENTEENTHS, NEWTON_STEPS
    total = np.asarray(x, dtype=np.int64) + INT32_MAX
    half = np.where(total >= 0, (total + 1) // 2, -((-total + 1) // 2))  # rounded half sum, C division
    y = wrap32(FORTY_EIGHT_SEVENTEENTHS + sat_rdmulh(half, MINUS_THIRTY_TWO_SEVENTEENTHS))  # Q2.29
    for _ in range(NEWTON_STEPS):
        error = wrap32((1 << 29) - sat_rdmulh(half, y))
        y = wrap32(y + rescale(sat_rdmulh(y, error), 4, 2))
    return rescale(wrap32(y - (1 << 29)), 2, 0)


@dataclass(frozen=True)
class TanhParams(SigmoidLike):
    op = "TANH"

    def values(self, x: np.ndarray) -> np.ndarray:
        d, a = self.q4(x)
        n = wrap32(-np.abs(a))  # the non-positive one of a and -a
        t = _newton_one_minus_x_over_one_plus_x(exp_on_negative_values(n, INPUT_INTEGER_BITS + 1))  # exp(2n)
        q0 = np.where(a == 0, 0, np.where(a < 0, wrap32(-t), t))
        y = np.clip(rounding_divide_by_pot(q0, 31 - 7), -128, 127)
        return self.saturated(d, y)


def _sigmoid_like(kind: type[SigmoidLike], graph: Graph, op: Operator, out_scale: float, out_zero: int) -> SigmoidLike:
    r = OperatorReader(graph, op)
    x, y = one_to_one(r)
    if not (math.isclose(scale(y), out_scale, rel_tol=1e-6) and zero_point(y) == out_zero):
        raise r.fail(f"output tensor {y.index} ({y.name}) has scale {scale(y):g} and zero point {zero_point(y)}; "
                     f"TFLite's int8 {op.op} needs {out_scale:g} and {out_zero}")
    # TFLite Micro in double: s_in * 2^(31 - 4), its frexp fraction rounded to Q31.
    fraction, left_shift = math.frexp(scale(x) * (1 << (31 - INPUT_INTEGER_BITS)))
    multiplier = int(wrap32(round_half_away(fraction * (1 << 31))))
    if not 0 <= left_shift <= 31 - INPUT_INTEGER_BITS:
        raise r.fail(f"input tensor {x.index} ({x.name}) has scale {scale(x):g}, outside what TFLite's {op.op} takes")
    limit = ((1 << INPUT_INTEGER_BITS) - 1) * (1 << (31 - INPUT_INTEGER_BITS)) / (1 << left_shift)
    return kind(op.index, x.elements, zero_point(x), multiplier, left_shift, int(math.floor(limit)))


def logistic_params(graph: Graph, op: Operator) -> LogisticParams:
    return _sigmoid_like(LogisticParams, graph, op, 1.0 / 256, -128)


def tanh_params(graph: Graph, op: Operator) -> TanhParams:
    return _sigmoid_like(TanhParams, graph, op, 1.0 / 128, 0)


# --- HARD_SWISH ------------------------------------------------------------------------------
def _int16_rdmulh(a, b) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int16."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    product = a * b
    nudge = np.where(product >= 0, 1 << 14, 1 - (1 << 14))
    total = product + nudge
    high = c_divide(total, 1 << 15)
    return np.where((a == INT16_MIN) & (b == INT16_MIN), INT16_MAX, high)


def _int16_dmulh(a, b) -> np.ndarray:
    """TFLite's SaturatingDoublingHighMul on int16: no rounding, truncated toward zero."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    product = a * b
    high = c_divide(product, 1 << 15)  # truncated toward zero
    return np.where((a == INT16_MIN) & (b == INT16_MIN), INT16_MAX, high)


def _int16_saturating_left_shift(x, amount: int) -> np.ndarray:
    return np.clip(np.asarray(x, dtype=np.int64) << amount, INT16_MIN, INT16_MAX)


def _int16_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier, then DownScaleInt32ToInt16Multiplier: a Q15 multiplier."""
    q31, exponent = quantize_multiplier(real)
    if q31 >= INT32_MAX - (1 << 15):
        return INT16_MAX, exponent
    return (q31 + (1 << 15)) >> 16, exponent


@dataclass(frozen=True)
class HardSwishParams(LookupOp):
    zero_in: int
    zero_out: int
    output_multiplier: int  # Q15
    output_exponent: int  # <= 0
    reluish_multiplier: int  # Q15
    reluish_exponent: int

    op = "HARD_SWISH"

    def values(self, x: np.ndarray) -> np.ndarray:
        hires = (x - self.zero_in) * (1 << 7)
        preshift_output = _int16_rdmulh(hires, self.output_multiplier)
        reluish = hires
        if self.reluish_exponent > 0:
            reluish = _int16_saturating_left_shift(reluish, self.reluish_exponent - 1)
        reluish = _int16_rdmulh(reluish, self.reluish_multiplier)
        if self.reluish_exponent > 0:
            reluish = _int16_saturating_left_shift(reluish, 1)
        if self.reluish_exponent < 0:
            reluish = rounding_divide_by_pot(reluish, -self.reluish_exponent)
        reluish = (reluish + (1 << 15)) >> 1  # from [-1, 1] to [0, 1]
        output = rounding_divide_by_pot(_int16_dmulh(reluish, preshift_output), -self.output_exponent)
        return np.clip(output + self.zero_out, -128, 127)


def hard_swish_params(graph: Graph, op: Operator) -> HardSwishParams:
    r = OperatorReader(graph, op)
    x, y = one_to_one(r)
    # TFLite computes these two in float32.
    hires_scale = np.float32(1.0 / 128.0) * np.float32(scale(x))
    output_multiplier, output_exponent = _int16_multiplier(float(hires_scale / np.float32(scale(y))))
    reluish_multiplier, reluish_exponent = _int16_multiplier(float(hires_scale / np.float32(3.0 / 32768.0)))
    if output_exponent > 0:
        raise r.fail(f"the output's scale {scale(y):g} is below the input's / 128 ({float(hires_scale):g}): "
                     "TFLite's HARD_SWISH needs an output multiplier below one")
    if not -15 <= reluish_exponent <= 15:
        raise r.fail(f"input tensor {x.index} ({x.name}) has scale {scale(x):g}, outside what HARD_SWISH takes")
    return HardSwishParams(op.index, x.elements, zero_point(x), zero_point(y), output_multiplier, output_exponent,
                           reluish_multiplier, reluish_exponent)


# --- LEAKY_RELU ------------------------------------------------------------------------------
@dataclass(frozen=True)
class LeakyReluParams(LookupOp):
    zero_in: int
    zero_out: int
    identity_multiplier: int
    identity_shift: int
    alpha_multiplier: int
    alpha_shift: int

    op = "LEAKY_RELU"

    def values(self, x: np.ndarray) -> np.ndarray:
        d = x - self.zero_in
        identity = multiply_by_quantized_multiplier(d, self.identity_multiplier, self.identity_shift)
        alpha = multiply_by_quantized_multiplier(d, self.alpha_multiplier, self.alpha_shift)
        return np.clip(np.where(d >= 0, identity, alpha) + self.zero_out, -128, 127)


def leaky_relu_params(graph: Graph, op: Operator, reader: OperatorReader | None = None) -> LeakyReluParams:
    """LEAKY_RELU's parameters; with `reader`, whose caller checked the tensors (leaky_relu16.py: int16), any type."""
    r = reader or OperatorReader(graph, op)
    x, y = (r.tensor(0), r.tensor(0, output=True)) if reader else one_to_one(r)
    alpha = float(op.option("alpha", 0.0))
    # TFLite Micro: the alpha factor in float32, the identity factor in float32, both then as double.
    alpha_real = float(np.float32(scale(x)) * np.float32(alpha) / np.float32(scale(y)))
    identity_real = float(np.float32(scale(x)) / np.float32(scale(y)))
    if alpha_real < 0:
        raise r.fail(f"alpha {alpha:g} is negative; edgetune's LEAKY_RELU takes alpha >= 0")
    identity_multiplier, identity_shift = quantize_multiplier(identity_real)
    alpha_multiplier, alpha_shift = quantize_multiplier(alpha_real)
    if max(identity_shift, alpha_shift) > 30:
        raise r.fail(f"the rescaling factor from tensor {x.index} to tensor {y.index} is too large")
    return LeakyReluParams(op.index, x.elements, zero_point(x), zero_point(y), identity_multiplier, identity_shift,
                           alpha_multiplier, alpha_shift)


# --- RSQRT -----------------------------------------------------------------------------------
RSQRT_SHIFT = 20  # TFLite Micro's headroom: 1/sqrt(x) is computed as a number times 2^20
HALF_SQRT_2 = 1518500250  # sqrt(2) / 2 in Q0.31, gemmlowp's constant


def _sat_rdmulh(a: int, b: int) -> int:
    return int(sat_rdmulh(a, b))


def _rescale_up(x: int, bits: int) -> int:
    """gemmlowp's Rescale to fewer integer bits: a saturating left shift."""
    return int(np.clip(x << bits, -(1 << 31), INT32_MAX))


def inverse_sqrt_multiplier(value: int) -> tuple[int, int]:
    """TFLite's GetInvSqrtQuantizedMultiplierExp(value, reverse_shift=-1): (multiplier, shift)
    with 1/sqrt(value) = multiplier * 2^shift / 2^31, by five Newton-Raphson steps in Q3.28
    from 1 on the value normalised to [2^27, 2^29) by pairs of bits."""
    if value <= 1:
        return INT32_MAX, 0
    shift = 11
    while value >= 1 << 29:
        value //= 4
        shift += 1
    pairs = (31 - value.bit_length()) // 2 - 1  # (leading zeros - 1) // 2, less one
    shift -= pairs
    value <<= 2 * pairs
    half_input = int(rounding_divide_by_pot(value >> 1, 1))  # F3 input, times 1/2
    half_three = (1 << 28) + (1 << 27)  # 1.5 in Q3.28
    x = 1 << 28  # 1 in Q3.28
    for _ in range(5):
        x3 = _rescale_up(_sat_rdmulh(_sat_rdmulh(x, x), x), 6)  # x^3: F9 back to F3
        x = _rescale_up(int(wrap32(_sat_rdmulh(half_three, x) - _sat_rdmulh(half_input, x3))), 3)
    x = _sat_rdmulh(x, HALF_SQRT_2)
    if shift < 0:
        x = int(wrap32(x << -shift))
        shift = 0
    return x, -shift


@dataclass(frozen=True)
class RsqrtParams(LookupOp):
    zero_in: int
    zero_out: int
    multiplier: int  # 1 / (sqrt(s_in) * s_out)
    shift: int

    op = "RSQRT"

    def values(self, x: np.ndarray) -> np.ndarray:
        out = []
        for value in (int(v) - self.zero_in for v in np.asarray(x).reshape(-1)):
            if value <= 0:
                # 0: TFLite Micro's largest output; below 0 TFLite Micro fails (RSQRT of a
                # negative number), so any value does and the largest is kept
                out.append(127)
                continue
            m, e = inverse_sqrt_multiplier(value)
            data = int(multiply_by_quantized_multiplier(1, m, e + RSQRT_SHIFT))
            y = int(multiply_by_quantized_multiplier(data, self.multiplier, self.shift - RSQRT_SHIFT)) + self.zero_out
            out.append(min(max(y, -128), 127))
        return np.asarray(out, dtype=np.int64).reshape(np.shape(x))


def rsqrt_multiplier(r: OperatorReader, s_in: float, s_out: float) -> tuple[int, int]:
    """RSQRT's output multiplier 1 / (sqrt(s_in) * s_out) (TFLite Micro: sqrt and the product
    in float32, the reciprocal in double), refused out of range."""
    real = 1.0 / float(np.sqrt(np.float32(s_in)) * np.float32(s_out))
    multiplier, shift = quantize_multiplier(real)
    if not -31 + RSQRT_SHIFT <= shift <= 30:
        raise r.fail(f"the rescaling factor {real:g} (input scale {s_in:g}, output {s_out:g}) is out of range")
    return multiplier, shift


def rsqrt_params(graph: Graph, op: Operator) -> RsqrtParams:
    r = OperatorReader(graph, op)
    x, y = one_to_one(r)
    multiplier, shift = rsqrt_multiplier(r, scale(x), scale(y))
    return RsqrtParams(op.index, x.elements, zero_point(x), zero_point(y), multiplier, shift)
