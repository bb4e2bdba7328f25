"""A model of several inputs and outputs as a C module (docs/model-export.md, "Inputs and
outputs"): the header's per-tensor defines (by index and by name) and the prototypes in the
model's order, the manifest's shapes, a user's program calling `<name>_invoke` with two inputs and two outputs,
export and verify on the M55 bit-exact with TFLite Micro, a difference named by its output,
and the refusals of inputs and outputs the module cannot take (non-int8, an output that is an
input, listed twice or computed by no operator)."""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen.manifest import ModelEntry, read_manifest, write_manifest
from edgetune.model import load_model
from edgetune.model.builder import build_model
from edgetune.model.graph import Tensor, read_graph
from edgetune.model.oracle import run_tflm
from edgetune.model.export import export_model
from edgetune.model.verify import verify_model
from edgetune.targets import get_target

from model_files import chain_model, two_headed_model, write

DS_CNN = Path(__file__).parent / "data" / "models" / "ds_cnn_kws.tflite"


@pytest.fixture(scope="module")
def two_headed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("two")
    path = write(folder, "two_headed.tflite", two_headed_model(np.random.default_rng(3)))
    return path, export_model(path, get_target("host"), None, folder / "module")


def _header(result) -> str:
    return (result.folder / "two_headed.h").read_text()


def test_the_header_describes_every_input_and_output_in_the_models_order(two_headed):
    path, result = two_headed
    header, graph = _header(result), load_model(path).graph
    assert "#define TWO_HEADED_INPUTS 2" in header and "#define TWO_HEADED_OUTPUTS 2" in header
    for kind, tensors in (("INPUT", graph.inputs), ("OUTPUT", graph.outputs)):
        for k, t in enumerate(tensors):
            tensor = graph.tensors[t]
            q = tensor.quantization
            assert f"#define TWO_HEADED_{kind}{k}_ELEMENTS {tensor.elements}\n" in header
            assert f"#define TWO_HEADED_{kind}{k}_TENSOR {t}\n" in header
            assert f"#define TWO_HEADED_{kind}{k}_SCALE {float(q.scales[0])!r}f\n" in header
            assert f"#define TWO_HEADED_{kind}{k}_ZERO_POINT ({q.zero_points[0]})\n" in header
            for d, size in enumerate(tensor.shape):
                assert f"#define TWO_HEADED_{kind}{k}_DIM{d} {size}\n" in header
            assert f'tensor {t} "{tensor.name}"' in header
    # The outputs are listed pooled (tensor 9) first, then sum (8): the model's order, not the tensors'.
    assert [graph.tensors[t].name for t in graph.outputs] == ["pooled", "sum"]
    assert "#define TWO_HEADED_OUTPUT0_ELEMENTS 8\n" in header and "#define TWO_HEADED_OUTPUT1_ELEMENTS 512\n" in header
    # No unindexed defines when there are several: TWO_HEADED_INPUT_ELEMENTS would be ambiguous.
    assert "TWO_HEADED_INPUT_ELEMENTS" not in header and "TWO_HEADED_OUTPUT_SCALE" not in header
    io = "const int8_t *input0, const int8_t *input1, int8_t *output0, int8_t *output1"
    assert f"int two_headed_invoke({io});" in header
    assert f"int two_headed_run(uint8_t *arena, {io});" in header


def test_the_one_input_one_output_api_is_unchanged_and_gains_the_indexed_defines(tmp_path):
    result = export_model(DS_CNN, get_target("host"), None, tmp_path / "kws")
    header = (tmp_path / "kws" / "ds_cnn_kws.h").read_text()
    assert "int ds_cnn_kws_invoke(const int8_t *input, int8_t *output);" in header
    assert "int ds_cnn_kws_run(uint8_t *arena, const int8_t *input, int8_t *output);" in header
    elements = re.search(r"#define DS_CNN_KWS_INPUT_ELEMENTS (\d+)\n", header)[1]
    assert f"#define DS_CNN_KWS_INPUT0_ELEMENTS {elements}\n" in header
    assert "#define DS_CNN_KWS_INPUTS 1\n" in header and "#define DS_CNN_KWS_OUTPUTS 1\n" in header
    m = result.rendered.manifest.model
    assert m.input_shapes == (m.input_shape,) and m.output_shapes == (m.output_shape,)


