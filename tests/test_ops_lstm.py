"""UNIDIRECTIONAL_SEQUENCE_LSTM in int8 (app/model/ops/lstm.py) bit for bit with TFLite Micro's
integer kernel: drawn one-operator models (odd sizes, one to three sequences, batch- and
time-major, zero points, cell state scales from 2^-15 to 2^-9, a cell clip) on random inputs
and the int8 extremes, by the numpy reference, the C on the host and on the M55 in QEMU; the
variants TFLite Micro's kernel refuses (peephole, projection, layer normalisation, CIFG) are
refused in one line naming the operator; the 16x8 form (int16 activations, int64 biases) by
the reference, the host and the M55 too; the converter's fused LSTM (the zoo's lstm_fused)
verified whole on the M55."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.model import ModelError, load_model
from edgetune.model.builder import build_model, constant
from edgetune.model.export import export_model
from edgetune.model.graph import Operator, Quantization, Tensor, read_graph
from edgetune.model.module import schedule
from edgetune.model.operators import operator_params
from edgetune.model.oracle import run_tflm
from edgetune.model.ops.base import WithConstants
from edgetune.targets import get_target

from int16_models import f32, run_host_typed, run_target_typed
from op_checks import assert_same

ZOO = Path(__file__).resolve().parent / "data" / "models" / "zoo"
TANH, RELU = 4, 1


@dataclass(frozen=True)
class Lstm:
    """A drawn LSTM's geometry and quantisation."""
    batch: int = 1
    steps: int = 5
    n_input: int = 3
    n_state: int = 7
    time_major: bool = False
    zero_in: int = 3
    zero_hidden: int = -5
    cell_power: int = -11
    clip: float = 0.0
    s_in: float = 0.05
    s_hidden: float = 0.01

    @property
    def input_shape(self) -> tuple[int, int, int]:
        sequence = (self.steps, self.batch) if self.time_major else (self.batch, self.steps)
        return (*sequence, self.n_input)


def lstm_model(rng: np.random.Generator, g: Lstm, extra: dict[int, Tensor] | None = None,
               dtype: str = "int8", activation: int = TANH, drop: tuple[int, ...] = (), bias: str = "") -> bytes:
    """One UNIDIRECTIONAL_SEQUENCE_LSTM over drawn int8 weights (per-tensor scales, zero point
    0) and biases (int32 for int8 activations, int64 for int16 unless `bias` says), as the
    converter writes one; `extra` adds optional inputs (a variant's tensors), `drop` leaves
    inputs out (CIFG)."""
    tensors: list[Tensor] = []

    def add(t: Tensor) -> int:
        tensors.append(Tensor(len(tensors), t.name, t.shape, t.dtype, t.quantization, t.data, t.signature,
                              t.variable))
        return len(tensors) - 1

    slots = [-1] * 24
    slots[0] = add(Tensor(0, "x", g.input_shape, dtype, Quantization((f32(g.s_in),), (g.zero_in,))))
    scales = []
    for k in range(8):
        scales.append(f32(rng.uniform(0.002, 0.03)))
        w = rng.integers(-127, 128, size=(g.n_state, g.n_input if k < 4 else g.n_state), dtype=np.int8)
        slots[1 + k] = add(constant(0, f"w{k}", w, Quantization((scales[-1],), (0,))))
    for k in range(4):
        b = rng.integers(-3000, 3000, size=g.n_state).astype(bias or ("int64" if dtype == "int16" else "int32"))
        slots[12 + k] = add(constant(0, f"b{k}", b, Quantization((f32(g.s_in * scales[k]),), (0,))))
    hidden_q = Quantization((f32(g.s_hidden),), (g.zero_hidden,))
    slots[18] = add(Tensor(0, "hidden", (g.batch, g.n_state), dtype, hidden_q, variable=True))
    slots[19] = add(Tensor(0, "cell", (g.batch, g.n_state), "int16", Quantization((2.0 ** g.cell_power,), (0,)),
                           variable=True))
    for position, t in (extra or {}).items():
        slots[position] = add(t)
    for position in drop:
        slots[position] = -1
    out_shape = (*g.input_shape[:2], g.n_state)
    y = add(Tensor(0, "y", out_shape, dtype, hidden_q))
    options = (("fusedActivationFunction", activation), ("cellClip", g.clip), ("timeMajor", g.time_major))
    op = Operator(0, "UNIDIRECTIONAL_SEQUENCE_LSTM", tuple(slots), (y,), "UnidirectionalSequenceLSTMOptions", options)
    return build_model(tensors, [op], [slots[0]], [y])


