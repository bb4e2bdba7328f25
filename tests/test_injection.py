"""Nothing from a target file, a stored or imported trial, an export manifest or the command
line reaches a shell, a command line, a linker script or generated C unvalidated.

Every input that flows there is listed below, and each is tried with the usual payloads:
shell separators and substitutions, a newline followed by an #include, a C comment escape,
a smuggled compiler flag, a path out of its folder. Each attempt must be refused with one
line naming the culprit (exit status 2 on the command line), no marker file may appear,
and nothing already stored may change.
"""
from __future__ import annotations

import copy
import json
import sqlite3
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.codegen.manifest import write_manifest
from edgetune.targets import target_file
from edgetune.tuner import TuningDatabase, Workload
from stored import stored_db

MATMUL_VERSION = get_kernel("matmul_s8").version  # lines and manifests of the current template

MARK = "PWNED"  # the file every payload tries to create (or include)

PAYLOADS = {
    "semicolon": "x; touch {m}",
    "subshell": "$(touch {m})",
    "backticks": "`touch {m}`",
    "newline-include": 'x\n#include "{m}"',
    "comment-escape": "x */ int pwned; /*",
    "flag-smuggling": "-fplugin={m}.so",
    "dotdot": "../../{m}",
}


def payload(kind: str, tmp_path: Path) -> str:
    return PAYLOADS[kind].format(m=tmp_path / MARK)


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def assert_refused(code: int, out: str, culprit: str, tmp_path: Path) -> None:
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 2, out
    assert len(lines) == 1 and lines[0].startswith("edgetune: error: "), out
    assert culprit in lines[0], out
    assert not list(tmp_path.rglob(f"*{MARK}*")), "a payload ran"


# --- target files -----------------------------------------------------------------------------
def _toml(value) -> str:
    """TOML for a value (inline tables and arrays; JSON string escapes are TOML's too)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    return "{" + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + "}"


def write_target(path: Path, data: dict) -> Path:
    path.write_text("".join(f"{key} = {_toml(value)}\n" for key, value in data.items()), encoding="utf-8")
    return path


def board(name: str) -> dict:
    data = tomllib.loads(target_file(name).read_text(encoding="utf-8"))
    if "extends" in data:  # the serial board: its parent's tables, then its own
        parent = board(Path(data.pop("extends")).stem)
        for key, value in data.items():
            parent[key] = {**parent[key], **value} if isinstance(value, dict) and key in parent else value
        data = parent
    return data


def renode_board() -> dict:
    data = board("an547-serial")
    data["runner"] = {**data["runner"], "kind": "renode"}
    data["renode"] = {"platform": "@platforms/cpus/cortex-m55.repl", "uart": "sysbus.uart0"}
    return data


# (base target, path to the field, the key an error must name). Every string of a target
# file that reaches a command line, a linker script, a file name or generated C.
TARGET_FIELDS = [
    ("cortex-m55", ("name",), "name"),
    ("cortex-m55", ("compilers", 0, "name"), "compilers[0].name"),
    ("cortex-m55", ("compilers", 0, "command"), "compilers[0].command"),
    ("cortex-m55", ("compilers", 0, "cflags", 0), "compilers[0].cflags[0]"),
    ("cortex-m55", ("compilers", 1, "cflags", 5), "compilers[1].cflags[5]"),
    ("cortex-m55", ("firmware", "linker"), "firmware.linker"),
    ("cortex-m55", ("firmware", "ldflags", 0), "firmware.ldflags[0]"),
    ("cortex-m55", ("firmware", "libs", "*"), "firmware.libs[0]"),
    ("cortex-m55", ("firmware", "code_region"), "firmware.code_region"),
    ("cortex-m55", ("firmware", "io_regions", 0), "firmware.io_regions[0]"),
    ("cortex-m55", ("firmware", "startup"), "firmware.startup"),
    ("cortex-m55", ("runner", "program"), "runner.program"),
    ("cortex-m55", ("runner", "machine"), "runner.machine"),
    ("cortex-m55", ("runner", "cpu"), "runner.cpu"),
    ("cortex-m55", ("runner", "resource"), "runner.resource"),
    ("cortex-m55", ("memory", 0, "name"), "memory[0].name"),
    ("cortex-m55", ("vector_units", 0, "name"), "vector_units[0].name"),
    ("cortex-m55", ("cost", "disassembler"), "cost.disassembler"),
    ("cortex-m55", ("cost", "disassembler_flags", "*"), "cost.disassembler_flags[0]"),
    ("cortex-m55", ("cost", "classes", "alu", "unit"), "cost.classes.alu.unit"),
    ("cortex-m55", ("npus", 0, "memory_modes", 0, "name"), "npus[0].memory_modes[0].name"),
    ("cortex-m55", ("npus", 0, "ports", 0, "region"), "npus[0].ports[0].region"),
    ("host", ("compilers", 0, "cflags", 0), "compilers[0].cflags[0]"),
    ("host", ("compilers", 0, "command"), "compilers[0].command"),
    ("an547-serial", ("serial", "port"), "serial.port"),
    ("an547-serial", ("serial", "flash", 0), "serial.flash[0]"),
    ("an547-serial", ("serial", "flash", 2), "serial.flash[2]"),
    ("an547-serial", ("serial", "flash", 12), "serial.flash[12]"),
    ("renode", ("renode", "platform"), "renode.platform"),
    ("renode", ("renode", "uart"), "renode.uart"),
]


def _set(data: dict, path: tuple, value) -> dict:
    """A copy of `data` with the field at `path` set; a path ending in "*" sets a list
    field to [value]."""
    data = copy.deepcopy(data)
    if path[-1] == "*":
        path, value = path[:-1], [value]
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def _base(name: str) -> dict:
    return renode_board() if name == "renode" else board(name)


@pytest.mark.parametrize("base", sorted({b for b, _, _ in TARGET_FIELDS}))
def test_unchanged_base_targets_load(tmp_path, base):
    """The bases load as written here: every refusal below is the payload's doing."""
    code, out = cli("targets", "show", str(write_target(tmp_path / "t.toml", _base(base))))
    assert code == 0, out


