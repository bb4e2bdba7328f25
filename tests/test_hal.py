"""Target descriptions: the shipped boards, host detection, and the loader's error messages.

Bad-file tests start from the real cortex-m55.toml text and change one thing, so each
checks exactly one rule and the error must name the file and the dotted key at fault.
"""
from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

import edgetune.hal.host as host_mod
from edgetune.hal import TargetError, detect_host, load_target
from edgetune.targets import get_target, target_file, target_names

KIB, MIB = 1024, 1024 * 1024
M55_TEXT = target_file("cortex-m55").read_text(encoding="utf-8")


def mutate(text: str, old: str, new: str) -> str:
    """Replace one exact occurrence; fail loudly if the board file no longer has it."""
    assert text.count(old) == 1, f"expected exactly one {old!r} in cortex-m55.toml"
    return text.replace(old, new)


def drop_line(text: str, prefix: str) -> str:
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.startswith(prefix)]
    assert len(hits) == 1, f"expected exactly one line starting with {prefix!r}"
    del lines[hits[0]]
    return "".join(lines)


def load_text(tmp_path: Path, text: str, name: str = "board.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path, load_target(path)


def expect_error(tmp_path: Path, text: str, key: str, *words: str) -> str:
    """Load `text`, expect TargetError naming the file and `key`; return the message."""
    path = tmp_path / "board.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TargetError) as info:
        load_target(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    # The dotted key is the part right after the file name, e.g. "board.toml: core.clock_hz: ..."
    assert f": {key}: " in message, message
    for word in words:
        assert word in message, message
    return message


# --- the shipped targets --------------------------------------------------------------------
def test_shipped_target_names_match_board_files():
    boards = sorted(p.stem for p in target_file("cortex-m55").parent.glob("*.toml"))
    assert target_names() == boards
    assert {"cortex-m55", "host"} <= set(boards)


@pytest.mark.parametrize("name", target_names())
def test_every_shipped_target_loads(name):
    target = get_target(name)
    assert target.name == name
    assert target.compilers, "every target offers at least one compiler"
    assert target.core.count >= 1 and target.core.clock_hz > 0


def test_cortex_m55_vector_unit():
    target = get_target("cortex-m55")
    assert target.has_vector("mve")
    mve = target.vector_unit("mve")
    assert mve.lanes_for("int8") == 16
    assert mve.lanes_for("int32") == 4
    with pytest.raises(KeyError):
        mve.lanes_for("int64")  # no such lane type: asked, not guessed
    with pytest.raises(KeyError):
        target.vector_unit("neon")


@pytest.mark.parametrize("region, base, size", [
    ("itcm", 0x0000_0000, 512 * KIB),
    ("dtcm", 0x2000_0000, 512 * KIB),
    ("sram2", 0x2100_0000, 4 * MIB),
])
def test_cortex_m55_memory_map(region, base, size):
    r = get_target("cortex-m55").region(region)
    assert (r.base, r.size, r.end) == (base, size, base + size)


def test_cortex_m55_power_runner_and_measure():
    target = get_target("cortex-m55")
    assert target.power is not None and target.power.source.strip()
    assert target.power.active_mw > target.power.idle_mw >= 0
    assert target.runner.kind == "qemu"
    assert target.measures == "instructions"


# --- buffer placement -----------------------------------------------------------------------
def test_place_buffers_prefers_dtcm_then_sram2_then_gives_up():
    target = get_target("cortex-m55")
    reserved = target.firmware.data_reserved
    dtcm_free = target.region("dtcm").size - reserved
    assert target.io_capacity("dtcm") == dtcm_free
    assert target.place_buffers(1024).name == "dtcm"
    assert target.place_buffers(dtcm_free).name == "dtcm"  # exactly full still fits
    assert target.place_buffers(dtcm_free + 1).name == "sram2"
    assert target.place_buffers(4 * MIB).name == "sram2"
    assert target.place_buffers(4 * MIB + 1) is None


def test_io_address_skips_the_harness_reservation():
    target = get_target("cortex-m55")
    assert target.io_address("dtcm") == 0x2000_0000 + target.firmware.data_reserved
    # sram2 is not the firmware's data region: nothing is reserved there.
    assert target.io_address("sram2") == 0x2100_0000


def test_host_has_no_firmware_so_nothing_is_placed():
    host = get_target("host")
    assert host.firmware is None
    assert host.place_buffers(1) is None
    assert host.measures == "time_ns"


# --- host detection -------------------------------------------------------------------------
def _first_cpuinfo_block() -> dict[str, str]:
    info = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return info
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    return info


def _sys_caches(root=Path("/sys/devices/system/cpu/cpu0/cache")) -> list[tuple[int, str, int]]:
    """An independent reading of the kernel's cache description."""
    out = []
    for index in sorted(root.glob("index*")):
        size = (index / "size").read_text().strip()
        scale = {"K": KIB, "M": MIB}.get(size[-1], 1)
        out.append((int((index / "level").read_text()), (index / "type").read_text().strip().lower(),
                    int(size.rstrip("KM")) * scale))
    return out


def test_host_vector_units_follow_cpuinfo_flags():
    flags = set(_first_cpuinfo_block().get("flags", "").split())
    expected = set()
    if "sse4_2" in flags:
        expected.add("sse4.2")
    if {"avx2", "fma"} <= flags:
        expected.add("avx2")
    if {"avx512f", "avx512bw", "avx512vl"} <= flags:
        expected.add("avx512")
    if {"avx2", "fma", "avx_vnni"} <= flags:
        expected.add("avxvnni")
    if {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= flags:
        expected.add("avx512vnni")
    host = get_target("host")
    assert {unit.name for unit in host.vector_units} == expected
    assert not host.has_vector("mve")  # an x86 host never offers Helium
    for unit in host.vector_units:
        assert unit.lanes_for("int8") == unit.register_bits // 8


def test_host_caches_come_from_sys():
    host = get_target("host")
    got = sorted((c.level, c.kind, c.size) for c in host.caches)
    # When /sys describes no caches the host target has none (host.toml lists none).
    assert got == sorted(_sys_caches())


def test_host_core_count():
    host = get_target("host")
    assert host.core.count >= 1
    if hasattr(os, "sched_getaffinity"):
        assert host.core.count == len(os.sched_getaffinity(0))


def test_detect_host_requires_every_flag_of_a_unit(monkeypatch):
    # avx2 without fma is not avx2 for edgetune; avx512 needs f, bw and vl together.
    monkeypatch.setattr(host_mod, "_cpuinfo", lambda: {
        "flags": "sse2 sse4_2 avx2 avx512f avx512bw", "cpu MHz": "2500.000", "model name": "Fake CPU"})
    data = detect_host()
    assert [u["name"] for u in data["vector_units"]] == ["sse4.2"]
    assert data["core"]["clock_hz"] == 2_500_000_000
    assert data["core"]["name"] == "Fake CPU"


def test_detect_host_offers_vnni_only_with_its_flag_and_its_base_unit(monkeypatch):
    # avx_vnni needs avx2 + fma under it; avx512_vnni needs the whole AVX-512 unit.
    cases = {"avx2 fma avx512f avx512bw avx512vl": ["avx2", "avx512"],
             "avx2 avx_vnni avx512f avx512bw avx512_vnni": [],
             "avx2 fma avx_vnni": ["avx2", "avxvnni"],
             "avx2 fma avx512f avx512bw avx512vl avx512_vnni": ["avx2", "avx512", "avx512vnni"],
             "avx2 fma avx_vnni avx512f avx512bw avx512vl avx512_vnni": ["avx2", "avx512", "avxvnni", "avx512vnni"]}
    for flags, units in cases.items():
        monkeypatch.setattr(host_mod, "_cpuinfo", lambda flags=flags: {"flags": flags})
        assert [u["name"] for u in detect_host()["vector_units"]] == units, flags


def test_detect_host_without_clock_keeps_the_default(monkeypatch):
    monkeypatch.setattr(host_mod, "_cpuinfo", lambda: {"flags": "avx2 fma", "cpu MHz": "n/a"})
    data = detect_host()
    assert "clock_hz" not in data["core"]
    assert [u["name"] for u in data["vector_units"]] == ["avx2"]
    assert data["vector_units"][0]["lanes"]["int32"] == 8


def test_cpuinfo_reads_only_the_first_processor(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nflags\t\t: sse4_2 avx2\n\nprocessor\t: 1\nflags\t\t: avx512f\n")
    info = host_mod._cpuinfo(path)
    assert info == {"processor": "0", "flags": "sse4_2 avx2"}
    assert host_mod._cpuinfo(tmp_path / "missing") == {}


def test_caches_parses_sizes_and_skips_odd_entries(tmp_path):
    def index(n, **files):
        folder = tmp_path / f"index{n}"
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text + "\n")

    index(0, level="1", type="Data", size="48K", coherency_line_size="64")
    index(1, level="2", type="Unified", size="2M", coherency_line_size="128")
    index(2, level="3", type="Unified", size="32M")  # no line size: left out, not guessed
    assert host_mod._caches(tmp_path) == [
        {"level": 1, "kind": "data", "size": 48 * KIB, "line": 64},
        {"level": 2, "kind": "unified", "size": 2 * MIB, "line": 128},
    ]


# --- bad target files -----------------------------------------------------------------------
CLOCK_LINE = "clock_hz = 32_000_000"


def test_unmodified_copy_loads(tmp_path):
    # The baseline for every mutation below: the copy itself is fine.
    path, target = load_text(tmp_path, M55_TEXT)
    shipped = get_target("cortex-m55")
    assert target.source_file == str(path)
    assert replace(target, source_file=shipped.source_file) == shipped


def test_missing_required_key(tmp_path):
    expect_error(tmp_path, drop_line(M55_TEXT, "clock_hz"), "core.clock_hz", "missing")


@pytest.mark.parametrize("value", ['"fast"', "true", "3.5e7", "[1]"])
def test_clock_of_the_wrong_type(tmp_path, value):
    # `true` is an int in Python: the loader must still refuse it as a number.
    text = mutate(M55_TEXT, CLOCK_LINE, f"clock_hz = {value}")
    expect_error(tmp_path, text, "core.clock_hz", "expected int")


@pytest.mark.parametrize("old, new, key, word", [
    # the loader's own documented example: a memory size that is text
    ("size = 0x0020_0000", 'size = "big"', "memory[1].size", "'big'"),
    ("timeout_s = 20", "timeout_s = false", "runner.timeout_s", "False"),
    ("registers = 8", "registers = 0", "vector_units[0].registers", "positive"),
    ('kind = "qemu"', 'kind = "jtag"', "runner.kind", "'jtag'"),
    ('access = "rx"', 'access = "xr"', "memory[4].access", "'xr'"),
    ('name = "gcc"', 'name = "clang"', "compilers[1].name", "duplicate"),
    ("data_reserved = 0x1_0000", "data_reserved = 0x8_0000", "firmware.data_reserved", "dtcm"),
])
def test_wrong_values_name_their_key(tmp_path, old, new, key, word):
    expect_error(tmp_path, mutate(M55_TEXT, old, new), key, word)


def test_unknown_key_in_a_table(tmp_path):
    text = mutate(M55_TEXT, CLOCK_LINE, CLOCK_LINE + "\nturbo = true\n#")
    expect_error(tmp_path, text, "core.turbo", "unknown key")


def test_unknown_top_level_key(tmp_path):
    text = mutate(M55_TEXT, 'arch = "armv8.1-m.main"', 'arch = "armv8.1-m.main"\ncolour = "red"')
    expect_error(tmp_path, text, "colour", "unknown key")


def test_overlapping_memory_regions(tmp_path):
    # sram2 moved inside dtcm (0x2000_0000 + 512 KiB).
    text = mutate(M55_TEXT, "base = 0x2100_0000", "base = 0x2007_0000")
    expect_error(tmp_path, text, "memory[3].base", "sram2", "dtcm", "overlaps")


def test_io_region_that_does_not_exist(tmp_path):
    text = mutate(M55_TEXT, 'io_regions = ["dtcm", "sram2"]', 'io_regions = ["dtcm", "sram9"]')
    expect_error(tmp_path, text, "firmware.io_regions[1]", "sram9")


INJECTIONS = ["-O2; rm -rf /", "$(reboot)", "-O2 `reboot`", "-DX=$(id)", "-O2|sh", "-O2 && reboot", "-O2 -O3"]


@pytest.mark.parametrize("flag", INJECTIONS)
def test_compiler_flag_injection_is_refused(tmp_path, flag):
    old = 'cflags = ["-march=armv8.1-m.main+mve.fp+fp.dp", "-mfloat-abi=hard", "-mthumb"]'
    text = mutate(M55_TEXT, old, f"cflags = [\"-mthumb\", '{flag}']")
    expect_error(tmp_path, text, "compilers[0].cflags[1]", "not an allowed compiler flag")


@pytest.mark.parametrize("flag", INJECTIONS)
def test_linker_flag_injection_is_refused(tmp_path, flag):
    old = 'ldflags = ["-march=armv8.1-m.main+mve.fp+fp.dp", "-mfloat-abi=hard", "-mthumb"]'
    text = mutate(M55_TEXT, old, f"ldflags = ['{flag}']")
    expect_error(tmp_path, text, "firmware.ldflags[0]", "not an allowed compiler flag")


@pytest.mark.parametrize("command", ["arm none eabi gcc", "gcc;reboot", "$(reboot)", "gcc&&id", "gcc|sh",
                                     "`id`", "gcc>out", "../bin/gcc"])
def test_compiler_command_must_be_a_program(tmp_path, command):
    text = mutate(M55_TEXT, 'command = "arm-none-eabi-gcc"', f"command = '{command}'")
    expect_error(tmp_path, text, "compilers[0].command", "not a program name or absolute path")


def test_absolute_compiler_command_needs_the_users_opt_in(tmp_path, monkeypatch):
    """A path is run only when the user allowed that very path ($EDGETUNE_ALLOW_TOOLS):
    a file name like a compiler's proves nothing about what the file is."""
    text = mutate(M55_TEXT, 'command = "arm-none-eabi-gcc"', 'command = "/opt/gcc-arm/bin/arm-none-eabi-gcc"')
    monkeypatch.delenv("EDGETUNE_ALLOW_TOOLS", raising=False)
    expect_error(tmp_path, text, "compilers[0].command", "absolute path", "EDGETUNE_ALLOW_TOOLS")
    monkeypatch.setenv("EDGETUNE_ALLOW_TOOLS", "/opt/other/gcc:/opt/gcc-arm/bin/../bin/arm-none-eabi-gcc")
    _, target = load_text(tmp_path, text)
    assert target.compiler("gcc").command == "/opt/gcc-arm/bin/arm-none-eabi-gcc"


# A newline is a shell metacharacter and has no place in a name, flag or program.
# Python's `$` also matches before a trailing newline, so `re.match(r"^...$")` lets one through.
@pytest.mark.parametrize("old, new, key", [
    ('command = "arm-none-eabi-gcc"', 'command = "arm-none-eabi-gcc\\n"', "compilers[0].command"),
    ('"-mthumb"]\n\n[[compilers]]', '"-mthumb\\n"]\n\n[[compilers]]', "compilers[0].cflags[2]"),
    ('name = "cortex-m55"\ndescription', 'name = "cortex-m55\\n"\ndescription', "name"),
], ids=["command", "cflag", "name"])
def test_trailing_newline_is_refused(tmp_path, old, new, key):
    expect_error(tmp_path, mutate(M55_TEXT, old, new), key)


def test_invalid_toml_syntax(tmp_path):
    text = mutate(M55_TEXT, CLOCK_LINE, "clock_hz = = 32")
    path = tmp_path / "board.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TargetError, match=re.escape(f"{path}: not valid TOML")):
        load_target(path)


def test_schema_version_2_is_refused(tmp_path):
    expect_error(tmp_path, mutate(M55_TEXT, "schema = 1", "schema = 2"), "schema", "version 2")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(TargetError, match=re.escape(str(path))):
        load_target(path)
    with pytest.raises(TargetError, match="nope.toml"):
        get_target(str(path))  # a user's file by path, through the catalog


def test_unknown_shipped_target_lists_the_known_ones():
    with pytest.raises(TargetError, match="cortex-m55"):
        get_target("no-such-board")


def test_circular_extends(tmp_path):
    (tmp_path / "a.toml").write_text('extends = "b.toml"\nname = "a"\n')
    (tmp_path / "b.toml").write_text('extends = "a.toml"\nname = "b"\n')
    with pytest.raises(TargetError, match="circular") as info:
        load_target(tmp_path / "a.toml")
    assert "a.toml" in str(info.value)


def test_self_extends_is_circular(tmp_path):
    (tmp_path / "me.toml").write_text('extends = "me.toml"\n')
    with pytest.raises(TargetError, match="circular"):
        load_target(tmp_path / "me.toml")


def test_extends_missing_parent_names_it(tmp_path):
    (tmp_path / "child.toml").write_text('extends = "ghost.toml"\n')
    with pytest.raises(TargetError, match="ghost.toml"):
        load_target(tmp_path / "child.toml")


def test_extends_overrides_and_inherits(tmp_path):
    # The parent lives in a subfolder: `extends` is relative to the child's own file.
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "m55.toml").write_text(M55_TEXT, encoding="utf-8")
    child = tmp_path / "my-board.toml"
    child.write_text('extends = "base/m55.toml"\nname = "my-board"\n\n[core]\nclock_hz = 100_000_000\n')
    target = load_target(child)
    parent = get_target("cortex-m55")
    assert target.name == "my-board"
    assert target.core.clock_hz == 100_000_000
    assert target.core.name == parent.core.name  # the rest of [core] is the parent's
    assert target.memory == parent.memory
    assert target.firmware == parent.firmware
    assert target.vector_units == parent.vector_units
    assert target.source_file == str(child)


def test_child_errors_name_the_child_file(tmp_path):
    (tmp_path / "m55.toml").write_text(M55_TEXT, encoding="utf-8")
    child = tmp_path / "child.toml"
    child.write_text('extends = "m55.toml"\n\n[core]\nclock_hz = "fast"\n')
    with pytest.raises(TargetError, match=re.escape(f"{child}: core.clock_hz: ")):
        load_target(child)


# --- extends: a shipped target by name, a path, and what is neither ---------------------------------
def test_extends_names_a_shipped_target(tmp_path):
    """A pip-installed user cannot know where site-packages is: a shipped target's name works
    from any folder."""
    child = tmp_path / "my-m7.toml"
    child.write_text('extends = "cortex-m7"\nname = "my-m7"\n\n[core]\nclock_hz = 200_000_000\n')
    target, shipped = load_target(child), get_target("cortex-m7")
    assert target.name == "my-m7" and target.core.clock_hz == 200_000_000
    assert target.memory == shipped.memory and target.compilers == shipped.compilers


def test_extends_names_a_file_beside_it_by_name_or_path(tmp_path):
    (tmp_path / "family.toml").write_text(M55_TEXT, encoding="utf-8")
    for value in ("family", "family.toml", "./family.toml"):
        child = tmp_path / "child.toml"
        child.write_text(f'extends = "{value}"\nname = "child"\n')
        assert load_target(child).memory == get_target("cortex-m55").memory, value


def test_the_shipped_folder_the_loader_knows_is_the_catalogs():
    from edgetune.hal.loader import SHIPPED_TARGETS_DIR
    assert SHIPPED_TARGETS_DIR == target_file("cortex-m55").parent.resolve()


def _extends_error(tmp_path: Path, value: str, *words: str) -> str:
    child = tmp_path / "child.toml"
    child.write_text(f"extends = {value}\nname = \"child\"\n")
    with pytest.raises(TargetError) as info:
        load_target(child)
    message = str(info.value)
    assert message.startswith(f"{child}: extends: "), message
    for word in words:
        assert word in message, message
    return message


def test_an_ambiguous_extends_name_is_refused(tmp_path):
    """A local cortex-m7.toml and the shipped one: which was meant is a guess."""
    (tmp_path / "cortex-m7.toml").write_text(mutate(M55_TEXT, CLOCK_LINE, "clock_hz = 48_000_000"), encoding="utf-8")
    _extends_error(tmp_path, '"cortex-m7"', "ambiguous", "cortex-m7.toml")


def test_an_unknown_extends_name_lists_the_shipped_targets(tmp_path):
    _extends_error(tmp_path, '"cortex-m9"', "unknown target 'cortex-m9'", "cortex-m7", "cortex-m55")


@pytest.mark.parametrize("value, words", [('"."', ("neither a target name",)), ('"./"', ("folder",)),
                                          ('".."', ("neither",)), ('""', ("expected a target name",)),
                                          ('"sub/"', ("folder",)), ("3", ("expected a target name",)),
                                          ('"nothing.toml"', ("no such target file",))])
def test_extends_that_is_no_file_is_refused(tmp_path, value, words):
    (tmp_path / "sub").mkdir()
    _extends_error(tmp_path, value, *words)


def _no_hang(seconds: int = 10):
    """Fail instead of hanging (reading a FIFO nobody writes blocks forever)."""
    import signal

    def alarm(*_):
        raise AssertionError("the loader blocked")
    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)


def test_extends_naming_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.toml")
    _no_hang()
    try:
        _extends_error(tmp_path, '"pipe.toml"', "not a regular file")
        with pytest.raises(TargetError, match="not a regular file"):
            load_target(tmp_path / "pipe.toml")  # named directly, too
    finally:
        import signal
        signal.alarm(0)


@pytest.mark.parametrize("value", ['"."', '"pipe.toml"', '"cortex-m9"'])
def test_a_bad_extends_on_the_command_line_is_one_line_exit_2(tmp_path, value):
    from click.testing import CliRunner
    from edgetune.cli import main
    os.mkfifo(tmp_path / "pipe.toml")
    child = tmp_path / "child.toml"
    child.write_text(f"extends = {value}\n")
    _no_hang()
    try:
        result = CliRunner().invoke(main, ["targets", "show", str(child)])
    finally:
        import signal
        signal.alarm(0)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"edgetune: error: {child}: extends: "), result.output


