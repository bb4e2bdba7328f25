"""SPLIT, SPLIT_V, UNPACK and PACK (app/model/ops/split.py): the numpy reference is TFLite
Micro's output bit for bit over every axis (negative too), odd sizes, one output, int8
extremes, int16 and outputs quantised unlike the input (TFLite Micro copies the bytes); the
generated C is too, on the host and on the M55 in QEMU; whole models with them (an unrolled
LSTM-like cell: UNPACK a sequence, SPLIT the gates, PACK the steps) export and verify, layer
by layer, against TFLite Micro."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetune.model import ModelError
from edgetune.model.builder import build_model, constant
from edgetune.model.export import export_model
from edgetune.model.graph import Operator, Quantization, Tensor
from edgetune.model.memory_plan import check_plan
from edgetune.model.module import schedule
from edgetune.model.operators import operator_params
from edgetune.model.ops import MultiOutput, PackParams, SplitParams
from edgetune.model.verify import verify_model
from edgetune.model import load_model
from edgetune.targets import get_target
from op_checks import activation_tensor, assert_all_same, one_op_graph, run_host_outputs, run_target_outputs
from edgetune.model.oracle import run_tflm

DTYPES = {"int8": np.int8, "int16": np.int16}


def moved(index, shape, dtype="int8", quant=(0.05, 3)) -> Tensor:
    if dtype == "int16":
        quant = (quant[0], 0)  # TFLite's int16 activations are symmetric
    return Tensor(index, f"t{index}", tuple(shape), dtype, Quantization((float(np.float32(quant[0])),), (int(quant[1]),)))


def _axis(value) -> Tensor:
    return constant(90, "axis", np.asarray(value, dtype=np.int32))


def split_case(tmp_path, op, shape, axis, sizes, dtype="int8", out_quant=(0.05, 3)):
    """A one-operator SPLIT (sizes equal), SPLIT_V (any sizes) or UNPACK (sizes all 1) model."""
    rank, a = len(shape), axis % len(shape)
    out_shapes = [tuple(d for i, d in enumerate(shape) if i != a) if op == "UNPACK" else
                  tuple(s if i == a else d for i, d in enumerate(shape)) for s in sizes]
    outs = [moved(k + 1, s, dtype, out_quant if k % 2 else (0.05, 3)) for k, s in enumerate(out_shapes)]
    x = moved(0, shape, dtype)
    n = len(sizes)
    if op == "SPLIT":
        tensors = [replace_index(_axis(axis), 0), replace_index(x, 1), *(replace_index(t, k + 2) for k, t in enumerate(outs))]
        inputs, options = (0, 1), ("SplitOptions", {"numSplits": n})
    elif op == "SPLIT_V":
        size_splits = list(sizes)
        size_splits[-1] = -1  # the converter's "the rest"
        tensors = [x, *outs, constant(n + 1, "sizes", np.asarray(size_splits, dtype=np.int32)),
                   replace_index(_axis([axis]), n + 2)]
        inputs, options = (0, n + 1, n + 2), ("SplitVOptions", {"numSplits": n})
    else:
        tensors, inputs, options = [x, *outs], (0,), ("UnpackOptions", {"num": n, "axis": axis})
    outputs = tuple(t.index for t in tensors if t.name.startswith("t") and t.index not in inputs)
    assert rank == len(shape)
    return one_op_graph(tmp_path, tensors, op, inputs, outputs, *options)


def replace_index(t: Tensor, index: int) -> Tensor:
    return Tensor(index, t.name if t.constant else f"t{index}", t.shape, t.dtype, t.quantization, t.data, t.signature)


def pack_case(tmp_path, shape, count, axis, dtype="int8", out_quant=(0.05, 3)):
    rank = len(shape) + 1
    a = axis % rank
    out_shape = (*shape[:a], count, *shape[a:])
    tensors = [moved(i, shape, dtype, (0.05 * (i + 1), i - 1)) for i in range(count)]
    tensors.append(moved(count, out_shape, dtype, out_quant))
    return one_op_graph(tmp_path, tensors, "PACK", tuple(range(count)), (count,), "PackOptions",
                        {"valuesCount": count, "axis": axis})


SPLITS = [  # (operator, input shape, axis, sizes)
    ("SPLIT", (1, 24), 1, (8, 8, 8)), ("SPLIT", (3, 5, 6), 0, (1, 1, 1)), ("SPLIT", (3, 5, 6), -1, (3, 3)),
    ("SPLIT", (2, 7, 5, 3), 2, (5,)), ("SPLIT", (2, 4, 5, 3), -3, (2, 2)), ("SPLIT", (9,), 0, (3, 3, 3)),
    ("SPLIT_V", (1, 32), 1, (8, 8, 8, 8)), ("SPLIT_V", (3, 5, 7), 2, (1, 4, 2)), ("SPLIT_V", (3, 5, 7), -2, (2, 3)),
    ("SPLIT_V", (5, 2, 3), 0, (4, 1)), ("SPLIT_V", (2, 3, 3, 5), 3, (5,)),
    ("UNPACK", (3, 5, 7), 0, (1, 1, 1)), ("UNPACK", (3, 5, 7), 1, (1,) * 5), ("UNPACK", (3, 5, 7), -1, (1,) * 7),
    ("UNPACK", (1, 2, 8), 1, (1, 1)), ("UNPACK", (4,), 0, (1,) * 4), ("UNPACK", (2, 1, 3), 1, (1,)),
]
PACKS = [((3, 5), 2, 0), ((3, 5), 3, 1), ((3, 5), 4, -1), ((2, 3, 7), 3, 2), ((1, 8), 2, 1), ((7,), 1, 0),
         ((2, 3, 5), 2, -2)]


def _draw(rng, shape, dtype, edge):
    info = np.iinfo(DTYPES[dtype])
    if edge == "extreme":
        return rng.choice(np.array([info.min, info.max], dtype=DTYPES[dtype]), size=shape)
    return rng.integers(info.min, info.max + 1, size=shape, dtype=DTYPES[dtype])


def _split_id(case):
    return f"{case[0]}-{'x'.join(map(str, case[1]))}-axis{case[2]}-{len(case[3])}"


@pytest.mark.matrix  # the default tier: each case and each type once (docs/testing.md)
@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize("case", SPLITS, ids=_split_id)
def test_split_reference_and_host_c_are_tflite_micro(tmp_path, case, dtype):
    op, shape, axis, sizes = case
    rng = np.random.default_rng(len(shape) * 7 + len(sizes))
    data, graph = split_case(tmp_path, op, shape, axis, sizes, dtype, out_quant=(0.3, -100))
    params = operator_params(graph, graph.operators[0])
    assert isinstance(params, SplitParams) and isinstance(params, MultiOutput) and params.op == op
    assert params.n_outputs == len(sizes) and params.item_bytes == np.dtype(DTYPES[dtype]).itemsize
    for edge in ("random", "extreme"):
        x = _draw(rng, shape, dtype, edge)
        want = run_tflm(data, [x], n_outputs=len(sizes))
        assert [w.shape for w in want] == [tuple(s[:-1]) if dtype == "int16" else s for s in params.output_shapes]
        assert_all_same(f"{op} reference ({edge})", list(params.outputs(x)), want)
        if edge == "random":
            assert_all_same(f"{op} C on the host", run_host_outputs(params, [x], tmp_path / "c"), want)


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize("shape, count, axis", PACKS, ids=lambda v: str(v).replace(" ", ""))
def test_pack_reference_and_host_c_are_tflite_micro(tmp_path, shape, count, axis, dtype):
    rng = np.random.default_rng(count * 11 + len(shape))
    data, graph = pack_case(tmp_path, shape, count, axis, dtype, out_quant=(0.7, 50))
    params = operator_params(graph, graph.operators[0])
    assert isinstance(params, PackParams) and params.n_outputs == 1
    for edge in ("random", "extreme"):
        xs = [_draw(rng, shape, dtype, edge) for _ in range(count)]
        want = run_tflm(data, xs)
        assert_all_same(f"PACK reference ({edge})", list(params.outputs(*xs)), want)
        if edge == "random":
            assert_all_same("PACK C on the host", run_host_outputs(params, xs, tmp_path / "c"), want)


def test_the_references_move_values():
    """Guards the tests above: against numpy's own split, stack and the axis dropped."""
    x = np.arange(105, dtype=np.int64).astype(np.int8).reshape(3, 5, 7)
    split = SplitParams(0, (3, 5, 7), 2, (1, 4, 2), False, 1)
    assert all(np.array_equal(a, b) for a, b in zip(split.reference(x), np.split(x, [1, 5], axis=2)))
    unpack = SplitParams(0, (3, 5, 7), 1, (1,) * 5, True, 1)
    assert all(np.array_equal(a, x[:, k, :]) for k, a in enumerate(unpack.reference(x)))
    pack = PackParams(0, (3, 5, 7), 2, 1, 1)
    assert np.array_equal(pack.reference(x, -x), np.stack([x, -x], axis=1))
    with pytest.raises(TypeError, match="output_shapes"):
        unpack.output_shape  # noqa: B018 (several outputs have no one shape)


