"""Which runner serves a target: one explicit registry of runner classes by `[runner] kind`.

The HAL describes each kind as data (edgetune.hal.loader.RUNNER_KINDS: what its target file
must hold, what its runs report); each kind is served by exactly one class here, declared
with the same `kind` and `measures` (tests/test_runners.py holds the two to each other). A
runner defined outside edgetune (a test's fake, a user's board) is added with
`register_runner`."""
from __future__ import annotations

from edgetune.hal import Target

from .build import Runner
from .native import NativeRunner
from .qemu import QemuRunner
from .renode import RenodeRunner
from .serialboard import SerialRunner
from .toolchain import tool_versions

RUNNERS: dict[str, type[Runner]] = {cls.kind: cls for cls in (QemuRunner, NativeRunner, SerialRunner, RenodeRunner)}


def register_runner(cls: type[Runner]) -> type[Runner]:
    """Add a runner class under its kind (usable as a class decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, Runner)):
        raise TypeError(f"{cls!r} is not a Runner subclass")
    if cls.kind in RUNNERS and RUNNERS[cls.kind] is not cls:
        raise ValueError(f"runner kind {cls.kind!r} is already served by {RUNNERS[cls.kind].__name__}")
    RUNNERS[cls.kind] = cls
    return cls


def runner_class(target: Target) -> type[Runner]:
    """The class serving the target's [runner] kind."""
    try:
        return RUNNERS[target.runner.kind]
    except KeyError:
        raise KeyError(f"target {target.name}: no runner serves kind {target.runner.kind!r} "
                       f"(known: {', '.join(sorted(RUNNERS))})") from None


def runner_for(target: Target) -> Runner:
    return runner_class(target)(target)


def toolchain_versions(target: Target) -> dict[str, str]:
    """Version lines of every program that builds or runs code for a target."""
    return tool_versions(runner_class(target).programs(target))
