"""A model's operators as edgetune layers: which kernel serves each, with the kernel's shape
keys and the layer's real weights, bias and requantisation, in the buffers and parameters
the kernel takes (codegen/kernels/conv2d_s8.py and dwconv2d_s8.py, make_io's order).

  CONV_2D            conv2d_s8    filters OHWI as TFLite stores them
  DEPTHWISE_CONV_2D  dwconv2d_s8  filters [1][kh][kw][c * mult] (output channel oc reads
                                  input channel oc // mult), any depth multiplier
  FULLY_CONNECTED    conv2d_s8    a 1x1 convolution: h=1, w=rows (the batch), cin=K,
                                  cout=N; per-tensor weights repeat one multiplier; no bias
                                  input is a bias of zeros
The operators edgetune runs without tuning them are layers with kernel None. Which builder
serves which operator is the registry's (operators.py).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from edgetune.codegen.kernels.base import MAX_ELEMENTS, Buffer, KernelIO
from edgetune.codegen.kernels.convolution import MAX_REDUCTION

from .arithmetic import INT8_MAX, INT8_MIN, MAX_SHIFT, activation_range, output_size, quantize_multiplier
from .graph import Graph, Operator, Tensor
from edgetune.codegen.tflite_schema import ModelError, schema

CONV_KEYS = ("h", "w", "cin", "cout", "kh", "kw", "stride_h", "stride_w", "dilation_h", "dilation_w",
             "pad_top", "pad_bottom", "pad_left", "pad_right")
DWCONV_KEYS = ("h", "w", "c", "mult", "kh", "kw", "stride_h", "stride_w", "dilation_h", "dilation_w",
               "pad_top", "pad_bottom", "pad_left", "pad_right")


@dataclass(frozen=True)
class ModelLayer:
    """One operator of subgraph 0. For a tuned one: the kernel, its shape (the kernel's keys
    in order), MACs, and the layer's constants as the kernel's buffers."""

    index: int
    op: str
    kernel: str | None
    shape: tuple[tuple[str, int], ...]
    macs: int
    input_shape: tuple[int, ...]  # the operator's first input and first output, as the model has them
    output_shape: tuple[int, ...]
    operator: Operator = field(repr=False, compare=False)
    tensors: tuple[Tensor | None, ...] = field(default=(), repr=False, compare=False)  # inputs then outputs
    constants: tuple[Buffer, ...] = field(default=(), repr=False, compare=False)  # weights, bias, multiplier, shift
    params: tuple[tuple[str, int], ...] = ()  # in_zero, out_zero, act_min, act_max
    kernel_output: tuple[int, ...] = ()  # the kernel's output buffer shape
    # A layer a kernel of the user's own serves (user_layers.py): its buffers in the kernel's
    # order, which take the operator's input and output, the input buffer's shape, which of
    # the operator's inputs it reads, and what judges it ("tflm", or the kernel's "reference").
    arguments: tuple[str, ...] = ()
    input_name: str = "input"
    output_name: str = "output"
    input_dims: tuple[int, ...] = ()
    input_position: int = 0
    oracle: str = "tflm"
    # Buffers that take another of the operator's inputs at run time (BATCH_MATMUL's right
    # operand): (buffer name, operator input position). Their constants are stand-ins (drawn
    # values) for tuning and the one-operator oracle; the module passes the tensor itself.
    extra_inputs: tuple[tuple[str, int], ...] = ()
    dtype: str = "int8"  # the activations' type: int8, or int16 (the 16x8 layers of layers16.py)

    @property
    def shape_dict(self) -> dict[str, int]:
        return dict(self.shape)

    @property
    def shape_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.shape)

    @property
    def input_tensor(self) -> int:
        """The model tensor the kernel's input buffer reads."""
        return self.operator.inputs[self.input_position]

    @property
    def kernel_input(self) -> tuple[int, ...]:
        if self.input_dims:
            return self.input_dims
        s = self.shape_dict
        return (s["h"], s["w"], s["cin"] if "cin" in s else s["c"])

    def io(self, input: np.ndarray) -> KernelIO:
        """The kernel's buffers and parameters for this layer on an input of its type (the
        model's input tensor shape, or the kernel's [h][w][c]): real weights, bias, requantisation."""
        if self.kernel is None:
            raise ModelError(f"operator {self.index} ({self.op}) is not served by a tuned kernel")
        x = np.asarray(input)
        if x.dtype != np.dtype(self.dtype) or x.size != int(np.prod(self.kernel_input)):
            raise ModelError(f"operator {self.index} ({self.op}): input must be {self.dtype} with "
                             f"{int(np.prod(self.kernel_input))} elements, got {x.dtype} {list(x.shape)}")
        out = Buffer(self.output_name, np.zeros(self.kernel_output, dtype=self.dtype), is_output=True)
        given = Buffer(self.input_name, x.reshape(self.kernel_input).copy())
        if not self.arguments:
            return KernelIO(buffers=(given, *self.constants, out), params=self.params)
        by_name = {b.name: b for b in (given, *self.constants, out)}
        return KernelIO(buffers=tuple(by_name[name] for name in self.arguments), params=self.params)


