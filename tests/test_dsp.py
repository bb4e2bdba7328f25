"""The Arm DSP-extension path (vector="dsp"): the HAL states the extension as data and the
spaces follow it, the DSP requantisation identity, warning-free builds on every compiler, and
bit-exact runs in QEMU (Cortex-M4) on drawn shapes, on buffers that are only as aligned as
their element type, and through an export."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from edgetune.codegen import get_kernel
from edgetune.codegen import quant
from edgetune.export import export_best
from edgetune.codegen.kernels.dsp import DSP_CFLAGS
from edgetune.hal import TargetError, load_target
from edgetune.evaluate import Evaluator
from edgetune.session import workload_inputs, workload_of
from edgetune.targets import get_target, iobuf, target_file
from edgetune.targets.runners import runner_for
from edgetune.tuner import Outcome, TuningDatabase

from kernel_runs import assert_ok, complete
from kernel_checks import compile_only, measure_misaligned

DSP_KERNELS = ("matmul_s8", "fir_q15")
M4_TEXT = target_file("cortex-m4").read_text(encoding="utf-8")


def dsp_configs(space):
    return [config for config in space if config["vector"] == "dsp"]


# --- the HAL says which cores have the extension ----------------------------------------------
@pytest.mark.parametrize("name, has", [("cortex-m4", True), ("cortex-m7", True), ("cortex-m55", True),
                                       ("cortex-a53", False), ("cortex-a72", False), ("host", False)])
def test_targets_state_the_dsp_extension(name, has):
    target = get_target(name)
    assert target.has_extension("dsp") is has
    assert ("dsp" in target.core.extensions) is has


@pytest.mark.parametrize("value, key, words", [
    ('["dsp", "neon"]', "core.extensions[1]", ("'neon'", "not a known core extension", "dsp")),
    ('["dsp", "dsp"]', "core.extensions[1]", ("listed twice",)),
    ('"dsp"', "core.extensions", ("expected list",)),
    ("[3]", "core.extensions[0]", ("3",)),
])
def test_bad_extension_lists_name_the_file_and_key(tmp_path, value, key, words):
    assert M4_TEXT.count('extensions = ["dsp"]') == 1
    path = tmp_path / "board.toml"
    path.write_text(M4_TEXT.replace('extensions = ["dsp"]', f"extensions = {value}"), encoding="utf-8")
    with pytest.raises(TargetError) as info:
        load_target(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}: "), message
    assert all(word in message for word in words), message


@pytest.mark.parametrize("kernel_name, shape", [("matmul_s8", "m=6,n=10,k=35"), ("fir_q15", "taps=13,block=21")])
def test_the_space_offers_dsp_exactly_where_the_hal_has_it(tmp_path, kernel_name, shape):
    kernel = get_kernel(kernel_name)
    shape = kernel.parse_shape(shape)
    for name in ("cortex-m4", "cortex-m7", "cortex-m55"):
        assert dsp_configs(kernel.space(get_target(name), shape)), name
    for name in ("cortex-a53", "host"):
        assert "dsp" not in kernel.space(get_target(name), shape).param("vector").values, name
    # The same Cortex-M4 board without the extension in its description: no DSP point at all.
    path = tmp_path / "plain-m4.toml"
    path.write_text(M4_TEXT.replace('extensions = ["dsp"]', "extensions = []"), encoding="utf-8")
    assert "dsp" not in kernel.space(load_target(path), shape).param("vector").values


def test_dsp_spaces_keep_their_constraints(m4):
    matmul = get_kernel("matmul_s8")
    configs = dsp_configs(matmul.space(m4, matmul.parse_shape("m=8,n=8,k=6")))
    assert configs and all(c["tile_m"] * c["tile_n"] <= 8 for c in configs)
    assert {c["layout"] for c in configs} == {"rowmajor", "packed"}
    assert {c["unroll_k"] for c in configs} == {1}  # 4 * 2 > k = 6
    fir = get_kernel("fir_q15")
    configs = dsp_configs(fir.space(m4, fir.parse_shape("taps=5,block=9")))
    assert {c["tile"] for c in configs} == {1, 2, 4} and {c["unroll"] for c in configs} == {1, 2}
    assert "dsp" not in get_kernel("fir_f32").space(m4, {"taps": 5, "block": 9}).param("vector").values


@pytest.mark.parametrize("name, shape, values, needles", [
    ("matmul_s8", "m=3,n=5,k=9", {"layout": "packed"}, ("__sxtb16", "__smlad", "__ssat", "__qadd", "_pack(")),
    ("matmul_s8", "m=3,n=8,k=9", {"layout": "rowmajor", "tile_n": 4}, ("__sxtb16", "__smlad", "__ssub16", "0xFFFF0000u")),
    ("fir_q15", "taps=7,block=5", {}, ("__smlald", "__ssat")),
])
def test_dsp_variants_use_the_acle_intrinsics_and_allow_unaligned_ldr(m4, name, shape, values, needles):
    kernel = get_kernel(name)
    shape = kernel.parse_shape(shape)
    space = kernel.space(m4, shape)
    rendered = kernel.render(m4, shape, complete(space, {**values, "vector": "dsp"}))
    assert "#include <arm_acle.h>" in rendered.source and all(n in rendered.source for n in needles)
    assert set(DSP_CFLAGS) <= set(rendered.cflags) and "-munaligned-access" in rendered.source  # build hint
    plain = kernel.render(m4, shape, complete(space, {"vector": "c"}))
    assert not set(DSP_CFLAGS) & set(plain.cflags) and "arm_acle.h" not in plain.source


# --- the DSP requantisation is the scalar one -------------------------------------------------
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(x=INT32, m=INT32)
def test_dsp_doubling_high_multiply_is_a_floor_of_the_half_up_sum(x, m):
    """requantize_dsp.c.j2 computes the doubling high multiply as floor((x*m + 2^30) / 2^31)
    (one SMLAL and a shift): the same value as quant.sat_rdmulh, the nudge-and-truncate form
    of common/requantize.c.j2, for every pair but the saturating INT32_MIN * INT32_MIN."""
    if not (x == m == -(1 << 31)):
        assert (x * m + (1 << 30)) >> 31 == int(quant.sat_rdmulh(np.array([x]), m)[0])


@pytest.mark.parametrize("x", [-(1 << 31), -(1 << 30) - 1, -(1 << 30), -1, 0, 1, (1 << 30), (1 << 31) - 1])
@pytest.mark.parametrize("m", [-(1 << 31), -(1 << 30), 1, (1 << 30), (1 << 31) - 1])
def test_dsp_requantize_formula_on_the_corners(x, m):
    want = int(quant.sat_rdmulh(np.array([x]), m)[0])
    got = (1 << 31) - 1 if x == m == -(1 << 31) else (x * m + (1 << 30)) >> 31
    assert got == want


# --- compiled and run ---------------------------------------------------------------------------
@pytest.mark.qemu
@pytest.mark.parametrize("name, shape", [("matmul_s8", "m=3,n=5,k=1"), ("matmul_s8", "m=2,n=3,k=13"),
                                         ("fir_q15", "taps=1,block=3"), ("fir_q15", "taps=8,block=5")])
def test_every_dsp_variant_compiles_warning_free_on_m7(tmp_path, name, shape):
    """Each (compiler, opt) pair of the Cortex-M7 and each tile/unroll combination, at least once."""
    m7 = get_target("cortex-m7")
    kernel = get_kernel(name)
    shape = kernel.parse_shape(shape)
    seen_builds, seen_tiles = set(), set()
    for config in dsp_configs(kernel.space(m7, shape)):
        build = (config["compiler"], config["opt"])
        tiles = tuple(v for k, v in config.items if k not in ("compiler", "opt"))
        if build in seen_builds and tiles in seen_tiles:
            continue
        seen_builds.add(build)
        seen_tiles.add(tiles)
        result = compile_only(m7, kernel.render(m7, shape, config), tmp_path)
        assert result.returncode == 0, f"{config.key()}:\n{result.stderr}"
    assert len(seen_builds) == 2 * 3


@pytest.mark.qemu
@pytest.mark.parametrize("name", DSP_KERNELS)
def test_drawn_dsp_variants_are_bit_exact_on_cortex_m4(name, m4, tmp_path_factory):
    kernel = get_kernel(name)
    work = tmp_path_factory.mktemp(f"dsp-{name}")

    @settings(max_examples=8, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])  # each example builds and runs: no shrinking
    @given(data=st.data())
    def run(data):
        if name == "matmul_s8":  # odd k, k < 4, 1-sized dims, tiles that do not divide
            shape = {"m": data.draw(st.integers(1, 7), "m"), "n": data.draw(st.integers(1, 11), "n"),
                     "k": data.draw(st.integers(1, 45), "k")}
        else:
            shape = {"taps": data.draw(st.integers(1, 29), "taps"), "block": data.draw(st.integers(1, 23), "block")}
        space = kernel.space(m4, shape)
        indices = [int(i) for i in space.legal_indices() if space.config_at(int(i))["vector"] == "dsp"]
        config = space.config_at(data.draw(st.sampled_from(indices), "config index"))
        io = kernel.make_io(shape, np.random.default_rng(data.draw(st.integers(0, 3), "seed")),
                            edge=data.draw(st.sampled_from(["random", "extreme"]), "edge"))
        trial = Evaluator(kernel, m4, shape, space, io, work)(config)
        assert trial.outcome is Outcome.OK, f"{shape} {config.key()}: {trial.error}"

    run()



@pytest.mark.qemu
@pytest.mark.parametrize("name, shape, values", [
    ("matmul_s8", "m=3,n=5,k=11", {"tile_m": 2, "tile_n": 2, "unroll_k": 2, "compiler": "clang", "opt": "O3"}),
    ("matmul_s8", "m=2,n=3,k=8", {"tile_m": 1, "tile_n": 4, "unroll_k": 1, "compiler": "gcc", "opt": "O2"}),
    ("matmul_s8", "m=3,n=10,k=13", {"layout": "rowmajor", "tile_m": 2, "tile_n": 4, "unroll_k": 2, "compiler": "clang",
                                    "opt": "O2"}),
    ("matmul_s8", "m=2,n=5,k=9", {"layout": "rowmajor", "tile_m": 1, "tile_n": 8, "unroll_k": 1, "compiler": "gcc",
                                  "opt": "Os"}),
    ("fir_q15", "taps=9,block=7", {"tile": 4, "unroll": 2, "compiler": "gcc", "opt": "O3"}),
    ("fir_q15", "taps=6,block=3", {"tile": 2, "unroll": 1, "compiler": "clang", "opt": "Os"}),
])
def test_dsp_variants_on_buffers_aligned_only_as_their_type(m4, tmp_path, name, shape, values):
    kernel = get_kernel(name)
    shape = kernel.parse_shape(shape)
    space = kernel.space(m4, shape)
    config = complete(space, {**values, "vector": "dsp"})
    # Random values: with the extreme ones most outputs saturate, which would hide wrong sums.
    io = kernel.make_io(shape, np.random.default_rng(5))
    assert_ok(measure_misaligned(kernel, m4, shape, config, io, tmp_path))


@pytest.mark.qemu
def test_exported_dsp_variant_builds_with_its_flags_and_matches_numpy(m4, tmp_path):
    matmul = get_kernel("matmul_s8")
    shape = matmul.parse_shape("m=5,n=6,k=19")
    space = matmul.space(m4, shape)
    workload = workload_of(matmul, m4, shape)
    config = space.make({"tile_m": 2, "tile_n": 2, "unroll_k": 2, "vector": "dsp", "layout": "packed",
                         "compiler": "clang", "opt": "O2"})
    db = TuningDatabase(tmp_path / "t.db")
    trial = Evaluator(matmul, m4, shape, space, workload_inputs(matmul, workload), tmp_path)(config)
    assert_ok(trial)
    db.record(workload, trial, "manual", 0)
    result = export_best(db, m4, tmp_path / "export", objective="instructions")
    assert "-munaligned-access" in result.folder.joinpath("manifest.json").read_text()
    io = matmul.make_io(shape, np.random.default_rng(321))
    runner = runner_for(m4)
    (tmp_path / "build").mkdir()
    build = runner.build_export(matmul, shape, matmul.deployed_io(io, config), result.folder, tmp_path / "build")
    _, raw = runner.run(build, matmul.deployed_io(io, config))
    assert np.array_equal(iobuf.unpack_outputs(io, raw)[0], matmul.reference(shape, io)[0])


@pytest.mark.qemu
@pytest.mark.parametrize("taps", [65535, 65536])
def test_dsp_fir_saturates_at_the_largest_sums(m4, tmp_path, taps):
    """Every product +2^30: the rounded sum is 2^31 - 2^15 at 65535 taps (the SSAT path) and
    2^31 at 65536 taps, which no longer fits int32 (the template clamps in int64 there)."""
    fir = get_kernel("fir_q15")
    shape = fir.parse_shape({"taps": taps, "block": 2})
    space = fir.space(m4, shape)
    x = np.full(taps + 1, -32768, np.int16)
    x[-1] = 32767  # the second output's window ends with a positive sample
    io = fir._buffers(shape, x, np.full(taps, -32768, np.int16))
    assert fir.reference(shape, io)[0].tolist() == [32767, 32767]
    trial = Evaluator(fir, m4, shape, space, io, tmp_path)(complete(space, {"vector": "dsp", "tile": 2, "unroll": 4}))
    assert_ok(trial)
