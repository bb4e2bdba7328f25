"""Tests that run a stand-in program by absolute path (a UART proxy as the flasher, a QEMU
wrapper) opt in the way a user does: the path in $EDGETUNE_ALLOW_TOOLS while the target loads."""
from __future__ import annotations

import os
from contextlib import contextmanager

from edgetune.hal.loader import ALLOW_TOOLS_ENV


@contextmanager
def allowing(*paths):
    old = os.environ.get(ALLOW_TOOLS_ENV)
    os.environ[ALLOW_TOOLS_ENV] = ":".join(str(p) for p in paths)
    try:
        yield
    finally:
        if old is None:
            del os.environ[ALLOW_TOOLS_ENV]
        else:
            os.environ[ALLOW_TOOLS_ENV] = old
