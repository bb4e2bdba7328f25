"""Checks the kernel tests share: compile a variant alone, build it as a shared library for
ctypes, run it under AddressSanitizer and UBSan in Linux user-mode QEMU, and run it on
buffers only as aligned as their element type. Test modules import these from here, never
from one another."""
from __future__ import annotations

import ctypes
import os
import subprocess

import numpy as np

from edgetune.codegen.kernels.base import COMMON_CFLAGS, KernelError, RenderedKernel
from edgetune.targets.build import kernel_header


def compile_only(target, rendered, tmp_path):
    compiler = target.compiler(rendered.compiler)
    (tmp_path / "kernel.h").write_text(kernel_header(rendered.declaration))
    (tmp_path / "kernel.c").write_text(rendered.source)
    return subprocess.run([compiler.command, *compiler.cflags, *COMMON_CFLAGS, *rendered.cflags, "-I", str(tmp_path),
                           "-c", "kernel.c", "-o", "kernel.o"], cwd=tmp_path, capture_output=True, text=True)


SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")


DRIVER = """\
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "kernel.h"

/* Each buffer in its own allocation of exactly its size: AddressSanitizer reports any
   access past either end. */
static void *load(const char *path, size_t size)
{
    void *data = malloc(size);
    FILE *file = fopen(path, "rb");
    if (!data || !file || fread(data, 1, size, file) != size) exit(3);
    fclose(file);
    return data;
}

int main(void)
{
%(loads)s
    %(call)s;
    FILE *out = fopen("out.bin", "wb");
    if (!out) return 4;
%(stores)s
    return fclose(out) != 0;
}
"""


def run_sanitized(kernel, target, shape, config, io, work):
    """Build one variant and a driver for AArch64 Linux with ASan and UBSan (GCC, which
    instruments NEON loads and stores), run it in qemu-aarch64, return its outputs."""
    rendered = kernel.render(target, shape, config)
    deployed = kernel.deployed_io(io, config)
    loads, stores = [], []
    for index, buf in enumerate(deployed.buffers):
        (work / f"in{index}.bin").write_bytes(np.ascontiguousarray(buf.data).tobytes())
        loads.append(f'    {buf.ctype} *{buf.name} = load("in{index}.bin", {buf.data.nbytes});')
        if buf.is_output:
            stores.append(f"    fwrite({buf.name}, 1, {buf.data.nbytes}, out);")
    call = f"{rendered.function}({', '.join([b.name for b in deployed.buffers] + [str(v) for _, v in io.params])})"
    (work / "kernel.h").write_text(kernel_header(rendered.declaration))
    (work / "kernel.c").write_text(rendered.source)
    (work / "driver.c").write_text(DRIVER % {"loads": "\n".join(loads), "call": call, "stores": "\n".join(stores)})
    flags = ["-mcpu=" + target.core.name, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-{config['opt']}", "-g",
             *SANITIZE]
    build = subprocess.run(["aarch64-linux-gnu-gcc", *flags, "-I", str(work), "kernel.c", "driver.c", "-o", "variant"],
                           cwd=work, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    # LeakSanitizer cannot run under qemu-user (it needs ptrace); leaks are not the question.
    run = subprocess.run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "./variant"], cwd=work,
                         env={**os.environ, "ASAN_OPTIONS": "detect_leaks=0"},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{config.key()}: exit {run.returncode}\n{run.stderr[-3000:]}"
    raw = (work / "out.bin").read_bytes()
    outputs, offset = [], 0
    for buf in deployed.outputs():
        outputs.append(np.frombuffer(raw[offset:offset + buf.data.nbytes], buf.data.dtype).reshape(buf.data.shape))
        offset += buf.data.nbytes
    return outputs


def build_shared(matmul, host, shape, config, tmp_path, extra=()):
    rendered = matmul.render(host, shape, config)
    compiler = host.compiler(rendered.compiler)
    (tmp_path / "kernel.h").write_text(kernel_header(rendered.declaration))
    (tmp_path / "kernel.c").write_text(rendered.source)
    subprocess.run([compiler.command, *compiler.cflags, *COMMON_CFLAGS, *rendered.cflags, *extra, "-fPIC", "-shared",
                    "-I", str(tmp_path), "kernel.c", "-o", "kernel.so"], cwd=tmp_path, check=True)
    return getattr(ctypes.CDLL(str(tmp_path / "kernel.so")), rendered.function)


