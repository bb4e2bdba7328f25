"""The four MLPerf Tiny reference models committed in tests/data/models/ (made by
scripts/make_mlperf_tiny_models.py with TensorFlow's converter; tests/data/models/README.md) are
what the rest of the suite takes them for: each loads and runs in TFLite Micro's interpreter, has
int8 input and output of the benchmark's shapes, and is made of the operators listed here, with
the converter's quirks (batch norm folded away, per-channel dense weights, Keras 3's Flatten as a
SHAPE/STRIDED_SLICE/PACK/RESHAPE chain) and the SAME convolutions whose TFLite padding is
asymmetric. No TensorFlow is needed: the flatbuffers are read with the schema bindings that
tflite-micro ships."""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from tflite_micro import runtime
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

MODELS_DIR = Path(__file__).resolve().parent / "data" / "models"

# Every operator the four models may contain (issue 15); anything else the converter emits
# would be a surprise the model reader has to hear about.
ALLOWED_OPERATORS = frozenset({
    "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "AVERAGE_POOL_2D", "MAX_POOL_2D",
    "MEAN", "RESHAPE", "SOFTMAX", "PAD", "CONCATENATION", "QUANTIZE", "SHAPE", "STRIDED_SLICE",
    "PACK",
})
FLATTEN_CHAIN = ["SHAPE", "STRIDED_SLICE", "PACK", "RESHAPE"]


@dataclass(frozen=True)
class Expected:
    file_name: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    operators: dict[str, int]
    classifier: bool  # ends in a softmax (the autoencoder reconstructs its input instead)


def _classifier_ops(conv: int, depthwise: int, add: int = 0) -> dict[str, int]:
    counts = {"CONV_2D": conv, "DEPTHWISE_CONV_2D": depthwise, "ADD": add, "AVERAGE_POOL_2D": 1,
              "SHAPE": 1, "STRIDED_SLICE": 1, "PACK": 1, "RESHAPE": 1, "FULLY_CONNECTED": 1,
              "SOFTMAX": 1}
    return {name: count for name, count in counts.items() if count}


EXPECTED = (
    Expected("ds_cnn_kws.tflite", (1, 49, 10, 1), (1, 12), _classifier_ops(5, 4), True),
    Expected("mobilenet_v1_025_vww.tflite", (1, 96, 96, 3), (1, 2), _classifier_ops(14, 13), True),
    Expected("resnet8_cifar10.tflite", (1, 32, 32, 3), (1, 10), _classifier_ops(9, 0, add=3), True),
    Expected("fc_autoencoder_ad.tflite", (1, 640), (1, 640), {"FULLY_CONNECTED": 10}, False),
)
BY_FILE = {e.file_name: e for e in EXPECTED}
OPERATOR_NAMES = {value: name for name, value in vars(schema.BuiltinOperator).items()
                  if not name.startswith("_")}


@dataclass(frozen=True)
class Op:
    name: str
    op: object  # schema.OperatorT


def _load(file_name: str):
    data = (MODELS_DIR / file_name).read_bytes()
    return data, schema.ModelT.InitFromPackedBuf(data, 0)


def _ops(model) -> list[Op]:
    ops = []
    for op in model.subgraphs[0].operators:
        code = model.operatorCodes[op.opcodeIndex]
        # Codes past 127 live in builtinCode only; older files fill the deprecated byte.
        ops.append(Op(OPERATOR_NAMES[max(code.builtinCode, code.deprecatedBuiltinCode)], op))
    return ops


def _is_constant(model, tensor) -> bool:
    data = model.buffers[tensor.buffer].data
    return data is not None and len(data) > 0


