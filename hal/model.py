"""The hardware description: frozen value types, one per concept a target file describes.

Nothing here knows about files, kernels or search: `edgetune.hal.loader` builds these from
TOML, and the rest of edgetune asks them questions (which vector units exist, which memory
region a buffer fits in).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .cost import CostModel
from .fields import (ACTIVE_POWER_MW, CLOCK_HZ, CYCLES, ENERGY_PJ, NON_NEGATIVE, POSITIVE, POWER_MW, TIMEOUT_S, Range,
                     spec)

# The values of the keys that name one of a few things (edgetune.hal.fields: `one_of`).
MEMORY_KINDS = frozenset({"tcm", "sram", "flash", "dram"})
MEMORY_ACCESS = frozenset({"rx", "rw", "rwx"})
CACHE_KINDS = frozenset({"data", "instruction", "unified"})
# Memory kinds from the nearest to the farthest from the core: the first key of a region's
# rank among a target's placement regions (Target.placement_roles).
KIND_ORDER = ("tcm", "sram", "dram", "flash")


@dataclass(frozen=True)
class Measures:
    """What a run of one runner kind reports, as data (the runner class in edgetune.targets
    declares it; codegen and the app read it through the target)."""

    primary: str  # the unit a run reports: "instructions", "time_ns", "cycles"
    # Estimates the cost model adds to every run when the target has a [cost] table; they
    # charge each load and store by its data's region, so they depend on buffer placement.
    priced: tuple[str, ...] = ()
    # Values the runner itself counts that move with buffer placement (a board's cycles).
    placement_counted: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunnerKind:
    """What the target file of one runner kind must hold and what its runs report: the
    loader's schema for `[runner] kind`, as data."""

    kind: str
    measures: Measures
    # The runner class serving it, "module:Class" in edgetune.targets: the one place a kind is
    # registered (edgetune.targets.runners imports it from here; the HAL imports nothing).
    served_by: str
    tables: frozenset[str] = frozenset()  # top-level tables it requires ("firmware", "serial", ...)
    emulator: bool = False  # [runner] names the emulator: program and machine are required
    generates_link: bool = False  # it starts the board itself: [serial] flash and port are optional


# The runner kinds a target file may name, as data: what each requires of the file, what its
# runs report and which class serves it. The class declares the same `kind` and `measures`
# (edgetune.targets.runners checks it on import, tests/test_runners.py too): a new runner is
# its module, one line here, and the target files that use it.
_BOARD_COUNTS = Measures("cycles", placement_counted=("cycles", "dwt_cycles", "systick_cycles"))
RUNNER_KINDS = {k.kind: k for k in (
    RunnerKind("qemu", Measures("instructions", priced=("cycles", "energy_uj", "power_mw")), "qemu:QemuRunner",
               tables=frozenset({"firmware"}), emulator=True),
    RunnerKind("native", Measures("time_ns"), "native:NativeRunner"),
    RunnerKind("qemu-user", Measures("instructions"), "qemu_user:QemuUserRunner"),
    RunnerKind("serial", _BOARD_COUNTS, "serialboard:SerialRunner", tables=frozenset({"firmware", "serial"})),
    RunnerKind("renode", _BOARD_COUNTS, "renode:RenodeRunner", tables=frozenset({"firmware", "serial", "renode"}),
               generates_link=True),
)}

# Serial links: UART drivers in firmware/common and the counters the serial harness reads.
UART_DRIVERS = frozenset({"cmsdk-apb"})
SERIAL_COUNTERS = frozenset({"dwt", "systick"})
# Start-up code and link layout families the firmware folder provides (startup_<family>.*,
# templates/<family>.ld.j2).
STARTUP_FAMILIES = frozenset({"cortex_m", "cortex_a"})
# Core instruction-set extensions a kernel may ask for ([core] extensions). "dsp": the DSP
# extension of Armv7E-M and Armv8-M Mainline (Armv7-M ARM DDI 0403, A1.4 "the DSP extension";
# Armv8-M ARM DDI 0553, "DSP Extension"): SIMD on 16- and 8-bit halves of core registers.
CORE_EXTENSIONS = frozenset({"dsp"})
# Vela's memory types and accelerator prefixes (Vela 5.2 OPTIONS.md, "Configuration File").
NPU_MEMORY_TYPES = frozenset({"Sram", "Dram", "OnChipFlash", "OffChipFlash"})
NPU_NAMES = frozenset({"ethos-u55", "ethos-u65"})
NPU_PORTS = frozenset({"axi0", "axi1"})


