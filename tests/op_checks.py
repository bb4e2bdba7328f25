"""Helpers for the operator library's tests (tests/test_ops_*.py): one-operator models built
with the model writer, run in TFLite Micro (the oracle), and an operator's generated C
compiled and run natively on the host (cc) or on the M55 in QEMU (the tuning harness).
Imported by the test modules; never imports one."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from edgetune.codegen import render
from edgetune.evaluate import Evaluator
from edgetune.codegen.kernels.base import COMMON_CFLAGS, Buffer, KernelIO
from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor, read_graph
from edgetune.model.oracle import run_tflm
from edgetune.targets import iobuf
from edgetune.tuner import Outcome
from edgetune.targets.runners import runner_for

HOST_CC = ("cc", "-O2", *COMMON_CFLAGS)


def activation_tensor(index: int, shape, scale: float, zero: int, name: str = "") -> Tensor:
    return Tensor(index, name or f"t{index}", tuple(shape), "int8", Quantization((float(np.float32(scale)),), (int(zero),)))


def int32_constant(index: int, values, name: str = "") -> Tensor:
    return constant(index, name or f"c{index}", np.asarray(values, dtype=np.int32))


def one_op_graph(tmp_path: Path, tensors: list[Tensor], op: str, inputs, outputs, options_type: str = "",
                 options: dict | None = None):
    """(the model's bytes, its Graph read back): one operator over `tensors` (their
    positions are their indices); the model's inputs are the operator's non-constant ones."""
    operator = Operator(0, op, tuple(inputs), tuple(outputs), options_type, tuple((options or {}).items()))
    model_inputs = [i for i in inputs if i >= 0 and not tensors[i].constant]
    data = build_model(tensors, [operator], model_inputs, list(outputs))
    path = tmp_path / f"{op.lower()}.tflite"
    path.write_bytes(data)
    return data, read_graph(path)


def tflm(data: bytes, inputs: list[np.ndarray]) -> np.ndarray:
    (out,) = run_tflm(data, [np.asarray(x, dtype=np.int8) for x in inputs])
    return out


def draw_int8(rng: np.random.Generator, shape, edge: str) -> np.ndarray:
    """Random int8, or saturating inputs (only the extremes -128 and 127)."""
    if edge == "extreme":
        return rng.choice(np.array([-128, 127], dtype=np.int8), size=shape)
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def _c_array(name: str, x: np.ndarray) -> str:
    values = ", ".join(str(int(v)) for v in x.reshape(-1)) or "0"
    return f"static const int8_t {name}[{max(x.size, 1)}] = {{{values}}};"


def run_host(params, inputs: list[np.ndarray], out_elements: int, work: Path, alias: int | None = None) -> np.ndarray:
    """The operator's C compiled with cc (the kernels' warning flags) and run on this machine;
    with `alias`, the output buffer is that input's (the operator run in place)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "op.c").write_text(params.render("et_op"))
    arrays = "\n".join(_c_array(f"in{i}", np.asarray(x)) for i, x in enumerate(inputs) if i != alias)
    if alias is None:
        arrays += f"\nstatic int8_t out[{out_elements}];"
    else:
        values = ", ".join(str(int(v)) for v in np.asarray(inputs[alias]).reshape(-1))
        arrays += f"\nstatic int8_t out[{out_elements}] = {{{values}}};"
    args = ", ".join([*("out" if i == alias else f"in{i}" for i in range(len(inputs))), "out"])
    (work / "main.c").write_text(
        "#include <stdint.h>\n#include <stdio.h>\n"
        f"{params.declaration('et_op')};\n{arrays}\n"
        f"int main(void)\n{{\n    et_op({args});\n"
        f"    return fwrite(out, 1, sizeof out, stdout) == sizeof out ? 0 : 1;\n}}\n")
    subprocess.run([*HOST_CC, "op.c", "main.c", "-o", "op"], cwd=work, check=True, capture_output=True, text=True)
    run = subprocess.run(["./op"], cwd=work, check=True, capture_output=True, timeout=60)
    return np.frombuffer(run.stdout, dtype=np.int8).copy()


