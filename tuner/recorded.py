"""Recorded tuning spaces: a file mapping every configuration of a space to what measuring
it gave, so a search can be replayed without hardware (as Kernel Tuner's simulation mode
does). Two formats are read:

- edgetune's own (written by `edgetune record`), JSON, optionally gzipped:
  {"format": "edgetune-recorded-space", "version": 1, "kernel", "kernel_version", "target",
   "shape": {...}, "objective": "instructions",
   "parameters": [{"name": "tile_m", "values": [1, 2, 4, 8]}, ...],
   "entries": [{"config": {...}, "outcome": "ok", "values": {"instructions": 7673, ...}},
               {"config": {...}, "outcome": "compile", "error": "..."}, ...]}
  `outcome` is a trial outcome (see edgetune.tuner.trial.Outcome); failures carry no values.
  An entry may also carry "features": {"code_bytes": 230, "hot_vec_mac": 1, ...}, numbers
  read from the configuration's compiled code (edgetune.targets.code_features), for
  rankers that order candidates by their code before running them.
- Kernel Tuner cache files (`{"device_name", "kernel_name", "tune_params_keys",
  "tune_params", "objective", "cache": {...}}`), where an objective value that is a string
  ("CompilationFailedConfig", "RuntimeFailedConfig", "InvalidConfig") marks a failure.

A configuration absent from the file is not legal: the replay space is exactly what was
recorded. Objectives are minimised.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from edgetune.errors import EdgetuneError
from .space import Config, Constraint, Param, Space, SpaceError
from .strategies import PriorTrials, SearchStrategy, Strategy, ValueRoles, make_strategy
from .trial import Outcome, Trial

FORMAT = "edgetune-recorded-space"
VERSION = 1

# Kernel Tuner's error strings, mapped onto our outcomes.
KT_FAILURES = {"CompilationFailedConfig": Outcome.COMPILE_ERROR, "RuntimeFailedConfig": Outcome.RUNTIME_ERROR,
               "InvalidConfig": Outcome.INVALID}


class RecordedSpaceError(EdgetuneError, ValueError):
    """A recorded-space file that cannot be read; the message names the file and the key."""


@dataclass(frozen=True)
class RecordedSpace:
    path: str
    kernel: str
    target: str
    shape: tuple[tuple[str, object], ...]
    objective: str
    space: Space
    trials: Mapping[int, Trial]  # by index in `space`; every legal point has one
    # Compiled-code features by index in `space`, where the recording holds them.
    features: Mapping[int, Mapping[str, float]] = field(default_factory=dict)

    def trial(self, config: Config) -> Trial:
        return self.trials[self.space.index_of(config)]

    def values(self) -> np.ndarray:
        """The objective over every successful entry."""
        found = (t.value(self.objective) for t in self.trials.values())
        return np.array([v for v in found if v is not None], dtype=float)

    @property
    def failures(self) -> int:
        return sum(t.outcome.failed for t in self.trials.values())

    @property
    def objectives(self) -> tuple[str, ...]:
        """Every measured value some successful entry holds: what a replay may minimise."""
        return tuple(sorted({name for t in self.trials.values() if not t.outcome.failed for name in t.values}))

    def minimising(self, objective: str) -> "RecordedSpace":
        """The same recording, replayed for another of its values (`replay --objective`)."""
        if not objective or objective == self.objective:
            return self
        if objective not in self.objectives:
            raise RecordedSpaceError(f"{self.path}: --objective {objective!r} is not recorded "
                                     f"(it holds: {', '.join(self.objectives) or 'no values'})")
        return replace(self, objective=objective)


@dataclass(frozen=True)
class ReplayRun:
    seed: int
    best: float | None
    best_config: dict | None
    trace: tuple[float | None, ...]  # the objective in evaluation order, None for a failure
    configs: tuple[dict, ...] = ()  # the configuration of each evaluation, in the same order
    # The strategy's own time (ask and tell) for each evaluation, in seconds: what a search
    # costs beside the measurements it saves. Wall time, so it varies run to run.
    strategy_seconds: tuple[float, ...] = ()


# --- reading --------------------------------------------------------------------------------
# Spaces parsed in this process, by path and the file's identity: a benchmark replays one
# 5-16 MB space for many strategies and seeds, and parsing it is most of a replay's time.
_PARSED: dict[tuple, RecordedSpace] = {}
_PARSED_MOST = 32


def load_recorded(path: str | Path) -> RecordedSpace:
    """The recording at `path`, parsed once per process while the file stays the same."""
    path = Path(path)
    if path.exists() and not path.is_file():  # a folder, or a pipe that would block for ever
        raise RecordedSpaceError(f"{path}: not a regular file")
    try:
        stat = os.stat(path)
    except OSError:
        return _parse_recorded(path)  # says why it cannot be read
    key = (str(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key not in _PARSED:
        if len(_PARSED) >= _PARSED_MOST:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[key] = _parse_recorded(path)
    return _PARSED[key]


def _parse_recorded(path: Path) -> RecordedSpace:
    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        data = json.loads(text)
    except OSError as exc:
        raise RecordedSpaceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (ValueError, EOFError) as exc:
        raise RecordedSpaceError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecordedSpaceError(f"{path}: expected a JSON object at the top level")
    if data.get("format") == FORMAT:
        return _load_ours(path, data)
    if "cache" in data and "tune_params" in data:
        return _load_kernel_tuner(path, data)
    raise RecordedSpaceError(f"{path}: neither an edgetune recorded space (format {FORMAT!r}) "
                             f"nor a Kernel Tuner cache file (keys 'tune_params' and 'cache')")


def _need(path: Path, data: dict, key: str, kind: type | tuple):
    if key not in data:
        raise RecordedSpaceError(f"{path}: missing key {key!r}")
    if not isinstance(data[key], kind):
        raise RecordedSpaceError(f"{path}: {key}: expected {getattr(kind, '__name__', kind)}, "
                                 f"got {type(data[key]).__name__}")
    return data[key]


def _build(path: Path, params: list[Param], entries: list[tuple[str, tuple, Trial]], meta: dict,
           features: Mapping[tuple, Mapping[str, float]] | None = None) -> RecordedSpace:
    """entries: (where in the file, parameter values in `params` order, trial); features by
    the same value tuples."""
    if not entries:
        raise RecordedSpaceError(f"{path}: no entries")
    probe = Space(params)
    by_index: dict[int, Trial] = {}
    features_by_index: dict[int, Mapping[str, float]] = {}
    for where, values, trial in entries:
        # By index, not by value tuple: 1 and True are equal as dict keys but distinct values.
        try:
            index = probe.index_of(dict(zip(probe.names, values)))
        except SpaceError as exc:
            raise RecordedSpaceError(f"{path}: {where}: {exc}") from None
        by_index[index] = trial
        if features and values in features:
            features_by_index[index] = features[values]
    present = set(by_index)
    space = Space(params, [Constraint("not in the recorded space", lambda c: probe.index_of(c) in present)],
                  legal=sorted(present))
    trials = {index: Trial(space.config_at(index), t.outcome, t.values, t.error) for index, t in by_index.items()}
    return RecordedSpace(path=str(path), space=space, trials=trials, features=features_by_index, **meta)


def _load_ours(path: Path, data: dict) -> RecordedSpace:
    if _need(path, data, "version", int) > VERSION:
        raise RecordedSpaceError(f"{path}: version {data['version']} is newer than this edgetune reads ({VERSION})")
    objective = _need(path, data, "objective", str)
    params = []
    for n, item in enumerate(_need(path, data, "parameters", list)):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(item.get("values"), list):
            raise RecordedSpaceError(f"{path}: parameters[{n}]: expected {{\"name\": str, \"values\": [...]}}")
        try:
            params.append(Param(item["name"], tuple(item["values"]), ordered=item.get("ordered")))
        except SpaceError as exc:
            raise RecordedSpaceError(f"{path}: parameters[{n}]: {exc}") from None
    names = [p.name for p in params]
    entries: list[tuple[str, tuple, Trial]] = []
    features: dict[tuple, dict[str, float]] = {}
    for n, entry in enumerate(_need(path, data, "entries", list)):
        where = f"{path}: entries[{n}]"
        config = entry.get("config") if isinstance(entry, dict) else None
        if not isinstance(config, dict) or set(config) != set(names):
            raise RecordedSpaceError(f"{where}: config must name exactly the parameters {names}")
        try:
            outcome = Outcome(entry.get("outcome", "ok"))
        except ValueError:
            raise RecordedSpaceError(f"{where}: outcome: unknown {entry.get('outcome')!r} "
                                     f"(known: {', '.join(o.value for o in Outcome)})") from None
        values = entry.get("values", {})
        if outcome is Outcome.OK and not _is_number(values.get(objective)):
            raise RecordedSpaceError(f"{where}: values.{objective}: expected a number for an ok entry")
        key = tuple(config[name] for name in names)
        if "features" in entry:
            features[key] = _features(where, entry["features"])
        entries.append((f"entries[{n}]", key, Trial(Config(tuple(zip(names, key))), outcome,
                                                    dict(values) if outcome is Outcome.OK else {},
                                                    str(entry.get("error", "")))))
    shape = _need(path, data, "shape", dict)
    meta = dict(kernel=str(data.get("kernel", "")), target=str(data.get("target", "")),
                shape=tuple(shape.items()), objective=objective)
    return _build(path, params, entries, meta, features)


def _features(where: str, raw) -> dict[str, float]:
    if not isinstance(raw, dict) or not all(isinstance(k, str) and _is_number(v) and math.isfinite(v)
                                            for k, v in raw.items()):
        raise RecordedSpaceError(f"{where}: features: expected an object of numbers by name")
    return {k: float(v) for k, v in raw.items()}


def _load_kernel_tuner(path: Path, data: dict) -> RecordedSpace:
    tune_params = _need(path, data, "tune_params", dict)
    keys = data.get("tune_params_keys", list(tune_params))
    objective = data.get("objective", "time")
    params = []
    for name in keys:
        if name not in tune_params:
            raise RecordedSpaceError(f"{path}: tune_params_keys names {name!r}, which tune_params lacks")
        try:
            params.append(Param(name, tuple(tune_params[name])))
        except SpaceError as exc:
            raise RecordedSpaceError(f"{path}: tune_params.{name}: {exc}") from None
    entries: list[tuple[str, tuple, Trial]] = []
    for cache_key, entry in _need(path, data, "cache", dict).items():
        where = f"{path}: cache[{cache_key!r}]"
        if not isinstance(entry, dict) or any(name not in entry for name in keys):
            raise RecordedSpaceError(f"{where}: expected an object with every tuning parameter")
        key = tuple(entry[name] for name in keys)
        config = Config(tuple(zip(keys, key)))
        value = entry.get(objective)
        if isinstance(value, str):
            outcome = KT_FAILURES.get(value, Outcome.RUNTIME_ERROR)
            entries.append((f"cache[{cache_key!r}]", key, Trial(config, outcome, error=value)))
        elif _is_number(value) and math.isfinite(value):
            entries.append((f"cache[{cache_key!r}]", key, Trial(config, Outcome.OK, {objective: float(value)})))
        else:
            raise RecordedSpaceError(f"{where}: {objective}: expected a number or a failure string, got {value!r}")
    meta = dict(kernel=str(data.get("kernel_name", "")), target=str(data.get("device_name", "")),
                shape=(("problem_size", data.get("problem_size")),) if "problem_size" in data else (),
                objective=objective)
    return _build(path, params, entries, meta)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --- writing --------------------------------------------------------------------------------
def recorded_space_json(kernel: str, kernel_version: int, target: str, shape: Mapping[str, int], objective: str,
                        params: Sequence[Param], trials: Sequence[Trial], provenance: Mapping[str, str],
                        features: Mapping[str, Mapping[str, float]] | None = None) -> dict:
    """`features`: compiled-code features by Config.key(), written into their entries."""
    entries = []
    for trial in trials:
        entry: dict = {"config": trial.config.as_dict(), "outcome": trial.outcome.value}
        if trial.outcome is Outcome.OK:
            entry["values"] = trial.values
        else:
            entry["error"] = trial.error
        if features and trial.config.key() in features:
            entry["features"] = dict(features[trial.config.key()])
        entries.append(entry)
    return {"format": FORMAT, "version": VERSION, "kernel": kernel, "kernel_version": kernel_version,
            "target": target, "shape": dict(shape), "objective": objective,
            "parameters": [{"name": p.name, "values": list(p.values), "ordered": p.is_ordered} for p in params],
            "provenance": dict(provenance), "entries": entries}


def write_recorded(path: str | Path, document: dict) -> Path:
    path = Path(path)
    text = json.dumps(document, indent=1, sort_keys=False).encode()
    path.write_bytes(gzip.compress(text, mtime=0) if path.suffix == ".gz" else text)
    return path


# --- replaying ------------------------------------------------------------------------------
def replay_strategy(recorded: RecordedSpace, strategy: str, budget: int, seed: int,
                    prior: Sequence[PriorTrials] = (), roles: ValueRoles = ValueRoles()) -> SearchStrategy:
    """The strategy a replay runs: seeded, minimising the recording's objective, told the
    prior trials and the run's budget; `roles` are the value roles of the recording's target,
    which prior values are mapped to."""
    return make_strategy(strategy, recorded.space, np.random.default_rng(seed), recorded.objective, prior,
                         budget=budget, roles=roles)


def replay_trials(recorded: RecordedSpace, search: Strategy, budget: int,
                  stop_at: float | None = None) -> list[Trial]:
    """The search asks, the file answers, one configuration at a time: at most `budget`
    evaluations, fewer when the search has nothing left or (with `stop_at`) once a value
    <= stop_at is found."""
    return [trial for trial, _ in timed_replay(recorded, search, budget, stop_at)]


def timed_replay(recorded: RecordedSpace, search: Strategy, budget: int,
                 stop_at: float | None = None) -> list[tuple[Trial, float]]:
    """replay_trials, each trial with the seconds the strategy spent asking for it and
    being told its result."""
    found: list[tuple[Trial, float]] = []
    while len(found) < budget:
        started = time.perf_counter()
        configs = search.ask(1)
        if not configs:
            break
        asked = time.perf_counter() - started
        trial = recorded.trial(configs[0])
        started = time.perf_counter()
        search.tell([trial])
        found.append((trial, asked + time.perf_counter() - started))
        value = trial.value(recorded.objective)
        if stop_at is not None and value is not None and value <= stop_at:
            break
    return found


def replay(recorded: RecordedSpace, strategy: str, budget: int, seed: int,
           prior: Sequence[PriorTrials] = (), wrap: Callable[[SearchStrategy], Strategy] | None = None,
           roles: ValueRoles = ValueRoles()) -> ReplayRun:
    """Tune against the recording: the strategy asks, the file answers, one at a time.
    `wrap` puts a wrapper around the strategy (e.g. code_rank.RankByCode); `roles` as in
    replay_strategy."""
    search = replay_strategy(recorded, strategy, budget, seed, prior, roles)
    return replay_search(recorded, search if wrap is None else wrap(search), budget, seed)


def replay_search(recorded: RecordedSpace, search: Strategy, budget: int, seed: int) -> ReplayRun:
    """A search built by the caller (seeded with `seed`) replayed for `budget` evaluations."""
    timed = timed_replay(recorded, search, budget)
    trials = [trial for trial, _ in timed]
    trace = tuple(t.value(recorded.objective) for t in trials)
    found = [(value, n) for n, value in enumerate(trace) if value is not None]
    best = trials[min(found)[1]] if found else None  # the first of the lowest, as the strategy met it
    return ReplayRun(seed=seed, best=None if best is None else best.value(recorded.objective),
                     best_config=None if best is None else best.config.as_dict(), trace=trace,
                     configs=tuple(t.config.as_dict() for t in trials),
                     strategy_seconds=tuple(seconds for _, seconds in timed))


def as_prior(recorded: RecordedSpace, roles: ValueRoles = ValueRoles()) -> PriorTrials:
    """A recorded space as prior trials for a transfer-learning strategy; `roles` are the
    value roles of the target it was recorded on. Its name says what was recorded, not where
    the file lies: it seeds the subset a transfer search learns from (map_prior), so a
    replay with the same seed gives the same run wherever the files are (with the path in
    it, the same bench gave 1.0, 7.1 and 10.0 mean evaluations on one space from three
    folders)."""
    shape = ",".join(f"{name}={value}" for name, value in recorded.shape)
    return PriorTrials(f"{recorded.kernel}/{recorded.target}/{shape}", tuple(recorded.trials.values()), roles)