@dataclass(frozen=True)
class MemoryRegion:
    name: str = spec(check="region_name")
    kind: str = spec(one_of=MEMORY_KINDS)
    base: int = spec(within=NON_NEGATIVE)
    size: int = spec(within=POSITIVE)
    access: str = spec(one_of=MEMORY_ACCESS)
    source: str = ""
    # Cost of a load or store instruction whose data lives here, on top of its class's cost
    # (which assumes a zero-wait TCM or an L1 hit): stall cycles and extra energy.
    wait_states: float = spec(0.0, within=CYCLES)
    access_pj: float = spec(0.0, within=ENERGY_PJ)

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass(frozen=True)
class VectorUnit:
    name: str = spec(check="name")  # "mve", "neon", "sse4.2", "avx2", "avx512"
    register_bits: int = spec(within=POSITIVE)
    registers: int = spec(within=POSITIVE)
    lanes: tuple[tuple[str, int], ...] = spec(within=POSITIVE)  # (dtype, lanes per register), a table by dtype
    int8_macs_per_cycle: float = spec(0.0, within=NON_NEGATIVE)
    source: str = ""

    def lanes_for(self, dtype: str) -> int:
        for name, count in self.lanes:
            if name == dtype:
                return count
        raise KeyError(f"vector unit {self.name} has no {dtype} lanes")


@dataclass(frozen=True)
class Cache:
    level: int = spec(within=POSITIVE)
    kind: str = spec(one_of=CACHE_KINDS)
    size: int = spec(within=POSITIVE)
    line: int = spec(64, within=POSITIVE)


@dataclass(frozen=True)
class Core:
    name: str
    isa: str
    count: int = spec(within=POSITIVE)
    clock_hz: int = spec(within=CLOCK_HZ)
    fpu: str = ""
    source: str = ""
    # Instruction-set extensions of the core that are not a vector unit, e.g. "dsp": the
    # Armv7E-M / Armv8-M DSP extension (SMLAD, SXTB16, SSAT, ... on 32-bit core registers).
    extensions: tuple[str, ...] = spec((), check="extensions")


@dataclass(frozen=True)
class PowerEnvelope:
    active_mw: float = spec(within=ACTIVE_POWER_MW)
    idle_mw: float = spec(within=POWER_MW)
    source: str = spec("", required=True)


@dataclass(frozen=True)
class Compiler:
    """One compiler a target offers: the program and the flags that select the core."""

    name: str = spec(check="name")  # the tunable value, e.g. "gcc" or "clang"
    command: str = spec(check="compiler")
    cflags: tuple[str, ...] = spec(check="flags", default=())
    # The flag sets of edgetune's option table (edgetune.hal.compiler_options) this compiler
    # was probed to accept: filled by edgetune.targets.option_probe, never read from a file.
    accepted_options: frozenset = field(default=frozenset(), repr=False, compare=False,
                                        metadata={"in_file": False})


@dataclass(frozen=True)
class Firmware:
    """How an emulated or bare-metal target lays out the harness image."""

    startup: str = spec(one_of=STARTUP_FAMILIES)  # name of the start-up source family, e.g. "cortex_m"
    linker: str = spec(check="linker")  # program that links (always the GNU driver: it knows the multilibs)
    ldflags: tuple[str, ...] = spec(check="flags", default=())
    code_region: str = spec(check="region")
    data_region: str = spec(check="region")
    data_reserved: int = spec(within=POSITIVE)  # bytes at the start of data_region for .data, .bss and stack
    stack_size: int = spec(within=POSITIVE)
    # where the I/O block may be preloaded, in order of preference
    io_regions: tuple[str, ...] = spec(check="regions")
    # Bytes of code_region the image may use when code and data share one region (e.g. a
    # Cortex-A's single DRAM bank): data then starts right after it. 0: the whole region.
    code_size: int = spec(0, within=NON_NEGATIVE)
    libs: tuple[str, ...] = spec(("-lc", "-lgcc"), check="libs")  # libraries the link step adds

    def reserved_in(self, region_name: str) -> int:
        """Bytes at the start of a region the harness image keeps for itself."""
        reserved = 0
        if region_name == self.code_region and self.code_size:
            reserved += self.code_size
        if region_name == self.data_region:
            reserved += self.data_reserved
        return reserved

    def data_base(self, data_region: "MemoryRegion") -> int:
        return data_region.base + (self.code_size if self.code_region == self.data_region else 0)


