"""One-operator 16x8 models for the int16 tests (tests/test_int16_*.py): CONV_2D,
DEPTHWISE_CONV_2D and FULLY_CONNECTED on int16 activations with int8 weights, their bias
int64, int32 or absent, per-channel or per-tensor weight scales, a fused activation; the
model's bytes and the layer edgetune reads from it. Imported by the test modules."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edgetune.model import load_model
from edgetune.model.arithmetic import output_size
from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor

ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}


def f32(x: float) -> float:
    return float(np.float32(x))


def int16_tensor(index: int, shape, scale: float, name: str = "", zero: int = 0) -> Tensor:
    return Tensor(index, name or f"t{index}", tuple(shape), "int16", Quantization((f32(scale),), (zero,)))


def draw_int16(rng: np.random.Generator, shape, edge: str = "random") -> np.ndarray:
    if edge == "extreme":
        return rng.choice(np.array([-32768, 32767], dtype=np.int16), size=shape)
    return rng.integers(-32768, 32768, size=shape, dtype=np.int16)


def layer16_model(rng: np.random.Generator, op: str, *, h=5, w=4, cin=3, cout=4, k=3, stride=1, padding="SAME",
                  mult=1, bias="int64", per_channel=True, activation="NONE", dilation=1, rows=1) -> tuple[bytes, int]:
    """A drawn 16x8 layer alone in a model; (bytes, the operator's index)."""
    depthwise, dense = op == "DEPTHWISE_CONV_2D", op == "FULLY_CONNECTED"
    if depthwise:
        cout = cin * mult
    s_in = f32(2.0 ** -int(rng.integers(8, 14)) * rng.uniform(0.5, 1.0))
    w_scales = tuple(f32(v) for v in rng.uniform(0.002, 0.02, cout if per_channel else 1))
    reduction = cin if dense else k * k * (1 if depthwise else cin)
    # a typical sum of |x| ~ 2^14 times |w| ~ 64 over the reduction lands near 2^13: outputs of every size
    s_out = f32(s_in * max(w_scales) * 128 * np.sqrt(reduction) * rng.uniform(0.5, 2.0))
    if dense:
        wshape, xshape, yshape = (cout, cin), (rows, cin), (rows, cout)
    else:
        wshape = (1, k, k, cout) if depthwise else (cout, k, k, cin)
        oh, ow = (output_size(n, k, stride, dilation, padding)[0] for n in (h, w))
        xshape, yshape = (1, h, w, cin), (1, oh, ow, cout)
    weights = rng.integers(-127, 128, size=wshape, dtype=np.int8)
    axis = 3 if depthwise else 0
    tensors = [int16_tensor(0, xshape, s_in, "input"),
               constant(1, "weights", weights, Quantization(w_scales, (0,) * len(w_scales), axis if per_channel else 0))]
    inputs = [0, 1]
    if bias != "none":
        big = 1 << 21
        values = rng.integers(-big, big, size=cout).astype(bias)
        tensors.append(constant(2, "bias", values, Quantization(tuple(f32(s_in * v) for v in w_scales),
                                                                (0,) * len(w_scales))))
        inputs.append(2)
    else:
        inputs.append(-1)
    tensors.append(int16_tensor(len(tensors), yshape, s_out, "output"))
    if dense:
        options = ("FullyConnectedOptions", (("fusedActivationFunction", ACTIVATIONS[activation]),))
    else:
        geometry = (("padding", 0 if padding == "SAME" else 1), ("strideH", stride), ("strideW", stride),
                    ("dilationHFactor", dilation), ("dilationWFactor", dilation),
                    ("fusedActivationFunction", ACTIVATIONS[activation]))
        options = (("DepthwiseConv2DOptions", geometry + (("depthMultiplier", mult),)) if depthwise
                   else ("Conv2DOptions", geometry))
    operator = Operator(0, op, tuple(inputs), (len(tensors) - 1,), *options)
    return build_model(tensors, [operator], [0], [len(tensors) - 1]), 0


def read_layer(data: bytes, folder: Path, index: int = 0):
    path = folder / "layer16.tflite"
    path.write_bytes(data)
    return load_model(path).layers[index]


# --- an operator's C on the host and on a target, with typed buffers -------------------------
def _c_array(name: str, x: np.ndarray, writable: bool = False) -> str:
    values = ", ".join(str(int(v)) for v in x.reshape(-1)) or "0"
    return f"static {'' if writable else 'const '}{x.dtype}_t {name}[{max(x.size, 1)}] = {{{values}}};"


def run_host_typed(params, inputs: list[np.ndarray], out_shape, out_dtype: str, work: Path,
                   alias: int | None = None) -> np.ndarray:
    """A library operator's C (int8 or int16 buffers) compiled with cc and the kernels' flags
    and run here; with `alias`, the output buffer is that input's (the operator in place)."""
    import subprocess

    from op_checks import HOST_CC

    work.mkdir(parents=True, exist_ok=True)
    (work / "op.c").write_text(params.render("et_op"))
    arrays = [_c_array(f"in{i}", np.asarray(x)) for i, x in enumerate(inputs) if i != alias]
    count = int(np.prod(out_shape))
    if alias is None:
        arrays.append(f"static {out_dtype}_t out_values[{count}];")
    else:  # the output written over the input's buffer (of the input's type: QUANTIZE may narrow)
        arrays.append(_c_array("out_values", np.asarray(inputs[alias]), writable=True))
    arrays.append(f"#define out (({out_dtype}_t *)(void *)out_values)")
    args = ", ".join([*(f"({np.asarray(x).dtype}_t *)(void *)out_values" if i == alias else f"in{i}"
                        for i, x in enumerate(inputs)), "out"])
    (work / "main.c").write_text(
        "#include <stdint.h>\n#include <stdio.h>\n" + f"{params.declaration('et_op')};\n" + "\n".join(arrays) +
        f"\nint main(void)\n{{\n    et_op({args});\n"
        f"    return fwrite(out, sizeof out[0], {count}, stdout) == {count} ? 0 : 1;\n}}\n")
    subprocess.run([*HOST_CC, "op.c", "main.c", "-o", "op"], cwd=work, check=True, capture_output=True, text=True)
    run = subprocess.run(["./op"], cwd=work, check=True, capture_output=True, timeout=60)
    return np.frombuffer(run.stdout, dtype=out_dtype).copy().reshape(out_shape)


def run_target_typed(params, target, inputs: list[np.ndarray], out_shape, out_dtype: str, work: Path,
                     compiler: str | None = None) -> np.ndarray:
    """A library operator's C built for `target` and run through the tuning harness."""
    from op_checks import run_target_as

    return run_target_as(params, target, inputs, out_shape, out_dtype, work, compiler)


class InPlace:
    """An operator's C called with one buffer as its input and its output, on the target: a
    wrapper copies the input into a buffer as wide as the wider of the two, calls the
    operator on it and copies the output out."""

    def __init__(self, params):
        self.params = params

    def declaration(self, fn: str) -> str:
        return self.params.declaration(fn)

    def render(self, fn: str, target=None) -> str:
        p = self.params
        n_in = int(np.prod(p.input_shapes[0])) * (2 if p.input_ctypes[0] == "int16_t" else 1)
        n_out = int(np.prod(p.output_shape)) * (2 if p.output_ctype == "int16_t" else 1)
        return p.render(f"{fn}_inner", target=target) + f"""
#include <string.h>
static uint8_t {fn}_buffer[{max(n_in, n_out)}] __attribute__((aligned(8)));
{self.declaration(fn)}
{{
    memcpy({fn}_buffer, input0, {n_in});
    {fn}_inner((const {p.input_ctypes[0]} *)(void *){fn}_buffer, ({p.output_ctype} *)(void *){fn}_buffer);
    memcpy(output, {fn}_buffer, {n_out});
}}
"""


# --- a small 16x8 keyword-spotting model (DS-CNN's structure, reduced) -------------------------
def kws16_model(rng: np.random.Generator, int8_interface: bool = False, softmax: bool = True) -> bytes:
    """int16 input [1, 10, 6, 1] -> CONV_2D 3x3/2 (4 ch, RELU) -> DEPTHWISE_CONV_2D 3x3 (RELU)
    -> CONV_2D 1x1 (6 ch, RELU) -> AVERAGE_POOL_2D -> RESHAPE -> FULLY_CONNECTED (5 classes)
    [-> SOFTMAX]; with `int8_interface` the input and output are int8, QUANTIZEd to and from
    int16 inside (the requantisation between a graph's int8 and 16x8 parts)."""
    tensors: list[Tensor] = []
    ops: list[Operator] = []

    def add(t: Tensor) -> int:
        tensors.append(Tensor(len(tensors), t.name, t.shape, t.dtype, t.quantization, t.data))
        return len(tensors) - 1

    def weights(shape, axis) -> tuple[int, tuple[float, ...]]:
        scales = tuple(f32(v) for v in rng.uniform(0.004, 0.02, shape[axis]))
        w = rng.integers(-127, 128, size=shape, dtype=np.int8)
        return add(constant(0, f"w{len(tensors)}", w, Quantization(scales, (0,) * len(scales), axis))), scales

    def bias(s_in, scales, count=None) -> int:
        values = rng.integers(-(1 << 20), 1 << 20, size=count or len(scales)).astype(np.int64)
        return add(constant(0, f"b{len(tensors)}", values, Quantization(tuple(f32(s_in * s) for s in scales),
                                                                         (0,) * len(scales))))

    def conv(x, s_in, kind, wshape, axis, out_shape, s_out, options):
        w, scales = weights(wshape, axis)
        y = add(int16_tensor(0, out_shape, s_out, f"act{len(tensors)}"))
        ops.append(Operator(len(ops), kind, (x, w, bias(s_in, scales)), (y,), *options))
        return y

    def geometry(stride, act=1, **more):
        return (("padding", 0), ("strideH", stride), ("strideW", stride), ("dilationHFactor", 1),
                ("dilationWFactor", 1), ("fusedActivationFunction", act), *more.items())

    s = [f32(v) for v in (1 / 4096, 1 / 2048, 1 / 1024, 1 / 512, 1 / 256)]
    if int8_interface:
        first = add(Tensor(0, "input", (1, 10, 6, 1), "int8", Quantization((f32(1 / 16),), (3,))))
        x = add(int16_tensor(0, (1, 10, 6, 1), s[0], "input16"))
        ops.append(Operator(0, "QUANTIZE", (first,), (x,)))
    else:
        first = x = add(int16_tensor(0, (1, 10, 6, 1), s[0], "input"))
    x = conv(x, s[0], "CONV_2D", (4, 3, 3, 1), 0, (1, 5, 3, 4), s[1], ("Conv2DOptions", geometry(2)))
    x = conv(x, s[1], "DEPTHWISE_CONV_2D", (1, 3, 3, 4), 3, (1, 5, 3, 4), s[2],
             ("DepthwiseConv2DOptions", geometry(1, depthMultiplier=1)))
    x = conv(x, s[2], "CONV_2D", (6, 1, 1, 4), 0, (1, 5, 3, 6), s[3], ("Conv2DOptions", geometry(1)))
    pooled = add(int16_tensor(0, (1, 1, 1, 6), s[3], "pooled"))
    ops.append(Operator(len(ops), "AVERAGE_POOL_2D", (x,), (pooled,), "Pool2DOptions",
                        (("padding", 1), ("strideW", 1), ("strideH", 1), ("filterWidth", 3), ("filterHeight", 5),
                         ("fusedActivationFunction", 0))))
    shape = add(constant(0, "shape", np.array([1, 6], dtype=np.int32)))
    flat = add(int16_tensor(0, (1, 6), s[3], "flat"))
    ops.append(Operator(len(ops), "RESHAPE", (pooled, shape), (flat,)))
    w, scales = weights((5, 6), 0)
    w_scales = tuple(f32(max(scales)) for _ in range(1))
    tensors[w] = Tensor(w, tensors[w].name, (5, 6), "int8", Quantization(w_scales, (0,)), tensors[w].data)
    logits = add(int16_tensor(0, (1, 5), s[4], "logits"))
    ops.append(Operator(len(ops), "FULLY_CONNECTED", (flat, w, bias(s[3], w_scales, 5)), (logits,),
                        "FullyConnectedOptions", (("fusedActivationFunction", 0),)))
    out = logits
    if softmax:
        out = add(int16_tensor(0, (1, 5), f32(1 / 32768), "probabilities"))
        ops.append(Operator(len(ops), "SOFTMAX", (logits,), (out,), "SoftmaxOptions", (("beta", 1.0),)))
    if int8_interface:
        last = add(Tensor(0, "output", (1, 5), "int8", Quantization((f32(1 / 256),), (-128,))))
        ops.append(Operator(len(ops), "QUANTIZE", (out,), (last,)))
        out = last
    return build_model(tensors, ops, [first], [out])