def read(tmp_path: Path, data: bytes):
    path = tmp_path / "lstm.tflite"
    path.write_bytes(data)
    graph = read_graph(path)
    op = graph.operators[0]
    params = operator_params(graph, op)
    constants = [graph.tensors[op.inputs[p]].array() for p in params.input_positions[1:]]
    return params, constants


def draw(rng: np.random.Generator, shape, edge: str, dtype: str = "int8") -> np.ndarray:
    info = np.iinfo(dtype)
    if edge == "extreme":
        return rng.choice(np.array([info.min, info.max], dtype=dtype), size=shape)
    return rng.integers(info.min, info.max + 1, size=shape, dtype=dtype)


def drawn(rng: np.random.Generator, n: int) -> Lstm:
    return Lstm(batch=int(rng.integers(1, 4)), steps=int(rng.integers(1, 10)), n_input=int(rng.integers(1, 14)),
                n_state=int(rng.integers(1, 14)), time_major=bool(n % 2), zero_in=int(rng.integers(-128, 128)),
                zero_hidden=int(rng.integers(-40, 40)), cell_power=int(rng.integers(-15, -8)),
                clip=(0.0, 0.75)[n % 3 == 2], s_in=float(rng.uniform(0.002, 0.1)), s_hidden=float(rng.uniform(0.004, 0.03)))


def test_the_reference_is_tflite_micros_over_drawn_lstms(tmp_path):
    """12 drawn LSTMs, each on a random input and one of only -128 and 127."""
    rng = np.random.default_rng(28)
    for n in range(12):
        g = drawn(rng, n)
        params, constants = read(tmp_path, data := lstm_model(rng, g))
        assert params.input_shapes[0] == g.input_shape and len(constants) == 8
        assert params.cell_clip == min(int(g.clip / 2.0 ** g.cell_power), 32767)
        for edge in ("random", "extreme"):
            x = draw(rng, g.input_shape, edge)
            (want,) = run_tflm(data, [x])
            assert_same(f"{g}, {edge}", params.reference(x, *constants), want)


@pytest.mark.parametrize("power", [-12.5, -9.7])
def test_a_cell_scale_not_a_power_of_two_is_taken_as_tflite_micro_takes_it(tmp_path, power):
    """TFLite Micro's tanh of the cell state reads its scale's log2 rounded in float32 (CheckedLog2,
    halves away from zero), its products the scale itself: reference and host C match it."""
    rng = np.random.default_rng(11)
    g = Lstm(batch=2, steps=5, n_input=6, n_state=5, cell_power=power, clip=0.4)
    data = lstm_model(rng, g)
    params, constants = read(tmp_path, data)
    for edge in ("random", "extreme"):
        x = draw(rng, g.input_shape, edge)
        (want,) = run_tflm(data, [x])
        assert_same(f"reference, {edge}", params.reference(x, *constants), want)
    assert_same("C on the host", run_host_typed(baked(params, constants), [x], want.shape, "int8", tmp_path / "host"),
                want)


def test_the_hidden_state_is_not_saturated_everywhere_in_these_draws(tmp_path):
    """The drawn weights give hidden states across the int8 range, not only their clamps
    (an oracle test of clamped values would check little)."""
    rng = np.random.default_rng(5)
    g = Lstm(steps=6, n_input=9, n_state=11, s_in=0.01, s_hidden=0.008)
    params, constants = read(tmp_path, lstm_model(rng, g))
    y = params.reference(draw(rng, g.input_shape, "random"), *constants)
    assert len(np.unique(y)) > 30 and np.mean((y == -128) | (y == 127)) < 0.5


def baked(params, constants) -> WithConstants:
    """The LSTM with its weights as constant arrays, a function of the input and the output
    (the tuning harness takes at most 8 buffers)."""
    return WithConstants(params, dict(enumerate(constants, start=1)))


def test_the_c_is_tflite_micros_on_the_host(tmp_path):
    rng = np.random.default_rng(3)
    for n, g in enumerate((Lstm(batch=2, steps=7, n_input=13, n_state=9, time_major=True, clip=0.5),
                           Lstm(batch=3, steps=4, n_input=5, n_state=17, zero_in=-128, zero_hidden=12, cell_power=-15),
                           Lstm(steps=9, n_input=1, n_state=1, cell_power=-9))):
        data = lstm_model(rng, g)
        params, constants = read(tmp_path, data)
        for edge in ("random", "extreme"):
            x = draw(rng, g.input_shape, edge)
            (want,) = run_tflm(data, [x])
            got = run_host_typed(baked(params, constants), [x], want.shape, "int8", tmp_path / f"host{n}{edge}")
            assert_same(f"C on the host, {g}, {edge}", got, want)