# --- numbers a real part can have ------------------------------------------------------------------------
@pytest.mark.parametrize("old, new, key, words", [
    ("timeout_s = 20", "timeout_s = inf", "runner.timeout_s", ("finite",)),
    ("timeout_s = 20", "timeout_s = nan", "runner.timeout_s", ("finite",)),
    ("timeout_s = 20", "timeout_s = 1e9", "runner.timeout_s", ("86400",)),
    (CLOCK_LINE, "clock_hz = 100000000000000000000000000000", "core.clock_hz", ("must be in",)),
    (CLOCK_LINE, "clock_hz = 12", "core.clock_hz", ("must be in",)),
    ("active_mw = 1.0", "active_mw = 3e21", "power.active_mw", ("must be in",)),
], ids=["timeout-inf", "timeout-nan", "timeout-huge", "clock-1e29", "clock-12", "power-3e21"])
def test_numbers_out_of_any_real_range_are_refused(tmp_path, old, new, key, words):
    expect_error(tmp_path, mutate(M55_TEXT, old, new), key, *words)


def test_the_cli_refuses_an_infinite_timeout_in_one_line(tmp_path):
    from click.testing import CliRunner
    from edgetune.cli import main
    path = tmp_path / "board.toml"
    path.write_text(mutate(M55_TEXT, "timeout_s = 20", "timeout_s = inf"), encoding="utf-8")
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--target", str(path), "--shape", "m=2,n=2,k=2",
                                       "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "runner.timeout_s" in result.output and not (tmp_path / "t.db").exists()


