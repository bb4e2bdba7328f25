"""Compiled code read in reader processes (edgetune.read_pool): the same features as a read
in the process itself, and a pool whose readers died dropped and the read done here; and
reads kept in the cache folder (targets.code_features.cached_read)."""
from __future__ import annotations

import os
import signal
import time

from edgetune import read_pool
from edgetune.targets import code_features
from edgetune.targets.code_features import Disassembly, read_features
from test_static_profile import CALLS

# A kernel calling a helper twice (relocations name the calls): its profile counts the calls.
CODE = Disassembly(CALLS, a64=False, entry="kernel")


def test_a_read_in_a_reader_process_gives_the_features_read_here():
    try:
        here = read_features(CODE)
        assert here["profile_instructions"] == 4 + 2 * 2
        assert read_pool.read_in_parallel(CODE, 2) == here
        assert read_pool._POOLS[2]._processes  # it went to the pool's readers
        assert read_pool.read_in_parallel(CODE, 1) == here  # one job: read here, no pool
        assert 1 not in read_pool._POOLS
    finally:
        read_pool.shut_readers()
    assert not read_pool._POOLS


def test_a_pool_whose_readers_died_is_dropped_and_the_read_done_here():
    try:
        here = read_features(CODE)
        read_pool.read_in_parallel(CODE, 2)
        broken = read_pool._POOLS[2]
        reader = next(iter(broken._processes.values()))  # one reader killed breaks the pool
        os.kill(reader.pid, signal.SIGKILL)
        reader.join()
        deadline = time.monotonic() + 30
        while not broken._broken and time.monotonic() < deadline:
            time.sleep(0.01)  # the pool's own thread notices the death (a read meanwhile may still succeed)
        assert broken._broken
        assert read_pool.read_in_parallel(CODE, 2) == here
        assert read_pool._POOLS.get(2) is not broken
        assert read_pool.read_in_parallel(CODE, 2) == here  # a new pool serves the next read
        assert read_pool._POOLS[2] is not broken
    finally:
        read_pool.shut_readers()


def test_a_read_is_kept_in_the_cache_folder_under_the_code_and_the_readers_digest(tmp_path, monkeypatch):
    """A search resumed, or another process on the same cache, reads each candidate's code
    once; other code, or a change to the reading modules, is read again."""
    monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / "cache"))
    reads = []

    def counted(code):
        reads.append(code.text)
        return read_features(code)

    first = code_features.cached_read(CODE, counted)
    assert first == read_features(CODE) and len(reads) == 1
    assert code_features.cached_read(CODE, counted) == first and len(reads) == 1  # from the folder
    assert list((tmp_path / "cache" / "variants" / "features").glob("*/*"))
    other = Disassembly(CALLS.replace("adds\tr0, #1", "adds\tr0, #2"), a64=False, entry="kernel")
    code_features.cached_read(other, counted)
    assert len(reads) == 2
    monkeypatch.setattr(code_features, "reader_digest", lambda: "another reader")
    assert code_features.cached_read(CODE, counted) == first and len(reads) == 3
