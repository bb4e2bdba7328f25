"""`load_model(path) -> Model`: a .tflite file's graph and its layers, refused with one
line naming the file and what is wrong when edgetune cannot run it."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .graph import Graph, Operator, Tensor, read_graph
from .layers import ModelLayer
from .dilation import rewrite_dilated
from .ops.float_island import absorb_float_islands, island_tensors
from .operators import check_operators, layer_of, missing_operators, missing_text
from edgetune.codegen.tflite_schema import ModelError

# Tensor types of an int8 model: int8 activations and weights, int32 biases, and the int32
# or int64 shape operands of RESHAPE, STRIDED_SLICE, PACK, MEAN's axes...; int16 activations
# with int64 biases in TFLite's 16x8 scheme (each operator checks the types it takes).
ALLOWED_TYPES = ("int8", "int16", "int32", "int64")


@dataclass(frozen=True)
class Workload:
    """A distinct (kernel, shape): identical layers are tuned once."""

    kernel: str
    shape: tuple[tuple[str, int], ...]
    layers: tuple[int, ...]  # operator indices it serves
    macs: int  # of all those layers together

    @property
    def shape_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.shape)


@dataclass(frozen=True)
class Model:
    path: str
    layers: tuple[ModelLayer, ...]
    graph: Graph = field(repr=False, compare=False)

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return self.graph.tensors

    @property
    def operators(self) -> tuple[Operator, ...]:
        return self.graph.operators

    @property
    def tuned(self) -> tuple[ModelLayer, ...]:
        return tuple(layer for layer in self.layers if layer.kernel is not None)

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    def workloads(self) -> tuple[Workload, ...]:
        """The distinct tuned workloads, in order of first appearance."""
        found: dict[tuple, list[ModelLayer]] = {}
        for layer in self.tuned:
            found.setdefault((layer.kernel, layer.shape), []).append(layer)
        return tuple(Workload(kernel, shape, tuple(l.index for l in layers), sum(l.macs for l in layers))
                     for (kernel, shape), layers in found.items())


def _check_types(graph: Graph) -> None:
    inside_islands = island_tensors(graph)  # float32 a float island's table computes (ops/float_island.py)
    # Tensors no operator reads or writes (an int8 LSTM's float "intermediates", which only
    # carry quantisation for its kernel) are not run: the registry judges their operator.
    used = {i for op in graph.operators for i in (*op.inputs, *op.outputs)} | set(graph.inputs) | set(graph.outputs)
    for t in graph.tensors:
        if t.dtype in ALLOWED_TYPES or t.index in inside_islands or t.index not in used:
            continue
        edge = _interface_edge(graph, t.index)
        if edge:  # an int8 model converted with a float or int16 interface: say how to convert it
            raise ModelError(f"{graph.path}: tensor {t.index} ({t.name}) is {t.dtype}: {edge}; edgetune runs int8 "
                             "operators only: convert the model with int8 inputs and outputs (the converter's "
                             "inference_input_type and inference_output_type)")
        inside = _float_inside(graph, t)
        if inside:
            raise ModelError(inside)
        kind = "a float" if t.dtype.startswith(("float", "bfloat")) else f"an {t.dtype}" if t.dtype[0] in "aeiou" else f"a {t.dtype}"
        raise ModelError(f"{graph.path}: tensor {t.index} ({t.name}) is {t.dtype}, so this is {kind} model; edgetune "
                         "runs int8 models (full-integer quantisation: int8 activations and weights, int32 biases)")


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _float_inside(graph: Graph, t: Tensor) -> str:
    """The refusal of a float tensor inside a model whose inputs and outputs are integers (the
    converter kept an operator without an integer kernel in float, between DEQUANTIZE and
    QUANTIZE): the tensor, the operator writing it, every operator computing in float, and
    every operator edgetune lacks, in one line; "" when t is no such tensor."""
    interface = [graph.tensors[i] for i in (*graph.inputs, *graph.outputs)]
    if not _is_float(t.dtype) or not interface or any(_is_float(x.dtype) for x in interface):
        return ""
    writer = next((op for op in graph.operators if t.index in op.outputs), None)
    source = f"written by operator {writer.index} ({writer.op})" if writer else "a constant"
    floats = [op for op in graph.operators
              if any(i >= 0 and _is_float(graph.tensors[i].dtype) for i in (*op.inputs, *op.outputs))]
    count = sum(_is_float(x.dtype) for x in graph.tensors)
    missing = missing_operators(graph)
    lacking = f"; and edgetune cannot run {missing_text(missing)}" if missing else ""
    return (f"{graph.path}: tensor {t.index} ({t.name}) is {t.dtype} inside an integer model (its inputs and "
            f"outputs are {interface[0].dtype}), {source}: {len(floats)} operator{'s' if len(floats) > 1 else ''} "
            f"compute in float or convert to it ({', '.join(f'{op.op} at {op.index}' for op in floats)}; {count} "
            f"float tensor{'s' if count > 1 else ''}), which the converter kept in float (an operator without an "
            f"integer kernel, or TFLITE_BUILTINS allowed); edgetune runs float only in float islands (DEQUANTIZE of "
            f"an int8 tensor, one-input float operators, QUANTIZE to int8), and this one is not such a chain{lacking}")


def _interface_edge(graph: Graph, t: int) -> str:
    """How tensor t is the model's input or output converted at its edge (a QUANTIZE from
    it, a DEQUANTIZE or QUANTIZE into it, as the converter writes for a float or int16
    interface), or ""."""
    for kind, tensors, side in (("input", graph.inputs, "inputs"), ("output", graph.outputs, "outputs")):
        if t in tensors:
            edge = [op for op in graph.operators if op.op in ("QUANTIZE", "DEQUANTIZE") and t in getattr(op, side)]
            if edge:
                return f"the model's {kind} {list(tensors).index(t)}, converted by {edge[0].op} (operator {edge[0].index})"
    return ""


def _check_static(graph: Graph) -> None:
    """Only a dynamic batch of size 1 is allowed (the converter's [-1, ...] signature on a
    batch-1 model: edgetune folds it to 1)."""
    for t in graph.tensors:
        if t.signature is None:
            continue
        dynamic = [i for i, d in enumerate(t.signature) if d < 0]
        if dynamic and (dynamic != [0] or not t.shape or t.shape[0] != 1):
            raise ModelError(f"{graph.path}: tensor {t.index} ({t.name}) has dynamic dimensions (shape signature "
                             f"{list(t.signature)}); edgetune needs static shapes, except a batch of 1")


def load_model(path: str | Path) -> Model:
    """Read a .tflite file: its graph and one ModelLayer per operator of subgraph 0 (a
    dilated convolution's three operators as one: dilation.py)."""
    graph = read_graph(path)
    _check_types(graph)
    _check_static(graph)
    graph = absorb_float_islands(rewrite_dilated(graph))
    check_operators(graph)
    return Model(graph.path, tuple(layer_of(graph, op) for op in graph.operators), graph)
