"""The tuned layers of TRANSPOSE_CONV and BATCH_MATMUL (issue 28: the heavy operators run on
kernels with a search space, not as library code).

  TRANSPOSE_CONV  tconv2d_s8  inputs (output_shape, weights OHWI, input, optional bias), as
                              TFLite orders them; the kernel reads input 2. TFLite Micro takes
                              the output size from the output tensor and its offsets from
                              SAME/VALID over that size (ComputePaddingHeightWidth with the
                              output as the "input"); the fused activation clamps as a
                              convolution's does (TFLite Micro's PyPI interpreter applies it).
  BATCH_MATMUL    bmm_s8      the left operand [..., m, k] (adj_x: [..., k, m]) times the right
                              [..., k, n] (adj_y: [..., n, k]); the batch dimensions broadcast
                              as TFLite's do, given to the kernel as each output batch's offset
                              into either operand. Either operand may be a constant; when both
                              are activations the right one is the layer's second run-time
                              input (ModelLayer.extra_inputs). One multiplier in double,
                              s_lhs * s_rhs / s_out, both zero points, no activation.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from edgetune.codegen.kernels.base import Buffer
from edgetune.codegen.kernels.bmm_s8 import SHAPE_KEYS as BMM_KEYS
from edgetune.codegen.kernels.tconv2d_s8 import SHAPE_KEYS as TCONV_KEYS

from .builder import constant
from .arithmetic import MAX_SHIFT, output_size, quantize_multiplier
from .graph import Graph, Operator
from .layers import ModelLayer, _check_reduction, _Reader, schema


def _tconv_geometry(r: _Reader, x, y, kh: int, kw: int) -> dict[str, int]:
    names = {v: k for k, v in vars(schema().Padding).items() if isinstance(v, int)}
    padding = names.get(int(r.op.option("padding", 0)), "")
    geometry = {}
    for axis, k, size, side in (("h", kh, y.shape[1], "pad_top"), ("w", kw, y.shape[2], "pad_left")):
        stride = int(r.op.option(f"stride{axis.upper()}", 0))
        if stride < 1 or padding not in ("SAME", "VALID"):
            raise r.fail(f"stride {stride} and padding {padding or '?'} along {axis} are not a valid transposed "
                         "convolution")
        geometry[f"stride_{axis}"] = stride
        geometry[side] = output_size(size, k, stride, 1, padding)[1]
    return geometry


def transpose_conv_layer(graph: Graph, op: Operator) -> ModelLayer:
    r = _Reader(graph, op)
    w, x, y = r.tensor(1, "weights"), r.tensor(2, "input"), r.tensor(0, "output")
    if len(w.shape) != 4 or len(x.shape) != 4 or len(y.shape) != 4 or x.shape[0] != 1 or y.shape[0] != 1:
        raise r.fail(f"weights {list(w.shape)}, input {list(x.shape)} and output {list(y.shape)}: edgetune's "
                     "transposed convolution takes weights [cout, kh, kw, cin] and tensors [1, h, w, c]")
    cout, kh, kw, cin = w.shape
    if x.shape[3] != cin or y.shape[3] != cout:
        raise r.fail(f"weights {list(w.shape)} do not match input channels {x.shape[3]} and output channels {y.shape[3]}")
    _check_reduction(r, kh * kw * cin)
    g = _tconv_geometry(r, x, y, kh, kw)
    quant, params = r.requantisation(x, w, y, cout, axis=0)
    bias = _tconv_bias(r, cout)
    shape = dict(h=x.shape[1], w=x.shape[2], cin=cin, cout=cout, kh=kh, kw=kw, oh=y.shape[1], ow=y.shape[2], **g)
    constants = (Buffer("weights", w.array().copy(), weight=True), bias, *quant)
    macs = x.shape[1] * x.shape[2] * cin * kh * kw * cout
    return ModelLayer(op.index, op.op, "tconv2d_s8", tuple((k, int(shape[k])) for k in TCONV_KEYS), macs, x.shape,
                      y.shape, op, _constant_output_shape(r, y), constants, params, (y.shape[1], y.shape[2], cout),
                      input_dims=(x.shape[1], x.shape[2], cin), input_position=2)


def _constant_output_shape(r: _Reader, y) -> tuple:
    """The operator's tensors with its output_shape operand as a constant holding the output
    tensor's shape: the converter computes it with SHAPE/STRIDED_SLICE/PACK when the batch is
    dynamic, and the one-operator oracle (oracle.layer_model) must not take it as an input.
    TFLite Micro reads the output tensor's shape, not this operand's value."""
    tensors = list(r.operator_tensors())
    given = tensors[0]
    if given is not None and not given.constant:
        tensors[0] = replace(constant(given.index, given.name, np.array(y.shape, dtype=np.int32)), index=given.index)
    return tuple(tensors)


def _tconv_bias(r: _Reader, channels: int) -> Buffer:
    b = r.tensor(3, "bias", dtype="int32", optional=True)
    if b is None:
        return Buffer("bias", np.zeros(channels, dtype=np.int32), weight=True)
    if b.elements != channels:
        raise r.fail(f"bias tensor {b.index} ({b.name}) has {b.elements} values for {channels} output channels")
    return Buffer("bias", b.array().reshape(channels).astype(np.int32), weight=True)


STAND_IN_SEED = 28  # the drawn values standing in for a run-time right operand (tuning, oracle)


def _broadcast_offsets(r: _Reader, lhs: tuple[int, ...], rhs: tuple[int, ...], out: tuple[int, ...],
                       lhs_size: int, rhs_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Each output batch's offset into the left and right operands (TFLite's broadcasting of
    the batch dimensions, aligned from the right; a dimension of 1 repeats)."""
    rank = len(out)
    lb, rb = (1,) * (rank - len(lhs)) + lhs, (1,) * (rank - len(rhs)) + rhs
    for axis, (a, b, o) in enumerate(zip(lb, rb, out)):
        if o != max(a, b) or min(a, b) not in (1, o):
            raise r.fail(f"batch dimensions {list(lhs)} and {list(rhs)} do not broadcast to the output's {list(out)}")
    index = np.indices(out).reshape(rank, -1) if rank else np.zeros((0, 1), dtype=np.int64)
    def offsets(dims, size):
        strides = np.cumprod((1, *dims[::-1]))[:-1][::-1] if dims else ()
        flat = sum((index[a] * (dims[a] > 1) * strides[a] for a in range(rank)), np.zeros(index.shape[1], dtype=np.int64))
        return (flat * size).astype(np.int32)
    return offsets(lb, lhs_size), offsets(rb, rhs_size)


