"""The library operators added for users' models (issue 28) on the Cortex-M55 (QEMU, exact
instruction counts): each operator's plain C loop beside the C edgetune exports for the M55
(its Helium loop where it has one), measured in the same run on the same inputs, both
checked against the operator's numpy reference (itself checked bit for bit against TFLite
Micro by tests/test_ops_*.py).

A measuring caller of the pipeline (targets/measure.py): the operator's C is compiled with
the target's first compiler, linked with the harness's glue and measured as a
`LinkedProgram`, one `Run` whose outputs must be the reference's.

UNIDIRECTIONAL_SEQUENCE_LSTM runs on two LSTMs: the zoo's converter-made `lstm_fused` and a
larger drawn one (a keyword-spotting shape); its weights are baked in as the module passes them
(the harness takes few buffers).

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
from edgetune.model.ops.base import WithConstants
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


ZOO = Path(__file__).resolve().parent.parent / "tests" / "data" / "models" / "zoo"
LSTM = "UNIDIRECTIONAL_SEQUENCE_LSTM"


def lstm_cases(rng: np.random.Generator, work: Path) -> list[tuple[str, WithConstants, tuple[int, ...]]]:
    """(label, the LSTM with its weights baked in, input shape, input type): the zoo's lstm_fused,
    and a drawn LSTM of 49 steps of 40 features into 64 units (weights of one scale, zero point
    0), int8 and 16x8 (int16 activations, int64 biases)."""
    def baked(path: Path, index: int = 0):
        graph = read_graph(path)
        op = graph.operators[index]
        params = operator_params(graph, op)
        weights = {k: graph.tensors[op.inputs[p]].array() for k, p in enumerate(params.input_positions) if k}
        return WithConstants(params, weights), params.input_shapes[0]

    cases = [("lstm_fused (zoo)", *baked(ZOO / "lstm_fused.tflite"), "int8")]
    for dtype in ("int8", "int16"):
        path = drawn_lstm(rng, work, dtype)
        cases.append((f"LSTM 49x40 -> 64{'' if dtype == 'int8' else ' (16x8)'}", *baked(path), dtype))
    return cases


def drawn_lstm(rng: np.random.Generator, work: Path, dtype: str) -> Path:
    """A one-operator model: an LSTM of 49 steps of 40 features into 64 units."""
    steps, n_in, units = 49, 40, 64
    sixteen = dtype == "int16"
    q = lambda s, z=0: Quantization((float(np.float32(s)),), (z,))  # noqa: E731
    tensors = [Tensor(0, "x", (1, steps, n_in), dtype, q(2e-4) if sixteen else q(0.05, 3))]
    slots = [0] + [-1] * 23
    for k in range(8):
        w = rng.integers(-127, 128, size=(units, n_in if k < 4 else units), dtype=np.int8)
        tensors.append(constant(len(tensors), f"w{k}", w, q(0.004)))
        slots[1 + k] = len(tensors) - 1
    for k in range(4):
        bias = rng.integers(-3000, 3000, units).astype(np.int64 if sixteen else np.int32)
        tensors.append(constant(len(tensors), f"b{k}", bias, q(8e-7 if sixteen else 2e-4)))
        slots[12 + k] = len(tensors) - 1
    hidden = q(5e-5) if sixteen else q(0.01, -4)
    tensors.append(Tensor(len(tensors), "h", (1, units), dtype, hidden, variable=True))
    tensors.append(Tensor(len(tensors), "c", (1, units), "int16", q(2.0 ** -11), variable=True))
    slots[18], slots[19] = len(tensors) - 2, len(tensors) - 1
    tensors.append(Tensor(len(tensors), "y", (1, steps, units), dtype, hidden))
    op = Operator(0, LSTM, tuple(slots), (len(tensors) - 1,), "UnidirectionalSequenceLSTMOptions",
                  (("fusedActivationFunction", 4),))
    path = work / f"lstm_{dtype}.tflite"
    path.write_bytes(build_model(tensors, [op], [0], [len(tensors) - 1]))
    return path


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
        if args.only not in ("", LSTM):
            return
        for n, (label, op, shape, dtype) in enumerate(lstm_cases(rng, Path(root))):
            x = [rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, size=shape, dtype=dtype)]
            plain = measure(op, op.render("et_op"), x, target, Path(root) / f"lstm{n}" / "plain")
            exported = measure(op, op.render("et_op", target=target), x, target, Path(root) / f"lstm{n}" / "target")
            print(f"{'LSTM':<28}{label:<30}{plain:>12,}{exported:>12,}{exported / plain:>8.2f}")  # the name is too long


if __name__ == "__main__":
    main()
