"""The model's C templates: the module around the layers (model/) and the library operators
(ops/). They include codegen's shared pieces (common/provenance.c.j2, common/requantize.c.j2)
and the module's build files are codegen's export templates, so codegen's template folder is
searched after this one."""
from __future__ import annotations

from pathlib import Path

from edgetune.codegen.render import TEMPLATES_DIR
from edgetune.codegen.render import render as render_from

FOLDERS = (Path(__file__).resolve().parent, TEMPLATES_DIR)


def render(template: str, variables: dict) -> str:
    return render_from(template, variables, FOLDERS)
