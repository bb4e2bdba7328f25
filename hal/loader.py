"""Load a target description (TOML) into `Target`, checking every key on the way.

The keys, their types, defaults and ranges are the fields of `Target` and the dataclasses
it holds (`edgetune.hal.fields` says how): `_read` walks them, and the checks that relate
one key to another follow as small functions (`CROSS_CHECKS`).

Errors name the file and the dotted key at fault, e.g.
``targets/boards/cortex-m55.toml: memory[1].size: expected an integer, got 'big'``.
A target may `extends = "cortex-m7"` (a shipped target by name) or `extends = "other.toml"`
(a path relative to its own file): the child's tables replace the parent's key by key, so a
user's board only states what differs from its core. Compiler flags are checked against the
allow-list of option shapes in `flags`; the rules are written out in docs/targets.md.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import stat
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Callable

from edgetune.errors import EdgetuneError
from .cost import CostModel
from .compiler_options import ALL as ALL_OPTIONS, OPTION_NAMES
from .emulated import unmapped_problem
from .fields import CLOCK_HZ_RANGE, MAX_CYCLES, MAX_ENERGY_PJ, MAX_POWER_MW, MAX_TIMEOUT_S, Range  # noqa: F401
from .host import DETECTABLE_UNITS
from .flags import flag_problem, flags_problem, lib_problem, objdump_flag_problem
from .flash_args import flash_args_problem
from .model import (CACHE_KINDS, CORE_EXTENSIONS, MEMORY_KINDS, NPU_MEMORY_TYPES,  # noqa: F401
                    NPU_NAMES, RUNNER_KINDS, SERIAL_COUNTERS, STARTUP_FAMILIES, UART_DRIVERS, Firmware, MemoryRegion,
                    Measures, Npu, NpuPort, RunnerKind, RunnerSettings, SerialLink, Target)

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
# Address width of the core's data side: M-profile and Armv7 cores address 4 GiB; AArch64
# and x86-64 harnesses run 64-bit (arch names as the shipped targets spell them).
THIRTY_TWO_BIT_ARCH_RE = re.compile(r"armv[4-8](\.[0-9])?[a-z]*-[mr](\.[a-z]+)?|armv[4-7][a-z]*(-a)?"
                                    r"|riscv32[a-z]*|i[3-6]86")

# Placeholders a flash command or port may hold; everything else is plain characters.
PLACEHOLDERS = ("{image}", "{port}")
ARG_RE = re.compile(r"^[A-Za-z0-9_=.,+/:@%-]*$")
PORT_RE = re.compile(r"^[A-Za-z0-9_=.,+/:@?&-]+$")
RENODE_PATH_RE = re.compile(r"^@?[A-Za-z0-9_./-]+\.repl$")
RENODE_PERIPHERAL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
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


def _within(bounds: Range) -> Callable[[Any], str | None]:
    """The check of a `within` rule (unbounded ranges keep the plain positive and not-negative wording)."""
    if bounds.high is None and bounds.low == 0:
        return _positive if bounds.low_open else _non_negative
    return _between(bounds.low, math.inf if bounds.high is None else bounds.high, bounds.low_open)


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


@functools.lru_cache(maxsize=None)
def shipped_unit_names(shipped_dir: Path = SHIPPED_TARGETS_DIR) -> frozenset[str]:
    """The vector units and core extensions a shipped target has or may detect (host.toml's
    detected units, whichever this machine has), and every core extension the HAL knows:
    the names a kernel's vector path may require without a board file of the user's."""
    names = set(CORE_EXTENSIONS)
    for path in sorted(shipped_dir.glob("*.toml")):
        data = read_target_data(path, shipped_dir=shipped_dir)
        names.update(unit.get("name") for unit in data.get("vector_units", ()) if isinstance(unit, dict))
        names.update(data.get("core", {}).get("extensions", ()))
        if data.get("detect"):
            names |= DETECTABLE_UNITS
    return frozenset(name for name in names if isinstance(name, str))


def target_from_data(data: dict, file: str) -> Target:
    top = _Table(file, "", data)
    # schema: the file format's version, not a field; detect: host.toml's mark (edgetune.hal.host).
    top.reject_unknown(_keys(Target) | {"schema", "detect"})
    schema = top.get("schema", int)
    if schema != SCHEMA_VERSION:
        top.fail("schema", f"version {schema} is not supported (this edgetune reads {SCHEMA_VERSION})")
    return _read(Target, top, {}, given={"source_file": file}, extra_keys={"schema", "detect"})


# --- one dataclass from one table, field by field (edgetune.hal.fields) ---------------------

_MISSING = ...  # a required key's default: TOML has no Ellipsis, so it never is a value
_SKIP = object()  # a key not read here (read_when): the field keeps its dataclass default


def _file_fields(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("in_file", True)]


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get("key", f.name)


def _keys(cls) -> set[str]:
    return {_key(f) for f in _file_fields(cls)}


@functools.cache
def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _read(cls, t: _Table, ctx: dict, given: dict | None = None, extra_keys: set[str] = frozenset()):
    """An instance of dataclass `cls` from table `t`: each field one key, read in field order
    (with the checks across keys that one field's value allows right after it), then the
    class's checks across keys. `ctx` maps each class being read around this table to the
    values it has so far, for checks that refer to other keys (a region by name)."""
    t.reject_unknown(_keys(cls) | set(extra_keys))
    hints = _hints(cls)
    values = dict(given or {})
    ctx = {**ctx, cls: values}
    for f in _file_fields(cls):
        value = _field_value(t, f, hints[f.name], ctx)
        if value is not _SKIP:
            values[f.name] = value
            for check in FIELD_CHECKS.get((cls, f.name), ()):
                check(value, t, ctx)
    for name, derive in DERIVED.get(cls, {}).items():
        values[name] = derive(values)
    obj = cls(**values)
    for check in CROSS_CHECKS.get(cls, ()):
        check(obj, t, ctx)
    return obj


def _toml_default(f: dataclasses.Field, ctx: dict):
    """What a field is when its key is left out, or _MISSING when the key is required."""
    rules = f.metadata
    if "read_when" in rules:
        return _MISSING
    if "default_when" in rules and CONDITIONS[rules["default_when"][0]](ctx):
        return rules["default_when"][1]
    if rules.get("required") or "required_when" in rules and CONDITIONS[rules["required_when"]](ctx):
        return _MISSING
    if "default" in rules:
        return rules["default"]
    if f.default is not dataclasses.MISSING:
        return f.default
    return _MISSING if f.default_factory is dataclasses.MISSING else f.default_factory()


def _shape(hint) -> tuple[str, Any]:
    """What a type hint means in TOML: a table, an array of tables, a table of named entries
    (tuple of (name, value) pairs), an array of values, or one value."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):  # X | None: an optional X
        return _shape(next(a for a in typing.get_args(hint) if a is not type(None)))
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        if dataclasses.is_dataclass(item):
            return "tables", item
        if typing.get_origin(item) is tuple:
            return "named", typing.get_args(item)[1]
        return "array", item
    return ("table" if dataclasses.is_dataclass(hint) else "value"), hint


def _field_value(t: _Table, f: dataclasses.Field, hint, ctx: dict):
    rules = f.metadata
    if "read_when" in rules and not CONDITIONS[rules["read_when"]](ctx):
        return _SKIP
    key, default = _key(f), _toml_default(f, ctx)
    shape, item = _shape(hint)
    if shape == "table":
        sub = t.table(key, required=default is _MISSING)
        return default if sub is None else _read(item, sub, ctx)
    if shape == "tables":
        return _tables(t, key, item, rules, default, ctx)
    if shape == "named":
        return _named(t, key, item, rules, default, ctx)
    if shape == "array":
        return _array(t, key, item, rules, default, ctx)
    return _value(t, key, item, rules, default, ctx)


# TOML types a field's type accepts: an integer is a fine float (and is stored as one).
_TOML_TYPES = {str: (str,), int: (int,), float: (int, float), bool: (bool,)}


def _value(t: _Table, key: str, kind: type, rules, default, ctx: dict):
    value = t.get(key, _TOML_TYPES[kind], default=default, check=_value_check(rules, ctx))
    return float(value) if kind is float and value is not None else value  # None: an optional number left out


def _value_check(rules, ctx: dict) -> Callable[[Any], str | None] | None:
    """One check of a value from the field's one_of, within and check rules."""
    checks = []
    if "one_of" in rules:
        checks.append(_one_of(rules["one_of"]))
    if "within" in rules:
        checks.append(_within(rules["within"]))
    if "check" in rules:
        check = VALUE_CHECKS[rules["check"]]
        checks.append(lambda value: check(value, ctx))
    if not checks:
        return None
    return lambda value: next((p for p in (c(value) for c in checks) if p), None)


def _array(t: _Table, key: str, kind: type, rules, default, ctx: dict) -> tuple:
    """An array of values. A `check` rule names a check of the whole array (ARRAY_CHECKS);
    otherwise each value is checked as a single key of its type would be."""
    values = t.get(key, list, default=default)
    if "check" in rules:
        problem = ARRAY_CHECKS[rules["check"]](values, ctx)
    else:
        problem = _items_problem(values, kind, _value_check(rules, ctx))
    if problem:
        index, message = problem
        t.fail(key if index is None else f"{key}[{index}]", message)
    return tuple(values)


def _items_problem(values: list, kind: type, check) -> tuple[int, str] | None:
    kinds = _TOML_TYPES[kind]
    for i, value in enumerate(values):
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            return i, f"expected {' or '.join(k.__name__ for k in kinds)}, got {value!r}"
        if check is not None and (problem := check(value)):
            return i, problem
    return None


def _tables(t: _Table, key: str, cls, rules, default, ctx: dict) -> tuple:
    """An array of tables ([[key]]), each one `cls`."""
    if not t.has(key) and default is not _MISSING:
        return default
    items = tuple(_read(cls, sub, ctx) for sub in t.tables(key))
    if not items and "at_least_one" in rules:
        t.fail(key, f"at least one {rules['at_least_one']} is required")
    if rules.get("unique"):
        _unique(t, key, [item.name for item in items])
    return items


def _named(t: _Table, key: str, kind, rules, default, ctx: dict) -> tuple:
    """A table of named entries, as (name, value) pairs: the `names` rule's in its order, or
    any names, sorted. A value is a table when `kind` is a dataclass."""
    sub = t.table(key, required=default is _MISSING)
    if sub is None:
        return default
    names = rules.get("names")
    if names is not None:
        sub.reject_unknown(set(names))
    pairs = []
    for name in names if names is not None else sorted(sub.data):
        if dataclasses.is_dataclass(kind):
            pairs.append((name, _read(kind, sub.table(name), ctx)))
        else:
            pairs.append((name, _value(sub, name, kind, rules, _MISSING, ctx)))
    return tuple(pairs)


# --- the checks a `check` rule names ----------------------------------------------------------
# A value check: (value, ctx) -> why not, or None. `ctx` holds what the tables around have
# read so far (by class), so a reference to another key can be looked up.

def _memory_names(ctx: dict) -> set[str]:
    return {m.name for m in ctx[Target].get("memory", ())}


def _region(value, ctx: dict) -> str | None:
    return None if value in _memory_names(ctx) else f"no memory region named {value!r}"


def _npu_port(value, ctx: dict) -> str | None:
    names = {p.name for p in ctx[Npu]["ports"]}
    return None if value in names else f"no port named {value!r} (ports: {', '.join(sorted(names))})"


def _pattern(regex: re.Pattern, what: str) -> Callable[[Any, dict], str | None]:
    return lambda value, ctx: None if regex.fullmatch(value) else f"{value!r} is not {what}"


def _renode_platform_problem(value: str) -> str | None:
    """A platform description Renode loads: one of Renode's own (a path inside its tree, e.g.
    platforms/cpus/nrf52840.repl), or a file whose absolute path you allowed as a program is
    allowed (a description may hold Python peripherals: it is code)."""
    if not RENODE_PATH_RE.fullmatch(value) or ".." in value.split("/"):
        return f"{value!r} is not a Renode platform file (.repl) of plain characters"
    path = value.removeprefix("@")
    if path.startswith("/") and os.path.normpath(path) not in allowed_tools():
        return (f"{value!r} is an absolute path; a platform is one of Renode's own (platforms/...), or a file you "
                f"allow with {ALLOW_TOOLS_ENV}={path} (it may hold code: Python peripherals)")
    return None


def _context_free(check: Callable[[Any], str | None]) -> Callable[[Any, dict], str | None]:
    return lambda value, ctx: check(value)


VALUE_CHECKS: dict[str, Callable[[Any, dict], str | None]] = {
    "name": _pattern(NAME_RE, "a valid name (lower-case letters, digits, _ . -)"),
    "region_name": _pattern(REGION_RE, "a valid region name (a lower-case C identifier: letters, digits, _)"),
    "mode_name": _pattern(VELA_NAME_RE, "a valid mode name"),
    "renode_platform": lambda value, ctx: _renode_platform_problem(value),
    "renode_peripheral": _pattern(RENODE_PERIPHERAL_RE, "a Renode peripheral name like sysbus.uart0"),
    "compiler": _context_free(_program_named(COMPILER_RE, "C compiler")),
    "linker": _context_free(_program_named(LINKER_RE, "linker")),
    "qemu": _context_free(_program_named(QEMU_RE, "QEMU emulator")),
    "objdump": _context_free(_program_named(DISASSEMBLER_RE, "objdump")),
    "serial_port": lambda value, ctx: None if PORT_RE.fullmatch(_without_placeholders(value)) and "{image}" not in value
    else f"{value!r} is not a serial device or pyserial URL of plain characters",
    "region": _region,
    "region_or_none": lambda value, ctx: None if value == "" else _region(value, ctx),
    "port": _npu_port,
    "bus_width": lambda value, ctx: None if value in (32, 64, 128, 256) else f"{value} is not 32, 64, 128 or 256",
}


# An array check: (values, ctx) -> (index or None for the whole array, why not), or None.

def _names_from(known: tuple[str, ...], what: str):
    """An array check: every entry one of `known` (listed in this order when one is not), none twice."""
    def check(names: list, ctx: dict) -> tuple[int, str] | None:
        for i, name in enumerate(names):
            if not isinstance(name, str) or name not in known:
                return i, f"{name!r} is not {what} (known: {', '.join(known)})"
            if name in names[:i]:
                return i, f"{name!r} is listed twice"
        return None
    return check


_extensions = _names_from(tuple(sorted(CORE_EXTENSIONS)), "a known core extension")
_compiler_options = _names_from((*OPTION_NAMES, ALL_OPTIONS), "a compiler-option parameter")


def _regions(names: list, ctx: dict) -> tuple[int, str] | None:
    for i, name in enumerate(names):
        if not isinstance(name, str) or _region(name, ctx):
            return i, f"no memory region named {name!r}"
    return None


def _units(names: list, ctx: dict) -> tuple[int, str] | None:
    units = {cost.unit for _, cost in ctx[CostModel]["classes"]}
    for i, unit in enumerate(names):
        if not isinstance(unit, str) or unit not in units:
            return i, f"no instruction class uses unit {unit!r}"
    return None


def _distinct_integers(accept: Callable[[int], bool], what: str) -> Callable[[list, dict], tuple | None]:
    """Distinct integers, at least one, each `what`."""
    def check(values: list, ctx: dict) -> tuple[int | None, str] | None:
        for i, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, int) or not accept(value):
                return i, f"{value!r} is not {what}"
        if not values or len(set(values)) != len(values):
            return None, "expected distinct values, at least one"
        return None
    return check