def test_a_region_beyond_4_gib_on_a_32_bit_core_is_refused(tmp_path):
    """The harness takes addresses as 32-bit values: such a region used to pass and end in a
    13-line compile error of the harness."""
    text = mutate(M55_TEXT, "base = 0x2100_0000", "base = 0x1_2100_0000")
    expect_error(tmp_path, text, "memory[3]", "sram2", "32-bit", "armv8.1-m.main")
    text = mutate(M55_TEXT, "base = 0x2100_0000", "base = 0xFFF0_0000")  # starts inside, ends outside
    expect_error(tmp_path, text, "memory[3]", "32-bit")


def test_a_region_beyond_4_gib_on_a_64_bit_core_is_fine(tmp_path):
    text = target_file("cortex-a53").read_text(encoding="utf-8").replace("base = 0x4000_0000", "base = 0x8_0000_0000")
    _, target = load_text(tmp_path, text)
    assert target.memory[0].base == 0x8_0000_0000


# --- the schema is the dataclasses' fields (edgetune.hal.fields) ------------------------------
def _file_keys(cls) -> list[str]:
    from dataclasses import fields
    return sorted(f.metadata.get("key", f.name) for f in fields(cls) if f.metadata.get("in_file", True))


@pytest.mark.parametrize("anchor, table, cls_name", [
    (CLOCK_LINE, "core", "Core"),
    ("timeout_s = 20", "runner", "RunnerSettings"),
    ("registers = 8", "vector_units[0]", "VectorUnit"),
    ('access = "rx"', "memory[4]", "MemoryRegion"),
    ("data_reserved = 0x1_0000", "firmware", "Firmware"),
    ('overlapping_units = ["vector_memory", "vector_compute"]', "cost", "CostModel"),
])
def test_the_keys_a_table_allows_are_its_dataclass_fields(tmp_path, anchor, table, cls_name):
    import edgetune.hal.cost as cost_mod
    import edgetune.hal.model as model_mod
    cls = getattr(model_mod, cls_name, None) or getattr(cost_mod, cls_name)
    message = expect_error(tmp_path, mutate(M55_TEXT, anchor, anchor + "\nturbo = true"), f"{table}.turbo",
                           "unknown key")
    assert message.endswith(f"(allowed: {', '.join(_file_keys(cls))})"), message


