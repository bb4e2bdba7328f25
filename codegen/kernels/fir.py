"""FIR filters on a block of samples, in CMSIS-DSP's state convention: the input holds
taps-1 history samples (the end of the previous block) followed by `block` new samples, and
the coefficients are stored time-reversed, so y[n] = sum_k coeffs[k] * x[n + k] for
n in 0..block-1. The caller keeps the last taps-1 input samples as the next call's history.

fir_q15: Q15 samples and coefficients, products summed exactly in int64, narrowed at bit 15
and saturated to Q15 -- bit-exact. The narrowing is the shape key `rounding`: 0 (`nearest`,
the default) rounds to nearest, ties up; 1 (`truncate`) discards the low 15 bits (an
arithmetic shift, i.e. floor), which is what CMSIS-DSP's arm_fir_q15 documents ("truncated to
34.15 format by discarding the low 15 bits and then saturated to 1.15 format"), so code ported
from CMSIS-DSP gets identical output. It is a shape key, not a tuning parameter, because it
changes the result: the search must never trade one convention for the other.
fir_f32: float32; variants sum in different orders (and may fuse multiply-adds), so an
output is accepted when it is within (taps + 2) * 2^-24 * sum_k |coeffs[k] * x[n + k]| of the
exact sum: the classic bound for a float32 sum of taps products in any order (Higham,
"Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2), plus the final rounding.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from edgetune.hal import Target
from edgetune.tuner import Config, Constraint, Space, choice, powers_of_two

from .base import OPT_LEVELS, Buffer, Kernel, KernelError, KernelIO, describe_mismatch
from .conv2d_s8 import tile_schedule
from .dsp import DSP_CFLAGS
from .paths import Rule, VectorPath, anywhere, path_constraints, with_extension, with_vector

MAX_TAPS = 1 << 16  # int64 sums of up to 2^16 products of 2^30 are exact; keeps buffers sane
MAX_BLOCK = 1 << 20
UNIT_ROUNDOFF_F32 = 2.0 ** -24
# fir_q15's `rounding` shape key; the words are the text shorthands (`rounding=truncate`).
ROUND_NEAREST, ROUND_TRUNCATE = 0, 1
ROUNDING_WORDS = {"nearest": ROUND_NEAREST, "truncate": ROUND_TRUNCATE}


def rounding_of(shape: Mapping[str, int]) -> int:
    """fir_q15's narrowing convention (a mapping built by hand may leave the key out)."""
    return int(shape.get("rounding", ROUND_NEAREST))


def narrow_q15(acc: np.ndarray, rounding: int) -> np.ndarray:
    """int64 sums of Q30 products -> Q15: round to nearest (ties up) or truncate (floor, as
    CMSIS-DSP's arm_fir_q15), then saturate."""
    bias = 0 if rounding == ROUND_TRUNCATE else 1 << 14
    return np.clip((acc + bias) >> 15, -32768, 32767).astype(np.int16)


def plain_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    return [("plain C tiles go up to 8 outputs", lambda c: c["tile"] <= 8, ("tile",))]


def tile_rule(path: str, tiles: tuple[int, ...], why: str = "") -> Rule:
    return (f"{path} tiles are {', '.join(map(str, tiles))} outputs{why}", lambda c: c["tile"] in tiles, ("tile",))


# fir_q15: each output keeps a 64-bit accumulator in a pair of core registers (MVE and DSP).
Q15_TILES = (1, 2, 4)
# fir_f32 on MVE: four outputs per vector, up to four vectors.
F32_TILES = (4, 8, 16)


def q15_mve_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    return [tile_rule("MVE", Q15_TILES),
            ("unroll applies to the plain C and DSP paths (MVE takes eight taps per step)", lambda c: c["unroll"] == 1, ("unroll",))]


def q15_dsp_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    """SMLALD on pairs of Q15 samples (fir_q15_dsp.c.j2)."""
    return [tile_rule("DSP", Q15_TILES, " (64-bit accumulators in core register pairs)"),
            ("DSP unrolls 2-tap steps: 2 * unroll must not exceed taps",
             lambda c: c["unroll"] == 1 or 2 * c["unroll"] <= shape["taps"], ("unroll",))]


