"""Buffer placement as a tunable parameter: which memory region holds a workload's weights
and which its activations, on boards whose HAL lists more than one region for buffers
(`[firmware] io_regions`: the M55's DTCM and SRAM2, the MPS2 boards' SSRAM and PSRAM).

Every kernel gets the parameters from `Kernel.tuning_space` (no kernel repeats this code):
  weights_in      the region of the buffers a kernel marks `Buffer(weight=True)`: weights,
                  bias, quantisation tables, filter coefficients
  activations_in  the region of every other buffer (inputs, outputs) and of the I/O
                  block's header
Both are offered only where the target has two or more such regions, and a constraint
keeps out every point whose buffers do not fit their regions, so the space never offers
an illegal placement. Each parameter's default is what edgetune did before placement was
tunable (both groups in the first region that holds them together), so configurations
stored without the parameters keep meaning what they measured.

QEMU counts the same instructions wherever the buffers live; the HAL's cost model charges
each load and store by its data's region (wait_states, access_pj), and a board's own
counter sees real stalls, so placement moves estimated cycles and energy, and measured
cycles on hardware.

The byte counts follow the I/O block the harness reads (firmware/common/harness.h,
packed by edgetune.targets.iobuf): a header, a table entry per buffer and the scalar
parameters, then each buffer 16-byte aligned.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from edgetune.errors import EdgetuneError
from edgetune.hal import Placement, Target
from edgetune.hal.loader import REGION_RE
from edgetune.tuner import Config, Constraint, Space, choice

WEIGHTS_PARAM = "weights_in"
ACTIVATIONS_PARAM = "activations_in"
PLACEMENT_PARAMS = (WEIGHTS_PARAM, ACTIVATIONS_PARAM)

# The I/O block of firmware/common/harness.h (version 2).
ALIGN = 16
HEADER_BYTES = 16  # magic, version, n_buffers, n_params
ENTRY_BYTES = 16  # per buffer: segment, offset, size, is_output
PARAM_BYTES = 4
# Guard bytes around every buffer of the block (before it, and after its aligned end), filled
# with GUARD_BYTE: the harness checks them after a run, outside the counted region, so a kernel
# writing past a buffer is an `overrun`, not an `ok` (harness.h ET_GUARD_BYTES, ET_GUARD_BYTE).
GUARD_BYTES = 16
GUARD_BYTE = 0xA5


class PlacementError(EdgetuneError, ValueError):
    """A placement naming a region the target does not offer for buffers."""


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def header_bytes(n_buffers: int, n_params: int) -> int:
    """Bytes before the first buffer of the I/O block."""
    return aligned(HEADER_BYTES + ENTRY_BYTES * n_buffers + PARAM_BYTES * n_params)


def group_bytes(io) -> tuple[int, int]:
    """(weights, activations): the bytes each group occupies, the header counted with the
    activations (it lives with them)."""
    weights = sum(GUARD_BYTES + aligned(b.data.nbytes) for b in io.buffers if b.weight)
    activations = header_bytes(len(io.buffers), len(io.params)) + GUARD_BYTES + sum(
        GUARD_BYTES + aligned(b.data.nbytes) for b in io.buffers if not b.weight)
    return weights + (GUARD_BYTES if weights else 0), activations


def fit_problem(target: Target, io, workload: str = "the workload") -> str | None:
    """Why no trial of a workload can run because its buffers fit no placement in the
    target's I/O regions (every trial would be too large), or None. Checked once before a
    session measures anything: the fault is the workload's size or the target file's
    regions, not a configuration's."""
    regions = target.placement_regions
    if not regions:
        return None  # the host: buffers live in the process
    weights, activations = group_bytes(io)
    pairs = [(w, a) for w in regions for a in regions] if weights else [(r, r) for r in regions]
    if any(target.placement_fits(Placement(w, a), weights, activations) for w, a in pairs):
        return None
    free = ", ".join(f"{r} {target.io_capacity(r)}" for r in regions)
    need = (f"{weights} bytes of weights and {activations} bytes of activations and header" if weights
            else f"{activations} bytes of buffers and header")
    return (f"{target.source_file or target.name}: firmware.io_regions: {workload} needs {need}; no memory of "
            f"{target.name} holds them in any placement (bytes free: {free})")


