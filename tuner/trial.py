"""What one evaluation produced: an outcome from a closed set, and the measured values."""
from __future__ import annotations

import enum
import math
import re
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
    OVERRUN = "overrun"            # ran, but wrote outside its output buffers (the harness's guard bytes)

    @property
    def failed(self) -> bool:
        return self is not Outcome.OK

    @property
    def lost(self) -> bool:
        """The machine went away under the trial: it says nothing about the configuration,
        so a resumed run measures that configuration again (TuningDatabase.record replaces
        the lost trial)."""
        return self in (Outcome.EMULATOR_LOST, Outcome.DEVICE_LOST)


def replaceable(outcome: Outcome, limit_s: object, new_limit_s: object) -> bool:
    """Whether a stored trial gives way to a new measurement of its configuration: the one
    rule, used by the search (what to measure again) and by the database (what a record may
    overwrite). Lost with its machine, it says nothing about the configuration; a timeout
    under a smaller run limit (seconds; None or 0 where unrecorded) than the new one says the
    limit was too short, not that the configuration is slow."""
    if outcome.lost:
        return True
    return outcome is Outcome.TIMEOUT and _seconds(limit_s) < _seconds(new_limit_s)


def _seconds(limit: object) -> float:
    return float(limit) if isinstance(limit, (int, float)) and not isinstance(limit, bool) else 0.0


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


# --- what a stored trial may hold ----------------------------------------------------------------
# Every measured value is a finite, non-negative number, or (instruction mix, memory accesses) a
# table of such counts by class; counts of discrete things are integers. Values arrive from
# imported files and edited databases too, where a NaN, a negative or a string would otherwise
# become (or break) the best.
INTEGER_VALUES = frozenset({
    "instructions", "code_bytes", "ram_bytes", "dwt_cycles", "systick_cycles",  # CPU targets
    "total_cycles", "npu_cycles", "sram_access_cycles", "offchip_access_cycles", "sram_bytes",  # Vela
    "offchip_bytes", "sram_traffic_bytes", "offchip_traffic_bytes", "layer_macs", "npu_layers", "model_bytes"})
VALUE_NAME_RE = re.compile(r"[a-z_][a-z0-9_]{0,63}")
PART_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")
MAX_VALUES = 64  # names in one trial's values, and classes in one table of counts
MAX_ERROR_CHARS = 16384  # a compiler's last lines fit many times over
MAX_INFO_CHARS = 4096  # one info string (a version banner, a flag list)


def _number_problem(value, integer: bool) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value!r} is not a number"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if value < 0:
        return f"{value!r} is negative"
    if integer and not isinstance(value, int):
        return f"{value!r} is not an integer (a count)"
    return None


def check_values(values) -> None:
    """Refuse measured values that no measurement produces; ValueError names the field."""
    if not isinstance(values, dict):
        raise ValueError(f"values: expected an object, got {type(values).__name__}")
    if len(values) > MAX_VALUES:
        raise ValueError(f"values: {len(values)} names (at most {MAX_VALUES})")
    for name, value in values.items():
        if not isinstance(name, str) or not VALUE_NAME_RE.fullmatch(name):
            raise ValueError(f"values: name {name!r} is not a plain name")
        if isinstance(value, dict):  # counts by class (mix) or by memory region (accesses)
            if len(value) > MAX_VALUES:
                raise ValueError(f"values.{name}: {len(value)} entries (at most {MAX_VALUES})")
            for part, count in value.items():
                if not isinstance(part, str) or not PART_NAME_RE.fullmatch(part):
                    raise ValueError(f"values.{name}: name {part!r} is not a plain name")
                if (problem := _number_problem(count, integer=True)) is not None:
                    raise ValueError(f"values.{name}.{part}: {problem}")
        elif (problem := _number_problem(value, integer=name in INTEGER_VALUES)) is not None:
            raise ValueError(f"values.{name}: {problem}")


def check_error_and_info(error, info) -> None:
    """The error text and the info table: strings of bounded length, info values plain."""
    if not isinstance(error, str):
        raise ValueError(f"error: expected a string, got {type(error).__name__}")
    if len(error) > MAX_ERROR_CHARS:
        raise ValueError(f"error: {len(error)} characters (at most {MAX_ERROR_CHARS})")
    if not isinstance(info, dict):
        raise ValueError(f"info: expected an object, got {type(info).__name__}")
    if len(info) > MAX_VALUES:
        raise ValueError(f"info: {len(info)} names (at most {MAX_VALUES})")
    for name, value in info.items():
        if not isinstance(name, str) or not VALUE_NAME_RE.fullmatch(name):
            raise ValueError(f"info: name {name!r} is not a plain name")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"info.{name}: {value!r} is not a finite number")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise ValueError(f"info.{name}: expected a string, number or boolean, got {type(value).__name__}")
        if isinstance(value, str) and len(value) > MAX_INFO_CHARS:
            raise ValueError(f"info.{name}: {len(value)} characters (at most {MAX_INFO_CHARS})")


def check_trial(trial: Trial) -> None:
    """A trial whose fields are of the types and ranges measuring produces (ValueError naming
    the field otherwise): used on everything imported and everything read back."""
    for item in trial.config.items:
        if (not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str)
                or not isinstance(item[1], (str, int, float, bool))):
            raise ValueError(f"config: {item!r} is not a (name, value) pair")
    check_values(trial.values)
    check_error_and_info(trial.error, trial.info)
