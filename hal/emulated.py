"""The memory QEMU's emulated machines map, for checking a board file against its machine.

A board file describes where its memory is; QEMU's machine decides what is there. A region
the machine does not map (an M7 board's SRAM at 0x2400_0000 on `mps2-an500`, which maps
none there) makes every trial fault as a HardFault with exit 0, and nothing says why. So
the loader checks each region of a QEMU target against its machine's map, naming the
region. Machines not in this table are not checked (nothing is known of them here).

The ranges are what QEMU 7.2's monitor lists as RAM or ROM (`info mtree -f`, the CPU's
address space), aliases included: AN386 and AN500 mirror each 4 MiB SSRAM in the next
4 MiB; the SSE-300 of AN547 maps each memory twice (non-secure, and secure at +0x1000_0000),
its SRAM, SRAM2, QSPI and DDR behind memory protection controllers.
"""
from __future__ import annotations

MiB = 1 << 20

# machine -> ((name, base, size), ...)
EMULATED_MEMORY: dict[str, tuple[tuple[str, int, int], ...]] = {
    "mps2-an386": (("ssram1", 0x0000_0000, 8 * MiB), ("blockram", 0x0100_0000, 64 * 1024),
                   ("ssram23", 0x2000_0000, 8 * MiB), ("psram", 0x2100_0000, 16 * MiB)),
    "mps2-an500": (("ssram1", 0x0000_0000, 8 * MiB), ("ssram23", 0x2000_0000, 8 * MiB),
                   ("psram", 0x6000_0000, 16 * MiB)),
    "mps3-an547": tuple((name + suffix, base + offset, size)
                        for suffix, offset in (("", 0), (" (secure)", 0x1000_0000))
                        for name, base, size in (("itcm", 0x0000_0000, 512 * 1024), ("sram", 0x0100_0000, 2 * MiB),
                                                 ("dtcm", 0x2000_0000, 512 * 1024), ("sram2", 0x2100_0000, 4 * MiB),
                                                 ("qspi", 0x2800_0000, 8 * MiB))) + (("ddr", 0x6000_0000, 2048 * MiB),),
}


def unmapped_problem(machine: str, name: str, base: int, size: int) -> str | None:
    """Why QEMU's `machine` cannot hold region `name` (base, size): None when one of its
    mapped ranges holds the whole region, or when the machine is not in the table."""
    ranges = EMULATED_MEMORY.get(machine)
    if ranges is None or any(start <= base and base + size <= start + length for _, start, length in ranges):
        return None
    mapped = ", ".join(f"{label} {start:#x}-{start + length - 1:#x}" for label, start, length in ranges
                       if "(secure)" not in label)
    return (f"region {name} ({base:#x}-{base + size - 1:#x}) is not memory on QEMU's {machine}, which maps {mapped} "
            "(a board whose memory is elsewhere needs a machine that maps it)")
