"""A .tflite whose operators cannot run in the order stored (issue 27, harm 4): an operator
reading its own output, two operators reading each other's, or a reader stored before its
writer. TFLite runs a subgraph's operators once each, in order; edgetune's module would
read a tensor nothing wrote yet. Every command reading a model refuses it, naming them."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen.model.builder import build_model
from edgetune.codegen.model.graph import Operator, Quantization, Tensor, read_graph

from model_files import chain_model, write

Q = Quantization((0.05,), (0,))


def quantize_graph(edges: list[tuple[int, int]], inputs=(0,), outputs=(2,)) -> bytes:
    """Three int8 tensors (1x8) and one QUANTIZE (int8 to int8) per (input tensor, output tensor), in order."""
    tensors = [Tensor(i, f"t{i}", (1, 8), "int8", Q) for i in range(3)]
    operators = [Operator(n, "QUANTIZE", (a,), (b,)) for n, (a, b) in enumerate(edges)]
    return build_model(tensors, operators, list(inputs), list(outputs))


BAD = {
    "reads its own output": (quantize_graph([(0, 1), (1, 1), (1, 2)]),
                             "operator 1 (QUANTIZE) reads tensor 1, its own output"),
    "two-operator cycle": (quantize_graph([(0, 2), (2, 1), (1, 2)]),
                           "the operators form a cycle (operator 1 (QUANTIZE) -> operator 2 (QUANTIZE) -> "
                           "operator 1 (QUANTIZE)"),
    "out of execution order": (quantize_graph([(1, 2), (0, 1)]),
                               "operator 0 (QUANTIZE) reads tensor 1, written by operator 1 (QUANTIZE), which is "
                               "stored after it: the operators are out of execution order"),
}
COMMANDS = {
    "model show": lambda m, out: ["model", "show", m],
    "model export": lambda m, out: ["model", "export", m, "--target", "cortex-m55", "--out", out],
    "model tune": lambda m, out: ["model", "tune", m, "--target", "cortex-m55", "--budget", "1", "--db", out / "t.db"],
}


@pytest.mark.parametrize("command", COMMANDS, ids=COMMANDS.keys())
@pytest.mark.parametrize("case", BAD, ids=BAD.keys())
def test_a_graph_that_cannot_run_in_order_is_refused_naming_its_operators(tmp_path, case, command):
    data, says = BAD[case]
    model = write(tmp_path, "bad.tflite", data)
    result = CliRunner().invoke(main, [str(a) for a in COMMANDS[command](model, tmp_path / "out")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"edgetune: error: {model}: {says}"), result.output
    assert not (tmp_path / "out").exists()


def test_an_ordered_graph_still_reads(tmp_path):
    graph = read_graph(write(tmp_path, "good.tflite", quantize_graph([(0, 1), (1, 2)])))
    assert [op.index for op in graph.operators] == [0, 1]
    assert read_graph(write(tmp_path, "chain.tflite", chain_model(__import__("numpy").random.default_rng(0))))
