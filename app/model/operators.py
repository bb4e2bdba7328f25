"""The one registry of the TFLite operators edgetune runs, and how it runs each:

  tuned    a kernel with a search space serves it (layers.py maps the operator to the
           kernel's shape and buffers)
  library  a C function with TFLite Micro's exact int8 arithmetic, not tuned (ops/: its
           static parameters, numpy reference and template)
  folded   constant shape arithmetic, evaluated at export (ops/fold.py), no C

Everything that lists operators is derived from OPERATORS: which layers load (`layer_of`),
the library's parameters (`operator_params`), `model show`'s kernel column (`untuned_as`), the
table of docs/operators.md (`docs_table`, tied by tests/test_model_operators.py) and the
refusal of a model naming every operator it needs that edgetune lacks (`check_operators`).
Adding an operator is one entry here (docs/extending.md, "Add a model operator").
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from edgetune.codegen.tflite_schema import ModelError

from .graph import Graph, Operator
from .heavy_layers import batch_matmul_layer, transpose_conv_layer
from .layers import ModelLayer, conv_layer, dwconv_layer, fully_connected_layer, untuned_layer
from .ops import FOLDABLE, StaticOp
from .ops.add import add_params, squared_difference_params
from .ops.concatenation import concatenation_params
from .ops.index_map import gather_params, resize_nearest_params, transpose_params
from .ops.lookup import hard_swish_params, leaky_relu_params, logistic_params, rsqrt_params, tanh_params
from .ops.mean import mean_params
from .ops.mul import mul_params
from .ops.pad import pad_params
from .ops.pooling import pool_params
from .ops.quantize import quantize_params
from .ops.relu import relu_params
from .ops.resize_bilinear import resize_bilinear_params
from .ops.reshape import reshape_params, same_bytes_params
from .ops.softmax import softmax_params
from .ops.split import pack_params, split_params
from .ops.strided_slice import strided_slice_params
from .user_layers import declared_operators, servers, user_layer

TUNED_HOW, LIBRARY, FOLDED = "tuned", "library", "folded"  # how an operator runs


@dataclass(frozen=True)
class OperatorSupport:
    """One TFLite builtin operator edgetune runs. `runs` and `refused` are the cells of the
    docs' table (what runs; what is refused, in one line naming the operator and its index)."""

    name: str
    how: str  # TUNED_HOW, LIBRARY or FOLDED
    kernel: str | None = None  # tuned: the kernel serving it
    layer: Callable[[Graph, Operator], ModelLayer] = untuned_layer
    params: Callable[[Graph, Operator], StaticOp] | None = None  # library: its static parameters (ops/)
    runs: str = ""
    refused: str = ""


def tuned(name: str, kernel: str, layer: Callable[[Graph, Operator], ModelLayer]) -> OperatorSupport:
    return OperatorSupport(name, TUNED_HOW, kernel, layer)


def library(name: str, params: Callable[[Graph, Operator], StaticOp], runs: str, refused: str) -> OperatorSupport:
    return OperatorSupport(name, LIBRARY, params=params, runs=runs, refused=refused)


FOLDED_RUNS = "folded at export, no C (below)"
POOL = ("NHWC, any batch, SAME (TFLite's offsets) or VALID, strides, any window; fused activation",
        "output shape not the pooling's, a window wholly in the padding, input and output quantised differently")
SAME_BYTES = ("the bytes copied under the output's shape, as TFLite Micro copies them (a Keras Conv1D's wrapping); "
              "in place when the memory plan gives both one address", "an output of another size")
INDEX_MAP = ("values moved, not changed (TFLite Micro copies the bytes): each output value is the input value at a "
             "sum of one table entry per output axis (a permuted stride, a constant index, TFLite's nearest row and "
             "column in float32 with `align_corners` / `half_pixel_centers`); a run of consecutive channels is copied "
             "as a run", "a non-constant permutation, index or size; an index out of range; more than 5 axes")
