"""A user kernel's vector path requiring a unit no known target has (docs/own-kernel.md,
"Vector paths"): a misspelt `requires="mev"` is warned about once per run, naming the
kernel, the path, the unit and the nearest known name; a unit only the user's own board
file has is not."""
from __future__ import annotations

import re

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from edgetune.codegen.kernels import user
from edgetune.codegen.kernels.user import UnknownUnitWarning
from edgetune.codegen.kernels.user_loader import load_kernel_file
from edgetune.hal import shipped_unit_names
from edgetune.targets import get_target

ROOT = Path(__file__).resolve().parents[1]
QADD = ROOT / "examples" / "kernels" / "qadd_s8"


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    """Each test starts as a new process would: nothing warned yet."""
    monkeypatch.setattr(user, "_WARNED_UNITS", set())


def qadd_requiring(tmp_path: Path, unit: str) -> Path:
    """examples/kernels/qadd_s8 with its Helium path requiring `unit`."""
    folder = tmp_path / "qadd_s8"
    shutil.copytree(QADD, folder)
    definition = folder / "kernel.py"
    text = definition.read_text()
    assert 'requires="mve"' in text
    definition.write_text(text.replace('requires="mve"', f'requires="{unit}"'))
    return folder


def unit_warnings(kernel, target, times: int = 1) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(times):
            kernel.check_fits(target, {"n": 40})
    return [str(w.message) for w in caught if issubclass(w.category, UnknownUnitWarning)]


def test_the_known_units_are_the_shipped_boards_and_what_a_host_may_detect():
    assert {"mve", "neon", "dsp", "avx2", "avx512vnni"} <= shipped_unit_names()
    assert "mev" not in shipped_unit_names()


def test_a_misspelt_unit_is_warned_about_once_naming_the_kernel_path_unit_and_nearest_name(tmp_path):
    kernel = load_kernel_file(qadd_requiring(tmp_path, "mev"))
    shown = unit_warnings(kernel, get_target("cortex-m55"), times=3)  # a run checks the fit more than once
    assert shown == ["kernel qadd_s8: vector path 'mve' requires 'mev', which no known target has "
                     "(the shipped ones, cortex-m55), so the path is never offered; did you mean mve?"]


def test_a_unit_in_the_wrong_case_is_pointed_at_its_name(tmp_path):
    kernel = load_kernel_file(qadd_requiring(tmp_path, "MVE"))
    assert unit_warnings(kernel, get_target("cortex-m55")) == [
        "kernel qadd_s8: vector path 'mve' requires 'MVE', which no known target has (the shipped ones, cortex-m55), "
        "so the path is never offered; did you mean mve?"]


def test_the_shipped_units_are_not_warned_about():
    assert unit_warnings(load_kernel_file(QADD), get_target("host")) == []


def test_a_unit_only_the_users_board_has_is_not_warned_about_on_that_board(tmp_path):
    board = tmp_path / "my-m55.toml"
    board.write_text('extends = "cortex-m55"\nname = "my-m55"\n\n'
                     '[[vector_units]]\nname = "mve"\nregister_bits = 128\nregisters = 8\n'
                     'lanes = { int8 = 16, int16 = 8, int32 = 4 }\n\n'
                     '[[vector_units]]\nname = "npx"\nregister_bits = 256\nregisters = 8\n'
                     'lanes = { int8 = 32, int16 = 16, int32 = 8 }\n')
    kernel = load_kernel_file(qadd_requiring(tmp_path, "npx"))
    assert unit_warnings(kernel, get_target(str(board))) == []
    assert kernel.space(get_target(str(board)), {"n": 40}).param("vector").values == ("c", "mve")
    [line] = unit_warnings(kernel, get_target("cortex-m55"))
    assert "requires 'npx'" in line and "did you mean" not in line  # nothing near it


def test_the_command_line_shows_it_as_one_warning_line_and_tunes_on(tmp_path):
    folder = qadd_requiring(tmp_path, "mev")
    result = subprocess.run([sys.executable, "-m", "edgetune.cli", "tune", "--kernel-file", str(folder),
                             "--shape", "n=40", "--target", "host", "--budget", "1", "--db", "t.db"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    shown = [line for line in result.stderr.splitlines() if "warning" in line]
    assert shown == ["edgetune: warning: kernel qadd_s8: vector path 'mve' requires 'mev', which no known target "
                     "has (the shipped ones, host), so the path is never offered; did you mean mve?"]


def test_the_python_api_warns_with_its_own_category(tmp_path):
    from edgetune import api

    with pytest.warns(api.UnknownUnitWarning, match=r"requires 'mev'.*did you mean mve\?"):
        summary = api.tune(qadd_requiring(tmp_path, "mev"), "n=40", target="host", budget=1, db=tmp_path / "t.db")
    assert summary.best is not None  # a warning, not a refusal: the plain C path is tuned


def test_listing_the_kernel_warns_too_since_the_path_is_missing_from_the_list(tmp_path):
    folder = qadd_requiring(tmp_path, "mev")
    result = subprocess.run([sys.executable, "-m", "edgetune.cli", "kernels", "--kernel-file", str(folder),
                             "--target", "cortex-m55"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert re.search(r"\n  vector +c\n", result.stdout)  # the Helium path is not offered...
    shown = [line for line in result.stderr.splitlines() if "warning" in line]
    assert shown == ["edgetune: warning: kernel qadd_s8: vector path 'mve' requires 'mev', which no known target "
                     "has (the shipped ones, cortex-m55), so the path is never offered; did you mean mve?"]
