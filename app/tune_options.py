"""Options `tune` and `model tune` share that are not about kernels of the user's own:
`--compiler`, restricting the compilers a run may measure with (issue 31 item 9)."""
from __future__ import annotations

import click

compiler_option = click.option(
    "--compiler", "compilers", multiple=True, metavar="NAME",
    help="Measure only variants built by this compiler of the target (repeatable; default: every one), so a "
         "firmware built with one toolchain gets no object measured with another; best and progress count only these.")
