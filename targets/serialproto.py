"""The edgetune serial protocol, host side: framing, CRC and the message payloads.

Pure functions and value types, no I/O: docs/serial-protocol.md is the specification and
firmware/common/serial_proto.h its C twin. A frame is

    0xE7 0x5A | version u8 | type u8 | seq u8 | length u16 | payload | crc16 u16

(little-endian), the CRC being CRC-16/CCITT-FALSE over version..payload. The host sends
requests; the board answers each with the request's type | 0x80 and the same seq, or with
an ERROR frame.
"""
from __future__ import annotations

import binascii
import enum
import struct
from dataclasses import dataclass

SYNC = b"\xe7\x5a"
VERSION = 1
HEADER = struct.Struct("<BBBH")  # version, type, seq, payload length (after the sync pair)
HEADER_BYTES = len(SYNC) + HEADER.size
OVERHEAD = HEADER_BYTES + 2  # sync + header + CRC
# No version of the protocol allows longer payloads; anything longer is line noise.
PROTOCOL_MAX_PAYLOAD = 4096
REPLY_BIT = 0x80


class MsgType(enum.IntEnum):
    HELLO = 0x01
    LOAD = 0x02
    RUN = 0x03
    READ = 0x04
    CYCLES = 0x05
    ERROR = 0x7F


class ErrorCode(enum.IntEnum):
    BAD_CRC = 1          # a frame arrived with a wrong CRC (detail: 0)
    BAD_VERSION = 2      # the frame's version is not the board's (detail: that version)
    UNKNOWN_TYPE = 3     # no such request type
    BAD_LENGTH = 4       # payload too long for the board, or the wrong size for the type
    OUT_OF_RANGE = 5     # LOAD/READ outside the I/O area (detail: offset)
    BAD_IO = 6           # the I/O block does not match the compiled workload
    BAD_ARGUMENT = 7     # e.g. RUN with 0 or more than max_runs runs (detail: the value)
    NOT_RUN = 8          # CYCLES before any RUN completed since the last LOAD
    KERNEL_FAILED = 9    # the kernel entry returned nonzero (detail: its status)
    FAULT = 10           # the kernel faulted (detail: exception number); the board resets


# Errors that say the request did not arrive intact: the host sends it again.
TRANSPORT_ERRORS = {ErrorCode.BAD_CRC, ErrorCode.BAD_LENGTH}

COUNTER_DWT = 0x01      # HELLO counters bit / count flags bit: DWT CYCCNT implemented and enabled
COUNTER_SYSTICK = 0x02  # SysTick measured this region without wrapping

RUN_STARTED, RUN_DONE = 0, 1


class ProtocolError(Exception):
    """A frame or payload that cannot be decoded."""


def crc16(data: bytes, crc: int = 0xFFFF) -> int:
    """CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, no final xor): the
    standard library's CRC-CCITT (binascii.crc_hqx) started from 0xFFFF."""
    return binascii.crc_hqx(data, crc)


@dataclass(frozen=True)
class Frame:
    type: int
    seq: int
    payload: bytes
    version: int = VERSION

    def encode(self) -> bytes:
        if len(self.payload) > PROTOCOL_MAX_PAYLOAD:
            raise ProtocolError(f"payload of {len(self.payload)} bytes exceeds {PROTOCOL_MAX_PAYLOAD}")
        body = HEADER.pack(self.version, self.type, self.seq & 0xFF, len(self.payload)) + self.payload
        return SYNC + body + struct.pack("<H", crc16(body))


class FrameParser:
    """Finds frames in a byte stream that may hold garbage anywhere.

    Bytes before a sync pair are skipped; a candidate whose length is impossible or whose
    CRC fails is abandoned one byte after its sync, so a real frame hidden inside garbage
    is still found.
    """

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.skipped = 0  # bytes discarded as garbage, for diagnostics

    def feed(self, data: bytes) -> list[Frame]:
        self.buffer.extend(data)
        frames = []
        while True:
            frame = self._next()
            if frame is None:
                return frames
            frames.append(frame)

    def _drop(self, n: int) -> None:
        del self.buffer[:n]
        self.skipped += n

    def _next(self) -> Frame | None:
        while True:
            start = self.buffer.find(SYNC)
            if start < 0:
                # Keep a trailing first sync byte: its partner may be in the next read.
                keep = 1 if self.buffer[-1:] == SYNC[:1] else 0
                self._drop(len(self.buffer) - keep)
                return None
            self._drop(start)
            if len(self.buffer) < HEADER_BYTES:
                return None
            version, type_, seq, length = HEADER.unpack_from(self.buffer, len(SYNC))
            if length > PROTOCOL_MAX_PAYLOAD:
                self._drop(1)
                continue
            if len(self.buffer) < HEADER_BYTES + length + 2:
                # Incomplete: but if noise faked this header, a real frame may already sit
                # complete behind it. Do not wait for bytes that may never come.
                later = self._complete_frame_after(1)
                if later is None:
                    return None
                self._drop(later)
                continue
            frame = self._frame_at(0)
            if frame is None:
                self._drop(1)
                continue
            del self.buffer[:HEADER_BYTES + len(frame.payload) + 2]
            return frame

    def _frame_at(self, start: int) -> Frame | None:
        """The intact frame starting at `start`, or None."""
        if len(self.buffer) < start + HEADER_BYTES or self.buffer[start:start + len(SYNC)] != SYNC:
            return None
        version, type_, seq, length = HEADER.unpack_from(self.buffer, start + len(SYNC))
        end = start + HEADER_BYTES + length
        if length > PROTOCOL_MAX_PAYLOAD or len(self.buffer) < end + 2:
            return None
        (crc,) = struct.unpack_from("<H", self.buffer, end)
        if crc != crc16(bytes(self.buffer[start + len(SYNC):end])):
            return None
        return Frame(type=type_, seq=seq, payload=bytes(self.buffer[start + HEADER_BYTES:end]), version=version)

    def _complete_frame_after(self, start: int) -> int | None:
        at = self.buffer.find(SYNC, start)
        while at >= 0:
            if self._frame_at(at) is not None:
                return at
            at = self.buffer.find(SYNC, at + 1)
        return None


