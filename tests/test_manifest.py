"""The export's manifest as a typed value (codegen.manifest), rendering without a disk
(codegen.export.render_export) and selection from the database (edgetune.selection)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.codegen.export import DISPATCH, HEADER, ExportEntry, render_export
from edgetune.codegen.manifest import Manifest, ManifestError, read_manifest, write_manifest
from edgetune.selection import select_best
from edgetune.targets import get_target
from edgetune.tuner import Bound, TuningDatabase
from stored import stored_db

SHAPE = {"m": 2, "n": 2, "k": 2}


def _chosen(**changes) -> ExportEntry:
    kernel, host = get_kernel("matmul_s8"), get_target("host")
    space = kernel.space(host, SHAPE)
    config = space.config_at(int(space.legal_indices()[0]))
    fields = dict(kernel="matmul_s8", kernel_version=kernel.version, shape=tuple(SHAPE.items()), config=config.items,
                  objective="time_ns", value=10.0, values=(("time_ns", 10.0),), trial_id=3,
                  created="2026-11-30 09:00:00", trials=7, compiler_version="gcc 12", toolchain="0123456789ab",
                  bounds=(Bound("time_ns", 20.0),), chosen_by="tuned")
    return ExportEntry(**{**fields, **changes})


def _rendered():
    return render_export(get_target("host"), [_chosen()], database="/somewhere/edgetune.db",
                         date="2026-11-30 10:00 UTC", version="0.1.0", toolchain_versions={"gcc": "gcc 12.2"})


def test_rendering_is_pure_and_its_manifest_lists_every_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, again = _rendered(), _rendered()
    assert first == again  # no clock, no randomness: the same entries render the same export
    assert list(tmp_path.iterdir()) == []  # and nothing is written
    [kernel] = first.manifest.kernels
    assert {HEADER, DISPATCH, kernel.source} <= set(first.files)
    assert set(first.manifest.file_digests) == set(first.files)
    assert "trial 3 of edgetune.db" in first.files[kernel.source] and "(best of 7 trials)" in first.files[kernel.source]
    assert (kernel.objective, kernel.bounds, kernel.chosen_by, kernel.toolchain) == \
        ("time_ns", (Bound("time_ns", 20.0),), "tuned", "0123456789ab")


def test_a_manifest_reads_back_as_written_with_the_keys_of_earlier_exports(tmp_path):
    manifest = _rendered().manifest
    write_manifest(tmp_path, manifest)
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert set(data) == {"manifest_version", "edgetune_version", "target", "objective", "exported", "database",
                         "dispatch", "kernels", "files", "toolchain_versions", "manifest_sha256"}
    assert set(data["kernels"][0]) == {"kernel", "kernel_version", "shape", "function", "source", "config", "objective",
                                       "constraints", "bounds", "chosen_by", "value", "values", "compiler",
                                       "compiler_command", "cflags", "trial_id", "measured", "toolchain"}
    assert data["kernels"][0]["constraints"] == ["time_ns<=20"] and data["kernels"][0]["bounds"] == [["time_ns", 20.0]]
    back = read_manifest(tmp_path)
    assert back.to_json() == manifest.to_json()
    measured = back.with_exported_values({back.kernels[0].function: (9.5, {"time_ns": 9.5})})
    write_manifest(tmp_path, measured)
    again = json.loads((tmp_path / "manifest.json").read_text())["kernels"][0]
    assert (again["exported_value"], again["exported_values"]) == (9.5, {"time_ns": 9.5})


def test_a_manifest_from_before_goals_were_recorded_reads_with_the_exports_objective(tmp_path):
    data = _rendered().manifest.to_json()
    for key in ("objective", "constraints", "bounds", "chosen_by"):
        del data["kernels"][0][key]
    write_manifest(tmp_path, data)
    [entry] = read_manifest(tmp_path).kernels
    assert (entry.objective, entry.bounds) == ("time_ns", ())


@pytest.mark.parametrize("key,value,culprit", [
    ("objective", "per_kernel", "kernels[0].objective"),
    ("bounds", [["time_ns"]], "kernels[0].bounds"),
    ("exported_value", "fast", "kernels[0].exported_value"),
    ("values", ["time_ns"], "kernels[0].values"),
    ("toolchain", "../x", "kernels[0].toolchain"),
    ("trial_id", "3", "kernels[0].trial_id"),
])
def test_every_value_of_a_kernel_entry_is_checked_when_read(tmp_path, key, value, culprit):
    data = _rendered().manifest.to_json()
    data["kernels"][0][key] = value
    write_manifest(tmp_path, data)  # with a correct checksum: anyone can recompute it
    with pytest.raises(ManifestError, match=culprit.replace("[", r"\[").replace("]", r"\]")):
        Manifest.from_json(json.loads((tmp_path / "manifest.json").read_text()))


def test_verify_refuses_a_malformed_exported_value_in_one_line(tmp_path):
    """Before the manifest was typed, a string here reached verify's arithmetic: a traceback."""
    data = _rendered().manifest.to_json()
    data["kernels"][0]["exported_value"] = "fast"
    folder = tmp_path / "export"
    folder.mkdir()
    write_manifest(folder, data)
    result = CliRunner().invoke(main, ["verify", str(folder), "--target", "host"])
    assert result.exit_code == 2
    assert result.stderr.startswith("edgetune: error: ") and "kernels[0].exported_value" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_selection_chooses_per_workload_and_says_why_one_is_skipped(tmp_path):
    db = TuningDatabase(stored_db(tmp_path))
    host = get_target("host")
    chosen = select_best(db, host)
    [entry] = chosen.entries
    assert (entry.kernel, dict(entry.shape), entry.objective, entry.value, entry.chosen_by) == \
        ("matmul_s8", SHAPE, "time_ns", 10.0, "default")  # stored without a goal: the target's own unit
    stale = select_best(db, host, toolchain="ffffffffffff")
    assert stale.entries == () and "another toolchain" in stale.skipped[0]
    bounded = select_best(db, host, bounds=(Bound("time_ns", 1.0),))
    assert bounded.entries == () and bounded.skipped[0].endswith("no successful trial within time_ns<=1")
    assert select_best(db, host, objective="time_ns").entries[0].chosen_by == "override"