@pytest.mark.parametrize("g", [
    Lstm(batch=2, steps=6, n_input=11, n_state=13, zero_in=-7, zero_hidden=9, clip=0.6),
    Lstm(batch=1, steps=5, n_input=37, n_state=20, time_major=True, cell_power=-15, s_in=0.004),
    Lstm(batch=3, steps=3, n_input=16, n_state=3, zero_in=127, zero_hidden=-40, cell_power=-9, s_hidden=0.03)])
def test_the_c_is_tflite_micros_on_the_m55(tmp_path, m55, g):
    """The Helium path (four units' dot products at once and a lone unit's, tails of 16 inputs
    and of 4 units, every cell tanh scaling) on a random input and one of the extremes."""
    rng = np.random.default_rng(g.n_input)
    data = lstm_model(rng, g)
    params, constants = read(tmp_path, data)
    for edge in ("random", "extreme"):
        x = draw(rng, g.input_shape, edge)
        (want,) = run_tflm(data, [x])
        got = run_target_typed(baked(params, constants), get_target("cortex-m55"), [x], want.shape, "int8",
                               tmp_path / f"m55{edge}")
        assert_same(f"C on the M55, {edge}", got, want)


def drawn16(rng: np.random.Generator, n: int) -> Lstm:
    """A drawn 16x8 LSTM: zero points 0, int16 scales (a typical |x| of 2^14 near 1)."""
    return Lstm(batch=int(rng.integers(1, 3)), steps=int(rng.integers(1, 8)), n_input=int(rng.integers(1, 20)),
                n_state=int(rng.integers(1, 14)), time_major=bool(n % 2), zero_in=0, zero_hidden=0,
                cell_power=int(rng.integers(-15, -9)), clip=(0.0, 0.75)[n % 3 == 2],
                s_in=float(rng.uniform(2e-5, 4e-4)), s_hidden=float(rng.uniform(2e-5, 1e-4)))


def test_the_16x8_lstm_is_tflite_micros_by_the_reference_the_host_and_the_m55(tmp_path, m55):
    """int16 activations, int8 weights, int64 biases (TFLite Micro's int16 FullyConnected with
    its 64-bit multiply): 8 drawn LSTMs by the reference on random and extreme inputs; two in
    C on the host and on the M55 (four units' VMLALDAVA and a lone unit's)."""
    rng = np.random.default_rng(16)
    for n in range(8):
        g = drawn16(rng, n)
        data = lstm_model(rng, g, dtype="int16")
        params, constants = read(tmp_path, data)
        assert params.sixteen and params.input_ctypes[0] == "int16_t" and params.output_ctype == "int16_t"
        for edge in ("random", "extreme"):
            x = draw(rng, g.input_shape, edge, "int16")
            (want,) = run_tflm(data, [x])
            assert want.dtype == np.int16
            assert_same(f"{g}, {edge}", params.reference(x, *constants), want)
    for n, g in enumerate((Lstm(batch=2, steps=4, n_input=19, n_state=6, zero_in=0, zero_hidden=0, s_in=1e-4,
                                s_hidden=5e-5, clip=0.5),
                           Lstm(steps=5, n_input=5, n_state=9, time_major=True, zero_in=0, zero_hidden=0, s_in=3e-4,
                                s_hidden=3e-5, cell_power=-14))):
        data = lstm_model(rng, g, dtype="int16")
        params, constants = read(tmp_path, data)
        x = draw(rng, g.input_shape, "random", "int16")
        (want,) = run_tflm(data, [x])
        assert_same("C on the host", run_host_typed(baked(params, constants), [x], want.shape, "int16",
                                                    tmp_path / f"host16_{n}"), want)
        assert_same("C on the M55", run_target_typed(baked(params, constants), get_target("cortex-m55"), [x],
                                                     want.shape, "int16", tmp_path / f"m55_16_{n}"), want)


