"""The library operators added for users' models (issue 28) on the Cortex-M55 (QEMU, exact
instruction counts): each operator's plain C loop beside the C edgetune exports for the M55
(its Helium loop where it has one), measured in the same run on the same inputs, both
checked against the operator's numpy reference (itself checked bit for bit against TFLite
Micro by tests/test_ops_*.py).

A measuring caller of the pipeline (targets/measure.py): the operator's C is compiled with
the target's first compiler, linked with the harness's glue and measured as a
`LinkedProgram`, one `Run` whose outputs must be the reference's.

usage: .venv/bin/python bench/ops.py [--target cortex-m55] [--only NAME]
"""
from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgetune.codegen import render
from edgetune.codegen.kernels.base import COMMON_CFLAGS, Buffer, KernelIO
from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor, read_graph
from edgetune.model.operators import operator_params
from edgetune.targets import get_target
from edgetune.targets.measure import Expected, LinkedProgram, MeasureInput, Pipeline, Run, failure_text
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import run_tool


@dataclass(frozen=True)
class Case:
    """One operator on realistic shapes: its inputs' and output's shapes and quantisation,
    its constant (the second input, if any) and options."""

    op: str
    inputs: tuple[tuple[int, ...], ...]
    output: tuple[int, ...]
    quant: tuple[tuple[float, int], ...]  # per input, then the output
    options_type: str = ""
    options: tuple = ()
    constant: tuple[int, ...] | None = None  # an int32 constant input after the activations
    dtype: str = "int8"  # of the activations: int8, or int16 (TFLite's 16x8 scheme)
    out_dtype: str = ""  # of the output when it is another (QUANTIZE between int8 and int16)


