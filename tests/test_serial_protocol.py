"""The serial protocol without a board: CRC, framing, resynchronisation in the parser, the
HAL's [serial] table, port errors and the Renode runner's refusal where Renode is absent."""
from __future__ import annotations

import os
import struct

import pytest
import serial
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetune.cli import main
from edgetune.hal import TargetError, load_target
from edgetune.targets import get_target, target_file
from edgetune.targets.renode import RenodeRunner, renode_script
from edgetune.targets.runners import runner_for
from edgetune.targets.serialboard import PortUnavailable, SerialRunner, substitute
from edgetune.targets.serialproto import (SYNC, Count, Cycles, ErrorReply, Frame, FrameParser, Hello, MsgType,
                                          crc16)
from edgetune.targets.toolchain import ToolMissing

SHIPPED = target_file("an547-serial").resolve()


def test_crc_is_ccitt_false():
    assert crc16(b"123456789") == 0x29B1  # the published check value of CRC-16/CCITT-FALSE
    assert crc16(b"") == 0xFFFF


def test_frame_layout_is_the_documented_one():
    raw = Frame(MsgType.LOAD, 7, b"\x01\x02").encode()
    assert raw[:2] == SYNC
    assert raw[2:7] == bytes([1, MsgType.LOAD, 7, 2, 0])
    assert raw[7:9] == b"\x01\x02"
    assert struct.unpack("<H", raw[9:])[0] == crc16(raw[2:9])


frames_st = st.lists(st.tuples(st.integers(0, 0x7F), st.integers(0, 255), st.binary(max_size=64)), min_size=1,
                     max_size=5)


@settings(max_examples=150, deadline=None)
@given(frames=frames_st, noise=st.lists(st.binary(max_size=40), min_size=6, max_size=6), data=st.data())
def test_parser_finds_every_frame_between_garbage_in_any_split(frames, noise, data):
    sent = [Frame(t, s, p) for t, s, p in frames]
    stream = noise[0] + b"".join(f.encode() + noise[i % 5 + 1] for i, f in enumerate(sent))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    parser, got = FrameParser(), []
    for a, b in zip([0, *cuts], [*cuts, len(stream)]):
        got += parser.feed(stream[a:b])
    # Noise could in theory hold a frame with a valid CRC; every sent frame must be there, in order.
    it = iter(got)
    assert all(any(g == f for g in it) for f in sent)


def test_a_damaged_frame_is_dropped_and_the_next_one_found():
    good = Frame(0x81, 1, b"abc").encode()
    bad = bytearray(Frame(0x82, 2, b"defg").encode())
    bad[8] ^= 0x40
    assert FrameParser().feed(bytes(bad) + good) == [Frame(0x81, 1, b"abc")]


def test_a_false_header_in_noise_does_not_hold_back_a_complete_frame():
    # Sync + a header announcing 32 bytes, then a real frame shorter than that: the real
    # frame must come out now, not after 32 more bytes that may never arrive.
    noise = SYNC + bytes([1, 3, 9, 32, 0])
    assert FrameParser().feed(noise + Frame(0x83, 5, b"\x01\x03\x00").encode()) == [Frame(0x83, 5, b"\x01\x03\x00")]


def test_messages_decode():
    hello = Hello(1, 3, 1024, 0x20010000, 0x70000, 32, 0xDEADBEEF, 0, "an547-serial")
    assert Hello.decode(hello.encode()) == hello
    payload = struct.pack("<H", 2) + struct.pack("<IIB", 0, 10, 2) + struct.pack("<IIB", 0, 110, 2) * 2
    cycles = Cycles.decode(payload)
    assert cycles.overhead == Count(0, 10, 2) and len(cycles.runs) == 2
    assert not cycles.runs[0].dwt_valid and cycles.runs[0].systick_valid
    assert "FAULT for RUN" in ErrorReply.decode(struct.pack("<BBI", 10, 3, 4)).describe()