class _Reader:
    """Tensors of one operator, with errors naming the file, the operator and its index."""

    def __init__(self, graph: Graph, op: Operator):
        self.graph, self.op = graph, op

    def fail(self, what: str) -> ModelError:
        return ModelError(f"{self.graph.path}: operator {self.op.index} ({self.op.op}): {what}")

    def tensor(self, position: int, role: str, dtype: str = "int8", optional: bool = False) -> Tensor | None:
        indices = self.op.inputs if role != "output" else self.op.outputs
        index = indices[position] if position < len(indices) else -1
        if index < 0:
            if optional:
                return None
            raise self.fail(f"has no {role} tensor")
        t = self.graph.tensors[index]
        if not t.shape or min(t.shape) < 1 or t.elements > MAX_ELEMENTS:
            raise self.fail(f"{role} tensor {t.index} ({t.name}) has shape {list(t.shape)}: edgetune's kernels take "
                            f"tensors of 1 to {MAX_ELEMENTS} elements, no dimension 0")
        if t.dtype != dtype:
            raise self.fail(f"{role} tensor {t.index} ({t.name}) is {t.dtype}, expected {dtype}")
        if role in ("weights", "bias") and not t.constant:
            raise self.fail(f"{role} tensor {t.index} ({t.name}) is not a constant (edgetune needs constant {role})")
        return t

    def scale_zero(self, t: Tensor, role: str) -> tuple[float, int]:
        q = t.quantization
        if q is None or q.per_axis:
            raise self.fail(f"{role} tensor {t.index} ({t.name}) needs one scale and zero point "
                            f"({'none' if q is None else len(q.scales)} given)")
        if not 0 < q.scales[0] < math.inf:
            raise self.fail(f"{role} tensor {t.index} ({t.name}) has scale {q.scales[0]}, not a positive number")
        if not INT8_MIN <= q.zero_points[0] <= INT8_MAX:
            raise self.fail(f"{role} tensor {t.index} ({t.name}) has zero point {q.zero_points[0]}, outside int8")
        return q.scales[0], q.zero_points[0]

    def weight_scales(self, w: Tensor, channels: int, axis: int) -> tuple[float, ...]:
        """Per-channel (along `axis`) or per-tensor (repeated) weight scales; zero points 0."""
        q = w.quantization
        if q is None:
            raise self.fail(f"weights tensor {w.index} ({w.name}) is not quantised")
        if any(z != 0 for z in q.zero_points):
            raise self.fail(f"weights tensor {w.index} ({w.name}) has a non-zero zero point (edgetune's kernels "
                            "take symmetric weights, as TFLite's int8 scheme specifies)")
        if q.per_axis and (q.axis != axis or len(q.scales) != channels):
            raise self.fail(f"weights tensor {w.index} ({w.name}): {len(q.scales)} scales along axis {q.axis}, "
                            f"expected {channels} along axis {axis}")
        if not all(0 < s < math.inf for s in q.scales):
            raise self.fail(f"weights tensor {w.index} ({w.name}) has a scale that is not a positive number")
        return q.scales if q.per_axis else q.scales * channels

    def activation(self) -> str:
        code = int(self.op.option("fusedActivationFunction", 0))
        names = {v: k for k, v in vars(schema().ActivationFunctionType).items() if isinstance(v, int)}
        name = names.get(code, f"activation {code}")
        if name not in ("NONE", "RELU", "RELU6", "RELU_N1_TO_1"):
            raise self.fail(f"fused activation {name} is not one edgetune runs (NONE, RELU, RELU6, RELU_N1_TO_1)")
        return name

    def channel_multipliers(self, in_scale: float, out_scale: float, w: Tensor, channels: int, axis: int,
                            limit: int = MAX_SHIFT, why: str = "") -> tuple[list[int], list[int]]:
        """Per output channel, input_scale * weight_scale / output_scale in double precision as
        TFLite's (multiplier, shift); a shift above `limit` is refused (`why` says whose limit)."""
        multipliers, shifts = [], []
        for scale in self.weight_scales(w, channels, axis):
            real = in_scale * scale / out_scale
            q, shift = quantize_multiplier(real)
            if shift > limit:
                raise self.fail(f"requantisation scale {real:g} is too large (at most 2^{limit}{why})")
            multipliers.append(q)
            shifts.append(shift)
        return multipliers, shifts

    def requantisation(self, x: Tensor, w: Tensor, y: Tensor, channels: int,
                       axis: int) -> tuple[tuple[Buffer, ...], tuple[tuple[str, int], ...]]:
        """Multiplier and shift buffers per output channel, and the scalar parameters. The
        real multiplier is input_scale * weight_scale / output_scale in double precision, for
        per-tensor weights too (a product rounded to float first differs from TFLite Micro's
        in the last bit of some multipliers: tests/test_model_oracle.py)."""
        in_scale, in_zero = self.scale_zero(x, "input")
        out_scale, out_zero = self.scale_zero(y, "output")
        multipliers, shifts = self.channel_multipliers(in_scale, out_scale, w, channels, axis)
        act_min, act_max = activation_range(self.activation(), out_scale, out_zero)
        if act_min > act_max:
            raise self.fail(f"the fused activation's range [{act_min}, {act_max}] is empty at the output's scale")
        buffers = (Buffer("multiplier", np.array(multipliers, dtype=np.int32), weight=True),
                   Buffer("shift", np.array(shifts, dtype=np.int32), weight=True))
        return buffers, (("in_zero", in_zero), ("out_zero", out_zero), ("act_min", act_min), ("act_max", act_max))

    def bias(self, channels: int) -> Buffer:
        b = self.tensor(2, "bias", dtype="int32", optional=True)
        if b is None:
            return Buffer("bias", np.zeros(channels, dtype=np.int32), weight=True)
        if b.elements != channels:
            raise self.fail(f"bias tensor {b.index} ({b.name}) has {b.elements} values for {channels} output channels")
        return Buffer("bias", b.array().reshape(channels).astype(np.int32), weight=True)

    def operator_tensors(self) -> tuple[Tensor | None, ...]:
        return tuple(self.graph.tensors[i] if i >= 0 else None for i in (*self.op.inputs, *self.op.outputs))


