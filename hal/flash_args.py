"""Which arguments a board's flash command (a target file's `serial.flash`) may pass to its
program: an allow-list of option shapes per flasher, as hal/flags.py has for compilers.

A flash command runs a program edgetune does not write, with arguments a target file does.
Checking the program's name alone let `qemu-system-arm -plugin file=/x/evil.so` load a
shared object and `-D /x/log -d in_asm` write a file where the target file said. So every
argument must fit a shape below: the options that choose the board, the probe, its speed and
what to write, with plain values; never an option that loads a script, plugin or
configuration of someone's, reads the board back into a file, logs to a file, or hands the
guest a way to reach the host (QEMU's semihosting, monitor, drives, file-backed devices).
`{image}` (the ELF edgetune built) and `{port}` (a loopback port it picked) are the only
placeholders.

Sources: QEMU 7.2 "Invocation" (qemu-system options); pyOCD, OpenOCD, probe-rs, SEGGER J-Link
Commander, stlink, STM32CubeProgrammer, nrfjprog, dfu-util, picotool and BOSSA command-line
references: the options that flash, reset, erase and select the target.
"""
from __future__ import annotations

import re

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}"
_NUMBER = r"[0-9]{1,10}"
_HEX_OR_NUMBER = r"(0x[0-9A-Fa-f]{1,16}|[0-9]{1,20})"
_FREQUENCY = r"[0-9]{1,10}[kKmM]?(Hz)?"
IMAGE = "{image}"
PORT = "{port}"

# option -> the shape of its value (None: a switch); `positionals`: the bare words it takes.
QEMU = {
    "-M": rf"{_NAME}(,[a-z0-9-]{{1,32}}=[A-Za-z0-9_.-]{{1,32}})*",
    "-machine": rf"{_NAME}(,[a-z0-9-]{{1,32}}=[A-Za-z0-9_.-]{{1,32}})*",
    "-cpu": _NAME, "-m": r"[0-9]{1,6}[MG]?", "-smp": r"[0-9]{1,3}", "-accel": "tcg",
    "-display": "none", "-monitor": "none", "-nic": "none", "-nographic": None, "-nodefaults": None,
    "-no-reboot": None, "-no-shutdown": None,
    "-icount": r"shift=([0-9]{1,2}|auto)(,align=(on|off))?(,sleep=(on|off))?",
    # UART on a loopback TCP port (the one edgetune picked, or the fixed one the target file's
    # `port` names, as a board that keeps running after its flasher exits has), or nowhere;
    # never a file, pipe or pty.
    "-serial": r"tcp:127\.0\.0\.1:(\{port\}|[0-9]{1,5})(,(server|wait|nodelay)=(on|off))*|null|none",
    "-daemonize": None,
    "-kernel": re.escape(IMAGE),
}
# Bare words: a regular expression (subcommands, an address).
FLASHERS: dict[str, tuple[dict[str, str | None], str]] = {
    "qemu-system": (QEMU, ""),
    "pyocd": ({"--target": _NAME, "-t": _NAME, "--uid": _NAME, "-u": _NAME, "--frequency": _FREQUENCY,
               "-f": _FREQUENCY, "--format": "elf|hex|bin", "--base-address": _HEX_OR_NUMBER,
               "-a": _HEX_OR_NUMBER, "--erase": "auto|chip|sector", "-e": "auto|chip|sector",
               "--trust-crc": None, "--no-reset": None, "-v": None, "-q": None},
              "flash|load|erase|reset"),
    "openocd": ({"-f": r"(board|interface|target)/[A-Za-z0-9_.-]{1,64}\.cfg", "-c": "init|reset|halt|shutdown|exit",
                 "-d": "[0-3]"}, ""),
    "probe-rs": ({"--chip": _NAME, "--protocol": "swd|jtag", "--speed": _NUMBER, "--probe": r"[0-9A-Fa-f:]{1,64}",
                  "--connect-under-reset": None, "--verify": None, "--disable-progressbars": None},
                 "download|run|reset|erase"),
    "JLinkExe": ({"-device": _NAME, "-if": "SWD|JTAG|swd|jtag", "-speed": _NUMBER, "-autoconnect": "0|1",
                  "-NoGui": "0|1", "-ExitOnError": "0|1", "-SelectEmuBySN": _NUMBER}, ""),
    "st-flash": ({"--reset": None, "--connect-under-reset": None, "--freq": _FREQUENCY, "--format": "ihex|binary",
                  "--serial": r"[0-9A-Fa-f]{1,64}"}, rf"write|erase|reset|{_HEX_OR_NUMBER}"),
    "STM32_Programmer_CLI": ({"-c": r"port=(SWD|JTAG|swd|jtag)(,[a-z]{1,16}=[A-Za-z0-9_.]{1,32})*",
                              "--connect": r"port=(SWD|JTAG|swd|jtag)(,[a-z]{1,16}=[A-Za-z0-9_.]{1,32})*",
                              "-w": re.escape(IMAGE), "--write": re.escape(IMAGE), "-v": None, "--verify": None,
                              "-rst": None, "-hardRst": None, "-s": None, "--start": None}, ""),
    "nrfjprog": ({"--program": re.escape(IMAGE), "-f": "NRF51|NRF52|NRF53|NRF91", "--family": "NRF51|NRF52|NRF53|NRF91",
                  "--snr": _NUMBER, "-s": _NUMBER, "--sectorerase": None, "--chiperase": None, "--verify": None,
                  "--reset": None, "-r": None}, ""),
    "dfu-util": ({"-a": _NAME, "-d": r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}", "-s": rf"{_HEX_OR_NUMBER}(:leave)?",
                  "-D": re.escape(IMAGE), "-R": None, "-S": r"[0-9A-Za-z]{1,64}"}, ""),
    "picotool": ({"-x": None, "-f": None, "-F": None, "-v": None}, "load|reboot"),
    "bossac": ({"-e": None, "-w": None, "-v": None, "-R": None, "-b": None, "-U": None,
                "--port": r"[A-Za-z0-9_./-]{1,64}", "-p": r"[A-Za-z0-9_./-]{1,64}", "--offset": _HEX_OR_NUMBER}, ""),
}
# A flasher you allowed by its absolute path (any name): plain words and options with plain
# values, and no path (a path names a file the program would read or write) but the paths
# you allowed as well (a script an allowed interpreter runs, e.g. a UART proxy).
OTHER = re.compile(r"[A-Za-z0-9_.:,+@%=-]{1,128}")


