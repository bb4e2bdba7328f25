"""NEON (AArch64 Advanced SIMD) paths of matmul_f32 and matmul_s8 on the Cortex-A53/A72:
offered only where the HAL describes the unit, warning-free with every compiler of the
A-targets, exact (int8) or within the documented tolerance (float) on drawn shapes in QEMU,
and free of out-of-bounds accesses and undefined behaviour on edge shapes (AddressSanitizer
and UBSan, Linux user-mode QEMU)."""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from edgetune.codegen import get_kernel
from edgetune.codegen.kernels.matmul_f32 import lane_chunks
from edgetune.codegen.kernels.matmul_s8_neon import packed_registers, rowmajor_registers
from edgetune.hal import load_target
from edgetune.export import export_best
from edgetune.evaluate import Evaluator
from edgetune.session import workload_inputs, workload_of
from edgetune.targets import get_target, target_file
from edgetune.targets import iobuf
from edgetune.targets.runners import runner_for
from edgetune.tuner import Outcome, TuningDatabase
from kernel_checks import compile_only, run_sanitized

A_TARGETS = ("cortex-a53", "cortex-a72")
# The kernels' own families of NEON variants: (kernel, the choice parameter that selects
# a template branch, its values).
FAMILIES = (("matmul_f32", "pack", ("none", "b", "ab")), ("matmul_s8", "layout", ("rowmajor", "packed")))


def neon_indices(space, **values):
    return [int(i) for i in space.legal_indices()
            if space.config_at(int(i))["vector"] == "neon"
            and all(space.config_at(int(i))[k] == v for k, v in values.items())]


# --- the HAL decides ------------------------------------------------------------------------
@pytest.mark.parametrize("name", A_TARGETS)
def test_a_targets_describe_their_neon_unit_as_data(name):
    unit = get_target(name).vector_unit("neon")
    assert (unit.register_bits, unit.registers) == (128, 32)
    assert unit.lanes_for("float32") == 4 and unit.lanes_for("int8") == 16
    assert "TRM" in unit.source  # Cortex-A53 TRM DDI 0500, Cortex-A72 TRM DDI 0588


@pytest.mark.parametrize("kernel_name", ["matmul_f32", "matmul_s8"])
def test_neon_is_offered_only_where_the_hal_has_it(kernel_name, a53, m55, host):
    kernel = get_kernel(kernel_name)
    shape = kernel.parse_shape("m=16,n=16,k=32")
    assert "neon" in kernel.space(a53, shape).param("vector").values
    assert any(c["vector"] == "neon" for c in kernel.space(a53, shape))
    for other in (m55, host):
        assert "neon" not in kernel.space(other, shape).param("vector").values
    # The same A53 without its vector unit in the target file: no NEON anywhere.
    bare = load_target(target_file("cortex-a53"), overrides={"vector_units": []})
    assert not bare.has_vector("neon")
    # The int8 kernels offer their plain loop (naive) everywhere, as the layer's baseline.
    plain = ["naive"] if kernel_name == "matmul_s8" else []
    assert list(kernel.space(bare, shape).param("vector").values) == ["c", *plain]


def test_neon_tiles_keep_their_blocks_in_the_32_registers(a72):
    f32, s8 = get_kernel("matmul_f32"), get_kernel("matmul_s8")
    f32_space = f32.space(a72, f32.parse_shape("m=64,n=64,k=64"))
    tiles = {(c["tile_m"], c["tile_n"]) for c in f32_space if c["vector"] == "neon"}
    assert (8, 12) in tiles and (6, 16) in tiles and (8, 16) not in tiles  # 32 + 4 + 2 registers
    for tm, tn in tiles:
        assert tn % 4 == 0 and tm * tn // 4 + tn // 4 + -(-tm // 4) <= 32
    s8_space = s8.space(a72, s8.parse_shape("m=64,n=64,k=64"))
    neon = [c for c in s8_space if c["vector"] == "neon"]
    assert {c["layout"] for c in neon} == {"rowmajor", "packed"}
    for c in neon:
        count = packed_registers if c["layout"] == "packed" else rowmajor_registers
        assert count(c["tile_m"], c["tile_n"]) <= 32
    assert not any(c["layout"] == "packed" and (c["tile_m"], c["tile_n"]) == (4, 8) for c in neon)


def test_packed_a_steps_load_whole_vectors_without_reading_past_the_tile():
    for tile_m in range(1, 9):
        chunks = lane_chunks(tile_m)
        assert [row for start, width in chunks for row in range(start, start + width)] == list(range(tile_m))
        assert all(width in (4, 2, 1) for _, width in chunks)
    assert lane_chunks(6) == [(0, 4), (4, 2)] and lane_chunks(3) == [(0, 2), (2, 1)]


# --- warning-free with every compiler the A-targets offer ---------------------------------------
@pytest.mark.parametrize("kernel_name, family, values", FAMILIES)
@pytest.mark.one_case
def test_every_neon_family_compiles_warning_free_on_every_compiler(kernel_name, family, values, a53, a72, tmp_path):
    kernel = get_kernel(kernel_name)
    rng = np.random.default_rng(7)
    for target, shape_text in ((a53, "m=1,n=1,k=1"), (a72, "m=7,n=19,k=37")):
        shape = kernel.parse_shape(shape_text)
        space = kernel.space(target, shape)
        for value in values:
            indices = neon_indices(space, **{family: value})
            assert indices, f"{target.name} {shape_text}: no NEON variant with {family}={value}"
            chosen = space.config_at(int(rng.choice(indices)))
            for compiler in target.compilers:
                config = space.make({**chosen.as_dict(), "compiler": compiler.name, "opt": "O3"})
                result = compile_only(target, kernel.render(target, shape, config), tmp_path)
                assert result.returncode == 0, f"{target.name} {config.key()}:\n{result.stderr}"


