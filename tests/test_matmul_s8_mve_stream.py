"""matmul_s8's Helium path on packed weights: the packed stream (a quad of columns taking turns
every 16 elements of K, one pointer per quad), its C packing helper against numpy's, the
space's register rule, and bit-exact runs in QEMU on the shapes that exercise it: m=1 (fully
connected), K not a multiple of 16, odd N, blocks of several quads, and every branch of the
requantisation (shift > 0, = 0, < 0)."""
from __future__ import annotations

import ctypes
import dataclasses
import subprocess

import numpy as np
import pytest

from edgetune.codegen.kernels.base import COMMON_CFLAGS
from edgetune.codegen.kernels.matmul_s8 import pack_group, pack_pairs, pack_weights, paired_order
from edgetune.codegen.render import render
from edgetune.evaluate import Evaluator
from edgetune.tuner import Outcome

from kernel_runs import complete


def unpack_stream(stream: np.ndarray, n: int, k: int, group: int) -> np.ndarray:
    """B transposed back from the stream, by the position formula of the C helper (not by
    pack_weights' own slicing): column n of block n0, element k of chunk k0 sits at
    n0*K + k0*width + (n - n0)*run + (k - k0)."""
    flat = stream.reshape(-1)
    out = np.zeros((n, k), np.int8)
    for col in range(n):
        n0 = col - col % group
        width = min(group, n - n0)
        for kk in range(k):
            k0 = kk - kk % 16
            run = min(16, k - k0)
            out[col, kk] = flat[n0 * k + k0 * width + (col - n0) * run + (kk - k0)]
    return out


@pytest.mark.parametrize("n,k,group", [(11, 45, 4), (8, 32, 4), (3, 17, 2), (13, 7, 4), (5, 64, 1)])
def test_stream_holds_every_column_once_in_the_helpers_order(n, k, group, rng):
    b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    bias = rng.integers(-1000, 1000, size=n, dtype=np.int32)
    stream, col_term = pack_weights(b, bias, 3, -5, group)
    plain, plain_terms = pack_weights(b, bias, 3, -5)
    assert stream.shape == (n, k) and stream.dtype == np.int8
    assert np.array_equal(unpack_stream(stream, n, k, group), b.T)
    assert np.array_equal(col_term, plain_terms)  # the terms do not depend on the order
    if group == 1:
        assert np.array_equal(stream, plain)


def test_stream_reads_a_quad_as_one_run(rng):
    """The first 64 bytes of the stream are columns 0-3's first 16 elements, in turn."""
    b = rng.integers(-128, 128, size=(40, 9), dtype=np.int8)
    stream, _ = pack_weights(b, np.zeros(9, np.int32), 0, 0, 4)
    flat = stream.reshape(-1)
    for j in range(4):
        assert np.array_equal(flat[16 * j:16 * j + 16], b[:16, j])
    assert np.array_equal(flat[64:80], b[16:32, 0])


def test_only_helium_packed_variants_use_the_stream(matmul, m55):
    space = matmul.space(m55, matmul.parse_shape("m=4,n=20,k=40"))
    for config in space:
        want = min(config["tile_n"], 4) if config["vector"] == "mve" and config["layout"] == "packed" else 1
        assert pack_group(config) == want


def test_paired_packing_puts_each_whole_group_of_eight_evens_first(rng):
    n, k = 21, 40  # two whole groups and five columns left as they are
    assert list(paired_order(n)) == [0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15, 16, 17, 18, 19, 20]
    b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    bias = rng.integers(-1000, 1000, size=n, dtype=np.int32)
    stream, terms = pack_weights(b, bias, 3, -5, 4, pair=True)
    _, plain_terms = pack_weights(b, bias, 3, -5)
    order = paired_order(n)
    assert np.array_equal(unpack_stream(stream, n, k, 4), b.T[order])
    assert np.array_equal(terms, plain_terms[order])
    # the first quad of the stream reads columns 0, 2, 4 and 6 in turn
    for slot, column in enumerate((0, 2, 4, 6)):
        assert np.array_equal(stream.reshape(-1)[16 * slot:16 * slot + 16], b[:16, column])


def test_only_helium_blocks_of_two_quads_pack_pairs(matmul, m55):
    space = matmul.space(m55, matmul.parse_shape("m=4,n=40,k=40"))
    for config in space:
        assert pack_pairs(config) == (config["vector"] == "mve" and config["layout"] == "packed"
                                      and config["tile_n"] >= 8)