@dataclass(frozen=True)
class SerialLink:
    """A board reached over a serial port (docs/serial-protocol.md): how to flash it, where
    its UART is, which counter its firmware reads, and how patient the host is."""

    # A device (/dev/ttyACM0) or pyserial URL; "{port}" = a free loopback TCP port. Renode
    # generates its own flash step and port, so those two keys are optional there.
    port: str = spec(check="serial_port", default_when=("renode_runner", "socket://127.0.0.1:{port}"))
    # argument list; "{image}" (the ELF) and "{port}" are substituted
    flash: tuple[str, ...] = spec(check="flash", default_when=("renode_runner", ()))
    # the flash command *is* the board (an emulator): killed after the run
    flash_keeps_running: bool = spec(default=False, default_when=("renode_runner", True))
    uart: str = spec(one_of=UART_DRIVERS)  # UART driver in firmware/common, e.g. "cmsdk-apb"
    uart_base: int = spec(within=NON_NEGATIVE)
    uart_clock_hz: int = spec(within=CLOCK_HZ)  # the UART's peripheral clock, for its baud divider
    baudrate: int = spec(within=POSITIVE)
    counter: str = spec(one_of=SERIAL_COUNTERS)  # "dwt" (DWT CYCCNT, SysTick alongside) or "systick"
    runs: int = spec(5, within=Range(1, 32))  # kernel runs per trial; the minimum is reported
    reply_timeout_s: float = spec(2.0, within=TIMEOUT_S)
    flash_timeout_s: float = spec(60.0, within=TIMEOUT_S)
    retries: int = spec(2, within=Range(0, 10))
    source: str = ""

    @property
    def bauddiv(self) -> int:
        return self.uart_clock_hz // self.baudrate


@dataclass(frozen=True)
class RenodePlatform:
    """What a Renode platform script (.resc) needs to boot the serial harness."""

    platform: str = spec(check="renode_platform")  # a Renode platform description (.repl), e.g. "platforms/cpus/...repl"
    uart: str = spec(check="renode_peripheral")  # the peripheral the harness talks to, e.g. "sysbus.uart0"


@dataclass(frozen=True)
class RunnerSettings:
    """The target file's [runner] table (the runner itself is edgetune.targets' `Runner`)."""

    kind: str = spec(one_of=RUNNER_KINDS)  # a kind of RUNNER_KINDS: "qemu", "native", "serial", ...
    # What its runs report: the loader fills it from the kind (RUNNER_KINDS), it is not a
    # key. Not part of a target's repr (the build cache's key), which it would only repeat.
    measures: Measures = field(repr=False, metadata={"in_file": False})
    # QEMU's program and machine: required for QEMU, not read for any other runner.
    program: str = spec("", check="qemu", read_when="qemu_runner")
    machine: str = spec("", check="name", read_when="qemu_runner")
    cpu: str = spec("", check="name")
    timeout_s: float = spec(10.0, within=TIMEOUT_S)
    # On a Dask cluster, runs need a worker advertising this resource (e.g. the one host
    # wired to this board); "" runs anywhere the toolchain is installed.
    resource: str = spec("", check="name")


@dataclass(frozen=True)
class NpuPort:
    """One AXI master interface of an NPU and the memory behind it, in Vela's terms
    (memory type and timing become a Vela system configuration)."""

    name: str = spec(one_of=NPU_PORTS)  # "axi0", "axi1"
    memory: str = spec(one_of=NPU_MEMORY_TYPES)  # Vela memory type: "Sram", "Dram", "OnChipFlash", "OffChipFlash"
    # the board memory region it reaches ("" when not on the CPU's memory map)
    region: str = spec(check="region_or_none", default="")
    data_bits: int = spec(check="bus_width")
    writable: bool
    clock_scale: float = spec(within=POSITIVE)  # memory clock / NPU clock
    burst_length: int = spec(within=POSITIVE)  # bytes
    read_latency: int = spec(within=NON_NEGATIVE)  # NPU cycles
    write_latency: int = spec(within=NON_NEGATIVE)
    max_reads: int = spec(within=POSITIVE)  # outstanding transactions
    max_writes: int = spec(within=NON_NEGATIVE)
    source: str = ""


