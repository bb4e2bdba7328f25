"""Which runner serves a target: one explicit table from the HAL's runner kind."""
from __future__ import annotations

from edgetune.hal import Target

from .native import NativeRunner
from .qemu import QemuRunner
from .renode import RenodeRunner
from .serialboard import SerialRunner

RUNNERS = {"qemu": QemuRunner, "native": NativeRunner, "serial": SerialRunner, "renode": RenodeRunner}


def runner_for(target: Target):
    return RUNNERS[target.runner.kind](target)