# --- drawn shapes and configurations, run in QEMU -------------------------------------------------
def check_drawn_neon_variant(kernel, target, data, work, family, values):
    shape = {"m": data.draw(st.integers(1, 13), "m"), "n": data.draw(st.integers(1, 27), "n"),
             "k": data.draw(st.integers(1, 70), "k")}
    space = kernel.space(target, shape)
    config = space.config_at(data.draw(st.sampled_from(
        neon_indices(space, **{family: data.draw(st.sampled_from(values), family)})), "config index"))
    io = kernel.make_io(shape, np.random.default_rng(data.draw(st.integers(0, 3), "seed")),
                        edge=data.draw(st.sampled_from(["random", "extreme"]), "edge"))
    trial = Evaluator(kernel, target, shape, space, io, work)(config)
    assert trial.outcome is Outcome.OK, f"{shape} {config.key()}: {trial.outcome.value}: {trial.error}"


@pytest.mark.qemu
@pytest.mark.parametrize("kernel_name, family, values", FAMILIES)
@pytest.mark.one_case
def test_drawn_neon_variants_match_the_reference_in_qemu(kernel_name, family, values, a53, a72, tmp_path_factory):
    """matmul_s8 bit-exact; matmul_f32 within 2*gamma_(K+1)*(|A||B|+|bias|) (its compare)."""
    kernel = get_kernel(kernel_name)
    work = tmp_path_factory.mktemp(f"neon-{kernel_name}")

    @settings(max_examples=10, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])  # each example builds and runs: no shrinking
    @given(data=st.data())
    def run(data):
        target = data.draw(st.sampled_from([a53, a72]), "target")
        check_drawn_neon_variant(kernel, target, data, work, family, values)

    run()


# --- no out-of-bounds access, no undefined behaviour on edge shapes --------------------------------

@pytest.mark.qemu
@pytest.mark.parametrize("kernel_name, family, values",  # smoke: qemu-aarch64 and the arm64 libc, once
                         [pytest.param(*FAMILIES[0], marks=(pytest.mark.smoke, pytest.mark.slow)),  # 28 s each: slow tier
                          *(pytest.param(*family, marks=pytest.mark.slow) for family in FAMILIES[1:])])
# (the default tier keeps the sanitizer check in tests/test_conv2d_neon.py and test_dwconv2d_neon.py;
# `pytest -m smoke`, run on a fresh machine, still takes the first family: qemu-aarch64 and its libc)
def test_edge_shapes_are_exact_under_address_and_undefined_behaviour_sanitizers(kernel_name, family, values, a72,
                                                                                 tmp_path):
    """1-sized dimensions and remainders in every direction, with the largest tile of each
    family (the most remainder code) and the smallest."""
    kernel = get_kernel(kernel_name)
    for shape_text in ("m=1,n=1,k=1", "m=5,n=13,k=37", "m=9,n=7,k=17"):
        shape = kernel.parse_shape(shape_text)
        space = kernel.space(a72, shape)
        for value in values:
            configs = [space.config_at(i) for i in neon_indices(space, **{family: value}, compiler="gcc")]
            size = lambda c: (c["tile_m"] * c["tile_n"], c["unroll_k"])  # noqa: E731
            largest, smallest = max(configs, key=size), min(configs, key=size)
            for config in (largest, smallest) if largest != smallest else (largest,):
                work = tmp_path / f"{shape_text}-{config.key()}".replace(",", "_").replace("=", "")
                work.mkdir()
                io = kernel.make_io(shape, np.random.default_rng(11), edge="extreme")
                got = run_sanitized(kernel, a72, shape, config, io, work)
                want = kernel.reference(shape, io)
                for buf, g, w in zip(io.outputs(), got, want):
                    assert kernel.compare(shape, io, buf.name, g, w) is None, f"{shape_text} {config.key()}"


# --- export ------------------------------------------------------------------------------------
@pytest.mark.qemu
@pytest.mark.parametrize("kernel_name, values", [
    ("matmul_s8", {"vector": "neon", "layout": "packed", "tile_m": 2, "tile_n": 4, "unroll_k": 2}),
    ("matmul_f32", {"vector": "neon", "pack": "ab", "tile_m": 6, "tile_n": 8, "unroll_k": 2}),
])
def test_exported_neon_variant_builds_and_matches_the_reference(kernel_name, values, a53, tmp_path):
    kernel = get_kernel(kernel_name)
    shape = kernel.parse_shape("m=10,n=21,k=37")
    space = kernel.space(a53, shape)
    config = next(c for c in space if all(c[k] == v for k, v in values.items()))
    workload = workload_of(kernel, a53, shape)
    trial = Evaluator(kernel, a53, shape, space, workload_inputs(kernel, workload), tmp_path)(config)
    assert trial.outcome is Outcome.OK, trial.error
    db = TuningDatabase(tmp_path / "t.db")
    db.record(workload, trial, "manual", 0)
    result = export_best(db, a53, tmp_path / "export", objective="instructions")
    assert "vector=neon" in result.header.read_text()
    io = kernel.make_io(shape, np.random.default_rng(77), edge="extreme")  # never seen while tuning
    deployed = kernel.deployed_io(io, config)  # packed weights where the variant wants them
    (tmp_path / "build").mkdir()
    runner = runner_for(a53)
    build = runner.build_export(kernel, shape, deployed, result.folder, tmp_path / "build")
    _, raw = runner.run(build, deployed)
    got = iobuf.unpack_outputs(io, raw)[0]
    assert kernel.compare(shape, io, "c", got, kernel.reference(shape, io)[0]) is None
