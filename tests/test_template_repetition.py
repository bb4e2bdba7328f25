"""Template families stay free of copied blocks: under 10 % of each kernel family's template
lines may stand in a run of 6+ lines identical to a sibling template's (whitespace folded),
measured by scripts/template_repetition.py. Shared code goes to the family's driver
template (blocks) or to common/ partials."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "template_repetition.py"
spec = importlib.util.spec_from_file_location("template_repetition", SCRIPT)
repetition = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = repetition  # dataclasses look their module up
spec.loader.exec_module(repetition)

LIMIT_PERCENT = 10.0


@pytest.mark.parametrize("family", repetition.FAMILIES)
def test_each_template_family_repeats_under_ten_percent(family):
    result = repetition.measure(family)
    assert result.files >= 1 and result.lines > 0
    assert result.percent < LIMIT_PERCENT, f"{family}: {result.repeated} of {result.lines} lines repeat a sibling"


def test_the_measure_finds_a_copied_run(tmp_path):
    """Six identical lines (indentation aside) in two siblings count in both; five do not."""
    run = [f"line {i};" for i in range(6)]
    (tmp_path / "fam_a.c.j2").write_text("\n".join(["a only", *run, "end a"]) + "\n")
    (tmp_path / "fam_b.c.j2").write_text("\n".join(["b only", *("  " + line for line in run), "end b"]) + "\n")
    (tmp_path / "fam_c.c.j2").write_text("\n".join(run[:5]) + "\n")
    result = repetition.measure("fam", tmp_path)
    assert (result.files, result.lines, result.repeated) == (3, 21, 12)
