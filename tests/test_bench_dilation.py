"""bench/dilation.py, the converter's three operators against the rewrite's one dilated
convolution on the M55: every case's models are the chain and its parts, the chain is rewritten
as the case says (the copies absorbed at zero point 0, one padding copy kept otherwise), and a
measured pair is exact run to run, each figure checked against TFLite Micro by verify."""
import numpy as np
import pytest

from bench_scripts import load_bench
from edgetune.model import load_model
from edgetune.model.oracle import run_tflm


@pytest.fixture(scope="module")
def bench():
    return load_bench("dilation")


def test_every_case_is_the_chain_and_its_parts(bench, tmp_path):
    for n, case in enumerate(bench.CASES):
        parts = bench.models(case)
        path = tmp_path / f"{n}.tflite"
        path.write_bytes(parts["chain"])
        model = load_model(path)
        assert [layer.op for layer in model.layers] == ["SPACE_TO_BATCH_ND", model.layers[1].op, "BATCH_TO_SPACE_ND"]
        assert dict(model.layers[1].shape)["dilation_h"] == case.d
        assert len(model.graph.absorbed) == (2 if case.zero == 0 else 1)
        # the parts compose to the chain, in TFLite Micro (the blocks through the block convolution one by one)
        x = np.random.default_rng(n).integers(-128, 128, size=(1, case.h, case.w, case.c), dtype=np.int8)
        (blocks,) = run_tflm(parts["to_batch"], [x])
        convolved = np.concatenate([run_tflm(parts["block conv"], [b[None]])[0] for b in blocks])
        (back,) = run_tflm(parts["to_space"], [convolved])
        assert np.array_equal(back, run_tflm(parts["chain"], [x])[0])


@pytest.mark.slow
def test_a_measured_pair_is_exact(bench, tmp_path, m55):
    case = bench.Case("small", 10, 9, 4, 4, 3, 2, -128)
    first = bench.measure(case, m55, tmp_path / "a", vector=True)
    again = bench.measure(case, m55, tmp_path / "b", vector=True)
    assert first == again and first[2] == "SPACE_TO_BATCH_ND + CONV_2D"
    # One copy and one convolution against two copies and four, on the plain loop. On the
    # hand-picked Helium point of a shape this small the rewrite is not always ahead (since the
    # packed im2col builds each patch row first: 24,043 against 22,671; bench/RESULTS.md).
    plain = bench.measure(case, m55, tmp_path / "c")
    assert plain[1] < plain[0], plain
