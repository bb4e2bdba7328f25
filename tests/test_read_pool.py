"""Compiled code read in reader processes (edgetune.read_pool): the same features as a read
in the process itself, and a pool whose readers died dropped and the read done here; and
reads kept in the cache folder (targets.code_features.cached_read)."""
from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor

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
        reader = read_pool._POOLS[2].idle.get_nowait()  # it went to a reader, which served it
        assert reader.served == 1 and reader.process.poll() is None
        read_pool._POOLS[2].idle.put(reader)
        assert read_pool.read_in_parallel(CODE, 1) == here  # one job: read here, no pool
        assert 1 not in read_pool._POOLS
    finally:
        read_pool.shut_readers()
    assert not read_pool._POOLS
    assert reader.process.wait(timeout=30) == 0  # shut: it ended at the end of its input


def test_a_reader_that_died_is_replaced_and_the_read_done_here():
    try:
        here = read_features(CODE)
        read_pool.read_in_parallel(CODE, 2)
        pool = read_pool._POOLS[2]
        dead = pool.idle.get_nowait()
        os.kill(dead.process.pid, signal.SIGKILL)
        dead.process.wait()
        pool.idle.put(dead)
        assert read_pool.read_in_parallel(CODE, 2) == here  # read here
        assert pool.usable and pool.started == 0  # it had served: a new reader may start
        assert read_pool.read_in_parallel(CODE, 2) == here
        fresh = pool.idle.get_nowait()
        assert fresh is not dead and fresh.served == 1
        pool.idle.put(fresh)
    finally:
        read_pool.shut_readers()


def test_readers_that_cannot_read_leave_every_read_here(monkeypatch):
    # a reader that dies on its first read (it cannot import edgetune, say) is not started again
    monkeypatch.setattr(read_pool.sys, "executable", "/bin/true")
    try:
        here = read_features(CODE)
        assert [read_pool.read_in_parallel(CODE, 2) for _ in range(3)] == [here] * 3
        pool = read_pool._POOLS[2]
        assert not pool.usable and pool.started == 0
    finally:
        read_pool.shut_readers()


def test_reads_waiting_for_a_reader_go_on_when_the_readers_are_lost():
    """More reads than readers: those waiting are woken when a reader is lost, and read."""
    try:
        here = read_features(CODE)
        with ThreadPoolExecutor(max_workers=6) as threads:
            first = list(threads.map(lambda _: read_pool.read_in_parallel(CODE, 2), range(12)))
            pool = read_pool._POOLS[2]
            for reader in [pool.idle.get_nowait() for _ in range(pool.started)]:
                if reader is not None:
                    os.kill(reader.process.pid, signal.SIGKILL)
                    reader.process.wait()
                    pool.idle.put(reader)
            second = list(threads.map(lambda _: read_pool.read_in_parallel(CODE, 2), range(12)))
        assert first == second == [here] * 12
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