# A flasher's arguments and a serial port are the user's own recipe for a device: any plain
# token passes there (a flag or a relative path is what such commands take), never a shell
# character. Every other field refuses every payload.
PLAIN_TOKEN_FIELDS = {"serial.port", "serial.flash[2]", "serial.flash[12]"}
PLAIN_TOKEN_PAYLOADS = {"flag-smuggling", "dotdot"}


@pytest.mark.parametrize("kind", PAYLOADS)
@pytest.mark.parametrize("base, path, key", TARGET_FIELDS, ids=[f"{b}:{k}" for b, _, k in TARGET_FIELDS])
def test_target_file_fields_refuse_injection(tmp_path, base, path, key, kind):
    if key in PLAIN_TOKEN_FIELDS and kind in PLAIN_TOKEN_PAYLOADS:
        kind = "backticks"
    toml = write_target(tmp_path / "evil.toml", _set(_base(base), path, payload(kind, tmp_path)))
    code, out = cli("targets", "show", str(toml))
    assert_refused(code, out, key, tmp_path)
    assert str(toml) in out


@pytest.mark.parametrize("base, path, key", [f for f in TARGET_FIELDS if f[0] in ("cortex-m55", "host")][:6])
def test_a_tuning_run_with_a_poisoned_target_stores_nothing(tmp_path, base, path, key):
    db = stored_db(tmp_path)
    before = db.read_bytes()
    toml = write_target(tmp_path / "evil.toml", _set(_base(base), path, payload("subshell", tmp_path)))
    code, out = cli("tune", "matmul_s8", "--target", str(toml), "--shape", "m=2,n=2,k=2", "--db", str(db))
    assert_refused(code, out, key, tmp_path)
    assert db.read_bytes() == before


@pytest.mark.parametrize("flag", ["-fplugin=/usr/lib/x.so", "-fplugin-arg-x-y=1", "-B/usr/bin", "-wrapper",
                                  "--specs=/usr/lib/x.specs", "-Xclang", "-Xlinker", "-Wl,-plugin=/usr/lib/x.so",
                                  "-Wa,-o", "-o/usr/x", "--output=/usr/x", "-MF/usr/x", "-include", "-I/usr/evil",
                                  "-isystem/usr/evil", "-T/usr/x.ld", "-fdump-tree-all", "-save-temps",
                                  "-Dfopen=popen", "-L/home/evil", "--sysroot=/home/evil", "--sysroot=/usr/../home",
                                  "-fuse-ld=/home/evil/ld", "-fprofile-generate=/usr/x", "--config=/usr/x",
                                  "--plugin=/usr/lib/x.so"])
def test_flags_that_load_code_run_programs_or_write_files_are_refused(tmp_path, flag):
    """Plain tokens, yet each would load a plugin, run another program, pull in other
    headers or options, or write a file of the attacker's choosing."""
    toml = write_target(tmp_path / "evil.toml", _set(board("cortex-m55"), ("compilers", 0, "cflags", 0), flag))
    assert_refused(*cli("targets", "show", str(toml)), "compilers[0].cflags[0]", tmp_path)


@pytest.mark.parametrize("path, program", [(("compilers", 0, "command"), "sh"), (("compilers", 0, "command"), "python3"),
                                           (("firmware", "linker"), "/bin/bash"), (("runner", "program"), "env"),
                                           (("cost", "disassembler"), "perl")])