@dataclass(frozen=True)
class NpuMemoryMode:
    """Where Vela puts constants (weights), the tensor arena and the weight cache."""

    name: str = spec(check="mode_name")  # Vela memory-mode name, e.g. "Shared_Sram"
    const_port: str = spec(key="const", check="port")
    arena_port: str = spec(key="arena", check="port")
    cache_port: str = spec(key="cache", check="port")
    source: str = ""


@dataclass(frozen=True)
class Npu:
    """A neural processing unit attached to the board (Arm Ethos-U)."""

    name: str = spec(one_of=NPU_NAMES)  # "ethos-u55": Vela accelerator configs are "<name>-<macs>"
    product: str
    macs_per_cycle: tuple[int, ...] = spec(check="powers_of_two")  # the configurations the product comes in
    clock_hz: int = spec(within=CLOCK_HZ)
    ports: tuple[NpuPort, ...] = spec(unique=True)
    memory_modes: tuple[NpuMemoryMode, ...] = spec(at_least_one="memory mode", unique=True)
    # values offered to Vela's --arena-cache-size
    arena_cache_sizes: tuple[int, ...] = spec(check="positive_integers")
    invoke_cycles: int = spec(within=NON_NEGATIVE)  # CPU cycles to start one NPU job and take its completion
    copy_bytes_per_cycle: float = spec(within=POSITIVE)  # CPU copy rate between its buffers and the NPU's arena
    source: str = spec("", required=True)

    def accelerator(self, macs: int) -> str:
        return f"{self.name}-{macs}"

    def port(self, name: str) -> NpuPort:
        for port in self.ports:
            if port.name == name:
                return port
        raise KeyError(f"NPU {self.name} has no port {name!r}")

    def memory_mode(self, name: str) -> NpuMemoryMode:
        for mode in self.memory_modes:
            if mode.name == name:
                return mode
        raise KeyError(f"NPU {self.name} has no memory mode {name!r}")


@dataclass(frozen=True)
class Placement:
    """Where the two groups of a workload's buffers live, by memory region name: the
    kernel's constant inputs (weights, bias, quantisation tables) and everything else
    (activations: inputs and outputs). Both are regions of the target's `io_regions`."""

    weights: str
    activations: str

    def bytes_by_region(self, weight_bytes: int, activation_bytes: int) -> dict[str, int]:
        """Bytes each region must hold (the activations' region first)."""
        need = {self.activations: activation_bytes}
        need[self.weights] = need.get(self.weights, 0) + weight_bytes
        return need