MAP = (1, 16, 16, 32)  # 8,192 values: a mid-network feature map of an MLPerf Tiny model
CASES = (
    Case("SUB", (MAP, MAP), MAP, ((0.05, 3), (0.04, -2), (0.08, 1)), "SubOptions"),
    Case("MUL", (MAP, (1, 1, 1, 32)), MAP, ((0.05, 3), (1 / 256, -128), (0.04, -5)), "MulOptions"),
    Case("MUL", (MAP, MAP), MAP, ((0.05, 3), (0.04, -2), (0.1, 0)), "MulOptions"),
    Case("SQUARED_DIFFERENCE", (MAP, MAP), MAP, ((0.05, 3), (0.05, -2), (0.5, -128)), "SquaredDifferenceOptions"),
    Case("LOGISTIC", (MAP,), MAP, ((0.05, 3), (1 / 256, -128))),
    Case("TANH", (MAP,), MAP, ((0.05, 3), (1 / 128, 0))),
    Case("HARD_SWISH", (MAP,), MAP, ((0.05, 3), (0.04, -100)), "HardSwishOptions"),
    Case("LEAKY_RELU", (MAP,), MAP, ((0.05, 3), (0.05, 3)), "LeakyReluOptions", (("alpha", 0.2),)),
    Case("RSQRT", (MAP,), MAP, ((0.05, -128), (0.05, -128))),
    Case("TRANSPOSE", (MAP,), (1, 32, 16, 16), ((0.05, 3), (0.05, 3)), "TransposeOptions", (), (0, 3, 1, 2)),
    Case("RESIZE_NEAREST_NEIGHBOR", ((1, 8, 8, 32),), MAP, ((0.05, 3), (0.05, 3)), "ResizeNearestNeighborOptions",
         (), (16, 16)),
    Case("RESIZE_BILINEAR", ((1, 8, 8, 32),), MAP, ((0.05, 3), (0.05, 3)), "ResizeBilinearOptions", (), (16, 16)),
    # int16 (16x8: zero points 0), with their Helium loops (VLDRH.S32)
    Case("ADD", (MAP, MAP), MAP, ((5e-4, 0), (4e-4, 0), (8e-4, 0)), "AddOptions", dtype="int16"),
    Case("SUB", (MAP, MAP), MAP, ((5e-4, 0), (4e-4, 0), (8e-4, 0)), "SubOptions", dtype="int16"),
    Case("MUL", (MAP, MAP), MAP, ((5e-4, 0), (4e-4, 0), (4e-3, 0)), "MulOptions", dtype="int16"),
    Case("MUL", (MAP, (1, 1, 1, 32)), MAP, ((5e-4, 0), (1 / 32768, 0), (4e-4, 0)), "MulOptions", dtype="int16"),
    Case("SQUARED_DIFFERENCE", (MAP, MAP), MAP, ((5e-4, 0), (5e-4, 0), (0.05, 0)), "SquaredDifferenceOptions",
         dtype="int16"),
    Case("RELU", (MAP,), MAP, ((5e-4, 0), (4e-4, 0)), dtype="int16"),
    Case("RELU6", (MAP,), MAP, ((5e-4, 0), (5e-4, 0)), dtype="int16"),
    Case("LEAKY_RELU", (MAP,), MAP, ((5e-4, 0), (5e-4, 0)), "LeakyReluOptions", (("alpha", 0.2),), dtype="int16"),
    # SOFTMAX over rows of 128 (an attention block's) and of 12 (a keyword spotter's classes)
    Case("SOFTMAX", ((64, 128),), (64, 128), ((0.1, -3), (1 / 256, -128)), "SoftmaxOptions", (("beta", 1.0),)),
    Case("SOFTMAX", ((1, 12),), (1, 12), ((0.1, -3), (1 / 256, -128)), "SoftmaxOptions", (("beta", 1.0),)),
    # MEAN as a global average pool (the channels inner) and over the last axis (LayerNorm's)
    Case("MEAN", (MAP,), (1, 1, 1, 32), ((0.05, 3), (0.04, -2)), "ReducerOptions", (("keepDims", True),), (1, 2)),
    Case("MEAN", ((1, 64, 128),), (1, 64, 1), ((0.05, 3), (0.04, -2)), "ReducerOptions", (("keepDims", True),), (2,)),
    Case("MEAN", (MAP,), (1, 1, 1, 32), ((5e-4, 0), (4e-4, 0)), "ReducerOptions", (("keepDims", True),), (1, 2),
         dtype="int16"),
    Case("MEAN", ((1, 64, 128),), (1, 64, 1), ((5e-4, 0), (4e-4, 0)), "ReducerOptions", (("keepDims", True),), (2,),
         dtype="int16"),
    Case("MEAN", ((1, 13, 5, 16),), (1, 16), ((5e-4, 0), (4e-4, 0)), "ReducerOptions", (("keepDims", False),), (1, 2),
         dtype="int16"),  # the zoo's 16x8 keyword spotter's
    # SOFTMAX over rows of 128 (an attention block's) and of 12 (a keyword spotter's classes)
    Case("SOFTMAX", ((64, 128),), (64, 128), ((2.0 ** -11, 0), (1 / 32768, 0)), "SoftmaxOptions", (("beta", 1.0),),
         dtype="int16"),
    Case("SOFTMAX", ((1, 12),), (1, 12), ((2.0 ** -11, 0), (1 / 32768, 0)), "SoftmaxOptions", (("beta", 1.0),),
         dtype="int16"),
    # QUANTIZE: int8 requantised, between a graph's int8 and 16x8 parts, int16 requantised
    Case("QUANTIZE", (MAP,), MAP, ((0.05, 3), (0.03, -5))),
    Case("QUANTIZE", (MAP,), MAP, ((0.05, 3), (4e-4, 0)), out_dtype="int16"),
    Case("QUANTIZE", (MAP,), MAP, ((4e-4, 0), (0.05, 3)), dtype="int16", out_dtype="int8"),
    Case("QUANTIZE", (MAP,), MAP, ((4e-4, 0), (5e-4, 0)), dtype="int16"),
    # int16 LOGISTIC and TANH (TFLite's table of sigmoid(i / 24), gathered on Helium)
    Case("LOGISTIC", (MAP,), MAP, ((2.0 ** -12, 0), (1 / 32768, 0)), dtype="int16"),
    Case("TANH", (MAP,), MAP, ((1 / 3000, 0), (1 / 32768, 0)), dtype="int16"),
    # int16 pools (a 3x3 window, stride 2, SAME), channels across the lanes on Helium
    Case("AVERAGE_POOL_2D", (MAP,), (1, 8, 8, 32), ((5e-4, 0), (5e-4, 0)), "Pool2DOptions",
         (("padding", 0), ("strideH", 2), ("strideW", 2), ("filterHeight", 3), ("filterWidth", 3)), dtype="int16"),
    Case("MAX_POOL_2D", (MAP,), (1, 8, 8, 32), ((5e-4, 0), (5e-4, 0)), "Pool2DOptions",
         (("padding", 0), ("strideH", 2), ("strideW", 2), ("filterHeight", 3), ("filterWidth", 3)), dtype="int16"),
)


