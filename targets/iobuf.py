"""The I/O block: a kernel's inputs, output slots and scalar parameters in one binary image
(layout documented in firmware/common/harness.h)."""
from __future__ import annotations

import struct

import numpy as np

from edgetune.codegen import KernelIO

MAGIC = 0x4F495445  # "ETIO"
VERSION = 1
ALIGN = 16


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def layout(io: KernelIO) -> list[int]:
    """Offsets of each buffer inside the block."""
    offset = _align(16 + 12 * len(io.buffers) + 4 * len(io.params))
    offsets = []
    for buf in io.buffers:
        offsets.append(offset)
        offset = _align(offset + buf.data.nbytes)
    return offsets


def block_size(io: KernelIO) -> int:
    offsets = layout(io)
    return _align(offsets[-1] + io.buffers[-1].data.nbytes) if offsets else 16


def pack(io: KernelIO) -> bytes:
    offsets = layout(io)
    out = bytearray(block_size(io))
    struct.pack_into("<4I", out, 0, MAGIC, VERSION, len(io.buffers), len(io.params))
    pos = 16
    for buf, off in zip(io.buffers, offsets):
        struct.pack_into("<3I", out, pos, off, buf.data.nbytes, 1 if buf.is_output else 0)
        pos += 12
    for _, value in io.params:
        struct.pack_into("<i", out, pos, value)
        pos += 4
    for buf, off in zip(io.buffers, offsets):
        if not buf.is_output:
            raw = np.ascontiguousarray(buf.data).astype(buf.data.dtype.newbyteorder("<")).tobytes()
            out[off:off + len(raw)] = raw
    return bytes(out)


def unpack_outputs(io: KernelIO, raw: bytes) -> list[np.ndarray]:
    """Split the harness's output file into arrays shaped like the output buffers."""
    outputs, pos = [], 0
    for buf in io.outputs():
        n = buf.data.nbytes
        if len(raw) < pos + n:
            raise ValueError(f"output file holds {len(raw)} bytes, expected at least {pos + n}")
        dtype = buf.data.dtype.newbyteorder("<")
        outputs.append(np.frombuffer(raw[pos:pos + n], dtype=dtype).reshape(buf.data.shape).astype(buf.data.dtype))
        pos += n
    if pos != len(raw):
        raise ValueError(f"output file holds {len(raw)} bytes, expected {pos}")
    return outputs