def test_a_new_field_is_a_new_key_with_nothing_else_to_write():
    """The generic reader on a dataclass it has never seen: keys, types, defaults and rules all
    come from the fields (what adding a field to a target dataclass amounts to)."""
    from dataclasses import dataclass

    from edgetune.hal import loader
    from edgetune.hal.fields import POSITIVE, spec

    @dataclass(frozen=True)
    class Probe:
        name: str = spec(check="name")
        speed_hz: float = spec(1.0, within=POSITIVE, key="speed")
        pins: tuple[int, ...] = ()

    def read(data: dict):
        return loader._read(Probe, loader._Table("f.toml", "probe", data), {})

    assert read({"name": "swd", "speed": 4}) == Probe("swd", 4.0, ())
    assert read({"name": "swd", "pins": [1, 2]}).pins == (1, 2)
    for data, message in [({}, "probe.name: required key is missing"),
                          ({"name": "SWD"}, "probe.name: 'SWD' is not a valid name"),
                          ({"name": "swd", "speed": -1}, "probe.speed: must be positive, got -1"),
                          ({"name": "swd", "pins": [1, "2"]}, "probe.pins[1]: expected int, got '2'"),
                          ({"name": "swd", "speed_hz": 1}, "probe.speed_hz: unknown key (allowed: name, pins, speed)")]:
        with pytest.raises(TargetError, match=re.escape(f"f.toml: {message}")):
            read(data)


