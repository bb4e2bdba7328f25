"""The progress line of long tuning runs (only on a terminal, never with --json).

One status line rewritten in place: trials stored against the budget, the best value stored
for the workload (earlier runs' trials included, so a resumed run never shows a worse best
than the database holds), failures by kind, the rate of this run and the time left at that
rate, and where the time went: the shares of compiling, linking, running (the emulator or the
device; an image's link and run shared by its variants when they are batched), the search
and the database. Each new best also leaves a permanent line, so the history of improvements
stays on screen.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

from edgetune.tuner import Bound, Trial, feasible

TIME_PARTS = ("compile", "link", "run", "search", "database")


class ProgressDisplay:
    def __init__(self, objective: str, stream: TextIO = sys.stderr, clock=time.monotonic,
                 best: float | None = None, bounds: tuple[Bound, ...] = ()):
        self.objective, self.stream, self.clock, self.bounds = objective, stream, clock, bounds
        self.started = clock()
        self.measured = 0
        self.best: float | None = best  # the stored best when the run started, then this run's improvements
        self.failures: dict[str, int] = {}
        self.spent = dict.fromkeys(TIME_PARTS, 0.0)  # seconds: summed over trials, or the session's so far

    def status(self, done: int, budget: int) -> str:
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = self.measured / elapsed
        best = f"best {self.objective}={self.best:g}" if self.best is not None else "no success yet"
        failed = ", ".join(f"{kind} {n}" for kind, n in sorted(self.failures.items())) or "no failures"
        left = f"{(budget - done) / rate:.0f} s left" if rate > 0 and done < budget else "-"
        line = f"[{done:>4}/{budget}] {best} | {failed} | {rate * 60:.0f} trials/min | {left}"
        total = sum(self.spent.values())
        if total <= 0:
            return line
        return line + " | " + " ".join(f"{part} {seconds / total:.0%}" for part, seconds in self.spent.items())

    def _account(self, trial: Trial) -> None:
        for part in ("compile", "link", "run"):
            self.spent[part] += float(trial.info.get(f"seconds_{part}", 0.0))
        for part in ("search", "database"):  # the session's totals so far (session._BatchRunner)
            self.spent[part] = float(trial.info.get(f"run_seconds_{part}", self.spent[part]))

    def __call__(self, done: int, budget: int, trial: Trial) -> None:
        self.measured += 1
        self._account(trial)
        # A trial that breaks a --constraint bound is no best, whatever its objective.
        value = trial.value(self.objective) if feasible(trial, self.bounds) else None
        if trial.outcome.failed:
            self.failures[trial.outcome.value] = self.failures.get(trial.outcome.value, 0) + 1
        elif value is not None and (self.best is None or value < self.best):
            self.best = value
            self.stream.write(f"\r\x1b[K  new best {self.objective}={value:g}  {trial.config.key()}\n")
        self.stream.write("\r\x1b[K" + self.status(done, budget))
        if done >= budget:
            self.stream.write("\n")
        self.stream.flush()

    def interrupted(self) -> None:
        """End the status line so what follows starts on a line of its own."""
        self.stream.write("\n")
        self.stream.flush()
