"""A session with a board over a byte stream, in the edgetune serial protocol.

`BoardLink` wraps anything with pyserial's interface (`read`, `write`, `in_waiting`,
`timeout`): a real port or a `socket://` URL to QEMU's emulated UART. Every read has a
deadline; a request whose reply is lost or damaged is sent again after a resynchronisation
(drain, then enough filler bytes to complete any frame the board is still collecting), a
bounded number of times.
"""
from __future__ import annotations

import time
from typing import Callable

import serial

from .serialproto import (HELLO_REQUEST, LOAD_REPLY, LOAD_REQUEST, OVERHEAD, PROTOCOL_MAX_PAYLOAD, READ_REPLY,
                          READ_REQUEST, REPLY_BIT, RUN_DONE, RUN_REPLY, RUN_REQUEST, RUN_STARTED, RUN_VARIANT_REQUEST,
                          TRANSPORT_ERRORS, VERSION, Cycles, ErrorReply, Frame, FrameParser, Hello, MsgType, ProtocolError)

QUIET_S = 0.05  # a drain ends after this long without a byte ...
DRAIN_LIMIT_S = 1.0  # ... or after this long in total


class LinkError(Exception):
    """The conversation with the board failed."""


class LinkTimeout(LinkError):
    """No intact reply within the deadline, after every retry."""


class LinkClosed(LinkError):
    """The port closed under us (QEMU exited, a USB adapter vanished)."""


class BoardRefused(LinkError):
    """The board answered with an error reply."""

    def __init__(self, error: ErrorReply):
        super().__init__(f"the board refused: {error.describe()}")
        self.error = error


class BoardReset(LinkError):
    """The board lost the session: it was reset (power, watchdog, a debugger) under us."""


class VersionMismatch(LinkError):
    """The board speaks another version of the protocol."""


