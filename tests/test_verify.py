"""`edgetune verify` on exports made here: passes when nothing changed, exit 1 naming the
kernel after its arithmetic is corrupted or it is replaced by a slower variant, exit 2 on a
damaged manifest; the documented CI jobs run for real; --from-export re-tunes an export."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from edgetune.cli import main

pytestmark = pytest.mark.qemu
REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs" / "ci"
SHAPES = ("m=5,n=13,k=7", "m=8,n=16,k=16")


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tuning database and an export of two matmul_s8 workloads on the cortex-m55."""
    root = tmp_path_factory.mktemp("verify")
    db = root / "t.db"
    for shape in SHAPES:
        # One variant per image: the search then takes the path whose winners the tests below
        # edit by name (their requantisation code); a batched search may pick other variants.
        code, out = cli("tune", "matmul_s8", "--target", "cortex-m55", "--shape", shape, "--budget", 5, "--db", db,
                        "--batch", 1)
        assert code == 0, out
    code, out = cli("export", "--target", "cortex-m55", "--out", root / "export", "--db", db)
    assert code == 0, out
    return root


@pytest.fixture
def export_copy(exported, tmp_path):
    folder = tmp_path / "export"
    shutil.copytree(exported / "export", folder)
    return folder


def verify_json(folder, *extra):
    code, out = cli("verify", folder, "--target", "cortex-m55", "--json", *extra)
    return code, (json.loads(out) if code in (0, 1) else out)


@pytest.mark.smoke
def test_fresh_export_passes_with_zero_tolerance(export_copy, exported):
    code, report = verify_json(export_copy, "--db", exported / "t.db")
    assert code == 0, report
    assert report["ok"] and report["tolerance_pct"] == 0
    for kernel in report["kernels"]:
        assert kernel["measured"] == kernel["recorded"] > 0


def test_corrupted_arithmetic_fails_naming_the_kernel(export_copy):
    manifest = json.loads((export_copy / "manifest.json").read_text())
    victim = manifest["kernels"][0]
    source = export_copy / victim["source"]
    text = source.read_text()
    # Off-by-one in the output zero point: the kind of slip a hand edit makes.
    corrupted = text.replace("vqaddq_s32(x, out_zero)", "vqaddq_s32(x, vaddq_n_s32(out_zero, 1))")
    corrupted = corrupted.replace("y = (int64_t)x + out_zero;", "y = (int64_t)x + out_zero + 1;")
    assert corrupted != text
    source.write_text(corrupted)
    code, report = verify_json(export_copy, "--seed", 1)
    assert code == 1
    failing = {k["function"]: k for k in report["kernels"] if not k["ok"]}
    assert set(failing) == {victim["function"]}
    assert any("wrong answer" in p for p in failing[victim["function"]]["problems"])
    code, out = cli("verify", export_copy, "--target", "cortex-m55")
    assert code == 1 and victim["function"] in out.splitlines()[-1]


def test_slower_variant_fails_naming_the_kernel(export_copy, exported):
    manifest = json.loads((export_copy / "manifest.json").read_text())
    victim = manifest["kernels"][1]
    # A correct but slower variant of the same kernel: the plain triple loop.
    from edgetune.codegen import get_kernel
    from edgetune.targets import get_target

    kernel = get_kernel("matmul_s8")
    shape = kernel.parse_shape(victim["shape"])
    naive = kernel.render_naive(get_target("cortex-m55"), shape, "gcc", ("-O2",))
    (export_copy / victim["source"]).write_text(naive.source.replace('#include "kernel.h"', '#include "edgetune_kernels.h"'))
    code, report = verify_json(export_copy)
    assert code == 1
    bad = [k for k in report["kernels"] if not k["ok"]]
    assert [k["function"] for k in bad] == [victim["function"]]
    assert any(p.startswith("slower:") for p in bad[0]["problems"])
    assert bad[0]["measured"] > bad[0]["recorded"]


