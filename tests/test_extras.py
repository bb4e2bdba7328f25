"""A command that needs an optional extra which is not installed says which one, in one line
with exit status 2, instead of a traceback. Each case runs the real CLI in a subprocess in
which the extra's package cannot be found (as if never installed); the rest still works."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Replaces the path finder with one that finds nothing under the given top-level package
# names: importing them fails, and importlib.util.find_spec behaves as without the package.
WITHOUT = """
import sys
from importlib.machinery import PathFinder

HIDDEN = set(sys.argv[1].split(","))


class PathFinderWithout(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            return None
        return super().find_spec(name, path, target)


sys.meta_path[sys.meta_path.index(PathFinder)] = PathFinderWithout
sys.argv = ["edgetune", *sys.argv[2:]]
from edgetune.cli import main
main()
"""


def edgetune_without(packages: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT, ",".join(packages), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def assert_one_line_hint(proc: subprocess.CompletedProcess, extra: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("edgetune: error: ") and f"pip install 'edgetune[{extra}]'" in lines[0], lines[0]


def test_npu_tuning_without_the_npu_extra_names_it(tmp_path):
    proc = edgetune_without(["ethosu"], "tune", "matmul_s8", "--target", "cortex-m55", "--device", "ethos-u55",
                            "--shape", "m=4,n=4,k=8", "--budget", "1", "--db", str(tmp_path / "t.db"), cwd=tmp_path)
    assert_one_line_hint(proc, "npu")


def test_place_without_the_npu_extra_names_it(tmp_path):
    proc = edgetune_without(["ethosu"], "place", str(ROOT / "examples" / "tiny_cnn.toml"), "--db",
                            str(tmp_path / "t.db"), "--out", str(tmp_path / "plan"), cwd=tmp_path)
    assert_one_line_hint(proc, "npu")


def test_place_without_flatbuffers_names_the_npu_extra(tmp_path):
    proc = edgetune_without(["flatbuffers"], "place", str(ROOT / "examples" / "tiny_cnn.toml"), "--db",
                            str(tmp_path / "t.db"), "--out", str(tmp_path / "plan"), cwd=tmp_path)
    assert_one_line_hint(proc, "npu")


def test_model_show_without_the_model_extra_names_it(tmp_path):
    model = tmp_path / "m.tflite"
    model.write_bytes(b"\x10\x00\x00\x00TFL3" + bytes(24))  # read only after the schema is imported
    proc = edgetune_without(["tflite_micro"], "model", "show", str(model), cwd=tmp_path)
    assert_one_line_hint(proc, "model")


def test_cluster_tuning_without_the_cluster_extra_names_it(tmp_path):
    proc = edgetune_without(["distributed", "dask"], "tune", "matmul_s8", "--target", "cortex-m55",
                            "--shape", "m=4,n=4,k=8", "--budget", "1", "--cluster", "tcp://127.0.0.1:8786",
                            "--db", str(tmp_path / "t.db"), cwd=tmp_path)
    assert_one_line_hint(proc, "cluster")


@pytest.mark.qemu
def test_cpu_tuning_needs_no_optional_extra(tmp_path):
    proc = edgetune_without(["ethosu", "flatbuffers", "tflite_micro", "distributed", "dask", "kernel_tuner"], "tune", "matmul_s8",
                            "--target", "cortex-m55", "--shape", "m=4,n=4,k=8", "--budget", "1", "--json",
                            "--db", str(tmp_path / "t.db"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '"trials": 1' in proc.stdout
