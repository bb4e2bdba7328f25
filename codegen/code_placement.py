"""Where a module's code and constants live when the firmware's code region cannot hold them
all (issue 28: a MobileNetV2 whose weights and kernels exceed the Cortex-M55's 512 KiB ITCM).

The plan sees the target's memory regions that may hold code or constants: the firmware's code
region first, then every other region that is neither the data region (.data, .bss, stack)
nor a buffer region (`[firmware] io_regions`: arenas and I/O blocks live there), each with its
capacity and its cost from the HAL (`wait_states` per access, the cost model's price of a load
or an instruction fetch from it). Items are placed greedily by modelled benefit, as the
memory plan places tensors by size:

  1. code (each kernel variant's and library operator's function), the hottest per byte
     first, each into the fastest executable region that still holds it;
  2. constants (weights, bias, multiplier and shift tables), the most accessed per byte
     first, each into the fastest readable region that still holds it.
  3. a swap: an array that missed a faster region takes the place of arrays there read no
     more per byte when they are read less in total (first fit alone keeps small, rarely
     read arrays fast while a large, often read one goes slow).

"Fastest" is fewest wait states, then the nearer kind (hal KIND_ORDER), then the target's
order. Accesses per inference are the caller's model (app/model/code_plan.py); only their
ratio to the bytes matters for the order. An item left in the code region gets no section of
its own: a module whose items all fit there renders as before. Others carry a section named
`.edgetune.<region>.text` or `.edgetune.<region>.rodata`, built here from a region name the
target offers (checked) and one of two fixed suffixes: nothing from a model reaches C.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from edgetune.errors import EdgetuneError
from edgetune.hal import Target
from edgetune.hal.loader import REGION_RE
from edgetune.hal.model import KIND_ORDER

CODE, CONSTANT = "code", "constant"
SECTION_SUFFIX = {CODE: "text", CONSTANT: "rodata"}
# Bytes of the code region the plan leaves to the firmware's own code, vectors and C library
# by default (edgetune's harness takes under 8 KiB of it; a user's firmware more: `model export
# --code-reserve`).
FIRMWARE_CODE_RESERVE = 64 * 1024
# Start-up families whose harness link layout (firmware/templates/<family>.ld.j2) gives every
# other code region its sections; on the others a module has the code region only.
PLACING_FAMILIES = ("cortex_m",)


class CodePlacementError(EdgetuneError, ValueError):
    """A module whose code and constants the plan cannot fit in the target's regions."""


@dataclass(frozen=True)
class PlacedItem:
    name: str  # the C symbol (a function or a const array)
    kind: str  # CODE or CONSTANT
    nbytes: int
    accesses: float  # modelled instruction fetches or loads per inference


@dataclass(frozen=True)
class CodeRegion:
    name: str
    capacity: int
    wait_states: float
    executable: bool
    flash: bool  # holds its contents across resets: nothing to copy at boot


@dataclass(frozen=True)
class CodePlan:
    home: str  # the firmware's code region: items there get no section
    regions: tuple[CodeRegion, ...]
    placed: tuple[tuple[str, str], ...]  # (item name, region), in placement order
    items: tuple[PlacedItem, ...] = ()  # what was placed: the sizes behind `loads`

    def region_of(self, name: str) -> str:
        return dict(self.placed).get(name, self.home)

    @property
    def split(self) -> bool:
        """Whether any item lives outside the code region."""
        return any(region != self.home for _, region in self.placed)

    def used(self) -> tuple[str, ...]:
        """The regions other than the code region that hold an item, in the plan's order."""
        taken = {region for _, region in self.placed}
        return tuple(r.name for r in self.regions if r.name != self.home and r.name in taken)

    def loads(self) -> tuple["RegionLoad", ...]:
        """Each region holding an item: its bytes of code and of constants, the code region first."""
        where, kinds = dict(self.placed), {i.name: i for i in self.items}
        out = []
        for r in self.regions:
            held = [kinds[n] for n, region in where.items() if region == r.name and n in kinds]
            if held:
                out.append(RegionLoad(r.name, *(sum(i.nbytes for i in held if i.kind == k) for k in (CODE, CONSTANT)),
                                      *(sum(1 for i in held if i.kind == k) for k in (CODE, CONSTANT)),
                                      copied=r.name != self.home and not r.flash))
        return tuple(out)


@dataclass(frozen=True)
class RegionLoad:
    region: str
    code_bytes: int
    constant_bytes: int
    functions: int
    arrays: int
    copied: bool  # a RAM region beside the code region: stored in flash, copied in at start-up


def code_regions(target: Target, code_reserve: int = FIRMWARE_CODE_RESERVE) -> tuple[CodeRegion, ...]:
    """The regions that may hold code or constants, the code region first (less the
    `code_reserve` bytes left to the firmware's own code), then by speed. () on targets
    without firmware (the host)."""
    fw = target.firmware
    if fw is None:
        return ()
    kept = [r for r in target.memory if r.name == fw.code_region or
            (fw.startup in PLACING_FAMILIES and r.name != fw.data_region and r.name not in fw.io_regions
             and "r" in r.access)]
    order = sorted(kept, key=lambda r: (r.name != fw.code_region, r.wait_states, KIND_ORDER.index(r.kind),
                                        target.memory.index(r)))
    home_capacity = max(0, target.region(fw.code_region).size - fw.reserved_in(fw.code_region)
                        - code_reserve)
    return tuple(CodeRegion(r.name, home_capacity if r.name == fw.code_region else r.size, r.wait_states,
                            "x" in r.access, r.kind == "flash") for r in order)