SPLITS = ("int8 and int16 values moved, not changed (TFLite Micro copies the bytes whatever the outputs' "
          "quantisation): each row before the axis cut into one run per output; any axis (negative too), any "
          "rank, one output or many; Helium copies 16 bytes a step", "a non-constant axis, outputs that are not parts of the input along it, "
          "`num_splits` (UNPACK's `num`) not the outputs' count, tensors of two types")

OPERATORS: tuple[OperatorSupport, ...] = (
    tuned("CONV_2D", "conv2d_s8", conv_layer),
    tuned("DEPTHWISE_CONV_2D", "dwconv2d_s8", dwconv_layer),
    tuned("FULLY_CONNECTED", "conv2d_s8", fully_connected_layer),
    tuned("TRANSPOSE_CONV", "tconv2d_s8", transpose_conv_layer),
    tuned("BATCH_MATMUL", "bmm_s8", batch_matmul_layer),
    library("ADD", add_params,
            "int8 + int8, each rescaled to twice the larger input scale, the sum requantised; broadcasting up to "
            "4-D; fused `RELU`, `RELU6`, `RELU_N1_TO_1`", "shapes that do not broadcast, a rescaling factor outside (0, 1)"),
    library("SUB", add_params,
            "int8 - int8: ADD's arithmetic with the second input's rescaled value subtracted (TFLite Micro's SUB "
            "prepares the same multipliers); broadcasting up to 4-D; fused activations; Helium for same-shape inputs "
            "and a per-channel input",
            "as ADD"),
    library("MUL", mul_params,
            "(x1 - z1) * (x2 - z2) requantised by s1 * s2 / s_out (TFLite Micro's one multiplier, in double), plus "
            "z_out; broadcasting up to 4-D (a squeeze-excite gate); fused activations; Helium for same-shape inputs "
            "and a per-channel input (VMUL, VQRDMULH)", "a factor s1 * s2 / s_out of 2^14 or more (the shifted product would overflow int32)"),
    library("SQUARED_DIFFERENCE", squared_difference_params,
            "SUB's rescaling at TFLite Micro's left shift of 7, the difference squared, requantised by "
            "(2 max(s1, s2))^2 / (2^14 s_out); broadcasting; Helium for same-shape inputs (LayerNorm's variance)",
            "an output factor of 1 or more"),
    library("LOGISTIC", logistic_params,
            "TFLite Micro's fixed-point sigmoid (input to Q4.27, gemmlowp's exp and Newton-Raphson reciprocal), as a "
            "table of the 256 results; Helium: one gather load per 16 values",
            "an output not at scale 1/256 and zero point -128 (TFLite's requirement)"),
    library("TANH", tanh_params,
            "the same scheme, (1 - exp(-2x)) / (1 + exp(-2x)), output at scale 1/128, zero point 0; a table of 256, "
            "Helium gather", "an output quantised otherwise"),
    library("HARD_SWISH", hard_swish_params,
            "x * relu6(x + 3) / 6 in TFLite's int16 fixed point (the hi-res input scale, the relu-ish and output "
            "multipliers as Q15); a table of 256, Helium gather", "an output scale below the input's / 128"),
    library("LEAKY_RELU", leaky_relu_params,
            "x - z_in scaled by s_in / s_out where >= 0, by s_in * alpha / s_out below, plus z_out; a table of 256, "
            "Helium gather", "a negative alpha"),
    library("RSQRT", rsqrt_params,
            "TFLite Micro's quantised 1/sqrt: its inverse-square-root multiplier (five Newton-Raphson steps in Q3.28 "
            "on the value normalised by pairs of bits) at 2^20, requantised by 1 / (sqrt(s_in) s_out); a table of "
            "256, Helium gather (LayerNorm)",
            "a factor out of range; inputs below the zero point are undefined (TFLite Micro fails on them)"),
    library("RELU", relu_params, "int8, requantised to the output's quantisation, then clamped at its zero",
            "input and output of different sizes"),
    library("RELU6", relu_params, "int8, clamped to [0, 6] in the input's quantisation, not rescaled",
            "an output quantised unlike the input"),
    library("EXPAND_DIMS", same_bytes_params, *SAME_BYTES),
    library("SQUEEZE", same_bytes_params, *SAME_BYTES),
    library("TRANSPOSE", transpose_params, *INDEX_MAP),
    library("GATHER", gather_params, *INDEX_MAP),
    library("RESIZE_NEAREST_NEIGHBOR", resize_nearest_params, *INDEX_MAP),
    library("RESIZE_BILINEAR", resize_bilinear_params,
            "TFLite Micro's integer interpolation: positions in 1/1024ths per row and column (with `align_corners`, "
            "`half_pixel_centers`), four raw values weighted in 2^20ths, rounded to nearest, ties away from zero; the "
            "rows, columns and weights as small tables",
            "a non-constant size; input and output quantised differently are taken as TFLite Micro takes them (raw "
            "values)"),
    library("AVERAGE_POOL_2D", pool_params, *POOL),
    library("MAX_POOL_2D", pool_params, *POOL),
    library("MEAN", mean_params,
            "over any axes of a tensor up to 4-D, `keep_dims` or not, from the input's quantisation to the output's",
            "axes outside the tensor, a scale ratio below 2^-31"),
    library("SOFTMAX", softmax_params,
            "int8 in, int8 out (scale 1/256, zero point -128), over the last axis, any beta",
            "another output quantisation, beta × scale below 2^-27"),
    library("PAD", pad_params, "up to 4-D, the added positions hold the output's zero point",
            "paddings not `[rank, 2]`, negative paddings"),
    library("CONCATENATION", concatenation_params,
            "any axis, up to 4-D, any number of inputs; an input quantised unlike the output is requantised",
            "shapes that do not concatenate, a fused activation"),
    library("QUANTIZE", quantize_params, "int8 → int8 requantisation", "a float (or other) input"),
    library("RESHAPE", reshape_params, "a copy (nothing when input and output share an address)",
            "a new shape that is not the output's, a shape computed at run time"),
    library("SPLIT", split_params, *SPLITS),
    library("SPLIT_V", split_params, *SPLITS),
    library("UNPACK", split_params, *SPLITS),
    library("PACK", pack_params,
            "int8 and int16 values moved (TFLite Micro copies the bytes whatever the quantisation): each row of the "
            "output one run of every input in turn, any axis (negative too), Helium as SPLIT; a PACK of constants "
            "is folded at export (below)", "inputs of different shapes or types, `values_count` not the inputs' count"),
    library("STRIDED_SLICE", strided_slice_params,
            "int8 values moved (an index map, as TRANSPOSE): TFLite's begin, end and stride per axis with its begin, "
            "end and shrink-axis masks, negative indices and clamping (a GRU's gates); over constants it is folded at "
            "export (below)", "masks for ellipsis or new axes, offsets, non-constant bounds, an empty slice"),
    *(OperatorSupport(name, FOLDED, runs=FOLDED_RUNS, refused="masks for ellipsis or new axes, offsets")
      for name in FOLDABLE if name not in ("PACK", "STRIDED_SLICE")),  # the library runs these unless folded
)
REGISTRY: dict[str, OperatorSupport] = {op.name: op for op in OPERATORS}
SUPPORTED = tuple(REGISTRY)
TUNED = {op.name: op.kernel for op in OPERATORS if op.how == TUNED_HOW}  # operator -> its kernel
UNTUNED = tuple(op.name for op in OPERATORS if op.how != TUNED_HOW)


