"""bench/heavy_ops.py, the tuned kernels of TRANSPOSE_CONV and BATCH_MATMUL against their plain
loops on the M55: every shape is a legal workload of its kernel, and a measured sweep is checked
(each variant against the reference), exact run to run and, at best, below the plain loop."""
import numpy as np
import pytest

from bench_scripts import load_bench
from edgetune.codegen import get_kernel


@pytest.fixture(scope="module")
def bench():
    return load_bench("heavy_ops")


def test_every_shape_is_a_workload_of_its_kernel(bench):
    kernels = set()
    for name, text in bench.SHAPES.values():
        shape = get_kernel(name).parse_shape(text)
        assert bench.macs_of(name, shape) > 0
        kernels.add(name)
    assert kernels == {"tconv2d_s8", "bmm_s8"}


@pytest.mark.slow
def test_a_sweep_is_checked_exact_and_beats_the_plain_loop(bench, tmp_path, m55):
    kernel = get_kernel("bmm_s8")
    shape = kernel.parse_shape("batch=2,lhs_batches=2,rhs_batches=1,m=8,n=8,k=16,adj_x=0,adj_y=1")
    io = kernel.make_io(shape, np.random.default_rng(0))
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    rows = bench.sweep(kernel, m55, shape, io, "O3", first)
    assert rows == bench.sweep(kernel, m55, shape, io, "O3", second)
    plain = bench.plain_loop_values(kernel, m55, shape, io, tmp_path)["instructions"]
    assert min(n for _, n in rows) < plain
    assert {c["vector"] for c, _ in rows} == {"c", "mve"}