@dataclass(frozen=True)
class Target:
    name: str = spec(check="name")
    description: str
    arch: str
    core: Core
    runner: RunnerSettings
    compilers: tuple[Compiler, ...] = spec(at_least_one="compiler", unique=True)
    vector_units: tuple[VectorUnit, ...] = spec((), unique=True)
    caches: tuple[Cache, ...] = ()
    memory: tuple[MemoryRegion, ...] = spec((), unique=True)
    power: PowerEnvelope | None = None
    firmware: Firmware | None = spec(None, required_when="firmware_runner")
    cost: "CostModel | None" = None
    npus: tuple[Npu, ...] = spec((), unique=True)
    source_file: str = spec("", in_file=False)
    serial: SerialLink | None = spec(None, required_when="serial_runner")
    renode: RenodePlatform | None = spec(None, required_when="renode_runner")
    # The compiler-option parameters a session tunes (edgetune.hal.compiler_options; "all":
    # every one). Empty, the default: only the compiler and its -O level are tuned.
    compiler_options: tuple[str, ...] = spec((), check="compiler_options")
    extra: dict = field(default_factory=dict, compare=False, hash=False, metadata={"in_file": False})

    # --- questions the rest of edgetune asks -------------------------------------------
    def has_vector(self, name: str) -> bool:
        return any(unit.name == name for unit in self.vector_units)

    def has_extension(self, name: str) -> bool:
        """Whether the core implements an instruction-set extension ([core] extensions)."""
        return name in self.core.extensions

    def vector_unit(self, name: str) -> VectorUnit:
        for unit in self.vector_units:
            if unit.name == name:
                return unit
        raise KeyError(f"target {self.name} has no vector unit {name!r}")

    def compiler(self, name: str) -> Compiler:
        for compiler in self.compilers:
            if compiler.name == name:
                return compiler
        raise KeyError(f"target {self.name} has no compiler {name!r}")

    def npu(self, name: str) -> Npu:
        for npu in self.npus:
            if npu.name == name:
                return npu
        known = ", ".join(n.name for n in self.npus) or "none"
        raise KeyError(f"target {self.name} has no NPU {name!r} (NPUs: {known})")

    def region(self, name: str) -> MemoryRegion:
        for region in self.memory:
            if region.name == name:
                return region
        raise KeyError(f"target {self.name} has no memory region {name!r}")

    def io_capacity(self, region_name: str) -> int:
        """Bytes available for kernel buffers in a region (minus what the harness keeps)."""
        region = self.region(region_name)
        return region.size - (self.firmware.reserved_in(region_name) if self.firmware else 0)

    def io_address(self, region_name: str) -> int:
        region = self.region(region_name)
        return region.base + (self.firmware.reserved_in(region_name) if self.firmware else 0)

    def place_buffers(self, nbytes: int) -> MemoryRegion | None:
        """The first I/O region (in the target's order of preference) that holds nbytes."""
        if self.firmware is None:
            return None
        for name in self.firmware.io_regions:
            if nbytes <= self.io_capacity(name):
                return self.region(name)
        return None

    def estimated_values(self, mix: dict, accesses: dict) -> dict:
        """The cost model's estimates of a run, from its instruction mix (instructions per
        class) and its loads and stores per memory region ("unmapped": outside every region,
        priced as a class's own cost). What a QEMU trial records, and what is recomputed
        from its stored mix when the cost table, clock or wait states change."""
        if self.cost is None:
            raise ValueError(f"target {self.name} has no cost model")
        priced = [(region, accesses[region.name]) for region in self.memory if accesses.get(region.name)]
        estimate = self.cost.estimate(mix, self.core.clock_hz, priced)
        return {"cycles": round(estimate.cycles, 1), "energy_uj": round(estimate.energy_uj, 6),
                "power_mw": round(estimate.power_mw, 4)}

    # --- buffer placement (codegen/placement.py makes it a tunable parameter) ----------------
    @property
    def placement_regions(self) -> tuple[str, ...]:
        """Regions a workload's buffers may be placed in, in order of preference."""
        return self.firmware.io_regions if self.firmware else ()

    @property
    def placement_roles(self) -> tuple[tuple[str, str], ...]:
        """(region, role) of each placement region: `near0` for the nearest region buffers
        may be placed in, `near1` for the next, and so on. Nearer means a nearer kind
        (KIND_ORDER: a TCM before an SRAM before a DRAM before flash), then fewer wait
        states, then earlier in the target's order of preference. A role, unlike a region's
        name, means the same on every target (the M55's DTCM and the M4's SSRAM2/3 are
        both `near0`), so trials recorded on one target tell a search on another where its
        buffers did well; a kind alone would not (the M4 has no TCM)."""
        regions = [self.region(name) for name in self.placement_regions]
        nearest = sorted(range(len(regions)), key=lambda n: (KIND_ORDER.index(regions[n].kind),
                                                             regions[n].wait_states, n))
        return tuple((regions[n].name, f"near{rank}") for rank, n in enumerate(nearest))

    def placement_fits(self, placement: Placement, weight_bytes: int, activation_bytes: int) -> bool:
        return all(region in self.placement_regions and nbytes <= self.io_capacity(region)
                   for region, nbytes in placement.bytes_by_region(weight_bytes, activation_bytes).items())

    def default_placement(self, weight_bytes: int, activation_bytes: int) -> Placement | None:
        """Both groups in the first region that holds them together (place_buffers' rule),
        or None when no region does (or the target places nothing, e.g. the host)."""
        region = self.place_buffers(weight_bytes + activation_bytes)
        return Placement(region.name, region.name) if region else None

    @staticmethod
    def section_name(region_name: str) -> str:
        """The linker section of buffers placed in a region (exported section macros and
        linker-script fragment)."""
        return f".edgetune.{region_name}"

    @property
    def placement_values(self) -> tuple[str, ...]:
        """Measured values that depend on where buffers live: the cost model's estimates
        (it charges each load and store by its data's region) and a board's own cycle
        counts. Instruction counts and code and RAM sizes do not."""
        measures = self.runner.measures
        return (*(measures.priced if self.cost else ()), *measures.placement_counted)

    @property
    def measures(self) -> str:
        """The unit a run on this target reports."""
        return self.runner.measures.primary

    @property
    def measured_values(self) -> tuple[str, ...]:
        """Every value a successful trial on this target records (objectives to choose from)."""
        estimates = self.runner.measures.priced if self.cost else ()
        return (self.measures, *estimates, "code_bytes", "ram_bytes")
