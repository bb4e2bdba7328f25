"""Load a target description (TOML) into `Target`, checking every key on the way.

Errors name the file and the dotted key at fault, e.g.
``targets/boards/cortex-m55.toml: memory[1].size: expected an integer, got 'big'``.
A target may `extends = "cortex-m7"` (a shipped target by name) or `extends = "other.toml"`
(a path relative to its own file): the child's tables replace the parent's key by key, so a
user's board only states what differs from its core. Compiler flags are checked against the
allow-list of option shapes in `flags`; the rules are written out in docs/targets.md.
"""
from __future__ import annotations

import math
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any, Callable

from edgetune.errors import EdgetuneError
from .flags import flag_problem, flags_problem, lib_problem, objdump_flag_problem
from .cost import INSTRUCTION_CLASSES, ClassCost, CostModel
from .model import (Cache, Compiler, Core, Firmware, MemoryRegion, Npu, NpuMemoryMode, NpuPort, PowerEnvelope,
                    Measures, RenodePlatform, RunnerKind, RunnerSettings, SerialLink, Target, VectorUnit)

SCHEMA_VERSION = 1

# Names end up in C identifiers, file names and command lines: keep them boring.
NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
# Memory region names reach C macros, section names and linker scripts (buffer placement,
# codegen/placement.py): C identifiers only.
REGION_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
# A program is a bare name looked up on PATH or an absolute path, never a shell snippet.
PROGRAM_RE = re.compile(r"^(/[A-Za-z0-9._+/-]+|[A-Za-z0-9._+-]+)$")
# What each program of a target may be called: a C compiler driver, a linker, QEMU's system
# emulator, objdump, a flasher; never a shell, an interpreter or another QEMU tool. The cross
# prefixes are the GNU target triples of the toolchains Debian and Arm ship.
_TRIPLE = r"((arm-none-eabi|aarch64-linux-gnu|aarch64-none-elf|aarch64-none-linux-gnu|arm-linux-gnueabihf" \
          r"|x86_64-linux-gnu|riscv32-unknown-elf|riscv64-unknown-elf)-)?"
_VERSION = r"(-[0-9]+(\.[0-9]+)*)?"
COMPILER_RE = re.compile(rf"{_TRIPLE}(gcc|clang|cc){_VERSION}")
LINKER_RE = re.compile(rf"{_TRIPLE}(gcc|clang|cc|ld|ld\.bfd|ld\.lld){_VERSION}")
QEMU_RE = re.compile(r"qemu-system-(arm|aarch64|riscv32|riscv64|x86_64|i386)")
DISASSEMBLER_RE = re.compile(rf"({_TRIPLE}|llvm-)objdump{_VERSION}")
FLASHER_RE = re.compile(r"pyocd|openocd|probe-rs|JLinkExe|st-flash|STM32_Programmer_CLI|nrfjprog|dfu-util|picotool"
                        r"|bossac|qemu-system-(arm|aarch64|riscv32|riscv64)")
# Absolute paths to programs the user allows, separated by ":" (the CLI's --allow-tool adds to it).
ALLOW_TOOLS_ENV = "EDGETUNE_ALLOW_TOOLS"
# The targets shipped with edgetune (targets/boards in the package), which `extends` may name.
# A folder, not an import: the HAL imports nothing of ours.
SHIPPED_TARGETS_DIR = Path(__file__).resolve().parent.parent / "targets" / "boards"
# Ranges of numbers no real part has outside them: 1 kHz .. 10 GHz clocks, a day of timeout.
CLOCK_HZ_RANGE = (1_000, 10_000_000_000)
MAX_TIMEOUT_S = 86_400.0
MAX_POWER_MW = 1_000_000.0  # 1 kW
MAX_ENERGY_PJ = 1_000_000.0  # 1 uJ per instruction or access
MAX_CYCLES = 1_000_000.0  # per instruction class; wait states too
# Address width of the core's data side: M-profile and Armv7 cores address 4 GiB; AArch64
# and x86-64 harnesses run 64-bit (arch names as the shipped targets spell them).
THIRTY_TWO_BIT_ARCH_RE = re.compile(r"armv[4-8](\.[0-9])?[a-z]*-[mr](\.[a-z]+)?|armv[4-7][a-z]*(-a)?"
                                    r"|riscv32[a-z]*|i[3-6]86")

