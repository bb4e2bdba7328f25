"""What one evaluation produced: an outcome from a closed set, and the measured values."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .space import Config


class Outcome(enum.Enum):
    OK = "ok"
    INVALID = "invalid"            # the configuration is illegal for this workload
    CODEGEN_ERROR = "codegen"      # the template could not render it
    COMPILE_ERROR = "compile"      # the compiler or linker refused it
    TOO_LARGE = "too_large"        # the image or buffers do not fit the target's memory
    TIMEOUT = "timeout"            # the run hung and was killed
    CRASH = "crash"                # the kernel faulted (fault handler, or a signal it caused)
    WRONG_ANSWER = "wrong_answer"  # ran, but the output differs from the reference
    RUNTIME_ERROR = "runtime"      # the harness or runner failed in another way
    EMULATOR_LOST = "emulator_lost"  # the emulator (or a build tool) was killed from outside (SIGKILL, SIGTERM, Ctrl-C, OOM)
    DEVICE_LOST = "device_lost"    # the board went away: its port closed or vanished

    @property
    def failed(self) -> bool:
        return self is not Outcome.OK

    @property
    def lost(self) -> bool:
        """The machine went away under the trial: it says nothing about the configuration,
        so a resumed run measures that configuration again (TuningDatabase.record replaces
        the lost trial)."""
        return self in (Outcome.EMULATOR_LOST, Outcome.DEVICE_LOST)


@dataclass(frozen=True)
class Trial:
    """One evaluated configuration. `values` holds every measured quantity by unit name."""

    config: Config
    outcome: Outcome
    values: dict = field(default_factory=dict, hash=False)
    error: str = ""
    info: dict = field(default_factory=dict, hash=False)  # compiler versions, placement, ...
    # Which machine (host, or host/board resource) built and ran it, and when it finished
    # there (UTC, ISO 8601); None when unknown (stored before schema 2, lost on a cluster).
    measured_by: str | None = None
    measured_at: str | None = None

    def value(self, objective: str) -> float | None:
        if self.outcome.failed:
            return None
        value = self.values.get(objective)
        return None if value is None else float(value)