def test_c_on_the_m55_is_tflite_micro(tmp_path, m55):
    """One of each operator (and an int16 SPLIT_V), Helium copies of runs shorter and longer
    than 16 bytes, built with the M55's compiler and run in QEMU."""
    rng = np.random.default_rng(28)
    for part in "abcd":
        (tmp_path / part).mkdir()
    cases = [split_case(tmp_path / "a", "SPLIT", (2, 4, 5, 3), -3, (2, 2)),
             split_case(tmp_path / "b", "SPLIT_V", (3, 5, 7), 2, (1, 4, 2), "int16"),
             split_case(tmp_path / "c", "UNPACK", (3, 5, 7), -1, (1,) * 7), pack_case(tmp_path / "d", (2, 3, 7), 3, 2)]
    for n, (data, graph) in enumerate(cases):
        params = operator_params(graph, graph.operators[0])
        dtype = "int16" if params.item_bytes == 2 else "int8"
        xs = [_draw(rng, shape if dtype == "int8" else shape[:-1], dtype, "extreme" if n % 2 else "random")
              for shape in params.input_shapes]
        want = run_tflm(data, xs, n_outputs=params.n_outputs)
        assert "vstrbq_p_s8" in params.render("et_op", target=m55)  # the Helium copy is what runs
        got = run_target_outputs(params, m55, xs, tmp_path / f"m55-{n}")
        assert_all_same(f"{params.op} C on the M55", got, want)