def _flash_args(args: list, ctx: dict) -> tuple[int, str] | None:
    """A flash command: the program first, then only arguments of its allow-list
    (hal/flash_args.py), placeholders only where allowed."""
    for i, arg in enumerate(args):
        if not isinstance(arg, str):
            return i, f"expected a string, got {arg!r}"
        rest = _without_placeholders(arg)
        if i == 0 and (problem := _FLASHER_CHECK(arg)):
            return 0, problem
        if "{" in rest or "}" in rest:
            return i, f"{arg!r}: the only placeholders are {', '.join(PLACEHOLDERS)}"
        if not ARG_RE.fullmatch(rest):
            return i, f"{arg!r} holds characters an argument may not have"
    problem = flash_args_problem(args[0], list(args[1:]), allowed_tools()) if args else None
    return (problem[0] + 1, problem[1]) if problem else None


def _without_placeholders(text: str) -> str:
    for placeholder in PLACEHOLDERS:
        text = text.replace(placeholder, "")
    return text


_FLASHER_CHECK = _program_named(FLASHER_RE, "flasher or emulator", any_name_when_allowed=True)

ARRAY_CHECKS: dict[str, Callable[[list, dict], tuple | None]] = {
    "flags": lambda values, ctx: flags_problem(values, flag_problem),
    "libs": lambda values, ctx: flags_problem(values, lib_problem),
    "objdump_flags": lambda values, ctx: flags_problem(values, objdump_flag_problem),
    "extensions": _extensions,
    "compiler_options": _compiler_options,
    "regions": _regions,
    "units": _units,
    "powers_of_two": _distinct_integers(lambda v: v > 0 and not v & (v - 1), "a positive power of two"),
    "positive_integers": _distinct_integers(lambda v: v > 0, "a positive integer"),
    "flash": _flash_args,
}

