"""TensorFlow's converter writes a dilated convolution as SPACE_TO_BATCH_ND -> CONV_2D (or
DEPTHWISE_CONV_2D) -> BATCH_TO_SPACE_ND: the input padded and split into bh x bw strided
sub-images stacked in the batch, an undilated convolution over them, and the results
interleaved back and cropped. This rewrite runs such a chain as the one dilated convolution it
computes, on the tuned kernels (which take dilation): no copies, no batch of bh * bw images.

Along one axis, with block d, paddings (pt, pb), the middle convolution's own padding before b
(SAME, stride 1: (k - 1) // 2; VALID: 0) and crops (ct, cb), output m of the chain is

    sum_t w[t] * P[m + ct - pt - b * d + t * d]          (P: the input as SPACE_TO_BATCH_ND padded it)

a convolution of dilation d whose padding before is pt + b * d - ct. Outside P the middle
convolution pads with the zero point (those taps add nothing); inside P but outside the input
SPACE_TO_BATCH_ND pads with TFLite Micro's raw 0 (ops/space_batch.py), which adds
(0 - zero point) * w. So:

- where no kept output reads SPACE_TO_BATCH_ND's padding, or the input's zero point is 0, the
  chain is one CONV_2D of dilation d with TFLite's SAME or VALID padding (whichever gives the
  same padding and output size) on the chain's input: the two copies are absorbed into it;
- else, when the middle convolution is VALID (as the converter writes it), a SPACE_TO_BATCH_ND
  of block 1x1 pads the input with TFLite Micro's 0 exactly as far as the kept outputs read,
  and a VALID convolution of dilation d runs on that: one copy instead of two;
- anything else (a strided or dilated middle convolution, a batch, a 3-D chain, tensors read
  elsewhere, quantisation changed along the chain) is left as it is: the operators on their own.

A chain converted with a dynamic batch stores batch 1 for the blocks (the converter's shapes
before the batch is known). TFLite Micro sizes every tensor by its stored shape, so it moves
one block of bh x bw and leaves the rest of the output as its arena held it: no output to be
bit-exact with, and not the model's meaning. Such a model (a 3-D chain of a Conv1D too) is
refused at load, naming every such operator and how to convert it (with a fixed batch of 1 the
converter writes each dilated convolution as one convolution with dilation).

The graph keeps every operator at its index (messages name operators as the file has them):
the convolution's index holds the dilated convolution, and `Graph.absorbed` names the copies
whose work it does (no layer runs them, no C). Tensors it adds are appended after the file's.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from edgetune.codegen.tflite_schema import ModelError, schema

from .arithmetic import output_size
from .builder import constant
from .graph import Graph, Operator, Tensor
from .ops.fold import constant_value

CONVOLUTIONS = ("CONV_2D", "DEPTHWISE_CONV_2D")


@dataclass(frozen=True)
class Axis:
    """One spatial axis of a chain: the input's size, the kernel's, the block (the dilation),
    SPACE_TO_BATCH_ND's paddings, the middle convolution's padding before and BATCH_TO_SPACE_ND's
    crops, and the chain's output size."""

    size: int
    k: int
    d: int
    pads: tuple[int, int]
    inner: int
    crops: tuple[int, int]
    out: int

    @property
    def before(self) -> int:
        """The dilated convolution's padding before the input."""
        return self.pads[0] + self.inner * self.d - self.crops[0]

    def consistent(self, same: bool) -> bool:
        """The three operators' sizes agree: the padded input splits into whole blocks, and
        the middle convolution's outputs, interleaved and cropped, are the chain's output."""
        padded = self.size + sum(self.pads)
        inner_out = padded // self.d if same else padded // self.d - self.k + 1
        return padded % self.d == 0 and inner_out >= 1 and inner_out * self.d - sum(self.crops) == self.out

    def reads_padding(self) -> bool:
        """Whether a kept output reads a position SPACE_TO_BATCH_ND padded (the positions read
        run from `first` to `last` without a gap: consecutive outputs, one step apart)."""
        first, last = -self.before, self.out - 1 - self.before + (self.k - 1) * self.d
        top, bottom = self.pads
        reads_top = top > 0 and first < 0 and last >= -top
        return reads_top or (bottom > 0 and last >= self.size and first < self.size + bottom)

    def tflite_paddings(self) -> tuple[str, ...]:
        """SAME and/or VALID: those paddings of a dilation-d convolution that are this one."""
        return tuple(p for p in ("SAME", "VALID")
                     if output_size(self.size, self.k, 1, self.d, p)[:2] == (self.out, self.before))


@dataclass(frozen=True)
class Chain:
    to_batch: Operator
    conv: Operator
    to_space: Operator
    axes: tuple[Axis, Axis]  # height, width


def _readers(graph: Graph) -> dict[int, list[Operator]]:
    found: dict[int, list[Operator]] = {}
    for op in graph.operators:
        for t in set(op.inputs):
            if t >= 0:
                found.setdefault(t, []).append(op)
    return found


