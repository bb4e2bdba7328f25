"""Work done ahead, on threads of its own, while the search waits for trials.

On a board the host waits out each trial's flash, reset and serial session (seconds) with
its cores idle, and a `transfer+code` search knows some of what it will compile before it
asks: beside each batch, what its next batch's plan will compile (edgetune.batch_ahead);
in a model tune also each layer's screen, one random order of its legal points fixed by
the seed (tuner.code_explore.screen_points), and what the next round's opening will
compile (edgetune.search_ahead). edgetune.live_rank queues those compiles here (only where
trials leave the host idle: live_rank.AHEAD_RUNNERS).

The workers give way to the search: one starts a job only while no search is waiting on
scores (`foreground`), so the search's own compiles never queue behind work done ahead.
Jobs are the search's own work moved earlier (a score is a pure function of the candidate),
so what runs ahead changes when a run's compiles happen, never what it chooses. A job that
raises is dropped: the search does the same work again when it needs it and meets the
error there. The threads are daemons: a process ending drops what is still queued (a
model tune cancels its own jobs and waits for those running when it ends).
"""
from __future__ import annotations

import threading
from collections import deque
from contextlib import contextmanager
from typing import Callable, Hashable, Iterator

_cond = threading.Condition()
_queue: deque[tuple[Hashable, Callable[[], object]]] = deque()  # (owner, job), in order (submit: first)
_workers: list[threading.Thread] = []
_running: list[Hashable] = []  # the owners of the jobs running now
_waiting = 0  # searches waiting on scores now (foreground)
_cancelling: list[Hashable | None] = []  # owners whose jobs cancel() is waiting for (None: all)


def submit(owner: Hashable, job: Callable[[], object], workers: int, first: bool = False) -> None:
    """Queue `job` for one of at least `workers` background threads; `owner` names it for
    cancel(). `first`: ahead of everything queued (work the search will ask for next)."""
    with _cond:
        if first:
            _queue.appendleft((owner, job))
        else:
            _queue.append((owner, job))
        while len(_workers) < max(1, workers):
            worker = threading.Thread(target=_work, name=f"edgetune-ahead-{len(_workers)}", daemon=True)
            _workers.append(worker)
            worker.start()
        _cond.notify_all()


def cancel(owner: Hashable | None = None) -> int:
    """Drop the queued jobs of `owner` (every queued job: None) and wait for its running
    ones to finish (a compile cleans up its scratch folder: a daemon thread stopped at exit
    would not); what they queue meanwhile is dropped too, and `stopping` tells them to end.
    Returns how many were dropped."""
    with _cond:
        _cancelling.append(owner)
        try:
            dropped = 0
            while True:
                kept = [(o, job) for o, job in _queue if owner is not None and o != owner]
                dropped += len(_queue) - len(kept)
                _queue.clear()
                _queue.extend(kept)
                if not any(owner is None or o == owner for o in _running):
                    return dropped
                _cond.wait()
        finally:
            _cancelling.remove(owner)


def searching() -> bool:
    """Whether a search waits on scores now (a job working in steps gives way)."""
    with _cond:
        return _waiting > 0


def stopping(owner: Hashable) -> bool:
    """Whether `owner`'s jobs are being cancelled (a job working in steps ends)."""
    with _cond:
        return None in _cancelling or owner in _cancelling


def busy(owner: Hashable | None = None) -> int:
    """Jobs of `owner` (of anyone: None) queued or running."""
    with _cond:
        return sum(1 for o, _ in _queue if owner is None or o == owner) + sum(
            1 for o in _running if owner is None or o == owner)


@contextmanager
def foreground() -> Iterator[None]:
    """Mark a search waiting on its own work: no queued job starts meanwhile."""
    global _waiting
    with _cond:
        _waiting += 1
    try:
        yield
    finally:
        with _cond:
            _waiting -= 1
            _cond.notify_all()


def _work() -> None:
    while True:
        with _cond:
            while not _queue or _waiting:
                _cond.wait()
            owner, job = _queue.popleft()
            _running.append(owner)
        try:
            job()
        except Exception:  # noqa: BLE001 - see the module: the search meets the error itself
            pass
        finally:
            with _cond:
                _running.remove(owner)
                _cond.notify_all()