def dense_rows(r: _Reader, x: Tensor, w: Tensor, y: Tensor,
               check_reduction: Callable[[_Reader, int], None]) -> tuple[int, int, int]:
    """A dense layer's (n outputs, k inputs, rows), checked: DEFAULT weights [n, k], an input
    of whole rows of k (the batch, or all leading dimensions), an output of rows x n; the
    reduction of k products within what the kernel's accumulator takes (`check_reduction`)."""
    if int(r.op.option("weightsFormat", 0)) != 0:
        raise r.fail("weights in a shuffled format are not supported (only the DEFAULT weights format)")
    if len(w.shape) != 2:
        raise r.fail(f"weights tensor {w.index} ({w.name}) has shape {list(w.shape)}, expected [n, k]")
    n, k = w.shape
    check_reduction(r, k)
    if x.elements % k:
        raise r.fail(f"input tensor {x.index} ({x.name}) of shape {list(x.shape)} does not split into rows of {k}")
    rows = x.elements // k
    if y.elements != rows * n:
        raise r.fail(f"output tensor {y.index} ({y.name}) has shape {list(y.shape)}, expected {rows} rows of {n}")
    return n, k, rows


def _check_reduction(r: _Reader, products: int) -> None:
    """The kernels' int32 accumulators hold at most MAX_REDUCTION products (convolution.py)."""
    if products > MAX_REDUCTION:
        raise r.fail(f"each output sums {products} products, more than edgetune's kernels take ({MAX_REDUCTION})")


