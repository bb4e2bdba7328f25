"""The residual risk of float islands (docs/operators.md, "Float islands"): the table of an
island is computed at export with this machine's C library (glibc's sinf, cosf, expf, logf,
which TFLite Micro's host interpreter calls); a TFLite Micro firmware would call newlib's. This
runs newlib's functions in QEMU on each target, on 16,384 random floats in [-8, 8] and on the
512 values the zoo's SIN islands dequantize (float_internal, gru_float_part), and prints how
many float results differ from glibc's, and how many int8 results of QUANTIZE differ: the
islands' own, and the random values quantised at 40 output scales from 1/128 to 1/16.

    .venv/bin/python bench/float_libm.py --targets cortex-m55,cortex-m4
"""
from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from edgetune.codegen import render
from edgetune.codegen.kernels.base import COMMON_CFLAGS, Buffer, KernelIO
from edgetune.model.graph import read_graph
from edgetune.model.ops.float_island import FLOAT_UNARY, affine_quantize, float_islands
from edgetune.targets import get_target, iobuf
from edgetune.targets.runners import runner_for

ZOO = Path(__file__).resolve().parent.parent / "tests" / "data" / "models" / "zoo"
ISLAND_MODELS = ("float_internal", "gru_float_part")
FUNCTIONS = {"sinf": "SIN", "cosf": "COS", "expf": "EXP", "logf": "LOG"}


def island_inputs() -> list[tuple[str, np.ndarray, float, int]]:
    """(model, the 256 floats its island's DEQUANTIZE gives, output scale, zero point) per island."""
    found = []
    for name in ISLAND_MODELS:
        graph = read_graph(ZOO / f"{name}.tflite")
        for island in float_islands(graph):
            q_in, q_out = graph.tensors[island.source].quantization, graph.tensors[island.output].quantization
            real = (np.float64(np.float32(q_in.scales[0])) * (np.arange(-128, 128) - q_in.zero_points[0]))
            found.append((name, real.astype(np.float32), q_out.scales[0], int(q_out.zero_points[0])))
    return found


def on_target(target, function: str, x: np.ndarray, work: Path) -> np.ndarray:
    """newlib's `function` on every value of x, run on the target through the tuning harness."""
    work.mkdir(parents=True, exist_ok=True)
    compiler = target.compilers[0]
    (work / "f.c").write_text(
        "#include <math.h>\n#include <stdint.h>\n"
        "void et_f(const int8_t *input0, int8_t *output)\n{\n"
        "    const float *x = (const float *)(const void *)input0;\n    float *y = (float *)(void *)output;\n"
        f"    for (int32_t i = 0; i < {x.size}; ++i) {{\n        y[i] = {function}(x[i]);\n    }}\n}}\n")
    cc = [compiler.command, *compiler.cflags]
    subprocess.run([*cc, *COMMON_CFLAGS, "-O2", "-c", "f.c", "-o", "f.o"], cwd=work, check=True)
    libm = subprocess.run([*cc, "-print-file-name=libm.a"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([*cc, "-nostdlib", "-r", "f.o", libm, "-o", "with_libm.o"], cwd=work, check=True)
    io = KernelIO(buffers=(Buffer("input0", x.view(np.int8).copy()),
                           Buffer("output", np.zeros(x.size * 4, dtype=np.int8), is_output=True)), params=())
    buffers = [{"ctype": b.ctype, "nbytes": b.data.nbytes, "is_output": b.is_output} for b in io.buffers]
    glue = render("harness_glue.c.j2", dict(fn="et_f", declaration="void et_f(const int8_t *input0, int8_t *output)",
                                            buffers=buffers, n_params=0, leading=[], checked=False))
    runner = runner_for(target)
    _, raw = runner.run(runner.link(work, [work / "with_libm.o"], glue, io), io)
    (out,) = iobuf.unpack_outputs(io, raw)
    return np.ascontiguousarray(out).view(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="cortex-m55,cortex-m4")
    args = parser.parse_args()
    random = np.random.default_rng(1).uniform(-8, 8, 16384).astype(np.float32)
    islands = island_inputs()
    print("| target | function | floats differing from glibc (max ulp) | int8 results differing: zoo islands | random, 40 scales |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="edgetune-bench-libm-") as tmp:
        for name in args.targets.split(","):
            target = get_target(name)
            for function, op in FUNCTIONS.items():
                x = np.concatenate([random, *(real for _, real, _, _ in islands)])
                x = np.abs(x) if function == "logf" else x  # logf's domain
                host, got = FLOAT_UNARY[op](x), on_target(target, function, x, Path(tmp) / f"{name}-{function}")
                ulps = np.abs(got.view(np.int32).astype(np.int64) - host.view(np.int32))
                island_diff = sum(int((affine_quantize(host[16384 + 256 * k:16640 + 256 * k], s, z, -128, 127) !=
                                       affine_quantize(got[16384 + 256 * k:16640 + 256 * k], s, z, -128, 127)).sum())
                                  for k, (_, _, s, z) in enumerate(islands))
                sweep = sum(int((affine_quantize(host[:16384], s, 0, -128, 127) !=
                                 affine_quantize(got[:16384], s, 0, -128, 127)).sum())
                            for s in np.geomspace(1 / 128, 1 / 16, 40))
                print(f"| {name} | {function} | {int((ulps > 0).sum()):,} of {x.size:,} ({int(ulps.max())}) | "
                      f"{island_diff} of {256 * len(islands)} | {sweep} of {40 * 16384:,} |")


if __name__ == "__main__":
    main()
