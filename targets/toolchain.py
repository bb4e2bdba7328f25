"""Running compilers and other tools: argument lists only, timeouts, classified failures,
and a content-addressed cache for objects that do not change between trials."""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from edgetune.errors import EdgetuneError
from edgetune.hal import Placement
from edgetune.tuner import Outcome

COMPILE_TIMEOUT_S = 120.0


class MeasureError(Exception):
    """A trial failed; `outcome` says how (compile error, crash, timeout, ...)."""

    def __init__(self, outcome: Outcome, message: str):
        super().__init__(message)
        self.outcome = outcome
        self.message = message


class ToolTimeout(MeasureError):
    """A tool did not finish in time: maybe the machine's load, so never cached as the
    variant's own failure."""


class ToolKilled(MeasureError):
    """A tool ended by a signal from outside (Ctrl-C reaches the whole process group, a
    supervisor's SIGTERM, the OOM killer): it says nothing about the variant, so the trial
    is lost (measured again on resume) and the failure is never cached."""


class ToolMissing(EdgetuneError, RuntimeError):
    """A program a target needs is not installed."""


class HarnessError(EdgetuneError, RuntimeError):
    """edgetune's own harness failed to build: no trial can run, so the session stops."""


@dataclass(frozen=True)
class BuildResult:
    """A runnable artefact plus what is known about it before it runs."""

    path: Path
    workdir: Path
    values: dict = field(default_factory=dict, hash=False)  # e.g. code_bytes
    info: dict = field(default_factory=dict, hash=False)  # compiler versions, placement
    placement: Placement | None = None  # where the run must load its buffers (None: the target's default)


class CacheDirError(EdgetuneError, RuntimeError):
    """The cache folder (EDGETUNE_CACHE, else the user's cache folder) cannot be made or written."""


def make_folder(path: Path, where: str, error: type[EdgetuneError]) -> None:
    """Create `path` (and its parents) unless it is a folder already; a file in its place or
    a folder that cannot be made is `error`, its message starting with `where`."""
    if path.exists() and not path.is_dir():
        raise error(f"{where}: exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error(f"{where}: cannot create it ({exc.strerror or exc})") from None


def cache_dir() -> Path:
    given = os.environ.get("EDGETUNE_CACHE")
    root = given or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "edgetune")
    path = Path(root)
    where = f"EDGETUNE_CACHE={root}" if given else f"the cache folder {root} (set EDGETUNE_CACHE to choose another)"
    make_folder(path, where, CacheDirError)
    if not os.access(path, os.W_OK | os.X_OK):
        raise CacheDirError(f"{where}: not writable")
    return path


def require_program(program: str, hint: str = "run scripts/setup.sh to install the toolchains") -> str:
    found = shutil.which(program)
    if not found:
        raise ToolMissing(f"{program}: not found on PATH ({hint})")
    if not os.path.isabs(found):  # PATH holds "." or another relative folder: whatever the cwd has
        raise ToolMissing(f"{program}: found as {found} through a relative folder on PATH; "
                          "only absolute PATH folders are searched for a target's programs")
    return found


@functools.lru_cache(maxsize=None)
def tool_version(program: str) -> str:
    """First line of `program --version` (recorded with every trial)."""
    try:
        out = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else "unknown"


def tool_versions(programs) -> dict[str, str]:
    """Version lines of programs, by name (a runner's `programs`: what builds or runs code)."""
    return {program: tool_version(program) for program in dict.fromkeys(programs)}


# Signals that come from outside (a user, a supervisor, the kernel's OOM killer, a closed
# terminal): an emulator ended by one was lost; the variant did nothing wrong. Any other
# signal (SIGSEGV, SIGABRT, ...) is the emulator or the process crashing on what it ran.
EXTERNAL_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})


def killed_from_outside(returncode: int | None) -> bool:
    """Whether a process's exit status (subprocess's: -N for signal N) is an external kill."""
    return returncode is not None and returncode < 0 and -returncode in EXTERNAL_SIGNALS


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def first_error_line(text: str) -> str:
    """The line of a tool's output that says what went wrong: its first line naming an
    `error` (a compiler's first error), else its first line; "" for no output."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")


def run_tool(args: Sequence[str], cwd: Path, outcome: Outcome = Outcome.COMPILE_ERROR,
             timeout: float = COMPILE_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run a build tool; a failure becomes MeasureError(outcome) with the tool's last lines."""
    try:
        proc = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolTimeout(outcome, f"{args[0]} did not finish within {timeout:.0f} s") from None
    except FileNotFoundError:
        raise ToolMissing(f"{args[0]}: not found on PATH (run scripts/setup.sh to install the toolchains)") from None
    if killed_from_outside(proc.returncode):
        raise ToolKilled(Outcome.EMULATOR_LOST, f"{Path(args[0]).name} was killed by "
                         f"{signal.Signals(-proc.returncode).name} from outside")
    if proc.returncode != 0:
        # The first error leads the message: a trial's error is often shown by its first line
        # alone, and the tail of a long log may have lost it.
        output = proc.stderr or proc.stdout
        raise MeasureError(outcome, f"{Path(args[0]).name} failed (exit {proc.returncode}): {first_error_line(output)}\n"
                           f"{_tail(output)}")
    return proc


def cached_object(kind: str, source: Path, args_before_source: Sequence[str], extra_key: str = "") -> Path:
    """Compile `source` once per distinct (content, flags) and reuse the object afterwards.

    The object is written to a temporary name and renamed, so parallel trials never see
    a half-written file.
    """
    digest = hashlib.sha256()
    digest.update(source.read_bytes())
    for part in (*args_before_source, extra_key, tool_version(args_before_source[0])):
        digest.update(b"\0" + part.encode())
    for header in sorted(source.parent.glob("*.h")):
        digest.update(header.read_bytes())
    target = cache_dir() / "objects" / kind / f"{source.stem}-{digest.hexdigest()[:20]}.o"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        tmp_obj = Path(tmp) / target.name
        try:
            run_tool([*args_before_source, "-c", str(source), "-o", str(tmp_obj)], cwd=Path(tmp),
                     outcome=Outcome.RUNTIME_ERROR)
        except ToolKilled:
            raise  # an interrupted run, not a harness that does not build
        except MeasureError as exc:
            raise HarnessError(f"{source.name}: the harness does not build: {exc.message}") from None
        os.replace(tmp_obj, target)
    return target