def test_plain_c_on_the_m4_is_tflite_micro(tmp_path, m4):
    """The plain C (no Helium there) of a SPLIT_V and a PACK, built for the M4 and run in QEMU."""
    rng = np.random.default_rng(4)
    for part in "ab":
        (tmp_path / part).mkdir()
    for n, (data, graph) in enumerate((split_case(tmp_path / "a", "SPLIT_V", (3, 5, 7), -2, (2, 3)),
                                       pack_case(tmp_path / "b", (3, 5), 3, 1))):
        params = operator_params(graph, graph.operators[0])
        xs = [_draw(rng, shape, "int8", "random") for shape in params.input_shapes]
        want = run_tflm(data, xs, n_outputs=params.n_outputs)
        assert "arm_mve" not in params.render("et_op", target=m4)
        assert_all_same(f"{params.op} C on the M4", run_target_outputs(params, m4, xs, tmp_path / f"m4-{n}"), want)


@pytest.mark.parametrize("make, culprit", [
    (lambda p: split_case(p, "SPLIT", (3, 6), 1, (3, 3)), None),
    (lambda p: _swap(split_case(p, "SPLIT", (3, 6), 1, (3, 3)), num=3), r"num_splits is 3 for 2 outputs"),
    (lambda p: _unequal_split(p), r"not equal parts"),
    (lambda p: _axis_input(p), r"axis .* must be one constant value"),
    (lambda p: _mixed_types(p), r"tensors are of types int16, int8"),
    (lambda p: _swap(split_case(p, "UNPACK", (3, 5), 0, (1, 1, 1)), num=2), r"num is 2 for 3 outputs"),
    (lambda p: split_case(p, "SPLIT_V", (3, 5), 4, (2, 3)), r"axis 4 is outside a 2-D tensor"),
])
def test_refusals_name_the_operator(tmp_path, make, culprit):
    data, graph = make(tmp_path)
    if culprit is None:  # the well-formed case the others break
        operator_params(graph, graph.operators[0])
        return
    with pytest.raises(ModelError, match=rf"operator 0 \((SPLIT|SPLIT_V|UNPACK|PACK)\): .*{culprit}"):
        operator_params(graph, graph.operators[0])