# Conditions a required_when, read_when or default_when rule names: (ctx) -> bool.
CONDITIONS: dict[str, Callable[[dict], bool]] = {
    # What each runner kind requires is data (model.RUNNER_KINDS): an emulator's program and
    # machine, the tables its target file must hold, a link it generates itself.
    "qemu_runner": lambda ctx: RUNNER_KINDS[ctx[RunnerSettings]["kind"]].emulator,  # read inside [runner]
    "firmware_runner": lambda ctx: "firmware" in RUNNER_KINDS[ctx[Target]["runner"].kind].tables,
    "serial_runner": lambda ctx: "serial" in RUNNER_KINDS[ctx[Target]["runner"].kind].tables,
    "renode_runner": lambda ctx: RUNNER_KINDS[ctx[Target]["runner"].kind].generates_link,
}


# --- checks across keys: on one field's value as soon as it is read (value, table, ctx), and on
# --- the whole dataclass once its table is read (obj, table, ctx) ----------------------------

def _unique(top: _Table, key: str, names: list[str]) -> None:
    seen = set()
    for i, name in enumerate(names):
        if name in seen:
            top.fail(f"{key}[{i}].name", f"duplicate name {name!r}")
        seen.add(name)


def _no_overlap(memory: tuple[MemoryRegion, ...], top: _Table, ctx: dict) -> None:
    ordered = sorted(enumerate(memory), key=lambda item: item[1].base)
    for (_, a), (j, b) in zip(ordered, ordered[1:]):
        if b.base < a.end:
            top.fail(f"memory[{j}].base", f"region {b.name} overlaps region {a.name}")


