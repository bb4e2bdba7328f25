"""bench/float_libm.py's pieces without the emulator: the islands it measures are the zoo's
SIN islands, each with the 256 floats its DEQUANTIZE gives."""
import numpy as np
import pytest

from bench_scripts import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("float_libm")


def test_the_island_inputs_are_the_zoo_sin_islands_dequantized(bench):
    islands = bench.island_inputs()
    assert [name for name, *_ in islands] == list(bench.ISLAND_MODELS)
    for _, real, out_scale, zero in islands:
        assert real.dtype == np.float32 and real.size == 256 and np.all(np.diff(real) > 0)
        assert out_scale > 0 and -128 <= zero <= 127
