"""Putting an export folder in place atomically: the files are written into a fresh folder
beside the destination, finished there (the export measures its kernels), and only then
swapped into place in one rename, so an export killed part-way leaves the old folder as it
was and the new folder holds exactly the files its manifest lists."""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from edgetune.codegen.export import ExportError
from edgetune.codegen.manifest import MANIFEST, Manifest, ManifestError, write_manifest

STAGING_MARK = ".edgetune-partial-"


def check_destination(out_dir: Path, model: bool = False) -> Path:
    """The folder an export to `out_dir` replaces (a symbolic link's target: the link keeps
    pointing at the new export), once it is known that replacing it loses nothing of anyone's.

    An export replaces its folder whole, so only a missing or empty folder, or an earlier
    export of the same kind, may be replaced: a folder whose manifest.json is a valid
    edgetune manifest (Manifest.from_json), of a model export for `model` and of kernels
    otherwise (the two are easily given the same --out), holding no file its manifest does
    not list and no export writes. Anything else (a web app's manifest.json, an empty or
    damaged one) is refused, naming the folder: it may be someone's own."""
    folder = _link_target(out_dir)
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"{out_dir}: exists and is not a folder")
    if not folder.is_dir() or not any(folder.iterdir()):
        return folder
    if not (folder / MANIFEST).is_file():
        raise ExportError(f"{out_dir}: exists, is not empty and holds no {MANIFEST} (not an earlier export); "
                          "an export replaces its folder whole: choose a new folder")
    earlier = _earlier_manifest(out_dir, folder / MANIFEST)
    if (earlier.model is not None) != model:
        held, this = ("a model export", "kernels") if earlier.model is not None else ("a kernel export", "a model")
        raise ExportError(f"{out_dir}: holds {held} ({MANIFEST}); exporting {this} there would replace it "
                          "whole: choose another folder, or remove this one first")
    extra = _files_not_exported(folder, earlier)
    if extra:  # the earlier export plus files of someone's own (notes, a plan.json): replacing it would delete them
        others = len(extra) - 1
        which = f"{extra[0]} and {others} other file{'s' if others > 1 else ''}" if others else extra[0]
        raise ExportError(f"{out_dir}: holds {which} that the earlier export's {MANIFEST} does not list; an export "
                          "replaces its folder whole: move them out, or choose another folder")
    return folder


def _link_target(out_dir: Path) -> Path:
    """out_dir, or the folder it links to: an export through a link replaces the linked
    export in place (the same atomic swap beside it), never the link by a folder."""
    if not out_dir.is_symlink():
        return out_dir
    try:
        return out_dir.resolve(strict=True)
    except (OSError, RuntimeError):  # dangling, a loop, or a component that cannot be read
        raise ExportError(f"{out_dir}: is a symbolic link to {os.readlink(out_dir)!r}, which does not exist; an "
                          "export replaces an existing folder or writes a new one: remove the link or create its "
                          "folder") from None


def _earlier_manifest(out_dir: Path, path: Path) -> Manifest:
    """The earlier export's manifest, checked; anything else is refused: a manifest.json that
    is not an edgetune one is someone's own file."""
    try:
        return Manifest.from_json(json.loads(path.read_text(encoding="utf-8")), where=str(path))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, ManifestError) else f"{path}: not valid JSON"
        raise ExportError(f"{out_dir}: its {MANIFEST} is not a valid edgetune export manifest ({reason}); an export "
                          "replaces its folder whole, so only an earlier export is replaced: choose another "
                          "folder, or remove this one first") from None


# Names an export writes (a kernel export's sources and build fragments, its Zephyr module); a
# model export's also start with the model's name. A stale one of an earlier export is replaced,
# and so are the objects its Make fragment builds when make runs in the folder (edgetune-build,
# the fragment's default EDGETUNE_BUILD_DIR): they are built from the sources being replaced.
_EXPORT_NAME = re.compile(r"(et_|edgetune_)[A-Za-z0-9_]*\.(c|h|mk|cmake|ld)|zephyr/[A-Za-z0-9_./-]*|edgetune-build/.*")


def _files_not_exported(out_dir: Path, manifest: Manifest) -> list[str]:
    """The files in out_dir that its manifest does not list and no export would write,
    sorted: someone's own."""
    listed = manifest.file_digests
    name = manifest.model.name if manifest.model is not None else ""
    model_file = re.compile(rf"{re.escape(name)}(_[A-Za-z0-9_]+)?\.(c|h|tflite)") if name else None
    found = (p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*") if not p.is_dir())
    return sorted(f for f in found if f != MANIFEST and f not in listed and not _EXPORT_NAME.fullmatch(f)
                  and not (model_file and model_file.fullmatch(f)))


def publish(out_dir: Path, files: dict[str, str], manifest: Manifest,
            finish: Callable[[Path], None] | None = None) -> None:
    """Write the export beside out_dir, let `finish` complete it (it may rewrite the
    manifest), then swap it into place (out_dir's target when it is a symbolic link)."""
    out_dir = _link_target(out_dir)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned_staging(out_dir)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}{STAGING_MARK}{os.getpid()}-", dir=out_dir.parent))
    except OSError as exc:
        raise ExportError(f"{out_dir}: cannot write there ({exc.strerror})") from None
    try:
        for name, text in files.items():
            (staging / name).parent.mkdir(exist_ok=True)
            _write(staging / name, text)
        write_manifest(staging, manifest)
        if finish is not None:
            finish(staging)
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; an export is an ordinary folder
        _swap_into_place(staging, out_dir)
    finally:
        _remove(staging)  # gone already when published


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _remove_abandoned_staging(out_dir: Path) -> None:
    """Folders left beside out_dir by exports that were killed (their process is gone)."""
    prefix = f".{out_dir.name}{STAGING_MARK}"
    for path in out_dir.parent.iterdir():  # not glob: the folder's name may hold [ or *
        if not path.name.startswith(prefix) or not (path.is_dir() or path.is_symlink()):
            continue
        pid = path.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            _remove(path)  # a link: what an export through a link left before exports followed links


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _swap_into_place(staging: Path, out_dir: Path) -> None:
    """out_dir becomes staging. An existing out_dir is exchanged in one step where the
    kernel offers it (Linux renameat2 RENAME_EXCHANGE), else renamed aside first: a kill
    between the two renames leaves out_dir absent (the old export kept beside it), never
    half-written."""
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return
    if not _exchange(staging, out_dir):
        aside = staging.with_name(staging.name + "-old")
        os.rename(out_dir, aside)
        os.rename(staging, out_dir)
        staging = aside
    _remove(staging)  # now the old export


def _remove(path: Path) -> None:
    """A folder, or a link (rmtree refuses links, and a hidden one would be left behind)."""
    if path.is_symlink():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux >= 3.15, glibc >= 2.28); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    done = renameat2(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange) == 0
    return done