def run_target(params, target, inputs: list[np.ndarray], out_shape, work: Path, compiler: str | None = None) -> np.ndarray:
    """The operator's C built with one of the target's compilers (its first by default) and
    run through the tuning harness (bare metal in QEMU for an Arm target): its int8 output."""
    return run_target_as(params, target, [np.asarray(x, dtype=np.int8) for x in inputs], out_shape, "int8", work,
                         compiler)


def run_target_as(params, target, inputs: list[np.ndarray], out_shape, out_dtype: str, work: Path,
                  compiler: str | None = None) -> np.ndarray:
    """run_target with the inputs in their own types and an output of `out_dtype` (int16...)."""
    work.mkdir(parents=True, exist_ok=True)
    runner = runner_for(target)
    compiler = target.compiler(compiler) if compiler else target.compilers[0]
    (work / "op.c").write_text(params.render("et_op", target=target))
    subprocess.run([compiler.command, *compiler.cflags, *COMMON_CFLAGS, "-O2", "-c", "op.c", "-o", "op.o"], cwd=work,
                   check=True, capture_output=True, text=True)
    io = KernelIO(buffers=(*(Buffer(f"input{i}", np.ascontiguousarray(x)) for i, x in enumerate(inputs)),
                           Buffer("output", np.zeros(out_shape, dtype=out_dtype), is_output=True)), params=())
    buffers = [{"ctype": b.ctype, "nbytes": b.data.nbytes, "is_output": b.is_output} for b in io.buffers]
    glue = render("harness_glue.c.j2", dict(fn="et_op", declaration=params.declaration("et_op"), buffers=buffers,
                                            n_params=0, leading=[], checked=False))
    build = runner.link(work, [work / "op.o"], glue, io)
    _, raw = runner.run(build, io)
    (out,) = iobuf.unpack_outputs(io, raw)
    return out


def assert_same(name: str, got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got).reshape(-1), np.asarray(want).reshape(-1)
    assert got.shape == want.shape, f"{name}: {got.shape} values, expected {want.shape}"
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{name}: {bad.size} of {want.size} differ; first at {bad[0]}: "
                           f"{int(got[bad[0]])} instead of {int(want[bad[0]])}")


def operator_model(graph, op, folded: dict | None = None) -> bytes:
    """One operator of a model alone in a model, with its real tensors (renumbered); tensors
    in `folded` (index -> value) become constants holding that value."""
    folded = folded or {}
    order = list(dict.fromkeys(i for i in (*op.inputs, *op.outputs) if i >= 0))
    tensors = []
    for new, old in enumerate(order):
        t = graph.tensors[old]
        if old in folded:
            t = constant(new, t.name, np.asarray(folded[old]).astype(t.dtype).reshape(t.shape))
        tensors.append(Tensor(new, t.name, t.shape, t.dtype, t.quantization, t.data, None))
    renumber = {old: new for new, old in enumerate(order)}
    single = Operator(0, op.op, tuple(renumber.get(i, -1) for i in op.inputs), tuple(renumber[i] for i in op.outputs),
                      op.options_type, op.options)
    inputs = [renumber[i] for i in dict.fromkeys(op.inputs) if i >= 0 and not tensors[renumber[i]].constant]
    return build_model(tensors, [single], inputs, list(single.outputs))


def assert_one_input_everywhere(params, data: bytes, x: np.ndarray, target, work: Path) -> None:
    """A one-input operator that runs in place: its reference, its C on the host (apart and in
    place) and on `target` in the tuning harness all give TFLite Micro's output."""
    want = tflm(data, [x])
    assert_same("reference", params.reference(x), want)
    assert_same("C on the host", run_host(params, [x], want.size, work / "host"), want)
    assert params.in_place == (0,)
    assert_same("C on the host, in place", run_host(params, [x], want.size, work / "alias", alias=0), want)
    assert_same(f"C on the {target.name}", run_target(params, target, [x], want.shape, work / target.name), want)


def _bytes(x) -> np.ndarray:
    """A tensor's values as the C moves them: its bytes (an int16 tensor's two per value)."""
    return np.ascontiguousarray(x).reshape(-1).view(np.int8)