def _within_address_space(memory: tuple[MemoryRegion, ...], top: _Table, ctx: dict) -> None:
    """Every region inside what the core can address: 4 GiB on a 32-bit core (the harness
    takes addresses as 32-bit values), 2^64 bytes otherwise."""
    arch = ctx[Target]["arch"]
    bits = 32 if THIRTY_TWO_BIT_ARCH_RE.fullmatch(arch) else 64
    for i, region in enumerate(memory):
        if region.end > 1 << bits:
            top.fail(f"memory[{i}]", f"region {region.name} ends at {region.end:#x}, beyond the {bits}-bit address "
                                     f"space of {arch} (last address {(1 << bits) - 1:#x})")


def _firmware_fits(firmware: Firmware, fw_t: _Table, ctx: dict) -> None:
    """The harness's data, stack and (in a shared region) code fit the regions named."""
    data_region = next(m for m in ctx[Target]["memory"] if m.name == firmware.data_region)
    if firmware.data_reserved >= data_region.size:
        fw_t.fail("data_reserved", f"{firmware.data_reserved} bytes do not fit in {data_region.name} ({data_region.size} bytes)")
    if firmware.stack_size >= firmware.data_reserved:
        fw_t.fail("stack_size", f"must be smaller than data_reserved ({firmware.data_reserved})")
    if firmware.code_region == firmware.data_region:
        if not firmware.code_size:
            fw_t.fail("code_size", "required when code_region and data_region are the same region")
        if firmware.code_size + firmware.data_reserved >= data_region.size:
            fw_t.fail("code_size", f"code_size + data_reserved do not fit in {data_region.name} ({data_region.size} bytes)")


