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
    path = target_file(name)
    overrides = detect_host() if read_target_data(path).get("detect") else None
    return with_accepted_options(load_target(path, overrides=overrides))
