"""Reading .tflite models (app/model/): the layers, their kernels, shapes, MACs and
workloads; a chain of layers equal to TFLite Micro running the whole model; every kind of
bad model refused with one line naming the file and what is wrong; the board fit check;
and `edgetune model show`."""
from __future__ import annotations

import json
import re
from dataclasses import replace

import flatbuffers
import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.model import ModelError, check_fits, load_model
from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor
from edgetune.model.oracle import run_tflm
from edgetune.codegen.tflite_schema import schema
from edgetune.targets import get_target
from kernel_checks import layer_reference
from model_files import chain_model, conv_model, fc_model, int8_input, network_model, write

Q = Quantization((0.05,), (0,))


def cli(*args):
    return CliRunner().invoke(main, list(args))


def refused(path, *fragments):
    with pytest.raises(ModelError) as info:
        load_model(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.fixture
def network(tmp_path):
    return write(tmp_path, "net.tflite", network_model(np.random.default_rng(0)))


def test_layers_of_a_network(network):
    model = load_model(network)
    assert [l.op for l in model.layers] == ["CONV_2D", "CONV_2D", "CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D",
                                            "RESHAPE", "FULLY_CONNECTED", "SOFTMAX"]
    assert [l.kernel for l in model.layers] == ["conv2d_s8"] * 3 + ["dwconv2d_s8", None, None, "conv2d_s8", None]
    assert [l.index for l in model.layers] == list(range(8))
    first, dw, fc = model.layers[0].shape_dict, model.layers[3].shape_dict, model.layers[6].shape_dict
    assert list(first) == ["h", "w", "cin", "cout", "kh", "kw", "stride_h", "stride_w", "dilation_h", "dilation_w",
                           "pad_top", "pad_bottom", "pad_left", "pad_right"]
    assert (first["h"], first["w"], first["cin"], first["cout"], first["pad_top"], first["pad_right"]) == (10, 8, 1, 8, 1, 1)
    assert list(dw)[:4] == ["h", "w", "c", "mult"] and (dw["stride_h"], dw["pad_top"], dw["pad_bottom"]) == (2, 0, 1)
    assert (fc["h"], fc["w"], fc["cin"], fc["cout"], fc["kh"]) == (1, 1, 8, 4, 1)
    assert [l.macs for l in model.layers] == [10 * 8 * 8 * 9, 10 * 8 * 8 * 72, 10 * 8 * 8 * 72, 5 * 4 * 8 * 9,
                                              0, 0, 32, 0]
    assert model.layers[4].input_shape == (1, 5, 4, 8) and model.layers[4].output_shape == (1, 1, 1, 8)


def test_identical_layers_are_one_workload(network):
    workloads = load_model(network).workloads()
    assert [(w.kernel, w.layers) for w in workloads] == [("conv2d_s8", (0,)), ("conv2d_s8", (1, 2)),
                                                         ("dwconv2d_s8", (3,)), ("conv2d_s8", (6,))]
    assert workloads[1].macs == 2 * 10 * 8 * 8 * 72


def test_an_untuned_layer_has_no_kernel_io(network):
    with pytest.raises(ModelError, match="operator 4 .AVERAGE_POOL_2D. is not served"):
        load_model(network).layers[4].io(np.zeros(160, dtype=np.int8))


@pytest.mark.smoke  # the `model` extra: its schema bindings and TFLite Micro's interpreter
@pytest.mark.parametrize("edge", ["random", "extreme"])
def test_a_chain_of_layers_equals_tflite_micro_on_the_whole_model(tmp_path, edge):
    rng = np.random.default_rng(8)
    data = chain_model(rng, edge)
    model = load_model(write(tmp_path, "chain.tflite", data))
    x = int8_input(rng, (1, 8, 8, 4), edge)
    activation = x
    for layer in model.layers:
        activation = layer_reference(layer, layer.io(activation))
    want = run_tflm(data, [x])[0]
    assert np.array_equal(activation.reshape(want.shape), want)


def test_a_dynamic_batch_of_one_is_folded(tmp_path):
    tensors = [Tensor(0, "x", (1, 6), "int8", Q, signature=(-1, 6)),
               constant(1, "w", np.ones((3, 6), np.int8), Quantization((0.01,), (0,))),
               Tensor(2, "y", (1, 3), "int8", Q, signature=(-1, 3))]
    path = write(tmp_path, "batch.tflite", build_model(tensors, [Operator(0, "FULLY_CONNECTED", (0, 1, -1), (2,))], [0], [2]))
    layer = load_model(path).layers[0]
    assert layer.shape_dict["w"] == 1 and layer.kernel_output == (1, 1, 3)


# --- bad models ------------------------------------------------------------------------------

def test_a_missing_file(tmp_path):
    refused(tmp_path / "absent.tflite", "no such file")


def test_a_folder_or_a_pipe_is_named_as_such(tmp_path):
    import os

    (tmp_path / "model.tflite").mkdir()
    refused(tmp_path / "model.tflite", "model.tflite: a folder, not a .tflite model")
    os.mkfifo(tmp_path / "pipe.tflite")  # never opened: reading it would wait for a writer
    refused(tmp_path / "pipe.tflite", "pipe.tflite: not a regular file, not a .tflite model")


def test_a_file_that_is_not_tflite(tmp_path):
    refused(write(tmp_path, "notes.tflite", b"these are notes, not a model"), "not a TFLite model", "TFL3")
    refused(write(tmp_path, "tiny.tflite", b"TFL"), "too short")


def test_every_truncation_is_refused_as_such(tmp_path):
    data = network_model(np.random.default_rng(1))
    for cut in range(8, len(data), max(1, len(data) // 97)):
        path = write(tmp_path, "cut.tflite", data[:cut])
        try:
            model = load_model(path)
        except ModelError as exc:
            assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc)
            continue
        # a cut through padding only: then the model must be the whole one
        assert model.layers == load_model(write(tmp_path, "whole.tflite", data)).layers, cut


def test_corrupted_bytes_give_a_model_or_a_model_error(tmp_path):
    """Bytes changed at random (seeded): never another exception (that would be a bug)."""
    data = network_model(np.random.default_rng(0))
    rng = np.random.default_rng(1)
    outcomes = {"read": 0, "refused": 0}
    for _ in range(400):
        corrupt = bytearray(data)
        for position in rng.integers(8, len(data), size=int(rng.integers(1, 4))):
            corrupt[int(position)] = int(rng.integers(0, 256))
        try:
            load_model(write(tmp_path, "corrupt.tflite", bytes(corrupt)))
            outcomes["read"] += 1
        except ModelError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and outcomes["read"] > 0, outcomes


def _conv_with(tmp_path, dtype="int8", activation=0, signature=None, weight_zero=0, op_name="CONV_2D"):
    tensors = [Tensor(0, "image", (1, 5, 5, 2), dtype, Q if dtype == "int8" else None, signature=signature),
               constant(1, "filter", np.ones((3, 3, 3, 2), np.int8), Quantization((0.01,) * 3, (weight_zero,) * 3, 0)),
               Tensor(2, "features", (1, 5, 5, 3), "int8", Q)]
    options = (("padding", 0), ("strideH", 1), ("strideW", 1), ("fusedActivationFunction", activation))
    ops = [Operator(0, op_name, (0, 1, -1), (2,), "Conv2DOptions", options)]
    return write(tmp_path, "bad.tflite", build_model(tensors, ops, [0], [2]))


def test_a_float_model_names_the_tensor(tmp_path):
    refused(_conv_with(tmp_path, dtype="float32"), "tensor 0 (image) is float32", "float model", "int8")


def test_a_16x8_convolution_of_mixed_types_names_the_tensor(tmp_path):
    """int16 activations are TFLite's 16x8 scheme (app/model/layers16.py): a convolution
    reading int16 and writing int8 is no layer of it."""
    refused(_conv_with(tmp_path, dtype="int16"), "operator 0 (CONV_2D)", "output tensor 2 (features) is int8, expected int16")


def test_an_operator_edgetune_cannot_run_is_named_with_its_index(tmp_path):
    rng = np.random.default_rng(2)
    path = write(tmp_path, "conv.tflite", conv_model(rng, 5, 5, 2, 3, 3, 3))
    s = schema()
    model = s.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    sub = model.subgraphs[0]
    tanh_out = s.TensorT()
    tanh_out.name, tanh_out.shape, tanh_out.type = "squashed", [1, 5, 5, 3], s.TensorType.INT8
    tanh_out.quantization = sub.tensors[3].quantization
    sub.tensors.append(tanh_out)
    code = s.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = s.BuiltinOperator.SIN  # no int8 SIN in TFLite Micro
    model.operatorCodes.append(code)
    op = s.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 1, [3], [4]
    sub.operators.append(op)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    refused(write(tmp_path, "sin.tflite", bytes(builder.Output())), "cannot run 1 of this model's 2 operators: SIN "
            "outside a float island (edgetune runs it only there) (1x: operator 1)", "CONV_2D")


def test_a_fused_activation_edgetune_cannot_run(tmp_path):
    refused(_conv_with(tmp_path, activation=4), "operator 0 (CONV_2D)", "fused activation TANH")


def test_weights_with_a_zero_point(tmp_path):
    refused(_conv_with(tmp_path, weight_zero=3), "operator 0 (CONV_2D)", "tensor 1 (filter)", "zero point")


def _fc_with(tmp_path, x_shape=(1, 6), x_quant=Q, w_shape=(3, 6)):
    tensors = [Tensor(0, "x", x_shape, "int8", x_quant),
               constant(1, "w", np.ones(w_shape, np.int8), Quantization((0.01,), (0,))),
               Tensor(2, "y", (1, w_shape[0]), "int8", Q)]
    ops = [Operator(0, "FULLY_CONNECTED", (0, 1, -1), (2,))]
    return write(tmp_path, "fc.tflite", build_model(tensors, ops, [0], [2]))


@pytest.mark.parametrize("kwargs, fragments", [
    (dict(x_quant=Quantization((float("inf"),), (0,))), ("input tensor 0 (x)", "not a positive number")),
    (dict(x_quant=Quantization((0.0,), (0,))), ("input tensor 0 (x)", "not a positive number")),
    (dict(x_quant=Quantization((0.1,), (300,))), ("zero point 300, outside int8",)),
    (dict(x_quant=None), ("input tensor 0 (x) needs one scale and zero point",)),
    (dict(x_shape=(1, 40000), w_shape=(3, 40000)), ("sums 40000 products", "32767")),
    (dict(x_shape=(1, 0), w_shape=(3, 0)), ("input tensor 0 (x) has shape [1, 0]", "no dimension 0")),
    (dict(x_shape=(-1, 6)), ("tensor 0 (x) has shape [-1, 6], a negative dimension",)),
])
def test_quantisation_and_sizes_a_kernel_cannot_take(tmp_path, kwargs, fragments):
    refused(_fc_with(tmp_path, **kwargs), *fragments)


def test_inconsistent_tensors_are_refused(tmp_path):
    short = Tensor(1, "w", (3, 6), "int8", Quantization((0.01,), (0,)), data=bytes(10))
    tensors = [Tensor(0, "x", (1, 6), "int8", Q), short, Tensor(2, "y", (1, 3), "int8", Quantization((0.1, 0.2), (0,)))]
    ops = [Operator(0, "FULLY_CONNECTED", (0, 1, -1), (2,))]
    refused(write(tmp_path, "short.tflite", build_model(tensors, ops, [0], [2])), "tensor 1 (w) holds 10 bytes", "takes 18")
    tensors[1] = replace(short, data=bytes(18))
    refused(write(tmp_path, "zeros.tflite", build_model(tensors, ops, [0], [2])), "tensor 2 (y) has 2 scales and 1 zero points")


def test_dynamic_shapes_are_refused(tmp_path):
    refused(_conv_with(tmp_path, signature=(1, -1, -1, 2)), "tensor 0 (image)", "dynamic", "[1, -1, -1, 2]")


def test_several_subgraphs_are_refused(tmp_path):
    path = write(tmp_path, "one.tflite", conv_model(np.random.default_rng(3), 5, 5, 2, 3, 3, 3))
    model = schema().ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    model.subgraphs.append(schema().SubGraphT.InitFromPackedBuf(*_packed(model.subgraphs[0])))
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    refused(write(tmp_path, "two.tflite", bytes(builder.Output())), "2 subgraphs", "exactly one")


def _packed(table) -> tuple[bytes, int]:
    builder = flatbuffers.Builder(256)
    builder.Finish(table.Pack(builder))
    return bytes(builder.Output()), 0


# --- fitting the board ------------------------------------------------------------------------

def test_a_layer_too_large_for_the_board(tmp_path):
    """5 MiB of weights: no I/O region of the M55 (DTCM 512 KiB, SRAM2 4 MiB) holds them."""
    path = write(tmp_path, "wide.tflite", fc_model(np.random.default_rng(4), (1, 2560), 2048, per_channel=False))
    model = load_model(path)
    with pytest.raises(ModelError) as info:
        check_fits(model, get_target("cortex-m55"))
    assert str(info.value).startswith(f"{path}: ") and "operator 0 (FULLY_CONNECTED" in str(info.value)
    check_fits(model, get_target("host"))  # the host places nothing: any model fits


def test_activations_too_large_for_any_writable_region(tmp_path):
    big = (1, 1024, 1024, 3)  # 3 MiB in, 3 MiB out: more than the M55's 4 MiB SRAM2
    tensors = [Tensor(0, "frame", big, "int8", Q), constant(1, "shape", np.array(big, dtype=np.int32)),
               Tensor(2, "same", big, "int8", Q)]
    ops = [Operator(0, "RESHAPE", (0, 1), (2,), "ReshapeOptions", (("newShape", big),))]
    model = load_model(write(tmp_path, "big.tflite", build_model(tensors, ops, [0], [2])))
    with pytest.raises(ModelError, match=r"operator 0 needs 6291456 bytes of activations"):
        check_fits(model, get_target("cortex-m55"))


def test_constants_beyond_the_whole_board(tmp_path):
    """Five dense layers of 3.5 MiB each fit the M55's SRAM2 one at a time, not together."""
    rng = np.random.default_rng(6)
    tensors = [Tensor(0, "x", (1, 1792), "int8", Q)]
    ops = []
    for n in range(5):
        tensors += [constant(len(tensors), f"w{n}", rng.integers(-127, 128, (2048, 1792), dtype=np.int8),
                             Quantization((0.01,), (0,))),
                    Tensor(len(tensors) + 1, f"y{n}", (1, 2048), "int8", Q)]
        ops.append(Operator(n, "FULLY_CONNECTED", (0, len(tensors) - 2, -1), (len(tensors) - 1,)))
    model = load_model(write(tmp_path, "five.tflite", build_model(tensors, ops, [0], [t.index for t in tensors[2::2]])))
    with pytest.raises(ModelError, match=r"bytes of constants and \d+ bytes of activations exceed"):
        check_fits(model, get_target("cortex-m55"))


# --- edgetune model show -------------------------------------------------------------------------

def test_model_show_lists_layers_kernels_and_workloads(network):
    result = cli("model", "show", str(network), "--target", "cortex-m55")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert re.search(r"8 operators, 5 tuned layers in 4 distinct workloads; fits cortex-m55: [\d,]+ B of code and "
                     r"[\d,]+ B of constants in itcm$", lines[0]), lines[0]
    assert "CONV_2D" in lines[3] and "1x10x8x8 -> 1x10x8x8" in lines[3] and "46,080" in lines[3] and "(w1)" in lines[3]
    assert "(w1)" in lines[4] and "AVERAGE_POOL_2D" in lines[6] and "not tuned" in lines[6]
    assert any(line.strip().startswith("w3") and "cin=8,cout=4" in line for line in lines)
    assert lines[-1].startswith("total: 99,392 MACs")


def test_model_show_json(network):
    result = cli("model", "show", str(network), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [l["workload"] for l in data["layers"]] == ["w0", "w1", "w1", "w2", None, None, "w3", None]
    assert data["workloads"][1]["layers"] == [1, 2] and data["macs"] == 99392
    assert data["layers"][3]["shape"]["mult"] == 1


def test_model_show_refuses_bad_input_in_one_line(tmp_path, network):
    cut = write(tmp_path, "cut.tflite", network.read_bytes()[:300])
    for args in (["model", "show", str(cut)], ["model", "show", str(tmp_path / "none.tflite")]):
        result = cli(*args)
        assert result.exit_code == 2
        assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("edgetune: error: ")
    wide = write(tmp_path, "wide.tflite", fc_model(np.random.default_rng(4), (1, 2560), 2048, per_channel=False))
    result = cli("model", "show", str(wide), "--target", "cortex-m55")
    assert result.exit_code == 2 and "operator 0 (FULLY_CONNECTED" in result.output
