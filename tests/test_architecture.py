"""The import arrows of docs/architecture.md: hal, tuner and firmware import nothing of ours;
codegen only hal and tuner; targets no app; the model and NPU features (edgetune.model,
edgetune.npu, folders under app/) import the layers and the application's core, and only the
command line and the Python API import them (but for the arrows EXCEPTIONS names).
Checked on every module's import statements (top level and inside functions alike: a lazy
import is still an arrow; relative imports resolved). The one exception: edgetune.errors
(app/errors.py), the root of the user-facing errors, which every part may import because it
imports nothing at all."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("hal", "tuner", "codegen", "targets", "firmware")  # edgetune.<layer>, folders at the root
FEATURES = ("model", "npu")  # edgetune.<feature>, folders under app/
# The command line (app/cli/, or its modules flat in app/) and the Python API: the front.
FRONT = {"cli", "model_cli", "model_tune_cli", "model_report_cli", "npu_cli", "cache_cli", "api"}
ALLOWED = {
    "hal": set(),
    "tuner": set(),
    "firmware": set(),
    "codegen": {"hal", "tuner"},
    "targets": {"hal", "tuner", "codegen", "firmware"},
    "model": {"hal", "tuner", "codegen", "targets", "firmware", "app"},
    "npu": {"hal", "tuner", "codegen", "targets", "firmware", "app"},
}
# Arrows into a feature from outside the front, each one named: `place MODEL.tflite` puts a
# model's layers on the CPU or the NPU (edgetune.model.plan uses the NPU's layer plan), the
# NPU's one-operator models are written by edgetune's one TFLite writer (the model's), the one
# tune() builds an NpuTask for an NPU device (session.py task_of), and shared NPU trials are
# checked against the NPU's space (sharing.py), and the HTML report names the model layers
# each workload serves (report.py, `report --model`).
EXCEPTIONS = {("model/plan.py", "npu"), ("npu/tflite_model.py", "model"), ("session.py", "npu"),
              ("sharing.py", "npu"), ("report.py", "model")}


def folder(part: str) -> Path:
    return ROOT / "app" / part if part in FEATURES else ROOT / part


def module_of(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).with_suffix("").parts
    package = ["edgetune"] + (list(rel[1:]) if rel[0] == "app" else list(rel))
    return package[:-1] if package[-1] == "__init__" else package


def part_of(name: str) -> str:
    """The part an imported edgetune module belongs to: a layer, a feature, the front, or app."""
    second = name.split(".")[1] if "." in name else ""
    if second in LAYERS or second in FEATURES:
        return second
    return "front" if second in FRONT else "app"


def imported_parts(path: Path) -> set[tuple[str, int]]:
    found = set()
    here = module_of(path)
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(package[:len(package) - node.level + 1])
            names = [f"{base}.{node.module}" if node.module else base]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] != "edgetune" or name.split(".")[1:2] == ["errors"]:
                continue  # errors: the one module every part may import (checked below to import nothing)
            found.add((part_of(name), node.lineno))
    return found


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_imports_run_one_way(part):
    wrong = []
    for path in sorted(folder(part).rglob("*.py")):
        where = path.relative_to(ROOT / "app") if part in FEATURES else None
        for imported, line in imported_parts(path):
            if imported == part or imported in ALLOWED[part] or (str(where), imported) in EXCEPTIONS:
                continue
            wrong.append(f"{path.relative_to(ROOT)}:{line} imports edgetune.{imported}")
    assert not wrong, wrong


def test_only_the_front_imports_the_features():
    """The application's core (the session, verify, export, ...) never imports the model or
    the NPU feature, but for the arrows EXCEPTIONS names; the CLI and the API may."""
    wrong = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        rel = path.relative_to(ROOT / "app")
        if rel.parts[0] in FEATURES or rel.parts[0] == "cli" or rel.stem in FRONT:
            continue
        for imported, line in imported_parts(path):
            if imported in FEATURES and (str(rel), imported) not in EXCEPTIONS:
                wrong.append(f"app/{rel}:{line} imports edgetune.{imported}")
    assert not wrong, wrong


def test_the_parts_are_where_the_table_says():
    """A renamed folder would leave the arrows above checking nothing."""
    for part in ALLOWED:
        assert list(folder(part).rglob("*.py")), f"{folder(part)} holds no module"
    for path, _ in EXCEPTIONS:
        assert (ROOT / "app" / path).is_file(), path


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