MEMORY_KINDS = {"tcm", "sram", "flash", "dram"}
CACHE_KINDS = {"data", "instruction", "unified"}
# The runner kinds a target file may name, as data: what each requires of the file and what
# its runs report. Each kind is served by the runner class of the same `kind` in
# edgetune.targets.runners (tests/test_runners.py checks the two lists agree).
_BOARD_COUNTS = Measures("cycles", placement_counted=("cycles", "dwt_cycles", "systick_cycles"))
RUNNER_KINDS = {spec.kind: spec for spec in (
    RunnerKind("qemu", Measures("instructions", priced=("cycles", "energy_uj", "power_mw")),
               tables=frozenset({"firmware"}), emulator=True),
    RunnerKind("native", Measures("time_ns")),
    RunnerKind("serial", _BOARD_COUNTS, tables=frozenset({"firmware", "serial"})),
    RunnerKind("renode", _BOARD_COUNTS, tables=frozenset({"firmware", "serial", "renode"}), generates_link=True),
)}
# Serial links: UART drivers in firmware/common and the counters the serial harness reads.
UART_DRIVERS = {"cmsdk-apb"}
SERIAL_COUNTERS = {"dwt", "systick"}
# Placeholders a flash command or port may hold; everything else is plain characters.
PLACEHOLDERS = ("{image}", "{port}")
ARG_RE = re.compile(r"^[A-Za-z0-9_=.,+/:@%-]*$")
PORT_RE = re.compile(r"^[A-Za-z0-9_=.,+/:@?&-]+$")
RENODE_PATH_RE = re.compile(r"^@?[A-Za-z0-9_./-]+\.repl$")
RENODE_PERIPHERAL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# Start-up code and link layout families the firmware folder provides (startup_<family>.*,
# templates/<family>.ld.j2).
STARTUP_FAMILIES = {"cortex_m", "cortex_a"}
# Core instruction-set extensions a kernel may ask for ([core] extensions). "dsp": the DSP
# extension of Armv7E-M and Armv8-M Mainline (Armv7-M ARM DDI 0403, A1.4 "the DSP extension";
# Armv8-M ARM DDI 0553, "DSP Extension"): SIMD on 16- and 8-bit halves of core registers.
CORE_EXTENSIONS = {"dsp"}
# Vela's memory types and accelerator prefixes (Vela 5.2 OPTIONS.md, "Configuration File").
NPU_MEMORY_TYPES = {"Sram", "Dram", "OnChipFlash", "OffChipFlash"}
NPU_NAMES = {"ethos-u55", "ethos-u65"}
# A Vela memory-mode name becomes an .ini section name: letters, digits, underscores.
VELA_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


class TargetError(EdgetuneError, ValueError):
    """A target description is missing, malformed or inconsistent."""


