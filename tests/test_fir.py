"""fir_q15 and fir_f32: references against a loop model with Python numbers, the float
tolerance (accepts reordered sums, rejects a wrong answer), and variants in QEMU and natively
on drawn and edge shapes (1 tap, a 1-sample block, taps and blocks that tiles do not divide)."""
from __future__ import annotations

from fractions import Fraction

import cmsisdsp  # CMSIS-DSP's Python API (test extra): its C arm_fir_q15, built for the host
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetune.codegen import KernelError, get_kernel
from edgetune.export import export_best
from edgetune.session import TuneRequest, tune
from edgetune.targets import iobuf
from edgetune.targets.runners import runner_for
from edgetune.tuner import TuningDatabase

from kernel_runs import assert_ok, run_config

shapes = st.fixed_dictionaries({"taps": st.integers(1, 40), "block": st.integers(1, 40)})


@pytest.fixture(scope="module")
def q15():
    return get_kernel("fir_q15")


@pytest.fixture(scope="module")
def f32():
    return get_kernel("fir_f32")


@settings(max_examples=40, derandomize=True, deadline=None, database=None)
@given(shape=shapes, seed=st.integers(0, 2**16), edge=st.sampled_from(["random", "extreme"]),
       rounding=st.sampled_from([0, 1]))