def names(how: str) -> tuple[str, ...]:
    return tuple(op.name for op in OPERATORS if op.how == how)


def layer_of(graph: Graph, op: Operator) -> ModelLayer:
    """The layer of one operator: a kernel of the user's own serving it comes first, then the
    registry's entry (check_operators has refused a model with operators neither serves)."""
    served = servers(graph, op)
    if served:
        return user_layer(graph, op, served[0])
    entry = REGISTRY.get(op.op)
    if entry is None:
        raise _refusal(graph, {_missing_name(op): [op.index]})
    return entry.layer(graph, op)


def operator_params(graph: Graph, op: Operator) -> StaticOp:
    """The static parameters of one library operator; ModelError naming the operator and
    its index for one the library does not run (tuned and folded operators included)."""
    entry = REGISTRY.get(op.op)
    if entry is None or entry.params is None:
        what = "is folded at export" if entry is not None and entry.how == FOLDED else "is not in the operator library"
        raise ModelError(f"{graph.path}: operator {op.index} ({op.op}) {what} (the library runs "
                         f"{', '.join(names(LIBRARY))})")
    return entry.params(graph, op)


def untuned_as(op: str, folded: bool = False) -> str:
    """How `model show` says a layer no kernel serves runs, as the registry has it (`folded`:
    this one is folded at export, as a PACK of constants is though the library runs PACK)."""
    entry = REGISTRY.get(op)
    return "- (folded at export)" if folded or (entry is not None and entry.how == FOLDED) else "- (library, not tuned)"