def test_the_manifest_lists_every_shape_and_reads_a_manifest_without_them(two_headed, tmp_path):
    path, result = two_headed
    m = read_manifest(result.folder).model
    assert m.input_shapes == ((1, 8, 8, 3), (1, 8, 8, 4)) and m.output_shapes == ((1, 1, 1, 8), (1, 8, 8, 8))
    assert m.input_shape == (1, 8, 8, 3) and m.output_shape == (1, 1, 1, 8)
    shutil.copytree(result.folder, tmp_path / "old")
    data = read_manifest(tmp_path / "old").to_json()
    for key in ("input_shapes", "output_shapes"):  # an export of one input and output written before them
        del data["model"][key]
    write_manifest(tmp_path / "old", data)
    old = read_manifest(tmp_path / "old").model
    assert old.input_shapes == ((1, 8, 8, 3),) and old.output_shapes == ((1, 1, 1, 8),)
    data["model"]["input_shapes"] = [[1, 8, 8, 4]]  # not starting with input_shape
    write_manifest(tmp_path / "old", data)
    with pytest.raises(Exception, match="model.input_shapes"):
        read_manifest(tmp_path / "old")
    assert ModelEntry("m", "m.tflite", "0" * 64, (2,), (3,), 16, "", (), ()).input_shapes == ((2,),)


MAIN_C = """#include <stdio.h>
#include "two_headed.h"
static int8_t image[TWO_HEADED_INPUT0_ELEMENTS], state[TWO_HEADED_STATE_ELEMENTS];  /* by index, by name */
static int8_t pooled[TWO_HEADED_POOLED_ELEMENTS], sum[TWO_HEADED_OUTPUT1_ELEMENTS];
int main(void)
{
    if (fread(image, 1, sizeof image, stdin) != sizeof image) return 2;
    if (fread(state, 1, sizeof state, stdin) != sizeof state) return 2;
    if (two_headed_invoke(image, state, pooled, sum) != 0) return 3;
    if (fwrite(pooled, 1, sizeof pooled, stdout) != sizeof pooled) return 4;
    return fwrite(sum, 1, sizeof sum, stdout) == sizeof sum ? 0 : 4;
}
"""


def test_a_program_calls_invoke_with_two_inputs_and_two_outputs_bit_exact(two_headed, tmp_path):
    """A user's program on the host, built with the export's Make fragment and the static arena."""
    if shutil.which("make") is None:
        pytest.fail("make is not installed (scripts/setup.sh installs it)")
    path, result = two_headed
    (tmp_path / "main.c").write_text(MAIN_C)
    (tmp_path / "Makefile").write_text(f"include {result.folder}/edgetune_kernels.mk\n"
                                       "app: main.c $(EDGETUNE_OBJECTS)\n\tcc $(EDGETUNE_INCLUDES) -o $@ $^\n")
    subprocess.run(["make", "-s", "app"], cwd=tmp_path, check=True, capture_output=True)
    rng = np.random.default_rng(8)
    xs = [rng.integers(-128, 128, (1, 8, 8, 3), dtype=np.int8), rng.integers(-128, 128, (1, 8, 8, 4), dtype=np.int8)]
    run = subprocess.run([str(tmp_path / "app")], input=b"".join(x.tobytes() for x in xs), capture_output=True,
                         check=True, timeout=60)
    want = run_tflm(path.read_bytes(), xs, n_outputs=2)
    assert want[0].shape == (1, 1, 1, 8) and len(np.unique(want[1])) > 20  # outputs spread over int8
    assert np.frombuffer(run.stdout, dtype=np.int8).tolist() == [v for w in want for v in w.reshape(-1).tolist()]


def test_verify_on_the_host_checks_both_outputs_and_every_operator(two_headed):
    outcome = verify_model(two_headed[1].folder, get_target("host"), 2, layers=True)
    assert outcome.ok, ([i.problem for i in outcome.inferences], outcome.layer_problem)
    assert outcome.size.ram_bytes >= outcome.manifest.model.arena_bytes + 192 + 256 + 8 + 512


@pytest.mark.qemu
@pytest.mark.parametrize("order", ["pooled-first", "sum-first"])
def test_export_and_verify_on_the_m55_bit_exact_layer_by_layer(tmp_path, order):
    path = write(tmp_path, "two_headed.tflite", two_headed_model(np.random.default_rng(3), order=order))
    export_model(path, get_target("cortex-m55"), None, tmp_path / "m")
    result = CliRunner().invoke(main, ["model", "verify", str(tmp_path / "m"), "--target", "cortex-m55", "--inputs", "4",
                                       "--layers"])
    assert result.exit_code == 0, result.output
    assert "5 inferences bit-exact with TFLite Micro, every operator too" in result.output