def _only_reader(graph: Graph, readers, tensor: int, kinds: tuple[str, ...]) -> Operator | None:
    """The one operator reading `tensor`, as its first input, when it is of `kinds` and the
    tensor is no model output."""
    ops = readers.get(tensor, [])
    if len(ops) != 1 or ops[0].op not in kinds or tensor in graph.outputs or ops[0].inputs[0] != tensor:
        return None
    return ops[0] if list(ops[0].inputs).count(tensor) == 1 else None


def _wired(op: Operator, inputs: int) -> bool:
    """The operator has its first `inputs` inputs and an output (a malformed one is left to its
    own refusal)."""
    return len(op.inputs) >= inputs and min(op.inputs[:inputs]) >= 0 and bool(op.outputs) and op.outputs[0] >= 0


def _ints(graph: Graph, op: Operator, position: int) -> np.ndarray | None:
    value = constant_value(graph, op.inputs[position]) if len(op.inputs) > position else None
    return None if value is None else np.asarray(value).astype(np.int64)


def _same_quantization(a: Tensor, b: Tensor) -> bool:
    return a.quantization is not None and a.quantization == b.quantization and a.dtype == b.dtype == "int8"


def _padding_name(op: Operator) -> str:
    names = {v: k for k, v in vars(schema().Padding).items() if isinstance(v, int)}
    return names.get(int(op.option("padding", 0)), "")


def _axes(graph: Graph, to_batch: Operator, conv: Operator, to_space: Operator) -> tuple[Axis, Axis] | None:
    """The chain's two axes, or None when it is not a dilated convolution's."""
    block, pads, block_back, crops = (_ints(graph, to_batch, 1), _ints(graph, to_batch, 2),
                                      _ints(graph, to_space, 1), _ints(graph, to_space, 2))
    x, y = graph.tensors[to_batch.inputs[0]], graph.tensors[to_space.outputs[0]]
    w = graph.tensors[conv.inputs[1]]
    if any(v is None for v in (block, pads, block_back, crops)) or len(x.shape) != 4 or x.shape[0] != 1:
        return None
    if block.shape != (2,) or not np.array_equal(block, block_back):
        return None
    if pads.shape != (2, 2) or crops.shape != (2, 2) or len(w.shape) != 4 or len(y.shape) != 4 or y.shape[0] != 1:
        return None
    strides = [int(conv.option(f"{name}{a}{end}", 1)) for name, end in (("stride", ""), ("dilation", "Factor"))
               for a in "HW"]
    padding = _padding_name(conv)
    if strides != [1, 1, 1, 1] or padding not in ("SAME", "VALID") or block.min() < 1:
        return None
    axes = []
    for n in range(2):
        k = int(w.shape[1 + n])
        inner = (k - 1) // 2 if padding == "SAME" else 0
        axes.append(Axis(int(x.shape[1 + n]), k, int(block[n]), (int(pads[n][0]), int(pads[n][1])), inner,
                         (int(crops[n][0]), int(crops[n][1])), int(y.shape[1 + n])))
    return tuple(axes) if all(a.consistent(padding == "SAME") for a in axes) else None


def chains(graph: Graph) -> tuple[Chain, ...]:
    """Every SPACE_TO_BATCH_ND -> convolution -> BATCH_TO_SPACE_ND of the graph whose tensors
    between are read by the next operator only and keep one quantisation."""
    readers, found = _readers(graph), []
    for to_batch in (op for op in graph.operators if op.op == "SPACE_TO_BATCH_ND" and _wired(op, 3)):
        conv = _only_reader(graph, readers, to_batch.outputs[0], CONVOLUTIONS)
        conv = conv if conv is not None and _wired(conv, 2) else None
        to_space = conv and _only_reader(graph, readers, conv.outputs[0], ("BATCH_TO_SPACE_ND",))
        if not to_space or not _wired(to_space, 3):
            continue
        x, s = graph.tensors[to_batch.inputs[0]], graph.tensors[to_batch.outputs[0]]
        c, y = graph.tensors[conv.outputs[0]], graph.tensors[to_space.outputs[0]]
        if not (_same_quantization(x, s) and _same_quantization(c, y)):
            continue
        axes = _axes(graph, to_batch, conv, to_space)
        if axes is not None and s.shape[0] == c.shape[0] == axes[0].d * axes[1].d:
            found.append(Chain(to_batch, conv, to_space, axes))
    return tuple(found)


def _short_blocks(graph: Graph) -> list[tuple[Operator, int, int]]:
    """(operator, blocks tensor, bh * bw) of every SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND whose
    blocks' tensor (the output, the input) stores a batch its constant block does not give."""
    found = []
    for op in graph.operators:
        if op.op not in ("SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND") or not _wired(op, 2):
            continue
        block = _ints(graph, op, 1)
        if block is None or block.size == 0 or block.min() < 1 or int(np.prod(block)) == 1:
            continue
        blocks, other = (op.outputs[0], op.inputs[0]) if op.op == "SPACE_TO_BATCH_ND" else (op.inputs[0], op.outputs[0])
        stored, batch = graph.tensors[blocks].shape[:1], graph.tensors[other].shape[:1]
        if stored and batch and stored[0] != batch[0] * int(np.prod(block)):
            found.append((op, blocks, int(np.prod(block))))
    return found


