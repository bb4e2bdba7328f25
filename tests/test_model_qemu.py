"""The four MLPerf Tiny models exported as C modules (no tuning: every layer on its kernel's
default configuration, plus one model on a tiny database of Helium variants), built with the
export's own Make fragment and run whole in QEMU on the M55, the M4 and the A53: every output
bit-exact with TFLite Micro on random inputs and a saturating one (app/model/verify.py). A
module whose weights are wrong is caught, naming the operator."""
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
from edgetune.codegen import KERNELS
from edgetune.codegen.manifest import read_manifest, write_manifest
from edgetune.model import load_model
from edgetune.model.oracle import run_tflm
from edgetune.model.export import export_model
from edgetune.model.module import memory_plan, schedule
from edgetune.model.session import tune_model
from edgetune.model.verify import ModuleFailure, firmware_for, verify_model
from edgetune.session import TuneRequest, tune
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

pytestmark = pytest.mark.qemu
MODELS = Path(__file__).parent / "data" / "models"
MODEL_FILES = ("ds_cnn_kws", "mobilenet_v1_025_vww", "resnet8_cifar10", "fc_autoencoder_ad")
# 10 random inputs (and the saturating one) on the M55 and the A53; the M4 runs 3 to keep the
# file within a few minutes on two cores.
INPUTS = {"cortex-m55": 10, "cortex-a53": 10, "cortex-m4": 3}


