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
from .layers16 import by_activation, conv16_layer, dwconv16_layer, fully_connected16_layer
from .ops import FOLDABLE, StaticOp, folded_operators
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
from .ops.space_batch import batch_to_space_params, space_to_batch_params
from .ops.sixteen import by_type, pad16_params, pool16_params, quantize16_params, reshape16_params
from .ops.softmax16 import softmax16_params
from .ops.add16 import add16_params, squared_difference16_params
from .ops.mean16 import mean16_params
from .ops.mul16 import mul16_params
from .ops.sigmoid16 import sigmoid16_params
from .ops.concatenation16 import concatenation16_params
from .ops.relu16 import relu16_params
from .ops.leaky_relu16 import leaky_relu16_params
from .ops.split import pack_params, split_params
from .ops.strided_slice import strided_slice_params
from .ops.rsqrt16 import rsqrt16_params
from .ops.lstm import lstm_layer, lstm_params, lstm_scratch_bytes
from .ops.float_island import FLOAT_UNARY, float_island_params, float_islands, in_island_only
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
    scratch: Callable[[Graph, Operator], int] | None = None  # library: bytes its C takes in the arena


def tuned(name: str, kernel: str, layer: Callable[[Graph, Operator], ModelLayer]) -> OperatorSupport:
    return OperatorSupport(name, TUNED_HOW, kernel, layer)


def library(name: str, params: Callable[[Graph, Operator], StaticOp], runs: str, refused: str) -> OperatorSupport:
    return OperatorSupport(name, LIBRARY, params=params, runs=runs, refused=refused)


FOLDED_RUNS = "folded at export, no C (below)"
POOL = ("NHWC, any batch, SAME (TFLite's offsets) or VALID, strides, any window; fused activation; int8 or int16; "
        "Helium (channels across the lanes)",
        "output shape not the pooling's, a window wholly in the padding, input and output quantised differently")
SAME_BYTES = ("the bytes copied under the output's shape, as TFLite Micro copies them (a Keras Conv1D's wrapping); "
              "in place when the memory plan gives both one address; int8 or int16", "an output of another size")
INDEX_MAP = ("values moved, not changed (TFLite Micro copies the bytes): each output value is the input value at a "
             "sum of one table entry per output axis (a permuted stride, a constant index, TFLite's nearest row and "
             "column in float32 with `align_corners` / `half_pixel_centers`); a run of consecutive channels is copied "
             "as a run; int16 values alike, but for GATHER (TFLite Micro's takes none)", "a non-constant permutation, index or size; an index out of range; more than 5 axes")
SPLITS = ("int8 and int16 values moved, not changed (TFLite Micro copies the bytes whatever the outputs' "
          "quantisation): each row before the axis cut into one run per output; any axis (negative too), any "
          "rank, one output or many; Helium copies 16 bytes a step", "a non-constant axis, outputs that are not parts of the input along it, "
          "`num_splits` (UNPACK's `num`) not the outputs' count, tensors of two types")

ISLAND = ("float32 only inside a float island: DEQUANTIZE of an int8 tensor, one-input float operators, QUANTIZE to "
          "int8, run as one table of 256 results computed at export with TFLite Micro's float arithmetic (below)",
          "outside such an island (an integer form, a float island of two inputs)")


def from_float_or(float_params: Callable[[Graph, Operator], StaticOp],
                  integer_params: Callable[[Graph, Operator], StaticOp]) -> Callable[[Graph, Operator], StaticOp]:
    """QUANTIZE's parameters: a float island's table when it reads float32, else the integer form."""
    def params(graph: Graph, op: Operator) -> StaticOp:
        source = graph.tensors[op.inputs[0]] if op.inputs and op.inputs[0] >= 0 else None
        return (float_params if source is not None and source.dtype == "float32" else integer_params)(graph, op)
    params.__name__ = getattr(integer_params, "__name__", "params")
    return params


