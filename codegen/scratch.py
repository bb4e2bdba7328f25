"""Where a kernel variant's static scratch lives (im2col rows, padded copies, packing slivers,
unfused accumulators; docs/model-export.md, "Scratch").

A template declares each scratch buffer through `scratch_array(ctype, name, size_c, count,
align)`: `size_c` is the C expression of its element count (the template's own constants),
`count` the same number in Python. How it is declared depends on the render:

- standalone (the tuning harness, `edgetune export`): the variant's own static array, in the
  target's scratch section, exactly as the templates always declared it;
- in a model module, in the arena: an offset from `<pointer>`, a pointer of the variant's
  own that the module sets (`<pointer>_at(area)`) before each call to the bytes of the arena
  its memory plan keeps free while that layer runs (as TFLite Micro plans its operators'
  scratch buffers: app/model/memory_plan.py). The pointer is static and its address never
  taken, so the compiler knows no store of the kernel changes it and loads it once (one the
  other files could see would be loaded again after every int8 store, which may alias it);
- in a model module, static (a template asks so with `arena=False`, where addressing its
  buffers from a pointer costs instructions): an offset of one area the module defines,
  `<shared>`. The layers run one after another and every variant writes its scratch before
  it reads it, so each lays these buffers out from offset 0 of the same area, and the area
  is as large as the largest variant's need, not the sum of them.

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
    offset: int  # from the start of the shared area (or of the layer's scratch in the arena)
    in_arena: bool = False

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
    module's static area and `pointer` the variant's pointer into the arena ("" for both: the
    variant's own static arrays); `attribute` is the scratch section's attribute text
    (" __attribute__((section(...)))" or "")."""

    def __init__(self, attribute: str, shared: str = "", pointer: str = ""):
        for name in (shared, pointer):
            if name and not IDENTIFIER.fullmatch(name):
                raise ScratchError(f"shared scratch {name!r} is not a C identifier")
        if pointer and not shared:
            raise ScratchError(f"scratch pointer {pointer!r} without the module's static area")
        self.attribute = attribute
        self.shared = shared
        self.pointer = pointer
        self.buffers: list[ScratchBuffer] = []

    def _need(self, in_arena: bool) -> int:
        return max((b.end for b in self.buffers if b.in_arena == in_arena), default=0)

    @property
    def nbytes(self) -> int:
        """What the variant needs of the module's static area (0: none)."""
        return self._need(False)

    @property
    def arena_nbytes(self) -> int:
        """What the variant needs of scratch in the arena (0: none)."""
        return self._need(True)

    @property
    def align(self) -> int:
        """The alignment a shared area needs for this variant's buffers."""
        return max((max(b.align, VECTOR_ALIGN) for b in self.buffers), default=VECTOR_ALIGN)

    def array(self, ctype: str, name: str, size_c: str, count: int, align: int = 0, arena: bool = True) -> str:
        """The C declaration of one buffer; called by the templates. `arena=False` keeps it
        out of the arena in a module (the static area)."""
        if ctype not in CTYPE_BYTES or not IDENTIFIER.fullmatch(name) or int(count) < 1:
            raise ScratchError(f"scratch buffer {name!r}: {count} x {ctype!r}")
        in_arena = bool(arena and self.pointer)
        offset = _aligned(self._need(in_arena), max(align, VECTOR_ALIGN))
        first = not any(b.in_arena == in_arena for b in self.buffers)
        self.buffers.append(ScratchBuffer(name, ctype, int(count), align, offset, in_arena))
        if not self.shared:
            aligned = f" __attribute__((aligned({align})))" if align else ""
            return f"static {ctype} {name}[{size_c}]{aligned}{self.attribute};"
        if in_arena:
            setter = "" if not first else (
                "/* This layer's scratch in the module's arena, set by the module before each call. */\n"
                f"static uint8_t *{self.pointer};\nvoid {self.pointer}_at(uint8_t *area);\n"
                f"void {self.pointer}_at(uint8_t *area) {{ {self.pointer} = area; }}\n")
            return (f"{setter}/* {size_c} {ctype} at byte {offset} of this layer's scratch in the arena */\n"
                    f"#define {name} (({ctype} *)({self.pointer} + {offset}))")
        # The area is the module's (<name>.c); declared here too, so the source needs no header.
        extern = f"extern uint8_t {self.shared}[];\n" if first else ""
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
