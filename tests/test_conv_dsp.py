"""conv2d_s8's Arm DSP-extension path (vector="dsp", conv2d_s8_dsp.c.j2): offered exactly where
the HAL lists the extension, register and stack limits in the space, warning-free builds with
both compilers, and bit-exact runs in QEMU (Cortex-M4) on drawn and edge shapes, on buffers
aligned only as their element type, and through an export of packed weights."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from edgetune.codegen.kernels.conv2d_s8_dsp import MAX_ACCUMULATORS, dsp_stack_bytes
from edgetune.codegen.kernels.convolution import stack_budget
from edgetune.codegen.kernels.dsp import DSP_CFLAGS
from edgetune.hal import load_target
from edgetune.evaluate import Evaluator
from edgetune.session import workload_inputs, workload_of
from edgetune.targets import get_target, iobuf, target_file
from edgetune.targets.runners import runner_for
from edgetune.tuner import Outcome, TuningDatabase
from edgetune.verify import export_and_measure

from kernel_runs import assert_ok, complete, geometry_shapes
from kernel_checks import measure_misaligned
from kernel_checks import compile_only


def dsp_configs(space):
    return [config for config in space if config["vector"] == "dsp"]


# --- the space ----------------------------------------------------------------------------------
def test_dsp_is_offered_exactly_where_the_hal_lists_the_extension(conv, tmp_path):
    shape = conv.parse_shape("h=5,w=5,cin=6,cout=5,kh=3,kw=3,stride=1,pad=1,dilation=1")
    for name in ("cortex-m4", "cortex-m7", "cortex-m55"):
        assert dsp_configs(conv.space(get_target(name), shape)), name
    for name in ("cortex-a53", "host"):
        assert "dsp" not in conv.space(get_target(name), shape).param("vector").values, name
    text = target_file("cortex-m4").read_text(encoding="utf-8")
    assert text.count('extensions = ["dsp"]') == 1
    path = tmp_path / "plain-m4.toml"
    path.write_text(text.replace('extensions = ["dsp"]', "extensions = []"), encoding="utf-8")
    assert "dsp" not in conv.space(load_target(path), shape).param("vector").values


def test_dsp_space_keeps_register_and_stack_limits(conv, m4):
    shape = conv.parse_shape("h=6,w=6,cin=5,cout=7,kh=3,kw=3,stride=1,pad=2,dilation=1")
    configs = dsp_configs(conv.space(m4, shape))
    assert {c["layout"] for c in configs} == {"ohwi", "packed"} and {c["algo"] for c in configs} == {"direct", "im2col"}
    assert all(c["tile_p"] * c["tile_oc"] <= MAX_ACCUMULATORS for c in configs)
    assert {(c["tile_p"], c["tile_oc"]) for c in configs} >= {(4, 2), (2, 4), (1, 3)}
    assert all(c["unroll"] == 1 and c["weight_sums"] == "in_loop" for c in configs)
    # A channel count whose per-call terms alone exceed the stack budget: only packed remains.
    wide = conv.parse_shape(f"h=2,w=2,cin=1,cout={stack_budget(m4) // 4 + 1},kh=1,kw=1,stride=1,pad=0,dilation=1")
    configs = dsp_configs(conv.space(m4, wide))
    assert configs and {c["layout"] for c in configs} == {"packed"}
    assert all(dsp_stack_bytes(wide, c) <= stack_budget(m4) for c in configs)
    assert all(c["fusion"] == "unfused" or c["algo"] == "direct" for c in configs)


@pytest.mark.parametrize("layout", ["ohwi", "packed"])
def test_dsp_variants_use_the_acle_intrinsics_and_their_flags(conv, m4, layout):
    shape = conv.parse_shape("h=4,w=4,cin=5,cout=3,kh=3,kw=3,stride=1,pad=1,dilation=1")
    space = conv.space(m4, shape)
    rendered = conv.render(m4, shape, complete(space, {"vector": "dsp", "layout": layout, "algo": "im2col"}))
    assert "#include <arm_acle.h>" in rendered.source
    assert all(n in rendered.source for n in ("__sxtb16", "__smlad", "__qadd", "_read_s8x4"))
    assert (f"void {rendered.function}_pack(" in rendered.source) is (layout == "packed")
    assert (f"{rendered.function}_terms(" in rendered.source) is (layout == "ohwi")
    assert set(DSP_CFLAGS) <= set(rendered.cflags) and "-munaligned-access" in rendered.source
    plain = conv.render(m4, shape, complete(space, {"vector": "c", "layout": layout}))
    assert not set(DSP_CFLAGS) & set(plain.cflags) and "arm_acle.h" not in plain.source


def test_dsp_packing_is_the_row_order(conv, m4, rng):
    """Packed DSP weights stay in OHWI order (one channel per block) with the folded term."""
    shape = conv.parse_shape("h=4,w=4,cin=3,cout=5,kh=2,kw=3,stride=1,pad=1,dilation=1")
    config = complete(conv.space(m4, shape), {"vector": "dsp", "layout": "packed", "tile_oc": 3})
    io = conv.make_io(shape, rng)
    deployed = conv.deployed_io(io, config)
    weights, bias = io.buffers[1].data, io.buffers[2].data
    assert np.array_equal(deployed.buffers[1].data, weights) and deployed.buffers[1].weight
    in_zero = dict(io.params)["in_zero"]
    assert np.array_equal(deployed.buffers[2].data,
                          bias - in_zero * weights.reshape(5, -1).astype(np.int64).sum(axis=1))


# --- compiled and run -----------------------------------------------------------------------------
@pytest.mark.qemu
def test_dsp_variants_compile_warning_free_on_both_compilers(conv, tmp_path):
    """Every template branch (algo x layout x fusion x pixel/channel tile) at least once, each
    (compiler, opt) pair of the Cortex-M7 at least once, with -Wall -Wextra -Werror."""
    m7 = get_target("cortex-m7")
    shape = conv.parse_shape("h=4,w=5,cin=6,cout=5,kh=3,kw=2,stride=2,pad=2,dilation=1")
    seen_builds, seen_forms = set(), set()
    for config in dsp_configs(conv.space(m7, shape)):
        build = (config["compiler"], config["opt"])
        form = (config["algo"], config["layout"], config["fusion"], config["tile_p"], config["tile_oc"])
        if build in seen_builds and form in seen_forms:
            continue
        seen_builds.add(build)
        seen_forms.add(form)
        result = compile_only(m7, conv.render(m7, shape, config), tmp_path)
        assert result.returncode == 0, f"{config.key()}:\n{result.stderr}"
    assert len(seen_builds) == 2 * 3 and len(seen_forms) > 20


EDGE_CASES = [  # shape, the variant, input edge
    ("h=5,w=4,cin=1,cout=1,kh=3,kw=3,stride=1,pad=3,dilation=1", {"algo": "direct", "layout": "ohwi"}, "extreme"),
    ("h=6,w=7,cin=7,cout=5,kh=3,kw=3,stride=2,pad=2,dilation=2",
     {"algo": "im2col", "layout": "packed", "tile_p": 2, "tile_oc": 4, "im2col_pixels": 4}, "random"),
    ("h=3,w=3,cin=9,cout=3,kh=1,kw=1,stride=1,pad=0,dilation=1",
     {"algo": "im2col", "layout": "ohwi", "tile_p": 4, "tile_oc": 2, "im2col_pixels": 8, "fusion": "unfused"}, "extreme"),
    ("h=4,w=6,cin=4,cout=7,kh=2,kw=3,stride=3,pad=1,dilation=1",
     {"algo": "direct", "layout": "packed", "tile_oc": 3, "fusion": "unfused", "compiler": "clang"}, "random"),
    ("h=1,w=1,cin=3,cout=2,kh=3,kw=3,stride=1,pad=1,dilation=1",
     {"algo": "im2col", "layout": "packed", "tile_p": 1, "tile_oc": 2, "compiler": "clang", "opt": "Os"}, "extreme"),
]


@pytest.mark.qemu
@pytest.mark.parametrize("shape_text, values, edge", EDGE_CASES)
def test_dsp_edge_shapes_are_bit_exact(conv, m4, tmp_path, shape_text, values, edge):
    """Padding > 1, stride and dilation, 1-sized and odd channel counts, K = 9, 21, 9, 24, 27
    (not all multiples of 4), a 1x1 input whose taps are mostly padding."""
    shape = conv.parse_shape(shape_text)
    space = conv.space(m4, shape)
    config = complete(space, {**values, "vector": "dsp"})
    io = conv.make_io(shape, np.random.default_rng(3), edge=edge)
    assert_ok(Evaluator(conv, m4, shape, space, io, tmp_path)(config))


shapes = geometry_shapes({"cin": st.sampled_from([1, 2, 3, 5, 8, 13]), "cout": st.integers(1, 7)}, size=6)


@pytest.mark.qemu
def test_drawn_dsp_variants_are_bit_exact_on_cortex_m4(conv, m4, tmp_path_factory):
    work = tmp_path_factory.mktemp("conv-dsp")

    @settings(max_examples=20, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])  # each example builds and runs: no shrinking
    @given(shape=shapes, data=st.data())
    def run(shape, data):
        space = conv.space(m4, shape)
        indices = [int(i) for i in space.legal_indices() if space.config_at(int(i))["vector"] == "dsp"]
        config = space.config_at(data.draw(st.sampled_from(indices), "config index"))
        io = conv.make_io(shape, np.random.default_rng(data.draw(st.integers(0, 3), "seed")),
                          edge=data.draw(st.sampled_from(["random", "extreme"]), "edge"))
        trial = Evaluator(conv, m4, shape, space, io, work)(config)
        assert trial.outcome is Outcome.OK, f"{shape} {config.key()}: {trial.error}"

    run()


@pytest.mark.qemu
@pytest.mark.parametrize("values", [
    {"algo": "im2col", "layout": "ohwi", "tile_p": 2, "tile_oc": 2, "im2col_pixels": 4, "compiler": "clang", "opt": "O3"},
    {"algo": "direct", "layout": "packed", "tile_oc": 3, "compiler": "gcc", "opt": "O2"},
])
def test_dsp_variants_on_buffers_aligned_only_as_their_type(conv, m4, tmp_path, values):
    """int8 tensors at odd addresses: every word load of input, weights and im2col rows is unaligned
    somewhere (cin = 7, K = 63)."""
    shape = conv.parse_shape("h=4,w=5,cin=7,cout=5,kh=3,kw=3,stride=1,pad=1,dilation=1")
    space = conv.space(m4, shape)
    config = complete(space, {**values, "vector": "dsp"})
    io = conv.make_io(shape, np.random.default_rng(5))
    assert_ok(measure_misaligned(conv, m4, shape, config, io, tmp_path))


@pytest.mark.qemu
def test_exported_packed_dsp_conv_builds_with_its_flags_and_matches_numpy(conv, m4, tmp_path):
    shape = conv.parse_shape("h=5,w=6,cin=10,cout=6,kh=3,kw=3,stride=1,pad=2,dilation=1")
    space = conv.space(m4, shape)
    workload = workload_of(conv, m4, shape)
    config = complete(space, {"vector": "dsp", "layout": "packed", "algo": "im2col", "tile_p": 2, "tile_oc": 3,
                              "compiler": "clang", "opt": "O2"})
    db = TuningDatabase(tmp_path / "t.db")
    trial = Evaluator(conv, m4, shape, space, workload_inputs(conv, workload), tmp_path)(config)
    assert_ok(trial)
    db.record(workload, trial, "manual", 0)
    result = export_and_measure(db, m4, tmp_path / "export")
    assert "-munaligned-access" in result.folder.joinpath("manifest.json").read_text()
    assert f"void {result.entries[0].function}_pack(" in result.header.read_text()
    io = conv.make_io(shape, np.random.default_rng(17), edge="extreme")
    runner = runner_for(m4)
    (tmp_path / "build").mkdir()
    build = runner.build_export(conv, shape, conv.deployed_io(io, config), result.folder, tmp_path / "build")
    _, raw = runner.run(build, conv.deployed_io(io, config))
    assert np.array_equal(iobuf.unpack_outputs(io, raw)[0], conv.reference(shape, io)[0])


@pytest.mark.qemu
def test_small_reductions_build_with_clang_on_the_m55_and_match_numpy(conv, tmp_path):
    """K = 2: the tile loops become straight-line code, which Clang 14's Helium vectoriser turned
    into scatters and then crashed on ("MVE gather/scatter lowering") until the template kept
    the DSP path's loops scalar."""
    m55 = get_target("cortex-m55")
    shape = conv.parse_shape("h=6,w=7,cin=1,cout=4,kh=1,kw=2,stride=1,pad=0,dilation=1")
    space = conv.space(m55, shape)
    config = complete(space, {"vector": "dsp", "algo": "im2col", "layout": "packed", "tile_p": 1, "tile_oc": 4,
                              "im2col_pixels": 64, "fusion": "unfused", "compiler": "clang", "opt": "O2"})
    io = conv.make_io(shape, np.random.default_rng(0))
    assert_ok(Evaluator(conv, m55, shape, space, io, tmp_path)(config))