@pytest.mark.matrix
@pytest.mark.parametrize("target_name", tuple(INPUTS))
@pytest.mark.parametrize("model_name", MODEL_FILES)
@pytest.mark.one_case
def test_the_model_runs_whole_bit_exact_with_tflite_micro(tmp_path, model_name, target_name):
    target = get_target(target_name)
    export_model(MODELS / f"{model_name}.tflite", target, None, tmp_path / "module")
    outcome = verify_model(tmp_path / "module", target, INPUTS[target_name], seed=16)
    assert outcome.ok, [i.problem for i in outcome.inferences if i.problem]
    assert len(outcome.inferences) == INPUTS[target_name] + 1
    model = load_model(MODELS / f"{model_name}.tflite")
    assert all(i.instructions > model.macs // 8 for i in outcome.inferences)  # the whole model ran, not a stub
    # Every weight and bias is in the module's flash; its RAM is the plan's arena and the I/O.
    weights = sum(b.data.nbytes for layer in model.tuned for b in layer.constants)
    assert outcome.size.flash_bytes >= weights
    assert outcome.size.ram_bytes >= outcome.manifest.model.arena_bytes


def _tiny_db(root: Path, target, model) -> TuningDatabase:
    """One Helium trial per workload (packed weights; the convolutions im2col with the largest
    buffer their space allows): a tuned export with much static scratch, which its layers share."""
    db = TuningDatabase(root / "tiny.db")
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        shape = kernel.parse_shape(dict(w.shape))
        wanted = {"vector": "mve", "layout": "packed", **({"algo": "im2col"} if w.kernel == "conv2d_s8" else {})}
        matching = [c for c in kernel.tuning_space(target, shape) if all(c.as_dict().get(k) == v for k, v in wanted.items())]
        config = (max(matching, key=lambda c: kernel.scratch_bytes(shape, c)) if w.kernel == "conv2d_s8"
                  else matching[0]).as_dict()
        tune(TuneRequest(kernel, target, shape, "random", 1, 1, 0, initial=(config,)), db)
    return db


def test_a_tuned_export_is_bit_exact_layer_by_layer_and_faster(tmp_path):
    m55 = get_target("cortex-m55")
    path = MODELS / "ds_cnn_kws.tflite"
    db = _tiny_db(tmp_path, m55, load_model(path))
    runner = CliRunner()
    result = runner.invoke(main, ["model", "export", str(path), "--target", "cortex-m55", "--db", str(db.path),
                                  "--out", str(tmp_path / "tuned")])
    assert result.exit_code == 0, result.output
    manifest = read_manifest(tmp_path / "tuned")
    assert {l.source for l in manifest.model.layers if l.op in ("CONV_2D", "DEPTHWISE_CONV_2D")} == {"tuned"}
    assert all(k.trial_id > 0 and dict(k.config)["vector"] == "mve" for k in manifest.kernels)
    result = runner.invoke(main, ["model", "verify", str(tmp_path / "tuned"), "--target", "cortex-m55",
                                  "--inputs", "2", "--layers"])
    assert result.exit_code == 0, result.output
    assert "3 inferences bit-exact with TFLite Micro, every operator too" in result.output
    checked = verify_model(tmp_path / "tuned", m55, 1)
    tuned = checked.inferences[0].instructions
    # The variants' scratch is planned into the arena (codegen/scratch.py): beside the arena and
    # the I/O the module keeps one 4-byte pointer per variant with scratch, and the arena is
    # below the tensors' arena plus the largest need (the static area it replaces).
    io = sum(int(np.prod(shape)) for shape in (*manifest.model.input_shapes, *manifest.model.output_shapes))
    static = checked.size.ram_bytes - manifest.model.arena_bytes - io
    header = (tmp_path / "tuned" / "ds_cnn_kws.h").read_text()
    assert int(re.search(r"#define DS_CNN_KWS_SCRATCH_BYTES (\d+)u", header)[1]) == 0
    needs = [KERNELS[k.kernel].render(m55, dict(k.shape), m55_config(k)).scratch_bytes for k in manifest.kernels]
    assert static == 4 * sum(1 for n in needs if n)
    model = load_model(path)
    tensors_only = memory_plan(model, schedule(model, "ds_cnn_kws")).arena_bytes
    assert manifest.model.arena_bytes < tensors_only + max(needs)
    export_model(path, m55, None, tmp_path / "plain")
    plain = verify_model(tmp_path / "plain", m55, 1).inferences[0].instructions
    assert tuned < plain / 2


def m55_config(entry):
    """A manifest kernel entry's configuration, as its kernel's space makes it on the M55."""
    kernel = KERNELS[entry.kernel]
    return kernel.tuning_space(get_target("cortex-m55"), dict(entry.shape)).make(dict(entry.config))


def _break_a_weight(folder: Path, array: str) -> None:
    """Change one weight of the module and re-sign the manifest, as a faulty exporter would."""
    source = folder / "ds_cnn_kws.c"
    text = source.read_text()
    head, body = text.split(f"{array}[", 1)
    values_at = body.index("{\n") + 6
    first = body[values_at:].split(",", 1)[0]
    broken = str(-int(first) if int(first) not in (0, -128) else 77)
    source.write_text(head + f"{array}[" + body[:values_at] + broken + body[values_at + len(first):])
    manifest = read_manifest(folder)
    data = manifest.to_json()
    data["files"][source.name] = hashlib.sha256(source.read_bytes()).hexdigest()
    write_manifest(folder, data)


def test_a_wrong_weight_fails_verify_naming_the_operator(tmp_path):
    folder = tmp_path / "module"
    export_model(MODELS / "ds_cnn_kws.tflite", get_target("cortex-m55"), None, folder)
    _break_a_weight(folder, "ds_cnn_kws_l2_weights")
    result = CliRunner().invoke(main, ["model", "verify", str(folder), "--target", "cortex-m55", "--inputs", "1",
                                       "--layers"])
    assert result.exit_code == 1, result.output
    assert "DIFFERS" in result.output
    assert "operator 2 (CONV_2D)" in result.output


def test_counts_are_identical_run_to_run(tmp_path):
    a53 = get_target("cortex-a53")
    export_model(MODELS / "fc_autoencoder_ad.tflite", a53, None, tmp_path / "m")
    first = [i.instructions for i in verify_model(tmp_path / "m", a53, 2, seed=3).inferences]
    again = [i.instructions for i in verify_model(tmp_path / "m", a53, 2, seed=3).inferences]
    assert first == again
    shutil.rmtree(tmp_path / "m")


def test_after_model_tune_the_export_mixes_tuned_and_default_layers_bit_exact(tmp_path):
    """edgetune's model tuning (app/model/session.py) with a budget too small for every
    workload: the export takes the tuned ones' best trials from the database, the rest run
    their default configuration, and the whole module is TFLite Micro's, layer by layer.
    """
    m55 = get_target("cortex-m55")
    path = MODELS / "ds_cnn_kws.tflite"
    model = load_model(path)
    db = TuningDatabase(tmp_path / "t.db")
    tune_model(model.layers, m55, db, budget=12, round_trials=4, baselines=False)
    result = export_model(path, m55, db, tmp_path / "module")
    sources = [l.source for l in result.rendered.manifest.model.layers if l.source in ("tuned", "default")]
    assert set(sources) == {"tuned", "default"}
    assert 0 < len(result.untuned) < len(model.workloads())
    outcome = verify_model(tmp_path / "module", m55, 2, layers=True)
    assert outcome.ok, (outcome.layer_problem, [i.problem for i in outcome.inferences])


def test_the_firmware_reserves_what_the_module_needs():
    m55 = get_target("cortex-m55")
    fw = m55.firmware
    assert firmware_for(m55, 1000) is m55
    bigger = firmware_for(m55, fw.data_reserved)
    assert bigger.firmware.data_reserved >= fw.data_reserved + fw.stack_size
    assert bigger.firmware.data_reserved % 16384 == 0 and bigger.io_capacity("dtcm") < m55.io_capacity("dtcm")
    with pytest.raises(ModuleFailure, match="do not fit dtcm"):
        firmware_for(m55, m55.region("dtcm").size)


FIRMWARE = Path(__file__).parent / "data" / "user_firmware_m55"


def test_a_user_firmware_runs_the_module_with_its_static_arena_in_dtcm(tmp_path):
    """The module in the user's own firmware (tests/data/user_firmware_m55: its start-up,
    its linker script naming EDGETUNE_DTCM, its Makefile including edgetune_kernels.mk):
    <name>_invoke on the static arena, placed by edgetune_sections.ld in DTCM as the plan
    says, computes TFLite Micro's output."""
    m55 = get_target("cortex-m55")
    path = MODELS / "ds_cnn_kws.tflite"
    module = tmp_path / "module"
    export_model(path, m55, None, module)
    project = tmp_path / "firmware"
    shutil.copytree(FIRMWARE, project)
    graph = load_model(path).graph
    x = np.random.default_rng(7).integers(-128, 128, graph.tensors[graph.inputs[0]].shape, dtype=np.int8)
    (project / "main.c").write_text(
        '#include <stddef.h>\n#include "ds_cnn_kws.h"\n'
        "int user_write_file(const char *, size_t, const void *, size_t);\n"
        f"static const int8_t input[DS_CNN_KWS_INPUT_ELEMENTS] = {{{', '.join(map(str, x.reshape(-1).tolist()))}}};\n"
        "static int8_t output[DS_CNN_KWS_OUTPUT_ELEMENTS];\n"
        "int main(void)\n{\n    if (ds_cnn_kws_invoke(input, output) != 0) return 3;\n"
        '    return user_write_file("out.bin", 7, output, sizeof output) == 0 ? 0 : 4;\n}\n')
    made = subprocess.run(["make", "-C", str(project), f"EXPORT={module}"], capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    run = subprocess.run(["qemu-system-arm", "-M", "mps3-an547", "-nographic", "-monitor", "none", "-serial", "none",
                          "-semihosting-config", "enable=on,target=native", "-kernel", "firmware.elf"],
                         cwd=project, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    (want,) = run_tflm(path.read_bytes(), [x])
    assert np.frombuffer((project / "out.bin").read_bytes(), dtype=np.int8).tolist() == np.asarray(want).reshape(-1).tolist()
    symbols = subprocess.run(["arm-none-eabi-objdump", "-t", str(project / "firmware.elf")], capture_output=True,
                             text=True, check=True).stdout
    arena = next(line for line in symbols.splitlines() if line.endswith(" ds_cnn_kws_arena"))
    address = int(arena.split()[0], 16)
    assert 0x2000_0000 <= address < 0x2008_0000 and ".edgetune.dtcm" in arena and address % 16 == 0, arena