def test_programs_must_be_named_for_their_job(tmp_path, path, program):
    """A shell or an interpreter as 'compiler' would turn flags into a script."""
    toml = write_target(tmp_path / "evil.toml", _set(board("cortex-m55"), path, program))
    assert_refused(*cli("targets", "show", str(toml)), ".".join(map(str, path)).replace(".0", "[0]"), tmp_path)


# Flags that write a file of their own (GCC "Developer Options", "Instrumentation Options",
# "Overall Options"): each passed the old deny-list, and -fopt-info-all=FILE made a tune append
# to a file of the attacker's choosing. The allow-list of option shapes refuses them all.
FILE_WRITING_FLAGS = ["-fopt-info-all=/usr/local/x.txt", "-fopt-info", "--coverage", "-ftest-coverage",
                      "-fprofile-arcs", "-fstack-usage", "-save-temps", "-save-temps=obj", "-fdump-tree-all",
                      "-fdump-rtl-expand", "-fdump-ipa-all", "-E", "-S", "-gsplit-dwarf", "-fcallgraph-info",
                      "-fsave-optimization-record", "-Wl,-Map=/usr/x.map", "-Wl,--script=/usr/x.ld",
                      "-Wa,-adhln=/usr/x.lst", "-Wp,-MD,/usr/x.d", "-MD", "-frecord-gcc-switches",
                      "-fdiagnostics-format=sarif-file", "-aux-info=/usr/x", "-fno-dump-tree-all", "-f",
                      "-fstack-usage=1", "-O4", "-std=c99x", "--specs=/usr/lib/x.specs", "-mllvm=-print-after-all"]


@pytest.mark.parametrize("flag", FILE_WRITING_FLAGS)
def test_flags_that_write_files_are_refused(tmp_path, flag):
    toml = write_target(tmp_path / "evil.toml", _set(board("cortex-m55"), ("compilers", 0, "cflags", 0), flag))
    assert_refused(*cli("targets", "show", str(toml)), "compilers[0].cflags[0]", tmp_path)
    assert repr(flag) in cli("targets", "show", str(toml))[1]  # the error names the flag


@pytest.mark.parametrize("flags, culprit", [
    (["-mllvm", "-print-after-all"], "cflags[1]"), (["-mllvm", "-stats-file=/usr/x"], "cflags[1]"),
    (["-mllvm"], "cflags[0]"), (["--param", "x;y"], "cflags[1]"), (["-O2", "--param"], "cflags[1]"),
    (["-mllvm", "-force-vector-width"], "cflags[1]"), (["-mllvm", "-enable-loop-flatten=1"], "cflags[1]"),
])
def test_paired_flags_take_only_vetted_values(tmp_path, flags, culprit):
    """-mllvm and --param pass the next element on: it is checked as their value."""
    toml = write_target(tmp_path / "evil.toml", _set(board("cortex-m55"), ("compilers", 1, "cflags"), flags))
    assert_refused(*cli("targets", "show", str(toml)), f"compilers[1].{culprit}", tmp_path)


def test_a_tune_with_a_file_writing_flag_writes_no_file(tmp_path):
    """The reported case end to end: the tune is refused before any compiler runs."""
    written = tmp_path / "opt-info.txt"
    db = stored_db(tmp_path)
    before = db.read_bytes()
    data = _set(board("host"), ("compilers", 0, "cflags"), ["-march=native", f"-fopt-info-all={written}"])
    toml = write_target(tmp_path / "evil.toml", data)
    code, out = cli("tune", "matmul_s8", "--target", str(toml), "--shape", "m=2,n=2,k=2", "--db", str(db))
    assert_refused(code, out, "compilers[0].cflags[1]", tmp_path)
    assert not written.exists() and db.read_bytes() == before


def _shipped_flags() -> list[str]:
    """Every flag the shipped targets, the kernels and their vector paths compile with."""
    from edgetune.codegen.kernels.base import COMMON_CFLAGS, OPT_LEVELS
    from edgetune.codegen.kernels.dsp import DSP_CFLAGS
    from edgetune.targets import get_target, target_names
    flags = {*COMMON_CFLAGS, *(f"-{level}" for level in OPT_LEVELS), *DSP_CFLAGS}
    for name in target_names():
        target = get_target(name)
        flags.update(f for c in target.compilers for f in c.cflags)
        if target.firmware is not None:
            flags.update(target.firmware.ldflags)
    return sorted(flags)


@pytest.mark.parametrize("flag", _shipped_flags())
def test_the_flags_edgetune_ships_pass(flag):
    from edgetune.hal.flags import flag_problem
    assert flag_problem(flag) is None


