"""bench/ops.py, the library operators' plain and exported C on the M55 through the measuring
pipeline: every case builds its operator, and one measured pair is exact and as the
operators' Helium paths promise (a table lookup by gather is fewer instructions than the
plain loop; TRANSPOSE, which has no Helium path, renders and counts the same)."""
import numpy as np
import pytest

from bench_scripts import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("ops")


def test_every_case_builds_its_operator(bench, tmp_path):
    for n, case in enumerate(bench.CASES):
        work = tmp_path / str(n)
        work.mkdir()
        params = bench.params_of(case, work)
        assert params.op == case.op and np.prod(params.output_shape) == np.prod(case.output)


def test_a_measured_pair_is_checked_and_exact(bench, tmp_path, m55):
    rng = np.random.default_rng(1)
    for name in ("LOGISTIC", "TRANSPOSE"):
        case = next(c for c in bench.CASES if c.op == name)
        params = bench.params_of(case, tmp_path)
        inputs = [rng.integers(-128, 128, size=shape, dtype=np.int8) for shape in case.inputs]
        plain = bench.measure(params, params.render("et_op"), inputs, m55, tmp_path / f"{name}-plain")
        exported = bench.measure(params, params.render("et_op", target=m55), inputs, m55, tmp_path / f"{name}-m55")
        again = bench.measure(params, params.render("et_op", target=m55), inputs, m55, tmp_path / f"{name}-again")
        assert exported == again  # exact counts, run to run
        if name == "LOGISTIC":
            assert exported < plain / 4, (plain, exported)
        else:
            assert exported == plain


def test_a_wrong_output_is_a_failed_measurement(bench, tmp_path, m55):
    """The pipeline checks what it measures: C that computes something else is refused."""
    case = next(c for c in bench.CASES if c.op == "LEAKY_RELU")
    params = bench.params_of(case, tmp_path)
    x = np.zeros(case.inputs[0], dtype=np.int8)
    wrong = params.render("et_op").replace("output[i] = ", "output[i] = 1 + ")
    with pytest.raises(SystemExit, match="LEAKY_RELU: .*differs from the reference"):
        bench.measure(params, wrong, [x], m55, tmp_path / "wrong")


@pytest.mark.slow
def test_an_int16_case_measures_int16_buffers_and_its_helium_loop(bench, tmp_path, m55):
    """An int16 case: int16 tensors and buffers, the exported C the Helium loop (VLDRH), both
    checked against the reference by the pipeline, the Helium loop fewer instructions."""
    case = next(c for c in bench.CASES if c.op == "MUL" and c.dtype == "int16" and c.inputs[1] != c.inputs[0])
    params = bench.params_of(case, tmp_path)
    assert params.input_ctypes == ("int16_t", "int16_t") and "vldrhq_s32" in params.render("et_op", target=m55)
    rng = np.random.default_rng(2)
    inputs = [rng.integers(-32768, 32768, size=shape, dtype=np.int16) for shape in case.inputs]
    plain = bench.measure(params, params.render("et_op"), inputs, m55, tmp_path / "plain")
    exported = bench.measure(params, params.render("et_op", target=m55), inputs, m55, tmp_path / "m55")
    assert exported < plain, (plain, exported)


def test_the_lstm_cases_build_and_the_helium_one_is_measured_below_the_plain_loop(bench, tmp_path, m55):
    """The LSTM cases (the zoo's, a drawn larger one) build with their weights baked in; the
    zoo's measured plain and exported, each output checked against the reference."""
    cases = bench.lstm_cases(np.random.default_rng(0), tmp_path)
    assert [(c[2], c[3]) for c in cases] == [((1, 12, 10), "int8"), ((1, 49, 40), "int8"), ((1, 49, 40), "int16")]
    _, op, shape, _ = cases[0]
    x = [np.random.default_rng(2).integers(-128, 128, size=shape, dtype=np.int8)]
    plain = bench.measure(op, op.render("et_op"), x, m55, tmp_path / "lstm-plain")
    exported = bench.measure(op, op.render("et_op", target=m55), x, m55, tmp_path / "lstm-m55")
    assert exported < plain / 2, (plain, exported)
