"""`model verify --save-vectors DIR` and `--input FILE` (issue 31 item 10): a user's firmware
test gets inputs and TFLite Micro's outputs as files and C arrays, and the oracle runs on an
input of the user's own."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen.model import load_model
from edgetune.model_reference import model_outputs

from model_files import fc_model, write


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vectors")
    model = write(tmp, "fc.tflite", fc_model(np.random.default_rng(21), (1, 24), 8))
    db, out = tmp / "m.db", tmp / "module"
    runner = CliRunner()
    tuned = runner.invoke(main, ["model", "tune", str(model), "--target", "host", "--budget", "2", "--db", str(db),
                                 "--no-check"])
    assert tuned.exit_code == 0, tuned.output
    exported = runner.invoke(main, ["model", "export", str(model), "--target", "host", "--db", str(db), "--out",
                                    str(out)])
    assert exported.exit_code == 0, exported.output
    return model, out


def verify(out, *extra):
    return CliRunner().invoke(main, ["model", "verify", str(out), *extra])


def test_saved_vectors_are_tflite_micros_outputs_as_files_and_compilable_c_arrays(export, tmp_path):
    model_path, out = export
    result = verify(out, "--inputs", "2", "--save-vectors", str(tmp_path / "vec"))
    assert result.exit_code == 0, result.output
    index = json.loads((tmp_path / "vec" / "vectors.json").read_text())["cases"]
    assert [c["label"] for c in index] == ["random 0", "random 1", "saturating"]
    model, data = load_model(model_path), model_path.read_bytes()
    header = (tmp_path / "vec" / "edgetune_vectors.h").read_text()
    for n, case in enumerate(index):
        xs = [np.fromfile(tmp_path / "vec" / i["file"], dtype=np.int8).reshape(i["shape"]) for i in case["inputs"]]
        got = np.fromfile(tmp_path / "vec" / case["outputs"][0]["file"], dtype=np.int8)
        assert np.array_equal(got, np.asarray(model_outputs(model, data, xs)[0]).reshape(-1))
        assert f"et_case{n}_expected0[{got.size}] = {{\n    {', '.join(map(str, got[:16]))}" in header
    test = tmp_path / "t.c"
    test.write_text('#include "edgetune_vectors.h"\nint main(void) { return et_case2_expected0[0] == '
                    'et_case2_expected0[0] && ET_VECTOR_CASES == 3 ? 0 : 1; }\n')
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Werror", "-Wno-unused-const-variable", "-I", str(tmp_path / "vec"),
                    str(test), "-o", str(tmp_path / "t")], check=True)
    assert subprocess.run([str(tmp_path / "t")]).returncode == 0


def test_an_input_file_of_the_users_is_run_and_its_outputs_saved(export, tmp_path):
    _, out = export
    mine = tmp_path / "my_input.bin"
    np.arange(-12, 12, dtype=np.int8).tofile(mine)
    result = verify(out, "--input", str(mine), "--save-vectors", str(tmp_path / "vec"))
    assert result.exit_code == 0, result.output
    assert "my_input.bin:" in result.output and "1 inferences bit-exact" in result.output
    index = json.loads((tmp_path / "vec" / "vectors.json").read_text())["cases"]
    assert [c["label"] for c in index] == ["my_input.bin"]
    assert np.array_equal(np.fromfile(tmp_path / "vec" / "case0_input0.bin", dtype=np.int8), np.arange(-12, 12))


def test_an_input_file_of_the_wrong_size_is_one_line_naming_it(export, tmp_path):
    _, out = export
    wrong = tmp_path / "short.bin"
    wrong.write_bytes(b"\x01" * 5)
    result = verify(out, "--input", str(wrong))
    assert result.exit_code == 2
    assert f"{wrong}: holds 5 int8 values; the model's inputs take 24 int8 values" in result.output