def test_q15_reference_matches_the_loop_model(q15, shape, seed, edge, rounding):
    """rounding=0 adds half an LSB before the shift; rounding=1 is CMSIS-DSP's documented
    arm_fir_q15 arithmetic: the 2.30 sum "truncated to 34.15 format by discarding the low 15
    bits and then saturated to 1.15 format" (a floor: an arithmetic shift)."""
    shape = {**shape, "rounding": rounding}
    io = q15.make_io(shape, np.random.default_rng(seed), edge=edge)
    x, c = (b.data.tolist() for b in io.buffers[:2])
    want = []
    for n in range(shape["block"]):
        acc = sum(c[k] * x[n + k] for k in range(shape["taps"]))
        bias = 0 if rounding else 16384
        want.append(min(max((acc + bias) // 2**15, -32768), 32767))  # floor division == arithmetic shift
    assert q15.reference(shape, io)[0].tolist() == want


def cmsis_fir_q15(x: np.ndarray, coeffs: np.ndarray, block: int) -> np.ndarray:
    """CMSIS-DSP's own arm_fir_q15 (the cmsisdsp package builds its C sources for the host)
    run over the whole input from a zero state; its last `block` outputs are ours. Its
    documentation asks for an even number of taps: an odd filter gets a zero coefficient in
    front (pCoeffs is time-reversed, so that zero multiplies the oldest sample, never ours)."""
    if len(coeffs) % 2:
        coeffs = np.concatenate([np.zeros(1, dtype=np.int16), coeffs])
    taps = len(coeffs)
    instance = cmsisdsp.arm_fir_instance_q15()
    cmsisdsp.arm_fir_init_q15(instance, taps, coeffs, np.zeros(taps + len(x) - 1, dtype=np.int16))
    return np.asarray(cmsisdsp.arm_fir_q15(instance, x))[len(x) - block:]


@settings(max_examples=30, derandomize=True, deadline=None, database=None)
@given(shape=st.fixed_dictionaries({"taps": st.integers(1, 40), "block": st.integers(1, 40)}), seed=st.integers(0, 2**16))
def test_truncating_reference_equals_cmsis_dsps_arm_fir_q15(q15, shape, seed):
    """Random inputs only: on saturating inputs (every product 2^30) the package's host build
    departs from the arithmetic its documentation states, which the loop model above checks."""
    shape = q15.parse_shape({**shape, "rounding": 1})
    io = q15.make_io(shape, np.random.default_rng(seed))
    x, coeffs = (b.data for b in io.buffers[:2])
    want = cmsis_fir_q15(x, coeffs, shape["block"])
    assert q15.reference(shape, io)[0].tolist() == want.tolist()


def test_the_two_conventions_differ_by_at_most_one_and_often(q15):
    nearest = q15.parse_shape("taps=32,block=256")
    truncate = q15.parse_shape("taps=32,block=256,rounding=truncate")
    io = q15.make_io(nearest, np.random.default_rng(0))
    diff = q15.reference(nearest, io)[0].astype(int) - q15.reference(truncate, io)[0].astype(int)
    assert set(diff.tolist()) <= {0, 1} and 64 < int(diff.sum()) < 192  # about half the outputs round up


def test_rounding_shape_key(q15):
    assert q15.parse_shape("taps=4,block=8")["rounding"] == 0
    assert q15.parse_shape("taps=4,block=8,rounding=nearest")["rounding"] == 0
    assert q15.parse_shape("taps=4,block=8,rounding=TRUNCATE")["rounding"] == 1
    assert q15.parse_shape("taps=4,block=8,rounding=1")["rounding"] == 1
    assert q15.function_name(q15.parse_shape("taps=4,block=8,rounding=1")) != \
        q15.function_name(q15.parse_shape("taps=4,block=8"))
    with pytest.raises(KernelError, match="rounding=2 must be 0 .nearest. or 1 .truncate."):
        q15.parse_shape("taps=4,block=8,rounding=2")
    with pytest.raises(KernelError, match="rounding='same' must be nearest or truncate"):
        q15.parse_shape("taps=4,block=8,rounding=same")
    with pytest.raises(KernelError, match="rounding='floor' must be nearest or truncate"):
        q15.parse_shape("taps=4,block=8,rounding=floor")
    with pytest.raises(KernelError, match="'rounding=2.5' is not NAME=INTEGER .e.g. taps=32,block=64,rounding=nearest."):
        q15.parse_shape("taps=4,block=8,rounding=2.5")
    with pytest.raises(KernelError, match="unknown key 'rounding' for fir_f32"):
        get_kernel("fir_f32").parse_shape("taps=4,block=8,rounding=1")


@settings(max_examples=20, derandomize=True, deadline=None, database=None)
@given(shape=shapes, seed=st.integers(0, 2**16), edge=st.sampled_from(["random", "extreme"]))
def test_f32_tolerance_accepts_any_summation_order_and_rejects_errors(f32, shape, seed, edge):
    io = f32.make_io(shape, np.random.default_rng(seed), edge=edge)
    x, c = (b.data for b in io.buffers[:2])
    want = f32.reference(shape, io)[0]
    forward = np.zeros(shape["block"], dtype=np.float32)
    backward = np.zeros(shape["block"], dtype=np.float32)
    for k in range(shape["taps"]):  # float32 sums in two orders, rounding at every step
        forward = (forward + c[k] * x[k:k + shape["block"]]).astype(np.float32)
        j = shape["taps"] - 1 - k
        backward = (backward + c[j] * x[j:j + shape["block"]]).astype(np.float32)
    assert f32.compare(shape, io, "y", forward, want) is None
    assert f32.compare(shape, io, "y", backward, want) is None
    exact = [float(sum(Fraction(float(c[k])) * Fraction(float(x[n + k])) for k in range(shape["taps"])))
             for n in range(shape["block"])]
    wrong = np.array(exact, dtype=np.float32)
    n = seed % shape["block"]
    wrong[n] = np.float32(exact[n] + 4 * max(f32.tolerance(shape, io)[n], 1e-30) + abs(exact[n]) * 1e-3)
    problem = f32.compare(shape, io, "y", wrong, want)
    assert problem is not None and f"1 of {shape['block']} elements" in problem and f"first at ({n},)" in problem


def test_shape_limits(q15):
    with pytest.raises(KernelError, match="taps=70000 exceeds"):
        q15.parse_shape("taps=70000,block=4")
    with pytest.raises(KernelError, match="block=0 must be a positive"):
        q15.parse_shape("taps=4,block=0")


@pytest.mark.qemu
@settings(max_examples=4, derandomize=True, deadline=None, database=None)
@given(shape=shapes, seed=st.integers(0, 2**16), pick=st.integers(0, 2**32), edge=st.sampled_from(["random", "extreme"]),
       name=st.sampled_from(["fir_q15", "fir_f32"]))
def test_drawn_variants_are_correct_in_qemu(m55, tmp_path_factory, shape, seed, pick, edge, name):
    kernel = get_kernel(name)
    space = kernel.space(m55, shape)
    legal = space.legal_indices()
    config = space.config_at(int(legal[pick % len(legal)]))
    assert_ok(run_config(kernel, m55, shape, config.as_dict(), tmp_path_factory.mktemp("fir"), edge=edge, seed=seed))


@pytest.mark.qemu
@pytest.mark.parametrize("name", ["fir_q15", "fir_f32"])
@pytest.mark.parametrize("shape", [{"taps": 1, "block": 1}, {"taps": 13, "block": 21}])
def test_edge_shapes_mve_and_c(m55, tmp_path, name, shape):
    kernel = get_kernel(name)
    space = kernel.space(m55, shape)
    for index, variant in enumerate(({"vector": "mve", "tile": 4, "compiler": "clang", "opt": "O3"},
                                     {"vector": "c", "tile": 8, "unroll": 4, "compiler": "gcc", "opt": "O2"})):
        wanted = {k: v for k, v in variant.items() if any(c[k] == v for c in space)}
        assert_ok(run_config(kernel, m55, shape, wanted, tmp_path, edge=("extreme" if index else "random"), seed=index))


def test_host_variants(tmp_path, host):
    for name in ("fir_q15", "fir_f32"):
        kernel = get_kernel(name)
        assert_ok(run_config(kernel, host, {"taps": 9, "block": 30}, {"tile": 4, "unroll": 2, "compiler": "gcc"},
                             tmp_path, edge="extreme", seed=2))


@pytest.mark.qemu
def test_an_export_serves_each_rounding_convention_its_own_variant(q15, m55, tmp_path):
    """Both conventions of one filter tuned into one database and exported: the dispatcher
    takes `rounding` like any shape key, and each call returns its own convention's output."""
    db = TuningDatabase(tmp_path / "t.db")
    shapes = [q15.parse_shape(f"taps=9,block=20,rounding={r}") for r in ("nearest", "truncate")]
    for shape in shapes:
        tune(TuneRequest(q15, m55, shape, "random", 3, 2, 1), db)
    folder = export_best(db, m55, tmp_path / "export", objective="instructions").folder
    outputs = []
    for shape in shapes:
        io = q15.make_io(shape, np.random.default_rng(7))  # the same inputs for both
        workdir = tmp_path / f"build{shape['rounding']}"
        workdir.mkdir()
        runner = runner_for(m55)
        _, raw = runner.run(runner.build_export(q15, shape, io, folder, workdir), io)
        got = iobuf.unpack_outputs(io, raw)[0]
        assert np.array_equal(got, q15.reference(shape, io)[0]), shape
        outputs.append(got)
    assert not np.array_equal(*outputs)  # the two conventions really differ on these inputs