def _spatial(r: _Reader, x: Tensor, y: Tensor, kh: int, kw: int, channels_out: int) -> dict[str, int]:
    """Strides, dilations and TFLite's per-side padding of a 2-D convolution, checked
    against the output tensor's shape."""
    if len(x.shape) != 4 or x.shape[0] != 1:
        raise r.fail(f"input tensor {x.index} ({x.name}) has shape {list(x.shape)}; edgetune's convolutions take "
                     "[1, h, w, c] (batch 1)")
    names = {v: k for k, v in vars(schema().Padding).items() if isinstance(v, int)}
    padding = names.get(int(r.op.option("padding", 0)), "")
    geometry = {}
    for axis, size, k, side in (("h", x.shape[1], kh, ("pad_top", "pad_bottom")),
                                ("w", x.shape[2], kw, ("pad_left", "pad_right"))):
        stride, dilation = int(r.op.option(f"stride{axis.upper()}", 0)), int(r.op.option(f"dilation{axis.upper()}Factor", 1))
        if stride < 1 or dilation < 1 or padding not in ("SAME", "VALID"):
            raise r.fail(f"stride {stride}, dilation {dilation} and padding {padding or '?'} along {axis} are not "
                         "a valid convolution")
        out, before, after = output_size(size, k, stride, dilation, padding)
        geometry.update({f"stride_{axis}": stride, f"dilation_{axis}": dilation, side[0]: before, side[1]: after,
                         f"o{axis}": out})
    expected = (1, geometry["oh"], geometry["ow"], channels_out)
    if geometry["oh"] < 1 or geometry["ow"] < 1 or tuple(y.shape) != expected:
        raise r.fail(f"output tensor {y.index} ({y.name}) has shape {list(y.shape)}, but the convolution gives "
                     f"{list(expected)}")
    return geometry


def conv_weights(r: _Reader, x: Tensor, w: Tensor) -> tuple[int, int, int, int]:
    """A convolution's (cout, kh, kw, cin), checked: OHWI weights taking the input's channels
    (no grouped convolutions)."""
    if len(w.shape) != 4:
        raise r.fail(f"weights tensor {w.index} ({w.name}) has shape {list(w.shape)}, expected [cout, kh, kw, cin]")
    cout, kh, kw, cin = w.shape
    if len(x.shape) == 4 and x.shape[3] != cin:
        raise r.fail(f"weights take {cin} input channels but the input has {x.shape[3]} (grouped convolutions "
                     "are not supported)")
    return cout, kh, kw, cin