def misaligned(array: np.ndarray, offset: int) -> np.ndarray:
    """A copy of `array` starting `offset` bytes past a 64-byte boundary."""
    raw = np.zeros(array.nbytes + 64 + offset, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    view = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    view[...] = array
    return view


# Where each buffer goes past an 8-byte boundary, by element type and position (index % 3).
MISALIGNED_OFFSETS = {"int8_t": (1, 3, 2), "int16_t": (2, 2, 2), "int32_t": (0, 0, 0), "float": (0, 0, 0)}


def misaligned_source(kernel, target, shape, config) -> RenderedKernel:
    """A variant that runs on copies of its buffers only as aligned as their element type
    (int8 at odd addresses, int16 at 2 mod 4, int32 as C requires): a trampoline in the same
    source copies the harness's (16-byte aligned) buffers to such addresses and back."""
    outer = kernel.function_name(shape)
    inner = kernel.render(target, shape, config, fn=outer + "_aligned_as_typed")
    io = kernel.make_io(shape, np.random.default_rng(0))
    names = kernel.argument_names(shape)
    lines, call, copy_out = [], [], []
    for index, buf in enumerate(io.buffers):
        offset = MISALIGNED_OFFSETS[buf.ctype][index % 3]
        lines.append(f"static uint8_t scratch{index}[{buf.data.nbytes + 8}] __attribute__((aligned(8)));")
        call.append(f"({'const ' if not buf.is_output else ''}{buf.ctype} *)(void *)(scratch{index} + {offset})")
        if buf.is_output:
            copy_out.append(f"    memcpy({names[index]}, scratch{index} + {offset}, {buf.data.nbytes});")
    copy_in = [f"    memcpy(scratch{i} + {MISALIGNED_OFFSETS[b.ctype][i % 3]}, {names[i]}, {b.data.nbytes});"
               for i, b in enumerate(io.buffers) if not b.is_output]
    call += [name for name, _ in io.params]
    declaration = kernel.declaration(shape, fn=outer)
    trampoline = "\n".join(["#include <string.h>", *lines, declaration + ";", declaration, "{", *copy_in,
                            f"    {inner.function}({', '.join(call)});", *copy_out, "}", ""])
    return RenderedKernel(source=inner.source + "\n" + trampoline, function=outer, declaration=declaration,
                          compiler=inner.compiler, cflags=inner.cflags)


def measure_misaligned(kernel, target, shape, config, io, work):
    """The variant of `config` run on misaligned copies of `io` (misaligned_source), through
    the measuring pipeline and judged as tuning judges it: the MeasureResult."""
    from edgetune.evaluate import measure_source

    rendered = misaligned_source(kernel, target, shape, config)
    return measure_source(kernel, target, shape, rendered, io, work, deployed=kernel.deployed_io(io, config))


# --- TFLite Micro as the oracle (codegen/model/oracle.py) ----------------------------------

def layer_reference(layer, io):
    """edgetune's numpy reference (the kernel's `reference`) for a model layer's KernelIO."""
    from edgetune.codegen import get_kernel

    return get_kernel(layer.kernel).reference(layer.shape_dict, io)[0]


def _drawn_model(kernel_name: str, s: dict, rng, edge: str) -> tuple[bytes, int]:
    """A model computing the drawn layer: the convolution alone when its padding is TFLite's
    SAME or VALID, else PAD (with the input's zero point) then a VALID convolution. Returns
    the model and the index of the convolution operator."""
    from edgetune.codegen.model.arithmetic import output_size
    from edgetune.codegen.model.builder import build_model, constant
    from edgetune.codegen.model.graph import Operator, Quantization, Tensor
    from model_files import ACTIVATIONS, draw_quant, f32, int8_weights

    depthwise = kernel_name == "dwconv2d_s8"
    cin = s["c"] if depthwise else s["cin"]
    cout = s["c"] * s["mult"] if depthwise else s["cout"]
    pads = (s["pad_top"], s["pad_bottom"], s["pad_left"], s["pad_right"])
    same = [output_size(n, s[k], s[f"stride_{a}"], s[f"dilation_{a}"], "SAME")[1:] for n, k, a in
            ((s["h"], "kh", "h"), (s["w"], "kw", "w"))]
    padding = "SAME" if pads == (*same[0], *same[1]) else "VALID"
    q = draw_quant(rng, cout, s["kh"] * s["kw"] * (1 if depthwise else cin), edge)
    aq = lambda scale, zero: Quantization((scale,), (zero,))
    wshape = (1, s["kh"], s["kw"], cout) if depthwise else (cout, s["kh"], s["kw"], cin)
    tensors = [Tensor(0, "input", (1, s["h"], s["w"], cin), "int8", aq(q.in_scale, q.in_zero)),
               constant(1, "weights", int8_weights(rng, wshape, edge), Quantization(q.w_scales, (0,) * cout, 3 if depthwise else 0)),
               constant(2, "bias", q.bias, Quantization(tuple(f32(q.in_scale * w) for w in q.w_scales), (0,) * cout))]
    ops, conv_input = [], 0
    if padding == "VALID" and any(pads):
        tensors += [constant(3, "paddings", np.array([[0, 0], pads[:2], pads[2:], [0, 0]], dtype=np.int32)),
                    Tensor(4, "padded", (1, s["h"] + pads[0] + pads[1], s["w"] + pads[2] + pads[3], cin), "int8",
                           aq(q.in_scale, q.in_zero))]
        ops.append(Operator(0, "PAD", (0, 3), (4,), "PadOptions", ()))
        conv_input = 4
    oh = (s["h"] + pads[0] + pads[1] - s["dilation_h"] * (s["kh"] - 1) - 1) // s["stride_h"] + 1
    ow = (s["w"] + pads[2] + pads[3] - s["dilation_w"] * (s["kw"] - 1) - 1) // s["stride_w"] + 1
    tensors.append(Tensor(len(tensors), "output", (1, oh, ow, cout), "int8", aq(q.out_scale, q.out_zero)))
    act = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")[int(rng.integers(0, 4))]
    options = [("padding", 0 if padding == "SAME" else 1), ("strideH", s["stride_h"]), ("strideW", s["stride_w"]),
               ("dilationHFactor", s["dilation_h"]), ("dilationWFactor", s["dilation_w"]),
               ("fusedActivationFunction", ACTIVATIONS[act])] + ([("depthMultiplier", s["mult"])] if depthwise else [])
    ops.append(Operator(len(ops), "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", (conv_input, 1, 2), (len(tensors) - 1,),
                        "DepthwiseConv2DOptions" if depthwise else "Conv2DOptions", tuple(options)))
    return build_model(tensors, ops, [0], [len(tensors) - 1]), len(ops) - 1


def tflm_case(kernel_name: str, shape, rng, edge: str = "random", work=None):
    """For a drawn conv2d_s8/dwconv2d_s8 shape (text or mapping): a KernelIO with a layer's
    real weights and TFLite quantisation (random or saturating, a random fused activation)
    and TFLite Micro's output for it, as (io, expected)."""
    import tempfile
    from pathlib import Path

    from edgetune.codegen import get_kernel
    from edgetune.codegen.kernels.base import Buffer, KernelIO
    from edgetune.codegen.model import load_model
    from edgetune.codegen.model.oracle import run_tflm
    from model_files import int8_input

    s = get_kernel(kernel_name).parse_shape(shape)  # text or mapping, shorthands expanded
    data, conv_index = _drawn_model(kernel_name, s, rng, edge)
    with tempfile.TemporaryDirectory(dir=work) as folder:
        path = Path(folder) / "drawn.tflite"
        path.write_bytes(data)
        layer = load_model(path).layers[conv_index]
    x = int8_input(rng, (1, s["h"], s["w"], layer.kernel_input[2]), edge)
    expected = run_tflm(data, [x], arena_size=len(data) + 8 * x.nbytes * max(1, s.get("mult", 1)) + (1 << 20))[0]
    out = np.zeros(expected.shape[1:], dtype=np.int8)
    io = KernelIO((Buffer("input", x.reshape(x.shape[1:])), *layer.constants,
                   Buffer("output", out, is_output=True)), layer.params)
    return io, expected.reshape(out.shape)


def run_against_tflm(kernel, target, shape, config, work, rng, edge: str = "random", space=None):
    """One variant of conv2d_s8/dwconv2d_s8 measured through the tuning session's Evaluator on
    a drawn layer, its output compared with TFLite Micro's instead of the numpy reference
    (where the two disagree, TFLite Micro is right). Returns the Trial."""
    from edgetune.evaluate import Evaluator

    io, expected = tflm_case(kernel.name, shape, rng, edge, work)
    space = space or kernel.space(target, dict(shape))
    evaluator = Evaluator(kernel, target, dict(shape), space, io, work)
    evaluator.expected = [expected]  # TFLite Micro is the spec, not the numpy reference
    return evaluator(config)


def draw_conv_shape(kernel, rng) -> dict:
    """A small legal conv2d_s8/dwconv2d_s8 shape: per-axis strides and dilations, per-side
    padding and (depthwise) a depth multiplier."""
    while True:
        kh, kw = (int(v) for v in rng.integers(1, 5, size=2))
        s = dict(h=int(rng.integers(kh, 13)), w=int(rng.integers(kw, 13)), kh=kh, kw=kw)
        if kernel.name == "dwconv2d_s8":
            s.update(c=int(rng.integers(1, 9)), mult=int(rng.integers(1, 4)))
        else:
            s.update(cin=int(rng.integers(1, 9)), cout=int(rng.integers(1, 9)))
        s.update(stride_h=int(rng.integers(1, 4)), stride_w=int(rng.integers(1, 4)),
                 dilation_h=int(rng.integers(1, 3)), dilation_w=int(rng.integers(1, 3)),
                 **{side: int(rng.integers(0, 3)) for side in ("pad_top", "pad_bottom", "pad_left", "pad_right")})
        try:
            return kernel.parse_shape({k: s[k] for k in kernel.shape_keys})
        except KernelError:  # a drawn kernel wider than its padded input: draw again
            continue
