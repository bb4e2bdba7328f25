"""conv2d_s8's AVX2 and AVX-512 paths on the host: offered only where the HAL detects the unit,
register limits as constraints, bit-exact with numpy on drawn shapes and configurations (both
weight layouts, direct and im2col, fused and unfused, extreme quantisation), edge shapes on
unaligned buffers without undefined behaviour (UBSan), warning-free with every host compiler,
and exported variants that build and pass from the export folder."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import strategies as st

from edgetune.export import export_best
from edgetune.evaluate import Evaluator
from edgetune.session import workload_inputs, workload_of
from edgetune.targets import iobuf
from edgetune.targets.runners import runner_for
from edgetune.tuner import Outcome, TuningDatabase
from kernel_runs import assert_ok, check_drawn_variants, geometry_shapes, run_config
from kernel_checks import build_shared, misaligned
from kernel_checks import compile_only

PATHS = ("avx2", "avx512")

shapes = geometry_shapes({"cin": st.integers(1, 40), "cout": st.integers(1, 11)}, size=7)

EDGE_SHAPES = (
    "h=1,w=1,cin=1,cout=1,kh=1,kw=1,stride=1,pad=0,dilation=1",   # every dimension 1
    "h=7,w=5,cin=3,cout=5,kh=3,kw=3,stride=2,pad=2,dilation=1",   # odd channels, stride 2, pad > 1
    "h=9,w=8,cin=33,cout=7,kh=3,kw=3,stride=1,pad=2,dilation=2",  # dilation 2, cin past a whole step
    "h=2,w=3,cin=5,cout=3,kh=1,kw=1,stride=1,pad=3,dilation=1",   # pixels that see only padding
)


def offered(conv, host, path) -> bool:
    """Whether this machine has the unit; if not, the space must not offer the path."""
    if host.has_vector(path):
        return True
    assert path not in conv.space(host, conv.parse_shape(conv.example_shape())).param("vector").values
    return False


def legal(space, **values):
    return [c for c in space if all(c[k] == v for k, v in values.items())]


def largest(configs):
    return max(configs, key=lambda c: (c["tile_p"] * c["tile_oc"], c["im2col_pixels"]))


# --- the space ------------------------------------------------------------------------------------
def test_host_offers_exactly_the_detected_units_and_arm_targets_none(conv, host, m55):
    shape = conv.parse_shape(conv.example_shape())
    vectors = conv.space(host, shape).param("vector").values
    assert [v for v in vectors if v in PATHS] == [p for p in PATHS if host.has_vector(p)]
    assert not set(PATHS) & set(conv.space(m55, shape).param("vector").values)


@pytest.mark.parametrize("path", PATHS)
def test_register_limits_are_constraints(conv, host, path):
    if not offered(conv, host, path):
        return
    registers = host.vector_unit(path).registers
    space = conv.space(host, conv.parse_shape(conv.example_shape()))
    for layout in ("ohwi", "packed"):
        configs = legal(space, vector=path, layout=layout)
        assert {c["algo"] for c in configs} == {"direct", "im2col"}
        assert all(c["tile_p"] * c["tile_oc"] + c["tile_p"] + 1 + (layout == "ohwi") <= registers for c in configs)
        assert all(c["unroll"] == 1 and c["weight_sums"] == "in_loop" for c in configs)
    im2col = legal(space, vector=path, algo="im2col")
    if registers < 22:  # 4 pixels x 4 channels does not fit AVX2's 16 registers
        assert max(c["tile_p"] * c["tile_oc"] for c in im2col) < 16
        too_big = space.make({**im2col[0].as_dict(), "tile_p": 4, "tile_oc": 4, "im2col_pixels": 4})
        assert "vector registers" in space.violation(too_big)
    else:
        assert max(c["tile_p"] * c["tile_oc"] for c in im2col) == 16


# --- bit-exact on drawn shapes and configurations ---------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.one_case
def test_drawn_variants_are_bit_exact(conv, host, path, tmp_path_factory):
    if not offered(conv, host, path):
        return
    work = tmp_path_factory.mktemp(f"conv-{path}")
    check_drawn_variants(conv, (host,), shapes, path, work, examples=8)


@pytest.mark.parametrize("shape_text", EDGE_SHAPES)
@pytest.mark.one_case(2)
def test_edge_shapes_every_family_with_the_largest_tiles(conv, host, tmp_path, shape_text):
    """Per path, layout and algorithm the largest tile, fused or unfused, gcc or clang."""
    shape = conv.parse_shape(shape_text)
    space = conv.space(host, shape)
    count = 0
    for path in (p for p in PATHS if offered(conv, host, p)):
        for number, (layout, algo) in enumerate((l, a) for l in ("ohwi", "packed") for a in ("direct", "im2col")):
            compiler = host.compilers[number % len(host.compilers)].name
            fusion = ("fused", "unfused")[number // 2 % 2]
            config = largest(legal(space, vector=path, layout=layout, algo=algo, compiler=compiler, fusion=fusion))
            assert_ok(run_config(conv, host, shape, config.as_dict(), tmp_path,
                                 edge=("extreme" if number % 2 else "random"), seed=number))
            count += 1
    assert count == 4 * sum(host.has_vector(p) for p in PATHS)


# --- unaligned buffers, no undefined behaviour ------------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
def test_edge_shape_on_unaligned_buffers_without_undefined_behaviour(conv, host, path, tmp_path, capfd):
    """The largest tile of each layout and algorithm, built with GCC's UBSan, called through
    ctypes with every buffer one or three bytes off alignment; UBSan would print a runtime
    error. On AVX-512 the im2col builds go without VNNI, so both multiply-add forms run."""
    if not offered(conv, host, path):
        return
    shape = conv.parse_shape(EDGE_SHAPES[2])
    space = conv.space(host, shape)
    count = 0
    for layout in ("ohwi", "packed"):
        for algo in ("direct", "im2col"):
            no_vnni = ("-mno-avx512vnni",) if path == "avx512" and algo == "im2col" else ()
            config = largest(legal(space, vector=path, layout=layout, algo=algo, compiler="gcc"))
            work = tmp_path / f"{layout}-{algo}"
            work.mkdir()
            function = build_shared(conv, host, shape, config, work, ("-fsanitize=undefined", *no_vnni))
            for offset, edge in ((1, "extreme"), (3, "random")):
                io = conv.make_io(shape, np.random.default_rng(offset), edge=edge)
                buffers = [misaligned(buf.data, offset) for buf in conv.deployed_io(io, config).buffers]
                function(*(b.ctypes.data_as(ctypes.c_void_p) for b in buffers), *(ctypes.c_int32(v) for _, v in io.params))
                assert np.array_equal(buffers[-1], conv.reference(shape, io)[0]), f"{config.key()} offset {offset}"
                count += 1
    assert count == 8
    assert "runtime error" not in capfd.readouterr().err


# --- compilers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.one_case(1)
def test_every_family_compiles_warning_free_with_every_host_compiler(conv, host, path, tmp_path):
    if not offered(conv, host, path):
        return
    shape = conv.parse_shape("h=6,w=5,cin=19,cout=7,kh=3,kw=3,stride=1,pad=1,dilation=1")
    space = conv.space(host, shape)
    for layout in ("ohwi", "packed"):
        for algo in ("direct", "im2col"):
            for compiler in host.compilers:
                # The smallest tile at -Os and the largest at -O3 (inlining differs, and with it
                # what -Wall's flow analyses see).
                for opt, pick in (("Os", min), ("O3", max)):
                    configs = legal(space, vector=path, layout=layout, algo=algo, compiler=compiler.name, opt=opt)
                    config = pick(configs, key=lambda c: (c["tile_p"] * c["tile_oc"], c["fusion"]))
                    result = compile_only(host, conv.render(host, shape, config), tmp_path)
                    assert result.returncode == 0, f"{config.key()}:\n{result.stderr}"


# --- export ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["ohwi", "packed"])
def test_exported_avx_variant_builds_and_matches_the_reference(conv, host, layout, tmp_path):
    """The widest path's variant, exported as the best for its shape, built from the export
    folder with the flags it was measured with, on inputs it never saw."""
    path = next((p for p in reversed(PATHS) if host.has_vector(p)), None)
    if path is None:
        return
    shape = conv.parse_shape("h=6,w=7,cin=21,cout=10,kh=3,kw=3,stride=1,pad=2,dilation=1")
    space = conv.space(host, shape)
    workload = workload_of(conv, host, shape)
    config = largest(legal(space, vector=path, layout=layout, algo="im2col", compiler="clang"))
    trial = Evaluator(conv, host, shape, space, workload_inputs(conv, workload), tmp_path)(config)
    assert trial.outcome is Outcome.OK, trial.error
    db = TuningDatabase(tmp_path / "t.db")
    db.record(workload, trial, "manual", 0)
    result = export_best(db, host, tmp_path / "export", objective="time_ns")
    source = (result.folder / result.entries[0].source).read_text()
    assert f"vector={path}" in source and f"layout={layout}" in source
    io = conv.make_io(shape, np.random.default_rng(321), edge="extreme")
    (tmp_path / "build").mkdir()
    runner = runner_for(host)
    build = runner.build_export(conv, shape, conv.deployed_io(io, config), result.folder, tmp_path / "build")
    _, raw = runner.run(build, conv.deployed_io(io, config))
    assert np.array_equal(iobuf.unpack_outputs(io, raw)[0], conv.reference(shape, io)[0])
