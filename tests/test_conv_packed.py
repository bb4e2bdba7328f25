"""The int8 convolutions with weights packed at export time (layout=packed): the packing and
folding identity in numpy, the exported C packing helper against numpy's, bit-exact runs of
drawn packed variants on edge shapes (padding > 1, stride, dilation, 1-sized and odd channel
counts), and an export that ships a packed variant with its helper."""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from edgetune.codegen.kernels.base import COMMON_CFLAGS
from edgetune.codegen.kernels.convolution import geometry_of
from edgetune.codegen.kernels.weight_packing import Packing, pack_rows
from edgetune.evaluate import Evaluator
from edgetune.session import workload_inputs, workload_of
from edgetune.verify import export_and_measure, verify_export
from edgetune.targets import iobuf
from edgetune.targets.build import kernel_header
from edgetune.targets.runners import runner_for
from edgetune.tuner import Outcome, TuningDatabase

from kernel_runs import geometry_shapes


def unpack(packed: np.ndarray, packing: Packing, rows: int, k: int) -> np.ndarray:
    out = np.empty(rows * k, dtype=packed.dtype)
    out[packing.order(rows, k)] = packed.reshape(-1)
    return out.reshape(rows, k)


@pytest.mark.parametrize("rows, k, block, segment", [(7, 45, 3, 45), (5, 27, 2, 3), (1, 1, 4, 1), (9, 96, 4, 32),
                                                     (6, 9, 4, 1)])
def test_packing_is_a_permutation_of_whole_blocks(rows, k, block, segment, rng):
    weights = rng.integers(-128, 128, size=(rows, k), dtype=np.int8)
    packing = Packing(block=block, segment=segment, lanes=16)
    packed, _ = pack_rows(weights, np.zeros(rows, np.int32), 0, packing)
    assert packed.size == weights.size
    assert np.array_equal(unpack(packed, packing, rows, k), weights)
    # Each block of channels occupies its own contiguous stretch, in channel order.
    for o0 in range(0, rows, block):
        stretch = packed[o0 * k:min(rows, o0 + block) * k]
        assert sorted(stretch.tolist()) == sorted(weights[o0:o0 + block].reshape(-1).tolist())
    assert np.array_equal(pack_rows(weights, np.zeros(rows, np.int32), 0, Packing(1, k, 16))[0], weights.reshape(-1))


def patches_of(shape, io):
    geo = geometry_of(shape)
    x = io.buffers[0].data.astype(np.int64)
    return geo.patches(x, dict(io.params)["in_zero"]).reshape(geo.oh, geo.ow, -1)  # padding holds in_zero


@pytest.mark.parametrize("edge", ["random", "extreme"])
@pytest.mark.parametrize("text", ["h=5,w=4,cin=3,cout=5,kh=3,kw=3,stride=2,pad=3,dilation=1",
                                  "h=6,w=7,cin=17,cout=3,kh=2,kw=3,stride=1,pad=2,dilation=2"])
def test_folded_term_plus_plain_dot_product_is_the_accumulator_at_every_pixel(conv, m55, text, edge, rng):
    """Padding > 1 puts pixels next to and inside the padding: raw in_zero there times the
    weights, plus the term, must give the zero-point-corrected accumulator exactly."""
    shape = conv.parse_shape(text)
    io = conv.make_io(shape, rng, edge=edge)
    weights, bias = io.buffers[1].data, io.buffers[2].data
    config = next(c for c in conv.space(m55, shape) if c["layout"] == "packed")
    deployed = conv.deployed_io(io, config)
    packed, terms = deployed.buffers[1].data, deployed.buffers[2].data
    assert packed.shape == weights.shape and terms.shape == bias.shape
    rows = weights.reshape(shape["cout"], -1).astype(np.int64)
    raw = patches_of(shape, io)
    dot = np.einsum("yxk,ok->yxo", raw, rows)
    want = np.einsum("yxk,ok->yxo", raw - dict(io.params)["in_zero"], rows) + bias
    assert np.array_equal(dot + terms, want)


def packing_helper(rendered) -> str:
    """The <fn>_pack() prototype and definition from a variant's source: plain C without
    intrinsics, so the MVE variants' helper builds for the host too."""
    start = rendered.source.index(f"void {rendered.function}_pack(")
    return rendered.source[start:rendered.source.index("\n}\n", start) + 3]


