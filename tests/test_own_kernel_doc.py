"""docs/own-kernel.md is followed verbatim: its shell and Python blocks run, in order, in a
fresh folder holding the examples (as a checkout does), and each file it quotes is the
file in examples/kernels/ to the byte."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "own-kernel.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
QUOTED = re.compile(r"^(?:#|//) (examples/kernels/\S+)\n")


def blocks(kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(PAGE.read_text()) if lang == kind]


def test_the_files_the_page_quotes_are_the_examples():
    quoted = [(m.group(1), body[m.end():]) for lang, body in BLOCK.findall(PAGE.read_text())
              if (m := QUOTED.match(body))]
    assert len(quoted) >= 2
    for path, text in quoted:
        assert (ROOT / path).read_text() == text, path


@pytest.mark.qemu
@pytest.mark.slow  # 31 s, the page's whole walk-through; tests/test_user_kernels.py checks its pieces by default
def test_the_page_runs_as_written(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    steps = [(lang, body) for lang, body in BLOCK.findall(PAGE.read_text()) if lang in ("sh", "python")
             and not QUOTED.match(body)]  # a quoted file is checked above, not run
    assert [lang for lang, _ in steps].count("sh") >= 4 and [lang for lang, _ in steps].count("python") == 2
    for lang, body in steps:
        command = ["bash", "-e", "-c", body] if lang == "sh" else [sys.executable, "-c", body]
        result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{body}\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "out" / "et_vector_add_size256.c").is_file()
