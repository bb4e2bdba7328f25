"""Content-addressed cache of compiled variants: an identical variant is never built twice.

Two kinds of artifact are kept, each under a key that hashes everything that goes into it:
- `objects`: a kernel object, keyed by the compiler's version line, the full command line
  (minus per-trial paths), the source and every header beside it;
- `images`: a linked image, keyed by its objects' keys, the glue source, the runner, the
  whole target description (memory map, linker flags, libraries, linker script inputs), the
  harness sources and the version of every tool the target uses.
A build that fails (compile error, image too large, ...) is cached too, as its outcome and
message, so an identical failing variant is reported again without running the compiler.
A tool that timed out or was killed from outside (Ctrl-C) is not cached: that is the
machine or the user, not the variant.

Each entry is a directory written under a temporary name and renamed into place, so
parallel trials and Dask workers sharing the folder never see a half-written entry; an
entry is complete exactly when its directory exists. Hits refresh the directory's mtime,
and `prune` removes the least recently used entries down to a size.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgetune.firmware import FIRMWARE_DIR
from edgetune.tuner import Outcome

from .toolchain import MeasureError, ToolKilled, ToolTimeout, cache_dir

VARIANTS = "variants"  # this module's part of the cache folder
META = "meta.json"
# Everything the cache folder holds, for reports and `clear`: the variants here, harness
# objects (toolchain.cached_object), the instruction-count plugin (qemu.plugin_path) and the
# counts of library operators measured alone for `place` (edgetune.model.op_measure).
# Compiled variants' parts, pruned least recently used first: objects, images, and the
# features read from objects' code (targets.code_features.cached_read).
VARIANT_PARTS = (f"{VARIANTS}/objects", f"{VARIANTS}/images", f"{VARIANTS}/features")
PARTS = (*VARIANT_PARTS, "objects", "plugins", "op-counts")
LOCK_STRIPES = 16
STALE_STAGING_S = 3600.0  # a staging folder this old belongs to a process that was killed


class CachedFailure(MeasureError):
    """A build failure replayed from the cache: the outcome and message of the first build."""


def content_key(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")  # ("ab", "c") and ("a", "bc") must differ
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def firmware_digest() -> str:
    """Hash of every harness source, header and linker template shipped with edgetune."""
    digest = hashlib.sha256()
    for path in sorted(p for p in FIRMWARE_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(FIRMWARE_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def headers_of(folder: Path) -> tuple[bytes, ...]:
    """Name and content of every header in a folder, for keys of sources that include them."""
    return tuple(p.name.encode() + b"\0" + p.read_bytes() for p in sorted(folder.glob("*.h")))


Build = Callable[[], tuple[list[Path], dict]]  # -> (files to keep, JSON-able metadata)


class ArtifactStore:
    """One kind of artifact in the cache folder, one directory per key."""

    def __init__(self, kind: str):
        self.kind = kind
        # Trials of one session that render the same variant at once build it once: the
        # second waits and hits. Striped, so the table stays small.
        self._locks = tuple(threading.Lock() for _ in range(LOCK_STRIPES))

    def root(self) -> Path:
        return cache_dir() / VARIANTS / self.kind  # read each time: EDGETUNE_CACHE may change

    def folder(self, key: str) -> Path:
        return self.root() / key[:2] / key

    def get_or_build(self, key: str, workdir: Path, build: Build) -> tuple[dict, bool]:
        """The entry's metadata with its files copied into `workdir`, and whether it was a hit.
        On a miss `build()` runs (its files must already be in `workdir`) and is stored; a
        MeasureError it raises is stored and raised again, now and on every later hit."""
        with self._locks[int(key[:4], 16) % LOCK_STRIPES]:
            meta = self._fetch(key, workdir)
            if meta is not None:
                return meta, True
            try:
                files, meta = build()
            except (ToolTimeout, ToolKilled):  # the machine's load or an outside signal, not the variant
                raise
            except MeasureError as exc:
                self._publish(key, [], {"outcome": exc.outcome.value, "error": exc.message})
                raise
            self._publish(key, files, {**meta, "files": [f.name for f in files]})
            return meta, False

    def _fetch(self, key: str, workdir: Path) -> dict | None:
        folder = self.folder(key)
        try:
            meta = json.loads((folder / META).read_text())
            if "error" in meta:
                raise CachedFailure(Outcome(meta["outcome"]), meta["error"])
            for name in meta["files"]:
                shutil.copy2(folder / name, workdir / name)
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, or removed by a prune while we read it: build again
        try:
            os.utime(folder)  # recently used: pruned last
        except OSError:
            pass  # a read-only shared cache still serves hits
        return meta

    def _publish(self, key: str, files: list[Path], meta: dict) -> None:
        final = self.folder(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
        try:
            for path in files:
                shutil.copy2(path, staging / path.name)
            (staging / META).write_text(json.dumps(meta, sort_keys=True))
            os.rename(staging, final)  # atomic; fails if another process published it first
        except OSError:
            pass  # that other entry is identical; a full disk only costs a rebuild later
        finally:
            shutil.rmtree(staging, ignore_errors=True)


# --- the cache folder as a whole: report, clear, prune ----------------------------------------
@dataclass(frozen=True)
class CacheUsage:
    part: str  # e.g. "variants/objects"
    entries: int
    bytes: int


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _entries(root: Path, part: str) -> list[Path]:
    part_root = root / part
    if not part_root.is_dir():
        return []
    if part.startswith(f"{VARIANTS}/"):  # <key[:2]>/<key>/ directories
        return [e for shard in part_root.iterdir() if shard.is_dir()
                for e in shard.iterdir() if e.is_dir() and not e.name.startswith(".tmp-")]
    return [p for p in part_root.rglob("*") if p.is_file()]


def usage(root: Path | None = None) -> list[CacheUsage]:
    root = root or cache_dir()
    result = []
    for part in PARTS:
        entries = _entries(root, part)
        result.append(CacheUsage(part, len(entries), sum(_size(e) for e in entries)))
    return result


def clear(root: Path | None = None, parts: tuple[str, ...] = PARTS) -> int:
    """Remove the named parts of the cache folder (only those: the folder may be shared);
    returns the bytes freed. Everything removed is rebuilt on demand."""
    root = root or cache_dir()
    freed = 0
    for part in parts:
        if part not in PARTS:
            raise ValueError(f"unknown cache part {part!r} (known: {', '.join(PARTS)})")
        path = root / part
        if path.is_dir():
            freed += _size(path)
            shutil.rmtree(path, ignore_errors=True)
    return freed


def prune(max_bytes: int, root: Path | None = None, now: float | None = None) -> tuple[int, int]:
    """Remove the least recently used compiled variants until they take at most `max_bytes`,
    and staging folders a killed process left behind; returns (entries removed, bytes freed)."""
    root = root or cache_dir()
    now = time.time() if now is None else now
    for part in VARIANT_PARTS:
        for staging in (root / part).glob("*/.tmp-*"):
            if now - staging.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(staging, ignore_errors=True)
    entries = [(e.stat().st_mtime, _size(e), e) for part in VARIANT_PARTS for e in _entries(root, part)]
    total = sum(size for _, size, _ in entries)
    removed = freed = 0
    for _, size, entry in sorted(entries, key=lambda e: e[0]):
        if total - freed <= max_bytes:
            break
        shutil.rmtree(entry, ignore_errors=True)
        removed, freed = removed + 1, freed + size
    return removed, freed
