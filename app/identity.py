"""What a stored trial's numbers depend on, and what is recomputed on top of them.

A trial holds measurements (an instruction count, a board's cycle count, host time, code
size) and, on QEMU targets with a cost model, estimates derived from a measured
instruction mix (cycles, energy, power). The two are treated differently when a target
file is edited (docs/workload-identity.md):

- Everything a measurement depends on is part of the workload's identity: the toolchain
  and emulator versions, the memory map, the compilers and their flags, the harness
  layout, the runner and its machine, the serial link. Changing any of it starts a new
  workload, measured again; nothing measured under the old description is reused.
- Everything that only prices a measurement (the cost table, static power, the clock of an
  emulated core, a region's wait states and access energy) is left out of the identity:
  stored trials keep their raw counts (`mix`, `accesses`) and their estimates are
  recomputed from the current file whenever trials are read.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from edgetune.hal import Target
from edgetune.targets.runners import runner_class, toolchain_versions
from edgetune.tuner import Trial, TuningDatabase, Workload


def measurement_setup(target: Target) -> dict:
    """The parts of a target description a measurement depends on, as plain data. An
    allow-list: a field added to the HAL stays out of the identity until it is named here."""
    core = target.core
    setup: dict = {
        "arch": target.arch,
        "core": {"name": core.name, "isa": core.isa, "count": core.count, "fpu": core.fpu,
                 "extensions": list(core.extensions),
                 # Runners whose firmware is built with the core clock (the serial harness's delays
                 # and baud arithmetic): the clock is part of what is measured there.
                 **({"clock_hz": core.clock_hz} if runner_class(target).builds_with_clock else {})},
        "vector_units": [{"name": v.name, "register_bits": v.register_bits, "registers": v.registers,
                          "lanes": [list(lane) for lane in v.lanes], "int8_macs_per_cycle": v.int8_macs_per_cycle}
                         for v in target.vector_units],
        # wait_states and access_pj only price loads and stores: estimates, recomputed.
        "memory": [{"name": m.name, "kind": m.kind, "base": m.base, "size": m.size, "access": m.access}
                   for m in target.memory],
        "compilers": [{"name": c.name, "command": c.command, "cflags": list(c.cflags)} for c in target.compilers],
        "runner": {"kind": target.runner.kind, "program": target.runner.program,
                   "machine": target.runner.machine, "cpu": target.runner.cpu},
        # Whether runs record an instruction mix at all, and how it is read from the image.
        "mix": None if target.cost is None else {"disassembler": target.cost.disassembler,
                                                 "flags": list(target.cost.disassembler_flags)},
    }
    harness = runner_class(target).harness_version
    if harness > 1:  # left out at 1, so the fingerprints made before the field existed stand
        setup["harness"] = harness
    fw = target.firmware
    if fw is not None:
        setup["firmware"] = {"startup": fw.startup, "linker": fw.linker, "ldflags": list(fw.ldflags),
                             "code_region": fw.code_region, "data_region": fw.data_region,
                             "data_reserved": fw.data_reserved, "stack_size": fw.stack_size,
                             "io_regions": list(fw.io_regions), "code_size": fw.code_size, "libs": list(fw.libs)}
    link = target.serial
    if link is not None:
        # Not the port (which device node a board appears at) nor the host's patience.
        setup["serial"] = {"flash": list(link.flash), "flash_keeps_running": link.flash_keeps_running,
                           "uart": link.uart, "uart_base": link.uart_base, "uart_clock_hz": link.uart_clock_hz,
                           "baudrate": link.baudrate, "counter": link.counter, "runs": link.runs}
    if target.renode is not None:
        setup["renode"] = {"platform": target.renode.platform, "uart": target.renode.uart}
    return setup


def measurement_fingerprint(target: Target) -> str:
    """Short hash of the tool versions and the measurement setup: the `toolchain` part of
    every workload's identity (a compiler upgrade or an edited memory map alike start a
    new workload)."""
    versions = "\n".join(f"{k}={v}" for k, v in sorted(toolchain_versions(target).items()))
    setup = json.dumps(measurement_setup(target), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{versions}\n{setup}".encode()).hexdigest()[:12]


class Estimates:
    """Recomputes the estimates of stored trials from the current description of each
    target it knows, for the workloads measured under exactly that description."""

    def __init__(self) -> None:
        self._targets: dict[tuple[str, str], Target] = {}

    def add(self, target: Target) -> None:
        self._targets[(target.name, measurement_fingerprint(target))] = target

    def __call__(self, workload: Workload, trial: Trial) -> Trial:
        target = self._targets.get((workload.target, workload.toolchain))
        values = trial.values
        if target is None or target.cost is None or "mix" not in values or "accesses" not in values:
            return trial  # nothing to price again: a measurement only, or another setup
        try:
            estimates = target.estimated_values(values["mix"], values["accesses"])
        except (KeyError, TypeError, ValueError, AttributeError):
            # A mix this edgetune cannot price (an instruction class it no longer has, an
            # imported or hand-edited record): the figures it was stored with stand.
            return trial
        return replace(trial, values={**values, **estimates})


def recompute_estimates(db: TuningDatabase, target: Target) -> None:
    """From now on, trials `db` reads for `target`'s workloads carry estimates priced by
    `target`'s current tables (several targets may be registered, e.g. by a report)."""
    estimates = db.revaluer
    if not isinstance(estimates, Estimates):
        estimates = Estimates()
        db.revalue_with(estimates)
    estimates.add(target)
