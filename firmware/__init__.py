"""edgetune.firmware: the C harness that runs kernels on boards, emulators and the host."""
from pathlib import Path

FIRMWARE_DIR = Path(__file__).parent
COMMON_DIR = FIRMWARE_DIR / "common"
HOST_DIR = FIRMWARE_DIR / "host"
TEMPLATES_DIR = FIRMWARE_DIR / "templates"
