""".ci/run's stages and their outcomes, with the scripts it calls replaced by stubs that log
their calls: the real ones set up a machine (the fresh-machine check itself is run by CI)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def stub(path: Path, log: Path, status: int = 0, then: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/usr/bin/env bash\necho "{path.name} $*" >> {log}\n{then}\nexit {status}\n')
    path.chmod(0o755)


@pytest.fixture
def checkout(tmp_path):
    """A copy of .ci/run in a folder whose scripts, venv python and fresh-machine tool are stubs."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    log = tmp_path / "calls.log"
    stub(repo / "scripts" / "test.sh", log)
    stub(repo / "scripts" / "quickstart.sh", log)
    stub(repo / ".venv" / "bin" / "python", log)
    # The tool runs its command in the project's root, as fresh-machine does in its chroot.
    stub(tmp_path / "tools" / "fresh-machine", log, then=f'cd {repo} && "$@"; exit $?')
    return repo, log, tmp_path / "tools" / "fresh-machine"


def ci_run(repo: Path, tool: Path | str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FRESH_MACHINE": str(tool)}
    return subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=60)


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_both_stages_run_the_fresh_one_through_the_tool(checkout):
    repo, log, tool = checkout
    proc = ci_run(repo, tool)
    assert proc.returncode == 0, proc.stderr
    fresh = ["fresh-machine bash .ci/run --quickstart-and-smoke", "quickstart.sh ", "python -m pytest -m smoke"]
    assert [call for call in calls(log) if call != "test.sh "] == fresh and "test.sh " in calls(log)
    assert "ci: passed: suite, fresh" in proc.stderr


def test_the_fresh_stage_runs_after_the_suite(checkout):
    """One after the other: the fresh stage's quick start tunes a model, and the 2-core
    machines CI runs on would share the cores with the suite."""
    repo, log, tool = checkout
    proc = ci_run(repo, tool)
    assert proc.returncode == 0, proc.stderr
    assert calls(log)[0] == "test.sh " and calls(log)[1].startswith("fresh-machine")


def test_a_failing_suite_fails_ci_and_the_fresh_stage_still_runs(checkout):
    repo, log, tool = checkout
    stub(repo / "scripts" / "test.sh", log, status=1)
    proc = ci_run(repo, tool)
    assert proc.returncode == 1
    assert "quickstart.sh " in calls(log)
    assert "ci: FAILED: suite (scripts/test.sh, exit 1)" in proc.stderr


@pytest.mark.parametrize("failing", ["quickstart.sh", "python"])
def test_a_failure_on_the_fresh_machine_fails_ci(checkout, failing):
    repo, log, tool = checkout
    path = repo / ("scripts" if failing.endswith(".sh") else ".venv/bin") / failing
    stub(path, log, status=3)
    proc = ci_run(repo, tool)
    assert proc.returncode == 1
    assert "ci: FAILED: fresh (quick start and smoke tests on a fresh machine, exit 3)" in proc.stderr


@pytest.mark.parametrize("stage, pytest_at", [("suite (scripts/test.sh", "scripts/test.sh"),
                                               ("fresh (quick start and smoke tests on a fresh machine", ".venv/bin/python")])
def test_a_stage_whose_pytest_collected_no_test_fails_ci_saying_so(checkout, stage, pytest_at):
    repo, log, tool = checkout
    stub(repo / pytest_at, log, status=5)  # pytest's status when it collected nothing
    proc = ci_run(repo, tool)
    assert proc.returncode == 1
    assert f"ci: FAILED: {stage}, exit 5: pytest ran no test)" in proc.stderr, proc.stderr


def test_the_suite_stage_runs_every_tier_and_passes_its_arguments_on(tmp_path):
    """scripts/test.sh (CI's suite stage) lifts the default `not slow` selection."""
    repo, log = tmp_path / "repo", tmp_path / "calls.log"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test.sh", repo / "scripts" / "test.sh")
    stub(repo / "scripts" / "setup.sh", log)
    stub(repo / ".venv" / "bin" / "python", log, then='printf "%s|" "$@" >> ' + str(log))
    subprocess.run(["bash", str(repo / "scripts" / "test.sh"), "-k", "x"], check=True, timeout=60)
    assert calls(log)[0] == "setup.sh "
    assert calls(log)[-1] == "-m|pytest|-m||-k|x|"  # python's argv, one | after each: -m pytest -m "" -k x


@pytest.mark.parametrize("default_status", [0, 1])
def test_without_arguments_the_suite_runs_the_default_tier_then_the_slow_one_each_timed(tmp_path, default_status):
    """CI's output shows the default tier's own wall time (its goal: 10 minutes); a failing
    default tier still lets the slow tier run, and the status says a tier failed."""
    repo, log = tmp_path / "repo", tmp_path / "calls.log"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test.sh", repo / "scripts" / "test.sh")
    stub(repo / "scripts" / "setup.sh", log)
    # the stub python fails the default tier (no -m slow among its arguments) when asked to
    stub(repo / ".venv" / "bin" / "python", log, then=f'case "$*" in *slow*) ;; *) exit {default_status};; esac')
    proc = subprocess.run(["bash", str(repo / "scripts" / "test.sh")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == default_status
    assert calls(log) == ["setup.sh ", "python -m pytest --durations=40", "python -m pytest -m slow --durations=15"]
    said = [line for line in proc.stdout.splitlines() if line.startswith("test.sh: ")]
    assert [line.split(":")[1].strip() for line in said] == ["default tier", "slow tier"], proc.stdout
    assert said[0].endswith(f"exit {default_status}") and said[1].endswith("exit 0")


def test_without_the_tool_it_says_so_in_one_line_and_runs_the_quick_start_here(checkout):
    repo, log, _ = checkout
    proc = ci_run(repo, repo / "no" / "fresh-machine")
    assert proc.returncode == 0, proc.stderr
    assert calls(log) == ["test.sh ", "quickstart.sh "]
    said = [line for line in proc.stdout.splitlines() if line.startswith("ci: ")]
    assert len(said) == 1 and "no fresh-machine tool at" in said[0]
