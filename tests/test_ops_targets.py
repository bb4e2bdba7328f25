"""Every operator of the library, compiled for the Arm targets with each of their compilers
(GCC and Clang) and run bare metal in QEMU through the tuning harness, writes TFLite Micro's
output (its numpy reference checked against TFLite Micro on the same inputs first)."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.codegen.ops import operator_params
from edgetune.targets import get_target
from op_checks import activation_tensor, assert_same, draw_int8, int32_constant, one_op_graph, run_target, tflm

# One small model per operator: (tensors, op, inputs, outputs, options type, options)
CASES = {
    "ADD": ([activation_tensor(0, (1, 3, 4, 5), 0.07, -3), activation_tensor(1, (1, 1, 4, 5), 0.11, 9),
             activation_tensor(2, (1, 3, 4, 5), 0.09, -128)], (0, 1), (2,), "AddOptions", {"fusedActivationFunction": 1}),
    "AVERAGE_POOL_2D": ([activation_tensor(0, (1, 7, 6, 4), 0.1, -5), activation_tensor(1, (1, 4, 3, 4), 0.1, -5)], (0,), (1,),
                        "Pool2DOptions", {"padding": 0, "strideW": 2, "strideH": 2, "filterWidth": 3, "filterHeight": 3}),
    "MAX_POOL_2D": ([activation_tensor(0, (1, 7, 6, 4), 0.1, -5), activation_tensor(1, (1, 3, 3, 4), 0.1, -5)], (0,), (1,),
                    "Pool2DOptions", {"padding": 1, "strideW": 2, "strideH": 2, "filterWidth": 2, "filterHeight": 3,
                                      "fusedActivationFunction": 3}),
    "MEAN": ([activation_tensor(0, (1, 5, 5, 8), 0.05, 4), int32_constant(1, [1, 2]), activation_tensor(2, (1, 8), 0.03, -7)],
             (0, 1), (2,), "ReducerOptions", {"keepDims": False}),
    "SOFTMAX": ([activation_tensor(0, (2, 12), 0.0357, -4), activation_tensor(1, (2, 12), 1 / 256, -128)], (0,), (1,),
                "SoftmaxOptions", {"beta": 1.0}),
    "PAD": ([activation_tensor(0, (1, 4, 4, 3), 0.1, 7), int32_constant(1, [[0, 0], [0, 1], [2, 1], [0, 0]]),
             activation_tensor(2, (1, 5, 7, 3), 0.1, 7)], (0, 1), (2,), "PadOptions", {}),
    "CONCATENATION": ([activation_tensor(0, (1, 2, 3, 4), 0.1, 1), activation_tensor(1, (1, 2, 3, 2), 0.1, 1),
                       activation_tensor(2, (1, 2, 3, 6), 0.1, 1)], (0, 1), (2,), "ConcatenationOptions", {"axis": 3}),
    "QUANTIZE": ([activation_tensor(0, (1, 40), 0.02, 3), activation_tensor(1, (1, 40), 0.05, -60)], (0,), (1,), "", {}),
    "RESHAPE": ([activation_tensor(0, (1, 2, 2, 6), 0.1, 0), int32_constant(1, [1, 24]), activation_tensor(2, (1, 24), 0.1, 0)],
                (0, 1), (2,), "", {}),
}
@pytest.fixture(scope="module")
def m7():
    return get_target("cortex-m7")


TARGETS = [("m55", "gcc"), ("m55", "clang"), ("m4", "gcc"), ("m7", "clang"), ("a53", "gcc"), ("a53", "clang")]


@pytest.mark.matrix
@pytest.mark.parametrize("target_name,compiler", TARGETS, ids=[f"{t}-{c}" for t, c in TARGETS])
@pytest.mark.parametrize("op", list(CASES))
def test_c_in_qemu_is_tflite_micro(tmp_path, request, op, target_name, compiler):
    target = request.getfixturevalue(target_name)
    tensors, inputs, outputs, options_type, options = CASES[op]
    data, graph = one_op_graph(tmp_path, tensors, op, inputs, outputs, options_type, options)
    params = operator_params(graph, graph.operators[0])
    rng = np.random.default_rng(len(op))
    xs = [draw_int8(rng, tensors[i].shape, "random") for i in inputs if not tensors[i].constant]
    want = tflm(data, xs)
    assert_same("reference", params.reference(*xs), want)
    assert_same(f"C on {target.name} ({compiler})", run_target(params, target, xs, want.shape, tmp_path / "run", compiler), want)