@pytest.mark.parametrize("flags", [
    ["-O3", "-funroll-loops", "-fno-unroll-loops", "-ffp-contract=fast", "-falign-loops=16", "-fno-pie"],
    ["-mcpu=cortex-m7", "-mtune=cortex-m7", "-mfpu=fpv5-d16", "-mno-unaligned-access", "-Wno-unused-parameter",
     "-Werror=vla", "-Wframe-larger-than=512", "-DUSE_FAST=1", "-UNDEBUG", "-std=gnu11", "-g3"],
    ["--param", "max-unroll-times=4", "--param=max-completely-peel-times=2", "-Wl,--gc-sections", "-lm"],
    ["-mllvm", "-force-vector-width=4", "-mllvm", "-enable-loopinterchange", "--target=thumbv7em-none-eabi"],
], ids=["optimisation", "target-and-warnings", "param-and-link", "mllvm"])
def test_ordinary_tuning_flags_pass(tmp_path, flags):
    toml = write_target(tmp_path / "ok.toml", _set(board("cortex-m55"), ("compilers", 1, "cflags"), flags))
    code, out = cli("targets", "show", str(toml))
    assert code == 0, out


# Programs: a bare name of the program's kind (found on PATH when run), or an absolute path the
# user opted into. A script named like a compiler, anywhere, used to be run.
PROGRAM_FIELDS = [(("compilers", 0, "command"), "compilers[0].command", "arm-none-eabi-gcc"),
                  (("runner", "program"), "runner.program", "qemu-system-arm"),
                  (("firmware", "linker"), "firmware.linker", "arm-none-eabi-gcc"),
                  (("cost", "disassembler"), "cost.disassembler", "arm-none-eabi-objdump")]


def _fake_tool(folder: Path, name: str, marker: Path) -> Path:
    folder.mkdir(exist_ok=True)
    script = folder / name
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("path, key, name", PROGRAM_FIELDS, ids=[k for _, k, _ in PROGRAM_FIELDS])
def test_a_program_by_absolute_path_needs_the_users_opt_in(tmp_path, monkeypatch, path, key, name):
    monkeypatch.delenv("EDGETUNE_ALLOW_TOOLS", raising=False)
    script = _fake_tool(tmp_path / "x", name, tmp_path / MARK)
    toml = write_target(tmp_path / "evil.toml", _set(board("cortex-m55"), path, str(script)))
    code, out = cli("targets", "show", str(toml))
    assert_refused(code, out, key, tmp_path)
    assert "EDGETUNE_ALLOW_TOOLS" in out and "--allow-tool" in out
    db = tmp_path / "t.db"
    code, out = cli("tune", "matmul_s8", "--target", str(toml), "--shape", "m=2,n=2,k=2", "--db", str(db))
    assert_refused(code, out, key, tmp_path)  # and the script never ran


def test_allowed_tool_paths_come_from_the_environment_or_the_command_line(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGETUNE_ALLOW_TOOLS", raising=False)
    script = tmp_path / "toolchain" / "arm-none-eabi-gcc"
    toml = write_target(tmp_path / "mine.toml", _set(board("cortex-m55"), ("compilers", 0, "command"), str(script)))
    result = CliRunner().invoke(main, ["targets", "show", str(toml)], env={"EDGETUNE_ALLOW_TOOLS": f"/opt/x:{script}"})
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["--allow-tool", str(script), "targets", "show", str(toml)],
                                env={"EDGETUNE_ALLOW_TOOLS": ""})
    assert result.exit_code == 0, result.output
    # Allowing one path allows that path only, not its folder or a name like it.
    other = write_target(tmp_path / "other.toml", _set(board("cortex-m55"), ("compilers", 0, "command"),
                                                       str(script.parent / "gcc")))
    result = CliRunner().invoke(main, ["--allow-tool", str(script), "targets", "show", str(other)],
                                env={"EDGETUNE_ALLOW_TOOLS": ""})
    assert_refused(result.exit_code, result.output, "compilers[0].command", tmp_path)
    code, out = cli("--allow-tool", "relative/gcc", "targets")
    assert_refused(code, out, "--allow-tool", tmp_path)


@pytest.mark.parametrize("path, key, name", [
    (("runner", "program"), "runner.program", "qemu-img"), (("runner", "program"), "runner.program", "qemu-arm"),
    (("runner", "program"), "runner.program", "qemu-system-arm-evil"),
    (("compilers", 0, "command"), "compilers[0].command", "evilgcc"),
    (("compilers", 0, "command"), "compilers[0].command", "x-gcc"),
    (("cost", "disassembler"), "cost.disassembler", "objdump.sh")])
