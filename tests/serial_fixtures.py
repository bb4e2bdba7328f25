"""What the serial-board tests share: the UART proxy that stands in for a board's USB serial
link, the shipped serial target, and the QEMU command line of the emulated board behind the
proxy. Test modules import these from here, never from one another."""
from __future__ import annotations

from pathlib import Path

from edgetune.targets import target_file

PROXY = Path(__file__).with_name("uart_proxy.py")
SHIPPED = target_file("an547-serial").resolve()
QEMU = ["qemu-system-arm", "-M", "mps3-an547", "-display", "none", "-monitor", "none", "-icount", "shift=5",
        "-serial", "tcp:127.0.0.1:INNER_PORT,server=on,wait=on,nodelay=on", "-kernel", "{image}"]
