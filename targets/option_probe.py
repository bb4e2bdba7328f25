"""Which of edgetune's compiler options (edgetune.hal.compiler_options) a compiler accepts:
each flag set compiled once into a tiny loop with -Werror, so an option the compiler does
not know, or knows and ignores with a warning (Clang on GCC's -fschedule-insns), is refused.
The answers are cached in the cache folder, keyed by the compiler's resolved path, its
version line, the target's flags for it and the table's flag sets, so every later session
(and export, and verify) sees the same space without running the compiler again."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

from edgetune.hal import Compiler, Target
from edgetune.hal.compiler_options import family_of, option_flag_sets

from .toolchain import ToolMissing, cache_dir, killed_from_outside, tool_version

PROBE_SOURCE = """#include <stdint.h>
void probe(int32_t *restrict y, const int32_t *restrict x, int32_t n) {
    for (int32_t i = 0; i < n; i++) y[i] += x[i] * 3;
}
"""
PROBE_TIMEOUT_S = 60.0
PROBE_CFLAGS = ("-std=c99", "-O3", "-Werror")


def _cache_path(compiler: Compiler, resolved: str, sets: tuple) -> Path:
    key = json.dumps([resolved, tool_version(compiler.command), list(compiler.cflags), [list(s) for s in sets]])
    return cache_dir() / "compiler-options" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def _accepts(command: list[str], flags: tuple[str, ...], folder: Path) -> bool | None:
    """Whether the compile with `flags` succeeded; None when it could not tell (a timeout or
    a kill from outside: the machine, not the option)."""
    try:
        proc = subprocess.run([*command, *flags, "-c", "probe.c", "-o", "probe.o"], cwd=folder,
                              capture_output=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None
    if killed_from_outside(proc.returncode):
        return None
    return proc.returncode == 0


def probe_compiler(compiler: Compiler) -> frozenset[tuple[str, ...]]:
    """The table's flag sets the compiler accepts (cached per compiler, version and flags)."""
    family = family_of(compiler.command)
    if family is None:
        return frozenset()
    resolved = shutil.which(compiler.command)
    if not resolved:
        raise ToolMissing(f"{compiler.command}: not found on PATH (run scripts/setup.sh to install the toolchains)")
    sets = option_flag_sets(family)
    path = _cache_path(compiler, os.path.realpath(resolved), sets)
    try:
        return frozenset(tuple(flags) for flags in json.loads(path.read_text())["accepted"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not probed yet (or a damaged entry): probe again
    accepted, complete = [], True
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "probe.c").write_text(PROBE_SOURCE)
        command = [resolved, *compiler.cflags, *PROBE_CFLAGS]
        if not _accepts(command, (), folder):
            return frozenset()  # the compiler fails on plain C: nothing can be told about its options
        for flags in sets:
            answer = _accepts(command, flags, folder)
            complete = complete and answer is not None
            if answer:
                accepted.append(flags)
    if complete:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(f".{os.getpid()}.tmp")
        staging.write_text(json.dumps({"compiler": compiler.command, "accepted": [list(f) for f in accepted]}))
        os.replace(staging, path)
    return frozenset(accepted)


def with_accepted_options(target: Target) -> Target:
    """The target with each compiler's accepted option flags filled in; unchanged when the
    target tunes no compiler options (nothing is probed)."""
    if not target.compiler_options:
        return target
    compilers = tuple(replace(c, accepted_options=probe_compiler(c)) for c in target.compilers)
    return replace(target, compilers=compilers)
