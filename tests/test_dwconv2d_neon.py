"""dwconv2d_s8's NEON path on the Cortex-A53/A72: offered only where the HAL describes the
unit, tiles within its registers, warning-free with every compiler of the A-targets,
bit-exact with numpy on drawn shapes and configurations in QEMU (edge shapes and extreme
quantisation included), and free of out-of-bounds accesses and undefined behaviour on edge
shapes (AddressSanitizer and UBSan in qemu-aarch64)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st

from edgetune.codegen.kernels.dwconv2d_s8_neon import LANES, tile_registers
from edgetune.hal import load_target
from edgetune.evaluate import measure_source
from edgetune.targets import target_file
from edgetune.tuner import Outcome
from kernel_checks import run_sanitized
from kernel_checks import compile_only
from kernel_runs import check_drawn_variants, geometry_shapes

shapes = geometry_shapes({"c": st.integers(1, 27), "mult": st.sampled_from([1, 1, 2, 3])}, size=7)


def neon_configs(space, **values):
    return [c for c in space if c["vector"] == "neon" and all(c[k] == v for k, v in values.items())]


def test_neon_is_offered_only_where_the_hal_has_it(dw, a53, m55, host):
    shape = dw.parse_shape("h=8,w=8,c=3,kh=3,kw=3,stride=1,pad=1,dilation=1")
    assert "neon" in dw.space(a53, shape).param("vector").values
    for other in (m55, host):
        assert "neon" not in dw.space(other, shape).param("vector").values
    bare = load_target(target_file("cortex-a53"), overrides={"vector_units": []})
    assert list(dw.space(bare, shape).param("vector").values) == ["c", "naive"]  # the plain loop: everywhere


def test_neon_tiles_are_whole_steps_within_the_registers(dw, a72):
    narrow = neon_configs(dw.space(a72, dw.parse_shape("h=8,w=8,c=3,kh=3,kw=3,stride=1,pad=1,dilation=1")))
    # Three channels still take one step of eight; narrower tiles are never offered.
    assert narrow and {c["tile_c"] for c in narrow} == {LANES}
    assert {c["layout"] for c in narrow} == {"hwc", "packed"}
    wide = neon_configs(dw.space(a72, dw.parse_shape("h=8,w=8,c=64,kh=3,kw=3,stride=1,pad=1,dilation=1")))
    assert {c["tile_c"] for c in wide} == {8, 16} and {c["tile_p"] for c in wide} == {1, 2, 4}
    assert all(tile_registers(c["tile_p"], c["tile_c"]) <= 32 for c in wide)
    # A unit with fewer registers (same file, overridden) prunes the largest tiles.
    unit = dict(name="neon", register_bits=128, registers=16, lanes={"int8": 16, "int16": 8, "int32": 4, "float32": 4},
                int8_macs_per_cycle=16, source="test: a unit of 16 registers")
    small = load_target(target_file("cortex-a72"), overrides={"vector_units": [unit]})
    pruned = neon_configs(dw.space(small, dw.parse_shape("h=8,w=8,c=64,kh=3,kw=3,stride=1,pad=1,dilation=1")))
    assert pruned and all(tile_registers(c["tile_p"], c["tile_c"]) <= 16 for c in pruned)
    assert (16, 4) not in {(c["tile_c"], c["tile_p"]) for c in pruned}


def test_neon_compiles_warning_free_with_every_compiler(dw, a53, a72, tmp_path):
    for target, shape_text in ((a53, "h=1,w=1,c=1,kh=1,kw=1,stride=1,pad=0,dilation=1"),
                               (a72, "h=6,w=5,c=19,kh=3,kw=3,stride=1,pad=2,dilation=1")):
        shape = dw.parse_shape(shape_text)
        space = dw.space(target, shape)
        for compiler in target.compilers:
            for layout in ("hwc", "packed"):
                for taps, opt in (("loop", "Os"), ("unrolled3x3", "O3")):
                    configs = neon_configs(space, layout=layout, taps=taps, opt=opt, compiler=compiler.name)
                    if taps == "unrolled3x3" and shape["kh"] != 3:
                        assert not configs
                        continue
                    config = max(configs, key=lambda c: c["tile_p"] * c["tile_c"])
                    result = compile_only(target, dw.render(target, shape, config), tmp_path)
                    assert result.returncode == 0, f"{target.name} {config.key()}:\n{result.stderr}"


@pytest.mark.qemu
def test_drawn_neon_variants_are_bit_exact_in_qemu(dw, a53, a72, tmp_path_factory):
    work = tmp_path_factory.mktemp("dw-neon")
    check_drawn_variants(dw, (a53, a72), shapes, "neon", work)


@pytest.mark.qemu
@pytest.mark.parametrize("shape_text", [
    "h=1,w=1,c=1,kh=1,kw=1,stride=1,pad=0,dilation=1",
    # 3x3 dilated, odd channels, stride 2, pad > 1: interior and border tiles (16 s: slow tier)
    pytest.param("h=9,w=8,c=21,kh=3,kw=3,stride=2,pad=2,dilation=2", marks=pytest.mark.slow),
    pytest.param("h=5,w=6,c=17,kh=2,kw=3,stride=3,pad=3,dilation=2",  # padding wider than the kernel's reach
                 marks=pytest.mark.slow),                                # (6 s)
    "h=8,w=7,c=9,kh=3,kw=3,stride_h=2,stride_w=1,dilation_h=1,dilation_w=2,"
    "pad_top=0,pad_bottom=1,pad_left=2,pad_right=0",       # per-axis steps, one-sided padding
    # multiplier 3: the last group ends the row (32 s: slow tier)
    pytest.param("h=5,w=4,c=7,mult=3,kh=3,kw=3,stride=2,pad=same", marks=pytest.mark.slow),
    "h=4,w=5,c=3,mult=8,kh=2,kw=2,stride=1,pad_top=1,pad_bottom=0,pad_left=0,pad_right=1",  # one channel a group
])
@pytest.mark.one_case(2)
def test_edge_shapes_are_exact_under_address_and_undefined_behaviour_sanitizers(dw, a72, tmp_path, shape_text):
    """The largest tile (the most remainder code) in both layouts, on extreme inputs, the 3x3
    special case (where it applies) with the weights as given and the tap loop with packed
    weights (reading the row of in_zero); each buffer in an allocation of exactly its size."""
    shape = dw.parse_shape(shape_text)
    space = dw.space(a72, shape)
    unrolled = "unrolled3x3" if shape["kh"] == shape["kw"] == 3 else "loop"
    for layout, taps in (("hwc", unrolled), ("packed", "loop")):
        config = max(neon_configs(space, layout=layout, taps=taps, compiler="gcc", opt="O2"),
                     key=lambda c: c["tile_p"] * c["tile_c"])
        work = tmp_path / layout
        work.mkdir()
        io = dw.make_io(shape, np.random.default_rng(5), edge="extreme")
        got = run_sanitized(dw, a72, shape, config, io, work)
        want = dw.reference(shape, io)
        assert dw.compare(shape, io, "output", got[0], want[0]) is None, f"{shape_text} {config.key()}"


@pytest.mark.qemu
def test_plain_loop_the_benchmark_compares_against_is_exact(dw, a53, tmp_path):
    shape = dw.parse_shape("h=5,w=6,c=17,kh=2,kw=3,stride=3,pad=3,dilation=2")
    io = dw.make_io(shape, np.random.default_rng(3), edge="extreme")
    result = measure_source(dw, a53, shape, dw.render_naive(a53, shape, "gcc", ("-O2",)), io, tmp_path)
    assert result.outcome is Outcome.OK, result.error
