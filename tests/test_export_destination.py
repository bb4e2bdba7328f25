"""What an export may replace (issue 27, harm 1 and 6): only an earlier edgetune export of
the same kind; a folder whose manifest.json is anything else (a web app's, an empty or
damaged one) is refused naming the folder, and left byte for byte as it was. An --out that
is a symbolic link replaces the export it links to, in place, and leaves nothing hidden."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen.manifest import read_manifest, write_manifest

from stored import stored_db

MODEL = Path(__file__).parent / "data" / "models" / "ds_cnn_kws.tflite"

# A manifest.json that is not an edgetune export's: each must make the folder untouchable.
FOREIGN_MANIFESTS = {
    "web app": '{"name": "my-app", "icons": []}',
    "empty": "",
    "garbage": "\x00\x01not json at all",
    "list": "[1, 2]",
    "files only": '{"files": {"notes.txt": "0"}}',
    "unchecked export-like": json.dumps({"manifest_version": 1, "target": "host", "kernels": [], "files": {},
                                         "manifest_sha256": "0" * 64}),
    "nested": "[" * 100_000,
}


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def users_folder(path: Path, manifest: str) -> Path:
    (path / "src").mkdir(parents=True)
    (path / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    (path / "notes.txt").write_text("x\n")
    (path / "manifest.json").write_text(manifest, encoding="utf-8")
    return path


def kernel_export(tmp_path: Path, out: Path) -> tuple[int, str]:
    return cli("export", "--target", "host", "--db", stored_db(tmp_path), "--out", out)


def model_export(tmp_path: Path, out: Path) -> tuple[int, str]:
    return cli("model", "export", MODEL, "--target", "cortex-m55", "--out", out)


@pytest.mark.parametrize("export", [kernel_export, model_export], ids=["export", "model export"])
@pytest.mark.parametrize("manifest", FOREIGN_MANIFESTS.values(), ids=FOREIGN_MANIFESTS.keys())
def test_a_folder_whose_manifest_is_not_an_export_is_refused_and_kept(tmp_path, export, manifest):
    folder = users_folder(tmp_path / "d", manifest)
    before = snapshot(folder)
    code, out = export(tmp_path, folder)
    assert code == 2 and len(out.strip().splitlines()) == 1, out
    assert out.startswith(f"edgetune: error: {folder}: its manifest.json is not a valid edgetune export manifest")
    assert snapshot(folder) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_an_edited_export_manifest_is_refused_too(tmp_path):
    """Its checksum no longer matches: it is no longer known to be an export's."""
    out = tmp_path / "out"
    assert kernel_export(tmp_path, out)[0] == 0
    data = json.loads((out / "manifest.json").read_text())
    data["target"] = "cortex-m55"
    (out / "manifest.json").write_text(json.dumps(data))
    code, said = kernel_export(tmp_path, out)
    assert code == 2 and "checksum mismatch" in said and str(out) in said, said


def test_an_earlier_export_of_the_same_kind_is_still_replaced(tmp_path):
    out = tmp_path / "out"
    assert kernel_export(tmp_path, out)[0] == 0
    first = read_manifest(out).exported
    (out / "et_stale.c").write_text("int stale;\n")  # a name only an export writes: replaced with the export
    code, said = kernel_export(tmp_path, out)
    assert code == 0, said
    assert set(snapshot(out)) == {*read_manifest(out).file_digests, "manifest.json"} and first


@pytest.mark.parametrize("export", [kernel_export, model_export], ids=["export", "model export"])
def test_an_out_that_links_to_an_earlier_export_replaces_that_export_in_place(tmp_path, export):
    exports = tmp_path / "exports"
    exports.mkdir()
    assert export(tmp_path, exports / "v1")[0] == 0
    stale = read_manifest(exports / "v1")
    write_manifest(exports / "v1", {**stale.to_json(), "exported": "long ago"})  # to see it replaced
    link = tmp_path / "current"
    link.symlink_to(exports / "v1", target_is_directory=True)
    code, said = export(tmp_path, link)
    assert code == 0, said
    assert link.is_symlink() and link.resolve() == (exports / "v1").resolve()
    assert read_manifest(exports / "v1").exported != "long ago"
    assert set(snapshot(exports / "v1")) == {*read_manifest(exports / "v1").file_digests, "manifest.json"}
    hidden = [p.name for folder in (tmp_path, exports) for p in folder.iterdir() if p.name.startswith(".")]
    assert hidden == []


def test_a_link_to_a_users_folder_is_refused_and_both_kept(tmp_path):
    folder = users_folder(tmp_path / "mine", '{"name": "my-app"}')
    link = tmp_path / "out"
    link.symlink_to(folder)
    before = snapshot(folder)
    code, said = kernel_export(tmp_path, link)
    assert code == 2 and said.startswith(f"edgetune: error: {link}: its manifest.json"), said
    assert link.is_symlink() and snapshot(folder) == before


def test_a_dangling_link_is_refused_naming_it(tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere")
    code, said = kernel_export(tmp_path, link)
    assert code == 2 and len(said.strip().splitlines()) == 1 and f"{link}: is a symbolic link" in said, said
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()