def default_placement(target: Target, io) -> Placement | None:
    """What a configuration without placement parameters stands for; None on targets that
    place nothing (the host). Both groups in the first region of the target's list when
    nothing fits anywhere: the runner then reports the trial as too large."""
    regions = target.placement_regions
    if not regions:
        return None
    return target.default_placement(*group_bytes(io)) or Placement(regions[0], regions[0])


def with_placement(space: Space, target: Target, io) -> Space:
    """`space` plus weights_in / activations_in where the target offers a choice."""
    regions = target.placement_regions
    weights, activations = group_bytes(io)
    if len(regions) < 2:
        return space
    default = default_placement(target, io)
    params = [choice(ACTIVATIONS_PARAM, regions, "memory region of the inputs, outputs and I/O header "
                                                 f"(TCM vs SRAM; {', '.join(regions)} on {target.name})",
                     ordered=False, default=default.activations)]
    if weights:
        params.insert(0, choice(WEIGHTS_PARAM, regions, "memory region of the constant inputs: weights, bias, "
                                                        "quantisation tables", ordered=False, default=default.weights))
    capacities = ", ".join(f"{r} {target.io_capacity(r)}" for r in regions)

    def fits(c: Mapping) -> bool:
        placement = Placement(c.get(WEIGHTS_PARAM, c[ACTIVATIONS_PARAM]), c[ACTIVATIONS_PARAM])
        return target.placement_fits(placement, weights, activations)

    constraint = Constraint(f"weights ({weights} bytes) and activations ({activations} bytes) must fit the regions "
                            f"they are placed in (bytes free: {capacities})", fits)
    return Space([*space.params, *params], [*space.constraints, constraint])


def placement_of(target: Target, io, config: Config) -> Placement | None:
    """Where a configuration puts the buffers (the default for parameters it lacks)."""
    default = default_placement(target, io)
    if default is None:
        return None
    values = config.as_dict()
    chosen = Placement(str(values.get(WEIGHTS_PARAM, default.weights)),
                       str(values.get(ACTIVATIONS_PARAM, default.activations)))
    check_regions(target, (chosen.weights, chosen.activations), "configuration")
    return chosen


def scratch_section(target: Target) -> str | None:
    """The linker section of a variant's static scratch (im2col rows, packing slivers,
    unfused accumulators): in the harness it is .bss in the firmware's data region, so an
    export places it in that region too (the section is named after it), and the harness's
    linker script gathers it into .bss. None on targets without firmware (the host)."""
    if target.firmware is None:
        return None
    return f"{target.section_name(target.firmware.data_region)}.scratch"


def check_regions(target: Target, names, where: str) -> None:
    """Region names reach C macros, section names and linker scripts: only the regions
    this target offers for buffers, each a plain identifier, pass."""
    for name in names:
        if not isinstance(name, str) or not REGION_RE.fullmatch(name) or name not in target.placement_regions:
            raise PlacementError(f"{where}: {name!r} is not a memory region {target.name} places buffers in "
                                 f"(regions: {', '.join(target.placement_regions) or 'none'})")


def pinned(space: Space, target: Target, objective: str) -> Space:
    """`space` with the placement parameters fixed at their defaults: for a session whose
    objective and bounds see no difference between placements (every placement counts the
    same instructions in QEMU), other placements would only repeat measurements."""
    pins = [Constraint(f"{p.name} changes only {', '.join(target.placement_values) or 'nothing measured'} on "
                       f"{target.name}: fixed at {p.default} while tuning {objective}",
                       lambda c, name=p.name, value=p.default: c[name] == value)
            for p in space.params if p.name in PLACEMENT_PARAMS]
    if not pins:
        return space
    # Only legal points can stay legal, those whose placement digits are the defaults':
    # picked by their digits rather than by enumerating the whole product again.
    keep = np.ones(len(space.legal_indices()), dtype=bool)
    for axis, param in enumerate(space.params):
        if param.name in PLACEMENT_PARAMS:
            keep &= space.legal_digits()[:, axis] == param.index_of(param.default)
    return Space(space.params, [*space.constraints, *pins], legal=space.legal_indices()[keep])
