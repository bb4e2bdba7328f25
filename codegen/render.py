"""Jinja2 rendering of C templates. Undefined variables are errors, never empty strings."""
from __future__ import annotations

import functools
from pathlib import Path

import jinja2

TEMPLATES_DIR = Path(__file__).parent / "templates"



@functools.lru_cache(maxsize=None)
def _environment(directory: str | tuple[str, ...]) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(directory), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


class CodegenError(RuntimeError):
    """A template failed to render for a configuration."""


def render(template: str, variables: dict, directory: Path | tuple[Path, ...] = TEMPLATES_DIR) -> str:
    """Render a template from codegen's templates (or another folder of templates, or
    several: searched in order)."""
    folders = str(directory) if isinstance(directory, Path) else tuple(map(str, directory))
    try:
        return _environment(folders).get_template(template).render(**variables)
    except jinja2.TemplateError as exc:
        raise CodegenError(f"template {template}: {exc}") from exc
