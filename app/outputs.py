"""Checking where a command will write before it spends any time: an output folder or file
that cannot be written is a one-line user error up front, not a traceback after an hour of
measuring, and no output may land on a file edgetune must keep (the database itself)."""
from __future__ import annotations

import tempfile
from pathlib import Path

from edgetune.errors import EdgetuneError
from edgetune.targets.toolchain import make_folder


class OutputError(EdgetuneError, ValueError):
    """An output path that cannot be written, or that would overwrite something kept."""


def _probe(folder: Path, flag: str, path: Path) -> None:
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".edgetune-probe-"):
            pass
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write in {folder} ({exc.strerror})") from None


def _same(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def writable_file(path: str | Path, flag: str, keep: tuple[str | Path, ...] = ()) -> Path:
    """A file the command may create or replace: its folder exists and takes files, and it
    is none of the files in `keep`."""
    path = Path(path)
    for kept in keep:
        if _same(path, Path(kept)):
            raise OutputError(f"{flag} {path}: is the database itself; choose another file")
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a folder, not a file")
    if not path.parent.is_dir():
        problem = "is not a folder" if path.parent.exists() else "does not exist"
        raise OutputError(f"{flag} {path}: {path.parent} {problem}")
    _probe(path.parent, flag, path)
    return path


def writable_folder(path: str | Path, flag: str) -> Path:
    """A folder the command may write into, created if missing."""
    path = Path(path)
    make_folder(path, f"{flag} {path}", OutputError)
    _probe(path, flag, path)
    return path
