"""Options `tune`, `model tune` and `model export` share that are not about kernels of the
user's own: `--compiler`, restricting the compilers a run may measure (or an export take)
variants of (issue 31 item 9)."""
from __future__ import annotations

import click

compiler_option = click.option(
    "--compiler", "compilers", multiple=True, metavar="NAME",
    help="Only variants built by this compiler of the target (repeatable; default: every one): measured by a tune, "
         "counted as best, taken by an export; a firmware built with one toolchain gets no object of another.")
