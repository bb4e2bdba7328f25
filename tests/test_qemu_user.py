"""What is particular to the qemu-user runner (AArch64 Linux processes in qemu-aarch64); the
Runner contract itself is tests/test_runners.py's. The count is the kernel's own: it starts
at the kernel's entry symbol, is identical run to run and call to call, and a tuning run on
the shipped target file goes end to end through the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.evaluate import Evaluator
from edgetune.targets import elf, get_target
from edgetune.targets.qemu_user import GLUE_RUN, QemuUserRunner, counted_calls, kernel_call
from edgetune.targets.runners import runner_for
from edgetune.tuner import Outcome

pytestmark = pytest.mark.qemu
SHAPE = "taps=9,block=37"
CONFIG = {"tile": 8, "unroll": 2, "vector": "neon", "compiler": "gcc", "opt": "O2"}


@pytest.fixture(scope="module")
def target():
    target = get_target("cortex-a72-linux")
    runner_for(target).check_tools()
    return target


def measure(target, workdir, config=CONFIG):
    workdir.mkdir()
    kernel = get_kernel("fir_f32")
    shape = kernel.parse_shape(SHAPE)
    space = kernel.space(target, shape)
    io = kernel.make_io(shape, np.random.default_rng(3))
    return Evaluator(kernel, target, shape, space, io, workdir)(space.make(config))


def test_the_count_starts_at_the_kernels_entry_and_repeats_exactly(target, tmp_path):
    kernel = get_kernel("fir_f32")
    shape = kernel.parse_shape(SHAPE)
    space = kernel.space(target, shape)
    io = kernel.make_io(shape, np.random.default_rng(3))
    rendered = kernel.render(target, shape, space.make(CONFIG))
    runner = runner_for(target)
    build = runner.build(kernel, shape, io, rendered, tmp_path)
    (values, raw), (again, _) = runner.run(build, io), runner.run(build, io)
    assert values["instructions"] == again["instructions"] > 0
    assert len(raw) == shape["block"] * 4  # the block's float32 outputs
    start, stop = kernel_call(build.path, tmp_path)
    symbols = elf.symbols(build.path)
    assert start == symbols[rendered.function]  # the region opens at the kernel itself, not in the glue
    assert symbols[GLUE_RUN] < stop < symbols[GLUE_RUN] + 256  # and closes where its call returns (in the glue)
    # The harness called the kernel again to time it: every call counted the same.
    calls = counted_calls(tmp_path / "counts.txt")
    assert len(calls) > 1 and set(calls) == {values["instructions"]}


def test_another_variant_counts_differently(target, tmp_path):
    small = measure(target, tmp_path / "small", {**CONFIG, "unroll": 1})
    large = measure(target, tmp_path / "large", {**CONFIG, "unroll": 2})
    assert small.outcome is Outcome.OK and large.outcome is Outcome.OK
    assert small.values["instructions"] != large.values["instructions"]  # the count sees the code


def test_a_tuning_run_on_the_linux_target_goes_end_to_end(target, tmp_path):
    db = tmp_path / "tune.db"
    args = ["tune", "fir_f32", "--target", "cortex-a72-linux", "--shape", SHAPE, "--strategy", "random",
            "--budget", "4", "--db", str(db), "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["target"] == "cortex-a72-linux"
    assert report["best"]["instructions"] > 0
    assert QemuUserRunner.counts_exactly and QemuUserRunner.default_tolerance_pct(target) == 0.0