def run_host_outputs(params, inputs: list[np.ndarray], work: Path) -> list[np.ndarray]:
    """An operator of any number of outputs (params.output_shapes) compiled with cc and run on
    this machine: each output's bytes, in order."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "op.c").write_text(params.render("et_op"))
    sizes = [int(np.prod(s)) for s in params.output_shapes]
    arrays = "\n".join(_c_array(f"in{i}", _bytes(x)) for i, x in enumerate(inputs))
    arrays += "".join(f"\nstatic int8_t out{k}[{n}];" for k, n in enumerate(sizes))
    args = ", ".join([*(f"in{i}" for i in range(len(inputs))), *(f"out{k}" for k in range(len(sizes)))])
    writes = " && ".join(f"fwrite(out{k}, 1, sizeof out{k}, stdout) == sizeof out{k}" for k in range(len(sizes)))
    (work / "main.c").write_text(
        "#include <stdint.h>\n#include <stdio.h>\n"
        f"{params.declaration('et_op')};\n{arrays}\n"
        f"int main(void)\n{{\n    et_op({args});\n    return ({writes}) ? 0 : 1;\n}}\n")
    subprocess.run([*HOST_CC, "op.c", "main.c", "-o", "op"], cwd=work, check=True, capture_output=True, text=True)
    raw = np.frombuffer(subprocess.run(["./op"], cwd=work, check=True, capture_output=True, timeout=60).stdout,
                        dtype=np.int8)
    return list(np.split(raw.copy(), np.cumsum(sizes)[:-1]))


def run_target_outputs(params, target, inputs: list[np.ndarray], work: Path) -> list[np.ndarray]:
    """As run_target, for an operator of any number of outputs: each output's bytes, in order."""
    work.mkdir(parents=True, exist_ok=True)
    runner = runner_for(target)
    compiler = target.compilers[0]
    (work / "op.c").write_text(params.render("et_op", target=target))
    subprocess.run([compiler.command, *compiler.cflags, *COMMON_CFLAGS, "-O2", "-c", "op.c", "-o", "op.o"], cwd=work,
                   check=True, capture_output=True, text=True)
    io = KernelIO(buffers=(*(Buffer(f"input{i}", _bytes(x).copy()) for i, x in enumerate(inputs)),
                           *(Buffer(f"output{k}", np.zeros(int(np.prod(s)), dtype=np.int8), is_output=True)
                             for k, s in enumerate(params.output_shapes))), params=())
    buffers = [{"ctype": b.ctype, "nbytes": b.data.nbytes, "is_output": b.is_output} for b in io.buffers]
    glue = render("harness_glue.c.j2", dict(fn="et_op", declaration=params.declaration("et_op"), buffers=buffers,
                                            n_params=0, leading=[], checked=False))
    build = runner.link(work, [work / "op.o"], glue, io)
    _, raw = runner.run(build, io)
    return [np.asarray(out).reshape(-1) for out in iobuf.unpack_outputs(io, raw)]


def assert_all_same(name: str, got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Every output's bytes equal (an int16 output compared as its bytes)."""
    assert len(got) == len(want), f"{name}: {len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(f"{name}, output {k}", _bytes(g), _bytes(w))


def check_variants_against(kernel, target, shape, space, io, want, configs, turn: int, work: Path, label: str) -> int:
    """Run the `configs` of one compiler (the target's compilers take turns, by `turn`) on
    `io`, each output compared with `want` (TFLite Micro's: the spec); the number that ran."""
    compilers = sorted({c["compiler"] for c in configs})
    ran = 0
    for n, config in enumerate(c for c in configs if c["compiler"] == compilers[turn % len(compilers)]):
        (work / str(n)).mkdir(parents=True)
        evaluator = Evaluator(kernel, target, shape, space, io, work / str(n))
        evaluator.expected = [want]
        trial = evaluator(config)
        assert trial.outcome is Outcome.OK, f"{label} {config.key()}: {trial.outcome.value}: {trial.error}"
        ran += 1
    return ran