def test_a_misspelt_field_rule_is_refused_where_it_is_written():
    from edgetune.hal.fields import spec
    with pytest.raises(TypeError, match="unknown field rules: withn"):
        spec(0, withn=(0, 1))


@pytest.mark.parametrize("value", ['[["vector_memory"]]', '[{ unit = "x" }]'])
def test_an_overlapping_unit_that_is_not_a_name_is_one_error_line(tmp_path, value):
    # An array or table here used to raise TypeError (unhashable) out of the loader.
    text = mutate(M55_TEXT, 'overlapping_units = ["vector_memory", "vector_compute"]', f"overlapping_units = {value}")
    expect_error(tmp_path, text, "cost.overlapping_units[0]", "no instruction class uses unit")


# --- a board's memory against its emulated machine's -------------------------------------------
M7_TCM_BOARD = '''extends = "cortex-m7"
name = "my-m7"
[[memory]]
name = "ssram1"
kind = "sram"
base = 0x0000_0000
size = 0x0040_0000
access = "rwx"
[[memory]]
name = "sram"
kind = "sram"
base = {sram_base}
size = 0x0008_0000
access = "rwx"
[firmware]
data_region = "sram"
io_regions = ["sram"]
'''


def test_a_region_the_emulated_machine_does_not_map_is_refused_naming_it(tmp_path):
    """The issue's M7 board, SRAM at 0x2400_0000: mps2-an500 has no memory there (every
    trial faulted, exit 0)."""
    expect_error(tmp_path, M7_TCM_BOARD.format(sram_base="0x2400_0000"), "memory[1]", "region sram",
                 "0x24000000-0x2407ffff", "mps2-an500", "ssram23 0x20000000-0x207fffff")


def test_a_region_ending_past_the_machines_memory_is_refused(tmp_path):
    expect_error(tmp_path, M7_TCM_BOARD.format(sram_base="0x207c_0000"), "memory[1]", "region sram")


def test_a_region_inside_the_machines_memory_loads(tmp_path):
    path = tmp_path / "board.toml"
    path.write_text(M7_TCM_BOARD.format(sram_base="0x2000_0000"), encoding="utf-8")
    assert [m.name for m in load_target(path).memory] == ["ssram1", "sram"]


@pytest.mark.parametrize("name", ["cortex-m4", "cortex-m7", "cortex-m55"])
def test_the_shipped_emulated_boards_are_within_their_machines(name):
    from edgetune.hal.emulated import EMULATED_MEMORY, unmapped_problem
    target = get_target(name)
    assert target.runner.machine in EMULATED_MEMORY
    assert all(unmapped_problem(target.runner.machine, m.name, m.base, m.size) is None for m in target.memory)
