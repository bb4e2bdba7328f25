"""The Cortex-M55 QEMU runner: correctness of every vector path, exact repeatable counts,
and every fault a kernel can throw turned into a classified failed trial."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgetune.evaluate import Evaluator
from edgetune.tuner import Outcome

from faulty import FaultyMatmul

pytestmark = pytest.mark.qemu

EDGE_SHAPES = ["m=1,n=1,k=1", "m=5,n=13,k=7", "m=3,n=33,k=9", "m=17,n=4,k=1", "m=2,n=5,k=40", "m=9,n=20,k=3"]


def evaluate(kernel, target, shape_text, config, tmp_path, io=None, seed=7):
    shape = kernel.parse_shape(shape_text)
    space = kernel.space(target, shape)
    io = io or kernel.make_io(shape, np.random.default_rng(seed))
    evaluator = Evaluator(kernel, target, shape, space, io, tmp_path)
    # Configurations written before weight packing existed mean the row-major layout.
    return evaluator(space.make({"layout": "rowmajor", **config}) if isinstance(config, dict) else config)


def edge_config(shape, vector, compiler, layout="rowmajor"):
    """Tiles that divide none of the dimensions, so full and edge blocks both run."""
    if layout == "packed":  # within the packed tile's register limits; K tails of 1..15
        return {"tile_m": 2 if shape["m"] >= 2 else 1, "tile_n": 4 if shape["n"] > 4 else 1,
                "unroll_k": 2 if vector == "mve" and shape["k"] >= 32 else 1, "vector": vector,
                "layout": layout, "compiler": compiler, "opt": "O2"}
    narrow = 4 if vector == "mve" or shape["n"] > 2 else shape["n"]  # row-major MVE takes whole vectors
    return {"tile_m": 4 if shape["m"] >= 4 else 1, "tile_n": 8 if shape["n"] > 4 else narrow,
            "unroll_k": 4 if shape["k"] >= 4 else 1, "vector": vector, "layout": layout, "compiler": compiler,
            "opt": "O2"}


@pytest.mark.matrix
@pytest.mark.parametrize("shape_text", EDGE_SHAPES)
@pytest.mark.parametrize("vector", ["c", "mve"])
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("layout", ["rowmajor", "packed"])
def test_every_vector_path_is_bit_exact_on_edge_shapes(matmul, m55, tmp_path, shape_text, vector, compiler, layout):
    shape = matmul.parse_shape(shape_text)
    config = edge_config(shape, vector, compiler, layout)
    trial = evaluate(matmul, m55, shape_text, config, tmp_path)
    assert trial.outcome is Outcome.OK, trial.error
    assert trial.values["instructions"] > 0


@pytest.mark.parametrize("vector", ["c", "mve"])
@pytest.mark.parametrize("layout", ["rowmajor", "packed"])
def test_saturating_inputs_are_bit_exact(matmul, m55, tmp_path, vector, layout):
    shape = matmul.parse_shape("m=6,n=11,k=23")
    io = matmul.make_io(shape, np.random.default_rng(3), edge="extreme")
    config = {**edge_config(shape, vector, "gcc", layout), "opt": "O3"}
    trial = evaluate(matmul, m55, "m=6,n=11,k=23", config, tmp_path, io=io)
    assert trial.outcome is Outcome.OK, trial.error


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 12), n=st.integers(1, 40), k=st.integers(1, 24), data=st.data())
def test_drawn_shapes_and_configs_match_numpy(matmul, m55, tmp_path, m, n, k, data):
    shape = matmul.parse_shape({"m": m, "n": n, "k": k})
    space = matmul.space(m55, shape)
    index = data.draw(st.integers(0, len(space) - 1))
    config = space.config_at(int(space.legal_indices()[index]))
    trial = evaluate(matmul, m55, f"m={m},n={n},k={k}", config, tmp_path)
    assert trial.outcome is Outcome.OK, f"{config.key()}: {trial.error}"


def test_counts_are_identical_run_to_run(matmul, m55, tmp_path):
    config = {"tile_m": 2, "tile_n": 8, "unroll_k": 2, "vector": "mve", "compiler": "clang", "opt": "O2"}
    counts = {evaluate(matmul, m55, "m=8,n=16,k=16", config, tmp_path).values["instructions"] for _ in range(3)}
    assert len(counts) == 1


def test_counts_grow_with_the_work(matmul, m55, tmp_path):
    config = {"tile_m": 1, "tile_n": 4, "unroll_k": 1, "vector": "c", "compiler": "gcc", "opt": "O2"}
    small = evaluate(matmul, m55, "m=4,n=4,k=8", config, tmp_path).values["instructions"]
    large = evaluate(matmul, m55, "m=4,n=4,k=64", config, tmp_path).values["instructions"]
    assert large > 4 * small  # 8x the MACs; fixed per-call overhead keeps it under 8x


def test_mve_path_executes_fewer_instructions_than_plain_c(matmul, m55, tmp_path):
    base = {"tile_m": 2, "tile_n": 16, "unroll_k": 4, "compiler": "gcc", "opt": "O3"}
    plain = evaluate(matmul, m55, "m=16,n=16,k=32", {**base, "vector": "c"}, tmp_path).values["instructions"]
    mve = evaluate(matmul, m55, "m=16,n=16,k=32", {**base, "vector": "mve"}, tmp_path).values["instructions"]
    assert mve < plain


CONFIG = {"tile_m": 2, "tile_n": 4, "unroll_k": 1, "vector": "c", "layout": "rowmajor", "compiler": "gcc", "opt": "O2"}


@pytest.mark.parametrize("fault, outcome", [
    ("hang", Outcome.TIMEOUT),
    ("trap", Outcome.CRASH),
    ("bad_store", Outcome.CRASH),
    ("zeros", Outcome.WRONG_ANSWER),
    ("syntax", Outcome.COMPILE_ERROR),
    ("huge", Outcome.TOO_LARGE),
    ("overrun", Outcome.OVERRUN),
])
def test_faults_become_classified_failed_trials(m55_quick, tmp_path, fault, outcome):
    trial = evaluate(FaultyMatmul(fault), m55_quick, "m=4,n=4,k=4", CONFIG, tmp_path)
    assert trial.outcome is outcome, trial.error
    assert trial.error  # the reason is kept for the user
    assert trial.values == {}


def test_wrong_answer_names_the_first_difference(m55, tmp_path):
    trial = evaluate(FaultyMatmul("zeros"), m55, "m=4,n=4,k=4", CONFIG, tmp_path)
    assert "c:" in trial.error and "first at" in trial.error


def test_illegal_configuration_is_not_built(matmul, m55, tmp_path):
    shape = matmul.parse_shape("m=1,n=4,k=4")
    space = matmul.space(m55, shape)
    illegal = space.config_at(space.index_of({**CONFIG, "tile_m": 8}))
    evaluator = Evaluator(matmul, m55, shape, space, matmul.make_io(shape, np.random.default_rng(0)), tmp_path)
    trial = evaluator(illegal)
    assert trial.outcome is Outcome.INVALID and "tile_m" in trial.error
    assert list(tmp_path.iterdir()) == []  # nothing was built


@pytest.mark.parametrize("vector", ["c", "mve"])
@pytest.mark.parametrize("bias_value, c_zero", [((1 << 31) - 6, 127), (-(1 << 31) + 5, -128)])
def test_zero_point_next_to_int32_limits_saturates(matmul, m55, tmp_path, vector, bias_value, c_zero):
    # With A = 0 the accumulator is the bias; multiplied by ~1.0 it stays next to
    # INT32_MAX / INT32_MIN, where adding the zero point must not wrap.
    from edgetune.codegen import KernelIO
    from edgetune.codegen.kernels.base import Buffer

    shape = matmul.parse_shape("m=2,n=8,k=3")
    io = KernelIO(
        buffers=(Buffer("a", np.zeros((2, 3), np.int8)), Buffer("b", np.ones((3, 8), np.int8)),
                 Buffer("bias", np.full(8, bias_value, np.int32)), Buffer("c", np.zeros((2, 8), np.int8), True)),
        params=(("a_zero", 0), ("b_zero", 0), ("c_zero", c_zero), ("multiplier", (1 << 31) - 1), ("shift", 0)))
    expected = matmul.reference(shape, io)[0]
    assert np.all(expected == (127 if c_zero > 0 else -128))
    for layout in ("rowmajor", "packed"):
        config = {**edge_config(matmul.parse_shape("m=2,n=8,k=3"), vector, "gcc", layout), "tile_m": 2}
        trial = evaluate(matmul, m55, "m=2,n=8,k=3", config, tmp_path, io=io)
        assert trial.outcome is Outcome.OK, f"{layout}: {trial.error}"


def test_hang_timeout_follows_the_fastest_run(tmp_path):
    """Once a run has succeeded, a hang is killed after a multiple of that run's time, not
    after the target's whole timeout."""
    import re

    from edgetune.hal import load_target
    from edgetune.targets import target_file

    patient = load_target(target_file("cortex-m55"), overrides={"runner": {"timeout_s": 300}})
    kernel = FaultyMatmul("hang")  # tile_m == 2 hangs, the rest is the real kernel
    shape = kernel.parse_shape("m=4,n=4,k=4")
    space = kernel.space(patient, shape)
    evaluator = Evaluator(kernel, patient, shape, space, kernel.make_io(shape, np.random.default_rng(0)), tmp_path)
    assert evaluator.run_timeout() == 300  # nothing measured yet: the target's own limit
    assert evaluator(space.make({**CONFIG, "tile_m": 1})).outcome is Outcome.OK
    hung = evaluator(space.make(CONFIG))
    assert hung.outcome is Outcome.TIMEOUT
    limit = float(re.search(r"within ([0-9.]+) s", hung.error).group(1))
    assert abs(limit - evaluator.run_timeout()) < 0.05 and limit < 300  # the message rounds to 0.1 s