def _slowed_with_its_manifest_rewritten(folder: Path) -> dict:
    """The issue-27 forgery: a kernel slowed (a busy loop at its start, still correct), its
    exported_value raised to the slow count, the file checksums and manifest_sha256
    recomputed: every check of the folder alone holds. The victim's manifest entry."""
    from edgetune.codegen.manifest import write_manifest

    manifest = json.loads((folder / "manifest.json").read_text())
    victim = manifest["kernels"][1]
    source = folder / victim["source"]
    text = source.read_text()
    body = text.index("{", text.index(victim["function"] + "(")) + 1
    source.write_text(text[:body] + "\n    for (volatile int spin = 0; spin < 64; spin++) { }" + text[body:])
    code, report = verify_json(folder)
    slow = next(k for k in report["kernels"] if k["function"] == victim["function"])["measured"]
    assert code == 1 and slow > victim["exported_value"]
    victim["exported_value"] = slow
    victim["exported_values"][victim["objective"]] = slow
    manifest["files"][victim["source"]] = hashlib.sha256((folder / victim["source"]).read_bytes()).hexdigest()
    write_manifest(folder, manifest)  # recomputes manifest_sha256, as anyone can
    return victim


def test_a_slowed_kernel_with_a_rewritten_manifest_fails_against_the_database(export_copy, exported, tmp_path):
    victim = _slowed_with_its_manifest_rewritten(export_copy)
    code, report = verify_json(export_copy)
    assert code == 0, report  # the folder alone cannot tell: its checksum guards against accidents only
    code, report = verify_json(export_copy, "--db", exported / "t.db")
    assert code == 1, report
    bad = [k for k in report["kernels"] if not k["ok"]]
    assert [k["function"] for k in bad] == [victim["function"]]
    assert any(p.startswith("slower than the database's best") for p in bad[0]["problems"]), bad
    code, out = cli("verify", export_copy, "--target", "cortex-m55", "--db", exported / "t.db")
    assert code == 1 and victim["function"] in out.splitlines()[-1]


def test_verify_with_a_database_that_holds_no_trials_of_a_kernel_fails_naming_it(export_copy, tmp_path):
    from edgetune.tuner import TuningDatabase

    TuningDatabase(tmp_path / "empty.db").close()
    code, report = verify_json(export_copy, "--db", tmp_path / "empty.db")
    assert code == 1 and not any(k["ok"] for k in report["kernels"])
    assert all(any("holds no trials" in p for p in k["problems"]) for k in report["kernels"])


@pytest.mark.parametrize("damage", ["edit_value", "truncate", "delete", "wrong_target"])
def test_damaged_manifest_exits_2_naming_it(export_copy, damage):
    path = export_copy / "manifest.json"
    data = json.loads(path.read_text())
    if damage == "edit_value":
        data["kernels"][0]["exported_value"] = 1  # a hand edit to make a regression pass
        path.write_text(json.dumps(data))
    elif damage == "truncate":
        path.write_text(path.read_text()[:100])
    elif damage == "delete":
        path.unlink()
    code, out = cli("verify", export_copy, "--target", "host" if damage == "wrong_target" else "cortex-m55")
    assert code == 2
    assert len(out.strip().splitlines()) == 1
    assert "manifest.json" in out or "cortex-m55" in out


def test_missing_folder_exits_2(tmp_path):
    code, out = cli("verify", tmp_path / "nope", "--target", "cortex-m55")
    assert code == 2 and "nope" in out


def test_from_export_retunes_the_export_workloads_seeded_with_their_best(export_copy, tmp_path):
    db = tmp_path / "new.db"  # e.g. after a compiler upgrade: nothing measured yet
    code, out = cli("tune", "--from-export", export_copy, "--target", "cortex-m55", "--budget", 3, "--db", db, "--json")
    assert code == 0, out
    summaries = json.loads(out)
    manifest = json.loads((export_copy / "manifest.json").read_text())
    assert [s["shape"] for s in summaries] == [m["shape"] for m in manifest["kernels"]]
    from edgetune.tuner import TuningDatabase

    stored = TuningDatabase(db)
    for workload, entry in zip(stored.workloads("cortex-m55"), manifest["kernels"]):
        first = stored.records(workload)[0].trial
        assert first.config.as_dict() == entry["config"]  # the old best is measured first
    assert all(s["trials"] == 3 for s in summaries)


def _sudo_shim(tmp_path) -> dict:
    """The documented jobs call sudo (GitHub runners are not root); CI here runs as root,
    where Debian may have no sudo at all."""
    env = dict(os.environ)
    if shutil.which("sudo") is None:
        shim = tmp_path / "bin"
        shim.mkdir()
        (shim / "sudo").write_text('#!/bin/sh\nexec env "$@"\n')  # sudo accepts VAR=value too
        (shim / "sudo").chmod(stat.S_IRWXU)
        env["PATH"] = f"{shim}:{env['PATH']}"
    return env


