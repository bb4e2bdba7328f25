"""Reading compiled code in other processes, so that a live `transfer+code` reads `jobs`
candidates at once.

Scoring a candidate is a compile (gcc or clang: another process already) and a read of its
disassembly (targets.code_features.read_features: the static profile, pure Python, 0.05-1 s
a variant and most of the time, DS-CNN's depthwise layer the slowest). Threads compile side
by side, but they read one at a time under the interpreter's lock; here each read goes to a
process of a small pool instead, the disassembly's text in and its features out.

The pool's processes are forked, not spawned: a spawned process imports the main module
again, and a user's script without a `__main__` guard would run its own tuning in every
reader; a forked one has every module loaded already and starts in milliseconds. What runs
in it is one pure function of a string, which takes no lock another thread of the parent
could have held when it forked. A pool that breaks (a reader killed) is dropped and the
read done here: the score is the same either way.
"""
from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from edgetune.targets.code_features import Disassembly, read_features

_POOLS: dict[int, ProcessPoolExecutor] = {}  # by process count
_LOCK = threading.Lock()


def read_in_parallel(code: Disassembly, jobs: int) -> dict[str, float]:
    """read_features(code), in one of `jobs` reader processes when jobs > 1."""
    if jobs <= 1:
        return read_features(code)
    pool = _pool(jobs)
    try:
        return pool.submit(read_features, code).result()
    except BrokenProcessPool:
        with _LOCK:
            if _POOLS.get(jobs) is pool:
                del _POOLS[jobs]
        return read_features(code)


def _pool(jobs: int) -> ProcessPoolExecutor:
    with _LOCK:
        pool = _POOLS.get(jobs)
        if pool is None:
            pool = _POOLS[jobs] = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"))
        return pool


def shut_readers() -> None:
    """Stop the reader processes (a later read starts them again)."""
    with _LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.shutdown(wait=True, cancel_futures=True)
