"""bench/moves.py, SPLIT/UNPACK/PACK's plain and Helium C on the M55: every case builds its
operator with as many parts as it says, and a measured pair is exact, checked against the
reference, and as the Helium copy promises (fewer instructions than the byte loop)."""
import numpy as np
import pytest

from bench_scripts import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("moves")


def test_every_case_builds_its_operator(bench, tmp_path):
    for n, case in enumerate(bench.CASES):
        work = tmp_path / str(n)
        work.mkdir()
        params = bench.params_of(case, work)
        assert params.op == case.op
        assert (params.n_inputs if case.op == "PACK" else params.n_outputs) == case.parts
        assert params.n_inputs + params.n_outputs <= 8  # the harness's buffers


def test_a_measured_pair_is_checked_and_exact(bench, tmp_path, m55):
    case = next(c for c in bench.CASES if c.op == "SPLIT" and c.parts == 4)
    params = bench.params_of(case, tmp_path)
    x = np.random.default_rng(1).integers(-128, 128, size=case.shape, dtype=np.int8)
    plain = bench.measure(params, params.render("et_op"), [x], m55, tmp_path / "plain")
    exported = bench.measure(params, params.render("et_op", target=m55), [x], m55, tmp_path / "m55")
    assert exported == bench.measure(params, params.render("et_op", target=m55), [x], m55, tmp_path / "again")
    assert exported < plain / 2, (plain, exported)


def test_a_wrong_output_is_a_failed_measurement(bench, tmp_path, m55):
    case = bench.CASES[0]
    params = bench.params_of(case, tmp_path)
    x = np.zeros(case.shape, dtype=np.int8)
    wrong = params.render("et_op").replace("from += 16;", "from += 15;", 1)
    assert wrong != params.render("et_op")
    with pytest.raises(SystemExit, match="differs from the reference"):
        bench.measure(params, wrong, [x + 1 + np.arange(48, dtype=np.int8).reshape(case.shape)], m55, tmp_path / "w")