def _run_job(commands, env, cwd):
    for command in commands:
        proc = subprocess.run(["bash", "-eo", "pipefail", "-c", command], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            return proc
    return proc


@pytest.fixture(scope="module")
def job_env(exported, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("job")
    env = _sudo_shim(tmp)
    env.update(EDGETUNE_PIP_SPEC=str(REPO), EDGETUNE_TARGET="cortex-m55", PIP_DISABLE_PIP_VERSION_CHECK="1")
    # The job runs in the firmware repository's checkout; the export lives inside it.
    shutil.copytree(exported / "export", tmp / "firmware" / "edgetune")
    env["EDGETUNE_EXPORT"] = "firmware/edgetune"
    return env, tmp


@pytest.mark.slow  # 32 s, a documented job run whole (the GitLab one below too)
def test_documented_github_actions_job_runs_verify(job_env):
    env, checkout = job_env
    workflow = yaml.safe_load((DOCS / "github-actions-verify.yml").read_text())
    job = workflow["jobs"]["verify-kernels"]
    assert job["env"]["EDGETUNE_TARGET"] == "cortex-m55"
    commands = [step["run"] for step in job["steps"] if "run" in step]
    proc = _run_job(commands, env, checkout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 of 2 kernels hold" in proc.stdout


@pytest.mark.slow  # 31 s, a documented job run whole; the verify tests above check its steps by default
def test_documented_gitlab_job_runs_verify_and_fails_on_a_regression(job_env):
    env, checkout = job_env
    job = yaml.safe_load((DOCS / "gitlab-ci-verify.yml").read_text())["verify-kernels"]
    proc = _run_job(job["script"], env, checkout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The same job must turn red when a kernel regresses.
    manifest = json.loads((checkout / "firmware/edgetune/manifest.json").read_text())
    source = checkout / "firmware/edgetune" / manifest["kernels"][0]["source"]
    source.write_text(source.read_text().replace("y = (int64_t)x + out_zero;", "y = (int64_t)x + out_zero - 1;")
                      .replace("vqaddq_s32(x, out_zero)", "vqsubq_s32(x, out_zero)"))
    proc = _run_job(job["script"][-1:], env, checkout)
    assert proc.returncode == 1 and manifest["kernels"][0]["function"] in proc.stdout


def test_packed_weight_export_is_measured_and_verified_with_packed_weights(tmp_path):
    """A packed-layout variant is called with packed weights by firmware: export measurement
    and verify must do the same, or they would see a wrong answer."""
    from edgetune.codegen import get_kernel
    from edgetune.session import TuneRequest, tune
    from edgetune.targets import get_target
    from edgetune.tuner import TuningDatabase

    kernel, target = get_kernel("matmul_s8"), get_target("cortex-m55")
    shape = kernel.parse_shape("m=4,n=8,k=20")
    packed = next(c.as_dict() for c in kernel.space(target, shape) if c["layout"] == "packed")
    db = TuningDatabase(tmp_path / "p.db")
    summary = tune(TuneRequest(kernel, target, shape, "random", 1, 1, 0, initial=(packed,)), db)
    # Placement stays at its default (DTCM) while tuning instructions.
    assert summary.best.trial.config.as_dict() == {**packed, "weights_in": "dtcm", "activations_in": "dtcm"}
    code, out = cli("export", "--target", "cortex-m55", "--out", tmp_path / "export", "--db", tmp_path / "p.db")
    assert code == 0, out
    code, report = verify_json(tmp_path / "export", "--seed", 3)
    assert code == 0, report
    assert report["kernels"][0]["measured"] == report["kernels"][0]["recorded"]


def test_every_runner_kind_has_a_default_tolerance():
    """The table once lacked serial and Renode boards: verify on them ended in a KeyError."""
    from dataclasses import replace

    from edgetune.hal.loader import RUNNER_KINDS
    from edgetune.targets import get_target
    from edgetune.verify import default_tolerance

    board = get_target("an547-serial")
    assert default_tolerance(board) == 0  # its "board" is QEMU, started by the flash command
    real = replace(board, serial=replace(board.serial, flash=("openocd", "{image}"), flash_keeps_running=False))
    assert default_tolerance(real) > 0  # a real core's cycle counts move a little
    for kind in sorted(RUNNER_KINDS):
        assert default_tolerance(replace(board, runner=replace(board.runner, kind=kind))) >= 0
