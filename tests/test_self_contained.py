"""Nothing in the repository points outside it: a user's clone has no notes folder next to
it and no development machine's absolute paths. Facts are cited from primary sources or
from docs/measurements.md; test and benchmark data live in tests/data/ and bench/data/."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(r"FACTS\.md|\.\./shared\b|\bshared/(FACTS|data|tools|STYLE)|/work/")
# .ci/run runs the CI machine's fresh-machine tool, which CI provides beside the clone;
# it says so in one line where the tool is absent (tests/test_ci_run.py).
ALLOWED = {".ci/run", "tests/test_self_contained.py"}


def test_no_tracked_file_refers_outside_the_repository():
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    offenders = []
    for name in filter(None, listed.stdout.split("\0")):
        path = ROOT / name
        if name in ALLOWED or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # binary data (gzip-compressed spaces)
            continue
        offenders += [f"{name}:{number}: {line.strip()}" for number, line in enumerate(text.splitlines(), 1)
                      if OUTSIDE.search(line)]
    assert offenders == []
