"""The targets shipped with edgetune, by name, and loading a user's own target file."""
from __future__ import annotations

from pathlib import Path

from edgetune.hal import Target, TargetError, detect_host, load_target, read_target_data
from edgetune.hal.loader import NAME_RE

from .option_probe import with_accepted_options

BOARDS_DIR = Path(__file__).parent / "boards"


def target_names() -> list[str]:
    return sorted(path.stem for path in BOARDS_DIR.glob("*.toml"))


def target_file(name: str) -> Path:
    """A shipped target by name, or a path to a user's TOML file."""
    if name.endswith(".toml"):
        path = Path(name)
        if not path.is_file():
            raise TargetError(f"{name}: no such target file")
        return path
    path = BOARDS_DIR / f"{name}.toml"
    if not NAME_RE.fullmatch(name) or not path.is_file():  # a name, never a path out of boards/
        raise TargetError(f"unknown target {name!r} (known: {', '.join(target_names())})")
    return path


def get_target(name: str) -> Target:
    return with_accepted_options(_load(target_file(name)))


def shipped_target(name: str) -> Target | None:
    """A shipped target's description by name, or None when no shipped target has that
    name (a user's own target file, a GPU of a Kernel Tuner recording): for reading what a
    stored workload's target was, e.g. its memory regions. Unlike get_target it runs no
    compiler (no probe of accepted options), and a name is never taken as a path."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or not (BOARDS_DIR / f"{name}.toml").is_file():
        return None
    return _load(BOARDS_DIR / f"{name}.toml")


def _load(path: Path) -> Target:
    overrides = detect_host() if read_target_data(path).get("detect") else None
    return load_target(path, overrides=overrides)