def _swap(case, **options):
    """The same graph, the operator's options replaced."""
    data, graph = case
    op = graph.operators[0]
    key = "numSplits" if op.op != "UNPACK" else "num"
    changed = dict(op.options, **{key: options["num"]})
    return data, _with_op(graph, Operator(0, op.op, op.inputs, op.outputs, op.options_type, tuple(changed.items())))


def _with_op(graph, op):
    from dataclasses import replace
    return replace(graph, operators=(op,))


def _unequal_split(tmp_path):
    tensors = [_axis(1), replace_index(moved(0, (3, 6)), 1), replace_index(moved(0, (3, 2)), 2),
               replace_index(moved(0, (3, 4)), 3)]
    return one_op_graph(tmp_path, tensors, "SPLIT", (0, 1), (2, 3), "SplitOptions", {"numSplits": 2})


def _axis_input(tmp_path):
    axis = Tensor(0, "axis", (1,), "int32", None)
    tensors = [axis, replace_index(moved(0, (3, 6)), 1), replace_index(moved(0, (3, 3)), 2),
               replace_index(moved(0, (3, 3)), 3)]
    return one_op_graph(tmp_path, tensors, "SPLIT", (0, 1), (2, 3), "SplitOptions", {"numSplits": 2})


def _mixed_types(tmp_path):
    tensors = [moved(0, (3, 5)), moved(1, (3, 5), "int16"), moved(2, (3, 2, 5))]
    return one_op_graph(tmp_path, tensors, "PACK", (0, 1), (2,), "PackOptions", {"valuesCount": 2, "axis": 1})


# --- whole models ----------------------------------------------------------------------------
class Net:
    """A small model being written: tensors appended, operators in order."""

    def __init__(self):
        self.tensors: list[Tensor] = []
        self.ops: list[Operator] = []

    def act(self, shape, scale, zero) -> int:
        self.tensors.append(activation_tensor(len(self.tensors), shape, scale, zero))
        return len(self.tensors) - 1

    def const(self, array, quant=None) -> int:
        self.tensors.append(constant(len(self.tensors), f"c{len(self.tensors)}", array, quant))
        return len(self.tensors) - 1

    def op(self, name, inputs, outputs, options_type="", **options) -> None:
        self.ops.append(Operator(len(self.ops), name, tuple(inputs), tuple(outputs), options_type,
                                 tuple(options.items())))

    def gates(self, source: int, n: int, width: int, split_v: bool) -> list[int]:
        """`source` cut into n gates along its last axis (SPLIT, or SPLIT_V with sizes)."""
        q = self.tensors[source].quantization
        outs = [self.act((1, width), q.scales[0], q.zero_points[0]) for _ in range(n)]
        if split_v:
            sizes = self.const(np.array([width] * (n - 1) + [-1], dtype=np.int32))
            self.op("SPLIT_V", (source, sizes, self.const(np.array([-1], dtype=np.int32))), outs, "SplitVOptions",
                    numSplits=n)
        else:
            self.op("SPLIT", (self.const(np.array(1, dtype=np.int32)), source), outs, "SplitOptions", numSplits=n)
        return outs

    def write(self, path: Path, inputs, outputs) -> Path:
        path.write_bytes(build_model(self.tensors, self.ops, list(inputs), list(outputs)))
        return path


def _fully_connected(net: Net, source: int, n: int, rng) -> int:
    x = net.tensors[source]
    k, s_in = x.shape[-1], x.quantization.scales[0]
    weights = net.const(rng.integers(-127, 128, size=(n, k), dtype=np.int8), Quantization((0.02,), (0,)))
    bias = net.const(rng.integers(-300, 300, size=n, dtype=np.int32),
                     Quantization((float(np.float32(s_in * np.float32(0.02))),), (0,)))
    out = net.act((1, n), 0.08, -2)
    net.op("FULLY_CONNECTED", (source, weights, bias), (out,), "FullyConnectedOptions")
    return out