def _machine_maps_memory(target: Target, top: _Table, ctx: dict) -> None:
    """Every memory region of a QEMU target is memory on its emulated machine (hal/emulated.py):
    else every trial would fault, exit 0, with nothing saying why."""
    if target.runner.kind != "qemu":
        return
    for i, region in enumerate(target.memory):
        problem = unmapped_problem(target.runner.machine, region.name, region.base, region.size)
        if problem:
            top.fail(f"memory[{i}]", problem)


def _npu_has_axi0(ports: tuple[NpuPort, ...], t: _Table, ctx: dict) -> None:
    if "axi0" not in {p.name for p in ports}:
        t.fail("ports", "an NPU needs at least its axi0 port")


def _flash_command(link: SerialLink, t: _Table, ctx: dict) -> None:
    """A written flash command names the image; a {port} is one edgetune picks and passes on."""
    generated = CONDITIONS["renode_runner"](ctx)  # Renode's flash step and port are generated
    if not generated:
        if not link.flash:
            t.fail("flash", "the flash command is empty")
        if not any("{image}" in arg for arg in link.flash):
            t.fail("flash", "the flash command never names the image ({image})")
    if "{port}" in link.port:
        if not link.flash_keeps_running:
            t.fail("port", "{port} (a loopback port edgetune picks) needs flash_keeps_running = true")
        if not generated and not any("{port}" in arg for arg in link.flash):
            t.fail("flash", "the port is {port} but the flash command never passes it on")


def _baud_divider(link: SerialLink, t: _Table, ctx: dict) -> None:
    if link.bauddiv < 16:  # CMSDK APB UART TRM: BAUDDIV must be at least 16
        t.fail("baudrate", f"{link.baudrate} baud needs a divider of {link.bauddiv} at {link.uart_clock_hz} Hz; "
                           "the UART needs >= 16")


FIELD_CHECKS: dict[tuple[type, str], tuple[Callable[[Any, _Table, dict], None], ...]] = {
    (Target, "memory"): (_no_overlap, _within_address_space),
    (Npu, "ports"): (_npu_has_axi0,),
}
# Fields that are no key of the file but follow from the keys read (values so far -> value).
DERIVED: dict[type, dict[str, Callable[[dict], Any]]] = {
    RunnerSettings: {"measures": lambda values: RUNNER_KINDS[values["kind"]].measures},
}
CROSS_CHECKS: dict[type, tuple[Callable[[Any, _Table, dict], None], ...]] = {
    Firmware: (_firmware_fits,),
    SerialLink: (_flash_command, _baud_divider),
    Target: (_machine_maps_memory,),
}
