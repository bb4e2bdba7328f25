"""Every QEMU command line edgetune builds asks for no device the run does not use.

QEMU's `virt` machine adds a virtio network card by default, and that card makes QEMU load
its network boot ROM (efi-virtio.rom), which only the ipxe-qemu package provides: on a
minimal install every Cortex-A run failed at start-up. The boards' own on-chip NIC (the
MPS2/MPS3 LAN9118) is part of the machine, but without QEMU's defaults it has no user-mode
network behind it. Checked by asking the emulator itself, with the exact command line, which
network clients it created (`info network`), so the test means the same with or without
ipxe-qemu installed."""
from __future__ import annotations

import re
import subprocess

import pytest

from edgetune.targets import get_target, target_names
from edgetune.targets.qemu import emulator_command, plugin_path

pytestmark = pytest.mark.qemu

QEMU_TARGETS = [name for name in target_names() if get_target(name).runner.kind == "qemu"]
SERIAL_QEMU_TARGETS = [name for name in target_names() if get_target(name).serial is not None
                       and get_target(name).serial.flash[0].startswith("qemu-system-")]
BOARD_NICS = {"lan9118"}  # soldered onto the MPS2/MPS3 boards QEMU models; inert without a backend


def network_clients(command: list[str], cwd) -> list[dict[str, str]]:
    """The network clients QEMU created for `command`, started paused (-S) with the monitor
    on stdin: one {name, type, model...} per client `info network` lists."""
    proc = subprocess.run([*command, "-S", "-monitor", "stdio"], input="info network\nquit\n", cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{command[0]} failed to start: {proc.stderr.strip()}"
    clients = []
    for match in re.finditer(r"([\w.#-]+): (index=\S+)", proc.stdout):
        fields = dict(item.split("=", 1) for item in match.group(2).split(",") if "=" in item)
        clients.append({"name": match.group(1), **fields})
    return clients


def assert_no_unused_network(clients: list[dict[str, str]], backends_allowed: bool = False) -> None:
    backends = [c for c in clients if c.get("type") != "nic"]
    assert backends_allowed or not backends, f"QEMU created network backends nobody uses: {backends}"
    extra_nics = [c for c in clients if c.get("type") == "nic" and c.get("model") not in BOARD_NICS]
    assert not extra_nics, f"QEMU added network cards that are not part of the board: {extra_nics}"


def test_the_runner_asks_qemu_for_no_default_devices(a53):
    command = emulator_command(a53, "image.elf", [], "plugin.so")
    assert "-nodefaults" in command
    assert "-serial" not in command and "-monitor" not in command  # nothing to turn off again


@pytest.mark.parametrize("name", QEMU_TARGETS)
def test_the_runner_command_line_creates_no_unused_network_device(name, tmp_path):
    (tmp_path / "image.elf").write_bytes(b"")  # started paused: the image is loaded, never run
    command = emulator_command(get_target(name), "image.elf", [], f"{plugin_path()},start=0x100,stop=0x200,out=counts.txt")
    assert_no_unused_network(network_clients(command, tmp_path))


@pytest.mark.parametrize("name", SERIAL_QEMU_TARGETS)
def test_the_serial_board_flash_command_creates_no_unused_network_device(name, tmp_path):
    from edgetune.targets.serialboard import free_loopback_port

    (tmp_path / "image.elf").write_bytes(b"")
    port = str(free_loopback_port())
    # wait=off: nobody connects to the UART here, and a paused guest sends nothing anyway.
    command = [arg.replace("{image}", "image.elf").replace("{port}", port).replace("wait=on", "wait=off")
               for arg in get_target(name).serial.flash]
    # The user-mode network behind the board's own NIC keeps the UART link fast
    # (docs/measurements.md, "QEMU machines"); no card is added, so no ROM is needed.
    assert_no_unused_network(network_clients(command, tmp_path), backends_allowed=True)