def test_bare_names_come_from_the_allow_list(tmp_path, path, key, name):
    toml = write_target(tmp_path / "evil.toml", _set(board("cortex-m55"), path, name))
    assert_refused(*cli("targets", "show", str(toml)), key, tmp_path)


def test_a_flasher_is_a_known_name_or_an_allowed_path(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGETUNE_ALLOW_TOOLS", raising=False)
    for flasher, ok in (("qemu-system-arm", True), ("sh", False), ("/usr/local/bin/my-flash", False)):
        toml = write_target(tmp_path / "b.toml", _set(board("an547-serial"), ("serial", "flash", 0), flasher))
        code, out = cli("targets", "show", str(toml))
        assert (code == 0) is ok, out
        if not ok:
            assert_refused(code, out, "serial.flash[0]", tmp_path)
    monkeypatch.setenv("EDGETUNE_ALLOW_TOOLS", "/usr/local/bin/my-flash")
    assert cli("targets", "show", str(toml))[0] == 0  # any name once the user allowed the path



# Every argument of a flash command is allow-listed per flasher (hal/flash_args.py), not only
# its program: QEMU as the "flasher" once loaded a plugin and wrote a log where the file said.
QEMU_FLASH = board("an547-serial")["serial"]["flash"]


def _flash_with(*extra: str) -> list[str]:
    return [*QEMU_FLASH[:-2], *extra, *QEMU_FLASH[-2:]]


EVIL_FLASH = [
    (_flash_with("-plugin", "file=MARK.so"), "serial.flash[11]"),
    (_flash_with("-D", "MARK.log", "-d", "in_asm"), "serial.flash[11]"),
    (_flash_with("-d", "in_asm"), "serial.flash[11]"),
    (_flash_with("-semihosting"), "serial.flash[11]"),
    (_flash_with("-drive", "file=MARK.img"), "serial.flash[11]"),
    (_flash_with("-chardev", "file,id=x,path=MARK"), "serial.flash[11]"),
    (_flash_with("-monitor", "stdio"), "serial.flash[12]"),
    ([*QEMU_FLASH[:10], "file:MARK", *QEMU_FLASH[11:]], "serial.flash[10]"),
    ([*QEMU_FLASH[:-1], "MARK.elf"], "serial.flash[12]"),
    (["pyocd", "flash", "--script", "MARK.py", "{image}"], "serial.flash[2]"),
    (["pyocd", "flash", "--config", "MARK.yaml", "{image}"], "serial.flash[2]"),
    (["openocd", "-f", "MARK.cfg", "-c", "init"], "serial.flash[2]"),
    (["openocd", "-s", "MARK", "-f", "board/x.cfg"], "serial.flash[1]"),
    (["dfu-util", "-U", "MARK.bin", "-D", "{image}"], "serial.flash[1]"),
    (["probe-rs", "download", "--chip-description-path", "MARK.yaml", "{image}"], "serial.flash[2]"),
    (["JLinkExe", "-CommandFile", "MARK.jlink"], "serial.flash[1]"),
]


@pytest.mark.parametrize("flash, culprit", EVIL_FLASH,
                         ids=[f"{f[0]} {f[int(c[13:-1])]}" for f, c in EVIL_FLASH])
def test_every_argument_of_a_flash_command_is_allow_listed(tmp_path, flash, culprit):
    flash = [arg.replace("MARK", str(tmp_path / MARK)) for arg in flash]
    toml = write_target(tmp_path / "b.toml", _set(board("an547-serial"), ("serial", "flash"), flash))
    assert_refused(*cli("targets", "show", str(toml)), culprit, tmp_path)


@pytest.mark.parametrize("flash", [
    QEMU_FLASH,
    ["pyocd", "flash", "--target", "stm32h743zitx", "--frequency", "4M", "{image}"],
    ["probe-rs", "download", "--chip", "nRF52840_xxAA", "--protocol", "swd", "{image}"],
    ["st-flash", "--reset", "write", "{image}", "0x08000000"],
    ["STM32_Programmer_CLI", "-c", "port=SWD", "-w", "{image}", "-v", "-rst"],
    ["nrfjprog", "-f", "NRF52", "--program", "{image}", "--sectorerase", "--verify", "--reset"],
    ["dfu-util", "-a", "0", "-d", "0483:df11", "-s", "0x08000000:leave", "-D", "{image}"],
    ["picotool", "load", "-x", "{image}"],
    ["bossac", "-e", "-w", "-v", "-R", "--port=ttyACM0", "{image}"],
], ids=lambda flash: flash[0])
def test_ordinary_flash_commands_pass(tmp_path, flash):
    data = _set(board("an547-serial"), ("serial", "flash"), flash)
    if flash is not QEMU_FLASH:  # a real board: flashed, then reached on its own port
        data["serial"].update(port="/dev/ttyACM0", flash_keeps_running=False)
    toml = write_target(tmp_path / "b.toml", data)
    code, out = cli("targets", "show", str(toml))
    assert code == 0, out


def test_an_allowed_flasher_passes_only_plain_arguments_and_allowed_paths(tmp_path, monkeypatch):
    flasher, script = "/usr/local/bin/my-flash", str(tmp_path / "proxy.py")
    monkeypatch.setenv("EDGETUNE_ALLOW_TOOLS", flasher)
    flash = [flasher, script, "--listen", "{port}", "--", *QEMU_FLASH]
    toml = write_target(tmp_path / "b.toml", _set(board("an547-serial"), ("serial", "flash"), flash))
    assert_refused(*cli("targets", "show", str(toml)), "serial.flash[1]", tmp_path)
    monkeypatch.setenv("EDGETUNE_ALLOW_TOOLS", f"{flasher}:{script}")
    assert cli("targets", "show", str(toml))[0] == 0


def test_a_renode_platform_outside_renode_needs_the_users_opt_in(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGETUNE_ALLOW_TOOLS", raising=False)
    repl = tmp_path / "board.repl"
    toml = write_target(tmp_path / "b.toml", _set(renode_board(), ("renode", "platform"), f"@{repl}"))
    assert_refused(*cli("targets", "show", str(toml)), "renode.platform", tmp_path)
    monkeypatch.setenv("EDGETUNE_ALLOW_TOOLS", str(repl))
    assert cli("targets", "show", str(toml))[0] == 0

# --- network files (edgetune place) ------------------------------------------------------------------
NETWORK_FIELDS = [(("name",), "name"), (("layers", 0, "name"), "layers[0].name"), (("layers", 0, "op"), "layers[0].op"),
                  (("layers", 1, "shape", "pad"), "layers[1].shape")]


@pytest.mark.parametrize("kind", PAYLOADS)
@pytest.mark.parametrize("path, key", NETWORK_FIELDS, ids=[k for _, k in NETWORK_FIELDS])
def test_network_files_refuse_injection(tmp_path, path, key, kind):
    """Layer names become C identifiers and strings of the plan header."""
    example = Path(__file__).parent.parent / "examples" / "tiny_cnn.toml"
    network = write_target(tmp_path / "net.toml", _set(tomllib.loads(example.read_text()), path, payload(kind, tmp_path)))
    code, out = cli("place", str(network), "--out", str(tmp_path / "plan"), "--db", str(tmp_path / "p.db"))
    assert_refused(code, out, key, tmp_path)
    assert not (tmp_path / "plan").exists() and not (tmp_path / "p.db").exists()


# --- the command line -------------------------------------------------------------------------------
TUNE = ["tune", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2"]


def _with(args: list[str], option: str, value: str) -> list[str]:
    if option == "KERNEL":
        return ["tune", value, *args[2:]]
    if option in args:
        i = args.index(option)
        return [*args[:i + 1], value, *args[i + 2:]]
    return [*args, option, value]


# (option, culprit the error names: the payload itself is always in the line, repr-quoted)
CLI_OPTIONS = [("KERNEL", "unknown kernel"), ("--target", "target"), ("--shape", "shape"),
               ("--constraint", "constraint"), ("--objective", "objective"), ("--strategy", "strategy"),
               ("--initial", "configuration"), ("--cluster", "--cluster")]


@pytest.mark.parametrize("kind", PAYLOADS)
@pytest.mark.parametrize("option, culprit", CLI_OPTIONS, ids=[o for o, _ in CLI_OPTIONS])
def test_command_line_options_refuse_injection(tmp_path, option, culprit, kind):
    db = stored_db(tmp_path)
    before = db.read_bytes()
    value = payload(kind, tmp_path)
    args = TUNE if option != "--cluster" else _with(TUNE, "--target", "cortex-m55")
    code, out = cli(*_with(args, option, value), "--db", str(db))
    if option == "KERNEL" and value.startswith("-"):
        culprit = "No such option '-f'"  # taken for an option: click's usage error, in one line too
    assert_refused(code, out, culprit, tmp_path)
    assert db.read_bytes() == before


@pytest.mark.parametrize("kind", ["semicolon", "subshell", "newline-include"])
def test_cluster_address_must_be_a_whole_address(tmp_path, kind):
    """`re.match` with `$` accepts a trailing newline; the address is matched whole."""
    value = "tcp://127.0.0.1:8786" + ("\n" if kind == "newline-include" else payload(kind, tmp_path))
    code, out = cli(*_with(TUNE, "--target", "cortex-m55"), "--cluster", value, "--db", str(tmp_path / "c.db"))
    assert_refused(code, out, "--cluster", tmp_path)


@pytest.mark.parametrize("command", [["export", "--target", "host", "--out"], ["report", "--out"]])
def test_an_output_path_that_is_a_file_is_refused_and_kept(tmp_path, command):
    db = stored_db(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.write_text("mine")
    code, out = cli(*command, str(blocker), "--db", str(db))
    assert_refused(code, out, "blocker", tmp_path)
    assert blocker.read_text() == "mine"


def test_output_folders_are_used_literally(tmp_path):
    """An output path is a path, never handed to a shell: a payload in it is only an odd
    folder name."""
    db = stored_db(tmp_path)
    out_dir = tmp_path / payload("subshell", tmp_path).replace("/", "_")
    code, out = cli("report", "--db", str(db), "--out", str(out_dir))
    assert code == 0, out
    assert (out_dir / "index.html").is_file()
    assert not (tmp_path / MARK).exists()


# --- stored and imported trials -------------------------------------------------------------------------
CONFIG_PARAM = "tile_m"


def test_a_tampered_stored_configuration_never_reaches_the_exported_c(tmp_path):
    db = stored_db(tmp_path)
    conn = sqlite3.connect(db)
    (config_json,) = conn.execute("SELECT config FROM trials").fetchone()
    items = [[k, f'1); system("touch {tmp_path / MARK}"); //' if k == CONFIG_PARAM else v]
             for k, v in json.loads(config_json)]
    conn.execute("UPDATE trials SET config = ?", (json.dumps(items),))
    conn.commit()
    conn.close()
    out_dir = tmp_path / "export"
    code, out = cli("export", "--target", "host", "--out", str(out_dir), "--db", str(db))
    assert_refused(code, out, CONFIG_PARAM, tmp_path)
    assert not out_dir.exists() or not list(out_dir.glob("*.c"))


@pytest.mark.parametrize("column, value, culprit", [
    ("kernel", "matmul_s8; touch {m}", "kernel"),
    ("target", "$(touch {m})", "target"),
    ("shape", '{{"m); system(\\"touch {m}\\"); //": 2, "n": 2, "k": 2}}', "shape"),
    ("toolchain", "`touch {m}`", "toolchain"),
])
def test_a_tampered_stored_workload_is_refused_by_name(tmp_path, column, value, culprit):
    db = stored_db(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(f"UPDATE trials SET {column} = ?", (value.format(m=tmp_path / MARK),))
    conn.commit()
    conn.close()
    code, out = cli("export", "--target", "host", "--out", str(tmp_path / "export"), "--db", str(db))
    assert_refused(code, out, culprit, tmp_path)
    if column != "target":  # a foreign target name simply matches no workload of host
        assert str(db) in out
    assert not (tmp_path / "export").exists()


def _line(**changes) -> dict:
    line = {"format": "edgetune-trial", "schema_version": 2,
            "workload": {"kernel": "matmul_s8", "kernel_version": MATMUL_VERSION, "target": "host",
                         "shape": [["m", 2], ["n", 2], ["k", 2]], "toolchain": "0123456789ab"},
            # a legal point of the workload's space: db import checks lines against it
            "config": [["tile_m", 1], ["tile_n", 1], ["unroll_k", 1], ["vector", "c"], ["layout", "rowmajor"],
                       ["compiler", "gcc"], ["opt", "O2"]], "outcome": "ok", "values": {"time_ns": 1.0}, "error": "", "info": {},
            "strategy": "random", "seed": 0, "created": "2026-11-01T00:00:00Z",
            "measured_by": "lab-host-1", "measured_at": "2026-11-01T00:00:00Z"}
    for path, value in changes.items():
        node = line
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return line


IMPORT_FIELDS = [("workload__kernel", "kernel"), ("workload__target", "target"), ("workload__toolchain", "toolchain"),
                 ("created", "created"), ("measured_by", "measured_by"), ("measured_at", "measured_at"),
                 ("strategy", "strategy")]


@pytest.mark.parametrize("kind", PAYLOADS)
@pytest.mark.parametrize("field, culprit", IMPORT_FIELDS, ids=[f for f, _ in IMPORT_FIELDS])
def test_imported_trials_refuse_injection(tmp_path, field, culprit, kind):
    db = stored_db(tmp_path)
    before = db.read_bytes()
    lines = tmp_path / "in.jsonl"
    lines.write_text(json.dumps(_line()) + "\n" + json.dumps(_line(**{field: payload(kind, tmp_path)})) + "\n")
    code, out = cli("db", "import", str(lines), "--db", str(db))
    assert_refused(code, out, "line 2", tmp_path)
    assert culprit in out
    assert db.read_bytes() == before  # all or nothing: the good first line is not imported either


@pytest.mark.parametrize("kind", PAYLOADS)
@pytest.mark.parametrize("where", ["shape key", "config name"])
def test_imported_names_refuse_injection(tmp_path, where, kind):
    bad = payload(kind, tmp_path)
    line = _line(workload__shape=[[bad, 2], ["n", 2], ["k", 2]]) if where == "shape key" else \
        _line(config=[[bad, 1]])
    lines = tmp_path / "in.jsonl"
    lines.write_text(json.dumps(line) + "\n")
    db = tmp_path / "fresh.db"
    code, out = cli("db", "import", str(lines), "--db", str(db))
    assert_refused(code, out, "line 1", tmp_path)
    assert TuningDatabase(db).workloads() == []


def test_workloads_refuse_unplain_names_wherever_they_come_from():
    for bad in ({"kernel": "a b"}, {"target": "../x"}, {"shape": (("m=1;", 2),)}, {"shape": (("m", "2"),)},
                {"toolchain": "x\n"}, {"kernel_version": True}):
        fields = {"kernel": "matmul_s8", "kernel_version": 2, "target": "host", "shape": (("m", 2),), **bad}
        with pytest.raises(ValueError, match="workload"):
            Workload(**fields)


# --- export manifests: verify, tune --from-export ------------------------------------------------------------
def manifest() -> dict:
    """A host export's manifest as export_best writes it (values a real export holds)."""
    cflags = ["-march=native", "-std=c99", "-Wall", "-Wextra", "-Werror", "-ffunction-sections",
              "-fdata-sections", "-O2"]
    return {"manifest_version": 1, "edgetune_version": "0.1.0", "target": "host", "objective": "time_ns",
            "exported": "2026-11-29 10:00 UTC", "database": "edgetune.db",
            "dispatch": {"source": "edgetune_kernels.c", "compiler_command": "gcc", "cflags": list(cflags)},
            "kernels": [{"kernel": "matmul_s8", "kernel_version": MATMUL_VERSION, "shape": {"m": 2, "n": 2, "k": 2},
                         "function": "et_matmul_s8_m2_n2_k2", "source": "et_matmul_s8_m2_n2_k2.c",
                         "config": {"tile_m": 1, "tile_n": 2, "unroll_k": 1, "vector": "c", "layout": "rowmajor",
                                    "compiler": "gcc", "opt": "O2"},
                         "objective": "time_ns", "value": 10.0, "values": {"time_ns": 10.0}, "compiler": "gcc",
                         "compiler_command": "gcc", "cflags": list(cflags), "trial_id": 1, "measured": "",
                         "toolchain": ""}],
            "files": {"edgetune_kernels.c": "0" * 64, "edgetune_kernels.h": "0" * 64,
                      "et_matmul_s8_m2_n2_k2.c": "0" * 64}}


MANIFEST_FIELDS = [("target",), ("objective",), ("dispatch", "source"), ("dispatch", "compiler_command"),
                   ("dispatch", "cflags", 0), ("kernels", 0, "kernel"), ("kernels", 0, "function"),
                   ("kernels", 0, "source"), ("kernels", 0, "compiler_command"), ("kernels", 0, "cflags", 1),
                   ("kernels", 0, "config", "vector"), ("kernels", 0, "config", "opt")]


def _culprit(path: tuple) -> str:
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return text


@pytest.mark.parametrize("kind", PAYLOADS)
@pytest.mark.parametrize("path", MANIFEST_FIELDS, ids=[_culprit(p) for p in MANIFEST_FIELDS])
def test_export_manifests_refuse_injection(tmp_path, path, kind):
    folder = tmp_path / "export"
    folder.mkdir()
    data = _set(manifest(), path, payload(kind, tmp_path))
    write_manifest(folder, data)  # with a correct checksum: anyone can recompute it
    for args in (["verify", str(folder), "--target", "host"],
                 ["tune", "--from-export", str(folder), "--target", "host", "--db", str(tmp_path / "t.db")]):
        assert_refused(*cli(*args), _culprit(path), tmp_path)
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("where", ["shape key", "config name", "file name"])
def test_export_manifest_names_refuse_injection(tmp_path, where):
    folder = tmp_path / "export"
    folder.mkdir()
    data = manifest()
    bad = payload("dotdot", tmp_path)
    if where == "shape key":
        data["kernels"][0]["shape"][bad] = 2
    elif where == "config name":
        data["kernels"][0]["config"][bad] = 1
    else:
        data["files"][bad] = "0" * 64
    write_manifest(folder, data)
    code, out = cli("verify", str(folder), "--target", "host")
    assert_refused(code, out, "kernels[0]" if where != "file name" else "files", tmp_path)