class BoardLink:
    def __init__(self, port, name: str, reply_timeout_s: float, retries: int, session: int = 1,
                 clock: Callable[[], float] = time.monotonic):
        if not 0 < session < 1 << 32:
            raise ValueError(f"session token {session} is not a nonzero 32-bit value")
        self.port, self.name, self.session = port, name, session
        if port.write_timeout is None:  # a write must not block forever on a full buffer either
            port.write_timeout = reply_timeout_s
        self.reply_timeout_s, self.retries = reply_timeout_s, retries
        self.clock = clock
        self.parser = FrameParser()
        self.pending: list[Frame] = []  # decoded, not yet consumed
        self.max_payload = PROTOCOL_MAX_PAYLOAD  # until the board's HELLO says otherwise
        self.retransmissions = 0
        self.run_started = False  # the last RUN was acknowledged (the kernel began)
        self._seq = 0

    # --- bytes -------------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        try:
            self.port.write(data)
            self.port.flush()
        except serial.SerialTimeoutException:
            raise LinkTimeout(f"{self.name}: writing to the port timed out") from None
        except (serial.SerialException, OSError) as exc:
            raise LinkClosed(f"{self.name}: the port failed while writing ({exc})") from None

    def _read_some(self, wait_s: float) -> bytes:
        """Wait up to wait_s for a byte, then take whatever else has arrived (pyserial's
        socket:// reports at most 1 byte waiting, so asking in_waiting would go byte by byte)."""
        try:
            self.port.timeout = max(0.001, wait_s)
            first = self.port.read(1)
            if not first:
                return b""
            self.port.timeout = 0
            return first + self.port.read(4096)
        except (serial.SerialException, OSError) as exc:
            raise LinkClosed(f"{self.name}: the port closed ({exc})") from None

    def _drain(self) -> None:
        start = last = self.clock()
        while self.clock() - last < QUIET_S and self.clock() - start < DRAIN_LIMIT_S:
            if self._read_some(QUIET_S):
                last = self.clock()
        self.parser = FrameParser()
        self.pending = []

    def resync(self) -> None:
        """Bring both ends back to "scanning for a sync pair": drop what is in flight, then
        send zeros (never a sync byte) long enough to complete any frame the board is still
        collecting, whose CRC then fails and is discarded."""
        self._drain()
        self._write(bytes(self.max_payload + OVERHEAD))
        self._drain()

    # --- frames ------------------------------------------------------------------------------
    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFF
        return self._seq

    def _await(self, seqs: set[int], reply_type: int, timeout_s: float) -> Frame:
        """The first intact frame answering one of `seqs`; anything else is stale and skipped."""
        deadline = self.clock() + timeout_s
        while True:
            while self.pending:
                frame = self.pending.pop(0)
                if frame.version != VERSION:
                    raise VersionMismatch(f"{self.name}: the board speaks protocol version {frame.version}; "
                                          f"this edgetune speaks {VERSION}")
                if frame.seq in seqs and frame.type in (reply_type, MsgType.ERROR):
                    return frame
            left = deadline - self.clock()
            if left <= 0:
                raise LinkTimeout(f"{self.name}: no reply within {timeout_s:.1f} s")
            self.pending.extend(self.parser.feed(self._read_some(min(left, 0.1))))

    def _exchange(self, type_: MsgType, payload: bytes = b"") -> Frame:
        """Send a request and return its reply, resending after lost or damaged frames."""
        timeout_s = self.reply_timeout_s
        problem = "no reply"
        for attempt in range(self.retries + 1):
            if attempt:
                self.retransmissions += 1
                self.resync()
            seq = self._next_seq()
            self._write(Frame(type_, seq, payload).encode())
            try:
                reply = self._await({seq}, type_ | REPLY_BIT, timeout_s)
            except LinkTimeout:
                problem = f"no reply within {timeout_s:.1f} s"
                continue
            if reply.type == MsgType.ERROR:
                error = ErrorReply.decode(reply.payload)
                if error.code in TRANSPORT_ERRORS:
                    problem = f"the board saw a damaged request ({error.describe()})"
                    continue
                raise BoardRefused(error)
            return reply
        raise LinkTimeout(f"{self.name}: {type_.name} got no intact reply in {self.retries + 1} attempts ({problem})")

    # --- requests ----------------------------------------------------------------------------
    def hello(self, patience_s: float = 0.0) -> Hello:
        """Open (or re-establish) the session; the reply's previous_session tells whether
        the board kept it since the last HELLO (0: it was reset). A board that just booted
        gets `patience_s`: HELLO is repeated every reply timeout until then."""
        saved = self.retries
        self.retries = max(self.retries, int(patience_s / self.reply_timeout_s))
        try:
            hello = Hello.decode(self._exchange(MsgType.HELLO, HELLO_REQUEST.pack(self.session)).payload)
        except ProtocolError as exc:
            raise LinkError(f"{self.name}: {exc}") from None
        finally:
            self.retries = saved
        self.max_payload = hello.max_payload
        return hello

    def load(self, data: bytes, base_offset: int = 0) -> None:
        chunk = self.max_payload - LOAD_REQUEST.size
        for start in range(0, len(data), chunk):
            piece = data[start:start + chunk]
            offset = base_offset + start
            reply = self._exchange(MsgType.LOAD, LOAD_REQUEST.pack(offset) + piece)
            if reply.payload[:LOAD_REPLY.size] != LOAD_REPLY.pack(offset, len(piece)):
                raise LinkError(f"{self.name}: LOAD at {offset} was acknowledged for another range")

    def read(self, offset: int, length: int) -> bytes:
        chunk = self.max_payload - READ_REPLY.size
        out = bytearray()
        while len(out) < length:
            n = min(chunk, length - len(out))
            at = offset + len(out)
            reply = self._exchange(MsgType.READ, READ_REQUEST.pack(at, n))
            if len(reply.payload) != READ_REPLY.size + n or READ_REPLY.unpack_from(reply.payload)[0] != at:
                raise LinkError(f"{self.name}: READ at {at} returned another range")
            out += reply.payload[READ_REPLY.size:]
        return bytes(out)

    def run(self, runs: int, timeout_s: float, variant: int = 0) -> None:
        """Run the kernel (the image's `variant`-th) `runs` times. The board acknowledges at
        once (RUN_STARTED) and reports when done (RUN_DONE) or with an error; no DONE within
        `timeout_s` raises LinkTimeout. RUN is idempotent, so a retransmission after a lost
        acknowledgement is harmless: a DONE for any RUN sent here ends the wait."""
        sent: set[int] = set()
        self.run_started = False
        payload = RUN_VARIANT_REQUEST.pack(runs, variant) if variant else RUN_REQUEST.pack(runs)
        for attempt in range(self.retries + 1):
            if attempt:
                self.retransmissions += 1
                self.resync()
                self.require_session()  # a RUN on a board that lost its I/O block is meaningless
            seq = self._next_seq()
            sent.add(seq)
            self._write(Frame(MsgType.RUN, seq, payload).encode())
            try:
                frame = self._await(sent, MsgType.RUN | REPLY_BIT, self.reply_timeout_s)
            except LinkTimeout:
                continue
            phase = self._run_phase(frame)
            if phase is None:
                continue  # a damaged request: send it again
            if phase == RUN_STARTED:
                self.run_started = True
                frame = self._await(sent, MsgType.RUN | REPLY_BIT, timeout_s)
                while self._run_phase(frame) == RUN_STARTED:  # a retransmission's own ack
                    frame = self._await(sent, MsgType.RUN | REPLY_BIT, timeout_s)
            return
        raise LinkTimeout(f"{self.name}: RUN was never acknowledged in {self.retries + 1} attempts")

    def _run_phase(self, frame: Frame) -> int | None:
        if frame.type == MsgType.ERROR:
            error = ErrorReply.decode(frame.payload)
            if error.code in TRANSPORT_ERRORS:
                return None
            raise BoardRefused(error)
        if len(frame.payload) != RUN_REPLY.size:
            raise ProtocolError(f"RUN reply of {len(frame.payload)} bytes, expected {RUN_REPLY.size}")
        phase, _ = RUN_REPLY.unpack_from(frame.payload)
        if phase not in (RUN_STARTED, RUN_DONE):
            raise LinkError(f"{self.name}: RUN reply with unknown phase {phase}")
        return phase

    def cycles(self) -> Cycles:
        try:
            return Cycles.decode(self._exchange(MsgType.CYCLES).payload)
        except ProtocolError as exc:
            raise LinkError(f"{self.name}: {exc}") from None

    def require_session(self) -> None:
        """Raise BoardReset unless the board still holds this link's session."""
        hello = self.hello()
        if hello.previous_session != self.session:
            raise BoardReset(f"{self.name}: the board was reset (it no longer holds the session)")

    def probe(self) -> Hello | None:
        """After a silence: does the board answer at all? (One resync, one HELLO.)"""
        saved = self.retries
        self.retries = 0
        try:
            self.resync()
            return self.hello()
        except LinkTimeout:
            return None
        finally:
            self.retries = saved

