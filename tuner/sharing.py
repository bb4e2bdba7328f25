"""Trials as JSON lines, for sharing results between machines (`edgetune db export/import`).

An imported line is untrusted: whatever it holds may become a workload's best, reach an
export's C sources, file names and comments, or break every later reading. So each field
is checked for its type and range here, and the error names the field; the caller (the
application) also checks the configuration against the kernel's own space, which this
library does not know.
"""
from __future__ import annotations

import json
import math
import re
from datetime import datetime
from dataclasses import dataclass

from edgetune.errors import EdgetuneError
from .objective import Bound, Goal
from .space import Config
from .trial import VALUE_NAME_RE, Outcome, Trial, check_trial

FORMAT = "edgetune-trial"
MAX_LINE_CHARS = 1 << 20  # a real line is a few KiB; a longer one is not a trial
MAX_CONFIG_ITEMS = 64
MAX_CONFIG_STRING = 64

# Whatever is stored may later reach a file name, a generated C comment or an identifier
# (export): names and stamps are whole-matched against these.
CONFIG_NAME_RE = re.compile(r"[a-z_][a-z0-9_]{0,63}")
CONFIG_STRING_RE = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
TIMESTAMP_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z")
MACHINE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/\[\]-]{0,254}")
STRATEGY_RE = re.compile(r"[A-Za-z0-9_.+-]{0,64}")


class LineError(EdgetuneError, ValueError):
    """One field of an imported line is wrong; the message starts with the field's name."""


@dataclass(frozen=True)
class ImportedTrial:
    """One parsed line: what TuningDatabase stores, with the workload still as plain data
    (the database builds and checks its Workload)."""

    workload: tuple  # Workload's fields: kernel, kernel_version, target, shape pairs, toolchain
    trial: Trial
    strategy: str
    seed: int | None
    created: str
    goal: Goal | None = None  # what the workload was tuned for (lines of schema 3 on)


