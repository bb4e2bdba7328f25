"""Cycle and energy estimates from a dynamic instruction mix.

QEMU counts instructions, not cycles (docs/measurements.md, "Counting work"). A target's
`[cost]` table gives, for every instruction class, the cycles it occupies on one of the
core's units and the dynamic energy it costs. From the mix of a run (instructions executed per class):

    busy(u)  = sum over classes c on unit u of  count(c) * cycles(c)
    cycles   = sum of busy(u) over units that do not overlap
             + max( max busy(u) over overlapping units,
                    instructions on overlapping units / issue_width )
             + sum over memory regions r of accesses(r) * wait_states(r)
    energy   = static_mw * cycles / clock  +  sum over classes of count(c) * energy_pj(c)
             + sum over memory regions r of accesses(r) * access_pj(r)

accesses(r) counts the load and store instructions whose data lives in region r, and the
instructions fetched from r when r charges for an access (code placed outside a zero-wait
code region); a class's own cost assumes a zero-wait TCM or an L1 hit, and a region adds its
stalls on top.

An in-order single-issue core (Cortex-M4) lists no overlapping units: every cycle adds up.
The Cortex-M55 overlaps its vector load/store and vector compute beats; superscalar cores
(Cortex-M7, A53, A72) overlap their pipelines, bounded by the issue width. The model is a
throughput bound: it knows no dependency latencies, cache misses or wait states (README,
"Cycle and energy estimates", lists where it is known to be wrong).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol

from .fields import CYCLES, ENERGY_PJ, POSITIVE, POWER_MW, spec

# The instruction classes a mix is reported in; every cost model prices all of them.
INSTRUCTION_CLASSES = (
    "alu",           # scalar integer data processing, moves, compares, IT, NOP
    "mul",           # scalar multiply
    "mac",           # scalar multiply-accumulate (MLA, SMLAD, SMLAL, MADD, ...)
    "div",           # scalar division
    "load",          # scalar loads (LDR*, LDM, POP), including FP register loads
    "store",         # scalar stores (STR*, STM, PUSH), including FP register stores
    "branch",        # a branch that falls through (not taken)
    "branch_taken",  # a taken branch, call or return
    "loop",          # low-overhead loop instructions (DLS, WLS, LE, LETP; Armv8.1-M)
    "fp",            # scalar floating point
    "vec_alu",       # vector (MVE/NEON) data processing other than multiplies
    "vec_mac",       # vector multiply and multiply-accumulate
    "vec_load",      # vector loads
    "vec_store",     # vector stores
)


class PricedRegion(Protocol):
    """What the model needs of a memory region (edgetune.hal.model.MemoryRegion)."""

    wait_states: float
    access_pj: float


@dataclass(frozen=True)
class ClassCost:
    cycles: float = spec(within=CYCLES)  # cycles this class occupies its unit for, per instruction
    unit: str = spec(check="name")  # the pipeline or resource it occupies
    energy_pj: float = spec(within=ENERGY_PJ)  # dynamic energy per instruction


@dataclass(frozen=True)
class Estimate:
    cycles: float
    energy_uj: float
    power_mw: float  # average over the run: energy / time
    busy: tuple[tuple[str, float], ...]  # cycles per unit, for explaining an estimate


@dataclass(frozen=True)
class CostModel:
    classes: tuple[tuple[str, ClassCost], ...] = spec(names=INSTRUCTION_CLASSES)  # a table by class name
    overlapping_units: tuple[str, ...] = spec(check="units", default=())
    issue_width: float = spec(within=POSITIVE, default=1)
    static_mw: float = spec(within=POWER_MW)
    disassembler: str = spec(check="objdump")  # objdump that decodes this core's instructions
    disassembler_flags: tuple[str, ...] = spec(check="objdump_flags", default=())
    source: str = spec("", required=True)

    def cost(self, name: str) -> ClassCost:
        for class_name, cost in self.classes:
            if class_name == name:
                return cost
        raise KeyError(f"cost model has no instruction class {name!r}")

    def estimate(self, mix: Mapping[str, int], clock_hz: int,
                 accesses: Iterable[tuple[PricedRegion, int]] = ()) -> Estimate:
        unknown = set(mix) - set(INSTRUCTION_CLASSES)
        if unknown:
            raise KeyError(f"unknown instruction classes in mix: {', '.join(sorted(unknown))}")
        busy: dict[str, float] = {}
        overlapped_instructions = 0
        dynamic_pj = 0.0
        for name, count in mix.items():
            cost = self.cost(name)
            busy[cost.unit] = busy.get(cost.unit, 0.0) + count * cost.cycles
            dynamic_pj += count * cost.energy_pj
            if cost.unit in self.overlapping_units:
                overlapped_instructions += count
        serial = sum(cycles for unit, cycles in busy.items() if unit not in self.overlapping_units)
        parallel = max([cycles for unit, cycles in busy.items() if unit in self.overlapping_units], default=0.0)
        cycles = serial + max(parallel, overlapped_instructions / self.issue_width)
        for region, count in accesses:
            cycles += count * region.wait_states
            dynamic_pj += count * region.access_pj
        seconds = cycles / clock_hz
        energy_uj = self.static_mw * 1e-3 * seconds * 1e6 + dynamic_pj * 1e-6
        power_mw = energy_uj * 1e-3 / seconds if seconds > 0 else 0.0
        return Estimate(cycles=cycles, energy_uj=energy_uj, power_mw=power_mw, busy=tuple(sorted(busy.items())))
