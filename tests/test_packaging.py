"""The wheel a user installs holds exactly the repository's package files (every template,
board and firmware source, which the code reads at run time), its metadata keeps optional
what is optional, and building it prints no setuptools warning."""
from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str]:
    """(the wheel pip builds from this checkout, the build's verbose output). Built from a
    copy of the files git tracks, as a fresh clone has them: setuptools reuses an in-tree
    build/lib, which would still hold a module renamed since the last build."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    # Python's own "byte-compiling is disabled" notice follows this variable, not the project.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(out), str(source)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = out.glob("edgetune-*.whl")
    return path, proc.stdout + proc.stderr


def repository_package_files() -> set[str]:
    """Every file git tracks in the package folders, by its path inside the wheel."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    top_folders = {folder: package.replace(".", "/") for package, folder in config.items() if "/" not in folder}
    listed = subprocess.run(["git", "ls-files", "-z", *top_folders], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split("\0")
    files = set()
    for path in filter(None, listed):
        folder, _, rest = path.partition("/")
        files.add(f"{top_folders[folder]}/{rest}")
    return files


@pytest.mark.smoke
def test_the_wheel_holds_exactly_the_repository_package_files(wheel):
    with zipfile.ZipFile(wheel[0]) as archive:
        shipped = {name for name in archive.namelist() if ".dist-info/" not in name}
    expected = repository_package_files()
    assert {"edgetune/codegen/templates/matmul_s8.c.j2", "edgetune/targets/boards/cortex-m55.toml",
            "edgetune/firmware/common/startup_cortex_a.S", "edgetune/targets/qemu/insn_count.c"} <= expected
    assert sorted(expected - shipped) == [], "repository files missing from the wheel"
    assert sorted(shipped - expected) == [], "wheel files that are not in the repository"


def test_building_the_wheel_prints_no_warning(wheel):
    warnings = [line.strip() for line in wheel[1].splitlines()
                if re.search(r"warning|deprecat", line, re.IGNORECASE) and "setuptools" in line.lower()
                or "absent from" in line]
    assert warnings == []


def test_the_metadata_keeps_the_cluster_and_npu_support_optional(wheel):
    with zipfile.ZipFile(wheel[0]) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name))
    assert metadata["License-Expression"] == "Apache-2.0"
    assert {"npu", "cluster", "bench", "test"} <= set(metadata.get_all("Provides-Extra"))
    requires = metadata.get_all("Requires-Dist")
    for package in ("distributed", "ethos-u-vela", "kernel_tuner"):
        (line,) = [r for r in requires if r.startswith(package)]
        assert "extra ==" in line, line