def test_c_packing_helper_matches_numpy(conv, m55, host, tmp_path, rng):
    """The exported <fn>_pack(), compiled for the host, against pack_weights, for each
    packed form (plain C and DSP rows, Helium blocks over K, Helium blocks per tap)."""
    shape = conv.parse_shape("h=4,w=4,cin=19,cout=7,kh=3,kw=2,stride=1,pad=1,dilation=1")
    space = conv.space(m55, shape)
    forms = {}
    for config in space:
        if config["layout"] == "packed":
            forms.setdefault((config["vector"], config["algo"], config["tile_oc"]), config)
    assert {(v, a) for v, a, _ in forms} == {(v, a) for v in ("c", "mve", "dsp") for a in ("im2col", "direct")}
    for index, config in enumerate(forms.values()):
        rendered = conv.render(m55, shape, config)
        source = "#include <stdint.h>\n#include \"kernel.h\"\n" + packing_helper(rendered)
        folder = tmp_path / str(index)
        folder.mkdir()
        (folder / "kernel.h").write_text(kernel_header(rendered.declaration))
        (folder / "kernel.c").write_text(source)
        subprocess.run(["cc", *COMMON_CFLAGS, "-O2", "-fPIC", "-shared", "-I", str(folder),
                        "kernel.c", "-o", "k.so"], cwd=folder, check=True)
        pack = getattr(ctypes.CDLL(str(folder / "k.so")), f"{rendered.function}_pack")
        for edge in ("random", "extreme"):
            io = conv.make_io(shape, rng, edge=edge)
            weights, bias = (np.ascontiguousarray(b.data) for b in io.buffers[1:3])
            in_zero = dict(io.params)["in_zero"]
            packed, terms = np.zeros_like(weights), np.zeros_like(bias)
            pack(weights.ctypes.data_as(ctypes.c_void_p), bias.ctypes.data_as(ctypes.c_void_p), ctypes.c_int32(in_zero),
                 packed.ctypes.data_as(ctypes.c_void_p), terms.ctypes.data_as(ctypes.c_void_p))
            deployed = conv.deployed_io(io, config)
            assert np.array_equal(packed, deployed.buffers[1].data), config.key()
            assert np.array_equal(terms, deployed.buffers[2].data), config.key()


def test_space_rules_for_packed_weights(conv, m55, host):
    shape = conv.parse_shape(conv.example_shape())
    space = list(conv.space(m55, shape))
    packed = [c for c in space if c["layout"] == "packed"]
    assert packed and {c["vector"] for c in packed} == {"c", "mve", "dsp"}
    assert all(c["weight_sums"] == "in_loop" for c in packed)
    assert all(c["tile_p"] * c["tile_oc"] <= 8 for c in packed if c["vector"] == "mve")
    assert all(c["unroll"] == 1 for c in packed if c["vector"] == "c")
    # Pixel tiles on the direct loop: Helium on packed weights, 1x1 kernels only.
    assert not any(c["algo"] == "direct" and c["tile_p"] > 1 for c in space)  # the example is 3x3
    pointwise = conv.space(m55, conv.parse_shape("h=8,w=8,cin=32,cout=32,kh=1,kw=1,stride=2,pad=0,dilation=1"))
    direct_tiles = {(c["vector"], c["layout"]) for c in pointwise if c["algo"] == "direct" and c["tile_p"] > 1}
    assert direct_tiles == {("mve", "packed")}
    assert any(c["layout"] == "packed" for c in conv.space(host, shape))
    assert conv.version == 4


shapes = geometry_shapes({"cin": st.sampled_from([1, 3, 16, 17, 33]), "cout": st.integers(1, 9)}, size=6)


@pytest.mark.qemu
@pytest.mark.parametrize("vector", ["c", "mve"])
@pytest.mark.one_case(1)
def test_drawn_packed_variants_are_bit_exact_in_qemu(conv, m55, vector, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"conv-packed-{vector}")

    @settings(max_examples=10, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])  # each example builds and runs: no shrinking
    @given(data=st.data())
    def run(data):
        shape = conv.parse_shape(data.draw(shapes, "shape"))
        space = conv.space(m55, shape)
        indices = [int(i) for i in space.legal_indices()
                   if space.config_at(int(i))["layout"] == "packed" and space.config_at(int(i))["vector"] == vector]
        config = space.config_at(data.draw(st.sampled_from(indices), "config index"))
        io = conv.make_io(shape, np.random.default_rng(data.draw(st.integers(0, 3), "seed")),
                          edge=data.draw(st.sampled_from(["random", "extreme"]), "edge"))
        trial = Evaluator(conv, m55, shape, space, io, work)(config)
        assert trial.outcome is Outcome.OK, f"{shape} {config.key()}: {trial.error}"

    run()


