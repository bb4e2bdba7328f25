"""TRANSPOSE_CONV as a tuned layer (issue 28): the tconv2d_s8 kernel's reference, its plain C
and Helium variants (host, the M55 in QEMU) against TFLite Micro on one-operator models over
odd sizes, strides 1 to 3, SAME and VALID, with and without bias, per-channel and per-tensor
weights, fused activations and the int8 extremes; and a decoder exported and verified whole."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetune.codegen import get_kernel
from edgetune.model import ModelError, load_model
from edgetune.model.builder import build_model, constant
from edgetune.model.export import export_model
from edgetune.model.graph import Operator, Quantization, Tensor
from edgetune.model.oracle import oracle_output, run_tflm
from edgetune.model.verify import verify_model
from edgetune.targets import get_target
from model_files import int8_input
from tconv_models import tconv_model
from op_checks import check_variants_against

KERNEL = get_kernel("tconv2d_s8")


def drawn_case(rng, index: int) -> dict:
    """Odd sizes, strides 1 to 3 per axis, kernels 1 to 4 per axis; padding, bias, per-channel
    weights, the fused activation and the extremes taking turns."""
    return dict(h=int(rng.integers(1, 7)), w=int(rng.integers(1, 7)), cin=int(rng.integers(1, 20)),
                cout=int(rng.integers(1, 10)), kh=int(rng.integers(1, 5)), kw=int(rng.integers(1, 5)),
                stride=(int(rng.integers(1, 4)), int(rng.integers(1, 4))), padding=("SAME", "VALID")[index % 2],
                with_bias=index % 3 != 0, per_channel=index % 5 != 0, edge=("random", "extreme")[index // 2 % 2],
                activation=("NONE", "RELU", "RELU6", "RELU_N1_TO_1")[index // 4 % 4])


def layer_case(tmp_path: Path, rng, case: dict):
    """(the layer, its KernelIO for a drawn input, TFLite Micro's output for that input)."""
    data = tconv_model(rng, **case)
    path = tmp_path / "tconv.tflite"
    path.write_bytes(data)
    layer = load_model(path).layers[0]
    x = int8_input(rng, (1, case["h"], case["w"], case["cin"]), case["edge"])
    return layer, layer.io(x), run_tflm(data, [x])[0].reshape(layer.kernel_output)


def test_reference_is_tflite_micro(tmp_path):
    rng = np.random.default_rng(28)
    for index in range(48):
        layer, io, want = layer_case(tmp_path, rng, drawn_case(rng, index))
        got = KERNEL.reference(layer.shape_dict, io)[0]
        assert np.array_equal(got, want), f"case {index} {layer.shape_text}: {int((got != want).sum())} differ"


def run_variants(tmp_path: Path, target, cases: int, vector: str, seed: int) -> int:
    """Every tile_c of the `vector` path, one compiler each (they alternate), on drawn layers:
    each output compared with TFLite Micro's. Returns how many variants ran."""
    rng, ran = np.random.default_rng(seed), 0
    tmp_path.mkdir(parents=True, exist_ok=True)
    for index in range(cases):
        layer, io, want = layer_case(tmp_path, rng, drawn_case(rng, index))
        shape = KERNEL.parse_shape(layer.shape_dict)
        space = KERNEL.space(target, shape)
        configs = [c for c in space if c["vector"] == vector and c["opt"] == "O2"]
        ran += check_variants_against(KERNEL, target, shape, space, io, want, configs, index,
                                      tmp_path / f"w{index}", layer.shape_text)
    return ran


def test_plain_c_on_the_host_is_tflite_micro(tmp_path, host):
    assert run_variants(tmp_path, host, 3, "c", seed=1) >= 3


def test_helium_on_the_m55_is_tflite_micro(tmp_path, m55):
    assert run_variants(tmp_path, m55, 2, "mve", seed=2) >= 2


@pytest.mark.slow
def test_plain_c_and_helium_on_the_m55_over_more_layers(tmp_path, m55):
    assert run_variants(tmp_path / "mve", m55, 8, "mve", seed=3) + run_variants(tmp_path / "c", m55, 4, "c", seed=4) >= 12


def test_the_helium_path_is_offered_only_with_mve(m55, host):
    shape = KERNEL.parse_shape(KERNEL.example_shape())
    assert {c["vector"] for c in KERNEL.space(m55, shape)} == {"c", "mve"}
    assert {c["vector"] for c in KERNEL.space(host, shape)} == {"c"}
    assert max(c["tile_c"] for c in KERNEL.space(m55, shape) if c["vector"] == "mve") == 4


def test_non_constant_weights_are_refused_naming_the_operator(tmp_path):
    rng = np.random.default_rng(5)
    data = tconv_model(rng, 3, 3, 4, 4, 3, 3)
    path = tmp_path / "tconv.tflite"
    path.write_bytes(data)
    graph = load_model(path).graph
    weights = graph.tensors[1]
    tensors = [*graph.tensors[:1], Tensor(1, "weights", weights.shape, "int8", weights.quantization), *graph.tensors[2:]]
    op = graph.operators[0]
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(build_model(tensors, [op], [1, 2], [3]))
    with pytest.raises(ModelError, match=r"operator 0 \(TRANSPOSE_CONV\): weights tensor 1 .*not a constant"):
        load_model(bad)


def decoder(path: Path) -> Path:
    """A small upsampling decoder: a 3x3 convolution, a stride-2 SAME transposed convolution
    with bias and ReLU (4x5 -> 8x10), then a stride-2 VALID one without bias (3x3: 8x10 -> 17x21)."""
    rng = np.random.default_rng(7)
    q = lambda s, z: Quantization((s,), (z,))  # noqa: E731

    def w(shape, scale):
        return rng.integers(-127, 128, size=shape, dtype=np.int8), Quantization((scale,) * shape[0], (0,) * shape[0], 0)

    w1, q1 = w((8, 3, 3, 4), 0.01)
    w2, q2 = w((6, 3, 3, 8), 0.008)
    w3, q3 = w((3, 3, 3, 6), 0.012)
    tensors = [Tensor(0, "input", (1, 4, 5, 4), "int8", q(0.05, -3)), constant(1, "w1", w1, q1),
               constant(2, "b1", rng.integers(-999, 999, 8, dtype=np.int32), Quantization((0.0005,) * 8, (0,) * 8)),
               Tensor(3, "c1", (1, 4, 5, 8), "int8", q(0.06, 5)),
               constant(4, "shape2", np.array([1, 8, 10, 6], dtype=np.int32)), constant(5, "w2", w2, q2),
               constant(6, "b2", rng.integers(-999, 999, 6, dtype=np.int32), Quantization((0.00048,) * 6, (0,) * 6)),
               Tensor(7, "t2", (1, 8, 10, 6), "int8", q(0.07, -128)),
               constant(8, "shape3", np.array([1, 17, 21, 3], dtype=np.int32)), constant(9, "w3", w3, q3),
               Tensor(10, "output", (1, 17, 21, 3), "int8", q(0.09, 2))]
    ops = [Operator(0, "CONV_2D", (0, 1, 2), (3,), "Conv2DOptions", (("padding", 0), ("strideH", 1), ("strideW", 1))),
           Operator(1, "TRANSPOSE_CONV", (4, 5, 3, 6), (7,), "TransposeConvOptions",
                    (("padding", 0), ("strideH", 2), ("strideW", 2), ("fusedActivationFunction", 1))),
           Operator(2, "TRANSPOSE_CONV", (8, 9, 7), (10,), "TransposeConvOptions",
                    (("padding", 1), ("strideH", 2), ("strideW", 2)))]
    path.write_bytes(build_model(tensors, ops, [0], [10]))
    return path


@pytest.mark.parametrize("target_name", [pytest.param("host", marks=pytest.mark.slow), "cortex-m55"])
def test_a_decoder_exports_and_verifies_bit_exact(tmp_path, target_name, request):
    if target_name != "host":
        request.getfixturevalue("m55")  # the emulator and the Arm compilers
    target = get_target(target_name)
    model = decoder(tmp_path / "decoder.tflite")
    assert [layer.kernel for layer in load_model(model).layers] == ["conv2d_s8", "tconv2d_s8", "tconv2d_s8"]
    export_model(model, target, None, tmp_path / "m")
    outcome = verify_model(tmp_path / "m", target, 3, layers=True)
    assert outcome.ok, [i.problem for i in outcome.inferences]


ZOO = Path(__file__).parent / "data" / "models" / "zoo"


@pytest.mark.parametrize("target_name", [pytest.param("host", marks=pytest.mark.slow), "cortex-m55"])
@pytest.mark.parametrize("name", ["tconv_decoder", "op_batch_matmul"])
def test_the_zoos_converter_made_models_verify_bit_exact(tmp_path, name, target_name, request):
    """TensorFlow's converter writes TRANSPOSE_CONV's output_shape through SHAPE/STRIDED_SLICE/
    PACK (a dynamic batch) and BATCH_MATMUL between two dense layers' outputs: both run tuned."""
    if target_name != "host":
        request.getfixturevalue("m55")
    model = ZOO / f"{name}.tflite"
    kernels = {layer.op: layer.kernel for layer in load_model(model).layers if layer.kernel}
    assert kernels.get("TRANSPOSE_CONV", kernels.get("BATCH_MATMUL")) in ("tconv2d_s8", "bmm_s8")
    export_model(model, get_target(target_name), None, tmp_path / "m")
    outcome = verify_model(tmp_path / "m", get_target(target_name), 3, layers=True)
    assert outcome.ok, [i.problem for i in outcome.inferences]


def test_a_computed_output_shape_is_a_constant_in_the_layers_oracle_model(tmp_path):
    layer = next(layer for layer in load_model(ZOO / "tconv_decoder.tflite").layers if layer.kernel == "tconv2d_s8")
    assert layer.tensors[0].constant and list(layer.tensors[0].array()) == list(layer.output_shape)
    x = int8_input(np.random.default_rng(0), layer.input_shape)
    assert np.array_equal(oracle_output(layer, x), KERNEL.reference(layer.shape_dict, layer.io(x))[0])