def f32_mve_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    return [tile_rule("MVE", F32_TILES)]


def f32_neon_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    """Four outputs per 128-bit vector (fir_f32_neon.c.j2): per tap, a tile holds one
    accumulator and one loaded window of x per vector, plus the coefficient."""
    unit = target.vector_unit("neon")
    lanes = unit.lanes_for("float32")
    return [tile_rule("NEON", tuple(t for t in F32_TILES if t % lanes == 0 and 2 * (t // lanes) + 1 <= unit.registers))]


# The vector paths of each FIR kernel, in the order of the `vector` parameter's values.
Q15_PATHS = (
    VectorPath("c", anywhere, "fir_q15.c.j2", plain_rules),
    VectorPath("mve", with_vector("mve"), "fir_q15.c.j2", q15_mve_rules),
    VectorPath("dsp", with_extension("dsp"), "fir_q15_dsp.c.j2", q15_dsp_rules, cflags=DSP_CFLAGS),
)
F32_PATHS = (
    VectorPath("c", anywhere, "fir_f32.c.j2", plain_rules),
    VectorPath("mve", with_vector("mve"), "fir_f32.c.j2", f32_mve_rules),
    VectorPath("neon", with_vector("neon"), "fir_f32_neon.c.j2", f32_neon_rules),
)


class _Fir(Kernel):
    shape_keys = ("taps", "block")
    dtype: type = np.int16

    def example_shape(self) -> str:
        return "taps=32,block=64"

    def check_shape(self, shape: dict[str, int]) -> None:
        if shape["taps"] > MAX_TAPS:
            raise KernelError(f"shape: taps={shape['taps']} exceeds {MAX_TAPS}")
        if shape["block"] > MAX_BLOCK:
            raise KernelError(f"shape: block={shape['block']} exceeds {MAX_BLOCK}")

    def space(self, target: Target, shape: Mapping[str, int]) -> Space:
        block, taps = shape["block"], shape["taps"]
        paths = self.offered_paths(target)
        vectors = [path.name for path in paths]
        constraints = [
            Constraint("tile larger than needed to cover the block",
                       lambda c: c["tile"] <= max(4, 1 << (block - 1).bit_length()), reads=("tile",)),
            Constraint("unroll larger than taps", lambda c: c["unroll"] <= taps or c["unroll"] == 1, reads=("unroll",)),
            *path_constraints(paths, target, shape),
        ]
        params = [
            powers_of_two("tile", 1, 16, "output samples computed together (share coefficient loads)"),
            powers_of_two("unroll", 1, 8, "unroll factor over taps"),
            choice("vector", vectors, "plain C (compiler's choice) or intrinsics: Helium/MVE, NEON or the Arm DSP extension"),
            choice("compiler", [c.name for c in target.compilers], "compiler from the target description"),
            choice("opt", OPT_LEVELS, "optimisation level"),
        ]
        return Space(params, constraints)

    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        tile = int(config["tile"])
        n_full, n_rem = tile_schedule(shape["block"], tile)
        return dict(taps=shape["taps"], block=shape["block"], tile=tile, tv=max(1, tile // 4),
                    unroll=int(config["unroll"]), vector=config["vector"], n_full=n_full, n_rem=n_rem)

    def _buffers(self, shape: Mapping[str, int], x: np.ndarray, coeffs: np.ndarray) -> KernelIO:
        return KernelIO(buffers=(Buffer("x", x), Buffer("coeffs", coeffs, weight=True),
                                 Buffer("y", np.zeros(shape["block"], dtype=self.dtype), is_output=True)), params=())

    @staticmethod
    def windows(shape: Mapping[str, int], x: np.ndarray) -> np.ndarray:
        """[block, taps]: row n is x[n : n + taps]."""
        return np.lib.stride_tricks.sliding_window_view(x, shape["taps"])[: shape["block"]]


class FirQ15(_Fir):
    name = "fir_q15"
    version = 2  # 2: the rounding shape key; MVE narrows with SRSHRL/ASRL and SSAT
    shape_keys = ("taps", "block", "rounding")
    shape_defaults = (("rounding", ROUND_NEAREST),)
    zero_allowed = ("rounding",)
    description = ("Q15 FIR filter on a block (CMSIS-DSP state convention), int64 accumulation, rounded "
                   "(rounding=nearest) or truncated (rounding=truncate, as arm_fir_q15) and saturated")
    template = "fir_q15.c.j2"
    dtype = np.int16
    paths = Q15_PATHS

    def example_shape(self) -> str:
        return "taps=32,block=64,rounding=nearest"

    def expand_shape(self, items: dict[str, object]) -> dict[str, object]:
        word = items.get("rounding")
        if isinstance(word, str):
            if word not in ROUNDING_WORDS:
                raise KernelError(f"shape: rounding={word!r} must be nearest or truncate (or 0, 1)")
            items = {**items, "rounding": ROUNDING_WORDS[word]}
        return items

    def check_shape(self, shape: dict[str, int]) -> None:
        super().check_shape(shape)
        if shape["rounding"] not in ROUNDING_WORDS.values():
            raise KernelError(f"shape: rounding={shape['rounding']} must be 0 (nearest) or 1 (truncate)")

    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        return {**super().template_vars(target, shape, config), "truncate": rounding_of(shape) == ROUND_TRUNCATE}

    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator, edge: str = "random") -> KernelIO:
        n = shape["taps"] + shape["block"] - 1
        if edge == "extreme":
            x = rng.choice(np.array([-32768, 32767], dtype=np.int16), size=n)
            coeffs = rng.choice(np.array([-32768, 32767], dtype=np.int16), size=shape["taps"])
        else:
            x = rng.integers(-32768, 32768, size=n, dtype=np.int16)
            coeffs = (rng.integers(-32768, 32768, size=shape["taps"]) // max(1, shape["taps"] // 4)).astype(np.int16)
        return self._buffers(shape, x, coeffs)

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        x, coeffs = (b.data.astype(np.int64) for b in io.buffers[:2])
        return [narrow_q15(self.windows(shape, x) @ coeffs, rounding_of(shape))]


class FirF32(_Fir):
    name = "fir_f32"
    version = 1
    description = "float32 FIR filter on a block (CMSIS-DSP state convention), documented tolerance"
    template = "fir_f32.c.j2"
    dtype = np.float32
    paths = F32_PATHS

    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator, edge: str = "random") -> KernelIO:
        n = shape["taps"] + shape["block"] - 1
        if edge == "extreme":
            # Mixed magnitudes and signs: cancellation is where summation order shows.
            x = (rng.choice([-1.0, 1.0], size=n) * 10.0 ** rng.integers(-6, 7, size=n)).astype(np.float32)
            coeffs = (rng.choice([-1.0, 1.0], size=shape["taps"]) * 10.0 ** rng.integers(-3, 4, size=shape["taps"]))
        else:
            x = rng.standard_normal(n)
            coeffs = rng.standard_normal(shape["taps"]) / shape["taps"]
        return self._buffers(shape, x.astype(np.float32), np.asarray(coeffs).astype(np.float32))

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        x, coeffs = (b.data.astype(np.float64) for b in io.buffers[:2])
        return [(self.windows(shape, x) @ coeffs).astype(np.float32)]

    def tolerance(self, shape: Mapping[str, int], io: KernelIO) -> np.ndarray:
        x, coeffs = (b.data.astype(np.float64) for b in io.buffers[:2])
        gamma = (shape["taps"] + 2) * UNIT_ROUNDOFF_F32
        # np.finfo tiny: a sum of tiny products may round to a denormal either way.
        return gamma * (np.abs(self.windows(shape, x)) @ np.abs(coeffs)) + np.finfo(np.float32).tiny

    def compare(self, shape: Mapping[str, int], io: KernelIO, name: str, got: np.ndarray,
                want: np.ndarray) -> str | None:
        x, coeffs = (b.data.astype(np.float64) for b in io.buffers[:2])
        exact = self.windows(shape, x) @ coeffs
        bad = ~(np.abs(got.astype(np.float64) - exact) <= self.tolerance(shape, io))
        return describe_mismatch(name, bad, got, want, "outside the tolerance (taps+2)*2^-24*sum|c*x|")
