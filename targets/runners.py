"""Which runner serves a target: one registry of runner classes by `[runner] kind`.

The HAL describes each kind as data (edgetune.hal.model.RUNNER_KINDS: what its target file
must hold, what its runs report) and names the class serving it (`served_by`,
"module:Class" in this package); the registry is built from that one table, so a shipped
runner is registered where its kind is described, once. Each class declares the same `kind`
and `measures` as its description (checked here, on import). A runner defined outside
edgetune (a test's fake, a user's board) is added with `register_runner`."""
from __future__ import annotations

import importlib

from edgetune.hal import Target
from edgetune.hal.model import RUNNER_KINDS, RunnerKind

from .build import Runner
from .toolchain import tool_versions


def serving_class(description: RunnerKind) -> type[Runner]:
    """The runner class a kind's description names, checked against the description."""
    module_name, _, class_name = description.served_by.partition(":")
    cls = getattr(importlib.import_module(f"{__package__}.{module_name}"), class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Runner)):
        raise TypeError(f"runner kind {description.kind!r}: {description.served_by!r} is not a Runner subclass")
    if cls.kind != description.kind or cls.measures != description.measures:
        raise TypeError(f"runner kind {description.kind!r}: {cls.__name__} declares kind {cls.kind!r}, "
                        f"measures {cls.measures}, not the description's")
    return cls


RUNNERS: dict[str, type[Runner]] = {kind: serving_class(description) for kind, description in RUNNER_KINDS.items()}


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
