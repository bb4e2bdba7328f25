"""matmul_f32: the tolerance check, the space the HAL allows, every vector path against the
numpy reference on drawn shapes and configurations, warning-free C, tune and export."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.export import export_best
from edgetune.codegen.kernels.matmul_f32 import scratch_bytes, tolerance
from edgetune.evaluate import Evaluator
from edgetune.session import TuneRequest, tune, workload_inputs, workload_of
from edgetune.targets import iobuf
from edgetune.targets.runners import runner_for
from edgetune.tuner import Outcome, TuningDatabase
from kernel_checks import compile_only


@pytest.fixture(scope="module")
def f32():
    return get_kernel("matmul_f32")


def host_paths(host):
    return ["c"] + [name for name in ("avx2", "avx512") if host.has_vector(name)]


# --- tolerance ------------------------------------------------------------------------------
def test_compare_accepts_reassociated_sums_and_rejects_real_errors(f32, rng):
    shape = f32.parse_shape("m=9,n=7,k=300")
    io = f32.make_io(shape, rng)
    want = f32.reference(shape, io)[0]
    a, b, bias = (buf.data for buf in io.buffers[:3])
    # A float32 evaluation in another order (blocked, as a kernel would) is accepted ...
    blocked = bias.copy()
    for k0 in range(0, 300, 64):
        blocked = blocked + a[:, k0:k0 + 64] @ b[k0:k0 + 64, :]
    assert not np.array_equal(blocked, want)
    assert f32.compare(shape, io, "c", blocked.astype(np.float32), want) is None
    # ... one element off by ten times its bound is not, and neither is a NaN.
    bound = tolerance(a, b, bias)
    wrong = want.copy()
    wrong[3, 4] += np.float32(10 * bound[3, 4])
    assert "1 of 63 elements" in f32.compare(shape, io, "c", wrong, want)
    wrong = want.copy()
    wrong[0, 0] = np.nan
    assert f32.compare(shape, io, "c", wrong, want) is not None


def test_tolerance_grows_with_k_and_magnitude(f32, rng):
    a, b, bias = np.ones((1, 10), np.float32), np.ones((10, 1), np.float32), np.zeros(1, np.float32)
    small = tolerance(a, b, bias)[0, 0]
    assert tolerance(np.ones((1, 100), np.float32), np.ones((100, 1), np.float32), bias)[0, 0] > 10 * small
    assert tolerance(4 * a, b, bias)[0, 0] == pytest.approx(4 * small)


# --- space ----------------------------------------------------------------------------------
def test_host_space_offers_exactly_the_detected_vector_units(f32, host):
    space = f32.space(host, f32.parse_shape("m=64,n=64,k=64"))
    assert list(space.param("vector").values) == host_paths(host)
    offered = {config["vector"] for config in space}
    assert offered == set(host_paths(host))


def test_m55_space_offers_helium_and_never_x86(f32, m55):
    space = f32.space(m55, f32.parse_shape("m=64,n=64,k=64"))
    assert set(space.param("vector").values) == {"c", "mve"}
    for config in space:
        if config["vector"] == "mve":
            assert config["tile_n"] % 4 == 0 and config["tile_m"] * config["tile_n"] // 4 + 2 <= 8


def test_register_and_scratch_limits_are_constraints(f32, m55, host):
    shape = f32.parse_shape("m=128,n=128,k=512")
    space = f32.space(host, shape)
    base = dict(tile_m=6, tile_n=16, kc=256, mc=64, nc=256, pack="ab", unroll_k=1, compiler="gcc", opt="O3")
    if host.has_vector("avx2"):
        assert space.is_legal(space.make({**base, "vector": "avx2"}))
        assert not space.is_legal(space.make({**base, "tile_m": 8, "tile_n": 32, "vector": "avx2"}))
    m55_space = f32.space(m55, shape)
    big = m55_space.make(dict(tile_m=4, tile_n=16, kc=512, mc=128, nc=256, pack="ab", unroll_k=1, vector="c",
                              compiler="gcc", opt="O3"))
    assert scratch_bytes(shape, big.as_dict()) > 40 * 1024
    assert "static RAM" in m55_space.violation(big)
    for config in m55_space:
        assert scratch_bytes(shape, config.as_dict()) <= 40 * 1024


# --- every vector path against the reference, on drawn shapes and configurations -----------------
def check_drawn_variant(kernel, target, data, path, work_root):
    shape = {"m": data.draw(st.integers(1, 37), "m"), "n": data.draw(st.integers(1, 41), "n"),
             "k": data.draw(st.integers(1, 300), "k")}
    space = kernel.space(target, shape)
    indices = [int(i) for i in space.legal_indices() if space.config_at(int(i))["vector"] == path]
    config = space.config_at(data.draw(st.sampled_from(indices), "config index"))
    io = kernel.make_io(shape, np.random.default_rng(data.draw(st.integers(0, 3), "seed")),
                        edge=data.draw(st.sampled_from(["random", "extreme"]), "edge"))
    trial = Evaluator(kernel, target, shape, space, io, work_root)(config)
    assert trial.outcome is Outcome.OK, f"{shape} {config.key()}: {trial.outcome.value}: {trial.error}"


@pytest.mark.parametrize("path", ["c", "avx2", "avx512"])
@pytest.mark.one_case(2)
def test_host_paths_match_the_reference(f32, host, path, tmp_path_factory):
    if path not in host_paths(host):
        # This machine lacks the unit: the space must not offer it (checked above); nothing runs.
        assert path not in f32.space(host, {"m": 8, "n": 8, "k": 8}).param("vector").values
        return
    work = tmp_path_factory.mktemp(f"f32-{path}")

    @settings(max_examples=6, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])  # each example builds and runs: no shrinking
    @given(data=st.data())
    def run(data):
        check_drawn_variant(f32, host, data, path, work)

    run()


@pytest.mark.qemu
@pytest.mark.parametrize("path", ["c", "mve"])
@pytest.mark.one_case(1)
def test_m55_paths_match_the_reference_in_qemu(f32, m55, path, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"f32-m55-{path}")

    @settings(max_examples=8, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])  # each example builds and runs: no shrinking
    @given(data=st.data())
    def run(data):
        check_drawn_variant(f32, m55, data, path, work)

    run()


def test_edge_shapes_on_the_widest_host_path(f32, host, tmp_path):
    """1-sized and non-dividing shapes with the largest micro-tile, packed and unpacked."""
    path = host_paths(host)[-1]
    for shape_text in ("m=1,n=1,k=1", "m=1,n=70,k=3", "m=29,n=1,k=513", "m=15,n=33,k=129"):
        shape = f32.parse_shape(shape_text)
        space = f32.space(host, shape)
        for pack in ("none", "b", "ab"):
            candidates = [c for c in space if c["vector"] == path and c["pack"] == pack]
            config = max(candidates, key=lambda c: (c["tile_m"] * c["tile_n"], -c["kc"]))
            trial = Evaluator(f32, host, shape, space, f32.make_io(shape, np.random.default_rng(5)), tmp_path)(config)
            assert trial.outcome is Outcome.OK, f"{shape_text} {config.key()}: {trial.error}"


# --- readable, warning-free C -------------------------------------------------------------------
@pytest.mark.qemu
def test_every_path_and_packing_compiles_warning_free_with_every_compiler(f32, m55, host, tmp_path):
    shape = f32.parse_shape("m=7,n=19,k=5")
    for target in (m55, host):
        space = f32.space(target, shape)
        for vector in space.param("vector").values:
            for pack in ("none", "b", "ab"):
                config = next(c for c in space if c["vector"] == vector and c["pack"] == pack)
                for compiler in target.compilers:
                    config = space.make({**config.as_dict(), "compiler": compiler.name})
                    rendered = f32.render(target, shape, config)
                    result = compile_only(target, rendered, tmp_path)
                    assert result.returncode == 0, f"{target.name} {config.key()}:\n{result.stderr}"
                    assert f"Configuration: {', '.join(f'{k}={v}' for k, v in config.items)}" in rendered.source


def test_scratch_is_documented_in_the_source(f32, host):
    shape = f32.parse_shape("m=20,n=40,k=30")
    space = f32.space(host, shape)
    packed = next(c for c in space if c["pack"] == "ab")
    source = f32.render(host, shape, packed).source
    assert f"{scratch_bytes(shape, packed.as_dict())} bytes of static, 64-byte aligned packing scratch" in source
    unpacked = next(c for c in space if c["pack"] == "none")
    assert "no scratch; reentrant" in f32.render(host, shape, unpacked).source


# --- the CLI: listed, and a short tune on both targets ----------------------------------------
def test_kernels_json_lists_matmul_f32_with_its_parameters():
    result = CliRunner().invoke(main, ["kernels", "--json", "--target", "host"])
    assert result.exit_code == 0, result.output
    entry = next(k for k in json.loads(result.output) if k["name"] == "matmul_f32")
    assert {"tile_m", "tile_n", "kc", "mc", "nc", "pack", "unroll_k", "vector", "compiler",
            "opt"} == set(entry["parameters"])
    assert "mve" not in entry["parameters"]["vector"]["values"]


@pytest.mark.qemu
@pytest.mark.parametrize("target_name,shape,unit", [("host", "m=33,n=17,k=20", "time_ns"),
                                                    ("cortex-m55", "m=9,n=12,k=10", "instructions")])
def test_short_tune_succeeds(target_name, shape, unit, tmp_path):
    result = CliRunner().invoke(main, ["tune", "matmul_f32", "--target", target_name, "--shape", shape, "--budget", "4",
                                       "--jobs", "2", "--seed", "3", "--db", str(tmp_path / "t.db"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["trials"] == 4 and summary["best"] is not None and summary["best"][unit] > 0


# --- export -------------------------------------------------------------------------------------
@pytest.mark.qemu
@pytest.mark.parametrize("target_name", ["host", "cortex-m55"])
def test_export_builds_and_matches_the_reference(f32, target_name, tmp_path):
    from edgetune.targets import get_target

    target = get_target(target_name)
    shape = f32.parse_shape("m=10,n=21,k=17")
    db = TuningDatabase(tmp_path / "t.db")
    tune(TuneRequest(f32, target, shape, "random", 4, 2, 1), db)
    result = export_best(db, target, tmp_path / "export", objective=target.measures)
    io = f32.make_io(shape, np.random.default_rng(77), edge="extreme")  # never seen while tuning
    assert io.buffers[0].data.tobytes() != workload_inputs(f32, workload_of(f32, target, shape)).buffers[0].data.tobytes()
    runner = runner_for(target)
    (tmp_path / "build").mkdir()
    build = runner.build_export(f32, shape, io, result.folder, tmp_path / "build")
    values, raw = runner.run(build, io)
    got = iobuf.unpack_outputs(io, raw)[0]
    assert f32.compare(shape, io, "c", got, f32.reference(shape, io)[0]) is None
    assert values[target.measures] > 0
