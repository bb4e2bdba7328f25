"""What one tuning session tunes: a task. AutoTVM's `Task` is the model — a workload that
knows its search space, how to build one configuration and how to measure it. A CPU kernel
on a target (edgetune.session.CpuTask) and an operator compiled by Vela for an NPU
(edgetune.npu.session.NpuTask) are tasks; `edgetune.session.tune` runs any of them through
the same search: goal, rebuilt strategy, lost trials and seeds measured again, stop rules.
"""
from __future__ import annotations

import re
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Protocol

from edgetune.hal import Target
from edgetune.tuner import Bound, Config, Goal, Space, Trial, TuningDatabase, Workload

Evaluate = Callable[[Config], Trial]  # build and measure one configuration; every fault is a failed Trial


class TuningTask(Protocol):
    """One workload to tune, and everything the session needs to know about it."""

    workload: Workload  # the identity trials are stored under
    target: Target  # the board: who measures (stamp) and what it measures
    remembers_goal: bool  # store the goal with the workload (a CPU kernel's; an NPU's is fixed)
    run_limit_s: float  # the run limit trials are measured under (0: none, never measured again for it)

    def goal(self, db: TuningDatabase, objective: str, bounds: tuple[Bound, ...]) -> Goal:
        """The goal to tune for: the given objective and bounds, else the stored or default one, checked."""

    def space(self, goal: Goal) -> Space:
        """The configurations searched for `goal`."""

    def prepare(self, db: TuningDatabase) -> None:
        """Checks before any trial (tools present, the problem fits); may refresh stored estimates."""

    def evaluator(self, space: Space, work_root: Path) -> Evaluate:
        """Builds and measures configurations of `space` (what the session searches) in this
        process, under `work_root`; a configuration `space` rules out is an invalid trial."""

    def remote(self) -> Evaluate | None:
        """A picklable evaluation for a cluster's workers, or None when it runs only here."""


def machine_name(target: Target) -> str:
    """Who measures: this host, and the board resource when the target names one (a farm's
    worker may own several boards)."""
    host = re.sub(r"[^A-Za-z0-9_.:@\[\]-]", "_", socket.gethostname()) or "unknown"
    return f"{host}/{target.runner.resource}" if target.runner.resource else host


def stamp(trial: Trial, target: Target) -> Trial:
    """The trial with the machine that measured it and the UTC time it finished there."""
    return replace(trial, measured_by=machine_name(target),
                   measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
