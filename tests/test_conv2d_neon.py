"""conv2d_s8's NEON path on the Cortex-A53/A72 (packed weights, direct and im2col, fused and
unfused): offered only where the HAL describes the unit, tiles within its registers,
warning-free with every compiler of the A-targets, bit-exact with numpy on drawn shapes and
configurations in QEMU, and free of out-of-bounds accesses and undefined behaviour on edge
shapes (AddressSanitizer and UBSan in qemu-aarch64). Exported NEON variants of both
convolutions build and pass their reference check on unseen inputs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st

from edgetune.codegen import get_kernel
from edgetune.codegen.kernels.conv2d_s8_neon import tile_registers
from edgetune.export import export_best
from edgetune.hal import load_target
from edgetune.evaluate import Evaluator
from edgetune.session import workload_inputs, workload_of
from edgetune.targets import iobuf, target_file
from edgetune.targets.runners import runner_for
from edgetune.tuner import Outcome, TuningDatabase
from kernel_checks import run_sanitized
from kernel_checks import compile_only
from kernel_runs import check_drawn_variants, geometry_shapes

shapes = geometry_shapes({"cin": st.integers(1, 35), "cout": st.integers(1, 11)}, size=6)


def neon_configs(space, **values):
    return [c for c in space if c["vector"] == "neon" and all(c[k] == v for k, v in values.items())]


def test_neon_is_offered_only_where_the_hal_has_it(conv, a53, m55, host):
    shape = conv.parse_shape("h=6,w=6,cin=8,cout=4,kh=3,kw=3,stride=1,pad=1,dilation=1")
    assert "neon" in conv.space(a53, shape).param("vector").values
    for other in (m55, host):
        assert "neon" not in conv.space(other, shape).param("vector").values
    bare = load_target(target_file("cortex-a53"), overrides={"vector_units": []})
    assert list(conv.space(bare, shape).param("vector").values) == ["c", "naive"]  # the plain loop: everywhere


def test_neon_runs_on_packed_weights_with_tiles_in_the_registers(conv, a72):
    shape = conv.parse_shape("h=8,w=8,cin=16,cout=16,kh=3,kw=3,stride=1,pad=1,dilation=1")
    neon = neon_configs(conv.space(a72, shape))
    assert neon and {c["layout"] for c in neon} == {"packed"}
    assert {c["algo"] for c in neon} == {"direct", "im2col"} and {c["fusion"] for c in neon} == {"fused", "unfused"}
    assert (4, 4) in {(c["tile_p"], c["tile_oc"]) for c in neon}
    assert all(tile_registers(c["tile_p"], c["tile_oc"]) <= 32 and c["unroll"] == 1 for c in neon)
    # A unit with fewer registers (same file, overridden) prunes the largest tiles.
    unit = dict(name="neon", register_bits=128, registers=16, lanes={"int8": 16, "int16": 8, "int32": 4, "float32": 4},
                int8_macs_per_cycle=16, source="test: a unit of 16 registers")
    small = load_target(target_file("cortex-a72"), overrides={"vector_units": [unit]})
    pruned = neon_configs(conv.space(small, shape))
    assert pruned and all(tile_registers(c["tile_p"], c["tile_oc"]) <= 16 for c in pruned)
    assert (4, 4) not in {(c["tile_p"], c["tile_oc"]) for c in pruned}


def test_neon_compiles_warning_free_with_every_compiler(conv, a53, a72, tmp_path):
    for turn, (target, shape_text) in enumerate(((a53, "h=1,w=1,cin=1,cout=1,kh=1,kw=1,stride=1,pad=0,dilation=1"),
                                                 (a72, "h=5,w=6,cin=21,cout=7,kh=3,kw=3,stride=2,pad=2,dilation=1"))):
        shape = conv.parse_shape(shape_text)
        space = conv.space(target, shape)
        # Each compiler meets every algorithm and fusion, over the two targets.
        for index, compiler in enumerate(target.compilers):
            for algo, fusion, opt in ((("direct", "fused", "O3"), ("im2col", "unfused", "Os")),
                                      (("direct", "unfused", "Os"), ("im2col", "fused", "O3")))[(index + turn) % 2]:
                config = max(neon_configs(space, algo=algo, fusion=fusion, opt=opt, compiler=compiler.name),
                             key=lambda c: (c["tile_p"] * c["tile_oc"], c["im2col_pixels"]))
                result = compile_only(target, conv.render(target, shape, config), tmp_path)
                assert result.returncode == 0, f"{target.name} {config.key()}:\n{result.stderr}"


@pytest.mark.qemu
def test_drawn_neon_variants_are_bit_exact_in_qemu(conv, a53, a72, tmp_path_factory):
    work = tmp_path_factory.mktemp("conv-neon")
    check_drawn_variants(conv, (a53, a72), shapes, "neon", work)


@pytest.mark.qemu
@pytest.mark.parametrize("shape_text", [
    "h=1,w=1,cin=1,cout=1,kh=1,kw=1,stride=1,pad=0,dilation=1",
    "h=7,w=6,cin=19,cout=13,kh=3,kw=3,stride=2,pad=2,dilation=1",  # cin and K tails, pad > 1, stride
    pytest.param("h=5,w=5,cin=3,cout=5,kh=2,kw=3,stride=1,pad=3,dilation=2",  # padding wider than the kernel's
                 marks=pytest.mark.slow),                                      # reach (5 s)
    pytest.param("h=9,w=6,cin=5,cout=6,kh=3,kw=2,stride_h=2,stride_w=1,dilation_h=1,dilation_w=2,"
                 "pad_top=0,pad_bottom=2,pad_left=1,pad_right=0",  # per-axis steps, one-sided padding (13 s)
                 marks=pytest.mark.slow),
    pytest.param("h=12,w=12,cin=3,cout=4,kh=3,kw=3,stride=2,pad=same",  # TFLite SAME: 0 top/left, 1 bottom/right
                 marks=pytest.mark.slow),                                # (5 s)
])
@pytest.mark.one_case(1)
def test_edge_shapes_are_exact_under_address_and_undefined_behaviour_sanitizers(conv, a72, tmp_path, shape_text):
    """The largest tile of each algorithm (the most remainder code), on extreme inputs; each
    buffer in an allocation of exactly its size."""
    shape = conv.parse_shape(shape_text)
    space = conv.space(a72, shape)
    for algo, fusion in (("direct", "fused"), ("im2col", "unfused")):
        config = max(neon_configs(space, algo=algo, fusion=fusion, compiler="gcc", opt="O2"),
                     key=lambda c: (c["tile_p"] * c["tile_oc"], -c["im2col_pixels"]))
        work = tmp_path / algo
        work.mkdir()
        io = conv.make_io(shape, np.random.default_rng(5), edge="extreme")
        got = run_sanitized(conv, a72, shape, config, io, work)
        want = conv.reference(shape, io)
        assert conv.compare(shape, io, "output", got[0], want[0]) is None, f"{shape_text} {config.key()}"


@pytest.mark.qemu
@pytest.mark.parametrize("kernel_name, shape_text, values", [
    ("conv2d_s8", "h=6,w=5,cin=19,cout=7,kh=3,kw=3,stride=1,pad=2,dilation=1",
     {"vector": "neon", "algo": "im2col", "tile_p": 2, "tile_oc": 3, "fusion": "fused"}),
    ("dwconv2d_s8", "h=6,w=5,c=19,kh=3,kw=3,stride=1,pad=2,dilation=1",
     {"vector": "neon", "layout": "packed", "tile_c": 16, "tile_p": 2, "taps": "unrolled3x3"}),
])
def test_exported_neon_convolution_builds_and_matches_the_reference(kernel_name, shape_text, values, a53, tmp_path):
    kernel = get_kernel(kernel_name)
    shape = kernel.parse_shape(shape_text)
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
    deployed = kernel.deployed_io(io, config)  # the packed weights and terms the variant takes
    assert deployed.buffers[1].weight  # packed weights stay weights (placement)
    (tmp_path / "build").mkdir()
    runner = runner_for(a53)
    build = runner.build_export(kernel, shape, deployed, result.folder, tmp_path / "build")
    _, raw = runner.run(build, deployed)
    got = iobuf.unpack_outputs(io, raw)[0]
    assert kernel.compare(shape, io, "output", got, kernel.reference(shape, io)[0]) is None
