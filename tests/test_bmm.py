"""BATCH_MATMUL as a tuned layer (issue 28): the bmm_s8 kernel's reference, its plain C and
Helium variants (host, the M55 in QEMU) against TFLite Micro on one-operator models (both
operands activations or the right one a constant, adj_x/adj_y, broadcast batch dimensions,
odd sizes, the int8 extremes), and a small attention block exported and verified whole."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgetune.codegen import get_kernel
from edgetune.codegen.kernels.base import Buffer, KernelIO
from edgetune.model import ModelError, load_model
from edgetune.model.builder import build_model, constant
from edgetune.model.export import export_model
from edgetune.model.graph import Operator, Quantization, Tensor
from edgetune.model.oracle import oracle_output, run_tflm
from edgetune.model.verify import verify_model
from edgetune.targets import get_target
from bmm_models import bmm_model
from model_files import int8_input
from op_checks import check_variants_against

KERNEL = get_kernel("bmm_s8")
# (left, right, output) batch dimensions: equal, broadcast either way, none, mixed ranks.
BATCHES = [((1, 2), (1, 2), (1, 2)), ((2,), (1,), (2,)), ((), (), ()), ((3, 1), (1, 2), (3, 2)),
           ((2, 1, 2), (2,), (2, 1, 2)), ((1,), (3,), (3,))]


def drawn_case(rng, index: int) -> dict:
    lb, rb, ob = BATCHES[index % len(BATCHES)]
    m, n, k = (int(v) for v in rng.integers(1, 24, size=3))
    return dict(lhs_batch=lb, rhs_batch=rb, out_batch=ob, m=m, n=n, k=k, adj_x=bool(index // 6 % 2),
                adj_y=bool(index // 12 % 2), const_rhs=index % 7 == 3, edge=("random", "extreme")[index // 3 % 2])


def layer_case(tmp_path: Path, rng, case: dict):
    """(the layer, its KernelIO on drawn operands, TFLite Micro's output for them)."""
    data = bmm_model(rng, **case)
    path = tmp_path / "bmm.tflite"
    path.write_bytes(data)
    model = load_model(path)
    layer = model.layers[0]
    xs = [int8_input(rng, model.graph.tensors[i].shape, case["edge"]) for i in model.graph.inputs]
    io = layer.io(xs[0])
    if layer.extra_inputs:  # the module passes the real right operand where the layer holds a stand-in
        io = KernelIO(tuple(replace(b, data=xs[1].reshape(-1)) if b.name == "rhs" else b for b in io.buffers), io.params)
    return layer, io, run_tflm(data, xs)[0].reshape(layer.kernel_output)


def test_reference_is_tflite_micro(tmp_path):
    rng = np.random.default_rng(28)
    for index in range(48):
        layer, io, want = layer_case(tmp_path, rng, drawn_case(rng, index))
        got = KERNEL.reference(layer.shape_dict, io)[0]
        assert np.array_equal(got, want), f"case {index} {layer.shape_text}: {int((got != want).sum())} differ"


def test_the_one_operator_oracle_takes_the_stand_in_right_operand(tmp_path):
    rng = np.random.default_rng(4)
    layer, _, _ = layer_case(tmp_path, rng, drawn_case(rng, 0))
    assert layer.extra_inputs == (("rhs", 1),)
    x = int8_input(rng, layer.input_shape)
    assert np.array_equal(oracle_output(layer, x), KERNEL.reference(layer.shape_dict, layer.io(x))[0])


def run_variants(tmp_path: Path, target, cases: int, vector: str, seed: int) -> int:
    """Every tile_n of the `vector` path (compilers taking turns) on drawn layers, each output
    compared with TFLite Micro's. Returns how many variants ran."""
    rng, ran = np.random.default_rng(seed), 0
    tmp_path.mkdir(parents=True, exist_ok=True)
    for index in range(cases):
        layer, io, want = layer_case(tmp_path, rng, drawn_case(rng, index * 5 + seed))
        shape = KERNEL.parse_shape(layer.shape_dict)
        space = KERNEL.space(target, shape)
        configs = [c for c in space if c["vector"] == vector and c["opt"] == "O2"]
        if not configs:  # adj_x=1 with adj_y=1: Helium has no form for it (plain C only)
            assert vector == "mve" and shape["adj_x"] == shape["adj_y"] == 1
            continue
        ran += check_variants_against(KERNEL, target, shape, space, io, want, configs, index,
                                      tmp_path / f"w{index}", layer.shape_text)
    return ran


def test_plain_c_on_the_host_is_tflite_micro(tmp_path, host):
    assert run_variants(tmp_path, host, 2, "c", seed=1) >= 2


def test_helium_on_the_m55_is_tflite_micro(tmp_path, m55):
    assert run_variants(tmp_path, m55, 2, "mve", seed=2) >= 2


@pytest.mark.slow
def test_plain_c_and_helium_on_the_m55_over_more_layers(tmp_path, m55):
    assert run_variants(tmp_path / "mve", m55, 12, "mve", seed=3) + run_variants(tmp_path / "c", m55, 4, "c", seed=4) >= 16


def test_helium_takes_the_dot_form_where_both_operands_run_along_k(m55):
    dot = KERNEL.parse_shape("batch=1,lhs_batches=1,rhs_batches=1,m=4,n=8,k=32,adj_x=0,adj_y=1")
    columns = KERNEL.parse_shape("batch=1,lhs_batches=1,rhs_batches=1,m=4,n=8,k=32,adj_x=0,adj_y=0")
    assert {c["tile_n"] for c in KERNEL.space(m55, dot) if c["vector"] == "mve"} == {1, 2, 4}
    assert {c["tile_n"] for c in KERNEL.space(m55, columns) if c["vector"] == "mve"} == {4, 8}
    both = KERNEL.parse_shape("batch=1,lhs_batches=1,rhs_batches=1,m=4,n=8,k=32,adj_x=1,adj_y=1")
    assert {c["vector"] for c in KERNEL.space(m55, both)} == {"c"}


def _refused(tmp_path, tensors, adj_y=False) -> str:
    op = Operator(0, "BATCH_MATMUL", (0, 1), (2,), "BatchMatMulOptions", (("adjX", False), ("adjY", adj_y)))
    path = tmp_path / "bad.tflite"
    path.write_bytes(build_model(tensors, [op], [i for i in (0, 1) if not tensors[i].constant], [2]))
    with pytest.raises(ModelError) as info:
        load_model(path)
    return str(info.value)


def test_shapes_that_do_not_multiply_or_broadcast_are_refused_naming_the_operator(tmp_path):
    q = Quantization((0.05,), (0,))
    message = _refused(tmp_path, [Tensor(0, "a", (2, 3, 4), "int8", q), Tensor(1, "b", (3, 4, 5), "int8", q),
                                  Tensor(2, "c", (3, 3, 5), "int8", q)])
    assert "operator 0 (BATCH_MATMUL)" in message and "do not broadcast" in message
    message = _refused(tmp_path, [Tensor(0, "a", (3, 4), "int8", q), Tensor(1, "b", (5, 5), "int8", q),
                                  Tensor(2, "c", (3, 5), "int8", q)])
    assert "operator 0 (BATCH_MATMUL)" in message and "[3 x 4] times [5 x 5]" in message


def _fc(index, x, w, b, y):
    return Operator(index, "FULLY_CONNECTED", (x, w, b), (y,), "FullyConnectedOptions", (("keepNumDims", True),))


def attention(path: Path) -> Path:
    """One attention head over 6 tokens of 8 channels: Q, K and V by dense layers, the scores
    Q K^T (BATCH_MATMUL, adj_y), SOFTMAX over the keys, the probabilities times V
    (BATCH_MATMUL), an output projection, and a residual ADD."""
    rng = np.random.default_rng(11)
    t, d = 6, 8
    act = lambda i, name, shape, s, z: Tensor(i, name, shape, "int8", Quantization((s,), (z,)))  # noqa: E731
    tensors = [act(0, "x", (1, t, d), 0.05, -4)]
    ops = []
    for name, scale, zero in (("q", 0.06, 3), ("k", 0.07, -5), ("v", 0.05, 1)):
        w, b = len(tensors), len(tensors) + 1
        tensors += [constant(w, f"w{name}", rng.integers(-127, 128, (d, d), dtype=np.int8), Quantization((0.01,) * d, (0,) * d)),
                    constant(b, f"b{name}", rng.integers(-300, 300, d, dtype=np.int32), Quantization((0.0005,) * d, (0,) * d)),
                    act(b + 1, name, (1, t, d), scale, zero)]
        ops.append(_fc(len(ops), 0, w, b, b + 1))
    q, k, v = 3, 6, 9
    tensors += [act(10, "scores", (1, t, t), 0.12, 10), act(11, "probs", (1, t, t), 1 / 256, -128),
                act(12, "mixed", (1, t, d), 0.04, -2)]
    ops += [Operator(3, "BATCH_MATMUL", (q, k), (10,), "BatchMatMulOptions", (("adjX", False), ("adjY", True))),
            Operator(4, "SOFTMAX", (10,), (11,), "SoftmaxOptions", (("beta", 1.0),)),
            Operator(5, "BATCH_MATMUL", (11, v), (12,), "BatchMatMulOptions", (("adjX", False), ("adjY", False)))]
    tensors += [constant(13, "wo", rng.integers(-127, 128, (d, d), dtype=np.int8), Quantization((0.01,) * d, (0,) * d)),
                constant(14, "bo", rng.integers(-300, 300, d, dtype=np.int32), Quantization((0.0004,) * d, (0,) * d)),
                act(15, "projected", (1, t, d), 0.05, 0), act(16, "output", (1, t, d), 0.08, -1)]
    ops += [_fc(6, 12, 13, 14, 15), Operator(7, "ADD", (0, 15), (16,), "AddOptions")]
    path.write_bytes(build_model(tensors, ops, [0], [16]))
    return path


@pytest.mark.parametrize("target_name", [pytest.param("host", marks=pytest.mark.slow), "cortex-m55"])
def test_an_attention_block_exports_and_verifies_bit_exact(tmp_path, target_name, request):
    if target_name != "host":
        request.getfixturevalue("m55")  # the emulator and the Arm compilers
    target = get_target(target_name)
    model = attention(tmp_path / "attention.tflite")
    kernels = [layer.kernel for layer in load_model(model).layers]
    assert kernels[3] == kernels[5] == "bmm_s8" and kernels[4] is None
    export_model(model, target, None, tmp_path / "m")
    outcome = verify_model(tmp_path / "m", target, 3, layers=True)
    assert outcome.ok, [i.problem for i in outcome.inferences]
