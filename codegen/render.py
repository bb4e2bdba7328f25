"""Jinja2 rendering of C templates. Undefined variables are errors, never empty strings.

Templates render in Jinja2's sandbox: a template reaches the values it is given and their
plain attributes, never Python's internals (`self.__init__.__globals__`, `__class__`,
`__subclasses__`). edgetune's own templates need nothing more, and a template can then
never run Python even if a value smuggled in were a template. A kernel of your own
(codegen/kernels/user.py) is rendered the same way, but its kernel.py is Python the user
runs: its templates are exactly as trusted as that file (docs/own-kernel.md).
"""
from __future__ import annotations

import functools
import threading
from pathlib import Path

import jinja2
import jinja2.sandbox

TEMPLATES_DIR = Path(__file__).parent / "templates"


class _CompileOnce(jinja2.FileSystemLoader):
    """Each template compiled once per process. Jinja2's own cache is filled unlocked: the
    tuning threads rendering their first variants together each compiled the same templates
    (a sixth of a small model's template time). Nor is a template file looked at again once read
    (auto_reload off): a run renders every variant from the same templates."""

    def __init__(self, searchpath):
        super().__init__(searchpath)
        self._lock = threading.Lock()
        self._compiled: dict[str, jinja2.Template] = {}

    def load(self, environment, name, globals=None):
        # Our templates are never given globals of their own: one Template per name.
        with self._lock:
            if name not in self._compiled:
                self._compiled[name] = super().load(environment, name, globals)
            return self._compiled[name]


@functools.lru_cache(maxsize=None)
def _environment(directory: str | tuple[str, ...]) -> jinja2.Environment:
    return jinja2.sandbox.SandboxedEnvironment(
        loader=_CompileOnce(directory), undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True, keep_trailing_newline=True, autoescape=False, auto_reload=False)


class CodegenError(RuntimeError):
    """A template failed to render for a configuration."""


def render(template: str, variables: dict, directory: Path | tuple[Path, ...] = TEMPLATES_DIR) -> str:
    """Render a template from codegen's templates (or another folder of templates, or
    several: searched in order)."""
    folders = str(directory) if isinstance(directory, Path) else tuple(map(str, directory))
    try:
        return _environment(folders).get_template(template).render(**variables)
    except jinja2.sandbox.SecurityError as exc:  # a TemplateError too: said as what it is
        raise CodegenError(f"template {template}: refused by the template sandbox: {exc}") from exc
    except jinja2.TemplateError as exc:
        raise CodegenError(f"template {template}: {exc}") from exc