def check_blocks(graph: Graph) -> None:
    """Refuse, in one line naming them all, the block moves converted with a dynamic batch:
    their blocks' tensor stores batch 1, and TFLite Micro, which sizes tensors by their stored
    shape, moves 1 of the bh x bw blocks and leaves the rest of its output as the arena held it."""
    short = _short_blocks(graph)
    if not short:
        return
    op, tensor, blocks = short[0]
    named = ", ".join(f"{o.index} ({o.op})" for o, _, _ in short)
    t = graph.tensors[tensor]
    raise ModelError(
        f"{graph.path}: operator{'s' if len(short) > 1 else ''} {named} converted with a dynamic batch: tensor "
        f"{t.index} ({t.name}) stores batch {t.shape[0]} where operator {op.index} gives {blocks} blocks, and TFLite "
        f"Micro, which sizes tensors by their stored shape, moves 1 of the {blocks} blocks and leaves the rest as its "
        "arena held it; convert the model with a fixed batch of 1 (keras.Input(..., batch_size=1)): the converter then "
        "writes each dilated convolution as one convolution with dilation, which edgetune runs")


def _dilated(conv: Operator, source: int, output: int, padding: str, axes: tuple[Axis, Axis]) -> Operator:
    """The chain's convolution with dilation: its weights, bias and options, the chain's
    input (or the padded copy) and output."""
    changed = {"padding": getattr(schema().Padding, padding), "dilationHFactor": axes[0].d,
               "dilationWFactor": axes[1].d}
    options = tuple((name, changed.get(name, value)) for name, value in conv.options)
    options += tuple((name, value) for name, value in changed.items() if name not in dict(conv.options))
    return replace(conv, inputs=(source, *conv.inputs[1:]), outputs=(output,), options=options)


def _padded_copy(graph: Graph, chain: Chain, tensors: list[Tensor]) -> tuple[Operator, int] | None:
    """A SPACE_TO_BATCH_ND of block 1x1 padding the input with TFLite Micro's 0 as far as the
    kept outputs read (the middle convolution VALID), and its output tensor; None when the
    chain crops more than it pads."""
    if any(a.inner for a in chain.axes):
        return None
    edges = []
    for a in chain.axes:
        top = a.pads[0] - a.crops[0]
        bottom = a.out + (a.k - 1) * a.d - a.size - top
        if top < 0 or bottom < 0:
            return None
        edges.append((top, bottom))
    x = graph.tensors[chain.to_batch.inputs[0]]
    shape = (1, x.shape[1] + sum(edges[0]), x.shape[2] + sum(edges[1]), x.shape[3])
    base = len(tensors)
    tensors += [constant(base, f"{x.name}/dilation_block", np.array([1, 1], dtype=np.int32)),
                constant(base + 1, f"{x.name}/dilation_paddings", np.array(edges, dtype=np.int32)),
                Tensor(base + 2, f"{x.name}/dilation_padded", shape, "int8", x.quantization)]
    op = replace(chain.to_batch, inputs=(x.index, base, base + 1), outputs=(base + 2,))
    return op, base + 2


def rewrite_dilated(graph: Graph) -> Graph:
    """The graph with each dilated convolution's chain run as one dilated convolution (a chain
    converted with a dynamic batch refused: check_blocks)."""
    check_blocks(graph)
    operators, tensors, absorbed = list(graph.operators), list(graph.tensors), list(graph.absorbed)
    for chain in chains(graph):
        x = graph.tensors[chain.to_batch.inputs[0]]
        y = chain.to_space.outputs[0]
        paddings = [p for p in chain.axes[0].tflite_paddings() if p in chain.axes[1].tflite_paddings()]
        zero_read = x.quantization.zero_points[0] == 0 or not any(a.reads_padding() for a in chain.axes)
        if zero_read and paddings:
            operators[chain.conv.index] = _dilated(chain.conv, x.index, y, paddings[0], chain.axes)
            absorbed += [(chain.to_batch.index, chain.conv.index), (chain.to_space.index, chain.conv.index)]
            continue
        padded = _padded_copy(graph, chain, tensors)
        if padded is None:
            continue
        operators[chain.to_batch.index], source = padded
        operators[chain.conv.index] = _dilated(chain.conv, source, y, "VALID", chain.axes)
        absorbed.append((chain.to_space.index, chain.conv.index))
    if len(absorbed) == len(graph.absorbed):
        return graph
    return replace(graph, tensors=tuple(tensors), operators=tuple(operators), absorbed=tuple(absorbed))