def plan_code(items: Iterable[PlacedItem], regions: tuple[CodeRegion, ...], home: str) -> CodePlan:
    """Hot code first into the fastest executable region with room, then constants by
    accesses per byte into the fastest region with room (module docstring). Everything in
    `home` when it all fits there; CodePlacementError when an item fits nowhere."""
    items = list(items)
    room = {r.name: r.capacity for r in regions}
    if sum(i.nbytes for i in items) <= room.get(home, 0):
        return CodePlan(home, regions, tuple((i.name, home) for i in items), tuple(items))
    placed = []
    for kind in (CODE, CONSTANT):
        # Fewest wait states first; among equals RAM before flash and the code region first (where
        # an item goes when nothing is gained elsewhere); `regions` is in the target's order.
        candidates = sorted((r for r in regions if r.executable or kind == CONSTANT),
                            key=lambda r: (r.wait_states, r.flash, r.name != home))
        for item in sorted((i for i in items if i.kind == kind), key=lambda i: (-i.accesses / max(i.nbytes, 1), i.name)):
            region = next((r for r in candidates if room[r.name] >= item.nbytes), None)
            if region is None:
                raise CodePlacementError(unplaceable(items, regions, item))
            room[region.name] -= item.nbytes
            placed.append((item.name, region.name))
    where = dict(placed)
    _swap_in(sorted((i for i in items if i.kind == CONSTANT), key=lambda i: -i.accesses / max(i.nbytes, 1)),
             where, room, {r.name: r for r in regions})
    return CodePlan(home, regions, tuple((name, where[name]) for name, _ in placed), tuple(items))


def _swap_in(constants: list[PlacedItem], where: dict[str, str], room: dict[str, int],
             regions: dict[str, CodeRegion]) -> None:
    """First fit lets a large, much read array that missed a fast region's remaining room go
    slower while smaller, less read ones stay fast. Each array left in a slower region (most
    read per byte first) takes the place of a faster region's arrays read no more per byte
    (the least first) when they make room for it and are read less in total: a swap that
    only lowers the modelled stalls (both move by the same wait states)."""
    for item in constants:
        here = regions[where[item.name]]
        for faster in sorted((r for r in regions.values() if r.wait_states < here.wait_states),
                             key=lambda r: r.wait_states):
            density = item.accesses / max(item.nbytes, 1)
            residents = sorted((c for c in constants if where[c.name] == faster.name and c is not item
                                and c.accesses / max(c.nbytes, 1) <= density), key=lambda c: c.accesses / max(c.nbytes, 1))
            evicted, freed = [], room[faster.name]
            for c in residents:
                if freed >= item.nbytes:
                    break
                evicted.append(c)
                freed += c.nbytes
            moved_back = sum(c.nbytes for c in evicted)
            if freed < item.nbytes or moved_back > room[here.name] + item.nbytes or \
                    sum(c.accesses for c in evicted) >= item.accesses:
                continue
            for c in evicted:
                where[c.name] = here.name
            where[item.name] = faster.name
            room[faster.name] += moved_back - item.nbytes
            room[here.name] += item.nbytes - moved_back
            break


def unplaceable(items: list[PlacedItem], regions: tuple[CodeRegion, ...], item: PlacedItem) -> str:
    code = sum(i.nbytes for i in items if i.kind == CODE)
    constants = sum(i.nbytes for i in items if i.kind == CONSTANT)
    sizes = ", ".join(f"{r.name} {r.capacity:,}" for r in regions)
    return (f"{code:,} bytes of code and {constants:,} bytes of constants do not fit the regions that may hold "
            f"them (bytes free: {sizes}); {item.name} ({item.nbytes:,} bytes) is left over")


def check_code_reserve(target: Target, code_reserve: int) -> None:
    """A reserve the target's code region can give: 0 up to the region's bytes not already
    reserved by the target file."""
    fw = target.firmware
    if fw is None:
        return
    room = target.region(fw.code_region).size - fw.reserved_in(fw.code_region)
    if not 0 <= code_reserve <= room:
        raise CodePlacementError(f"--code-reserve {code_reserve}: must be 0 to {room:,} bytes, what "
                                 f"{fw.code_region} of {target.name} has for code")


def section_name(target: Target, region: str, kind: str) -> str:
    """The section of `kind` items placed in `region`: checked against the target's code
    regions and a fixed suffix, never a value read from a model."""
    if not REGION_RE.fullmatch(region) or region not in {r.name for r in code_regions(target)}:
        raise CodePlacementError(f"{region!r} is not a region {target.name} places code or constants in")
    return f"{target.section_name(region)}.{SECTION_SUFFIX[kind]}"


def load_region(target: Target) -> str | None:
    """Where the contents of RAM regions holding code or constants are stored until the
    start-up code copies them in: the first flash region among the code regions. None on a
    board without one: its RAM regions are loaded in place (by the emulator or debugger)."""
    flash = [r.name for r in code_regions(target) if r.flash]
    return flash[0] if flash else None
