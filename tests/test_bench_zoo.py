"""bench/zoo.py's pieces without the emulator: the verdict per zoo model (the refusal, one line
naming the file only) and the saved inputs as `model verify --input` files."""
import sys

import numpy as np
import pytest

from bench_scripts import BENCH, load_bench


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))  # bench/zoo.py imports bench/model_export.py as a sibling
    try:
        yield load_bench("zoo")
    finally:
        sys.path.remove(str(BENCH))


def test_a_supported_model_has_no_refusal_and_a_refused_one_a_line_naming_its_file(bench):
    assert bench.refusal(bench.ZOO / "op_mul.tflite") == ""
    why = bench.refusal(bench.ZOO / "op_tile.tflite")
    assert why.startswith("op_tile.tflite: edgetune cannot run 1 of this model's 2 operators: TILE (1x: operator 1)")
    assert "\n" not in why and str(bench.ZOO) not in why


def test_the_saved_inputs_become_one_int8_file_per_case(bench, tmp_path):
    files = bench.input_files("op_split_v", tmp_path)
    with np.load(bench.ZOO / "op_split_v.npz") as saved:
        cases = saved["input0"]
    assert len(files) == len(cases) == 5
    for path, case in zip(files, cases):
        values = np.load(path)
        assert values.dtype == np.int8 and np.array_equal(values, case.reshape(-1))
