"""Which runner serves a target: one explicit table from the HAL's runner kind."""
from __future__ import annotations

from edgetune.hal import Target

from .native import NativeRunner
from .qemu import QemuRunner

RUNNERS = {"qemu": QemuRunner, "native": NativeRunner}


def runner_for(target: Target):
    return RUNNERS[target.runner.kind](target)