# --- the refusal ---------------------------------------------------------------------------
def _missing_name(op: Operator) -> str:
    return f"CUSTOM ({op.custom_code})" if op.op == "CUSTOM" else op.op


def check_operators(graph: Graph) -> None:
    """Refuse, in one message, a model with operators that neither the registry nor a kernel
    of the user's own serves: every such operator, with its indices and count."""
    missing: dict[str, list[int]] = {}
    for op in graph.operators:
        if (op.op == "CUSTOM" or op.op not in REGISTRY) and not servers(graph, op):
            missing.setdefault(_missing_name(op), []).append(op.index)
    if missing:
        raise _refusal(graph, missing)


def _refusal(graph: Graph, missing: dict[str, list[int]]) -> ModelError:
    def one(name: str, indices: list[int]) -> str:
        where = f"operator {indices[0]}" if len(indices) == 1 else f"operators {', '.join(map(str, indices))}"
        return f"{name} ({len(indices)}x: {where})"

    kinds, total = len(missing), sum(map(len, missing.values()))
    custom = [name[len("CUSTOM ("):-1] for name in missing if name.startswith("CUSTOM (")]
    hint = (f"; a kernel of your own can serve one (docs/own-kernel.md), for a custom operator declaring "
            f"operators={{'CUSTOM:{custom[0]}': adapter}} (--kernel-file)" if custom
            else "; a kernel of your own can serve one (docs/own-kernel.md)")
    return ModelError(f"{graph.path}: edgetune cannot run {total} of this model's {len(graph.operators)} operators: "
                      f"{'; '.join(one(name, indices) for name, indices in missing.items())} (it runs "
                      f"{', '.join(SUPPORTED)}, and no kernel loaded serves {'them' if kinds > 1 else 'it'}"
                      f"{hint}){declared_operators()}")


# --- the docs' table -----------------------------------------------------------------------
def docs_table() -> str:
    """The table of docs/operators.md: the library and folded operators, rows of the same
    text joined (tests/test_model_operators.py checks the page holds it verbatim)."""
    rows: list[tuple[list[str], str, str]] = []
    for op in OPERATORS:
        if op.how == TUNED_HOW:
            continue
        if rows and rows[-1][1:] == (op.runs, op.refused):
            rows[-1][0].append(op.name)
        else:
            rows.append(([op.name], op.runs, op.refused))
    lines = ["| operator | what runs | refused (one line naming the operator and its index) |", "|---|---|---|"]
    lines += [f"| {', '.join(f'`{n}`' for n in group)} | {runs} | {refused} |" for group, runs, refused in rows]
    return "\n".join(lines)