# --- the HAL's [serial] table -------------------------------------------------------------------
def write_board(tmp_path, serial_lines: str, runner: str = 'kind = "serial"', extra: str = "") -> object:
    path = tmp_path / "board.toml"
    path.write_text(f'extends = "{SHIPPED}"\nname = "my-board"\n[runner]\n{runner}\n[serial]\n{serial_lines}\n{extra}')
    return path


BASE = ('uart = "cmsdk-apb"\nuart_base = 0x40004000\nuart_clock_hz = 25000000\nbaudrate = 115200\n'
        'counter = "dwt"\n')


def test_shipped_serial_board_is_valid():
    target = get_target("an547-serial")
    assert target.runner.kind == "serial" and target.measures == "cycles"
    assert target.serial.bauddiv == 25_000_000 // 115_200 >= 16
    assert "{image}" in target.serial.flash and target.serial.flash_keeps_running
    assert isinstance(runner_for(target), SerialRunner)


def test_a_real_board_needs_only_flash_and_port(tmp_path):
    path = write_board(tmp_path, 'flash = ["pyocd", "flash", "--target", "stm32h743zitx", "{image}"]\n'
                                 'port = "/dev/ttyACM0"\nflash_keeps_running = false\n')
    board = load_target(path).serial
    assert board.port == "/dev/ttyACM0" and board.flash[-1] == "{image}" and not board.flash_keeps_running
    assert substitute(board.flash, "/x/image.elf", None)[-1] == "/x/image.elf"


@pytest.mark.parametrize("override, key", [
    ('flash = ["pyocd", "flash", "$(reboot)", "{image}"]', "serial.flash[2]"),
    ('flash = ["sh -c", "{image}"]', "serial.flash[0]"),
    ('flash = ["pyocd", "flash", "{imagefile}"]', "serial.flash[2]"),
    ('flash = ["pyocd", "flash"]', "serial.flash"),
    ('port = "/dev/tty;rm"', "serial.port"),
    ('flash_keeps_running = false', "serial.port"),
    ('baudrate = 2000000', "serial.baudrate"),
    ('counter = "pmu"', "serial.counter"),
    ('uart = "stm32-usart"', "serial.uart"),
    ('runs = 0', "serial.runs"),
    ('retries = 99', "serial.retries"),
    ('speed = 1', "serial.speed"),
])
def test_bad_serial_settings_name_the_key(tmp_path, override, key):
    shipped = get_target("an547-serial").serial
    lines = {"flash": "flash = " + str(list(shipped.flash)).replace("'", '"'), "port": f'port = "{shipped.port}"',
             "flash_keeps_running": "flash_keeps_running = true"}
    name = override.split("=")[0].strip()
    lines[name] = override
    path = write_board(tmp_path, BASE.replace(f"{name} =", "#") + "\n".join(lines.values()))
    with pytest.raises(TargetError) as err:
        load_target(path)
    assert f"board.toml: {key}" in str(err.value)


# --- ports -------------------------------------------------------------------------------------
def absent_port_board(tmp_path, port="/dev/ttyedgetune-absent0"):
    # The flasher (an allowed name, installed) never runs: the port check comes first.
    return write_board(tmp_path, BASE + f'flash = ["qemu-system-arm", "{{image}}"]\nport = "{port}"\n'
                                        'flash_keeps_running = false\n')


def test_an_absent_port_is_named(tmp_path):
    runner = runner_for(load_target(absent_port_board(tmp_path)))
    with pytest.raises(PortUnavailable, match="serial port /dev/ttyedgetune-absent0 is absent"):
        runner.check_tools()


def test_cli_reports_an_absent_port_in_one_line(tmp_path):
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--target", str(absent_port_board(tmp_path)),
                                       "--shape", "m=4,n=4,k=8", "--budget", "1", "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2
    assert "serial port /dev/ttyedgetune-absent0 is absent" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_busy_port_is_named(tmp_path):
    master, slave = os.openpty()
    name = os.ttyname(slave)
    holder = serial.Serial(name, exclusive=True)  # another program holds the board's port
    try:
        runner = runner_for(load_target(absent_port_board(tmp_path, port=name)))
        with pytest.raises(PortUnavailable) as err:
            runner.check_tools()
        assert f"serial port {name} could not be opened" in str(err.value)
    finally:
        holder.close()
        os.close(master)
        os.close(slave)


