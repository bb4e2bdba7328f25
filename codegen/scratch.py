"""Where a kernel variant's static scratch lives (im2col rows, padded copies, packing slivers,
unfused accumulators; docs/model-export.md, "Scratch").

A template declares each scratch buffer through `scratch_array(ctype, name, size_c, count,
align)`: `size_c` is the C expression of its element count (the template's own constants),
`count` the same number in Python. How it is declared depends on the render:

- standalone (the tuning harness, `edgetune export`): the variant's own static array, in the
  target's scratch section, exactly as the templates always declared it;
- shared (a model module): a pointer to an offset of one area the module defines,
  `<name>_scratch`. The layers run one after another and every variant writes its scratch
  before it reads it, so each lays its buffers out from offset 0 of the same area, and the
  area is as large as the largest variant's need, not the sum of them.

Either way the layout records the buffers, so the renderer knows each variant's need.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# A 128-bit vector (Helium, NEON, SSE): every shared buffer starts on such a boundary, so a
# vector load of its first bytes is aligned wherever the variant was measured with its own array.
VECTOR_ALIGN = 16
CTYPE_BYTES = {"int8_t": 1, "uint8_t": 1, "int16_t": 2, "int32_t": 4, "float": 4}
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ScratchError(ValueError):
    """A template declared a scratch buffer the layout cannot place (a bug in the template)."""


@dataclass(frozen=True)
class ScratchBuffer:
    name: str
    ctype: str
    count: int
    align: int  # the buffer's own alignment request (0: its type's)
    offset: int  # from the start of the shared area

    @property
    def nbytes(self) -> int:
        return self.count * CTYPE_BYTES[self.ctype]

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


def _aligned(n: int, align: int) -> int:
    return -(-n // align) * align


class ScratchLayout:
    """The scratch buffers of one variant's render, in declaration order. `shared` names the
    area they are placed in ("" for the variant's own static arrays); `attribute` is the
    scratch section's attribute text (" __attribute__((section(...)))" or "")."""

    def __init__(self, attribute: str, shared: str = ""):
        if shared and not IDENTIFIER.fullmatch(shared):
            raise ScratchError(f"shared scratch {shared!r} is not a C identifier")
        self.attribute = attribute
        self.shared = shared
        self.buffers: list[ScratchBuffer] = []

    @property
    def nbytes(self) -> int:
        """What the variant needs of a shared area (0: no scratch)."""
        return max((b.end for b in self.buffers), default=0)

    @property
    def align(self) -> int:
        """The alignment a shared area needs for this variant's buffers."""
        return max((max(b.align, VECTOR_ALIGN) for b in self.buffers), default=VECTOR_ALIGN)

    def array(self, ctype: str, name: str, size_c: str, count: int, align: int = 0) -> str:
        """The C declaration of one buffer; called by the templates."""
        if ctype not in CTYPE_BYTES or not IDENTIFIER.fullmatch(name) or int(count) < 1:
            raise ScratchError(f"scratch buffer {name!r}: {count} x {ctype!r}")
        offset = _aligned(self.nbytes, max(align, VECTOR_ALIGN))
        self.buffers.append(ScratchBuffer(name, ctype, int(count), align, offset))
        if not self.shared:
            aligned = f" __attribute__((aligned({align})))" if align else ""
            return f"static {ctype} {name}[{size_c}]{aligned}{self.attribute};"
        # The area is the module's (<name>.c); declared here too, so the source needs no header.
        extern = f"extern uint8_t {self.shared}[];\n" if len(self.buffers) == 1 else ""
        return (f"{extern}/* {size_c} {ctype} at byte {offset} of {self.shared}, the module's scratch, which "
                f"its layers share */\n#define {name} (({ctype} *)({self.shared} + {offset}))")


@dataclass(frozen=True)
class SharedScratch:
    """A module's one scratch area: what its largest user needs, with the alignment its most
    demanding buffer needs; `unshared` is what the variants' own arrays would take together."""
    nbytes: int = 0
    align: int = VECTOR_ALIGN
    largest: str = ""  # the variant that needs the most
    users: int = 0  # the variants that use it
    unshared: int = 0


def shared_scratch(needs: dict[str, tuple[int, int]]) -> SharedScratch:
    """The area for variants needing (bytes, alignment) each; empty without any need."""
    needs = {fn: need for fn, need in needs.items() if need[0] > 0}
    if not needs:
        return SharedScratch()
    largest = max(needs, key=lambda fn: needs[fn][0])
    return SharedScratch(needs[largest][0], max(a for _, a in needs.values()), largest, len(needs),
                         sum(b for b, _ in needs.values()))


__all__ = ["ScratchBuffer", "ScratchError", "ScratchLayout", "SharedScratch", "VECTOR_ALIGN", "shared_scratch"]