def lstm_like(path: Path, steps: int = 2, width: int = 8) -> Path:
    """An unrolled LSTM-like cell as the converter writes one: UNPACK the sequence into steps;
    per step ADD the state, FULLY_CONNECTED to four gates, SPLIT (SPLIT_V on odd steps) them,
    LOGISTIC / TANH, MUL and ADD into the new cell and state; PACK every step's state. Two
    outputs: the packed states and the last cell (a SPLIT's part read by nothing stays in the
    arena: the cell's fourth gate of the last step is an output too)."""
    rng = np.random.default_rng(5)
    net = Net()
    seq, state = net.act((1, steps, width), 0.05, 3), net.act((1, width), 0.04, -5)
    xs = [net.act((1, width), 0.05, 3) for _ in range(steps)]
    net.op("UNPACK", (seq,), xs, "UnpackOptions", num=steps, axis=1)
    h, c, hs = state, state, []
    for t, x in enumerate(xs):
        mixed = net.act((1, width), 0.06, 0)
        net.op("ADD", (x, h), (mixed,), "AddOptions")
        i, f, g, o = net.gates(_fully_connected(net, mixed, 4 * width, rng), 4, width, split_v=t % 2 == 1)
        si, sf, so = (net.act((1, width), 1 / 256, -128) for _ in range(3))
        tg = net.act((1, width), 1 / 128, 0)
        for gate, out in ((i, si), (f, sf), (o, so)):
            net.op("LOGISTIC", (gate,), (out,))
        net.op("TANH", (g,), (tg,))
        kept, new = net.act((1, width), 0.03, 1), net.act((1, width), 0.01, -3)
        net.op("MUL", (sf, c), (kept,), "MulOptions")
        net.op("MUL", (si, tg), (new,), "MulOptions")
        c = net.act((1, width), 0.04, 0)
        net.op("ADD", (kept, new), (c,), "AddOptions")
        tc, h = net.act((1, width), 1 / 128, 0), net.act((1, width), 1 / 128, 0)
        net.op("TANH", (c,), (tc,))
        net.op("MUL", (so, tc), (h,), "MulOptions")
        hs.append(h)
    packed = net.act((1, steps, width), 1 / 128, 0)
    net.op("PACK", hs, (packed,), "PackOptions", valuesCount=steps, axis=1)
    return net.write(path, (seq, state), (packed, c, o))


def split_outputs(path: Path) -> Path:
    """A SPLIT whose parts are the model's outputs themselves, one of them also read by a
    TANH whose output is an output too, and a part nobody reads."""
    net = Net()
    x = net.act((2, 3, 10), 0.05, 3)
    a, b, unused = (net.act((2, 3, w), 0.05, 3) for w in (4, 5, 1))
    net.op("SPLIT_V", (x, net.const(np.array([4, 5, 1], dtype=np.int32)), net.const(np.array(-1, dtype=np.int32))),
           (a, b, unused), "SplitVOptions", numSplits=3)
    t = net.act((2, 3, 4), 1 / 128, 0)
    net.op("TANH", (a,), (t,))
    return net.write(path, (x,), (b, t, a))


def unpack_gate_pack(path: Path) -> Path:
    """All four in a few operators: UNPACK a sequence of three, a LOGISTIC x TANH gate on two
    steps, PACK the gate with the third step, SPLIT the result in halves (both outputs)."""
    net = Net()
    seq = net.act((1, 3, 8), 0.05, 3)
    a, b, c = (net.act((1, 8), 0.05, 3) for _ in range(3))
    net.op("UNPACK", (seq,), (a, b, c), "UnpackOptions", num=3, axis=-2)
    la, tb, gated = net.act((1, 8), 1 / 256, -128), net.act((1, 8), 1 / 128, 0), net.act((1, 8), 0.05, 3)
    net.op("LOGISTIC", (a,), (la,))
    net.op("TANH", (b,), (tb,))
    net.op("MUL", (la, tb), (gated,), "MulOptions")
    packed = net.act((1, 2, 8), 0.05, 3)
    net.op("PACK", (gated, c), (packed,), "PackOptions", valuesCount=2, axis=1)
    low, high = net.act((1, 2, 4), 0.05, 3), net.act((1, 2, 4), 0.05, 3)
    net.op("SPLIT", (net.const(np.array([2], dtype=np.int32)), packed), (low, high), "SplitOptions", numSplits=2)
    return net.write(path, (seq,), (low, high))


MODELS = {"lstm_like": lstm_like, "split_outputs": split_outputs, "unpack_gate_pack": unpack_gate_pack}