EDGE_SHAPES = [
    "h=1,w=1,cin=1,cout=1,kh=1,kw=1,stride=1,pad=0,dilation=1",  # every dimension 1
    "h=7,w=5,cin=3,cout=5,kh=3,kw=3,stride=2,pad=2,dilation=1",  # odd channels, stride 2, pad > 1
    "h=9,w=8,cin=17,cout=7,kh=3,kw=3,stride=1,pad=2,dilation=2",  # dilation 2, cin and K with tails
    "h=2,w=3,cin=5,cout=3,kh=1,kw=1,stride=1,pad=3,dilation=1",  # pixels that see only padding
    "h=6,w=7,cin=32,cout=7,kh=3,kw=3,stride=1,pad=1,dilation=1",  # whole 16-byte chunks, inside and border windows
    "h=5,w=3,cin=20,cout=6,kh=1,kw=1,stride=1,pad=0,dilation=1",  # pointwise, 15 pixels: a pixel tile's remainder
    # The im2col row fill's other branches (cin = 3 and 17 above take its default-tier cases).
    pytest.param("h=6,w=6,cin=7,cout=3,kh=3,kw=3,stride=1,pad=1,dilation=1", marks=pytest.mark.slow),  # 21-byte rows
    pytest.param("h=5,w=5,cin=35,cout=2,kh=4,kw=4,stride=1,pad=1,dilation=1", marks=pytest.mark.slow),  # K = 560: tap by tap
]
PACKED_VARIANTS = [
    {"algo": "im2col", "vector": "mve", "tile_p": 4, "tile_oc": 2, "im2col_pixels": 8, "fusion": "fused", "compiler": "clang"},
    {"algo": "im2col", "vector": "mve", "tile_p": 2, "tile_oc": 3, "im2col_pixels": 4, "fusion": "unfused", "compiler": "gcc"},
    {"algo": "direct", "vector": "mve", "tile_oc": 4, "fusion": "fused", "compiler": "gcc"},
    {"algo": "direct", "vector": "mve", "tile_oc": 2, "fusion": "unfused", "compiler": "clang"},
    # Pixel tiles on the direct loop (weights shared by tile_p pixels, the pointwise rows read in place).
    {"algo": "direct", "vector": "mve", "tile_p": 2, "tile_oc": 4, "fusion": "fused", "compiler": "clang"},
    {"algo": "direct", "vector": "mve", "tile_p": 4, "tile_oc": 2, "fusion": "unfused", "compiler": "gcc"},
    {"algo": "im2col", "vector": "c", "tile_p": 2, "tile_oc": 4, "im2col_pixels": 4, "fusion": "unfused", "compiler": "clang"},
    {"algo": "direct", "vector": "c", "tile_oc": 2, "fusion": "fused", "compiler": "gcc", "opt": "Os"},
]


@pytest.mark.qemu
@pytest.mark.parametrize("shape_text", EDGE_SHAPES)
@pytest.mark.one_case(2)
def test_edge_shapes_every_packed_family(conv, m55, tmp_path, shape_text):
    shape = conv.parse_shape(shape_text)
    space = conv.space(m55, shape)
    work = tmp_path / "work"
    work.mkdir()
    for index, variant in enumerate(PACKED_VARIANTS):
        wanted = {"layout": "packed", **{k: v for k, v in variant.items() if any(c[k] == v for c in space)}}
        config = next((c for c in space if all(c[k] == v for k, v in wanted.items())), None)
        if config is None:  # the one family a shape may lack: pixel tiles on the direct loop are 1x1 kernels' only
            assert variant["algo"] == "direct" and variant.get("tile_p", 1) > 1 and (shape["kh"], shape["kw"]) != (1, 1)
            continue
        io = conv.make_io(shape, np.random.default_rng(index), edge="extreme" if index % 2 else "random")
        trial = Evaluator(conv, m55, shape, space, io, work)(config)
        assert trial.outcome is Outcome.OK, f"{config.key()}: {trial.outcome.value}: {trial.error}"


