"""The import arrows of docs/architecture.md: hal, tuner and firmware import nothing of ours;
codegen only hal and tuner; targets no app. Checked on every module's import statements
(top level and inside functions alike: a lazy import is still an arrow). The one exception:
edgetune.errors (app/errors.py), the root of the user-facing errors, which every part may
import because it imports nothing at all."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("hal", "tuner", "codegen", "targets", "firmware")  # edgetune.<part>; anything else is app
ALLOWED = {
    "hal": set(),
    "tuner": set(),
    "firmware": set(),
    "codegen": {"hal", "tuner"},
    "targets": {"hal", "tuner", "codegen", "firmware"},
}


def imported_parts(path: Path) -> set[tuple[str, int]]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            pieces = name.split(".")
            if pieces[0] != "edgetune":
                continue
            if pieces[1:2] == ["errors"]:
                continue  # the one module every part may import (checked below to import nothing)
            found.add((pieces[1] if len(pieces) > 1 and pieces[1] in PARTS else "app", node.lineno))
    return found


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_imports_run_one_way(part):
    wrong = []
    for path in sorted((ROOT / part).rglob("*.py")):
        for imported, line in imported_parts(path):
            if imported != part and imported not in ALLOWED[part]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports edgetune.{imported}")
    assert not wrong, wrong


def test_the_error_root_imports_nothing():
    """edgetune.errors may be imported from every part only because it adds no arrow."""
    tree = ast.parse((ROOT / "app" / "errors.py").read_text())
    imports = [node.lineno for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert not imports, f"app/errors.py imports at lines {imports}"

