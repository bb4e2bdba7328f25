"""matmul_s8's AVX2 and AVX-512 paths on the host: offered only where the HAL detects the
unit, register limits as constraints, bit-exact with numpy on drawn shapes, configurations
and quantisation parameters (extremes included), unaligned buffers and edge shapes without
undefined behaviour (UBSan), warning-free with every host compiler."""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from edgetune.export import export_best
from edgetune.codegen.kernels.base import COMMON_CFLAGS, Buffer, KernelIO
from edgetune.evaluate import Evaluator
from edgetune.session import workload_inputs, workload_of
from edgetune.targets import iobuf
from edgetune.targets.build import kernel_header
from edgetune.targets.runners import runner_for
from edgetune.tuner import Outcome, TuningDatabase
from kernel_checks import build_shared, compile_only, misaligned

PATHS = ("avx2", "avx512")
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
EXAMPLES = settings(max_examples=10, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
                    phases=[Phase.explicit, Phase.generate])  # each example builds and runs: no shrinking


def offered(matmul, host, path) -> bool:
    """Whether this machine has the unit; if not, the space must not offer the path."""
    if host.has_vector(path):
        return True
    assert path not in matmul.space(host, {"m": 8, "n": 8, "k": 8}).param("vector").values
    return False


def legal(space, **values):
    return [c for c in space if all(c[k] == v for k, v in values.items())]


# --- the space ------------------------------------------------------------------------------------
def test_host_offers_exactly_the_detected_units_and_arm_targets_none(matmul, host, m55):
    shape = matmul.parse_shape("m=16,n=16,k=64")
    vectors = matmul.space(host, shape).param("vector").values
    assert [v for v in vectors if v in PATHS] == [p for p in PATHS if host.has_vector(p)]
    assert not set(PATHS) & set(matmul.space(m55, shape).param("vector").values)


@pytest.mark.parametrize("path", PATHS)
def test_register_and_step_limits_are_constraints(matmul, host, path):
    if not offered(matmul, host, path):
        return
    registers = host.vector_unit(path).registers
    lanes = host.vector_unit(path).lanes_for("int32")
    space = matmul.space(host, matmul.parse_shape("m=64,n=64,k=64"))
    packed, rowmajor = legal(space, vector=path, layout="packed"), legal(space, vector=path, layout="rowmajor")
    assert packed and rowmajor
    assert all(c["tile_m"] * c["tile_n"] + c["tile_m"] + 1 <= registers for c in packed)
    assert max(c["tile_m"] * c["tile_n"] for c in packed) > 4  # the limit still leaves real tiles
    assert all(c["tile_n"] % lanes == 0 and c["unroll_k"] == 1 for c in rowmajor)
    too_big = space.make({"tile_m": 8, "tile_n": 32, "unroll_k": 1, "vector": path, "layout": "packed",
                          "compiler": "gcc", "opt": "O2"})
    assert "vector registers" in space.violation(too_big)
    # A short k cannot take an unrolled 16/32-element step; a narrow n still gets a whole vector.
    small = matmul.space(host, matmul.parse_shape("m=3,n=5,k=20"))
    step = 2 * lanes
    assert all(c["unroll_k"] * step <= 20 or c["unroll_k"] == 1 for c in legal(small, vector=path, layout="packed"))
    assert {c["tile_n"] for c in legal(small, vector=path, layout="rowmajor")} == {lanes}


# --- bit-exact on drawn shapes and configurations ---------------------------------------------------
def draw_variant(matmul, host, data, path, layout):
    shape = {"m": data.draw(st.integers(1, 13), "m"), "n": data.draw(st.integers(1, 45), "n"),
             "k": data.draw(st.integers(1, 140), "k")}
    space = matmul.space(host, shape)
    indices = [int(i) for i in space.legal_indices()
               if space.config_at(int(i))["vector"] == path and space.config_at(int(i))["layout"] == layout]
    return shape, space, space.config_at(data.draw(st.sampled_from(indices), "config index"))


