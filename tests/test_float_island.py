"""Float islands (app/model/ops/float_island.py): DEQUANTIZE -> one-input float operators ->
QUANTIZE inside an int8 model, run as one table of 256 results. The table is TFLite Micro's
output bit for bit on every one of the 256 input values, for every float operator the island
runs, alone and chained, over drawn quantisations; its C runs on the host, on the M55 (the
Helium gather) and on the M4 equal to TFLite Micro; chains of another shape are refused
naming the float tensor and the operators in float."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.model import ModelError, load_model
from edgetune.model.builder import build_model
from edgetune.model.graph import Operator, Tensor, read_graph
from edgetune.model.module import schedule
from edgetune.model.operators import operator_params
from edgetune.model.ops.float_island import FLOAT_UNARY, FloatIslandParams
from op_checks import activation_tensor, assert_same, run_host, run_target, tflm

ALL_VALUES = np.arange(-128, 128, dtype=np.int8)


def _float(index: int, shape) -> Tensor:
    return Tensor(index, f"f{index}", tuple(shape), "float32")


def island_model(tmp_path, steps, shape=(1, 256), q_in=(0.05, 3), q_out=(0.02, -5), name="island"):
    """(bytes, path) of a model DEQUANTIZE -> steps -> QUANTIZE on an int8 tensor of `shape`."""
    n = len(steps)
    tensors = [activation_tensor(0, shape, *q_in), *(_float(1 + k, shape) for k in range(n + 1)),
               activation_tensor(n + 2, shape, *q_out)]
    ops = [Operator(0, "DEQUANTIZE", (0,), (1,)),
           *(Operator(1 + k, step, (1 + k,), (2 + k,)) for k, step in enumerate(steps)),
           Operator(n + 1, "QUANTIZE", (n + 1,), (n + 2,))]
    data = build_model(tensors, ops, [0], [n + 2])
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(data)
    return data, path


def island_params(path) -> FloatIslandParams:
    graph = read_graph(path)
    params = operator_params(graph, graph.operators[-1])
    assert isinstance(params, FloatIslandParams)
    return params


def _draws(rng, n):
    """Input and output quantisations a converter gives, plus edges (zero points -128, 127)."""
    yield (0.05, 3), (0.02, -5)
    yield (0.0009, -128), (0.9, 127)
    for _ in range(n):
        yield ((float(np.exp(rng.uniform(np.log(0.002), np.log(0.5)))), int(rng.integers(-128, 128))),
               (float(np.exp(rng.uniform(np.log(0.002), np.log(0.5)))), int(rng.integers(-128, 128))))


@pytest.mark.parametrize("step", list(FLOAT_UNARY))
def test_every_input_value_is_tflite_micro(tmp_path, step):
    """All 256 values (the int8 extremes among them; SQRT, RSQRT and LOG of negative values
    too: NaN, which the table converts as the host oracle does)."""
    rng = np.random.default_rng(len(step))
    for k, (q_in, q_out) in enumerate(_draws(rng, 6)):
        data, path = island_model(tmp_path, [step], q_in=q_in, q_out=q_out)
        params = island_params(path)
        assert_same(f"{step} draw {k} ({q_in} -> {q_out})", params.reference(ALL_VALUES),
                    tflm(data, [ALL_VALUES.reshape(1, 256)]))


@pytest.mark.parametrize("steps", [("NEG", "SIN"), ("SQUARE", "EXP", "NEG"), ("ABS", "SQRT", "COS"), ()])
def test_chains_are_tflite_micro(tmp_path, steps):
    """Several float operators in one island, and none (DEQUANTIZE straight into QUANTIZE)."""
    data, path = island_model(tmp_path, list(steps), q_in=(0.03, -9), q_out=(0.011, 2))
    assert_same(f"{steps}", island_params(path).reference(ALL_VALUES), tflm(data, [ALL_VALUES.reshape(1, 256)]))


def test_the_tables_are_the_functions(tmp_path):
    """Guards the tests above: the table is the float function quantised (within a step), not
    a copy of the input nor saturated."""
    x = (ALL_VALUES.astype(float) - 3) * 0.05
    for step, fn in {"NEG": np.negative, "SIN": np.sin, "SQUARE": np.square, "EXP": np.exp}.items():
        _, path = island_model(tmp_path, [step], q_in=(0.05, 3), q_out=(0.02, -5))
        y = np.array(island_params(path).table())
        real = np.clip(fn(x), (-128 + 5) * 0.02, (127 + 5) * 0.02)
        assert len(set(y.tolist())) > 25, step
        assert np.abs((y + 5) * 0.02 - real).max() <= 0.0201, step


def test_a_model_with_an_island_loads_and_schedules_one_step(tmp_path):
    """The DEQUANTIZE and the float operators run inside the QUANTIZE's table: one step of
    the module, reading the int8 tensor before the island."""
    _, path = island_model(tmp_path, ["NEG", "SIN"], shape=(2, 5, 3))
    model = load_model(path)
    assert dict(model.graph.absorbed) == {0: 3, 1: 3, 2: 3}
    (step,) = schedule(model, "m")
    assert step.op == "QUANTIZE" and step.inputs == (0,) and step.outputs == (4,)


def test_c_on_host_is_tflite_micro(tmp_path):
    rng = np.random.default_rng(7)
    data, path = island_model(tmp_path, ["SIN"], shape=(3, 7, 5), q_in=(0.04, 3), q_out=(1 / 127, 0))
    params = island_params(path)
    x = rng.integers(-128, 128, size=(3, 7, 5), dtype=np.int8)
    want = tflm(data, [x])
    assert_same("C on the host", run_host(params, [x], want.size, tmp_path / "c"), want)
    assert_same("in place", run_host(params, [x], want.size, tmp_path / "p", alias=0), want)


def test_helium_c_on_m55_is_tflite_micro(tmp_path, m55):
    """Every value, in element counts with and without a tail of the 16-lane step."""
    rng = np.random.default_rng(3)
    for elements in (256, 16 * 9 + 7):
        data, path = island_model(tmp_path, ["NEG", "SIN"], shape=(elements,), q_in=(0.03, -9), q_out=(0.008, 1),
                                  name=f"m55_{elements}")
        params = island_params(path)
        source = params.render("et_island", target=m55)
        assert "vldrbq_gather_offset_u8" in source and ("vctp8q" in source) == (elements % 16 != 0)
        x = ALL_VALUES if elements == 256 else rng.integers(-128, 128, size=elements, dtype=np.int8)
        want = tflm(data, [x])
        assert_same(f"{elements} values, Helium", run_target(params, m55, [x], want.shape, tmp_path / f"m{elements}"),
                    want)


def test_c_on_m4_is_tflite_micro(tmp_path, m4):
    data, path = island_model(tmp_path, ["SIN"], q_in=(0.06, 10), q_out=(1 / 128, 0))
    params = island_params(path)
    assert "arm_mve.h" not in params.render("et_island", target=m4)
    want = tflm(data, [ALL_VALUES.reshape(1, 256)])
    assert_same("SIN on the M4", run_target(params, m4, [ALL_VALUES], want.shape, tmp_path / "m4"), want)


def test_an_island_of_two_inputs_is_refused_naming_the_float_tensor(tmp_path):
    """A float ADD of two dequantized tensors depends on two values: no table of 256; refused
    in one line naming the float tensor, its writer and the operators in float."""
    shape = (1, 8)
    tensors = [activation_tensor(0, shape, 0.05, 0), activation_tensor(1, shape, 0.05, 0), _float(2, shape),
               _float(3, shape), _float(4, shape), activation_tensor(5, shape, 0.1, 0)]
    ops = [Operator(0, "DEQUANTIZE", (0,), (2,)), Operator(1, "DEQUANTIZE", (1,), (3,)),
           Operator(2, "ADD", (2, 3), (4,), "AddOptions", ()), Operator(3, "QUANTIZE", (4,), (5,))]
    path = tmp_path / "two.tflite"
    path.write_bytes(build_model(tensors, ops, [0, 1], [5]))
    with pytest.raises(ModelError) as caught:
        load_model(path)
    message = str(caught.value)
    assert "\n" not in message and "tensor 2 (f2) is float32 inside an integer model" in message
    assert "written by operator 0 (DEQUANTIZE)" in message and "ADD at 2" in message
    assert "this one is not such a chain" in message


def test_a_float_operator_the_island_does_not_run_is_refused(tmp_path):
    """A float TANH (TFLite Micro's float kernel, not one an island runs) keeps the model refused."""
    _, path = island_model(tmp_path, ["TANH"])
    with pytest.raises(ModelError, match=r"is float32 inside an integer model.*TANH at 1.*not such a chain"):
        load_model(path)


def test_model_verify_checks_the_island_against_tflite_micro_running_the_chain(tmp_path):
    """`model verify --layers` on the host: the island's QUANTIZE is compared with TFLite Micro
    running the DEQUANTIZE, the float operators and the QUANTIZE on the module's int8 input."""
    from click.testing import CliRunner

    from edgetune.cli import main
    from edgetune.model.export import export_model
    from edgetune.model.verify import operator_model
    from edgetune.targets import get_target

    _, path = island_model(tmp_path, ["NEG", "SIN"], shape=(4, 9))
    model = load_model(path)
    data, inputs = operator_model(model, model.operators[-1])
    assert inputs == [0] and [op.op for op in read_graph_bytes(tmp_path, data).operators] == [
        "DEQUANTIZE", "NEG", "SIN", "QUANTIZE"]
    export_model(path, get_target("host"), None, tmp_path / "m")
    result = CliRunner().invoke(main, ["model", "verify", str(tmp_path / "m"), "--target", "host", "--layers"])
    assert result.exit_code == 0, result.output
    assert "bit-exact with TFLite Micro, every operator too" in result.output


def read_graph_bytes(tmp_path, data: bytes):
    path = tmp_path / "written.tflite"
    path.write_bytes(data)
    return read_graph(path)


def test_an_island_operator_outside_an_island_is_named_among_the_missing(tmp_path):
    """An int8 ABS (TFLite Micro has one) is not a float island's: the one-line refusal
    names it with every other operator edgetune lacks."""
    shape = (1, 8)
    tensors = [activation_tensor(0, shape, 0.05, 0), activation_tensor(1, shape, 0.05, 0),
               activation_tensor(2, shape, 0.05, 0)]
    ops = [Operator(0, "ABS", (0,), (1,)), Operator(1, "CUMSUM", (1,), (2,))]
    path = tmp_path / "abs.tflite"
    path.write_bytes(build_model(tensors, ops, [0], [2]))
    with pytest.raises(ModelError) as caught:
        load_model(path)
    message = str(caught.value)
    assert "ABS outside a float island (edgetune runs it only there) (1x: operator 0)" in message
    assert "CUMSUM (1x: operator 1)" in message and "\n" not in message


def test_an_island_measured_alone_is_its_whole_chain(tmp_path):
    """`model tune`'s plan measures a library operator alone (op_measure.alone_model, the
    operator renumbered 0): an island's QUANTIZE alone is the DEQUANTIZE, the float
    operators and the QUANTIZE, on the int8 input."""
    from edgetune.model.op_measure import alone_model

    _, path = island_model(tmp_path, ["SIN"], shape=(2, 6))
    model = load_model(path)
    ops = read_graph_bytes(tmp_path, alone_model(model, model.layers[-1])).operators
    assert [op.op for op in ops] == ["DEQUANTIZE", "SIN", "QUANTIZE"]
