"""`edgetune model export` (app/model/export.py, app/model/module.py): the module's files,
its header, the manifest with the model, layers without a trial on their kernel's default
configuration, and bad input (one line, exit 2, nothing replaced). The module run in QEMU
against TFLite Micro: tests/test_model_qemu.py."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.codegen.export import ExportError
from edgetune.model.memory_plan import aligned
from edgetune.codegen.manifest import MANIFEST, read_manifest, write_manifest
from edgetune.model import load_model
from edgetune.model.oracle import run_tflm
from edgetune.model.export import export_model
from edgetune.model.verify import verify_model
from edgetune.export import export_best
from edgetune.session import TuneRequest, tune, workload_of
from edgetune.tuner import Outcome, Trial, TuningDatabase
from edgetune.targets import get_target

from model_files import chain_model, write
from stored import stored_db

MODELS = Path(__file__).parent / "data" / "models"
DS_CNN = MODELS / "ds_cnn_kws.tflite"


@pytest.fixture(scope="module")
def ds_cnn_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "kws"
    return export_model(DS_CNN, get_target("cortex-m55"), None, out), out


def test_the_folder_holds_what_the_manifest_lists(ds_cnn_export):
    result, out = ds_cnn_export
    manifest = read_manifest(out)
    listed = {name for name, _ in manifest.files}
    assert listed | {MANIFEST} == {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    for name in ("ds_cnn_kws.h", "ds_cnn_kws.c", "ds_cnn_kws_arena.c", "edgetune_kernels.mk", "edgetune_kernels.cmake",
                 "edgetune_sections.ld", "ds_cnn_kws.tflite", "zephyr/module.yml", "zephyr/CMakeLists.txt",
                 "zephyr/Kconfig"):
        assert name in listed
    assert manifest.model.sha256 == hashlib.sha256(DS_CNN.read_bytes()).hexdigest()
    assert (out / "ds_cnn_kws.tflite").read_bytes() == DS_CNN.read_bytes()


def test_the_header_gives_shapes_quantisation_arena_and_invoke(ds_cnn_export):
    result, out = ds_cnn_export
    header = (out / "ds_cnn_kws.h").read_text()
    graph = load_model(DS_CNN).graph
    x, y = graph.tensors[graph.inputs[0]], graph.tensors[graph.outputs[0]]
    assert "int ds_cnn_kws_invoke(const int8_t *input, int8_t *output);" in header
    assert f"#define DS_CNN_KWS_INPUT_ELEMENTS {x.elements}" in header
    assert f"#define DS_CNN_KWS_OUTPUT_ELEMENTS {y.elements}" in header
    assert f"#define DS_CNN_KWS_INPUT_ZERO_POINT ({x.quantization.zero_points[0]})" in header
    assert f"#define DS_CNN_KWS_OUTPUT_SCALE {float(y.quantization.scales[0])!r}f" in header
    assert f"#define DS_CNN_KWS_ARENA_BYTES {result.rendered.plan.arena_bytes}u" in header
    assert '__attribute__((section(".edgetune.dtcm")))' in header  # the arena's region on the M55


def test_the_module_calls_each_operator_in_order_without_malloc_or_interpreter(ds_cnn_export):
    result, out = ds_cnn_export
    source = (out / "ds_cnn_kws.c").read_text()
    calls = re.findall(r"/\* operator (\d+): (\w+) \*/", source)
    model = load_model(DS_CNN)
    folded = {l.index for l in model.layers if l.op in ("SHAPE", "STRIDED_SLICE", "PACK")}
    assert [int(i) for i, _ in calls] == [l.index for l in model.layers if l.index not in folded]
    assert folded and not any(op in ("SHAPE", "STRIDED_SLICE", "PACK") for _, op in calls)
    for word in ("malloc", "free(", "tflite", "Interpreter"):
        assert word not in source.replace(Path(DS_CNN).name, "")
    assert "static const int8_t ds_cnn_kws_l0_weights[" in source


def test_the_manifest_has_the_layer_table_and_the_plan(ds_cnn_export):
    result, out = ds_cnn_export
    m = read_manifest(out).model
    model = load_model(DS_CNN)
    assert [l.index for l in m.layers] == [l.index for l in model.layers]
    sources = {l.op: l.source for l in m.layers}
    assert sources["CONV_2D"] == "default" and sources["SOFTMAX"] == "library" and sources["SHAPE"] == "folded"
    assert len({l.function for l in m.layers if l.op == "DEPTHWISE_CONV_2D"}) == 1  # four identical layers, one function
    assert m.arena_bytes == aligned(max(p.offset + p.nbytes for p in m.plan))
    assert all(k.chosen_by == "untuned" and k.trial_id == 0 for k in read_manifest(out).kernels)


def test_a_layer_without_a_trial_says_so(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["model", "export", str(DS_CNN), "--target", "cortex-m55", "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert "not tuned: the kernel's default configuration" in result.output
    # TFLite Micro's report for the same model (tests/data/models/README.md records 24,816).
    assert "TFLite Micro's arena for this model: 24,816 bytes" in result.output


def test_an_edited_manifest_is_refused_on_reading(ds_cnn_export, tmp_path):
    _, out = ds_cnn_export
    data = json.loads((out / MANIFEST).read_text())
    data["model"]["name"] = "x; rm -rf /"
    write_manifest(tmp_path, data)
    with pytest.raises(Exception, match="model.name"):
        read_manifest(tmp_path)


@pytest.mark.parametrize("args, message", [
    (["model", "export", "missing.tflite", "--target", "cortex-m55", "--out", "{tmp}/a"], "missing.tflite: no such file"),
    (["model", "export", "{tmp}/junk.tflite", "--target", "cortex-m55", "--out", "{tmp}/a"], "not a TFLite model"),
    (["model", "export", str(DS_CNN), "--target", "cortex-m55", "--out", "{tmp}/a", "--name", "9bad"], "--name '9bad'"),
    (["model", "export", str(DS_CNN), "--target", "cortex-m55", "--out", "{tmp}/a", "--db", "{tmp}/none.db"], "none.db: no such database"),
    (["model", "export", str(DS_CNN), "--target", "cortex-m55", "--out", "{tmp}/a", "--db", "{tmp}/mine"],
     "mine: a folder, not a database file"),
    (["model", "export", str(DS_CNN), "--target", "cortex-m55", "--out", "{tmp}/mine"], "not an earlier export"),
    (["model", "export", str(DS_CNN), "--target", "host", "--out", "{tmp}/a", "--objective", "cycles"],
     "objective 'cycles' is not measured on host"),
    (["model", "export", str(DS_CNN), "--target", "no-such-board", "--out", "{tmp}/a"], "no-such-board"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "junk.tflite").write_bytes(b"\x00" * 64)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my own file")
    result = CliRunner().invoke(main, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert (tmp_path / "mine" / "notes.txt").read_text() == "my own file"
    assert not (tmp_path / "a").exists()


def _copy(out: Path, to: Path) -> Path:
    shutil.copytree(out, to)
    return to


def _verify(folder, target="cortex-m55"):
    return CliRunner().invoke(main, ["model", "verify", str(folder), "--target", target, "--inputs", "1"])


def test_verify_refuses_a_missing_folder(tmp_path):
    result = _verify(tmp_path / "nothing")
    assert result.exit_code == 2 and "no such export folder" in result.output


def test_verify_given_the_model_file_instead_of_the_folder_says_so(tmp_path):
    model = tmp_path / "kws.tflite"
    model.write_bytes(b"TFL3")
    result = _verify(model)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == (f"edgetune: error: {model}: not a folder; verify takes the "
                                                      "folder the export wrote (its --out)")


def test_verify_refuses_an_export_for_another_target(ds_cnn_export):
    _, out = ds_cnn_export
    result = _verify(out, "cortex-a53")
    assert result.exit_code == 2 and "exported for target cortex-m55, not cortex-a53" in result.output


def test_verify_refuses_an_edited_file(ds_cnn_export, tmp_path):
    folder = _copy(ds_cnn_export[1], tmp_path / "edited")
    source = folder / "ds_cnn_kws.c"
    source.write_text(source.read_text().replace("return 0;\n}", "return 1;\n}"))
    result = _verify(folder)
    assert result.exit_code == 2 and "ds_cnn_kws.c: edited after export" in result.output


def test_verify_refuses_an_edited_model_and_a_missing_file(ds_cnn_export, tmp_path):
    folder = _copy(ds_cnn_export[1], tmp_path / "model")
    (folder / "ds_cnn_kws.tflite").write_bytes(b"TFL3" * 10)
    assert "ds_cnn_kws.tflite: edited after export" in _verify(folder).output
    (folder / "ds_cnn_kws.tflite").unlink()
    result = _verify(folder)
    assert result.exit_code == 2 and "listed in the manifest but missing" in result.output


def test_verify_refuses_an_edited_manifest(ds_cnn_export, tmp_path):
    folder = _copy(ds_cnn_export[1], tmp_path / "manifest")
    data = json.loads((folder / MANIFEST).read_text())
    data["model"]["arena_bytes"] = 16
    (folder / MANIFEST).write_text(json.dumps(data))
    result = _verify(folder)
    assert result.exit_code == 2 and "checksum mismatch" in result.output


def test_verify_refuses_a_kernel_export(ds_cnn_export, tmp_path):
    folder = _copy(ds_cnn_export[1], tmp_path / "kernels")
    data = json.loads((folder / MANIFEST).read_text())
    del data["model"]
    write_manifest(folder, data)
    result = _verify(folder)
    assert result.exit_code == 2 and "not a model export" in result.output


def test_verify_takes_the_target_the_export_names(ds_cnn_export, tmp_path):
    """Without --target, model verify checks the export for the target its manifest names
    (as `edgetune verify` does): here it gets as far as the edited file."""
    folder = _copy(ds_cnn_export[1], tmp_path / "edited")
    source = folder / "ds_cnn_kws.c"
    source.write_text(source.read_text() + "\n")
    result = CliRunner().invoke(main, ["model", "verify", str(folder), "--inputs", "1"])
    assert result.exit_code == 2 and "ds_cnn_kws.c: edited after export" in result.output, result.output
    data = json.loads((folder / MANIFEST).read_text())
    data["target"] = "my-board"
    write_manifest(folder, data)
    result = CliRunner().invoke(main, ["model", "verify", str(folder)])
    assert result.exit_code == 2 and "'my-board', which is not a shipped target" in result.output, result.output


def test_the_kernel_verify_points_a_model_export_to_model_verify(ds_cnn_export):
    result = CliRunner().invoke(main, ["verify", str(ds_cnn_export[1]), "--target", "cortex-m55"])
    assert result.exit_code == 2 and "check it with edgetune model verify" in result.output


def test_the_module_runs_natively_on_the_host_bit_exact(tmp_path):
    """The host target: the module built with the host's compiler and run as a process."""
    host = get_target("host")
    export_model(DS_CNN, host, None, tmp_path / "m")
    outcome = verify_model(tmp_path / "m", host, 2)
    assert outcome.ok, [i.problem for i in outcome.inferences]
    assert read_manifest(tmp_path / "m").model.arena_region == ""  # the process's memory