def test_the_module_plans_every_output(tmp_path):
    """Each step writes all its outputs; the memory plan gives each its own bytes (a part read
    by nothing included) and the plan checks clean."""
    model = load_model(lstm_like(tmp_path / "lstm.tflite"))
    steps = schedule(model, "m")
    unpack = next(s for s in steps if s.op == "UNPACK")
    assert len(unpack.outputs) == 2 and unpack.inputs == (model.graph.inputs[0],)
    splits = [s for s in steps if s.op in ("SPLIT", "SPLIT_V")]
    assert [s.op for s in splits] == ["SPLIT", "SPLIT_V"] and all(len(s.outputs) == 4 for s in splits)
    assert splits[0].inputs == (model.graph.operators[splits[0].index].inputs[1],)  # the values, not the axis
    from edgetune.model.module import memory_plan
    from edgetune.model.memory_plan import TensorLife
    plan = memory_plan(model, steps)
    lives = [TensorLife(a.tensor, a.nbytes, a.first, a.last) for a in plan.allocations]
    in_place = {a.tensor: a.shares for a in plan.allocations if a.shares is not None}  # ADD on a dying input
    assert check_plan(plan, lives, in_place) == []
    assert not set(in_place) & {t for s in splits for t in s.outputs}  # no part is put on the input
    planned = {a.tensor for a in plan.allocations}
    assert set(splits[0].outputs) <= planned


@pytest.mark.parametrize("name, target_name", [
    *(pytest.param("lstm_like", t, marks=pytest.mark.slow) for t in ("host", "cortex-m55")),  # 12 s and 20 s
    ("split_outputs", "host"), pytest.param("split_outputs", "cortex-m55", marks=pytest.mark.slow),
    ("unpack_gate_pack", "host"), ("unpack_gate_pack", "cortex-m55")])
def test_model_exports_and_verifies_bit_exact(tmp_path, name, target_name, request):
    if target_name != "host":
        request.getfixturevalue("m55")  # the emulator and the Arm compilers
    target = get_target(target_name)
    model = MODELS[name](tmp_path / f"{name}.tflite")
    export_model(model, target, None, tmp_path / "m")
    outcome = verify_model(tmp_path / "m", target, 1 if name == "lstm_like" else 3, layers=True)
    assert outcome.ok, (outcome.layer_problem, [i.problem for i in outcome.inferences])
    assert len(outcome.inferences) == (2 if name == "lstm_like" else 4)  # and the saturating input


def test_an_operator_of_several_outputs_is_measured_alone_for_place(tmp_path, m55):
    """`place` measures a library operator alone (app/model/op_measure.py): a one-operator
    model of the SPLIT, exported and verified on the M55, all four outputs checked."""
    from edgetune.model.op_measure import measure_library_op

    model = load_model(lstm_like(tmp_path / "lstm.tflite"))
    layer = next(layer for layer in model.layers if layer.op == "SPLIT")
    count = measure_library_op(model, layer, m55)
    assert count.value is not None and count.value > 0 and not count.cached, count.why
    assert measure_library_op(model, layer, m55).cached


# --- the converter's models (tests/data/models/zoo, scripts/make_model_zoo.py) ---------------
ZOO = Path(__file__).resolve().parent / "data" / "models" / "zoo"
QUICK = ("op_split", "op_split_v", "op_pack")  # a few operators each
RECURRENT = ("lstm_unrolled", "gru_unrolled")  # over 100 operators each: slow


@pytest.mark.parametrize("name, target_name", [
    ("op_split", "host"), *(pytest.param(name, "host", marks=pytest.mark.slow) for name in QUICK[1:]),  # 6 s each
    *(pytest.param(name, "cortex-m55", marks=pytest.mark.slow) for name in QUICK),  # about 20 s each
    *(pytest.param(name, t, marks=pytest.mark.slow) for name in RECURRENT for t in ("host", "cortex-m55"))])
def test_the_zoos_models_with_them_verify_bit_exact(tmp_path, name, target_name, request):
    """The converter's SPLIT, SPLIT_V and PACK models and its unrolled LSTM and GRU (UNPACK,
    SPLIT into gates; the GRU's STRIDED_SLICEs: test_ops_strided_slice.py) export and verify,
    every operator checked."""
    if target_name != "host":
        request.getfixturevalue("m55")
    target = get_target(target_name)
    export_model(ZOO / f"{name}.tflite", target, None, tmp_path / "m")
    outcome = verify_model(tmp_path / "m", target, 1, layers=True)
    assert outcome.ok, (outcome.layer_problem, [i.problem for i in outcome.inferences])