OPERATORS: tuple[OperatorSupport, ...] = (
    # int16 activations (TFLite's 16x8 scheme) run on conv2d_s16 / dwconv2d_s16 (layers16.py)
    tuned("CONV_2D", "conv2d_s8", by_activation(conv_layer, conv16_layer)),
    tuned("DEPTHWISE_CONV_2D", "dwconv2d_s8", by_activation(dwconv_layer, dwconv16_layer)),
    tuned("FULLY_CONNECTED", "conv2d_s8", by_activation(fully_connected_layer, fully_connected16_layer)),
    tuned("TRANSPOSE_CONV", "tconv2d_s8", transpose_conv_layer),
    tuned("BATCH_MATMUL", "bmm_s8", batch_matmul_layer),
    library("ADD", by_type(add_params, add16_params),
            "int8 + int8, each rescaled to twice the larger input scale, the sum requantised; broadcasting up to "
            "4-D; fused `RELU`, `RELU6`, `RELU_N1_TO_1`; int16 + int16 (16x8) at TFLite Micro's left shift of 15; Helium "
            "for same-shape inputs and a per-channel input, int8 and int16", "shapes that do not broadcast, a rescaling factor outside (0, 1)"),
    library("SUB", by_type(add_params, add16_params),
            "int8 - int8: ADD's arithmetic with the second input's rescaled value subtracted (TFLite Micro's SUB "
            "prepares the same multipliers); broadcasting up to 4-D; fused activations; Helium for same-shape inputs "
            "and a per-channel input; int16 as ADD",
            "as ADD"),
    library("MUL", by_type(mul_params, mul16_params),
            "(x1 - z1) * (x2 - z2) requantised by s1 * s2 / s_out (TFLite Micro's one multiplier, in double), plus "
            "z_out; broadcasting up to 4-D (a squeeze-excite gate); fused activations; Helium for same-shape inputs "
            "and a per-channel input (VMUL, VQRDMULH); int16 (16x8: zero points 0), Helium too", "a factor s1 * s2 / s_out of 2^14 or more (the shifted product would overflow int32)"),
    library("SQUARED_DIFFERENCE", by_type(squared_difference_params, squared_difference16_params),
            "SUB's rescaling at TFLite Micro's left shift of 7, the difference squared, requantised by "
            "(2 max(s1, s2))^2 / (2^14 s_out); broadcasting; Helium for same-shape inputs (LayerNorm's variance); int16 "
            "with no left shift (TFLite Micro's), Helium too",
            "an output factor of 1 or more"),
    library("LOGISTIC", by_type(logistic_params, sigmoid16_params),
            "TFLite Micro's fixed-point sigmoid (input to Q4.27, gemmlowp's exp and Newton-Raphson reciprocal), as a "
            "table of the 256 results; Helium: one gather load per 16 values; int16 (16x8) with TFLite's table of "
            "sigmoid(i / 24), interpolated (Helium: both entries gathered)",
            "an output not at scale 1/256 and zero point -128 (TFLite's requirement)"),
    library("TANH", by_type(tanh_params, sigmoid16_params),
            "the same scheme, (1 - exp(-2x)) / (1 + exp(-2x)), output at scale 1/128, zero point 0; a table of 256, "
            "Helium gather; int16 as LOGISTIC", "an output quantised otherwise"),
    library("HARD_SWISH", hard_swish_params,
            "x * relu6(x + 3) / 6 in TFLite's int16 fixed point (the hi-res input scale, the relu-ish and output "
            "multipliers as Q15); a table of 256, Helium gather", "an output scale below the input's / 128"),
    library("LEAKY_RELU", by_type(leaky_relu_params, leaky_relu16_params),
            "x - z_in scaled by s_in / s_out where >= 0, by s_in * alpha / s_out below, plus z_out; a table of 256, "
            "Helium gather; int16 computed per value, Helium too", "a negative alpha"),
    library("RSQRT", by_type(rsqrt_params, rsqrt16_params),
            "TFLite Micro's quantised 1/sqrt: its inverse-square-root multiplier (five Newton-Raphson steps in Q3.28 "
            "on the value normalised by pairs of bits) at 2^20, requantised by 1 / (sqrt(s_in) s_out); a table of "
            "256, Helium gather (LayerNorm); int16 (zero points 0) computed per value",
            "a factor out of range; inputs below the zero point are undefined (TFLite Micro fails on them)"),
    library("RELU", by_type(relu_params, relu16_params),
            "int8 or int16, requantised to the output's quantisation, then clamped at its zero; int16: Helium",
            "input and output of different sizes"),
    library("RELU6", by_type(relu_params, relu16_params),
            "int8 or int16, clamped to [0, 6] in the input's quantisation, not rescaled (int8 also when the output "
            "is quantised otherwise, as TFLite Micro); int16: Helium",
            "input and output of different sizes; int16: an output quantised unlike the input"),
    library("EXPAND_DIMS", by_type(same_bytes_params, reshape16_params), *SAME_BYTES),
    library("SQUEEZE", by_type(same_bytes_params, reshape16_params), *SAME_BYTES),
    library("TRANSPOSE", transpose_params, *INDEX_MAP),
    library("GATHER", gather_params, *INDEX_MAP),
    library("RESIZE_NEAREST_NEIGHBOR", resize_nearest_params, *INDEX_MAP),
    library("RESIZE_BILINEAR", resize_bilinear_params,
            "TFLite Micro's integer interpolation: positions in 1/1024ths per row and column (with `align_corners`, "
            "`half_pixel_centers`), four raw values weighted in 2^20ths, rounded to nearest, ties away from zero; the "
            "rows, columns and weights as small tables",
            "a non-constant size; input and output quantised differently are taken as TFLite Micro takes them (raw "
            "values)"),
    library("AVERAGE_POOL_2D", by_type(pool_params, pool16_params), *POOL),
    library("MAX_POOL_2D", by_type(pool_params, pool16_params), *POOL),
    library("MEAN", by_type(mean_params, mean16_params),
            "over any axes of a tensor up to 4-D, `keep_dims` or not, from the input's quantisation to the output's; "
            "int8 or int16, Helium when the reduced axes are next to each other",
            "axes outside the tensor, a scale ratio below 2^-31"),
    library("SOFTMAX", by_type(softmax_params, softmax16_params),
            "int8 in, int8 out (scale 1/256, zero point -128), over the last axis, any beta (Helium: the exps of the 256 "
            "differences from the row's maximum as a table); int16 in and out "
            "(16x8: zero points 0, scale 1/32768 out) with TFLite Micro's tables of exp and 1/(1+x), Helium (gathers)",
            "another output quantisation, beta × scale below 2^-27"),
    library("PAD", by_type(pad_params, pad16_params), "up to 4-D, the added positions hold the output's zero point; "
            "int16: they hold 0 (TFLite Micro's)",
            "paddings not `[rank, 2]`, negative paddings"),
    library("CONCATENATION", by_type(concatenation_params, concatenation16_params),
            "any axis, up to 4-D, any number of inputs; an input quantised unlike the output is requantised; int16 "
            "values copied as they are (TFLite Micro's)",
            "shapes that do not concatenate, a fused activation"),
    library("QUANTIZE", from_float_or(float_island_params, by_type(quantize_params, quantize16_params)),
            "int8 → int8 requantisation; int8 ↔ int16 and int16 → int16 (between a graph's int8 and 16x8 parts); "
            "Helium; "
            "from float32 at the end of a float island (below)",
            "a float input outside a float island, another input type"),
    library("RESHAPE", by_type(reshape_params, reshape16_params),
            "a copy (nothing when input and output share an address); int8 or int16",
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
    library("SPACE_TO_BATCH_ND", space_to_batch_params,
            "3-D or 4-D, one or two spatial axes padded with 0 (TFLite Micro's value, below) and moved into the "
            "batch; with the convolution and BATCH_TO_SPACE_ND after it, one dilated convolution (below)",
            "a non-constant block or paddings, negative paddings, a padded size not a multiple of the block"),
    library("BATCH_TO_SPACE_ND", batch_to_space_params,
            "the inverse, then the crops: an index map",
            "a non-constant block or crops, a batch not a multiple of the block, crops leaving no output"),
    OperatorSupport("UNIDIRECTIONAL_SEQUENCE_LSTM", LIBRARY, layer=lstm_layer, params=lstm_params,
                    scratch=lstm_scratch_bytes, runs=
            "int8 (TFLite Micro's 8x8->16 kernel) and 16x8 (int16 activations, int64 biases): per step and gate "
            "two products into int16 at 2^-12, summed with saturation, its int16 LOGISTIC or TANH; the int16 cell "
            "state and the hidden state by its requantised products; batch- or time-major; a cell clip; state zero "
            "at each invocation; Helium: dot products of four units at once (VMLADAVA, VMLALDAVA), table gathers "
            "and the state update on four units a step",
            refused="peephole weights, a projection, layer normalisation, no input gate (CIFG) (TFLite Micro's kernel "
            "refuses them too), float or hybrid activations, per-channel or asymmetric weights, biases of another "
            "type than TFLite Micro reads"),
    library("DEQUANTIZE", in_island_only, *ISLAND),
    *(library(name, in_island_only, *ISLAND) for name in FLOAT_UNARY if name != "RSQRT"),  # RSQRT: its entry above
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
        what = "is not in the operator library"
        if entry is not None and entry.how == FOLDED:
            what = ("is folded at export" if op.index in folded_operators(graph) else  # else: a PACK of activations
                    "reads tensors computed at run time; edgetune runs it only folded at export, over constants "
                    "(shape arithmetic)")
        raise ModelError(f"{graph.path}: operator {op.index} ({op.op}) {what} (the library runs "
                         f"{', '.join(names(LIBRARY))})")
    return entry.params(graph, op)


def library_scratch(graph: Graph, op: Operator) -> int:
    """Bytes of working memory a library operator's C takes in the arena (0 for most)."""
    entry = REGISTRY.get(op.op)
    return entry.scratch(graph, op) if entry is not None and entry.scratch is not None else 0


def untuned_as(op: str, folded: bool = False) -> str:
    """How `model show` says a layer no kernel serves runs, as the registry has it (`folded`:
    this one is folded at export, as a PACK of constants is though the library runs PACK)."""
    entry = REGISTRY.get(op)
    return "- (folded at export)" if folded or (entry is not None and entry.how == FOLDED) else "- (library, not tuned)"


# --- the refusal ---------------------------------------------------------------------------
def _missing_name(op: Operator) -> str:
    return f"CUSTOM ({op.custom_code})" if op.op == "CUSTOM" else op.op


def missing_operators(graph: Graph) -> dict[str, list[int]]:
    """The operators that neither the registry nor a kernel of the user's own serves: name ->
    their indices, in order of first appearance."""
    missing: dict[str, list[int]] = {}
    folded = folded_operators(graph) if any(op.op in FOLDABLE for op in graph.operators) else set()
    in_islands = {i for island in float_islands(graph) for i in island.absorbed}
    for op in graph.operators:
        entry = None if op.op == "CUSTOM" else REGISTRY.get(op.op)
        unfoldable = entry is not None and entry.how == FOLDED and op.index not in folded  # a PACK of activations
        stranded = entry is not None and entry.params is in_island_only and op.index not in in_islands  # an int8 ABS
        if (entry is not None and not unfoldable and not stranded) or servers(graph, op):
            continue
        name = (f"{op.op} of tensors computed at run time (folded only over constants)" if unfoldable else
                f"{op.op} outside a float island (edgetune runs it only there)" if stranded else _missing_name(op))
        missing.setdefault(name, []).append(op.index)
    return missing


def check_operators(graph: Graph) -> None:
    """Refuse, in one message, a model with operators that neither the registry nor a kernel
    of the user's own serves: every such operator, with its indices and count."""
    missing = missing_operators(graph)
    if missing:
        raise _refusal(graph, missing)


def missing_text(missing: dict[str, list[int]]) -> str:
    """`NAME (2x: operators 3, 7); OTHER (1x: operator 1)`: each missing operator, its count and indices."""
    def one(name: str, indices: list[int]) -> str:
        where = f"operator {indices[0]}" if len(indices) == 1 else f"operators {', '.join(map(str, indices))}"
        return f"{name} ({len(indices)}x: {where})"

    return "; ".join(one(name, indices) for name, indices in missing.items())


def _refusal(graph: Graph, missing: dict[str, list[int]]) -> ModelError:
    kinds, total = len(missing), sum(map(len, missing.values()))
    custom = [name[len("CUSTOM ("):-1] for name in missing if name.startswith("CUSTOM (")]
    hint = (f"; a kernel of your own can serve one (docs/own-kernel.md), for a custom operator declaring "
            f"operators={{'CUSTOM:{custom[0]}': adapter}} (--kernel-file)" if custom
            else "; a kernel of your own can serve one (docs/own-kernel.md)")
    return ModelError(f"{graph.path}: edgetune cannot run {total} of this model's {len(graph.operators)} operators: "
                      f"{missing_text(missing)} (it runs "
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