MAIN_C = """#include <stdio.h>
#include "ds_cnn_kws.h"
static int8_t input[DS_CNN_KWS_INPUT_ELEMENTS], output[DS_CNN_KWS_OUTPUT_ELEMENTS];
int main(void)
{
    if (fread(input, 1, sizeof input, stdin) != sizeof input) return 2;
    if (ds_cnn_kws_invoke(input, output) != 0) return 3;
    return fwrite(output, 1, sizeof output, stdout) == sizeof output ? 0 : 4;
}
"""


@pytest.mark.parametrize("build", ["make", "cmake"])
def test_a_firmware_built_with_the_fragments_calls_invoke_bit_exact(tmp_path, build):
    """A user's program on the host: the module through edgetune_kernels.mk or .cmake, the
    static arena and <name>_invoke (which model verify leaves out), against TFLite Micro."""
    if shutil.which(build) is None:
        pytest.fail(f"{build} is not installed (scripts/setup.sh installs it)")
    module = tmp_path / "module"
    export_model(DS_CNN, get_target("host"), None, module)
    app = tmp_path / "app"
    app.mkdir()
    (app / "main.c").write_text(MAIN_C)
    if build == "make":
        (app / "Makefile").write_text(f"include {module}/edgetune_kernels.mk\n"
                                      "app: main.c $(EDGETUNE_OBJECTS)\n\tcc $(EDGETUNE_INCLUDES) -o $@ $^\n")
        subprocess.run(["make", "-s", "app"], cwd=app, check=True, capture_output=True)
        program = app / "app"
    else:
        (app / "CMakeLists.txt").write_text(f"cmake_minimum_required(VERSION 3.18)\nproject(app C)\n"
                                            f"include({module}/edgetune_kernels.cmake)\nadd_executable(app main.c)\n"
                                            "edgetune_kernels_add(app)\n")
        subprocess.run(["cmake", "-S", ".", "-B", "build"], cwd=app, check=True, capture_output=True)
        subprocess.run(["cmake", "--build", "build"], cwd=app, check=True, capture_output=True)
        program = app / "build" / "app"
    graph = load_model(DS_CNN).graph
    x = np.random.default_rng(5).integers(-128, 128, graph.tensors[graph.inputs[0]].shape, dtype=np.int8)
    run = subprocess.run([str(program)], input=x.tobytes(), capture_output=True, check=True, timeout=60)
    (want,) = run_tflm(DS_CNN.read_bytes(), [x])
    assert np.frombuffer(run.stdout, dtype=np.int8).tolist() == np.asarray(want).reshape(-1).tolist()