def _same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    # TFLite's SAME: out = ceil(in / stride), the odd padding pixel goes after.
    out = -(-size // stride)
    total = max((out - 1) * stride + dilation * (kernel - 1) + 1 - size, 0)
    return total // 2, total - total // 2


def _conv_geometry(graph, op) -> tuple[tuple[int, ...], tuple[int, ...], object]:
    return (tuple(int(d) for d in graph.tensors[op.inputs[0]].shape),
            tuple(int(d) for d in graph.tensors[op.inputs[1]].shape), op.builtinOptions)


@pytest.fixture(scope="module", params=[e.file_name for e in EXPECTED])
def model_file(request):
    return request.param


def test_the_committed_bytes_are_those_the_readme_records(model_file):
    """The README's hashes are the provenance record: a regenerated file updates them."""
    readme = (MODELS_DIR / "README.md").read_text(encoding="utf-8")
    recorded = re.search(rf"^\| `{re.escape(model_file)}` \|.*\| `([0-9a-f]{{64}})` \|$", readme, re.M)
    data = (MODELS_DIR / model_file).read_bytes()
    assert recorded and recorded[1] == hashlib.sha256(data).hexdigest()
    assert f"| {len(data):,} |" in recorded[0]


def test_operators_are_the_expected_ones_and_all_allowed(model_file):
    _, model = _load(model_file)
    counts = Counter(op.name for op in _ops(model))
    assert set(counts) <= ALLOWED_OPERATORS, f"unexpected operators: {set(counts) - ALLOWED_OPERATORS}"
    assert dict(counts) == BY_FILE[model_file].operators
    # Batch norm was folded: a convolution or dense layer is followed by no arithmetic of its own.
    assert not {"MUL", "SUB"} & set(counts)


def test_input_and_output_are_int8_of_the_benchmark_shapes(model_file):
    _, model = _load(model_file)
    graph = model.subgraphs[0]
    expected = BY_FILE[model_file]
    (inp,), (out,) = graph.inputs, graph.outputs
    assert tuple(int(d) for d in graph.tensors[inp].shape) == expected.input_shape
    assert tuple(int(d) for d in graph.tensors[out].shape) == expected.output_shape
    assert graph.tensors[inp].type == schema.TensorType.INT8
    assert graph.tensors[out].type == schema.TensorType.INT8
    # No QUANTIZE/DEQUANTIZE at the edges: the converter was told int8 in and out.
    assert len(graph.tensors[inp].quantization.scale) == 1


def test_dense_layers_are_quantised_per_channel(model_file):
    _, model = _load(model_file)
    graph = model.subgraphs[0]
    dense = [op.op for op in _ops(model) if op.name == "FULLY_CONNECTED"]
    assert dense
    for op in dense:
        weights = graph.tensors[op.inputs[1]]
        assert weights.type == schema.TensorType.INT8
        assert len(weights.quantization.scale) == int(weights.shape[0]) > 1  # one scale per output
        assert graph.tensors[op.inputs[2]].type == schema.TensorType.INT32  # the folded bias


@pytest.mark.parametrize("file_name", [e.file_name for e in EXPECTED if e.classifier])
def test_flatten_is_keras_3s_dynamic_batch_chain(file_name):
    _, model = _load(file_name)
    names = [op.name for op in _ops(model)]
    start = names.index("SHAPE")
    assert names[start:start + 4] == FLATTEN_CHAIN
    assert names[start + 4:] == ["FULLY_CONNECTED", "SOFTMAX"]
    # The batch dimension is dynamic in the signature (-1) and 1 in the stored shape.
    graph = model.subgraphs[0]
    assert int(graph.tensors[graph.inputs[0]].shapeSignature[0]) == -1


@pytest.mark.parametrize("file_name, input_hw, kernel, stride, pads", [
    # DS-CNN's first layer: 10x4 stride 2 on 49x10 pads 4/5 rows and 1/1 columns.
    ("ds_cnn_kws.tflite", (49, 10), (10, 4), (2, 2), (4, 5, 1, 1)),
    # MobileNet's first layer: 3x3 stride 2 on 96x96 pads only the bottom row and right column.
    ("mobilenet_v1_025_vww.tflite", (96, 96), (3, 3), (2, 2), (0, 1, 0, 1)),
    ("resnet8_cifar10.tflite", (32, 32), (3, 3), (2, 2), (0, 1, 0, 1)),
])
def test_the_models_hold_the_asymmetric_same_convolutions(file_name, input_hw, kernel, stride, pads):
    _, model = _load(file_name)
    graph = model.subgraphs[0]
    found = []
    for op in _ops(model):
        if op.name not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            continue
        in_shape, w_shape, opts = _conv_geometry(graph, op.op)
        if in_shape[1:3] == input_hw and w_shape[1:3] == kernel and (opts.strideH, opts.strideW) == stride:
            assert opts.padding == schema.Padding.SAME
            found.append(_same_pads(in_shape[1], kernel[0], opts.strideH, opts.dilationHFactor)
                         + _same_pads(in_shape[2], kernel[1], opts.strideW, opts.dilationWFactor))
    assert found and set(found) == {pads}


def test_resnet_has_three_residual_adds_of_two_computed_tensors():
    _, model = _load("resnet8_cifar10.tflite")
    graph = model.subgraphs[0]
    produced = {out for op in graph.operators for out in op.outputs}
    adds = [op.op for op in _ops(model) if op.name == "ADD"]
    assert len(adds) == 3
    for add in adds:
        assert all(i in produced for i in add.inputs)  # neither side is a constant
        assert add.builtinOptions.fusedActivationFunction == schema.ActivationFunctionType.RELU


def _run(data: bytes, x: np.ndarray) -> np.ndarray:
    interpreter = runtime.Interpreter.from_bytes(data)
    interpreter.set_input(x, 0)
    interpreter.invoke()
    return interpreter.get_output(0)


def test_each_model_runs_in_tflite_micro_on_random_int8_input(model_file):
    data, _ = _load(model_file)
    expected = BY_FILE[model_file]
    interpreter = runtime.Interpreter.from_bytes(data)
    details = interpreter.get_input_details(0)
    assert details["dtype"] == np.int8 and tuple(details["shape"]) == expected.input_shape
    rng = np.random.default_rng(15)
    x1, x2 = (rng.integers(-128, 128, expected.input_shape, dtype=np.int8) for _ in range(2))
    y1 = _run(data, x1)
    assert y1.dtype == np.int8 and y1.shape == expected.output_shape
    assert np.array_equal(_run(data, x1), y1)  # the reference kernels are deterministic
    assert not np.array_equal(_run(data, x2), y1)  # the seeded weights are not degenerate
    if expected.classifier:
        out = interpreter.get_output_details(0)["quantization_parameters"]
        probabilities = (y1.astype(np.int32) - out["zero_points"][0]) * out["scales"][0]
        assert abs(float(probabilities.sum()) - 1.0) < 0.02


ARENA_TOTAL = re.compile(r"Arena allocation total (\d+) bytes")
ARENA_HEAD = re.compile(r"Arena allocation head (\d+) bytes")


def test_tflite_micro_reports_an_arena_that_holds_the_largest_activation(model_file, capfd):
    """The RecordingMicroAllocator's figures (tests/data/models/README.md records them)."""
    data, model = _load(model_file)
    interpreter = runtime.Interpreter.from_bytes(data)
    interpreter.set_input(np.zeros(BY_FILE[model_file].input_shape, np.int8), 0)
    interpreter.invoke()
    capfd.readouterr()
    interpreter.print_allocations()
    report = capfd.readouterr().err
    total, head = int(ARENA_TOTAL.search(report)[1]), int(ARENA_HEAD.search(report)[1])
    graph = model.subgraphs[0]
    activations = [int(np.prod(t.shape)) for t in graph.tensors
                   if t.type == schema.TensorType.INT8 and not _is_constant(model, t)]
    assert 0 < max(activations) <= head <= total