@pytest.mark.matrix
@pytest.mark.parametrize("layout", ["rowmajor", "packed"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.one_case
def test_drawn_variants_are_bit_exact(matmul, host, path, layout, tmp_path_factory):
    if not offered(matmul, host, path):
        return
    work = tmp_path_factory.mktemp(f"s8-{path}-{layout}")

    @EXAMPLES
    @given(data=st.data())
    def run(data):
        shape, space, config = draw_variant(matmul, host, data, path, layout)
        io = matmul.make_io(shape, np.random.default_rng(data.draw(st.integers(0, 3), "seed")),
                            edge=data.draw(st.sampled_from(["random", "extreme"]), "edge"))
        trial = Evaluator(matmul, host, shape, space, io, work)(config)
        assert trial.outcome is Outcome.OK, f"{shape} {config.key()}: {trial.outcome.value}: {trial.error}"

    run()


def quantisation_io(matmul, shape, rng, multiplier, shift, c_zero, a_zero, b_zero):
    """Inputs with chosen quantisation parameters (make_io draws only typical ones)."""
    base = matmul.make_io(shape, rng)
    params = dict(base.params, multiplier=multiplier, shift=shift, c_zero=c_zero, a_zero=a_zero, b_zero=b_zero)
    return KernelIO(buffers=base.buffers, params=tuple(params.items()))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.one_case
def test_requantisation_is_bit_exact_over_the_whole_parameter_range(matmul, host, path, tmp_path_factory):
    """Multipliers of either sign (INT32_MIN included: its saturating case), left and right
    shifts, output zero points anywhere in int32, zero points at the int8 extremes."""
    if not offered(matmul, host, path):
        return
    work = tmp_path_factory.mktemp(f"s8-requant-{path}")

    @EXAMPLES
    @given(data=st.data())
    def run(data):
        shape, space, config = draw_variant(matmul, host, data, path, data.draw(st.sampled_from(["rowmajor", "packed"])))
        io = quantisation_io(
            matmul, shape, np.random.default_rng(data.draw(st.integers(0, 3), "seed")),
            multiplier=data.draw(st.one_of(st.sampled_from([INT32_MIN, INT32_MAX, -1, 1, 1 << 30]),
                                           st.integers(INT32_MIN, INT32_MAX)), "multiplier"),
            shift=data.draw(st.integers(-31, 12), "shift"),
            c_zero=data.draw(st.one_of(st.sampled_from([INT32_MIN, INT32_MAX, -128, 127]),
                                       st.integers(INT32_MIN, INT32_MAX)), "c_zero"),
            a_zero=data.draw(st.sampled_from([-128, 0, 127]), "a_zero"),
            b_zero=data.draw(st.sampled_from([-128, 0, 127]), "b_zero"))
        trial = Evaluator(matmul, host, shape, space, io, work)(config)
        assert trial.outcome is Outcome.OK, f"{shape} {config.key()} {io.params}: {trial.error}"

    run()


def test_saturating_product_comes_out_as_int32_max(matmul, host, tmp_path):
    """acc << 31 = INT32_MIN times multiplier INT32_MIN: the one product that saturates."""
    path = next((p for p in PATHS if host.has_vector(p)), None)
    if path is None:
        return
    shape = matmul.parse_shape("m=1,n=9,k=1")
    space = matmul.space(host, shape)
    params = quantisation_io(matmul, shape, np.random.default_rng(0), INT32_MIN, 31, -128, 0, 0).params
    # Odd accumulators shifted left by 31 wrap to INT32_MIN; even ones to 0.
    io = KernelIO(buffers=(Buffer("a", np.ones((1, 1), np.int8)),
                           Buffer("b", np.array([[1, 2, 1, 3, 1, 1, 5, 1, 1]], np.int8)),
                           Buffer("bias", np.zeros(9, np.int32)),
                           Buffer("c", np.zeros((1, 9), np.int8), is_output=True)), params=params)
    want = matmul.reference(shape, io)[0]
    # Saturated: 127. A product left at INT32_MIN would give -128, like the even columns.
    assert want[0, 0] == 127 and want[0, 1] == -128
    for layout in ("rowmajor", "packed"):
        trial = Evaluator(matmul, host, shape, space, io, tmp_path)(legal(space, vector=path, layout=layout)[0])
        assert trial.outcome is Outcome.OK, trial.error


# --- edge shapes, unaligned buffers, no undefined behaviour ----------------------------------------
EDGE_SHAPES = ("m=1,n=1,k=1", "m=1,n=33,k=2", "m=9,n=1,k=65", "m=3,n=17,k=31", "m=2,n=8,k=32")



@pytest.mark.parametrize("path", PATHS)
@pytest.mark.one_case
def test_edge_shapes_on_unaligned_buffers_without_undefined_behaviour(matmul, host, path, tmp_path, capfd):
    """The largest tile of each layout, built with GCC's UBSan, called through ctypes with every
    buffer one or three bytes off alignment; UBSan would print a runtime error. On AVX-512,
    every other shape is built without VNNI, so both forms of the multiply-add run."""
    if not offered(matmul, host, path):
        return
    count = 0
    for number, shape_text in enumerate(EDGE_SHAPES):
        no_vnni = ("-mno-avx512vnni",) if path == "avx512" and number % 2 else ()
        shape = matmul.parse_shape(shape_text)
        space = matmul.space(host, shape)
        for layout in ("rowmajor", "packed"):
            config = max(legal(space, vector=path, layout=layout, compiler="gcc"),
                         key=lambda c: (c["tile_m"] * c["tile_n"], c["unroll_k"]))
            work = tmp_path / f"{shape_text}-{layout}".replace(",", "_").replace("=", "")
            work.mkdir()
            function = build_shared(matmul, host, shape, config, work,
                                    ("-fsanitize=undefined", *no_vnni))  # recovers: errors are printed, caught below
            for offset, edge in ((1, "extreme"), (3, "random")):
                io = matmul.deployed_io(matmul.make_io(shape, np.random.default_rng(offset), edge=edge), config)
                a, b, bias, c = (misaligned(buf.data, offset) for buf in io.buffers)
                function(*(x.ctypes.data_as(ctypes.c_void_p) for x in (a, b, bias, c)),
                         *(ctypes.c_int32(v) for _, v in io.params))
                want = matmul.reference(shape, matmul.make_io(shape, np.random.default_rng(offset), edge=edge))[0]
                assert np.array_equal(c, want), f"{shape_text} {config.key()} offset {offset}"
                count += 1
    assert count == 2 * 2 * len(EDGE_SHAPES)
    assert "runtime error" not in capfd.readouterr().err


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.one_case
def test_every_layout_compiles_warning_free_with_every_host_compiler(matmul, host, path, tmp_path):
    if not offered(matmul, host, path):
        return
    assert "-Werror" in COMMON_CFLAGS and "-Wextra" in COMMON_CFLAGS
    shape = matmul.parse_shape("m=7,n=19,k=37")
    space = matmul.space(host, shape)
    for layout in ("rowmajor", "packed"):
        for compiler in host.compilers:
            # The smallest tile at -Os and the largest at -O3 (inlining differs, and with it
            # what -Wall's flow analyses see).
            for opt, pick in (("Os", min), ("O3", max)):
                configs = legal(space, vector=path, layout=layout, compiler=compiler.name, opt=opt)
                config = pick(configs, key=lambda c: (c["tile_m"] * c["tile_n"], c["unroll_k"]))
                result = compile_only(host, matmul.render(host, shape, config), tmp_path)
                assert result.returncode == 0, f"{config.key()}:\n{result.stderr}"


def test_source_refuses_a_build_without_the_vector_unit(matmul, host, tmp_path):
    """Built without -mavx2 (a different machine's flags), the variant stops with a message."""
    path = next((p for p in PATHS if host.has_vector(p)), None)
    if path is None:
        return
    shape = matmul.parse_shape("m=4,n=8,k=16")
    space = matmul.space(host, shape)
    rendered = matmul.render(host, shape, legal(space, vector=path)[0])
    (tmp_path / "kernel.h").write_text(kernel_header(rendered.declaration))
    (tmp_path / "kernel.c").write_text(rendered.source)
    result = subprocess.run(["gcc", "-march=x86-64", *COMMON_CFLAGS, "-c", "kernel.c", "-I", str(tmp_path)],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode != 0 and "compile with -mavx2" in result.stderr


# --- export ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["rowmajor", "packed"])
def test_exported_avx_variant_builds_and_matches_the_reference(matmul, host, layout, tmp_path):
    """The widest path's variant, exported as the best for its shape, built from the export
    folder with the flags it was measured with, on inputs it never saw (packed weights packed
    by the firmware, here numpy's pack_weights)."""
    path = next((p for p in reversed(PATHS) if host.has_vector(p)), None)
    if path is None:
        return
    shape = matmul.parse_shape("m=6,n=21,k=45")
    space = matmul.space(host, shape)
    workload = workload_of(matmul, host, shape)
    config = legal(space, vector=path, layout=layout, compiler="clang")[-1]
    trial = Evaluator(matmul, host, shape, space, workload_inputs(matmul, workload), tmp_path)(config)
    assert trial.outcome is Outcome.OK, trial.error
    db = TuningDatabase(tmp_path / "t.db")
    db.record(workload, trial, "manual", 0)
    result = export_best(db, host, tmp_path / "export", objective="time_ns")
    source = (result.folder / result.entries[0].source).read_text()
    assert f"vector={path}" in source and f"layout={layout}" in source
    io = matmul.make_io(shape, np.random.default_rng(321), edge="extreme")
    runner = runner_for(host)
    (tmp_path / "build").mkdir()
    build = runner.build_export(matmul, shape, matmul.deployed_io(io, config), result.folder, tmp_path / "build")
    _, raw = runner.run(build, matmul.deployed_io(io, config))
    assert np.array_equal(iobuf.unpack_outputs(io, raw)[0], matmul.reference(shape, io)[0])