@pytest.mark.qemu
def test_export_ships_the_packed_conv_and_its_packing_helper(conv, m55, tmp_path):
    shape = conv.parse_shape("h=5,w=6,cin=20,cout=6,kh=3,kw=3,stride=1,pad=2,dilation=1")
    space = conv.space(m55, shape)
    workload = workload_of(conv, m55, shape)
    config = next(c for c in space if c["layout"] == "packed" and c["vector"] == "mve" and c["algo"] == "im2col"
                  and c["tile_p"] == 2 and c["tile_oc"] == 4 and c["compiler"] == "clang")
    db = TuningDatabase(tmp_path / "t.db")
    trial = Evaluator(conv, m55, shape, space, workload_inputs(conv, workload), tmp_path)(config)
    assert trial.outcome is Outcome.OK, trial.error
    db.record(workload, trial, "manual", 0)
    result = export_and_measure(db, m55, tmp_path / "export")  # builds, runs and checks the packed export
    function = result.entries[0].function
    header = result.header.read_text()
    assert f"void {function}_pack(const int8_t *weights, const int32_t *bias, int32_t in_zero" in header
    assert "layout=packed" in header
    io = conv.make_io(shape, np.random.default_rng(7), edge="extreme")
    runner = runner_for(m55)
    (tmp_path / "build").mkdir()
    build = runner.build_export(conv, shape, conv.deployed_io(io, config), result.folder, tmp_path / "build")
    _, raw = runner.run(build, conv.deployed_io(io, config))
    assert np.array_equal(iobuf.unpack_outputs(io, raw)[0], conv.reference(shape, io)[0])
    report = verify_export(result.folder, m55, seed=11)  # fresh and saturating inputs, packed as deployed
    assert report.ok, [v.problems for v in report.verdicts]
    assert report.verdicts[0].measured == report.verdicts[0].recorded  # exact counts: 0% tolerance holds


@pytest.mark.parametrize("edge", ["random", "extreme"])
def test_depthwise_packing_folds_the_term_and_keeps_each_tile_contiguous(dw, m55, edge, rng):
    shape = dw.parse_shape("h=5,w=4,c=11,kh=3,kw=2,stride=1,pad=2,dilation=1")
    io = dw.make_io(shape, rng, edge=edge)
    weights, bias = io.buffers[1].data, io.buffers[2].data
    in_zero = dict(io.params)["in_zero"]
    config = next(c for c in dw.space(m55, shape) if c["layout"] == "packed" and c["tile_c"] == 4)
    deployed = dw.deployed_io(io, config)
    packed, terms = deployed.buffers[1].data.reshape(-1), deployed.buffers[2].data
    assert deployed.buffers[1].data.shape == weights.shape
    taps = weights.reshape(-1, 11)  # [kh*kw][c]
    # Tile c0 = 8 holds channels 8..10, tap after tap.
    assert np.array_equal(packed[8 * 6:].reshape(6, 3), taps[:, 8:])
    assert np.array_equal(terms, bias.astype(np.int64) - in_zero * taps.astype(np.int64).sum(axis=0))


def test_depthwise_c_packing_helper_matches_numpy(dw, m55, tmp_path, rng):
    shape = dw.parse_shape("h=4,w=4,c=13,kh=3,kw=3,stride=1,pad=1,dilation=1")
    for index, config in enumerate(c for c in dw.space(m55, shape)
                                   if c["layout"] == "packed" and c["tile_p"] == 1 and c["taps"] == "loop"
                                   and c["vector"] == "c" and c["compiler"] == "gcc" and c["opt"] == "O2"):
        rendered = dw.render(m55, shape, config)
        folder = tmp_path / str(index)
        folder.mkdir()
        (folder / "kernel.h").write_text(kernel_header(rendered.declaration))
        (folder / "kernel.c").write_text("#include <stdint.h>\n#include \"kernel.h\"\n" + packing_helper(rendered))
        subprocess.run(["cc", *COMMON_CFLAGS, "-O2", "-fPIC", "-shared", "-I", str(folder), "kernel.c", "-o", "k.so"],
                       cwd=folder, check=True)
        pack = getattr(ctypes.CDLL(str(folder / "k.so")), f"{rendered.function}_pack")
        io = dw.make_io(shape, rng, edge="extreme")
        weights, bias = (np.ascontiguousarray(b.data) for b in io.buffers[1:3])
        packed, terms = np.zeros_like(weights), np.zeros_like(bias)
        pack(weights.ctypes.data_as(ctypes.c_void_p), bias.ctypes.data_as(ctypes.c_void_p),
             ctypes.c_int32(dict(io.params)["in_zero"]), packed.ctypes.data_as(ctypes.c_void_p),
             terms.ctypes.data_as(ctypes.c_void_p))
        deployed = dw.deployed_io(io, config)
        assert np.array_equal(packed, deployed.buffers[1].data) and np.array_equal(terms, deployed.buffers[2].data)
    assert dw.version == 4 and index == 2  # tile_c 4, 8 and 16