def params_of(case: Case, work: Path):
    """The operator's static parameters, from a one-operator model written and read back."""
    tensors = [Tensor(i, f"in{i}", shape, case.dtype, Quantization((float(np.float32(s)),), (z,)))
               for i, (shape, (s, z)) in enumerate(zip(case.inputs, case.quant))]
    inputs = list(range(len(tensors)))
    if case.constant is not None:
        tensors.append(constant(len(tensors), "c", np.asarray(case.constant, dtype=np.int32)))
        inputs.append(len(tensors) - 1)
    s, z = case.quant[-1]
    tensors.append(Tensor(len(tensors), "out", case.output, case.out_dtype or case.dtype, Quantization((float(np.float32(s)),), (z,))))
    operator = Operator(0, case.op, tuple(inputs), (len(tensors) - 1,), case.options_type, case.options)
    path = work / f"{case.op.lower()}.tflite"
    path.write_bytes(build_model(tensors, [operator], list(range(len(case.inputs))), [len(tensors) - 1]))
    graph = read_graph(path)
    return operator_params(graph, graph.operators[0])


def measure(params, source: str, inputs: list[np.ndarray], target, work: Path) -> int:
    """The instructions one call of `source` (the operator's C as `et_op`) takes on `target`;
    every output must be the reference's (bench/moves.py measures its operators of several
    outputs here too)."""
    work.mkdir(parents=True)
    compiler = target.compilers[0]
    (work / "op.c").write_text(source)
    run_tool([compiler.command, *compiler.cflags, *COMMON_CFLAGS, "-O2", "-c", "op.c", "-o", "op.o"], work)
    want = tuple(np.asarray(w) for w in params.outputs(*inputs))
    outputs = [Buffer("output" if len(want) == 1 else f"output{k}", np.zeros(w.shape, dtype=w.dtype), is_output=True)
               for k, w in enumerate(want)]
    io = KernelIO(buffers=(*(Buffer(f"input{i}", np.ascontiguousarray(x)) for i, x in enumerate(inputs)), *outputs),
                  params=())
    glue = render("harness_glue.c.j2", dict(
        fn="et_op", declaration=params.declaration("et_op"), n_params=0, leading=[], checked=False,
        buffers=[{"ctype": b.ctype, "nbytes": b.data.nbytes, "is_output": b.is_output} for b in io.buffers]))
    expected = Expected(want, lambda name, got, w: None if np.array_equal(got.reshape(-1), w.reshape(-1))
                        else f"{name}: differs from the reference")
    result = Pipeline(runner_for(target)).measure(
        MeasureInput(LinkedProgram((work / "op.o",), glue), (Run(io, expected),)), work)
    if result.fault is not None:
        raise SystemExit(f"{params.op}: {failure_text(result)}")
    if result.error:  # it ran, and computed something else
        raise SystemExit(f"{params.op}: {result.error}")
    return int(result.values[target.measures])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="cortex-m55")
    parser.add_argument("--only", default="", help="one operator's name")
    args = parser.parse_args()
    target = get_target(args.target)
    rng = np.random.default_rng(0)
    print(f"{'operator':<28}{'shapes':<30}{'plain C':>12}{'exported':>12}{'ratio':>8}   ({target.measures})")
    with tempfile.TemporaryDirectory(prefix="edgetune-bench-ops-") as root:
        for n, case in enumerate(c for c in CASES if args.only in ("", c.op)):
            work = Path(root) / str(n)
            work.mkdir()
            params = params_of(case, work)
            values = np.iinfo(case.dtype)
            inputs = [rng.integers(values.min, values.max + 1, size=shape, dtype=case.dtype) for shape in case.inputs]
            if case.op == "RSQRT":  # defined at and above its zero point only
                inputs = [np.maximum(x, np.int8(case.quant[0][1])) for x in inputs]
            plain = measure(params, params.render("et_op"), inputs, target, work / "plain")
            exported = measure(params, params.render("et_op", target=target), inputs, target, work / "target")
            shapes = " & ".join("x".join(map(str, s)) for s in case.inputs)
            types = case.dtype if case.out_dtype in ("", case.dtype) else f"{case.dtype}->{case.out_dtype}"
            name = case.op if types == "int8" else f"{case.op} ({types})"
            print(f"{name:<28}{shapes:<30}{plain:>12,}{exported:>12,}{exported / plain:>8.2f}")


if __name__ == "__main__":
    main()
