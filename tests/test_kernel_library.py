"""The convolution and DSP kernels as a user meets them: listed by `edgetune kernels`, tuned
from the command line on cortex-m55 and host, exported and rebuilt from the export, and
warning-free (-Wall -Wextra -Werror, C99) with every compiler each target offers."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.export import export_best
from edgetune.session import TuneRequest, tune
from edgetune.targets import iobuf
from edgetune.targets.runners import runner_for
from edgetune.tuner import TuningDatabase

from kernel_checks import compile_only

NEW_KERNELS = ["conv2d_s8", "dwconv2d_s8", "fir_q15", "fir_f32"]
HEAVY = {"conv2d_s8", "dwconv2d_s8"}  # 16-23 s of families each: the slow tier; the FIRs run by default
SHAPES = {
    "conv2d_s8": "h=6,w=5,cin=5,cout=6,kh=3,kw=3,stride=2,pad=2,dilation=1",
    "dwconv2d_s8": "h=7,w=6,c=9,kh=3,kw=3,stride=1,pad=1,dilation=2",
    "fir_q15": "taps=11,block=19",
    "fir_f32": "taps=11,block=19",
}


def cli(*args):
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_kernels_json_lists_every_kernel_with_parameters():
    code, out = cli("kernels", "--json")
    assert code == 0
    kernels = {k["name"]: k for k in json.loads(out)}
    assert set(NEW_KERNELS) <= set(kernels)
    assert {"algo", "im2col_pixels", "tile_p", "tile_oc", "unroll", "vector", "weight_sums", "fusion", "layout",
            "compiler", "opt"} == \
        set(kernels["conv2d_s8"]["parameters"]) - {"weights_in", "activations_in"}  # test_buffer_placement.py
    assert kernels["conv2d_s8"]["parameters"]["fusion"]["values"] == ["fused", "unfused"]
    assert "unrolled3x3" in kernels["dwconv2d_s8"]["parameters"]["taps"]["values"]
    for name, given in (("conv2d_s8", "ohwi"), ("dwconv2d_s8", "hwc")):
        assert kernels[name]["parameters"]["layout"]["values"] == [given, "packed"]


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m55", "host"])
def test_short_cli_tune_of_conv2d(tmp_path, target):
    shape = "h=8,w=8,cin=8,cout=8,kh=3,kw=3,stride=1,pad=1,dilation=1"
    code, out = cli("tune", "conv2d_s8", "--target", target, "--shape", shape, "--budget", "4", "--jobs", "2",
                    "--seed", "3", "--db", str(tmp_path / "t.db"), "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["trials"] == 4 and data["failed"] == 0
    unit = "instructions" if target == "cortex-m55" else "time_ns"
    assert data["best"][unit] > 0 and data["best"]["config"]["algo"] in ("direct", "im2col")


@pytest.mark.qemu
@pytest.mark.parametrize("name", ["dwconv2d_s8", "fir_q15", "fir_f32"])
def test_short_tune_of_the_other_kernels_on_both_targets(m55, host, tmp_path, name):
    kernel = get_kernel(name)
    db = TuningDatabase(tmp_path / "t.db")
    for target in (m55, host):
        summary = tune(TuneRequest(kernel, target, kernel.parse_shape(SHAPES[name]), "random", 3, 2, 0), db)
        assert summary.trials == 3 and summary.failed == 0, summary.failures


@pytest.mark.qemu
@pytest.mark.parametrize("target_name", ["cortex-m55", "host"])
@pytest.mark.one_case
def test_exported_convolutions_build_and_match_numpy(m55, host, tmp_path, target_name):
    target = m55 if target_name == "cortex-m55" else host
    db = TuningDatabase(tmp_path / "t.db")
    for name in ("conv2d_s8", "dwconv2d_s8"):
        kernel = get_kernel(name)
        tune(TuneRequest(kernel, target, kernel.parse_shape(SHAPES[name]), "random", 3, 2, 1), db)
    result = export_best(db, target, tmp_path / "export", objective=target.measures)
    assert {e.kernel for e in result.entries} == {"conv2d_s8", "dwconv2d_s8"}
    runner = runner_for(target)
    for name in ("conv2d_s8", "dwconv2d_s8"):
        kernel = get_kernel(name)
        shape = kernel.parse_shape(SHAPES[name])
        io = kernel.make_io(shape, np.random.default_rng(77), edge="extreme")  # inputs never seen while tuning
        # Firmware passes the weights in the form the exported variant takes (packed or not).
        entry = next(e for e in result.entries if e.kernel == name)
        deployed = kernel.deployed_io(io, kernel.tuning_space(target, shape).make(dict(entry.config)))
        workdir = tmp_path / f"build-{name}"
        workdir.mkdir()
        values, raw = runner.run(runner.build_export(kernel, shape, deployed, result.folder, workdir), deployed)
        assert np.array_equal(iobuf.unpack_outputs(io, raw)[0], kernel.reference(shape, io)[0]), name
        assert values[target.measures] > 0


@pytest.mark.qemu
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name in HEAVY else name
                                  for name in NEW_KERNELS])
def test_every_variant_family_compiles_warning_free_on_every_compiler(m55, host, tmp_path, name):
    """A family is one combination of the choice parameters (algo, vector, fusion, ...); each
    family is compiled, with drawn tile sizes, by every compiler of both targets."""
    kernel = get_kernel(name)
    shape = kernel.parse_shape(SHAPES[name])
    rng = np.random.default_rng(1)
    for target in (m55, host):
        space = kernel.space(target, shape)
        kinds = [p.name for p in space.params
                 if p.name not in ("compiler", "opt") and all(isinstance(v, str) for v in p.values)]
        families: dict[tuple, list] = {}
        for config in space:
            families.setdefault(tuple(config[k] for k in kinds), []).append(config)
        for members in families.values():
            chosen = members[int(rng.integers(len(members)))]
            for compiler in target.compilers:
                config = space.make({**chosen.as_dict(), "compiler": compiler.name})
                result = compile_only(target, kernel.render(target, shape, config), tmp_path)
                assert result.returncode == 0, f"{target.name} {config.key()}:\n{result.stderr}"
