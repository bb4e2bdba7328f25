"""Every vector path of every kernel, from the kernels' own path tables: one suite instead of a
test file per ISA. For each (kernel, path, target) it checks that the path is offered exactly
where the target's HAL description has its unit or extension, that its flags pass the build's
allow-list, that its variants compile warning-free with every compiler of the target, and
that drawn variants (shapes, configurations, seeds, random or saturating inputs) match the
numpy reference when built and run on the target (QEMU for the emulated cores). A new path
(a table entry and its template blocks) is covered here without a new test file; the
per-ISA files keep their path-specific checks (register formulas, sanitizers, exports)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

from edgetune.codegen import KERNELS
from edgetune.codegen.kernels import path_cflags
from edgetune.codegen.kernels.base import COMMON_CFLAGS, OPT_LEVELS
from edgetune.codegen.render import TEMPLATES_DIR
from edgetune.hal import load_target
from edgetune.targets import get_target, target_file

from kernel_checks import compile_only
from kernel_runs import assert_ok, check_drawn_variants

TARGETS = ("cortex-m55", "cortex-m4", "cortex-m7", "cortex-a53", "cortex-a72", "cortex-a72-linux", "host")
# Small shapes with remainders in every tiled dimension, one per line of each kernel.
SHAPES = {
    "matmul_s8": ("m=1,n=1,k=1", "m=5,n=13,k=37", "m=9,n=7,k=17", "m=4,n=32,k=64"),
    "matmul_f32": ("m=1,n=1,k=1", "m=5,n=13,k=37", "m=9,n=20,k=33"),
    # Convolutions: TFLite's geometry on every path, asymmetric padding (pad_top != pad_bottom,
    # pad_left != pad_right), strides and dilations that differ per axis, a stride-2 SAME.
    "conv2d_s8": ("h=5,w=4,cin=3,cout=5,kh=3,kw=3,stride=1,pad=1,dilation=1",
                  "h=7,w=6,cin=9,cout=3,kh=3,kw=2,stride_h=2,stride_w=1,pad_top=0,pad_bottom=1,pad_left=1,pad_right=0",
                  "h=6,w=7,cin=17,cout=6,kh=2,kw=3,stride_h=1,stride_w=2,dilation_h=2,dilation_w=1,"
                  "pad_top=1,pad_bottom=0,pad_left=0,pad_right=2",
                  "h=9,w=8,cin=3,cout=4,kh=3,kw=3,stride=2,pad=same",
                  "h=8,w=7,cin=5,cout=3,kh=3,kw=2,stride_h=1,stride_w=2,dilation_h=2,pad=valid"),  # no padding
    "dwconv2d_s8": ("h=5,w=4,c=9,kh=3,kw=3,stride=1,pad=1,dilation=1",
                    "h=7,w=6,c=17,kh=3,kw=3,stride_h=2,stride_w=1,pad_top=0,pad_bottom=2,pad_left=1,pad_right=0",
                    "h=6,w=7,c=20,kh=2,kw=3,stride_h=1,stride_w=2,dilation_h=2,dilation_w=1,"
                    "pad_top=1,pad_bottom=0,pad_left=0,pad_right=2",
                    "h=9,w=8,c=12,kh=3,kw=3,stride=2,pad=same",
                    "h=8,w=7,c=11,kh=3,kw=3,stride_h=1,stride_w=2,dilation_w=2,pad=valid"),  # no padding
    # The 16x8 convolutions: both bias types (the two requantisations), remainders of every tile.
    "conv2d_s16": ("h=5,w=4,cin=3,cout=5,kh=3,kw=3,stride=1,pad=1,dilation=1,bias_bits=64",
                   "h=7,w=6,cin=19,cout=7,kh=3,kw=2,stride_h=2,stride_w=1,pad_top=0,pad_bottom=1,pad_left=1,"
                   "pad_right=0,bias_bits=32",
                   "h=6,w=7,cin=9,cout=6,kh=2,kw=3,stride_h=1,stride_w=2,dilation_h=2,dilation_w=1,"
                   "pad_top=1,pad_bottom=0,pad_left=0,pad_right=2,bias_bits=64",
                   "h=1,w=3,cin=17,cout=5,kh=1,kw=1,pad=valid,bias_bits=64"),  # a dense layer of 3 rows
    "dwconv2d_s16": ("h=5,w=4,c=3,mult=2,kh=3,kw=3,stride=1,pad=1,dilation=1,bias_bits=64",
                     "h=7,w=6,c=17,kh=3,kw=3,stride_h=2,stride_w=1,pad_top=0,pad_bottom=2,pad_left=1,pad_right=0,"
                     "bias_bits=64",
                     "h=6,w=7,c=11,kh=2,kw=3,stride_h=1,stride_w=2,dilation_h=2,dilation_w=1,"
                     "pad_top=1,pad_bottom=0,pad_left=0,pad_right=2,bias_bits=32",
                     "h=9,w=8,c=12,kh=3,kw=3,stride=2,pad=same,bias_bits=64"),
    # fir_q15: both narrowing conventions (the last shape truncates, as CMSIS-DSP's arm_fir_q15).
    "fir_q15": ("taps=1,block=1", "taps=9,block=37", "taps=16,block=13", "taps=9,block=21,rounding=truncate"),
    "fir_f32": ("taps=1,block=1", "taps=9,block=37", "taps=16,block=13"),
    # Transposed convolution: strides per axis, offsets, input channels short of and beyond 16.
    "tconv2d_s8": ("h=1,w=1,cin=1,cout=1,kh=1,kw=1,stride_h=1,stride_w=1,pad_top=0,pad_left=0,oh=1,ow=1",
                   "h=3,w=4,cin=9,cout=5,kh=3,kw=2,stride_h=2,stride_w=1,pad_top=1,pad_left=0,oh=6,ow=4",
                   "h=4,w=3,cin=17,cout=7,kh=4,kw=3,stride_h=2,stride_w=3,pad_top=1,pad_left=1,oh=8,ow=9"),
    # Batched product: broadcast either way, the adj pairs Helium takes (adj_x=adj_y=1 is plain
    # C only: tests/test_bmm.py), k short of and beyond 16.
    "bmm_s8": ("batch=1,lhs_batches=1,rhs_batches=1,m=1,n=1,k=1,adj_x=0,adj_y=0",
               "batch=3,lhs_batches=3,rhs_batches=1,m=5,n=7,k=19,adj_x=0,adj_y=1",
               "batch=2,lhs_batches=1,rhs_batches=2,m=4,n=9,k=33,adj_x=1,adj_y=0"),
}
CASES = [(kernel.name, path.name, target) for kernel in KERNELS.values() for path in kernel.paths
         for target in TARGETS]


def case_id(case) -> str:
    return "-".join(case)


@pytest.fixture(scope="module")
def targets():
    return {name: get_target(name) for name in TARGETS}


def offered(kernel_name: str, path_name: str, target) -> bool:
    return path_name in KERNELS[kernel_name].space(target, first_shape(kernel_name)).param("vector").values


def first_shape(kernel_name: str) -> dict:
    return KERNELS[kernel_name].parse_shape(SHAPES[kernel_name][1])


def tiered(cases: list[tuple[str, str, str]]) -> list:
    """The cases with those past the default tier marked slow (docs/testing.md). The default
    tier keeps each (kernel, path) on the first target that offers it, and a target none of
    those is on with its first case, so every path and every target is built and run there;
    the slow tier holds the rest of the matrix. Cases a target does not offer cost nothing."""
    targets = {name: get_target(name) for name in TARGETS}
    live = [case for case in cases if offered(case[0], case[1], targets[case[2]])]
    first_target = {(kernel, path): target for kernel, path, target in reversed(live)}
    default = {(*key, target) for key, target in first_target.items()}
    covered = {target for *_, target in default}
    first_case = {case[2]: case for case in reversed(live)}
    default |= {case for target, case in first_case.items() if target not in covered}
    return [pytest.param(case, id=case_id(case), marks=() if case in default or case not in live else pytest.mark.slow)
            for case in cases]


TIERED_CASES = tiered(CASES)


def test_every_kernel_has_shapes_here_and_a_plain_c_path_first():
    assert set(SHAPES) == set(KERNELS)
    for kernel in KERNELS.values():
        names = [path.name for path in kernel.paths]
        assert names[0] == "c" and len(set(names)) == len(names), kernel.name


def host_with_every_unit(monkeypatch):
    """The host target as detected on a CPU with every vector unit edgetune knows: a path for
    a unit this machine lacks (AVX-VNNI on a Zen 4) is offered on the hosts that have it."""
    from edgetune.hal import host as detection
    flags = set().union(*(needed for _, needed, *_ in detection._X86_VECTOR_UNITS))
    monkeypatch.setattr(detection, "_cpuinfo", lambda *_: {"flags": " ".join(sorted(flags))})
    return load_target(target_file("host"), overrides=detection.detect_host())


@pytest.mark.parametrize("kernel_name", sorted(KERNELS))
def test_every_path_is_offered_on_some_shipped_target(kernel_name, targets, monkeypatch):
    kernel, shipped = KERNELS[kernel_name], [*targets.values(), host_with_every_unit(monkeypatch)]
    for path in kernel.paths:
        assert any(offered(kernel_name, path.name, target) for target in shipped), \
            f"{kernel_name}: no shipped target offers vector={path.name}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_path_is_offered_exactly_where_the_hal_has_its_unit(case, targets):
    kernel_name, path_name, target_name = case
    target = targets[target_name]
    unit = path_name.split("_")[0]  # a path is named after its unit, or its unit and a variant (mve_pixels)
    plain = path_name in ("c", "naive")  # plain C and the plain loop nest (codegen/kernels/naive_path.py)
    has = plain or target.has_vector(unit) or target.has_extension(unit)
    assert offered(kernel_name, path_name, target) == has
    # The same target without vector units and core extensions offers the plain C paths only.
    bare = dataclasses.replace(target, vector_units=(), core=dataclasses.replace(target.core, extensions=()))
    assert offered(kernel_name, path_name, bare) == plain


@pytest.mark.parametrize("case", TIERED_CASES)
def test_a_paths_variants_render_from_existing_templates_with_allowed_flags(case, targets):
    kernel_name, path_name, target_name = case
    kernel, target = KERNELS[kernel_name], targets[target_name]
    if not offered(kernel_name, path_name, target):
        return
    allowed = {*(f for c in target.compilers for f in c.cflags), *COMMON_CFLAGS, *(f"-{o}" for o in OPT_LEVELS),
               *path_cflags()}
    for shape_text in SHAPES[kernel_name]:
        shape = kernel.parse_shape(shape_text)
        space = kernel.space(target, shape)
        ours = [int(i) for i in space.legal_indices() if space.config_at(int(i))["vector"] == path_name]
        assert ours, f"{kernel_name} {shape_text}: vector={path_name} has no legal configuration on {target_name}"
        for index in ours[:: max(1, len(ours) // 4)]:
            config = space.config_at(index)
            assert (TEMPLATES_DIR / kernel.template_for(config)).is_file()
            rendered = kernel.render(target, shape, config)
            assert set(rendered.cflags) <= allowed, rendered.cflags
            assert set(kernel.path(config).cflags) <= set(rendered.cflags)


@pytest.mark.parametrize("case", TIERED_CASES)
def test_a_paths_variants_compile_warning_free_with_every_compiler(case, targets, tmp_path):
    """The first and last legal configuration of the path per compiler (smallest and
    largest tiles), -Wall -Wextra -Werror."""
    kernel_name, path_name, target_name = case
    kernel, target = KERNELS[kernel_name], targets[target_name]
    if not offered(kernel_name, path_name, target):
        return
    for text in {SHAPES[kernel_name][1], SHAPES[kernel_name][-1]}:  # convolutions: padded, then unpadded
        shape = kernel.parse_shape(text)
        space = kernel.space(target, shape)
        for compiler in target.compilers:
            ours = [config for config in space if config["vector"] == path_name and config["compiler"] == compiler.name]
            for config in {ours[0], ours[-1]}:
                result = compile_only(target, kernel.render(target, shape, config), tmp_path)
                assert result.returncode == 0 and not result.stderr, f"{text} {config.key()}:\n{result.stderr}"


@pytest.mark.qemu
@pytest.mark.parametrize("case", TIERED_CASES)
def test_drawn_variants_of_a_path_match_the_reference_on_the_target(case, targets, tmp_path):
    kernel_name, path_name, target_name = case
    kernel, target = KERNELS[kernel_name], targets[target_name]
    if not offered(kernel_name, path_name, target):
        return
    shapes = st.sampled_from([kernel.parse_shape(text) for text in SHAPES[kernel_name]])
    check_drawn_variants(kernel, [target], shapes, path_name, tmp_path, examples=4)



FIR_ROUNDING_SHAPES = {"nearest": ("taps=8,block=11", "taps=13,block=6", "taps=32,block=9"),
                       "truncate": ("taps=8,block=11,rounding=truncate", "taps=13,block=6,rounding=truncate",
                                    "taps=32,block=9,rounding=truncate")}
FIR_ROUNDING_CASES = [(rounding, path.name, target) for rounding in FIR_ROUNDING_SHAPES
                      for path in KERNELS["fir_q15"].paths for target in ("cortex-m55", "cortex-m4", "host")]


@pytest.mark.qemu
@pytest.mark.parametrize("case", FIR_ROUNDING_CASES, ids=case_id)
def test_both_fir_q15_rounding_conventions_are_exact_on_every_path(case, targets, tmp_path):
    """Each narrowing (round to nearest; truncate, CMSIS-DSP's) on each path, taps that fill
    the MVE path's eight-lane steps and taps that need its tail predicate."""
    rounding, path_name, target_name = case
    kernel, target = KERNELS["fir_q15"], targets[target_name]
    if not offered("fir_q15", path_name, target):
        return
    shapes = st.sampled_from([kernel.parse_shape(text) for text in FIR_ROUNDING_SHAPES[rounding]])
    check_drawn_variants(kernel, [target], shapes, path_name, tmp_path, examples=4)


# The issue's two layers TFLite pads asymmetrically: MobileNetV1's 96x96x3 stride-2 3x3 SAME
# convolution (pads 0 top/left, 1 bottom/right) and DS-CNN's 10x4 stride-2 SAME convolution
# on 49x10 (pads 4/5 and 1/1); for the depthwise kernel, MobileNet's stride-2 3x3 SAME layer.
ISSUE_SHAPES = {
    "conv2d_s8": ("h=96,w=96,cin=3,cout=8,kh=3,kw=3,stride=2,pad=same",
                  "h=49,w=10,cin=1,cout=16,kh=10,kw=4,stride=2,pad=same"),
    "dwconv2d_s8": ("h=48,w=48,c=8,kh=3,kw=3,stride=2,pad=same",),
}
ISSUE_CASES = [(kernel, path.name, target) for kernel in ISSUE_SHAPES for path in KERNELS[kernel].paths
               for target in ("cortex-m55", "cortex-m4", "cortex-a53", "host")]


@pytest.mark.qemu
@pytest.mark.parametrize("case", ISSUE_CASES, ids=case_id)
def test_the_issues_same_layers_are_exact_on_every_path(case, targets, tmp_path):
    kernel_name, path_name, target_name = case
    kernel, target = KERNELS[kernel_name], targets[target_name]
    if not offered(kernel_name, path_name, target):
        return
    shapes = st.sampled_from([kernel.parse_shape(text) for text in ISSUE_SHAPES[kernel_name]])
    check_drawn_variants(kernel, [target], shapes, path_name, tmp_path, examples=2)


MULTIPLIER_SHAPES = ("h=5,w=6,c=3,mult=2,kh=3,kw=3,stride=1,pad=1", "h=7,w=5,c=5,mult=3,kh=3,kw=2,stride_h=2,"
                     "stride_w=1,pad_top=0,pad_bottom=1,pad_left=1,pad_right=0",
                     "h=4,w=4,c=7,mult=5,kh=3,kw=3,stride=1,pad=same")  # groups spanning 2-3 input channels


@pytest.mark.parametrize("target_name", TARGETS)
def test_a_depth_multiplier_above_one_is_offered_on_every_path(target_name, targets):
    """Every dwconv2d_s8 path computes any multiplier (plain C indexes, Helium gathers, NEON
    and AVX2 spread a group's distinct input channels over the lanes), so the space offers
    the same paths for mult 2 and 3 as for mult 1."""
    kernel, target = KERNELS["dwconv2d_s8"], targets[target_name]
    offered_names = {path.name for path in kernel.offered_paths(target)}
    for text in MULTIPLIER_SHAPES:
        space = kernel.space(target, kernel.parse_shape(text))
        assert {space.config_at(int(i))["vector"] for i in space.legal_indices()} == offered_names, text


@pytest.mark.qemu
@pytest.mark.parametrize("target_name", ("cortex-m55", "cortex-m4", "cortex-a53", "host"))
@pytest.mark.one_case
def test_drawn_depth_multiplier_variants_match_the_reference(target_name, targets, tmp_path):
    kernel = KERNELS["dwconv2d_s8"]
    shapes = st.sampled_from([kernel.parse_shape(text) for text in MULTIPLIER_SHAPES])
    for path in (path.name for path in kernel.paths):
        if offered("dwconv2d_s8", path, targets[target_name]):
            check_drawn_variants(kernel, [targets[target_name]], shapes, path, tmp_path, examples=4)


MODELS = Path(__file__).parent / "data" / "models"  # the MLPerf Tiny models (scripts/make_mlperf_tiny_models.py)


@pytest.mark.qemu
@pytest.mark.parametrize("target_name", ("cortex-m55", "cortex-m4", "cortex-a53", "host"))
@pytest.mark.one_case
def test_the_issues_real_same_layers_equal_tflite_micro_on_every_path(target_name, targets, tmp_path):
    """The first layers of DS-CNN and MobileNetV1-0.25 as the converter emitted them (real
    weights and quantisation), one variant per offered path judged by TFLite Micro's output."""
    from edgetune.model import load_model
    from edgetune.model.oracle import layer_case
    from edgetune.evaluate import Evaluator

    target = targets[target_name]
    for name, pads in (("ds_cnn_kws", (4, 5, 1, 1)), ("mobilenet_v1_025_vww", (0, 1, 0, 1))):
        layer = load_model(MODELS / f"{name}.tflite").tuned[0]
        kernel = KERNELS[layer.kernel]
        shape = kernel.parse_shape(layer.shape_dict)
        assert tuple(shape[k] for k in ("pad_top", "pad_bottom", "pad_left", "pad_right")) == pads
        space = kernel.space(target, shape)
        for index, path in enumerate(kernel.offered_paths(target)):
            io, expected = layer_case(layer, np.random.default_rng(index), ("random", "extreme")[index % 2])
            ours = [int(i) for i in space.legal_indices() if space.config_at(int(i))["vector"] == path.name]
            config = space.config_at(ours[(len(ours) * 2) // 3])
            evaluator = Evaluator(kernel, target, shape, space, io, tmp_path)
            evaluator.expected = [expected]  # TFLite Micro is the spec
            assert_ok(evaluator(config))