class _Table:
    """A TOML table with the path that leads to it, so every error can name the key."""

    def __init__(self, file: str, path: str, data: Any):
        self.file, self.path, self.data = file, path, data
        if not isinstance(data, dict):
            self.fail("", f"expected a table, got {type(data).__name__}")

    def fail(self, key: str, message: str) -> None:
        where = f"{self.path}.{key}" if self.path and key else (self.path or key or "<top>")
        raise TargetError(f"{self.file}: {where}: {message}")

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, kind: type | tuple, default: Any = ..., check: Callable[[Any], str | None] | None = None):
        if key not in self.data:
            if default is ...:
                self.fail(key, "required key is missing")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # TOML booleans are ints in Python: do not let `true` pass for a number.
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            self.fail(key, f"expected {names}, got {value!r}")
        # TOML has inf and nan; no key of a target means either.
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(key, f"must be a finite number, got {value!r}")
        if check is not None:
            problem = check(value)
            if problem:
                self.fail(key, problem)
        return value

    def table(self, key: str, required: bool = True) -> "_Table | None":
        if key not in self.data:
            if required:
                self.fail(key, "required table is missing")
            return None
        return _Table(self.file, self._join(key), self.data[key])

    def tables(self, key: str, required: bool = True) -> list["_Table"]:
        if key not in self.data:
            if required:
                self.fail(key, "required array of tables is missing")
            return []
        items = self.data[key]
        if not isinstance(items, list):
            self.fail(key, "expected an array of tables ([[...]])")
        return [_Table(self.file, f"{self._join(key)}[{i}]", item) for i, item in enumerate(items)]

    def reject_unknown(self, allowed: set[str]) -> None:
        for key in self.data:
            if key not in allowed:
                self.fail(key, f"unknown key (allowed: {', '.join(sorted(allowed))})")

    def _join(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key


def _positive(value) -> str | None:
    return None if value > 0 else f"must be positive, got {value}"


def _non_negative(value) -> str | None:
    return None if value >= 0 else f"must not be negative, got {value}"


def _between(low: float, high: float, low_open: bool = False) -> Callable[[Any], str | None]:
    """A number in [low, high] ((low, high] when low_open): what a real part can be."""
    def check(value) -> str | None:
        if low == 0 and (value < 0 or value == 0 and low_open):
            return f"must be positive, got {value:g}" if low_open else f"must not be negative, got {value:g}"
        if value < low or value == low and low_open or value > high:
            opening = "(" if low_open else "["
            return f"must be in {opening}{low:g}, {high:g}], got {value:g}"
        return None
    return check


_CLOCK = _between(*CLOCK_HZ_RANGE)
_TIMEOUT = _between(0, MAX_TIMEOUT_S, low_open=True)
_POWER = _between(0, MAX_POWER_MW)
_ENERGY = _between(0, MAX_ENERGY_PJ)
_CYCLES = _between(0, MAX_CYCLES)


def _name(value) -> str | None:
    return None if NAME_RE.fullmatch(value) else f"{value!r} is not a valid name (lower-case letters, digits, _ . -)"


def _region_name(value: str) -> str | None:
    return None if REGION_RE.fullmatch(value) else f"{value!r} is not a valid region name (a lower-case C identifier: letters, digits, _)"


def allowed_tools() -> frozenset[str]:
    """Absolute program paths the user opted into ($EDGETUNE_ALLOW_TOOLS, ":"-separated)."""
    entries = os.environ.get(ALLOW_TOOLS_ENV, "").split(":")
    return frozenset(os.path.normpath(e) for e in entries if e.startswith("/"))


def _program_named(pattern: re.Pattern, kind: str, any_name_when_allowed: bool = False) -> Callable[[Any], str | None]:
    """A bare program name of a `kind` (found on PATH when run), or an absolute path the user
    allowed in $EDGETUNE_ALLOW_TOOLS (or with --allow-tool). A path is never trusted for its
    file name alone: a script named arm-none-eabi-gcc in /tmp is still a script in /tmp."""
    def check(value) -> str | None:
        if not PROGRAM_RE.fullmatch(value) or ".." in value.split("/"):
            return f"{value!r} is not a program name or absolute path"
        if value.startswith("/"):
            if os.path.normpath(value) not in allowed_tools():
                return (f"{value!r} is an absolute path; a program is a name found on PATH, or a path you allow "
                        f"with {ALLOW_TOOLS_ENV}={value} (or edgetune --allow-tool {value})")
            if any_name_when_allowed:
                return None
        if not pattern.fullmatch(value.rsplit("/", 1)[-1]):
            return f"{value!r} is not named like a {kind}"
        return None
    return check


def _one_of(options: set[str]) -> Callable[[Any], str | None]:
    return lambda value: None if value in options else f"{value!r} is not one of {', '.join(sorted(options))}"


def _flags(table: _Table, key: str, check=flag_problem) -> tuple[str, ...]:
    flags = table.get(key, list, default=[])
    problem = flags_problem(flags, check)
    if problem:
        table.fail(f"{key}[{problem[0]}]", problem[1])
    return tuple(flags)


def _extensions(core_t: _Table) -> tuple[str, ...]:
    names = core_t.get("extensions", list, default=[])
    for i, name in enumerate(names):
        if not isinstance(name, str) or name not in CORE_EXTENSIONS:
            core_t.fail(f"extensions[{i}]", f"{name!r} is not a known core extension "
                                            f"(known: {', '.join(sorted(CORE_EXTENSIONS))})")
        if name in names[:i]:
            core_t.fail(f"extensions[{i}]", f"{name!r} is listed twice")
    return tuple(names)


def _merge(parent: dict, child: dict) -> dict:
    merged = dict(parent)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_text(path: Path) -> str:
    """A target file's text. Only a regular file is read: a folder, a FIFO or a device is
    refused before anything blocks on it (opened non-blocking, then checked)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise TargetError(f"{path}: no such target file") from None
    except IsADirectoryError:
        raise TargetError(f"{path}: is a folder, not a target file") from None
    except OSError as exc:
        raise TargetError(f"{path}: cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if stat.S_ISDIR(mode):
            raise TargetError(f"{path}: is a folder, not a target file")
        if not stat.S_ISREG(mode):
            raise TargetError(f"{path}: is not a regular file (a pipe or a device), not a target file")
        os.set_blocking(handle.fileno(), True)
        data = handle.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TargetError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _shipped_names(shipped_dir: Path) -> str:
    return ", ".join(sorted(p.stem for p in shipped_dir.glob("*.toml"))) or "none"


def resolve_extends(path: Path, value, shipped_dir: Path = SHIPPED_TARGETS_DIR) -> Path:
    """The parent file `extends = value` in the target file `path` means: a path ending in
    .toml or holding a "/" (relative to `path`'s folder, or absolute); otherwise a target
    name: a shipped target, or NAME.toml beside `path`. A name both could mean is refused
    (which one was meant is a guess), and so is one neither has."""
    if not isinstance(value, str) or not value:
        raise TargetError(f"{path}: extends: expected a target name or a .toml file, got {value!r}")
    if value.endswith(".toml") or "/" in value:
        return path.parent / value
    if not NAME_RE.fullmatch(value):
        raise TargetError(f"{path}: extends: {value!r} is neither a target name nor a .toml file")
    shipped, beside = shipped_dir / f"{value}.toml", path.parent / f"{value}.toml"
    found = [p for p in (shipped, beside) if p.is_file()]
    if len(found) == 2 and shipped.resolve() != beside.resolve():
        raise TargetError(f"{path}: extends: {value!r} is ambiguous: both the shipped target and {beside} "
                          f"(write extends = \"{value}.toml\" for the file beside this one, or rename it)")
    if not found:
        raise TargetError(f"{path}: extends: unknown target {value!r} (shipped: {_shipped_names(shipped_dir)}; "
                          "a file is named by a path ending in .toml)")
    return found[0]


def read_target_data(path: Path, _seen: tuple[Path, ...] = (), shipped_dir: Path = SHIPPED_TARGETS_DIR) -> dict:
    """The raw TOML of a target with its `extends` chain resolved."""
    path = Path(path)
    if path.resolve() in _seen:
        raise TargetError(f"{path}: extends: circular chain through {path.name}")
    try:
        data = tomllib.loads(_read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise TargetError(f"{path}: not valid TOML: {exc}") from None
    if "extends" not in data:
        return data
    parent = resolve_extends(path, data.pop("extends"), shipped_dir)
    try:
        mode = parent.stat().st_mode
    except OSError:
        raise TargetError(f"{path}: extends: no such target file {parent}") from None
    if not stat.S_ISREG(mode):
        what = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a pipe or a device)"
        raise TargetError(f"{path}: extends: {parent} is {what}, not a target file")
    return _merge(read_target_data(parent, _seen + (path.resolve(),), shipped_dir), data)


def load_target(path: Path, overrides: dict | None = None, shipped_dir: Path = SHIPPED_TARGETS_DIR) -> Target:
    """Load and validate one target file. `overrides` (e.g. detected host facts) merge on top."""
    data = read_target_data(Path(path), shipped_dir=shipped_dir)
    if overrides:
        data = _merge(data, overrides)
    return target_from_data(data, str(path))


def target_from_data(data: dict, file: str) -> Target:
    top = _Table(file, "", data)
    top.reject_unknown({"schema", "name", "description", "arch", "core", "runner", "compilers",
                        "vector_units", "caches", "memory", "power", "firmware", "cost", "detect", "npus", "serial",
                        "renode"})
    schema = top.get("schema", int)
    if schema != SCHEMA_VERSION:
        top.fail("schema", f"version {schema} is not supported (this edgetune reads {SCHEMA_VERSION})")

    core_t = top.table("core")
    core_t.reject_unknown({"name", "isa", "count", "clock_hz", "fpu", "source", "extensions"})
    core = Core(name=core_t.get("name", str), isa=core_t.get("isa", str),
                count=core_t.get("count", int, check=_positive),
                clock_hz=core_t.get("clock_hz", int, check=_CLOCK),
                fpu=core_t.get("fpu", str, default=""), source=core_t.get("source", str, default=""),
                extensions=_extensions(core_t))

    runner_t = top.table("runner")
    runner_t.reject_unknown({"kind", "program", "machine", "cpu", "timeout_s", "resource"})
    kind = runner_t.get("kind", str, check=_one_of(RUNNER_KINDS))
    spec = RUNNER_KINDS[kind]
    runner = RunnerSettings(kind=kind, measures=spec.measures,
                            program=runner_t.get("program", str, check=_program_named(QEMU_RE, "QEMU emulator"),
                                                 default=...) if spec.emulator else "",
                            machine=runner_t.get("machine", str, check=_name, default=...) if spec.emulator else "",
                            cpu=runner_t.get("cpu", str, check=_name, default=""),
                            timeout_s=float(runner_t.get("timeout_s", (int, float), check=_TIMEOUT, default=10.0)),
                            resource=runner_t.get("resource", str, check=_name, default=""))

    compilers = []
    for t in top.tables("compilers"):
        t.reject_unknown({"name", "command", "cflags"})
        compilers.append(Compiler(name=t.get("name", str, check=_name),
                                  command=t.get("command", str, check=_program_named(COMPILER_RE, "C compiler")),
                                  cflags=_flags(t, "cflags")))
    if not compilers:
        top.fail("compilers", "at least one compiler is required")
    _unique(top, "compilers", [c.name for c in compilers])

    vector_units = []
    for t in top.tables("vector_units", required=False):
        t.reject_unknown({"name", "register_bits", "registers", "lanes", "int8_macs_per_cycle", "source"})
        lanes_t = t.table("lanes")
        lanes = tuple((dtype, lanes_t.get(dtype, int, check=_positive)) for dtype in sorted(lanes_t.data))
        vector_units.append(VectorUnit(
            name=t.get("name", str, check=_name), register_bits=t.get("register_bits", int, check=_positive),
            registers=t.get("registers", int, check=_positive), lanes=lanes,
            int8_macs_per_cycle=float(t.get("int8_macs_per_cycle", (int, float), check=_non_negative, default=0.0)),
            source=t.get("source", str, default="")))
    _unique(top, "vector_units", [v.name for v in vector_units])

    caches = []
    for t in top.tables("caches", required=False):
        t.reject_unknown({"level", "kind", "size", "line"})
        caches.append(Cache(level=t.get("level", int, check=_positive), kind=t.get("kind", str, check=_one_of(CACHE_KINDS)),
                            size=t.get("size", int, check=_positive), line=t.get("line", int, check=_positive, default=64)))

    memory = []
    for t in top.tables("memory", required=False):
        t.reject_unknown({"name", "kind", "base", "size", "access", "source", "wait_states", "access_pj"})
        memory.append(MemoryRegion(name=t.get("name", str, check=_region_name), kind=t.get("kind", str, check=_one_of(MEMORY_KINDS)),
                                   base=t.get("base", int, check=_non_negative), size=t.get("size", int, check=_positive),
                                   access=t.get("access", str, check=_one_of({"rx", "rw", "rwx"})),
                                   source=t.get("source", str, default=""),
                                   wait_states=float(t.get("wait_states", (int, float), check=_CYCLES, default=0)),
                                   access_pj=float(t.get("access_pj", (int, float), check=_ENERGY, default=0))))
    _unique(top, "memory", [m.name for m in memory])
    _no_overlap(top, memory)
    _within_address_space(top, memory)

    power = None
    power_t = top.table("power", required=False)
    if power_t is not None:
        power_t.reject_unknown({"active_mw", "idle_mw", "source"})
        power = PowerEnvelope(active_mw=float(power_t.get("active_mw", (int, float), check=_between(0, MAX_POWER_MW, low_open=True))),
                              idle_mw=float(power_t.get("idle_mw", (int, float), check=_POWER)),
                              source=power_t.get("source", str))

    firmware = None
    fw_t = top.table("firmware", required=("firmware" in spec.tables))
    if fw_t is not None:
        fw_t.reject_unknown({"startup", "linker", "ldflags", "libs", "code_region", "code_size", "data_region",
                             "data_reserved", "stack_size", "io_regions"})
        region_names = {m.name for m in memory}

        def _region(value):
            return None if value in region_names else f"no memory region named {value!r}"

        io_regions = fw_t.get("io_regions", list)
        for i, name in enumerate(io_regions):
            if not isinstance(name, str) or _region(name):
                fw_t.fail(f"io_regions[{i}]", f"no memory region named {name!r}")
        firmware = Firmware(startup=fw_t.get("startup", str, check=_one_of(STARTUP_FAMILIES)),
                            linker=fw_t.get("linker", str, check=_program_named(LINKER_RE, "linker")),
                            ldflags=_flags(fw_t, "ldflags"),
                            libs=_flags(fw_t, "libs", lib_problem) if fw_t.has("libs") else Firmware.libs,
                            code_size=fw_t.get("code_size", int, check=_non_negative, default=0),
                            code_region=fw_t.get("code_region", str, check=_region),
                            data_region=fw_t.get("data_region", str, check=_region),
                            data_reserved=fw_t.get("data_reserved", int, check=_positive),
                            stack_size=fw_t.get("stack_size", int, check=_positive), io_regions=tuple(io_regions))
        data_region = next(m for m in memory if m.name == firmware.data_region)
        if firmware.data_reserved >= data_region.size:
            fw_t.fail("data_reserved", f"{firmware.data_reserved} bytes do not fit in {data_region.name} ({data_region.size} bytes)")
        if firmware.stack_size >= firmware.data_reserved:
            fw_t.fail("stack_size", f"must be smaller than data_reserved ({firmware.data_reserved})")
        if firmware.code_region == firmware.data_region:
            if not firmware.code_size:
                fw_t.fail("code_size", "required when code_region and data_region are the same region")
            if firmware.code_size + firmware.data_reserved >= data_region.size:
                fw_t.fail("code_size", f"code_size + data_reserved do not fit in {data_region.name} ({data_region.size} bytes)")

    cost_t = top.table("cost", required=False)
    cost = _cost_model(cost_t) if cost_t is not None else None

    npus = tuple(_npu(t, {m.name for m in memory}) for t in top.tables("npus", required=False))
    _unique(top, "npus", [n.name for n in npus])

    serial = _serial_link(top, spec)
    renode = _renode_platform(top, spec)
    return Target(name=top.get("name", str, check=_name), description=top.get("description", str), arch=top.get("arch", str),
                  core=core, runner=runner, compilers=tuple(compilers), vector_units=tuple(vector_units),
                  caches=tuple(caches), memory=tuple(memory), power=power, firmware=firmware, cost=cost, npus=npus,
                  source_file=file, serial=serial, renode=renode)


def _cost_model(cost_t: _Table) -> CostModel:
    cost_t.reject_unknown({"source", "static_mw", "issue_width", "overlapping_units", "disassembler",
                           "disassembler_flags", "classes"})
    classes_t = cost_t.table("classes")
    classes_t.reject_unknown(set(INSTRUCTION_CLASSES))
    classes = []
    for name in INSTRUCTION_CLASSES:
        t = classes_t.table(name)
        t.reject_unknown({"cycles", "unit", "energy_pj"})
        classes.append((name, ClassCost(cycles=float(t.get("cycles", (int, float), check=_CYCLES)),
                                        unit=t.get("unit", str, check=_name),
                                        energy_pj=float(t.get("energy_pj", (int, float), check=_ENERGY)))))
    units = {cost.unit for _, cost in classes}
    overlapping = cost_t.get("overlapping_units", list, default=[])
    for i, unit in enumerate(overlapping):
        if unit not in units:
            cost_t.fail(f"overlapping_units[{i}]", f"no instruction class uses unit {unit!r}")
    return CostModel(classes=tuple(classes), overlapping_units=tuple(overlapping),
                     issue_width=float(cost_t.get("issue_width", (int, float), check=_positive, default=1)),
                     static_mw=float(cost_t.get("static_mw", (int, float), check=_POWER)),
                     disassembler=cost_t.get("disassembler", str, check=_program_named(DISASSEMBLER_RE, "objdump")),
                     disassembler_flags=_flags(cost_t, "disassembler_flags", objdump_flag_problem),
                     source=cost_t.get("source", str))


def _npu(t: _Table, region_names: set[str]) -> Npu:
    """One [[npus]] table: an Ethos-U attached to the board, with its AXI ports and the
    memory modes Vela may compile for."""
    t.reject_unknown({"name", "product", "macs_per_cycle", "clock_hz", "ports", "memory_modes", "arena_cache_sizes",
                      "invoke_cycles", "copy_bytes_per_cycle", "source"})
    macs = t.get("macs_per_cycle", list)
    for i, value in enumerate(macs):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value & (value - 1):
            t.fail(f"macs_per_cycle[{i}]", f"{value!r} is not a positive power of two")
    if not macs or len(set(macs)) != len(macs):
        t.fail("macs_per_cycle", "expected distinct values, at least one")
    sizes = t.get("arena_cache_sizes", list)
    for i, value in enumerate(sizes):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            t.fail(f"arena_cache_sizes[{i}]", f"{value!r} is not a positive integer")
    if not sizes or len(set(sizes)) != len(sizes):
        t.fail("arena_cache_sizes", "expected distinct values, at least one")

    ports = []
    for p in t.tables("ports"):
        p.reject_unknown({"name", "memory", "region", "data_bits", "writable", "clock_scale", "burst_length",
                          "read_latency", "write_latency", "max_reads", "max_writes", "source"})
        region = p.get("region", str, default="",
                       check=lambda v: None if v == "" or v in region_names else f"no memory region named {v!r}")
        ports.append(NpuPort(
            name=p.get("name", str, check=_one_of({"axi0", "axi1"})),
            memory=p.get("memory", str, check=_one_of(NPU_MEMORY_TYPES)), region=region,
            data_bits=p.get("data_bits", int,
                            check=lambda v: None if v in (32, 64, 128, 256) else f"{v} is not 32, 64, 128 or 256"),
            writable=p.get("writable", bool),
            clock_scale=float(p.get("clock_scale", (int, float), check=_positive)),
            burst_length=p.get("burst_length", int, check=_positive),
            read_latency=p.get("read_latency", int, check=_non_negative),
            write_latency=p.get("write_latency", int, check=_non_negative),
            max_reads=p.get("max_reads", int, check=_positive),
            max_writes=p.get("max_writes", int, check=_non_negative), source=p.get("source", str, default="")))
    _unique(t, "ports", [p.name for p in ports])
    if "axi0" not in {p.name for p in ports}:
        t.fail("ports", "an NPU needs at least its axi0 port")
    port_names = {p.name for p in ports}

    def _port(value):
        return None if value in port_names else f"no port named {value!r} (ports: {', '.join(sorted(port_names))})"

    modes = []
    for m in t.tables("memory_modes"):
        m.reject_unknown({"name", "const", "arena", "cache", "source"})
        modes.append(NpuMemoryMode(
            name=m.get("name", str, check=lambda v: None if VELA_NAME_RE.fullmatch(v) else f"{v!r} is not a valid mode name"),
            const_port=m.get("const", str, check=_port), arena_port=m.get("arena", str, check=_port),
            cache_port=m.get("cache", str, check=_port), source=m.get("source", str, default="")))
    if not modes:
        t.fail("memory_modes", "at least one memory mode is required")
    _unique(t, "memory_modes", [m.name for m in modes])

    return Npu(name=t.get("name", str, check=_one_of(NPU_NAMES)), product=t.get("product", str),
               macs_per_cycle=tuple(macs), clock_hz=t.get("clock_hz", int, check=_CLOCK), ports=tuple(ports),
               memory_modes=tuple(modes), arena_cache_sizes=tuple(sizes),
               invoke_cycles=t.get("invoke_cycles", int, check=_non_negative),
               copy_bytes_per_cycle=float(t.get("copy_bytes_per_cycle", (int, float), check=_positive)),
               source=t.get("source", str))


def _unique(top: _Table, key: str, names: list[str]) -> None:
    seen = set()
    for i, name in enumerate(names):
        if name in seen:
            top.fail(f"{key}[{i}].name", f"duplicate name {name!r}")
        seen.add(name)


def _no_overlap(top: _Table, memory: list[MemoryRegion]) -> None:
    ordered = sorted(enumerate(memory), key=lambda item: item[1].base)
    for (_, a), (j, b) in zip(ordered, ordered[1:]):
        if b.base < a.end:
            top.fail(f"memory[{j}].base", f"region {b.name} overlaps region {a.name}")


def _within_address_space(top: _Table, memory: list[MemoryRegion]) -> None:
    """Every region inside what the core can address: 4 GiB on a 32-bit core (the harness
    takes addresses as 32-bit values), 2^64 bytes otherwise."""
    arch = top.data.get("arch")
    bits = 32 if isinstance(arch, str) and THIRTY_TWO_BIT_ARCH_RE.fullmatch(arch) else 64
    for i, region in enumerate(memory):
        if region.end > 1 << bits:
            top.fail(f"memory[{i}]", f"region {region.name} ends at {region.end:#x}, beyond the {bits}-bit address "
                                     f"space of {arch} (last address {(1 << bits) - 1:#x})")


def _without_placeholders(text: str) -> str:
    for placeholder in PLACEHOLDERS:
        text = text.replace(placeholder, "")
    return text


_FLASHER_CHECK = _program_named(FLASHER_RE, "flasher or emulator", any_name_when_allowed=True)


def _serial_link(top: _Table, spec: RunnerKind) -> SerialLink | None:
    """[serial]: required by the serial and renode runners (Renode generates its own flash
    step and port, so those two keys are optional there)."""
    t = top.table("serial", required="serial" in spec.tables)
    if t is None:
        return None
    t.reject_unknown({"port", "flash", "flash_keeps_running", "flash_timeout_s", "uart", "uart_base", "uart_clock_hz",
                      "baudrate", "counter", "runs", "reply_timeout_s", "retries", "source"})
    generated = spec.generates_link
    port = t.get("port", str, default="socket://127.0.0.1:{port}" if generated else ...,
                 check=lambda v: None if PORT_RE.fullmatch(_without_placeholders(v)) and "{image}" not in v
                 else f"{v!r} is not a serial device or pyserial URL of plain characters")
    flash_list = t.get("flash", list, default=[] if generated else ...)
    for i, arg in enumerate(flash_list):
        if not isinstance(arg, str):
            t.fail(f"flash[{i}]", f"expected a string, got {arg!r}")
        rest = _without_placeholders(arg)
        if i == 0 and (problem := _FLASHER_CHECK(arg)):
            t.fail("flash[0]", problem)
        if "{" in rest or "}" in rest:
            t.fail(f"flash[{i}]", f"{arg!r}: the only placeholders are {', '.join(PLACEHOLDERS)}")
        if not ARG_RE.fullmatch(rest):
            t.fail(f"flash[{i}]", f"{arg!r} holds characters an argument may not have")
    if not generated:
        if not flash_list:
            t.fail("flash", "the flash command is empty")
        if not any("{image}" in arg for arg in flash_list):
            t.fail("flash", "the flash command never names the image ({image})")
    keeps_running = t.get("flash_keeps_running", bool, default=generated)
    if "{port}" in port:
        if not keeps_running:
            t.fail("port", "{port} (a loopback port edgetune picks) needs flash_keeps_running = true")
        if not generated and not any("{port}" in arg for arg in flash_list):
            t.fail("flash", "the port is {port} but the flash command never passes it on")
    uart_clock = t.get("uart_clock_hz", int, check=_CLOCK)
    baudrate = t.get("baudrate", int, check=_positive)
    link = SerialLink(
        port=port, flash=tuple(flash_list), flash_keeps_running=keeps_running,
        flash_timeout_s=float(t.get("flash_timeout_s", (int, float), check=_TIMEOUT, default=60.0)),
        uart=t.get("uart", str, check=_one_of(UART_DRIVERS)),
        uart_base=t.get("uart_base", int, check=_non_negative), uart_clock_hz=uart_clock, baudrate=baudrate,
        counter=t.get("counter", str, check=_one_of(SERIAL_COUNTERS)),
        runs=t.get("runs", int, default=5, check=lambda v: None if 1 <= v <= 32 else f"must be 1..32, got {v}"),
        reply_timeout_s=float(t.get("reply_timeout_s", (int, float), check=_TIMEOUT, default=2.0)),
        retries=t.get("retries", int, default=2, check=lambda v: None if 0 <= v <= 10 else f"must be 0..10, got {v}"),
        source=t.get("source", str, default=""))
    if link.bauddiv < 16:  # CMSDK APB UART TRM: BAUDDIV must be at least 16
        t.fail("baudrate", f"{baudrate} baud needs a divider of {link.bauddiv} at {uart_clock} Hz; the UART needs >= 16")
    return link


def _renode_platform(top: _Table, spec: RunnerKind) -> RenodePlatform | None:
    t = top.table("renode", required="renode" in spec.tables)
    if t is None:
        return None
    t.reject_unknown({"platform", "uart"})
    return RenodePlatform(
        platform=t.get("platform", str, check=lambda v: None if RENODE_PATH_RE.fullmatch(v) else
                       f"{v!r} is not a Renode platform file (.repl) of plain characters"),
        uart=t.get("uart", str, check=lambda v: None if RENODE_PERIPHERAL_RE.fullmatch(v) else
                   f"{v!r} is not a Renode peripheral name like sysbus.uart0"))