def _field(data: dict, key: str, kind: type | tuple, required: bool = True, default=None):
    if key not in data or (data[key] is None and not required):
        if required:
            raise LineError(f"{key}: missing")
        return default
    value = data[key]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise LineError(f"{key}: expected {getattr(kind, '__name__', 'a value')}, got a boolean")
    if not isinstance(value, kind):
        raise LineError(f"{key}: expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def _text(data: dict, key: str, pattern: re.Pattern, required: bool) -> str | None:
    value = _field(data, key, str, required)
    if value is not None and not pattern.fullmatch(value):
        raise LineError(f"{key}: {value!r} is not allowed here")
    if value is not None and pattern is TIMESTAMP_RE:
        try:  # the pattern's digits, and a date and time of day that exist
            datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")
        except ValueError:
            raise LineError(f"{key}: {value!r} is not a date and time") from None
    return value


def _config(items) -> Config:
    if not isinstance(items, list) or len(items) > MAX_CONFIG_ITEMS:
        raise LineError(f"config: expected a list of at most {MAX_CONFIG_ITEMS} [name, value] pairs")
    config, seen = [], set()
    for item in items:
        if not isinstance(item, list) or len(item) != 2:
            raise LineError(f"config: {item!r} is not a [name, value] pair")
        name, value = item
        if not isinstance(name, str) or not CONFIG_NAME_RE.fullmatch(name):
            raise LineError(f"config: parameter {name!r} is not a plain name")
        if name in seen:
            raise LineError(f"config.{name}: given twice")
        seen.add(name)
        # A string value may become part of a C identifier or a compiler flag: plain words only.
        if isinstance(value, str) and not CONFIG_STRING_RE.fullmatch(value):
            raise LineError(f"config.{name}: {value[:MAX_CONFIG_STRING]!r} is not a plain word")
        if not isinstance(value, (str, int, float, bool)) or isinstance(value, float) and not math.isfinite(value):
            raise LineError(f"config.{name}: {value!r} is not a number, word or boolean")
        config.append((name, value))
    return Config(tuple(config))


def _workload(data: dict) -> tuple:
    """The workload's fields, typed (Workload itself checks the names)."""
    shape = data.get("shape")
    if not isinstance(shape, list) or not all(isinstance(p, list) and len(p) == 2 for p in shape):
        raise LineError("workload.shape: expected a list of [name, integer] pairs")
    try:
        version = _field(data, "kernel_version", int)
        if not 0 <= version < (1 << 31):
            raise LineError(f"kernel_version: {version} is out of range")
        return (_field(data, "kernel", str), version, _field(data, "target", str),
                tuple((k, v) for k, v in shape), _field(data, "toolchain", str, False, ""))
    except LineError as exc:
        raise LineError(f"workload.{exc}") from None


def _outcome(data: dict) -> Outcome:
    value = _field(data, "outcome", str)
    try:
        return Outcome(value)
    except ValueError:
        raise LineError(f"outcome: {value!r} is not one of {', '.join(o.value for o in Outcome)}") from None


def _seed(data: dict) -> int | None:
    seed = _field(data, "seed", int, required=False)
    if seed is not None and not -(1 << 63) <= seed < (1 << 63):  # SQLite's INTEGER
        raise LineError(f"seed: {seed} is out of range")
    return seed


def parse_line(text: str, newest_version: int) -> ImportedTrial:
    """One line of a JSON-lines file (any schema version up to `newest_version`), checked
    field by field; LineError names the field at fault."""
    if len(text) > MAX_LINE_CHARS:
        raise LineError(f"line: {len(text)} characters (at most {MAX_LINE_CHARS})")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise LineError(f"line: not JSON ({exc})") from None
    except RecursionError:  # arrays or objects nested thousands deep: no trial is
        raise LineError("line: not a trial (its JSON is nested too deep to read)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise LineError(f"format: not an {FORMAT} record")
    version = _field(data, "schema_version", int)
    if not 1 <= version <= newest_version:
        raise LineError(f"schema_version: {version} is not one of 1..{newest_version}")
    workload = _workload(_field(data, "workload", dict))
    outcome = _outcome(data)
    trial = Trial(config=_config(data.get("config")), outcome=outcome,
                  values=_field(data, "values", dict), error=_field(data, "error", str, False, ""),
                  info=_field(data, "info", dict, False, {}),
                  # Lines from schema version 1 carry no measured_by/measured_at: unknown (None).
                  measured_by=_text(data, "measured_by", MACHINE_RE, False),
                  measured_at=_text(data, "measured_at", TIMESTAMP_RE, False))
    try:
        check_trial(trial)
    except ValueError as exc:
        raise LineError(str(exc)) from None
    if outcome.failed and trial.values:
        raise LineError(f"values: a {outcome.value} trial measured nothing (got {', '.join(trial.values)})")
    return ImportedTrial(workload, trial, _text(data, "strategy", STRATEGY_RE, False) or "", _seed(data),
                         _text(data, "created", TIMESTAMP_RE, True), _goal(data))


def _no_constant(name: str):
    # Python's json reads NaN and Infinity, which are not JSON and no measurement gives.
    raise ValueError(f"{name} is not a JSON number")


def goal_from(objective, bounds) -> Goal:
    """A goal from stored or imported data: [[name, limit], ...] bounds, names checked."""
    if not isinstance(bounds, list):
        raise ValueError(f"bounds {bounds!r} is not a list")
    parsed = []
    for item in bounds:
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], (int, float))
                or isinstance(item[1], bool) or not math.isfinite(item[1])):
            raise ValueError(f"bound {item!r} is not [NAME, LIMIT]")
        parsed.append(Bound(item[0], float(item[1])))
    return checked_goal(Goal(objective, tuple(parsed)))


def checked_goal(goal: Goal) -> Goal:
    for name in (goal.objective, *(b.name for b in goal.bounds)):
        if not isinstance(name, str) or not VALUE_NAME_RE.fullmatch(name):
            raise ValueError(f"goal value name {name!r} is not a measured value's name")
    return goal


def _goal(data: dict) -> Goal | None:
    """The optional goal of a line (lines before schema 3 have none)."""
    goal = data.get("goal")
    if goal is None:
        return None
    if not isinstance(goal, dict):
        raise LineError(f"goal: {goal!r} is not an object")
    try:
        return goal_from(goal.get("objective"), goal.get("bounds", []))
    except ValueError as exc:
        raise LineError(f"goal: {exc}") from None


def _goal_json(goal: Goal | None) -> dict:
    return {} if goal is None else {"goal": {"objective": goal.objective,
                                             "bounds": [[b.name, b.limit] for b in goal.bounds]}}


def trial_json(workload, trial: Trial, strategy: str, seed: int | None, created: str, version: int,
               goal: Goal | None = None) -> str:
    """The line `parse_line` reads back (workload: a tuner Workload)."""
    return json.dumps({
        "format": FORMAT, "schema_version": version,
        "workload": {"kernel": workload.kernel, "kernel_version": workload.kernel_version, "target": workload.target,
                     # pairs, not an object: key order is part of the workload's identity
                     "shape": [list(pair) for pair in workload.shape], "toolchain": workload.toolchain},
        "config": [list(item) for item in trial.config.items], "outcome": trial.outcome.value, "values": trial.values,
        "error": trial.error, "info": trial.info, "strategy": strategy, "seed": seed,
        "created": created, "measured_by": trial.measured_by, "measured_at": trial.measured_at, **_goal_json(goal)},
        sort_keys=True)
