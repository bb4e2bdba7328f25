"""UNIDIRECTIONAL_SEQUENCE_LSTM as TFLite Micro's integer kernel computes it (checked bit for
bit in tests/test_ops_lstm.py), in its two forms: int8 (8x8->16: int8 input, hidden state and
weights, int32 biases) and 16x8 (int16 input and hidden state, zero points 0, int8 weights,
int64 biases); both with int16 gates and cell state. Per time step, for each of the four
gates (input i, forget f, cell g, output o; TFLite's tensor order):

- two fully connected products into int16 at scale 2^-12 (Q3.12): the input's,
  sum((x - z_in) * W) + bias requantised by s_in * s_W / 2^-12, and the hidden state's,
  sum((h - z_h) * R) requantised by s_h * s_R / 2^-12 (no bias), each clamped to int16
  (TFLite's FullyConnected with an int16 output, its multipliers in double precision; 16x8:
  an int64 sum and TFLite's 64-bit MultiplyByQuantizedMultiplier);
- their sum saturated to int16, then the int16 LOGISTIC (i, f, o) or TANH (g) of
  ops/sigmoid16.py with the input multiplier 3 (Q3.12 is the table's input scale): Q0.15 out;
- the cell state c (int16 at a power-of-two scale 2^p): c = sat16(f * c requantised by
  2^-15) + (i * g requantised by 2^-30 / s_c), saturated; clipped to +-cell_clip / s_c when
  the model sets a cell clip;
- the hidden state h = o * tanh(c) requantised by 2^-30 / s_h, plus z_h, saturated to its
  type, where tanh reads c at the input scale 2^p (multiplier 3 << (12 + p), or 3 and a
  rounding shift right by -(12 + p) when that is negative); h is also the step's output row.

The state starts at zero (the hidden state at its zero point: TFLite Micro resets variable
tensors so) at every invocation: the module runs the whole sequence it is given, as a Keras
LSTM (stateful=False) does; TFLite Micro's interpreter would carry its state over to a next
invocation that is not reset. TFLite Micro runs only the plain LSTM: the variants (peephole
weights, a projection, layer normalisation, no input gate (CIFG)) are refused by its kernel
and here, naming them. TensorFlow's converter writes no 16x8 LSTM ("Quantization to 16x8-bit
not yet supported"); such a model made otherwise runs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..arithmetic import quantize_multiplier
from ..graph import Graph, Operator, Tensor
from ..layers import ModelLayer, untuned_layer
from .base import OperatorReader, StaticOp, scale, typed_input, zero_point
from .fixedpoint import multiply_by_quantized_multiplier, wrap32
from .sigmoid16 import checked_log2, sigmoid_or_tanh16, sigmoid_table
from .sixteen import INT16_MAX, INT16_MIN, activation_of
from edgetune.codegen.kernels.sixteen import multiply_64

GATES = ("input", "forget", "cell", "output")  # TFLite's order of the weights and biases
INPUT_WEIGHTS = (1, 2, 3, 4)  # input_to_{input,forget,cell,output}_weights
RECURRENT_WEIGHTS = (5, 6, 7, 8)
BIASES = (12, 13, 14, 15)
HIDDEN_STATE, CELL_STATE = 18, 19
VARIANTS = {(9, 10, 11): "peephole (cell-to-gate) weights", (16, 17): "a projection",
            (20, 21, 22, 23): "layer normalisation"}
GATE_INPUT_SCALE = 2.0 ** -12  # the gates' pre-activation scale (Q3.12): TFLite Micro's, fixed
GATE_OUTPUT_SCALE = 2.0 ** -15  # LOGISTIC and TANH write Q0.15
TANH = 4  # ActivationFunctionType.TANH: the cell gate's activation (TFLite Micro's only other is none)
SIGMOID_INPUT = (3, 0)  # Q3.12 into the table: x * 3, no shift


@dataclass(frozen=True)
class LstmParams(StaticOp):
    batch: int
    steps: int
    n_input: int
    n_state: int
    time_major: bool
    zero_in: int
    zero_hidden: int
    input_scaling: tuple[tuple[int, int], ...]  # per gate: (multiplier, shift) of the input's product
    recurrent_scaling: tuple[tuple[int, int], ...]  # per gate: of the hidden state's product
    forget_scaling: tuple[int, int]  # f * c -> c
    update_scaling: tuple[int, int]  # i * g -> c
    hidden_scaling: tuple[int, int]  # o * tanh(c) -> h
    cell_tanh: tuple[int, int]  # tanh's input (multiplier, shift) for the cell state
    cell_clip: int  # the quantised clip of the cell state, 0: none
    biases: tuple[tuple[int, ...], ...]  # per gate, the model's int32 bias
    input_sums: tuple[tuple[int, ...], ...]  # per gate: bias - z_in * (row sums of W), as int32 (the C's start)
    hidden_sums: tuple[tuple[int, ...], ...]  # per gate: -z_h * (row sums of R), as int32
    sixteen: bool = False  # int16 activations, int64 biases (TFLite's 16x8 form; zero points 0)

    template = "lstm.c.j2"
    op = "UNIDIRECTIONAL_SEQUENCE_LSTM"

    @property
    def input_positions(self) -> tuple[int, ...]:
        """The input sequence and the eight weight matrices (constants). The biases are not
        read: the C starts each sum from input_sums and hidden_sums, which fold the zero points
        in (sum((x - z) * w) + bias = sum(x * w) + bias - z * sum(w), in int32 as TFLite's)."""
        return (0, *INPUT_WEIGHTS, *RECURRENT_WEIGHTS)

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        sequence = (self.steps, self.batch) if self.time_major else (self.batch, self.steps)
        return ((*sequence, self.n_input), *((self.n_state, self.n_input),) * 4, *((self.n_state, self.n_state),) * 4)

    @property
    def output_shape(self) -> tuple[int, ...]:
        sequence = (self.steps, self.batch) if self.time_major else (self.batch, self.steps)
        return (*sequence, self.n_state)

    @property
    def scratch_layout(self) -> dict[str, int]:
        """Byte offsets in the working memory (the step's arena scratch): the dot products' sums
        of one gate (int32, int64 for 16x8, the units rounded up to 4), the four gates (int16),
        the cell state (int16), the hidden state; "bytes": the total."""
        return _scratch_layout(self.n_state, self.sixteen)

    @property
    def scratch_bytes(self) -> int:
        return self.scratch_layout["bytes"]

    @property
    def activation_dtype(self) -> str:
        return "int16" if self.sixteen else "int8"

    @property
    def input_ctypes(self) -> tuple[str, ...]:
        return (f"{self.activation_dtype}_t",) + ("int8_t",) * 8

    @property
    def output_ctype(self) -> str:
        return f"{self.activation_dtype}_t"

    def describe(self) -> str:
        return (f"batch={self.batch}, steps={self.steps}, inputs={self.n_input}, units={self.n_state}, "
                f"time_major={self.time_major}, zero_in={self.zero_in}, zero_hidden={self.zero_hidden}")

    def variables(self) -> dict:
        return dict(super().variables(), gates=GATES, table=sigmoid_table(), sigmoid_input=SIGMOID_INPUT,
                    layout=self.scratch_layout)

    def reference(self, x, *weights) -> np.ndarray:
        """TFLite Micro's output for the input sequence `x` and the eight weight matrices."""
        shapes = self.input_shapes
        x = typed_input(x, self.activation_dtype, shapes[0], "input").astype(np.int64)
        weights = [typed_input(w, "int8", s, f"weights {k}").astype(np.int64)
                   for k, (w, s) in enumerate(zip(weights, shapes[1:]), start=1)]
        biases = [np.asarray(b, dtype=np.int64) for b in self.biases]
        if self.time_major:
            x = x.transpose(1, 0, 2)
        out = np.empty((self.batch, self.steps, self.n_state), dtype=self.activation_dtype)
        for b in range(self.batch):  # every batch row is its own sequence with its own state
            hidden = np.full(self.n_state, self.zero_hidden, dtype=np.int64)
            cell = np.zeros(self.n_state, dtype=np.int64)
            for t in range(self.steps):
                gates = [self._gate(g, x[b, t], hidden, weights[g], weights[4 + g], biases[g]) for g in range(4)]
                hidden, cell = self._update(gates, cell)
                out[b, t] = hidden
        return out.transpose(1, 0, 2).copy() if self.time_major else out

    def _gate(self, g: int, x: np.ndarray, hidden: np.ndarray, w: np.ndarray, r: np.ndarray,
              bias: np.ndarray) -> np.ndarray:
        if self.sixteen:  # TFLite's int16 FullyConnected: an int64 sum (zero points 0), its 64-bit multiply
            from_input = np.clip(multiply_64(w @ x + bias, *self.input_scaling[g]), INT16_MIN, INT16_MAX)
            from_hidden = np.clip(multiply_64(r @ hidden, *self.recurrent_scaling[g]), INT16_MIN, INT16_MAX)
        else:
            from_input = _requantised16(w @ (x - self.zero_in) + bias, self.input_scaling[g])
            from_hidden = _requantised16(r @ (hidden - self.zero_hidden), self.recurrent_scaling[g])
        total = np.clip(from_input + from_hidden, INT16_MIN, INT16_MAX)
        return sigmoid_or_tanh16(total, *SIGMOID_INPUT, tanh=GATES[g] == "cell").astype(np.int64)

    def _update(self, gates: list[np.ndarray], cell: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        i, f, g, o = gates
        cell = _requantised16(f * cell, self.forget_scaling) + _requantised16(i * g, self.update_scaling)
        cell = np.clip(cell, INT16_MIN, INT16_MAX)
        if self.cell_clip > 0:
            cell = np.clip(cell, -self.cell_clip, self.cell_clip)
        squashed = sigmoid_or_tanh16(cell, *self.cell_tanh, tanh=True).astype(np.int64)
        hidden = multiply_by_quantized_multiplier(o * squashed, *self.hidden_scaling) + self.zero_hidden
        info = np.iinfo(self.activation_dtype)
        return np.clip(hidden, info.min, info.max), cell


def _requantised16(acc: np.ndarray, scaling: tuple[int, int]) -> np.ndarray:
    return np.clip(multiply_by_quantized_multiplier(acc, *scaling), INT16_MIN, INT16_MAX)


def _scaling(real: float) -> tuple[int, int]:
    return quantize_multiplier(real)


def cell_tanh_scaling(cell_scale: float) -> tuple[int, int]:
    """(multiplier, shift) bringing the cell state (scale 2^p, p the rounded log2 of its scale
    in float32 as TFLite's CheckedLog2 gives it, a power of two or not) to the tanh table's
    input scale."""
    _, power = checked_log2(cell_scale)
    left = 15 + power - 3
    return (3, -left) if left < 0 else (3 << left, 0)


def _scratch_layout(units: int, sixteen: bool) -> dict[str, int]:
    sums = 2 * ((units + 3) // 4 * 4) * (8 if sixteen else 4)
    gates, cell = sums, sums + 4 * units * 2
    hidden = cell + units * 2
    return dict(sums=0, gates=gates, cell=cell, hidden=hidden, bytes=hidden + units * (2 if sixteen else 1))


def lstm_scratch_bytes(graph: Graph, op: Operator) -> int:
    """The working memory of the operator's C (its state and one step's gates), from its
    output's units and its input's type, before its parameters are read."""
    x, y = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    return _scratch_layout(int(y.shape[-1]), x.dtype == "int16")["bytes"] if y.shape else 0


def lstm_layer(graph: Graph, op: Operator) -> ModelLayer:
    """The operator as a layer no kernel serves, with its multiply-accumulates (per step and
    sequence, the four gates' W and R products: `model show` counts them in the model's total)."""
    layer = untuned_layer(graph, op)
    sequence, units = layer.input_shape, layer.output_shape
    if len(sequence) != 3 or len(units) != 3:
        return layer  # lstm_params refuses it, naming what is wrong
    return replace(layer, macs=sequence[0] * sequence[1] * 4 * units[2] * (sequence[2] + units[2]))


def lstm_params(graph: Graph, op: Operator) -> LstmParams:
    r = OperatorReader(graph, op)
    present = lambda position: position < len(op.inputs) and op.inputs[position] >= 0  # noqa: E731
    for positions, what in VARIANTS.items():
        if any(present(p) for p in positions):
            raise r.fail(f"has {what} (inputs {', '.join(str(p) for p in positions if present(p))}); TFLite Micro's "
                         "LSTM kernel and edgetune run only the plain LSTM")
    missing = [p for p in (*INPUT_WEIGHTS, *RECURRENT_WEIGHTS, *BIASES, HIDDEN_STATE, CELL_STATE) if not present(p)]
    if missing:
        raise r.fail(f"has no input {', '.join(map(str, missing))} (a CIFG LSTM has no input gate); TFLite Micro's "
                     "LSTM kernel and edgetune need all eight weight matrices, four biases and both states")
    dtype = r.tensor(0).dtype
    if dtype not in ("int8", "int16"):
        raise r.fail(f"input tensor {op.inputs[0]} ({r.tensor(0).name}) is {dtype}; edgetune runs the int8 LSTM "
                     "(8x8->16) and the 16x8 one (int16 activations), not a float or hybrid one")
    sixteen = dtype == "int16"
    x, y = activation_of(r, 0, dtypes=(dtype,)), activation_of(r, 0, output=True, dtypes=(dtype,))
    hidden, cell = r.tensor(HIDDEN_STATE), r.tensor(CELL_STATE)
    if not hidden.variable or not cell.variable:
        raise r.fail("its hidden and cell states (inputs 18, 19) must be variable tensors")
    hidden = activation_of(r, HIDDEN_STATE, dtypes=(dtype,))
    if sixteen and any(zero_point(t) != 0 for t in (x, y, hidden)):
        raise r.fail("an int16 input, output or hidden state has a zero point other than 0 (TFLite's 16x8 LSTM is "
                     "symmetric)")
    if cell.dtype != "int16" or cell.quantization is None or not scale(cell) > 0:
        raise r.fail(f"cell state tensor {cell.index} ({cell.name}) is {cell.dtype}; the int8 LSTM keeps an int16 "
                     "cell state with one scale")
    if int(op.option("fusedActivationFunction", 0)) != TANH:
        raise r.fail("the cell gate's activation is not TANH (the only one TFLite Micro's integer kernel runs)")
    if bool(op.option("diagonalRecurrentTensors", False)):
        raise r.fail("has diagonal recurrent weights, which TFLite Micro's kernel does not run")
    time_major = bool(op.option("timeMajor", False))
    if len(x.shape) != 3 or len(y.shape) != 3:
        raise r.fail(f"input {list(x.shape)} and output {list(y.shape)} are not 3-D sequences")
    steps, batch = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
    n_input, n_state = x.shape[2], y.shape[2]
    if tuple(y.shape[:2]) != tuple(x.shape[:2]) or hidden.elements != batch * n_state or cell.elements != batch * n_state:
        raise r.fail(f"output {list(y.shape)} and states of {hidden.elements} and {cell.elements} values do not "
                     f"follow the input {list(x.shape)}")
    s_in, s_hidden = scale(x), scale(hidden)
    limit = 7 if sixteen else 30  # TFLite's 64-bit multiply takes shifts up to 7
    input_scaling = tuple(_weights(r, p, (n_state, n_input), s_in, limit) for p in INPUT_WEIGHTS)
    recurrent_scaling = tuple(_weights(r, p, (n_state, n_state), s_hidden, limit) for p in RECURRENT_WEIGHTS)
    biases, bias_type = [], "int64" if sixteen else "int32"
    for p in BIASES:
        b = r.tensor(p)
        if b.dtype != bias_type or not b.constant or b.elements != n_state:
            raise r.fail(f"bias (input {p}, tensor {b.index}) must be a constant {bias_type} of {n_state} values for "
                         f"{dtype} activations (TFLite Micro reads it so), is {b.dtype} of {b.elements}")
        biases.append(b.array().astype(np.int64).reshape(-1))
    if sixteen:  # an int64 sum: the bias as it is, no zero points
        input_sums = tuple(tuple(int(v) for v in b) for b in biases)
        hidden_sums = ((0,) * n_state,) * 4
    else:
        row_sums = [r.constant(p).astype(np.int64).sum(axis=1) for p in (*INPUT_WEIGHTS, *RECURRENT_WEIGHTS)]
        input_sums = tuple(_int32s(biases[g] - zero_point(x) * row_sums[g]) for g in range(4))
        hidden_sums = tuple(_int32s(-zero_point(hidden) * row_sums[4 + g]) for g in range(4))
    s_cell = float(np.float32(scale(cell)))
    clip = float(op.option("cellClip", 0.0) or 0.0)
    if clip < 0:
        raise r.fail(f"cell clip {clip:g} is negative")
    tanh_multiplier, tanh_shift = cell_tanh_scaling(s_cell)
    if tanh_multiplier >= 1 << 16:
        raise r.fail(f"cell state scale {s_cell:g} is too large for TFLite's int16 tanh")
    out = float(np.float32(GATE_OUTPUT_SCALE))
    return LstmParams(
        op.index, batch, steps, n_input, n_state, time_major, zero_point(x), zero_point(hidden),
        input_scaling, recurrent_scaling,
        forget_scaling=_scaling(out * s_cell / s_cell), update_scaling=_scaling(out * out / s_cell),
        hidden_scaling=_scaling(out * out / float(np.float32(s_hidden))), cell_tanh=(tanh_multiplier, tanh_shift),
        cell_clip=int(min(max(clip / s_cell, INT16_MIN), INT16_MAX)),
        biases=tuple(tuple(int(v) for v in b) for b in biases), input_sums=input_sums, hidden_sums=hidden_sums,
        sixteen=sixteen)


def _int32s(values: np.ndarray) -> tuple[int, ...]:
    """int32 values of int64 sums, wrapped as TFLite's int32 accumulator wraps them."""
    return tuple(int(v) for v in wrap32(values))


def _weights(r: OperatorReader, position: int, shape: tuple[int, int], s_activation: float,
             limit: int) -> tuple[int, int]:
    """A weight matrix checked (constant int8 of `shape`, one scale, zero point 0) and its
    product's (multiplier, shift) into Q3.12, TFLite's FullyConnected multiplier in double."""
    w: Tensor = r.tensor(position)
    q = w.quantization
    if w.dtype != "int8" or not w.constant or tuple(w.shape) != shape:
        raise r.fail(f"weights (input {position}, tensor {w.index}) must be a constant int8 {list(shape)}, are "
                     f"{w.dtype} {list(w.shape)}")
    if q is None or len(q.scales) != 1 or q.zero_points[0] != 0 or not q.scales[0] > 0:
        raise r.fail(f"weights (input {position}, tensor {w.index}) need one scale and zero point 0 (per-tensor, "
                     "symmetric: TFLite's int8 LSTM)")
    multiplier, shift = _scaling(float(s_activation) * float(q.scales[0]) / GATE_INPUT_SCALE)
    if shift > limit:
        raise r.fail(f"weights (input {position}) give a requantisation scale of 2^{shift - 1} or more (at most "
                     f"2^{limit - 1})")
    return multiplier, shift
