"""Reading compiled code in other processes, so that a live `transfer+code` reads `jobs`
candidates at once.

Scoring a candidate is a compile (gcc or clang: another process already) and a read of its
disassembly (targets.code_features.read_features: the static profile, pure Python, 0.05-1 s
a variant and most of the time, DS-CNN's depthwise layer the slowest). Threads compile side
by side, but they read one at a time under the interpreter's lock; here each read goes to a
reader process instead, the disassembly in on its stdin and its features out on its stdout
(pickled, length first), a reader serving one read at a time.

A reader is `python -m edgetune.read_pool`, started as a subprocess: not forked. A fork
(multiprocessing's) copies every descriptor the parent holds at that moment, among them the
pipe another thread's subprocess launch waits on until its child has started the tool; the
forked reader keeps that pipe open for its whole life and the launch never returns (seen:
a compile done ahead, edgetune.ahead, hung once in four runs). A spawned multiprocessing
process would import the user's main script again instead. A reader that dies, or fails to
read, leaves the read to this process, which reads it the same way (or meets the error);
readers that die before their first read are not started again.
"""
from __future__ import annotations

import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from typing import BinaryIO

from edgetune.targets.code_features import Disassembly, read_features

_LENGTH = struct.Struct("<Q")


def read_in_parallel(code: Disassembly, jobs: int) -> dict[str, float]:
    """read_features(code), in one of `jobs` reader processes when jobs > 1."""
    if jobs <= 1:
        return read_features(code)
    with _LOCK:
        readers = _POOLS.get(jobs)
        if readers is None:
            readers = _POOLS[jobs] = _Readers(jobs)
    return readers.read(code)


class _Reader:
    """One reader process."""

    def __init__(self):
        # the reader imports edgetune from where this process did
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.process = subprocess.Popen([sys.executable, "-m", "edgetune.read_pool"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.served = 0

    def read(self, code: Disassembly) -> tuple[bool, dict | None]:
        """(True, features), or (False, None) when the read raised there. Raises OSError
        or EOFError when the reader is gone."""
        _send(self.process.stdin, code)
        reply = _receive(self.process.stdout)
        if reply is None:
            raise EOFError("the reader ended")
        self.served += 1
        return reply

    def close(self) -> None:
        try:
            self.process.stdin.close()  # the reader ends at the end of its input
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


class _Readers:
    """Up to `size` readers, started as reads need them. A read waiting for a reader is
    woken (a None in `idle`) when one is lost or the pool closes, and looks again."""

    def __init__(self, size: int):
        self.size, self.started, self.closed, self.usable = size, 0, False, True
        self.idle: queue.SimpleQueue[_Reader | None] = queue.SimpleQueue()
        self.lock = threading.Lock()

    def read(self, code: Disassembly) -> dict[str, float]:
        reader = self._take()
        if reader is None:
            return read_features(code)
        try:
            done, features = reader.read(code)
        except (OSError, EOFError, pickle.UnpicklingError):
            self._lost(reader)
            return read_features(code)
        self._give_back(reader)
        return features if done else read_features(code)  # an error: met here, as it would be

    def _take(self) -> _Reader | None:
        """An idle reader, a new one while there are fewer than `size`, else the next one
        given back; None: read here (no reader can start, or the pool closed)."""
        while self.usable and not self.closed:
            try:
                reader = self.idle.get_nowait()
            except queue.Empty:
                with self.lock:
                    start = self.started < self.size
                    self.started += start
                if start:
                    try:
                        return _Reader()
                    except OSError:
                        self._lost(None)
                        return None
                reader = self.idle.get()
            if reader is not None:
                return reader
        return None

    def _give_back(self, reader: _Reader) -> None:
        with self.lock:
            closed = self.closed
            self.started -= closed
        if closed:
            reader.close()
            self.idle.put(None)
        else:
            self.idle.put(reader)

    def _lost(self, reader: _Reader | None) -> None:
        if reader is not None:
            reader.process.kill()
            reader.close()
        with self.lock:
            self.started -= 1
            if reader is None or not reader.served:
                self.usable = False  # it could not start, or died on its first read: read here
        self.idle.put(None)

    def close(self) -> None:
        with self.lock:
            self.closed = True
        while True:
            try:
                reader = self.idle.get_nowait()
            except queue.Empty:
                break
            if reader is not None:
                reader.close()
        self.idle.put(None)


_POOLS: dict[int, _Readers] = {}  # by reader count
_LOCK = threading.Lock()


def shut_readers() -> None:
    """Stop the reader processes (a later read starts them again); a reader busy now stops
    when its read is done."""
    with _LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()


def _send(stream: BinaryIO, value) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _receive(stream: BinaryIO):
    """The next value, or None at the end of the stream."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(head)
    data = stream.read(length)
    if len(data) < length:
        return None
    return pickle.loads(data)


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """A reader's loop: each disassembly read, until the input ends."""
    while (code := _receive(requests)) is not None:
        try:
            reply = (True, read_features(code))
        except Exception:  # noqa: BLE001 - the parent reads it again and meets the error itself
            reply = (False, None)
        _send(replies, reply)


if __name__ == "__main__":
    # Replies go on a copy of stdout; anything else printing here goes to stderr.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, answers)
