"""The calling convention of every exported function, as CMSIS-style doc comments (@brief,
@param[in] / @param[out], @return) for the export header: what each argument is, its
layout and size, the zero-point sign convention, the range and sign of shifts, and which
arrays a packed variant takes in place of the plain ones.

The text follows the kernels' numpy references (edgetune.codegen.kernels.*.reference) and
the requantisation of codegen/quant.py; a kernel or parameter without text here fails the
export (and the test that renders every kernel's header), so the header never documents
less than the functions it declares.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

ZERO_POINT = ("the int8 value that stands for real 0 (TFLite convention: real = scale * (q - zero)); "
              "the kernel subtracts it. Not the negated offset CMSIS-NN's functions take")
REQUANT = ("output = clamp(round(acc * multiplier * 2^shift / 2^31) + {zero}, {lo}, {hi}) "
           "(TFLite/CMSIS-NN: saturating rounding doubling high multiply, then a rounding right shift)")
MULTIPLIER = "Q31 requantisation multiplier, normally in [2^30, 2^31) (TFLite's QuantizeMultiplier)"
SHIFT = ("power-of-two exponent, in [-31, 30]: negative shifts right (rounding to nearest, ties away "
         "from zero), positive shifts the accumulator left before the multiply (TFLite sign)")


@dataclass(frozen=True)
class FunctionDoc:
    brief: str
    params: tuple[tuple[str, str, str], ...]  # (direction "in"/"out", name, text), in argument order
    returns: str = ""  # "" for void functions


def _matmul_s8(s: Mapping[str, int], packed: bool) -> dict[str, tuple[str, str]]:
    m, n, k = s["m"], s["n"], s["k"]
    return {
        "a": ("in", f"A, int8, row-major [M={m}][K={k}] ({m * k} values)."),
        "b": ("in", f"packed weights from the _pack() helper: B transposed, [N={n}][K={k}] ({k * n} values)."
              if packed else f"B, int8 weights, row-major [K={k}][N={n}] ({k * n} values)."),
        "bias": ("in", f"per-column terms from the _pack() helper (bias and zero points folded), int32 [N={n}]."
                 if packed else f"bias, int32, one per output column [N={n}], added to the int32 accumulator."),
        "c": ("out", f"C, int8, row-major [M={m}][N={n}] ({m * n} values): "
              + REQUANT.format(zero="c_zero", lo="-128", hi="127") + "."),
        "a_zero": ("in", f"zero point of A, in [-128, 127]: {ZERO_POINT}."
                   + (" Pack with the same value: it is folded into the terms." if packed else "")),
        "b_zero": ("in", f"zero point of B, in [-128, 127]: {ZERO_POINT}."),
        "c_zero": ("in", "zero point of C, in [-128, 127], added after requantisation (TFLite convention)."),
        "multiplier": ("in", MULTIPLIER + ", one for the whole tensor."),
        "shift": ("in", SHIFT + ", one for the whole tensor."),
    }


def _matmul_f32(s: Mapping[str, int], packed: bool) -> dict[str, tuple[str, str]]:
    m, n, k = s["m"], s["n"], s["k"]
    return {
        "a": ("in", f"A, float32, row-major [M={m}][K={k}]."),
        "b": ("in", f"B, float32, row-major [K={k}][N={n}]."),
        "bias": ("in", f"bias, float32 [N={n}], added to every row."),
        "c": ("out", f"C = A B + bias, float32, row-major [M={m}][N={n}] (summation order differs from a "
              "sequential sum: rounding only, bounded in the variant's source)."),
    }


def _convolution(s: Mapping[str, int], packed: bool, depthwise: bool) -> dict[str, tuple[str, str]]:
    from .kernels.convolution import geometry_of, geometry_text

    geo = geometry_of(s)
    c_in = s["c"] if depthwise else s["cin"]
    c_out = s["c"] * s["mult"] if depthwise else s["cout"]
    plain = (f"weights, int8, [kh={s['kh']}][kw={s['kw']}][c*mult={c_out}] (TFLite's [1][kh][kw][c*mult]; output "
             f"channel o reads input channel o / {s['mult']})." if depthwise else
             f"weights, int8, OHWI [cout={c_out}][kh={s['kh']}][kw={s['kw']}][cin={c_in}].")
    channel = "output channel"  # depthwise too: c * mult of them
    return {
        "input": ("in", f"input activations, int8, NHWC with batch 1: [h={s['h']}][w={s['w']}][c={c_in}]."),
        "weights": ("in", "packed weights from the _pack() helper (same size as the plain weights)."
                    if packed else plain),
        "bias": ("in", f"per-{channel} terms from the _pack() helper (bias - in_zero * sum of weights), int32 [{c_out}]."
                 if packed else f"bias, int32, one per {channel} [{c_out}], |bias| <= 2^30."),
        "multiplier": ("in", MULTIPLIER + f", one per {channel} [{c_out}] (int32 array)."),
        "shift": ("in", SHIFT + f", one per {channel} [{c_out}] (int32 array)."),
        "output": ("out", f"output activations, int8, NHWC [oh={geo.oh}][ow={geo.ow}][c={c_out}] "
                   f"({geometry_text(s)}): "
                   + REQUANT.format(zero="out_zero", lo="act_min", hi="act_max") + "."),
        "in_zero": ("in", f"zero point of the input, in [-128, 127]: {ZERO_POINT}; padding reads as this value."
                    + (" Pack with the same value: it is folded into the terms." if packed else "")),
        "out_zero": ("in", "zero point of the output, in [-128, 127], added after requantisation."),
        "act_min": ("in", "lower clamp of the output, in [-128, act_max] (a fused ReLU: out_zero)."),
        "act_max": ("in", "upper clamp of the output, in [act_min, 127]."),
    }


def _convolution16(s: Mapping[str, int], depthwise: bool) -> dict[str, tuple[str, str]]:
    """conv2d_s16 / dwconv2d_s16: TFLite's 16x8 scheme (codegen/kernels/sixteen.py)."""
    from .kernels.convolution import geometry_of, geometry_text

    geo = geometry_of(s)
    c_in = s["c"] if depthwise else s["cin"]
    c_out = s["c"] * s["mult"] if depthwise else s["cout"]
    rule = ("TFLite's 64-bit MultiplyByQuantizedMultiplier: (acc * round(multiplier / 2^16) + 2^(14 - shift)) >> "
            "(15 - shift), truncated to int32" if s["bias_bits"] == 64 else
            "acc wrapped to int32, then " + REQUANT.format(zero="0", lo="act_min", hi="act_max"))
    return {
        "input": ("in", f"input activations, int16, symmetric (zero point 0), NHWC with batch 1: "
                        f"[h={s['h']}][w={s['w']}][c={c_in}]."),
        "weights": ("in", f"weights, int8, [kh={s['kh']}][kw={s['kw']}][c*mult={c_out}]." if depthwise else
                    f"weights, int8, OHWI [cout={c_out}][kh={s['kh']}][kw={s['kw']}][cin={c_in}]."),
        "bias": ("in", f"bias, int64, one per output channel [{c_out}] (the model's int{s['bias_bits']} bias)."),
        "multiplier": ("in", MULTIPLIER + f", one per output channel [{c_out}] (int32 array)."),
        "shift": ("in", f"power-of-two exponent, one per output channel [{c_out}] (int32 array), at most "
                        f"{7 if s['bias_bits'] == 64 else 30}."),
        "output": ("out", f"output activations, int16, NHWC [oh={geo.oh}][ow={geo.ow}][c={c_out}] ({geometry_text(s)}): "
                   f"the int64 sum plus the bias, {rule}, clamped to [act_min, act_max]."),
        "act_min": ("in", "lower clamp of the output, in [-32768, act_max] (a fused ReLU: 0)."),
        "act_max": ("in", "upper clamp of the output, in [act_min, 32767]."),
    }