@pytest.mark.parametrize("group,pair", [(2, False), (4, False), (4, True)])
def test_c_packing_helper_writes_the_stream(group, pair, tmp_path, rng):
    n, k, fn = 13 if not pair else 21, 37, "et_pack_test"
    source = render("common/matmul_s8_pack.c.j2", dict(fn=fn, P="P", group=group, chunk=16, pair=pair))
    (tmp_path / "pack.c").write_text(f"#include <stdint.h>\nenum {{ P_N = {n}, P_K = {k} }};\n{source}")
    subprocess.run(["cc", *COMMON_CFLAGS, "-O2", "-fPIC", "-shared", "pack.c", "-o", "pack.so"], cwd=tmp_path, check=True)
    pack = getattr(ctypes.CDLL(str(tmp_path / "pack.so")), f"{fn}_pack")
    b = np.ascontiguousarray(rng.integers(-128, 128, size=(k, n), dtype=np.int8))
    bias = np.ascontiguousarray(rng.integers(-(1 << 20), 1 << 20, size=n, dtype=np.int32))
    got, terms = np.zeros((n, k), np.int8), np.zeros(n, np.int32)
    pack(b.ctypes.data_as(ctypes.c_void_p), bias.ctypes.data_as(ctypes.c_void_p), ctypes.c_int32(7),
         ctypes.c_int32(-3), got.ctypes.data_as(ctypes.c_void_p), terms.ctypes.data_as(ctypes.c_void_p))
    want, want_terms = pack_weights(b, bias, 7, -3, group, pair)
    assert np.array_equal(got, want) and np.array_equal(terms, want_terms)


def test_space_offers_wide_single_row_blocks_within_the_registers(matmul, m55):
    space = matmul.space(m55, matmul.parse_shape("m=1,n=128,k=512"))
    packed = [c for c in space if c["layout"] == "packed" and c["vector"] == "mve"]
    assert {c["tile_n"] for c in packed} == {1, 2, 4, 8, 16, 32}  # 32 columns = 4 pairs of quads on one row
    for c in packed:
        live = 1 if c["tile_n"] >= 8 else (c["tile_n"] + 3) // 4 - 1  # pairs are stored before the next
        assert c["tile_m"] * live + c["tile_m"] + 2 <= 8 and c["tile_m"] * min(c["tile_n"], 4) <= 8
    wide = matmul.space(m55, matmul.parse_shape("m=8,n=64,k=64"))
    tiles = {(c["tile_m"], c["tile_n"]) for c in wide if c["layout"] == "packed" and c["vector"] == "mve"}
    assert (2, 32) in tiles and (2, 4) in tiles  # two rows: one quad's sums live, or one of a pair's
    assert not any(m > 2 for m, n in tiles if n >= 4)  # 3 rows x 4 sums exceed the 8 core accumulators


def _run(matmul, m55, shape_text, values, tmp_path, edge="random", shift=None, seed=0):
    shape = matmul.parse_shape(shape_text)
    space = matmul.space(m55, shape)
    config = complete(space, {"vector": "mve", "layout": "packed", **values})
    io = matmul.make_io(shape, np.random.default_rng(seed), edge=edge)
    if shift is not None:
        io = dataclasses.replace(io, params=tuple((name, shift if name == "shift" else value) for name, value in io.params))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return Evaluator(matmul, m55, shape, space, io, work)(config)


@pytest.mark.matrix
@pytest.mark.qemu
@pytest.mark.parametrize("shape_text,values", [
    ("m=1,n=128,k=512", {"tile_m": 1, "tile_n": 16, "unroll_k": 4, "compiler": "clang"}),  # the FC layer
    ("m=1,n=19,k=70", {"tile_m": 1, "tile_n": 16, "unroll_k": 2, "compiler": "gcc"}),  # K tail of 6, a 3-wide quad
    ("m=3,n=13,k=37", {"tile_m": 2, "tile_n": 8, "unroll_k": 2, "compiler": "clang"}),  # a row and 5 columns left
    ("m=5,n=6,k=16", {"tile_m": 4, "tile_n": 2, "unroll_k": 1, "compiler": "gcc"}),
    ("m=2,n=9,k=100", {"tile_m": 1, "tile_n": 4, "unroll_k": 4, "compiler": "clang"}),
    ("m=7,n=3,k=1", {"tile_m": 1, "tile_n": 1, "unroll_k": 1, "compiler": "clang"}),
    ("m=4,n=11,k=83", {"tile_m": 2, "tile_n": 4, "unroll_k": 2, "compiler": "gcc"}),  # kept K loop, tail of 3
])
@pytest.mark.parametrize("edge", ["random", "extreme"])
def test_stream_variants_are_bit_exact_in_qemu(matmul, m55, shape_text, values, edge, tmp_path):
    trial = _run(matmul, m55, shape_text, values, tmp_path, edge=edge)
    assert trial.outcome is Outcome.OK, f"{shape_text} {trial.config.key()}: {trial.error}"


@pytest.mark.matrix
@pytest.mark.qemu
@pytest.mark.parametrize("shape_text", ["m=2,n=21,k=48", "m=2,n=21,k=100"])  # K unrolled; K kept a loop
@pytest.mark.parametrize("shift", [3, 1, 0, -1, -9, -31])
def test_every_requantisation_branch_is_bit_exact_in_qemu(matmul, m55, shape_text, shift, tmp_path):
    """shift >= 0 takes the left-shift branch, shift < 0 the rounding right shift with ties
    away from zero; with shift 3 the left shift wraps, as the reference's does."""
    for edge in ("random", "extreme"):
        trial = _run(matmul, m55, shape_text, {"tile_m": 1, "tile_n": 8, "unroll_k": 1, "compiler": "clang"},
                     tmp_path, edge=edge, shift=shift, seed=abs(shift))
        assert trial.outcome is Outcome.OK, f"shift {shift} {edge}: {trial.error}"