def test_a_model_too_large_for_the_board_is_refused(tmp_path):
    """A board whose buffer regions hold less than the model's activations: one line, exit 2."""
    text = (Path(__file__).parent.parent / "targets" / "boards" / "cortex-m55.toml").read_text()
    text = text.replace('name = "cortex-m55"', 'name = "tiny-m55"', 1)
    text = text.replace("size = 0x0040_0000           # 4 MiB", "size = 0x0000_1000", 1)  # SRAM2: 4 KiB
    text = text.replace("size = 0x0008_0000           # 512 KiB\naccess = \"rw\"", "size = 0x0001_1000\naccess = \"rw\"", 1)
    board = tmp_path / "tiny-m55.toml"
    board.write_text(text)
    result = CliRunner().invoke(main, ["model", "export", str(DS_CNN), "--target", str(board), "--out",
                                       str(tmp_path / "m")])
    assert result.exit_code == 2, result.output
    assert "ds_cnn_kws.tflite" in result.output and "no memory of tiny-m55 holds them" in result.output
    assert not (tmp_path / "m").exists()


def test_a_manifest_naming_a_model_outside_the_folder_is_refused(ds_cnn_export, tmp_path):
    data = json.loads((ds_cnn_export[1] / MANIFEST).read_text())
    data["model"]["file"] = "../../etc/passwd.tflite"
    write_manifest(tmp_path, data)  # re-signed: the checksum only catches accidents
    with pytest.raises(Exception, match="model.file"):
        read_manifest(tmp_path)