dw_shapes = geometry_shapes({"c": st.sampled_from([1, 3, 4, 9, 17]), "mult": st.sampled_from([1, 1, 2, 3])}, size=6)


@pytest.mark.qemu
def test_drawn_packed_depthwise_variants_are_bit_exact_in_qemu(dw, m55, tmp_path_factory):
    work = tmp_path_factory.mktemp("dw-packed")

    @settings(max_examples=10, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])
    @given(data=st.data())
    def run(data):
        shape = dw.parse_shape(data.draw(dw_shapes, "shape"))
        space = dw.space(m55, shape)
        indices = [int(i) for i in space.legal_indices() if space.config_at(int(i))["layout"] == "packed"]
        config = space.config_at(data.draw(st.sampled_from(indices), "config index"))
        io = dw.make_io(shape, np.random.default_rng(data.draw(st.integers(0, 3), "seed")),
                        edge=data.draw(st.sampled_from(["random", "extreme"]), "edge"))
        trial = Evaluator(dw, m55, shape, space, io, work)(config)
        assert trial.outcome is Outcome.OK, f"{shape} {config.key()}: {trial.error}"

    run()


@pytest.mark.qemu
@pytest.mark.parametrize("shape_text", ["h=7,w=5,c=3,kh=3,kw=3,stride=2,pad=3,dilation=1",
                                        "h=9,w=8,c=17,kh=3,kw=3,stride=1,pad=2,dilation=2",
                                        "h=1,w=1,c=1,kh=1,kw=1,stride=1,pad=0,dilation=1"])
def test_depthwise_edge_shapes_every_packed_family(dw, m55, tmp_path, shape_text):
    shape = dw.parse_shape(shape_text)
    space = dw.space(m55, shape)
    work = tmp_path / "work"
    work.mkdir()
    families = [{"vector": "mve", "tile_c": 8, "tile_p": 2, "taps": "unrolled3x3", "compiler": "clang"},
                {"vector": "mve", "tile_c": 16, "tile_p": 1, "taps": "loop", "compiler": "gcc"},
                {"vector": "c", "tile_c": 4, "tile_p": 4, "taps": "loop", "compiler": "clang", "opt": "O3"}]
    for index, family in enumerate(families):
        wanted = {"layout": "packed", **{k: v for k, v in family.items() if any(c[k] == v for c in space)}}
        config = next(c for c in space if all(c[k] == v for k, v in wanted.items()))
        io = dw.make_io(shape, np.random.default_rng(index), edge="extreme" if index % 2 else "random")
        trial = Evaluator(dw, m55, shape, space, io, work)(config)
        assert trial.outcome is Outcome.OK, f"{config.key()}: {trial.outcome.value}: {trial.error}"


def test_packed_variants_run_bit_exact_on_the_host(conv, dw, host, tmp_path):
    shapes = {conv: "h=6,w=5,cin=7,cout=9,kh=3,kw=2,stride=2,pad=2,dilation=1",
              dw: "h=6,w=5,c=7,kh=3,kw=3,stride=1,pad=2,dilation=2"}
    for kernel, text in shapes.items():
        shape = kernel.parse_shape(text)
        space = kernel.space(host, shape)
        for compiler in ("gcc", "clang"):
            config = next(c for c in space if c["layout"] == "packed" and c["compiler"] == compiler and c["opt"] == "O3")
            io = kernel.make_io(shape, np.random.default_rng(5), edge="extreme")
            work = tmp_path / f"{kernel.name}-{compiler}"
            work.mkdir()
            trial = Evaluator(kernel, host, shape, space, io, work)(config)
            assert trial.outcome is Outcome.OK, f"{config.key()}: {trial.outcome.value}: {trial.error}"
