"""The `edgetune` group: its own options, and every command joined to it behind the one
error convention of errors.py."""
from __future__ import annotations

import os

import click

from edgetune.hal.loader import ALLOW_TOOLS_ENV

from .. import __version__
from ..user_kernels import load_installed, show_kernel_warnings
from .cache import cache_group
from .db import db_group
from .errors import OneLineErrors, guard_all, warn
from .export import export_cmd, verify_cmd
from .model import model_group
from .npu import place_cmd
from .report import record_cmd, replay_cmd, report_cmd
from .targets import kernels, targets
from .tune import best_cmd, tune_cmd


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgetune")
@click.option("--allow-tool", "allow_tools", multiple=True, metavar="PATH",
              help=f"Let target files run the program at this absolute path (repeatable; adds to ${ALLOW_TOOLS_ENV}).")
def main(allow_tools):
    """Auto-tune C kernels for embedded and edge targets, and bake the best into C."""
    for path in allow_tools:
        if not path.startswith("/") or "\n" in path:
            raise click.BadParameter(f"{path!r} is not an absolute path", param_hint="--allow-tool")
    if allow_tools:  # the environment, so worker and flasher processes started from here agree
        os.environ[ALLOW_TOOLS_ENV] = ":".join(filter(None, (os.environ.get(ALLOW_TOOLS_ENV, ""), *allow_tools)))
    for problem in load_installed():  # kernels of installed packages (edgetune.kernels entry points)
        warn(f"installed kernel not loaded: {problem}")
    show_kernel_warnings(warn)


COMMANDS = (targets, kernels, tune_cmd, best_cmd, export_cmd, verify_cmd, record_cmd, replay_cmd, report_cmd,
            db_group, place_cmd, cache_group, model_group)
for _command in COMMANDS:
    main.add_command(_command)
guard_all(main)
