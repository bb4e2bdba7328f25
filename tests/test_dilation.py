"""A dilated convolution as TensorFlow's converter writes it (SPACE_TO_BATCH_ND -> CONV_2D or
DEPTHWISE_CONV_2D -> BATCH_TO_SPACE_ND) runs as one dilated convolution on the tuned kernels
(app/model/dilation.py): the rewritten model's layers, run through their references (the
kernels' and the library's), give TFLite Micro's output of the original three operators bit for
bit, over kernel sizes, dilations, SAME and VALID, odd sizes, depth multipliers, fused
activations, zero points (0: the copies absorbed; not 0: one padding copy kept) and saturating
inputs; a chain that is not a dilated convolution's is left to the operators on their own; a
whole network exports and verifies on the host and the M55."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgetune.codegen.kernels import get_kernel
from edgetune.model import ModelError, load_model
from edgetune.model.builder import build_model
from edgetune.model.export import export_model
from edgetune.model.graph import read_graph
from edgetune.model.oracle import oracle_output, run_tflm
from edgetune.model.operators import operator_params
from edgetune.model.ops import constant_value
from edgetune.model.verify import verify_model
from edgetune.targets import get_target
from dilated_models import Dilated, dilated_model
from op_checks import assert_same, draw_int8


def reference_run(model, x: np.ndarray) -> np.ndarray:
    """The rewritten model's output through each layer's reference (a tuned layer: its kernel's
    on the layer's buffers; a library operator: its numpy reference), absorbed copies skipped."""
    graph, absorbed = model.graph, dict(model.graph.absorbed)
    values = {graph.inputs[0]: x}
    for layer in model.layers:
        op = layer.operator
        if op.index in absorbed:
            continue
        if layer.kernel is not None:
            io = layer.io(values[layer.input_tensor])
            outputs = get_kernel(layer.kernel).reference(layer.shape_dict, io)
            out = outputs[[b.name for b in io.outputs()].index(layer.output_name)]
        else:
            params = operator_params(graph, op)
            out = params.reference(*(values[t] if t in values else constant_value(graph, t)
                                     for t in op.inputs[:params.n_inputs]))
        values[op.outputs[0]] = np.asarray(out).reshape(graph.tensors[op.outputs[0]].shape)
    return values[graph.outputs[0]]


NETWORKS = {
    "conv-same-zero0": [Dilated(9, 7, 3, 8, in_zero=0)],
    "conv-same": [Dilated(9, 7, 3, 8, in_zero=-128, activation="RELU")],
    "conv-valid": [Dilated(11, 10, 4, 5, k=(3, 2), d=(3, 2), padding="VALID", in_zero=17)],
    "conv-5x5-d4": [Dilated(13, 6, 2, 4, k=(5, 3), d=(4, 1), in_zero=-3, activation="RELU6")],
    "dw-same": [Dilated(8, 8, 6, 12, depthwise=True, d=(2, 3), in_zero=127)],
    "dw-same-zero0": [Dilated(7, 5, 4, 4, depthwise=True, d=(3, 3), in_zero=0)],
    "dw-valid": [Dilated(10, 9, 3, 3, k=(2, 3), depthwise=True, padding="VALID", in_zero=-100)],
    "conv-then-dw": [Dilated(9, 9, 3, 8, in_zero=-128, activation="RELU"), Dilated(9, 9, 8, 8, depthwise=True)],
}


@pytest.mark.parametrize("name", list(NETWORKS))
def test_the_rewrite_is_tflite_micro_running_the_three_operators(tmp_path, name):
    rng = np.random.default_rng(sum(map(ord, name)))
    layers = NETWORKS[name]
    for edge in ("random", "extreme"):
        data = dilated_model(rng, layers, edge)
        path = tmp_path / f"{name}-{edge}.tflite"
        path.write_bytes(data)
        model = load_model(path)
        dilated = [layer for layer in model.layers if layer.kernel is not None]
        assert len(dilated) == len(layers)
        for layer, spec in zip(dilated, layers):
            assert (layer.shape_dict["dilation_h"], layer.shape_dict["dilation_w"]) == spec.d
        # the copies a zero point of 0 (or VALID) lets the kernel's own padding stand for are absorbed
        zero = model.graph.tensors[0].quantization.zero_points[0]
        first_copies = 2 if zero == 0 or layers[0].padding == "VALID" else 1
        assert sum(1 for _, into in model.graph.absorbed if into == dilated[0].index) == first_copies
        for n in range(3):
            x = draw_int8(rng, (1, layers[0].h, layers[0].w, layers[0].c), edge if n == 0 else "random")
            (want,) = run_tflm(data, [x])
            assert_same(f"{name} {edge} {n}", reference_run(model, x), want)


def test_each_rewritten_layer_is_tflite_micros_dilated_convolution(tmp_path):
    """The per-layer oracle of `model verify` runs the rewritten operator alone: TFLite Micro's
    own dilated convolution agrees with the kernel's reference on it."""
    rng = np.random.default_rng(3)
    path = tmp_path / "m.tflite"
    path.write_bytes(dilated_model(rng, NETWORKS["conv-then-dw"]))
    model = load_model(path)
    for layer in model.tuned:
        x = draw_int8(rng, layer.input_shape, "random")
        io = layer.io(x)
        got = get_kernel(layer.kernel).reference(layer.shape_dict, io)[0]
        assert_same(f"operator {layer.index}", got, oracle_output(layer, x))


def test_chains_that_are_no_dilated_convolution_are_left_alone(tmp_path):
    """A tensor between the three read by another operator, or the middle convolution strided:
    the operators stay as the file has them (and the batch of blocks is then refused by the
    convolution, naming it)."""
    rng = np.random.default_rng(4)
    path = tmp_path / "m.tflite"
    data = dilated_model(rng, [Dilated(9, 7, 3, 8, in_zero=0)])
    graph = read_graph(_write(tmp_path / "m.tflite", data))
    tensors, ops = list(graph.tensors), list(graph.operators)
    # the padded blocks are also a model output: no longer the convolution's alone
    path.write_bytes(build_model(tensors, ops, list(graph.inputs), [*graph.outputs, ops[0].outputs[0]]))
    with pytest.raises(ModelError, match=r"operator 1 \(CONV_2D\).*batch 1"):
        load_model(path)


def test_a_malformed_chain_is_left_to_the_operators_refusals(tmp_path):
    """SPACE_TO_BATCH_ND without its paddings: not rewritten (no crash); the convolution's batch
    of blocks and the operator itself are refused by name."""
    graph = read_graph(_write(tmp_path / "m.tflite", dilated_model(np.random.default_rng(5), NETWORKS["conv-same"])))
    ops = list(graph.operators)
    ops[0] = replace(ops[0], inputs=ops[0].inputs[:2])
    bad_model = build_model(list(graph.tensors), ops, list(graph.inputs), list(graph.outputs))
    path = _write(tmp_path / "bad.tflite", bad_model)
    with pytest.raises(ModelError, match=r"operator 1 \(CONV_2D\).*batch 1"):
        load_model(path)
    bad = read_graph(path)
    with pytest.raises(ModelError, match=r"operator 0 \(SPACE_TO_BATCH_ND\): has no input 2"):
        operator_params(bad, bad.operators[0])


def test_a_dynamic_batch_chain_is_refused_as_tflite_micro_miscomputes_it(tmp_path):
    """Converted with a dynamic batch, the blocks' tensors store batch 1: TFLite Micro then
    computes another output than the same model with the true batch stored (which edgetune's
    rewrite equals), so there is nothing to be bit-exact with: refused, naming the operators."""
    layers = [Dilated(9, 7, 3, 8, in_zero=-128)]
    static, dynamic = (dilated_model(np.random.default_rng(8), layers, dynamic=d) for d in (False, True))
    x = draw_int8(np.random.default_rng(9), (1, 9, 7, 3), "random")
    (right,), (wrong,) = run_tflm(static, [x]), run_tflm(dynamic, [x])
    assert not np.array_equal(right, wrong)
    assert_same("static", reference_run(load_model(_write(tmp_path / "s.tflite", static)), x), right)
    with pytest.raises(ModelError, match=r"operators 0 \(SPACE_TO_BATCH_ND\), 2 \(BATCH_TO_SPACE_ND\) converted "
                                         r"with a dynamic batch: tensor 3 \(to_batch1\) stores batch 1 where "
                                         r"operator 0 "
                                         r"gives 4 blocks.*fixed batch of 1"):
        load_model(_write(tmp_path / "d.tflite", dynamic))


ZOO = Path(__file__).resolve().parent / "data" / "models" / "zoo"


def true_batch(path: Path) -> bytes:
    """A zoo model converted with a dynamic batch, with its blocks' tensors storing the batch
    their operators give (bh x bw), as TFLite's interpreter resizes them: the model's meaning,
    which TFLite Micro computes once the stored shapes say it."""
    graph = read_graph(path)
    tensors = [replace(t, signature=None) for t in graph.tensors]
    for op in (op for op in graph.operators if op.op == "SPACE_TO_BATCH_ND"):
        blocks = int(np.prod(constant_value(graph, op.inputs[1])))
        conv = next(o for o in graph.operators if op.outputs[0] in o.inputs)
        for t in (op.outputs[0], conv.outputs[0]):
            tensors[t] = replace(tensors[t], shape=(blocks, *tensors[t].shape[1:]))
    return build_model(tensors, list(graph.operators), list(graph.inputs), list(graph.outputs))


@pytest.mark.parametrize("name", ["dilated_same", "dilated_depthwise"])
def test_the_zoos_dilated_models_are_refused_and_run_with_their_true_batch(tmp_path, name):
    """TensorFlow's converter's own chains (a dynamic batch): refused as they are, since TFLite
    Micro's saved outputs are not the model's (a small share of values agree); with the blocks'
    batch stored, the rewrite equals TFLite Micro on the zoo's inputs."""
    with pytest.raises(ModelError, match="converted with a dynamic batch"):
        load_model(ZOO / f"{name}.tflite")
    data = true_batch(ZOO / f"{name}.tflite")
    model = load_model(_write(tmp_path / f"{name}.tflite", data))
    assert model.graph.absorbed and all(l.shape_dict["dilation_h"] > 1 for l in model.tuned if l.index in
                                        dict(model.graph.absorbed).values())
    saved = np.load(ZOO / f"{name}.npz")
    for x, tflm_saved in zip(saved["input0"], saved["output0"]):
        (want,) = run_tflm(data, [x])
        assert_same(name, reference_run(model, x), want)
        assert (np.asarray(want).reshape(-1) == tflm_saved.reshape(-1)).mean() < 0.5


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("target_name", ["host", "cortex-m55", "cortex-m4"])
@pytest.mark.parametrize("source", ["writer", "zoo"])
def test_a_dilated_network_exports_and_verifies_bit_exact(tmp_path, target_name, source, request):
    """Ours (written), and the converter's dilated_same with its blocks' batch stored."""
    if target_name != "host":
        request.getfixturevalue({"cortex-m55": "m55", "cortex-m4": "m4"}[target_name])  # emulator, Arm compilers
    rng = np.random.default_rng(7)
    data = (dilated_model(rng, NETWORKS["conv-then-dw"]) if source == "writer"
            else true_batch(ZOO / "dilated_same.tflite"))
    path = _write(tmp_path / "dilated.tflite", data)
    target = get_target(target_name)
    export_model(path, target, None, tmp_path / "m")
    outcome = verify_model(tmp_path / "m", target, 3, layers=True)
    assert outcome.ok, (outcome.layer_problem, [i.problem for i in outcome.inferences])


def test_absorbed_copies_cost_nothing_in_the_plan_and_no_c(tmp_path):
    """The copies a dilated convolution absorbed have no step in the module and cost 0 in the
    placement plan, which names the convolution doing their work."""
    from edgetune.model.module import schedule
    from edgetune.model.plan import library_option

    path = _write(tmp_path / "m.tflite", dilated_model(np.random.default_rng(2), NETWORKS["conv-same-zero0"]))
    model = load_model(path)
    assert [step.index for step in schedule(model, "m")] == [1]
    option = library_option(model, model.layers[2], get_target("cortex-m55"), "sram")
    assert option.cycles == 0 and "inside operator 1's dilated convolution" in option.note


def test_model_show_names_the_convolution_doing_the_copies_work(tmp_path):
    from click.testing import CliRunner
    from edgetune.cli import main

    path = _write(tmp_path / "m.tflite", dilated_model(np.random.default_rng(6), NETWORKS["conv-same"]))
    result = CliRunner().invoke(main, ["model", "show", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any("BATCH_TO_SPACE_ND" in line and "in operator 1's dilated convolution" in line for line in lines)
    assert any("CONV_2D" in line and "conv2d_s8 (w0)" in line for line in lines)
    assert "dilation_h=2,dilation_w=2" in result.output