@pytest.mark.qemu
def test_a_wrong_output_is_named_by_its_index_and_operator(two_headed, tmp_path):
    """One value of output 0 changed after the pooling writes it: verify names output 0
    (tensor 9) and, with --layers, operator 3."""
    folder = tmp_path / "m"
    export_model(two_headed[0], get_target("cortex-m55"), None, folder)
    source = folder / "two_headed.c"
    text = source.read_text()
    call = re.search(r"two_headed_op3_average_pool_2d\(([^;]*), output0\);", text)
    assert call, text
    source.write_text(text.replace(call[0], call[0] + " output0[0] = (int8_t)(output0[0] ^ 1);"))
    data = read_manifest(folder).to_json()
    data["files"][source.name] = hashlib.sha256(source.read_bytes()).hexdigest()
    write_manifest(folder, data)
    result = CliRunner().invoke(main, ["model", "verify", str(folder), "--target", "cortex-m55", "--inputs", "1",
                                       "--layers"])
    assert result.exit_code == 1, result.output
    assert "random 0 input: output 0 (tensor 9): 1 of 8 values differ from TFLite Micro; first at 0" in result.output
    assert "operator 3 (AVERAGE_POOL_2D), output tensor 9" in result.output


def _refused(tmp_path, data: bytes) -> str:
    path = write(tmp_path, "bad.tflite", data)
    result = CliRunner().invoke(main, ["model", "export", str(path), "--target", "cortex-m55", "--out",
                                       str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    return result.output


@pytest.mark.parametrize("dtypes, message", [
    (("int8", "float32", "int8", "int8"),
     "input 1 (tensor 10, state_float32) is float32, converted by QUANTIZE (operator 0)"),
    (("float32", "int8", "int8", "int8"),
     "input 0 (tensor 10, image_float32) is float32, converted by QUANTIZE (operator 0)"),
    (("int8", "int8", "float32", "int8"),
     "output 0 (tensor 10, pooled_float32) is float32, converted by DEQUANTIZE (operator 4)"),
])
def test_a_non_int8_input_or_output_is_refused_naming_it(tmp_path, dtypes, message):
    output = _refused(tmp_path, two_headed_model(np.random.default_rng(3), dtypes))
    assert message in output
    assert "int8 inputs and outputs" in output


def test_an_int16_output_quantised_inside_the_graph_exports_and_verifies(tmp_path):
    """int8 -> int16 QUANTIZE at an output is the requantisation between a graph's int8 and
    16x8 parts (app/model/ops/sixteen.py): the module writes int16 there, bit-exact."""
    from edgetune.model.export import export_model
    from edgetune.model.verify import verify_model
    from edgetune.targets import get_target

    path = write(tmp_path, "mixed.tflite", two_headed_model(np.random.default_rng(3), ("int8", "int8", "int8", "int16")))
    export_model(path, get_target("host"), None, tmp_path / "module")
    assert "int16_t *output1" in (tmp_path / "module" / "mixed.h").read_text()
    outcome = verify_model(tmp_path / "module", get_target("host"), 2)
    assert outcome.ok, [i.problem for i in outcome.inferences]


@pytest.mark.parametrize("command, options", [(["model", "show"], []), (["model", "tune"], ["--budget", "1", "--db"]),
                                              (["place"], ["--out", "out", "--db"])])
def test_the_other_model_commands_name_a_float_interface_too(tmp_path, command, options):
    """Not 'so this is a float model': the model is int8 inside, converted with a float32 input."""
    path = write(tmp_path, "det.tflite", two_headed_model(np.random.default_rng(3), ("int8", "float32", "int8", "int8")))
    options = [str(tmp_path / "out") if word == "out" else word for word in options]
    options += [str(tmp_path / "t.db")] if options else []
    result = CliRunner().invoke(main, [*command, str(path), *options, "--target", "cortex-m55"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"edgetune: error: {path}: tensor 10 (state_float32) is float32: the model's input 1, converted by QUANTIZE "
        "(operator 0); edgetune runs int8 operators only: convert the model with int8 inputs and outputs (the "
        "converter's inference_input_type and inference_output_type)")
    assert not (tmp_path / "out").exists()


def _graph(tmp_path):
    return read_graph(write(tmp_path, "two_headed.tflite", two_headed_model(np.random.default_rng(3))))


@pytest.mark.parametrize("outputs, inputs, message", [
    ([9, 0], None, "output 1 (tensor 0, image) is also an input of the model"),
    ([9, 9], None, "tensor 9 is listed twice among the model's outputs"),
    ([9, 2], None, "output 1 (tensor 2, image_conv_w) is not computed by any operator the module runs"),
    ([9, 8], [0, 1, 1], "tensor 1 is listed twice among the model's inputs"),
])
def test_outputs_the_module_cannot_write_are_refused_naming_them(tmp_path, outputs, inputs, message):
    graph = _graph(tmp_path)
    data = build_model(graph.tensors, graph.operators, inputs or list(graph.inputs), outputs)
    assert message in _refused(tmp_path, data)


def test_an_unused_input_and_more_tensors_than_the_harness_has_buffers(tmp_path):
    """Three inputs, one of them read by no operator (an extra state input: it stays an
    argument, in its place), and four outputs, two of them the convolutions' outputs the ADD
    reads back: 7 tensors, with the arena and the trace more than the harness's 8 buffers
    (verify passes the inputs in one block and the outputs in another)."""
    graph = _graph(tmp_path)
    extra = Tensor(len(graph.tensors), "unused", (1, 4), "int8", graph.tensors[1].quantization)
    convs = [op.outputs[0] for op in graph.operators if op.op == "CONV_2D"]
    data = build_model([*graph.tensors, extra], graph.operators, [0, len(graph.tensors), 1], [*graph.outputs, *convs])
    path = write(tmp_path, "extra.tflite", data)
    export_model(path, get_target("host"), None, tmp_path / "m")
    source = (tmp_path / "m" / "extra.c").read_text()
    assert "(void)input1; /* no operator reads it */" in source
    assert ("const int8_t *input0, const int8_t *input1, const int8_t *input2, int8_t *output0, int8_t *output1, "
            "int8_t *output2, int8_t *output3)") in source
    assert re.search(r"extra_op2_add\(output2, output3, output1\);", source)  # the ADD reads the outputs back
    outcome = verify_model(tmp_path / "m", get_target("host"), 2, layers=True)
    assert outcome.ok, ([i.problem for i in outcome.inferences], outcome.layer_problem)
    assert len(outcome.inferences) == 3


def test_one_input_beside_two_outputs_is_named_by_kind(tmp_path):
    """chain_model's last and first layer outputs as two outputs: `input` (and its unindexed
    defines) beside `output0` and `output1` (indexed only); bit-exact on the host."""
    graph = read_graph(write(tmp_path, "c.tflite", chain_model(np.random.default_rng(4))))
    first = graph.operators[0].outputs[0]
    path = write(tmp_path, "chain.tflite", build_model(graph.tensors, graph.operators, list(graph.inputs),
                                                       [*graph.outputs, first]))
    export_model(path, get_target("host"), None, tmp_path / "m")
    header = (tmp_path / "m" / "chain.h").read_text()
    assert "int chain_invoke(const int8_t *input, int8_t *output0, int8_t *output1);" in header
    assert "#define CHAIN_INPUT_ELEMENTS 256\n" in header and "#define CHAIN_INPUT0_ELEMENTS 256\n" in header
    assert "#define CHAIN_OUTPUT1_ELEMENTS 512\n" in header and "CHAIN_OUTPUT_ELEMENTS" not in header
    outcome = verify_model(tmp_path / "m", get_target("host"), 1)
    assert outcome.ok, [i.problem for i in outcome.inferences]


def test_the_header_names_each_tensor_by_its_signature_name(tmp_path):
    """Defines by name from the model's signature (what the converter writes), else from the
    tensor's name; none for a name two tensors share or one like the indexed defines."""
    graph = _graph(tmp_path)
    names = ("camera image", "state", "output_1", "state")  # "state" twice: neither gets a define
    path = write(tmp_path, "named.tflite", build_model(graph.tensors, graph.operators, list(graph.inputs),
                                                       list(graph.outputs), io_names=names))
    assert read_graph(path).io_names == tuple(zip((*graph.inputs, *graph.outputs), names))
    export_model(path, get_target("host"), None, tmp_path / "m")
    header = (tmp_path / "m" / "named.h").read_text()
    assert '/* Input 0 (`input0`): tensor 0 "image" (signature name "camera image"), int8 [1][8][8][3]. */' in header
    assert "#define NAMED_CAMERA_IMAGE_INDEX 0 " in header
    assert "#define NAMED_CAMERA_IMAGE_ELEMENTS NAMED_INPUT0_ELEMENTS\n" in header
    assert "#define NAMED_CAMERA_IMAGE_ZERO_POINT NAMED_INPUT0_ZERO_POINT\n" in header
    assert "NAMED_STATE_" not in header and "NAMED_OUTPUT_1_" not in header
    # Without a signature (two_headed_model writes none): the tensors' names.
    export_model(write(tmp_path, "plain.tflite", two_headed_model(np.random.default_rng(3))), get_target("host"), None,
                 tmp_path / "p")
    plain = (tmp_path / "p" / "plain.h").read_text()
    for alias, macro in (("IMAGE", "INPUT0"), ("STATE", "INPUT1"), ("POOLED", "OUTPUT0"), ("SUM", "OUTPUT1")):
        assert f"#define PLAIN_{alias}_ELEMENTS PLAIN_{macro}_ELEMENTS\n" in plain  # from the tensors' names
