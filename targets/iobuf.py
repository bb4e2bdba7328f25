"""The I/O block: a kernel's inputs, output slots and scalar parameters as binary images
(layout documented in firmware/common/harness.h).

A block has one or two segments. Segment 0 holds the header, the buffer table, the
parameters and the activations; when a placement puts the weights in another memory region
they form segment 1, loaded at that region's address. Each table entry names the segment
of its buffer and the buffer's offset inside it.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from edgetune.codegen import KernelIO
from edgetune.codegen.placement import GUARD_BYTE, GUARD_BYTES, aligned, header_bytes
from edgetune.hal import Placement, Target
from edgetune.tuner import Outcome

from .toolchain import MeasureError

MAGIC = 0x4F495445  # "ETIO"
VERSION = 2



@dataclass(frozen=True)
class IoPlan:
    """Where a workload's buffers go: the memory region of each segment (segment 0 first;
    "" where the target places nothing, e.g. the host) and the segment of each buffer."""

    regions: tuple[str, ...]
    segment_of: tuple[int, ...]

    @staticmethod
    def single(io: KernelIO, region: str = "") -> "IoPlan":
        return IoPlan((region,), (0,) * len(io.buffers))

    def region_of(self, group: str) -> str:
        """The region of "weights" or "activations" (the activations' is segment 0's)."""
        return self.regions[1] if group == "weights" and len(self.regions) > 1 else self.regions[0]


def plan_io(target: Target, io: KernelIO, placement: Placement | None) -> IoPlan:
    """Segments for a placement (None: the target's default). Raises a TOO_LARGE
    MeasureError when a segment does not fit its region."""
    if not target.placement_regions:
        return IoPlan.single(io)
    if placement is None:
        region = target.place_buffers(block_size(io))
        if region is None:
            raise MeasureError(Outcome.TOO_LARGE, f"I/O block of {block_size(io)} bytes fits no region of {target.name}")
        return IoPlan.single(io, region.name)
    split = placement.weights != placement.activations and any(b.weight for b in io.buffers)
    plan = (IoPlan((placement.activations, placement.weights), tuple(int(b.weight) for b in io.buffers)) if split
            else IoPlan.single(io, placement.activations))
    for segment, (region, size) in enumerate(zip(plan.regions, segment_sizes(io, plan))):
        if size > target.io_capacity(region):
            what = "I/O block" if len(plan.regions) == 1 else ("activations and header", "weights")[segment]
            raise MeasureError(Outcome.TOO_LARGE, f"{what} of {size} bytes exceed the {target.io_capacity(region)} "
                                                  f"bytes {target.name} has free in {region}")
    return plan


def _starts(io: KernelIO, plan: IoPlan) -> list[int]:
    """Where each segment's buffers begin: after the header (segment 0)."""
    return [header_bytes(len(io.buffers), len(io.params))] + [0] * (len(plan.regions) - 1)


def layout(io: KernelIO, plan: IoPlan | None = None) -> list[int]:
    """Offset of each buffer inside its segment: each after GUARD_BYTES of guard, 16-byte
    aligned, the guard after the last one closing its segment."""
    plan = plan or IoPlan.single(io)
    ends = _starts(io, plan)
    offsets = []
    for buf, segment in zip(io.buffers, plan.segment_of):
        offsets.append(ends[segment] + GUARD_BYTES)
        ends[segment] = aligned(ends[segment] + GUARD_BYTES + buf.data.nbytes)
    return offsets


def segment_sizes(io: KernelIO, plan: IoPlan | None = None) -> list[int]:
    plan = plan or IoPlan.single(io)
    sizes = _starts(io, plan)
    for buf, segment in zip(io.buffers, plan.segment_of):
        sizes[segment] += GUARD_BYTES + aligned(buf.data.nbytes)
    return [size + GUARD_BYTES if size else size for size in sizes]


def block_size(io: KernelIO) -> int:
    """Bytes of the whole block in one segment."""
    return segment_sizes(io)[0]


def pack_segments(io: KernelIO, plan: IoPlan) -> list[bytes]:
    offsets = layout(io, plan)
    out = [bytearray([GUARD_BYTE]) * size for size in segment_sizes(io, plan)]  # guards everywhere, then
    header = header_bytes(len(io.buffers), len(io.params))
    out[0][:header] = bytes(header)
    for buf, segment, off in zip(io.buffers, plan.segment_of, offsets):
        out[segment][off:off + buf.data.nbytes] = bytes(buf.data.nbytes)  # outputs start zeroed, as before
    struct.pack_into("<4I", out[0], 0, MAGIC, VERSION, len(io.buffers), len(io.params))
    pos = 16
    for buf, segment, off in zip(io.buffers, plan.segment_of, offsets):
        struct.pack_into("<4I", out[0], pos, segment, off, buf.data.nbytes, 1 if buf.is_output else 0)
        pos += 16
    for _, value in io.params:
        struct.pack_into("<i", out[0], pos, value)
        pos += 4
    # Every buffer travels with its contents: an output's are zeros, or an in/out buffer's
    # starting values (tune_kernel's arguments that have an answer, as Kernel Tuner passes them).
    for buf, segment, off in zip(io.buffers, plan.segment_of, offsets):
        raw = np.ascontiguousarray(buf.data).astype(buf.data.dtype.newbyteorder("<")).tobytes()
        out[segment][off:off + len(raw)] = raw
    return [bytes(segment) for segment in out]


def pack(io: KernelIO) -> bytes:
    """The whole block as one segment (the host's harness reads it from a file)."""
    return pack_segments(io, IoPlan.single(io))[0]


def input_ends(io: KernelIO, plan: IoPlan) -> list[int]:
    """Per segment, the bytes up to the end of its last input buffer (segment 0: at least
    the header): what must travel to a board; output buffers are zeroed there (a serial
    board does not check the guard bytes: it is sent none past its last input)."""
    ends = _starts(io, plan)
    for buf, segment, off in zip(io.buffers, plan.segment_of, layout(io, plan)):
        if not buf.is_output:
            ends[segment] = max(ends[segment], off + buf.data.nbytes)
    return ends


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