# --- payloads ------------------------------------------------------------------------------
HELLO_REQUEST = struct.Struct("<I")        # session: a nonzero token the board keeps until it resets
HELLO_REPLY = struct.Struct("<BBHIIHIIB")  # version, counters, max_payload, io_base, io_capacity,
#                                            max_runs, image_id, previous session (0 after a reset),
#                                            name length (the name follows)
LOAD_REQUEST = struct.Struct("<I")         # offset (data follows)
LOAD_REPLY = struct.Struct("<IH")          # offset, length stored
RUN_REQUEST = struct.Struct("<H")          # runs (of the image's first variant)
RUN_VARIANT_REQUEST = struct.Struct("<HH")  # runs, variant: an image of several variants (targets/batch.py)
RUN_REPLY = struct.Struct("<BH")           # phase (RUN_STARTED / RUN_DONE), runs
READ_REQUEST = struct.Struct("<IH")        # offset, length
READ_REPLY = struct.Struct("<I")           # offset (data follows)
CYCLES_HEADER = struct.Struct("<H")        # runs (the overhead record, then one per run, follow)
COUNT_RECORD = struct.Struct("<IIB")       # dwt cycles, systick ticks, flags (COUNTER_*)
ERROR_REPLY = struct.Struct("<BBI")        # code, request type, detail


@dataclass(frozen=True)
class Hello:
    version: int
    counters: int
    max_payload: int
    io_base: int
    io_capacity: int
    max_runs: int
    image_id: int
    previous_session: int
    board: str

    @classmethod
    def decode(cls, payload: bytes) -> "Hello":
        fields = _unpack(HELLO_REPLY, payload, "HELLO reply")
        name = payload[HELLO_REPLY.size:HELLO_REPLY.size + fields[-1]]
        if len(name) != fields[-1]:
            raise ProtocolError("HELLO reply: board name is truncated")
        return cls(*fields[:-1], board=name.decode("ascii", errors="replace"))

    def encode(self) -> bytes:
        name = self.board.encode("ascii")
        return HELLO_REPLY.pack(self.version, self.counters, self.max_payload, self.io_base, self.io_capacity,
                                self.max_runs, self.image_id, self.previous_session, len(name)) + name


@dataclass(frozen=True)
class Count:
    """One counted region: what each counter saw, and which of them are usable."""

    dwt: int
    systick: int
    flags: int

    @property
    def dwt_valid(self) -> bool:
        # QEMU 7.2 implements no DWT cycle counter and reads 0 (docs/measurements.md); a real
        # region always takes at least one cycle, so 0 means "not counting".
        return bool(self.flags & COUNTER_DWT) and self.dwt > 0

    @property
    def systick_valid(self) -> bool:
        return bool(self.flags & COUNTER_SYSTICK)


@dataclass(frozen=True)
class Cycles:
    overhead: Count  # an empty region: the cost of starting and stopping the counters
    runs: tuple[Count, ...]

    @classmethod
    def decode(cls, payload: bytes) -> "Cycles":
        (n,) = _unpack(CYCLES_HEADER, payload, "CYCLES reply")
        expected = CYCLES_HEADER.size + (n + 1) * COUNT_RECORD.size
        if len(payload) != expected:
            raise ProtocolError(f"CYCLES reply: {len(payload)} bytes for {n} runs, expected {expected}")
        counts = [Count(*COUNT_RECORD.unpack_from(payload, CYCLES_HEADER.size + i * COUNT_RECORD.size))
                  for i in range(n + 1)]
        return cls(overhead=counts[0], runs=tuple(counts[1:]))


@dataclass(frozen=True)
class ErrorReply:
    code: int
    request: int
    detail: int

    @classmethod
    def decode(cls, payload: bytes) -> "ErrorReply":
        return cls(*_unpack(ERROR_REPLY, payload, "ERROR reply"))

    def describe(self) -> str:
        try:
            name = ErrorCode(self.code).name
        except ValueError:
            name = f"code {self.code}"
        try:
            request = MsgType(self.request).name
        except ValueError:
            request = f"type {self.request:#x}"
        return f"{name} for {request} (detail {self.detail})"


def _unpack(layout: struct.Struct, payload: bytes, what: str) -> tuple:
    if len(payload) < layout.size:
        raise ProtocolError(f"{what}: {len(payload)} bytes, expected at least {layout.size}")
    return layout.unpack_from(payload)