def _fir(s: Mapping[str, int], q15: bool) -> dict[str, tuple[str, str]]:
    taps, block = s["taps"], s["block"]
    kind = "Q15 (int16)" if q15 else "float32"
    rule = ("y[n] = sat16((sum_k coeffs[k] * x[n + k] + 2^14) >> 15), summed exactly in int64" if q15
            else "y[n] = sum_k coeffs[k] * x[n + k] (summation order differs between variants: rounding only)")
    return {
        "x": ("in", f"{kind} samples: {taps - 1} history samples, then {block} new ones ({taps + block - 1} in all; "
              f"CMSIS-DSP state convention: keep the last {taps - 1} for the next call)."),
        "coeffs": ("in", f"{kind} taps, time-reversed: coeffs[k] = b[{taps - 1} - k] ({taps} values)."),
        "y": ("out", f"{kind} outputs, {block} values: {rule}."),
    }


def _pack_docs(kernel: str) -> dict[str, tuple[str, str]]:
    if kernel == "matmul_s8":
        return {"b": ("in", "B, int8, row-major [K][N], as the plain variant takes it."),
                "bias": ("in", "bias, int32 [N]."),
                "a_zero": ("in", f"zero point of A the kernel will be called with ({ZERO_POINT})."),
                "b_zero": ("in", f"zero point of B ({ZERO_POINT})."),
                "b_packed": ("out", "packed weights, [N][K] (B transposed): pass as `b`."),
                "col_term": ("out", "int32 [N]: bias - a_zero * sum_k b[k][n] + K * a_zero * b_zero (mod 2^32): "
                             "pass as `bias`.")}
    return {"weights": ("in", "weights in the plain layout the unpacked variant takes."),
            "bias": ("in", "bias, int32, one per channel."),
            "in_zero": ("in", f"zero point of the input the kernel will be called with ({ZERO_POINT})."),
            "packed": ("out", "packed weights, same size as `weights`: pass as `weights`."),
            "term": ("out", "int32, one per channel: bias - in_zero * sum of the channel's weights: pass as `bias`.")}


