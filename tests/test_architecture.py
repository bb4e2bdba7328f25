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



# --- one door into measuring ---------------------------------------------------------------------
# A class forwarding unknown attributes to a wrapped object (a `__getattr__` proxy) was how
# callers faked a whole kernel to measure something that is not a configuration of it; the
# measuring pipeline (edgetune.targets.measure) takes a rendered source instead, and a
# kernel with a cut-down space or other inputs is a subclass. A proxy is a missing seam.
PROXY_FREE = ("app", "bench", "tests")
# What only the measuring pipeline calls on a runner: anything else measures through it.
RUNNER_STAGES = {"build", "build_export", "link", "link_cached", "compile_variant", "run", "run_batch"}


def proxies(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{path.relative_to(root)}:{node.lineno} {node.name}" for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            and any(isinstance(item, ast.FunctionDef) and item.name == "__getattr__" for item in node.body)]


def test_no_class_proxies_another_object_through_getattr():
    found = [hit for part in PROXY_FREE for path in sorted((ROOT / part).rglob("*.py")) for hit in proxies(path)]
    assert not found, found


def test_the_scans_find_what_they_look_for(tmp_path):
    fake = tmp_path / "fake.py"
    fake.write_text("class Wrapped:\n    def __getattr__(self, name):\n        return name\n\n\n"
                    "def measure(runner, build, io):\n    return runner_for(io).run(build, io), self.runner.build(io)\n")
    assert proxies(fake, tmp_path) == ["fake.py:1 Wrapped"]
    assert runner_stage_calls(fake, tmp_path) == ["fake.py:7 runner_for.run", "fake.py:7 runner.build"]


def runner_stage_calls(path: Path, root: Path = ROOT) -> list[str]:
    """Calls of a runner's build or run stages on something named like a runner."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RUNNER_STAGES):
            continue
        owner = node.func.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        if isinstance(owner, ast.Call):  # runner_for(target).run(...)
            name = getattr(owner.func, "id", "")
        if "runner" in name.lower():
            found.append(f"{path.relative_to(root)}:{node.lineno} {name}.{node.func.attr}")
    return found


def test_the_application_measures_only_through_the_pipeline():
    """One build -> run -> compare loop (targets/measure.py): no module of the application
    builds or runs on a runner itself."""
    found = [hit for path in sorted((ROOT / "app").rglob("*.py")) for hit in runner_stage_calls(path)]
    assert not found, found
