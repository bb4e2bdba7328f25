"""docs/cli.md and docs/api.md are Markdown generated from the code (scripts/reference_pages.py)
and committed, so they read in the repository: they must say what the code says today."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def reference_pages():
    spec = importlib.util.spec_from_file_location("reference_pages", ROOT / "scripts" / "reference_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["cli.md", "api.md"])
def test_the_committed_reference_page_is_what_the_code_generates(page):
    generated = reference_pages().PAGES[page]()
    committed = (ROOT / "docs" / page).read_text(encoding="utf-8")
    assert committed == generated, f"docs/{page} is out of date: run .venv/bin/python scripts/reference_pages.py"


def test_the_pages_hold_the_reference_itself_not_directives():
    cli, api = ((ROOT / "docs" / page).read_text(encoding="utf-8") for page in ("cli.md", "api.md"))
    assert ":::" not in cli and ":::" not in api
    for command in ("edgetune tune", "edgetune model export", "edgetune db import", "edgetune cache prune"):
        assert f"\n## {command}\n" in cli, command
    assert "- `--db FILE`: " in cli and "[default: edgetune.db\\]" in cli
    for name in ("tune", "tune_kernel", "KernelDef", "Binding", "quantize_multiplier"):
        assert f"\n### {name}\n" in api, name


def test_the_check_mode_names_a_stale_page(tmp_path, monkeypatch, capsys):
    module = reference_pages()
    for page in module.PAGES:
        (tmp_path / page).write_text((ROOT / "docs" / page).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "cli.md").write_text("# CLI reference\n\nan old page\n", encoding="utf-8")
    monkeypatch.setattr(module, "DOCS", tmp_path)
    assert module.main(["--check"]) == 1
    said = capsys.readouterr().out
    assert "docs/cli.md" in said and "api.md" not in said
    assert (tmp_path / "cli.md").read_text(encoding="utf-8") == "# CLI reference\n\nan old page\n"  # --check writes nothing
    assert module.main([]) == 0 and module.main(["--check"]) == 0
