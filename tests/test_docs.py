"""The manual builds as a site with no broken link, and the README's links lead somewhere.

The README is the front door (what edgetune is, the two commands, a command table, links);
the manual lives in docs/ and is built by MkDocs in strict mode, so a page missing from the
navigation, a link to a page that does not exist or to a missing anchor fails here.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


@pytest.mark.parametrize("mkdocs", [[sys.executable, "-m", "mkdocs"], [str(Path(sys.executable).parent / "mkdocs")]],
                         ids=["python-m-mkdocs", "mkdocs-script"])
def test_the_manual_builds_strictly(tmp_path, mkdocs):
    """Both ways to run MkDocs: run as a script, its folder (.venv/bin, which holds the
    `edgetune` console script) leads sys.path, which once made the API page unbuildable."""
    result = subprocess.run([*mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    cli_page = (tmp_path / "site" / "cli" / "index.html").read_text()
    for command in ("tune", "export", "verify", "report", "replay"):  # generated from the CLI itself
        assert f"edgetune {command}" in cli_page, command


def test_every_readme_link_leads_to_a_file_of_the_repository():
    text = (ROOT / "README.md").read_text()
    targets = [m.group(1) for m in LINK.finditer(text) if "://" not in m.group(1)]
    assert targets, "the README links into docs/"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing


def test_every_docs_page_is_linked_from_the_readme_or_the_site_index():
    linked = {m.group(1) for m in LINK.finditer((ROOT / "README.md").read_text())}
    linked |= {"docs/" + m.group(1) for m in LINK.finditer((ROOT / "docs" / "index.md").read_text())}
    pages = {f"docs/{p.relative_to(ROOT / 'docs').as_posix()}" for p in (ROOT / "docs").rglob("*.md")}
    orphans = sorted(pages - linked - {"docs/index.md"})
    assert not orphans, orphans


def test_the_readme_is_a_front_door_not_the_manual():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 155, f"README.md has {len(lines)} lines; the manual belongs in docs/"
    commands = [line for line in lines if line.startswith("bash scripts/")]
    assert commands == ["bash scripts/quickstart.sh", "bash scripts/test.sh"]


# A page past this many words loses its reader (split it by subject). The generated reference
# pages list every command and function, so they are as long as the interface is.
MOST_WORDS = 3000
GENERATED_REFERENCE = {"cli.md", "api.md"}


def test_no_manual_page_is_too_long_to_read():
    long_pages = {p.name: len(p.read_text().split()) for p in (ROOT / "docs").glob("*.md")
                  if p.name not in GENERATED_REFERENCE}
    too_long = {name: words for name, words in long_pages.items() if words > MOST_WORDS}
    assert not too_long, f"split these pages by subject: {too_long}"


def test_no_two_pages_have_names_that_differ_only_by_a_plural():
    stems = {p.stem for p in (ROOT / "docs").glob("*.md")}
    confusable = sorted(s for s in stems if s + "s" in stems)
    assert not confusable, confusable