def test_json_output_of_export_and_verify(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["model", "export", str(DS_CNN), "--target", "host", "--out", str(tmp_path / "m"),
                                  "--name", "kws", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert data["name"] == "kws" and data["tflm_arena_bytes"] == 24816 and data["arena_bytes"] == 16000
    assert len(data["untuned"]) == len(load_model(DS_CNN).workloads())
    assert (tmp_path / "m" / "kws.h").is_file() and (tmp_path / "m" / "ds_cnn_kws.tflite").is_file()
    result = runner.invoke(main, ["model", "verify", str(tmp_path / "m"), "--target", "host", "--inputs", "1", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert data["ok"] and data["problems"] == [] and len(data["inferences"]) == 2
    assert data["size"]["ram_bytes"] >= 16000 and data["size"]["flash_bytes"] > data["size"]["code_bytes"]


def test_export_and_verify_say_what_their_tables_are(tmp_path):
    """Each command's table opens with a line saying which command's it is and for what: in
    the quick start's output, export's operator table and verify's inferences follow tune's."""
    runner = CliRunner()
    result = runner.invoke(main, ["model", "export", str(DS_CNN), "--target", "host", "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "ds_cnn_kws for host: the operators edgetune's kernels run, and their functions:"
    result = runner.invoke(main, ["model", "verify", str(tmp_path / "m"), "--inputs", "1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"{tmp_path / 'm'} on host: whole inferences, each output against the reference:", lines
    assert lines[1].startswith("  random 0: ") and lines[2].startswith("  saturating: ")


def test_a_model_export_never_replaces_a_kernel_export(tmp_path):
    """`edgetune export --out X` and `edgetune model export --out X` are easily given the
    same folder: each refuses to replace the other's export, and the folder stays as it was."""
    kernels = tmp_path / "kernels"
    result = CliRunner().invoke(main, ["export", "--target", "host", "--db", str(stored_db(tmp_path)),
                                       "--out", str(kernels)])
    assert result.exit_code == 0, result.output
    manifest = (kernels / MANIFEST).read_text()
    files = sorted(p.name for p in kernels.iterdir())
    result = CliRunner().invoke(main, ["model", "export", str(DS_CNN), "--target", "cortex-m55", "--out", str(kernels)])
    assert result.exit_code == 2, result.output
    assert "holds a kernel export" in result.output and str(kernels) in result.output
    assert "Traceback" not in result.output
    assert (kernels / MANIFEST).read_text() == manifest
    assert sorted(p.name for p in kernels.iterdir()) == files


def test_a_kernel_export_never_replaces_a_model_export(ds_cnn_export, tmp_path):
    out = _copy(ds_cnn_export[1], tmp_path / "kws")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    kernel, target = get_kernel("matmul_s8"), get_target("host")
    db = TuningDatabase(tmp_path / "t.db")
    tune(TuneRequest(kernel, target, kernel.parse_shape("m=4,n=4,k=8"), "random", 2, 2, 1), db)
    with pytest.raises(ExportError, match="holds a model export"):
        export_best(db, target, out)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # An earlier export of the same kind is replaced as before.
    model_again = export_model(DS_CNN, get_target("cortex-m55"), None, out)
    assert model_again is not None and read_manifest(out).model is not None


def test_a_re_export_never_deletes_files_added_to_the_earlier_export(ds_cnn_export, tmp_path):
    """An export replaces its folder whole: an earlier export holding a file of the user's
    (notes, place's plan.json) is refused, naming the file, and left as it was."""
    out = _copy(ds_cnn_export[1], tmp_path / "kws")
    (out / "npu").mkdir()
    (out / "npu" / "plan.json").write_text("{}")
    (out / "NOTES.txt").write_text("my notes")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    result = CliRunner().invoke(main, ["model", "export", str(DS_CNN), "--target", "cortex-m55", "--out", str(out)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"edgetune: error: {out}: holds NOTES.txt and 1 other file that the earlier export's manifest.json does not "
        "list; an export replaces its folder whole: move them out, or choose another folder")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    (out / "NOTES.txt").unlink()
    shutil.rmtree(out / "npu")
    stale = out / f"{read_manifest(out).model.name}_op99_add.c"  # a stale source of an earlier export: replaced
    stale.write_text("/* a source of an earlier export */\n")
    built = out / "edgetune-build" / "obj" / "ds_cnn_kws.o"  # make run in the folder (the fragment's default)
    built.parent.mkdir(parents=True)
    built.write_bytes(b"\x7fELF")
    assert export_model(DS_CNN, get_target("cortex-m55"), None, out) is not None
    assert not stale.exists() and not built.exists()


def test_a_layer_whose_trials_all_break_the_constraint_says_so(tmp_path):
    """Not 'no trial in the database' alone: its trials are there, none within the bound."""
    path = write(tmp_path, "chain.tflite", chain_model(np.random.default_rng(3)))
    target, model = get_target("host"), load_model(path)
    db = TuningDatabase(tmp_path / "t.db")
    first = model.workloads()[0]
    kernel = get_kernel(first.kernel)
    shape = kernel.parse_shape(dict(first.shape))
    space = kernel.tuning_space(target, shape)
    for n in range(2):
        db.record(workload_of(kernel, target, shape),
                  Trial(space.config_at(int(space.legal_indices()[n])), Outcome.OK, {"time_ns": 100 + n, "code_bytes": 500}),
                  "random", 0)
    result = CliRunner().invoke(main, ["model", "export", str(path), "--target", "host", "--db", str(tmp_path / "t.db"),
                                       "--constraint", "code_bytes<=10", "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert (f"  no trial in {tmp_path / 't.db'} for {first.kernel} {first.shape_text} within code_bytes<=10 (of its 2 "
            "trials): exported with the kernel's default configuration") in result.output