def conv_layer(graph: Graph, op: Operator) -> ModelLayer:
    r = _Reader(graph, op)
    x, w, y = r.tensor(0, "input"), r.tensor(1, "weights"), r.tensor(0, "output")
    cout, kh, kw, cin = conv_weights(r, x, w)
    _check_reduction(r, kh * kw * cin)
    g = _spatial(r, x, y, kh, kw, cout)
    quant, params = r.requantisation(x, w, y, cout, axis=0)
    shape = dict(h=x.shape[1], w=x.shape[2], cin=cin, cout=cout, kh=kh, kw=kw, **{k: g[k] for k in CONV_KEYS[6:]})
    constants = (Buffer("weights", w.array().copy(), weight=True), r.bias(cout), *quant)
    return ModelLayer(r.op.index, r.op.op, "conv2d_s8", tuple((k, int(shape[k])) for k in CONV_KEYS),
                      g["oh"] * g["ow"] * cout * kh * kw * cin, x.shape, y.shape, r.op, r.operator_tensors(),
                      constants, params, (g["oh"], g["ow"], cout))


def dwconv_layer(graph: Graph, op: Operator) -> ModelLayer:
    r = _Reader(graph, op)
    x, w, y = r.tensor(0, "input"), r.tensor(1, "weights"), r.tensor(0, "output")
    if len(w.shape) != 4 or w.shape[0] != 1 or len(x.shape) != 4:
        raise r.fail(f"weights tensor {w.index} ({w.name}) has shape {list(w.shape)}, expected [1, kh, kw, c * mult]")
    _, kh, kw, cout = w.shape
    c = x.shape[3]
    if cout % c:
        raise r.fail(f"{cout} output channels are not a multiple of the input's {c} (depth multiplier)")
    _check_reduction(r, kh * kw)
    g = _spatial(r, x, y, kh, kw, cout)
    quant, params = r.requantisation(x, w, y, cout, axis=3)
    shape = dict(h=x.shape[1], w=x.shape[2], c=c, mult=cout // c, kh=kh, kw=kw, **{k: g[k] for k in DWCONV_KEYS[6:]})
    constants = (Buffer("weights", w.array().reshape(kh, kw, cout).copy(), weight=True), r.bias(cout), *quant)
    return ModelLayer(r.op.index, r.op.op, "dwconv2d_s8", tuple((k, int(shape[k])) for k in DWCONV_KEYS),
                      g["oh"] * g["ow"] * cout * kh * kw, x.shape, y.shape, r.op, r.operator_tensors(),
                      constants, params, (g["oh"], g["ow"], cout))


def fully_connected_layer(graph: Graph, op: Operator) -> ModelLayer:
    """A dense layer as conv2d_s8 1x1: every row of the input (the batch, or all leading
    dimensions) is one output pixel."""
    r = _Reader(graph, op)
    x, w, y = r.tensor(0, "input"), r.tensor(1, "weights"), r.tensor(0, "output")
    n, k, rows = dense_rows(r, x, w, y, _check_reduction)
    quant, params = r.requantisation(x, w, y, n, axis=0)
    shape = dict(h=1, w=rows, cin=k, cout=n, kh=1, kw=1, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1,
                 pad_top=0, pad_bottom=0, pad_left=0, pad_right=0)
    constants = (Buffer("weights", w.array().reshape(n, 1, 1, k).copy(), weight=True), r.bias(n), *quant)
    return ModelLayer(r.op.index, r.op.op, "conv2d_s8", tuple((key, int(shape[key])) for key in CONV_KEYS),
                      rows * n * k, x.shape, y.shape, r.op, r.operator_tensors(), constants, params, (1, rows, n))


def untuned_layer(graph: Graph, op: Operator) -> ModelLayer:
    """A library or folded operator: no kernel, its tensors as the model has them. Its input
    shape is its first input that is not a constant (SPLIT's values, not its axis)."""
    r = _Reader(graph, op)
    tensors = r.operator_tensors()
    inputs = [t for t in tensors[:len(r.op.inputs)] if t is not None]
    first_in = next((t.shape for t in inputs if not t.constant), inputs[0].shape if inputs else ())
    first_out = next((t.shape for t in tensors[len(r.op.inputs):] if t is not None), ())
    return ModelLayer(r.op.index, r.op.op, None, (), 0, first_in, first_out, r.op, tensors)