def _bmm_multiplier(r: _Reader, lhs, rhs, out) -> tuple[tuple[str, int], ...]:
    (ls, lz), (rs, rz), (os_, oz) = (r.scale_zero(t, role) for t, role in ((lhs, "lhs"), (rhs, "rhs"), (out, "output")))
    real = ls * rs / os_
    multiplier, shift = quantize_multiplier(real)
    if shift > MAX_SHIFT:
        raise r.fail(f"requantisation scale {real:g} is too large (at most 2^{MAX_SHIFT})")
    return (("lhs_zero", lz), ("rhs_zero", rz), ("out_zero", oz), ("multiplier", multiplier), ("shift", shift))


def batch_matmul_layer(graph: Graph, op: Operator) -> ModelLayer:
    r = _Reader(graph, op)
    lhs, rhs, y = r.tensor(0, "lhs"), r.tensor(1, "rhs"), r.tensor(0, "output")
    if len(lhs.shape) < 2 or len(rhs.shape) < 2 or len(y.shape) < 2:
        raise r.fail(f"operands {list(lhs.shape)} and {list(rhs.shape)} need at least two dimensions each")
    adj_x, adj_y = int(bool(r.op.option("adjX", False))), int(bool(r.op.option("adjY", False)))
    m, k = lhs.shape[-2:][::-1] if adj_x else lhs.shape[-2:]
    k2, n = rhs.shape[-2:][::-1] if adj_y else rhs.shape[-2:]
    if k != k2 or tuple(y.shape[-2:]) != (m, n):
        raise r.fail(f"[{m} x {k}] times [{k2} x {n}] does not give the output's {list(y.shape[-2:])}")
    _check_reduction(r, k)
    lo, ro = _broadcast_offsets(r, tuple(lhs.shape[:-2]), tuple(rhs.shape[:-2]), tuple(y.shape[:-2]), m * k, k * n)
    if lhs.constant and rhs.constant:
        raise r.fail("both operands are constants (nothing to compute at run time)")
    runtime = 1 if lhs.constant else 0  # the operand the layer's input buffer takes
    names = ("lhs", "rhs")
    other = lhs if runtime == 1 else rhs
    stand_in = np.random.default_rng(STAND_IN_SEED).integers(-128, 128, size=other.elements, dtype=np.int8)
    other_data = other.array().reshape(-1).copy() if other.constant else stand_in
    shape = dict(batch=len(lo), lhs_batches=lhs.elements // (m * k), rhs_batches=rhs.elements // (k * n), m=m, n=n, k=k,
                 adj_x=adj_x, adj_y=adj_y)
    constants = (Buffer(names[1 - runtime], other_data, weight=other.constant),
                 Buffer("lhs_offsets", lo, weight=True), Buffer("rhs_offsets", ro, weight=True))
    x = (lhs, rhs)[runtime]
    return ModelLayer(op.index, op.op, "bmm_s8", tuple((key, int(shape[key])) for key in BMM_KEYS), len(lo) * m * n * k,
                      x.shape, y.shape, op, r.operator_tensors(), constants, _bmm_multiplier(r, lhs, rhs, y),
                      (len(lo), m, n), arguments=("lhs", "rhs", "lhs_offsets", "rhs_offsets", "output"),
                      input_name=names[runtime], output_name="output", input_dims=(x.elements,), input_position=runtime,
                      extra_inputs=() if other.constant else ((names[1 - runtime], 1 - runtime),))
