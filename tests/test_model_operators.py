"""The one operator registry (app/model/operators.py): the tuned and untuned operators, the
library's parameters, `model show`, the docs' tables and the refusal all come from it."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import KERNELS
from edgetune.model import SUPPORTED, TUNED, UNTUNED, ModelError, load_model
from edgetune.model.builder import build_model
from edgetune.model.graph import Operator, Quantization, Tensor
from edgetune.model.operators import FOLDED, LIBRARY, OPERATORS, REGISTRY, TUNED_HOW, docs_table, names, untuned_as
from edgetune.model.module import schedule
from edgetune.model.ops import FOLDABLE, folded_operators
from model_files import write

DOCS = Path(__file__).resolve().parents[1] / "docs"
MODELS = Path(__file__).resolve().parent / "data" / "models"
Q = Quantization((0.05,), (-3,))


def test_every_entry_is_complete_and_the_lists_are_derived_from_it():
    assert len(REGISTRY) == len(OPERATORS), "an operator is registered twice"
    for op in OPERATORS:
        if op.how == TUNED_HOW:
            assert op.kernel in KERNELS and op.params is None, op
        elif op.how == LIBRARY:
            assert op.kernel is None and callable(op.params) and op.runs and op.refused, op
        else:
            assert op.how == FOLDED and op.kernel is None and op.params is None, op
    assert TUNED == {op.name: op.kernel for op in OPERATORS if op.how == TUNED_HOW}
    assert set(UNTUNED) == set(names(LIBRARY)) | set(names(FOLDED))
    assert SUPPORTED == tuple(REGISTRY)
    # What fold.py evaluates is what the registry says is folded, but PACK and STRIDED_SLICE:
    # folded over constants, library operators over activations (ops/split.py, ops/strided_slice.py).
    both = ("PACK", "STRIDED_SLICE")
    assert names(FOLDED) == tuple(n for n in FOLDABLE if n not in both)
    assert all(REGISTRY[n].how == LIBRARY for n in both)


def test_the_operators_page_holds_the_registrys_table():
    page = (DOCS / "operators.md").read_text()
    assert docs_table() in page, ("docs/operators.md's table differs from the registry: paste "
                                  "edgetune.model.operators.docs_table()'s text there")


def test_the_models_page_lists_the_tuned_operators_and_their_kernels():
    page = (DOCS / "models.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z_0-9]+)` \| `([a-z_0-9]+)`", page, flags=re.M))
    assert rows == TUNED


# Operators edgetune lacks (the first three the registry does not hold, so the test outlives
# the addition of any one of them).
LACKING = [op for op in ("SIN", "COS", "GELU", "NEG", "RSQRT", "LOG", "ELU", "FLOOR", "CUMSUM") if op not in REGISTRY][:3]


def _unsupported_model(tmp_path):
    """x -> A -> B(t, t) -> A -> C: four operators, three kinds edgetune lacks (A twice), so
    the refusal must name all three, not stop at the first."""
    a, b, c = LACKING
    tensors = [Tensor(i, f"t{i}", (1, 4), "int8", Q) for i in range(5)]
    ops = [Operator(0, a, (0,), (1,)), Operator(1, b, (1,), (2,)), Operator(2, a, (2,), (3,)),
           Operator(3, c, (3,), (4,))]
    return write(tmp_path, "lacking.tflite", build_model(tensors, ops, [0], [4]))


def test_the_refusal_names_every_operator_lacking_with_its_indices_and_count(tmp_path):
    path = _unsupported_model(tmp_path)
    with pytest.raises(ModelError) as info:
        load_model(path)
    message = str(info.value)
    a, b, c = LACKING
    assert "\n" not in message and message.startswith(f"{path}: edgetune cannot run 4 of this model's 4 operators: ")
    assert f"{a} (2x: operators 0, 2); {b} (1x: operator 1); {c} (1x: operator 3)" in message, message
    assert "docs/own-kernel.md" in message and ", ".join(SUPPORTED) in message


def test_the_refusal_is_one_line_on_the_command_line(tmp_path):
    result = CliRunner().invoke(main, ["model", "show", str(_unsupported_model(tmp_path))])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{LACKING[0]} (2x: operators 0, 2); {LACKING[1]} (1x: operator 1)" in lines[0], \
        result.output


def test_model_show_says_how_each_untuned_layer_runs_as_the_registry_has_it():
    result = CliRunner().invoke(main, ["model", "show", str(MODELS / "ds_cnn_kws.tflite")])
    assert result.exit_code == 0, result.output
    model = load_model(MODELS / "ds_cnn_kws.tflite")
    lines = result.output.splitlines()
    for layer in model.layers:
        line = next(line for line in lines if re.match(rf"\s*{layer.index}\s+{layer.op}\s", line))
        folded = layer.index in folded_operators(model.graph)  # its PACK is folded, though the library runs PACK
        assert line.endswith(untuned_as(layer.op, folded)) if layer.kernel is None else TUNED[layer.op] in line, line
    assert {untuned_as(op) for op in ("SOFTMAX", "SHAPE")} == {"- (library, not tuned)", "- (folded at export)"}
    assert np.all([layer.op in SUPPORTED for layer in model.layers])


def test_a_fused_int8_lstm_loads_its_state_and_intermediates_being_its_kernels(tmp_path):
    """TensorFlow's converter (tf-keras, a fixed batch) writes an int8 Keras LSTM as one
    UNIDIRECTIONAL_SEQUENCE_LSTM: its state tensors are variable (no writer, no data) and its
    float32 "intermediates" are read by no operator. The model loads (neither is refused: "no
    operator writes", "float"); this one, with no input gate and no biases, is refused by the
    operator's own check in one line naming what it lacks (tests/test_ops_lstm.py: the rest)."""
    q16 = Quantization((1 / 2048,), (0,))
    tensors = [Tensor(0, "x", (1, 8, 4), "int8", Q),
               Tensor(1, "w", (16, 4), "int8", Quantization((0.01,), (0,)), np.ones((16, 4), np.int8).tobytes()),
               Tensor(2, "hidden_state", (1, 16), "int8", Q, variable=True),
               Tensor(3, "cell_state", (1, 16), "int16", q16, variable=True),
               Tensor(4, "input_to_input_intermediate", (), "float32", Q),
               Tensor(5, "y", (1, 8, 16), "int8", Q)]
    inputs = [0, -1, 1, 1, 1, -1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, -1, -1, -1, -1]
    path = write(tmp_path, "lstm.tflite", build_model(tensors, [Operator(0, "UNIDIRECTIONAL_SEQUENCE_LSTM",
                                                                          tuple(inputs), (5,))], [0], [5]))
    model = load_model(path)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in SUPPORTED and untuned_as("UNIDIRECTIONAL_SEQUENCE_LSTM") == \
        "- (library, not tuned)"
    with pytest.raises(ModelError) as info:
        schedule(model, "m")
    message = str(info.value)
    assert "operator 0 (UNIDIRECTIONAL_SEQUENCE_LSTM): has no input 1, 5, 12, 13, 14, 15" in message, message
    assert "\n" not in message and "no operator writes" not in message and "float32" not in message
