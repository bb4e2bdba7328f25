"""matmul_s8 with weights packed at export time (layout=packed): the packing identity, the
C packing helper against numpy's, bit-exact runs on drawn shapes, and an export that ships
the packed variant with its helper."""
from __future__ import annotations

import ctypes
import json
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from edgetune.cli import main
from edgetune.export import export_best
from edgetune.codegen.kernels.base import COMMON_CFLAGS
from edgetune.codegen.kernels.matmul_s8 import pack_weights
from edgetune.evaluate import Evaluator
from edgetune.session import workload_inputs, workload_of
from edgetune.targets import iobuf
from edgetune.targets.build import kernel_header
from edgetune.targets.runners import runner_for
from edgetune.tuner import Outcome, TuningDatabase


def packed_reference(a, b_packed, col_term, b_zero):
    """What the packed kernel computes, in numpy: dot - b_zero * row sum + col_term, mod 2^32."""
    dot = a.astype(np.int64) @ b_packed.astype(np.int64).T
    total = dot - b_zero * a.astype(np.int64).sum(axis=1, keepdims=True) + col_term.astype(np.int64)
    return (total & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


@pytest.mark.parametrize("edge", ["random", "extreme"])
def test_packing_identity_gives_the_zero_point_corrected_accumulator(matmul, edge, rng):
    shape = matmul.parse_shape("m=7,n=11,k=45")
    io = matmul.make_io(shape, rng, edge=edge)
    a, b, bias = (buf.data for buf in io.buffers[:3])
    p = dict(io.params)
    b_packed, col_term = pack_weights(b, bias, p["a_zero"], p["b_zero"])
    assert b_packed.shape == (11, 45) and np.array_equal(b_packed, b.T)
    want = (a.astype(np.int64) - p["a_zero"]) @ (b.astype(np.int64) - p["b_zero"]) + bias
    assert np.array_equal(packed_reference(a, b_packed, col_term, p["b_zero"]), want)


def test_bias_next_to_the_int32_limit_survives_packing(matmul):
    a = np.full((1, 3), -128, np.int8)
    b = np.full((3, 2), 127, np.int8)
    bias = np.array([(1 << 31) - 1 - 3 * 255 * 255, -(1 << 31) + 3 * 255 * 255], np.int32)
    b_packed, col_term = pack_weights(b, bias, 127, -128)  # the column term alone wraps
    want = (a.astype(np.int64) - 127) @ (b.astype(np.int64) + 128) + bias
    assert want.max() < 1 << 31 and want.min() >= -(1 << 31)
    assert np.array_equal(packed_reference(a, b_packed, col_term, -128), want)


def test_c_packing_helper_matches_numpy(matmul, host, tmp_path, rng):
    shape = matmul.parse_shape("m=3,n=13,k=37")
    space = matmul.space(host, shape)
    config = next(c for c in space if c["layout"] == "packed")
    rendered = matmul.render(host, shape, config)
    (tmp_path / "kernel.h").write_text(kernel_header(rendered.declaration))
    (tmp_path / "kernel.c").write_text(rendered.source)
    subprocess.run(["cc", *COMMON_CFLAGS, "-O2", "-fPIC", "-shared", "-I", str(tmp_path), "kernel.c", "-o", "k.so"],
                   cwd=tmp_path, check=True)
    pack = getattr(ctypes.CDLL(str(tmp_path / "k.so")), f"{rendered.function}_pack")
    for a_zero, b_zero, edge in ((5, -7, "random"), (127, -128, "extreme")):
        io = matmul.make_io(shape, rng, edge=edge)
        b, bias = np.ascontiguousarray(io.buffers[1].data), np.ascontiguousarray(io.buffers[2].data)
        b_packed, col_term = np.zeros((13, 37), np.int8), np.zeros(13, np.int32)
        pack(b.ctypes.data_as(ctypes.c_void_p), bias.ctypes.data_as(ctypes.c_void_p), ctypes.c_int32(a_zero),
             ctypes.c_int32(b_zero), b_packed.ctypes.data_as(ctypes.c_void_p), col_term.ctypes.data_as(ctypes.c_void_p))
        want_packed, want_terms = pack_weights(b, bias, a_zero, b_zero)
        assert np.array_equal(b_packed, want_packed) and np.array_equal(col_term, want_terms)


def test_space_keeps_packed_helium_tiles_within_the_registers(matmul, m55):
    space = matmul.space(m55, matmul.parse_shape("m=64,n=64,k=64"))
    packed_mve = [c for c in space if c["layout"] == "packed" and c["vector"] == "mve"]
    assert packed_mve
    # Per quad of columns: tile_m rows of A, two of B's stream, the finished quads' sums (in
    # blocks of 8+ columns each pair is stored before the next: only the pair's first quad).
    live = {c.key(): 1 if c["tile_n"] >= 8 else (c["tile_n"] + 3) // 4 - 1 for c in packed_mve}
    assert all(c["tile_m"] * live[c.key()] + c["tile_m"] + 2 <= 8
               and c["tile_m"] * min(c["tile_n"], 4) <= 8 for c in packed_mve)
    assert any(c["tile_n"] == 32 for c in packed_mve)
    result = CliRunner().invoke(main, ["kernels", "--json"])
    entry = next(k for k in json.loads(result.output) if k["name"] == "matmul_s8")
    assert entry["parameters"]["layout"]["values"] == ["rowmajor", "packed"]


@pytest.mark.qemu
@pytest.mark.parametrize("vector", ["c", "mve"])
@pytest.mark.one_case(1)
def test_drawn_packed_variants_are_bit_exact_in_qemu(matmul, m55, vector, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"packed-{vector}")

    @settings(max_examples=8, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])  # each example builds and runs: no shrinking
    @given(data=st.data())
    def run(data):
        shape = {"m": data.draw(st.integers(1, 9), "m"), "n": data.draw(st.integers(1, 19), "n"),
                 "k": data.draw(st.integers(1, 70), "k")}
        space = matmul.space(m55, shape)
        indices = [int(i) for i in space.legal_indices()
                   if space.config_at(int(i))["layout"] == "packed" and space.config_at(int(i))["vector"] == vector]
        config = space.config_at(data.draw(st.sampled_from(indices), "config index"))
        io = matmul.make_io(shape, np.random.default_rng(data.draw(st.integers(0, 3), "seed")),
                            edge=data.draw(st.sampled_from(["random", "extreme"]), "edge"))
        trial = Evaluator(matmul, m55, shape, space, io, work)(config)
        assert trial.outcome is Outcome.OK, f"{shape} {config.key()}: {trial.error}"

    run()


@pytest.mark.qemu
def test_export_ships_the_packed_variant_and_its_packing_helper(matmul, m55, tmp_path):
    shape = matmul.parse_shape("m=6,n=10,k=35")
    space = matmul.space(m55, shape)
    workload = workload_of(matmul, m55, shape)
    config = space.make({"tile_m": 2, "tile_n": 4, "unroll_k": 2, "vector": "mve", "layout": "packed",
                         "compiler": "clang", "opt": "O2"})
    db = TuningDatabase(tmp_path / "t.db")
    trial = Evaluator(matmul, m55, shape, space, workload_inputs(matmul, workload), tmp_path)(config)
    assert trial.outcome is Outcome.OK, trial.error
    db.record(workload, trial, "manual", 0)
    result = export_best(db, m55, tmp_path / "export", objective="instructions")
    function = result.entries[0].function
    header = result.header.read_text()
    assert f"void {function}_pack(const int8_t *b, const int32_t *bias, int32_t a_zero" in header
    assert "layout=packed" in header
    # Firmware packs its weights (here in numpy, as the C helper does) and calls the dispatcher.
    io = matmul.make_io(shape, np.random.default_rng(123), edge="extreme")
    runner = runner_for(m55)
    (tmp_path / "build").mkdir()
    build = runner.build_export(matmul, shape, matmul.deployed_io(io, config), result.folder, tmp_path / "build")
    _, raw = runner.run(build, matmul.deployed_io(io, config))
    assert np.array_equal(iobuf.unpack_outputs(io, raw)[0], matmul.reference(shape, io)[0])