def _argument_docs(kernel: str, shape: Mapping[str, int], config: Mapping) -> dict[str, tuple[str, str]]:
    packed = config.get("layout") == "packed"
    table = {"matmul_s8": lambda: _matmul_s8(shape, packed), "matmul_f32": lambda: _matmul_f32(shape, packed),
             "conv2d_s8": lambda: _convolution(shape, packed, depthwise=False),
             "dwconv2d_s8": lambda: _convolution(shape, packed, depthwise=True),
             "conv2d_s16": lambda: _convolution16(shape, depthwise=False),
             "dwconv2d_s16": lambda: _convolution16(shape, depthwise=True),
             "fir_q15": lambda: _fir(shape, q15=True), "fir_f32": lambda: _fir(shape, q15=False)}
    if kernel not in table:
        from .kernels import KERNELS  # a kernel defined outside edgetune documents its own arguments

        own = getattr(KERNELS.get(kernel), "argument_docs", None)
        if own is not None:
            return own(shape)
        raise KeyError(f"kernel {kernel!r} has no documented calling convention (codegen/calling.py)")
    return table[kernel]()


PARAM_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*$")


def parameter_names(declaration: str) -> list[str]:
    """The parameter names of a C declaration `type name(type a, const int8_t *b, ...)`."""
    inside = declaration[declaration.index("(") + 1:declaration.rindex(")")]
    return [PARAM_RE.search(part.strip()).group(1) for part in inside.split(",") if part.strip() not in ("", "void")]


def _documented(declaration: str, docs: Mapping[str, tuple[str, str]], where: str) -> tuple[tuple[str, str, str], ...]:
    params = []
    for name in parameter_names(declaration):
        if name not in docs:
            raise KeyError(f"{where}: parameter {name!r} has no documentation (codegen/calling.py)")
        direction, text = docs[name]
        params.append((direction, name, text))
    return tuple(params)


def variant_doc(kernel: str, description: str, shape_text: str, declaration: str, shape: Mapping[str, int],
                config: Mapping, notes: str) -> FunctionDoc:
    docs = _argument_docs(kernel, shape, config)
    return FunctionDoc(brief=f"{description}: {kernel} {shape_text}, tuned variant. {notes}".strip(),
                       params=_documented(declaration, docs, kernel))


def pack_doc(kernel: str, declaration: str, function: str) -> FunctionDoc:
    return FunctionDoc(brief=f"Packs weights for {function} (layout=packed): call once, at build time or at boot, "
                             "with the zero point(s) the kernel will be called with.",
                       params=_documented(declaration, _pack_docs(kernel), f"{kernel} pack helper"))


def dispatch_doc(kernel: str, shape_keys: tuple[str, ...], declaration: str, shape: Mapping[str, int],
                 shapes: list[str], config: Mapping) -> FunctionDoc:
    """The dispatcher takes the shape, then exactly the arguments of the variant for it."""
    docs = {key: ("in", f"shape dimension `{key}`: selects the variant (exported shapes: {'; '.join(shapes)}).")
            for key in shape_keys}
    for name, (direction, _) in _argument_docs(kernel, shape, config).items():
        docs[name] = (direction, f"as `{name}` of the variant for the shape (documented with it above): "
                                 "its layout, size and convention.")
    return FunctionDoc(brief=f"{kernel} by shape: runs the tuned variant for the shape given.",
                       params=_documented(declaration, docs, f"et_{kernel}"),
                       returns="0 when a variant ran; -1 when this export holds no variant for the shape "
                               "(nothing is written).")