def flasher_of(program: str) -> str:
    """The allow-list a flash command's program (its file name) is checked against."""
    name = program.rsplit("/", 1)[-1]
    return "qemu-system" if name.startswith("qemu-system-") else name


def flash_args_problem(program: str, args: list[str], allowed: frozenset[str] = frozenset()) -> tuple[int, str] | None:
    """(index within args, why) of the first argument of the flash command `program args...`
    that may not pass, or None. `allowed`: the absolute paths the user allowed (a program
    not of FLASHERS may pass them as arguments)."""
    options, words = FLASHERS.get(flasher_of(program), (None, ""))
    i = 0
    while i < len(args):
        arg = args[i]
        if options is None:
            if arg not in (IMAGE, PORT, *allowed) and not OTHER.fullmatch(arg.replace(PORT, "0").replace(IMAGE, "")):
                return i, (f"{arg!r} is not an allowed argument (plain words and options, {IMAGE}, {PORT}, "
                           "no paths but ones you allowed like the program)")
            i += 1
            continue
        if arg == IMAGE or (words and re.fullmatch(words, arg)):
            i += 1
            continue
        name, joined, value = arg.partition("=")
        if name not in options:
            return i, (f"{arg!r} is not an allowed argument of {program} (allowed: {', '.join(sorted(options))}"
                       f", {IMAGE}; see docs/targets.md)")
        shape = options[name]
        if shape is None:
            if joined:
                return i, f"{arg!r}: {name} takes no value"
            i += 1
            continue
        if not joined:
            i += 1
            value = args[i] if i < len(args) else None
        if not isinstance(value, str) or not re.fullmatch(shape, value):
            return min(i, len(args) - 1), f"{value!r} is not an allowed value of {name} for {program}"
        i += 1
    return None