# --- Renode --------------------------------------------------------------------------------------
RENODE_BOARD = '[renode]\nplatform = "platforms/boards/my_board.repl"\nuart = "sysbus.uart0"\n'


def renode_target(tmp_path):
    return load_target(write_board(tmp_path, BASE, runner='kind = "renode"', extra=RENODE_BOARD))


def test_renode_absent_gives_a_clear_error(tmp_path, monkeypatch):
    # An empty PATH: Renode is not found whether or not some machine has it installed.
    monkeypatch.setenv("PATH", str(tmp_path))
    runner = runner_for(renode_target(tmp_path))
    assert isinstance(runner, RenodeRunner)
    with pytest.raises(ToolMissing, match="renode is not installed; it is not available for Debian 12"):
        runner.check_tools()


@pytest.mark.smoke
def test_cli_reports_missing_renode_in_one_line(tmp_path, monkeypatch):
    path = write_board(tmp_path, BASE, runner='kind = "renode"', extra=RENODE_BOARD)
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--target", str(path), "--shape", "m=4,n=4,k=8", "--budget", "1",
                                       "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2
    assert "renode is not installed" in result.output and "my-board" in result.output


def test_renode_script_boots_the_image_with_the_uart_on_the_port(tmp_path):
    # Generated text only: Renode has never run this script on these machines.
    script = renode_script(renode_target(tmp_path), tmp_path / "image.elf", 40123).splitlines()
    assert "machine LoadPlatformDescription @platforms/boards/my_board.repl" in script
    assert 'emulation CreateServerSocketTerminal 40123 "edgetune_uart" false' in script
    assert "connector Connect sysbus.uart0 edgetune_uart" in script
    assert f"sysbus LoadELF @{tmp_path / 'image.elf'}" in script
    assert script.index("start") > script.index(f"sysbus LoadELF @{tmp_path / 'image.elf'}")


@pytest.mark.parametrize("table, key", [
    ('[renode]\nplatform = "x.repl; quit"\nuart = "sysbus.uart0"\n', "renode.platform"),
    ('[renode]\nplatform = "x.repl"\nuart = "sysbus.uart0 term"\n', "renode.uart"),
    ("", "renode"),
])
def test_bad_renode_tables_name_the_key(tmp_path, table, key):
    with pytest.raises(TargetError, match=f"board.toml: {key}"):
        load_target(write_board(tmp_path, BASE, runner='kind = "renode"', extra=table))



# --- the link over pyserial's loop:// (what is written is read back: no board answers) ---------
def loop_link(retries=1):
    from edgetune.targets.seriallink import BoardLink

    link = BoardLink(serial.serial_for_url("loop://", timeout=0.1, baudrate=10_000_000), "loop://", reply_timeout_s=0.2,
                     retries=retries, session=5)
    link.max_payload = 1024  # as a HELLO would set it: loop:// holds only 4096 bytes
    return link


def test_a_silent_port_times_out_naming_it_after_bounded_retries():
    from edgetune.targets.seriallink import LinkTimeout

    link = loop_link(retries=2)
    with pytest.raises(LinkTimeout, match=r"loop://: HELLO got no intact reply in 3 attempts"):
        link.hello()
    assert link.retransmissions == 2  # its own echoed requests and filler were never taken for replies


def test_a_board_speaking_another_version_is_named():
    from edgetune.targets.seriallink import VersionMismatch

    link = loop_link()
    # The reply the next request (seq 1) will find waiting: a version-2 frame.
    link.port.write(Frame(MsgType.HELLO | 0x80, 1, b"", version=2).encode())
    with pytest.raises(VersionMismatch, match="protocol version 2; this edgetune speaks 1"):
        link.hello()

