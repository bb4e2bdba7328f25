"""bench/kernels.py without running a tune: the operators it measures, the MAC counts and the
per-type limits it divides by, and the distinct MLPerf Tiny workloads it reads from the models."""
import pytest

from edgetune.codegen import get_kernel
from edgetune.model import load_model

from bench_scripts import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("kernels")


def test_the_seven_operators_of_issue_19_parse_and_count_their_macs(bench):
    want = {"matmul_s8 64^3": 64 ** 3, "conv 3x3": 16 * 16 * 32 * 32 * 9, "depthwise 3x3": 16 * 16 * 32 * 9,
            "matmul_f32 32^3": 32 ** 3, "fir_f32": 32 * 64, "fully connected 512->128": 512 * 128,
            "fir_q15": 32 * 256}
    assert [op.label for op in bench.OPERATORS] == list(want)
    for op in bench.OPERATORS:
        shape = get_kernel(op.kernel).parse_shape(op.shape)
        assert bench.macs_of(op.kernel, shape) == want[op.label], op.label
    fir = next(op for op in bench.OPERATORS if op.kernel == "fir_q15")
    assert get_kernel("fir_q15").parse_shape(fir.shape)["rounding"] == 1  # truncating, as arm_fir_q15
    assert fir.shape.startswith(bench.LIBRARY_FIR)


def test_macs_of_counts_strided_and_multiplied_depthwise_layers(bench):
    dw = get_kernel("dwconv2d_s8").parse_shape("h=15,w=15,c=8,mult=2,kh=3,kw=3,stride=2,pad=1")
    assert bench.macs_of("dwconv2d_s8", dw) == 8 * 8 * 16 * 9  # 8x8 outputs, 16 output channels
    conv = get_kernel("conv2d_s8").parse_shape("h=9,w=9,cin=3,cout=5,kh=3,kw=3,stride=2,pad=valid")
    assert bench.macs_of("conv2d_s8", conv) == 4 * 4 * 5 * 3 * 9


def test_limits_scale_the_int8_figure_by_the_lanes(bench, m55):
    assert bench.mac_limit(m55, "int8") == 8
    assert bench.mac_limit(m55, "int16") == 4
    assert bench.mac_limit(m55, "float32") == 2


def test_layer_workloads_are_the_models_distinct_shapes(bench):
    rows = bench.model_workloads()
    keys = [(kernel, tuple(sorted(shape.items()))) for _, kernel, shape, _ in rows]
    assert len(keys) == len(set(keys))
    want = set()
    for name in bench.MLPERF_TINY:
        model = load_model(bench.MODELS / f"{name}.tflite")
        want |= {(w.kernel, tuple(sorted(w.shape))) for w in model.workloads()}
        for layer in model.tuned:  # one call's MACs, as the table divides them
            row = next(r for r in rows if r[1] == layer.kernel and tuple(sorted(r[2].items())) == tuple(sorted(layer.shape)))
            assert row[3] == layer.macs
    assert set(keys) == want
    assert {kernel for _, kernel, _, _ in rows} == {"conv2d_s8", "dwconv2d_s8"}
    assert all(bench.short_shape(kernel, shape) for _, kernel, shape, _ in rows)
