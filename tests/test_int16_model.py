"""A whole 16x8 keyword-spotting model (DS-CNN's structure, reduced: tests/int16_models.py)
through export and `model verify`: bit for bit with TFLite Micro on the host and on the M55,
layer by layer; with an int16 interface, and with an int8 one QUANTIZEd to and from the
16x8 part inside the graph; tuned layers keep it exact. Its C module takes int16 pointers."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetune.model import load_model
from edgetune.model.export import export_model
from edgetune.model.session import tune_model
from edgetune.model.verify import verify_model
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

from int16_models import kws16_model


def _model(tmp_path, int8_interface: bool):
    path = tmp_path / f"kws16_{'int8' if int8_interface else 'int16'}.tflite"
    path.write_bytes(kws16_model(np.random.default_rng(4), int8_interface=int8_interface))
    return path


def test_the_model_reads_as_16x8_layers_and_library_operators(tmp_path):
    model = load_model(_model(tmp_path, True))
    kinds = [(layer.op, layer.kernel) for layer in model.layers]
    assert kinds == [("QUANTIZE", None), ("CONV_2D", "conv2d_s16"), ("DEPTHWISE_CONV_2D", "dwconv2d_s16"),
                     ("CONV_2D", "conv2d_s16"), ("AVERAGE_POOL_2D", None), ("RESHAPE", None),
                     ("FULLY_CONNECTED", "conv2d_s16"), ("SOFTMAX", None), ("QUANTIZE", None)]


def test_the_export_takes_int16_pointers(tmp_path):
    export_model(_model(tmp_path, False), get_target("host"), None, tmp_path / "module")
    header = (tmp_path / "module" / "kws16_int16.h").read_text()
    assert "int kws16_int16_run(uint8_t *arena, const int16_t *input, int16_t *output);" in header
    assert "int16 [1][10][6][1]" in header


@pytest.mark.parametrize("int8_interface", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_the_model_verifies_on_the_host_layer_by_layer(tmp_path, int8_interface):
    host = get_target("host")
    export_model(_model(tmp_path, int8_interface), host, None, tmp_path / "module")
    outcome = verify_model(tmp_path / "module", host, 1, layers=True, save_to=tmp_path / "vectors")
    assert outcome.ok, outcome.layer_problem or [i.problem for i in outcome.inferences]
    assert [i.label for i in outcome.inferences] == ["random 0", "saturating"]
    kind = "int8" if int8_interface else "int16"  # the test vectors keep the interface's type
    header = (tmp_path / "vectors" / "edgetune_vectors.h").read_text()
    assert f"static const {kind}_t et_case0_input0[60]" in header
    assert (tmp_path / "vectors" / "case0_input0.bin").stat().st_size == 60 * np.dtype(kind).itemsize


@pytest.mark.slow
@pytest.mark.parametrize("int8_interface", [False, True])
def test_the_model_verifies_on_the_m55_layer_by_layer(tmp_path, int8_interface):
    m55 = get_target("cortex-m55")
    export_model(_model(tmp_path, int8_interface), m55, None, tmp_path / "module")
    outcome = verify_model(tmp_path / "module", m55, 3, layers=True)
    assert outcome.ok, outcome.layer_problem or [i.problem for i in outcome.inferences]
    assert all(i.instructions > 0 for i in outcome.inferences)


@pytest.mark.slow
def test_a_tuned_model_stays_exact_and_runs_faster_on_the_m55(tmp_path):
    m55 = get_target("cortex-m55")
    path = _model(tmp_path, True)
    export_model(path, m55, None, tmp_path / "plain")
    plain = verify_model(tmp_path / "plain", m55, 1).inferences[0].instructions
    db = TuningDatabase(tmp_path / "db.sqlite")
    tune_model(load_model(path).layers, m55, db, budget=16, seed=1)
    export_model(path, m55, db, tmp_path / "tuned")
    tuned = verify_model(tmp_path / "tuned", m55, 2, layers=True)
    assert tuned.ok, tuned.layer_problem or [i.problem for i in tuned.inferences]
    assert tuned.inferences[0].instructions < plain


ZOO_KWS = Path(__file__).parent / "data" / "models" / "zoo" / "kws_int16x8.tflite"


def _zoo_inputs(tmp_path) -> list[Path]:
    """The zoo's saved inputs of kws_int16x8 (three random, the extremes, zeros) as .npy files."""
    saved = np.load(ZOO_KWS.with_suffix(".npz"))
    files = []
    for k, x in enumerate(saved["input0"]):
        files.append(tmp_path / f"case{k}.npy")
        np.save(files[-1], x.reshape(-1))
    return files


def test_the_zoos_16x8_kws_model_reads_as_tuned_16x8_layers():
    model = load_model(ZOO_KWS)
    assert [layer.kernel for layer in model.layers if layer.kernel] == ["conv2d_s16", "dwconv2d_s16", "conv2d_s16",
                                                                         "dwconv2d_s16", "conv2d_s16", "conv2d_s16"]
    assert {layer.dtype for layer in model.tuned} == {"int16"}


@pytest.mark.slow
@pytest.mark.parametrize("target_name", ["host", "cortex-m55", "cortex-m4"])
def test_the_zoos_16x8_kws_model_verifies_bit_exact(tmp_path, target_name):
    target = get_target(target_name)
    export_model(ZOO_KWS, target, None, tmp_path / "module")
    outcome = verify_model(tmp_path / "module", target, layers=True, input_files=_zoo_inputs(tmp_path))
    assert outcome.ok, outcome.layer_problem or [i.problem for i in outcome.inferences]
    assert len(outcome.inferences) == 5


def test_an_int16_operator_the_library_lacks_is_refused_at_export_in_one_line(tmp_path):
    """HARD_SWISH has no int16 form yet: the export names the operator and its int16 tensor, exit 2."""
    from click.testing import CliRunner

    from edgetune.cli import main
    from edgetune.model.builder import build_model
    from edgetune.model.graph import Operator

    from int16_models import int16_tensor

    tensors = [int16_tensor(0, (1, 4, 4, 2), 0.001, "x"), int16_tensor(1, (1, 4, 4, 2), 0.001, "swished")]
    path = tmp_path / "swish16.tflite"
    path.write_bytes(build_model(tensors, [Operator(0, "HARD_SWISH", (0,), (1,))], [0], [1]))
    result = CliRunner().invoke(main, ["model", "export", str(path), "--target", "host", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "operator 0 (HARD_SWISH)" in result.output and "is int16" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