def _refusal(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "variant.tflite"
    path.write_bytes(data)
    with pytest.raises(ModelError) as info:
        schedule(load_model(path), "m")
    message = str(info.value)
    assert "\n" not in message and "operator 0 (UNIDIRECTIONAL_SEQUENCE_LSTM)" in message, message
    return message


@pytest.mark.parametrize("variant, positions, shape, named", [
    ("peephole", (9, 10, 11), (7,), "peephole (cell-to-gate) weights (inputs 9, 10, 11)"),
    ("projection", (16,), (7, 7), "a projection (inputs 16)"),
    ("layer norm", (20, 21, 22, 23), (7,), "layer normalisation (inputs 20, 21, 22, 23)")])
def test_the_variants_tflite_micro_refuses_are_refused_naming_them(tmp_path, variant, positions, shape, named):
    rng = np.random.default_rng(6)
    extra = {p: constant(0, f"v{p}", np.ones(shape, np.int16 if len(shape) == 1 else np.int8), Quantization((0.01,), (0,)))
             for p in positions}
    message = _refusal(tmp_path, lstm_model(rng, Lstm(), extra=extra))
    assert named in message and "only the plain LSTM" in message, message


def test_a_cifg_lstm_int16_ones_not_as_tflite_micro_reads_them_and_another_cell_activation_are_refused(tmp_path):
    rng = np.random.default_rng(7)
    cifg = _refusal(tmp_path, lstm_model(rng, Lstm(), drop=(1, 5, 12)))
    assert "has no input 1, 5, 12 (a CIFG LSTM has no input gate)" in cifg
    sixteen = _refusal(tmp_path, lstm_model(rng, Lstm(zero_in=0, zero_hidden=0), dtype="int16", bias="int32"))
    assert "must be a constant int64 of 7 values for int16 activations (TFLite Micro reads it so), is int32" in sixteen
    asymmetric = _refusal(tmp_path, lstm_model(rng, Lstm(zero_in=0, zero_hidden=3), dtype="int16"))
    assert "zero point other than 0 (TFLite's 16x8 LSTM is symmetric)" in asymmetric
    (tmp_path / "float.tflite").write_bytes(lstm_model(rng, Lstm(), dtype="float32"))
    with pytest.raises(ModelError, match="is float32, so this is a float model"):  # the model reader's refusal
        load_model(tmp_path / "float.tflite")
    relu = _refusal(tmp_path, lstm_model(rng, Lstm(), activation=RELU))
    assert "the cell gate's activation is not TANH" in relu


def test_the_converters_fused_lstm_verifies_bit_exact_on_the_m55(tmp_path, m55):
    """The zoo's lstm_fused (tf-keras LSTM, one UNIDIRECTIONAL_SEQUENCE_LSTM, then STRIDED_SLICE
    and a dense layer) exported and verified whole in QEMU on its saved inputs, every operator
    too (--layers: the LSTM alone in a model, its state variable, not an input); its layer
    counts its multiply-accumulates (12 steps, 4 gates, 16 units, 10 + 16 inputs)."""
    assert load_model(ZOO / "lstm_fused.tflite").layers[0].macs == 12 * 4 * 16 * (10 + 16)
    with np.load(ZOO / "lstm_fused.npz") as saved:
        inputs = saved["input0"]
    files = []
    for n, x in enumerate(inputs):
        np.save(tmp_path / f"case{n}.npy", x)
        files += ["--input", str(tmp_path / f"case{n}.npy")]
    exported = export_model(ZOO / "lstm_fused.tflite", get_target("cortex-m55"), None, tmp_path / "m")
    module = (tmp_path / "m" / "lstm_fused.c").read_text()
    # Its state is working memory in the arena (scratch planned for its step), no static array.
    call = next(line for line in module.splitlines() if "lstm_fused_op0_unidirectional_sequence_lstm(input" in line)
    assert re.search(r", arena \+ \d+u\);$", call), call
    assert "static int16_t" not in (tmp_path / "m" / "lstm_fused_op0_unidirectional_sequence_lstm.c").read_text()
    graph = read_graph(ZOO / "lstm_fused.tflite")
    assert exported.rendered.plan.scratch[0].nbytes == operator_params(graph, graph.operators[0]).scratch_bytes > 0
    result = CliRunner().invoke(main, ["model", "verify", str(tmp_path / "m"), "--layers", *files])
    assert result.exit_code == 0, result.output
    assert f"{len(inputs)} inferences bit-exact with TFLite Micro, every operator too" in result.output


def test_a_16x8_lstm_model_exports_counting_its_int16_io_in_bytes_and_verifies_on_the_m55(tmp_path, m55):
    """A 16x8 LSTM alone in a model: `model export` counts its int16 input and output in bytes
    (two a value; it counted values), `model verify --layers` is bit-exact on the M55."""
    g = Lstm(steps=6, n_input=9, n_state=12, zero_in=0, zero_hidden=0, s_in=2e-4, s_hidden=5e-5)
    (tmp_path / "l16.tflite").write_bytes(lstm_model(np.random.default_rng(3), g, dtype="int16"))
    runner = CliRunner()
    result = runner.invoke(main, ["model", "export", str(tmp_path / "l16.tflite"), "--target", "cortex-m55",
                                  "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert f"input and output {2 * (6 * 9 + 6 * 12)}" in result.output, result.output
    result = runner.invoke(main, ["model", "verify", str(tmp_path / "m"), "--inputs", "2", "--layers"])
    assert result.exit_code == 0, result.output
    assert "3 inferences bit-exact with TFLite Micro, every operator too" in result.output
