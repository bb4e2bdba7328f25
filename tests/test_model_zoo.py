"""The model zoo (tests/data/models/zoo/, made by scripts/make_model_zoo.py): small models as
TensorFlow's converter writes them, each with seeded inputs and TFLite Micro's outputs saved
beside it. Every zoo model either runs in edgetune, bit for bit as TFLite Micro, or is refused
in one line naming every operator it needs that the registry lacks, with its count and
indices. What runs is derived from the registry and the model reader, never listed here, so
the test holds as operators are added.

Default tier: the saved outputs are TFLite Micro's (its interpreter run again here, in a child
process where it aborts); each supported model's module, evaluated by the numpy references of
its steps, equals them. Slow tier: each supported model exported and verified on the M55 and
the M4 in QEMU on the saved inputs.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.model import ModelError, load_model
from edgetune.model.export import export_model
from edgetune.model.graph import read_graph
from edgetune.model.module import schedule
from edgetune.model.operators import SUPPORTED
from edgetune.model.oracle import run_tflm, run_tflm_isolated
from edgetune.model.reference import module_reference
from edgetune.model.verify import verify_model
from edgetune.targets import get_target

ZOO = Path(__file__).resolve().parent / "data" / "models" / "zoo"
NAMES = sorted(p.stem for p in ZOO.glob("*.tflite"))


def saved(name: str) -> dict[str, np.ndarray]:
    with np.load(ZOO / f"{name}.npz") as data:
        return {k: data[k] for k in data.files}


def cases(data: dict[str, np.ndarray]) -> list[tuple[list[np.ndarray], list[np.ndarray] | None]]:
    """(inputs, TFLite Micro's outputs or None where its interpreter failed) per saved case."""
    n_in = sum(k.startswith("input") for k in data)
    n_out = sum(k.startswith("output") for k in data)
    return [([data[f"input{k}"][c] for k in range(n_in)],
             [data[f"output{k}"][c] for k in range(n_out)] if data["tflm_ok"][c] else None)
            for c in range(len(data["tflm_ok"]))]


def verdict(name: str):
    """(the model, "") when edgetune runs it (read, and scheduled as export schedules it), or
    (None, the refusal)."""
    try:
        model = load_model(ZOO / f"{name}.tflite")
        schedule(model, "zoo")
    except ModelError as exc:
        return None, str(exc)
    return model, ""


def lacking(name: str) -> dict[str, list[int]]:
    """The operators of the model the registry does not list: name -> indices."""
    found: dict[str, list[int]] = {}
    for op in read_graph(ZOO / f"{name}.tflite").operators:
        if op.op not in SUPPORTED:
            found.setdefault(op.op, []).append(op.index)
    return found


def test_the_zoo_holds_30_models_each_with_saved_outputs_and_a_readme_row():
    readme = (ZOO / "README.md").read_text(encoding="utf-8")
    assert len(NAMES) >= 30
    for name in NAMES:
        data = (ZOO / f"{name}.tflite").read_bytes()
        assert f"| `{name}.tflite` |" in readme and f"| {len(data):,} |" in readme
        assert hashlib.sha256(data).hexdigest() in readme
        assert len(data) < 160_000, f"{name}: {len(data)} bytes; the zoo's models stay small"
        assert cases(saved(name)), name


@pytest.mark.parametrize("name", NAMES)
def test_the_saved_outputs_are_tflite_micros(name):
    """The first case run again in TFLite Micro's interpreter gives the saved outputs; where its
    interpreter aborted or refused the model when the zoo was made, it does so again."""
    data = saved(name)
    (xs, want), = cases(data)[:1]
    why = str(data["tflm_failure"][0])
    model = (ZOO / f"{name}.tflite").read_bytes()
    if want is None:
        assert why.startswith(("aborted", "refused", "wrong")), why
        if not why.startswith("wrong"):
            (case,) = run_tflm_isolated(model, [xs], 1)
            assert case.outputs is None and case.failure
        return
    got = run_tflm(model, xs, n_outputs=len(want))
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g).reshape(-1), w.reshape(-1))


def test_the_isolated_oracle_names_the_input_tflite_micro_aborts_on_and_runs_the_others():
    """softmax_600: 600 nearly equal logits on the input at its zero point make TFLite Micro's
    softmax shift by more than 31 bits, and its interpreter aborts (SIGABRT). The cases before
    and after it still get their outputs."""
    data = saved("softmax_600")
    all_cases = cases(data)
    assert [want is None for _, want in all_cases] == [False, False, False, False, True]
    order = [all_cases[4], all_cases[0], all_cases[1]]  # the aborting case first: the rest run in a new child
    got = run_tflm_isolated((ZOO / "softmax_600.tflite").read_bytes(), [xs for xs, _ in order], 1)
    assert got[0].outputs is None and "aborted (SIGABRT)" in got[0].failure
    for case, (_, want) in zip(got[1:], order[1:]):
        assert case.failure == "" and np.array_equal(case.outputs[0].reshape(-1), want[0].reshape(-1))


@pytest.mark.parametrize("name", NAMES)
def test_each_model_runs_bit_exact_or_is_refused_naming_every_missing_operator(name):
    model, refusal = verdict(name)
    missing = lacking(name)
    if model is None:
        assert "\n" not in refusal and f"{name}.tflite" in refusal, refusal
        for op, indices in missing.items():
            where = f"operator {indices[0]}" if len(indices) == 1 else f"operators {', '.join(map(str, indices))}"
            assert f"{op} ({len(indices)}x: {where})" in refusal, (op, refusal)
        return
    assert not missing
    checked = 0
    for n, (xs, want) in enumerate(cases(saved(name))):
        if want is None:
            continue
        got = module_reference(model, xs)
        for k, (g, w) in enumerate(zip(got, want)):
            assert np.array_equal(np.asarray(g).reshape(-1), w.reshape(-1)), f"{name}: case {n}, output {k}"
        checked += 1
    assert checked, f"{name}: no case TFLite Micro ran"


@pytest.mark.parametrize("name, island", [("attention_layernorm", (10, 11, 12)), ("op_neg", (1, 2, 3)),
                                          ("float_internal", (1, 2, 3)), ("gru_float_part", (99, 100, 101))])
def test_the_float_operators_the_converter_kept_run_as_float_islands(name, island):
    """The converter kept a LayerNorm's NEG, and a SIN, in float (DEQUANTIZE, NEG or SIN,
    QUANTIZE): the model runs, the DEQUANTIZE and the float operator inside the QUANTIZE's
    table (ops/float_island.py), which reads the int8 tensor before the island."""
    model, refusal = verdict(name)
    assert model is not None, refusal
    dequantize, float_op, quantize = island
    assert dict(model.graph.absorbed) == {dequantize: quantize, float_op: quantize}
    (step,) = [s for s in schedule(model, "zoo") if s.index == quantize]
    assert step.inputs == model.operators[dequantize].inputs


def test_model_verify_names_the_input_tflite_micro_aborted_on_and_checks_the_others(tmp_path):
    """`model verify` on softmax_600 with the zoo's inputs, one of which makes TFLite Micro
    abort: not exit 134 but the others checked, and the one named (on the host: no emulator)."""
    files = []
    for n, (xs, _) in enumerate(cases(saved("softmax_600"))):
        files += ["--input", str(tmp_path / f"case{n}.npy")]
        np.save(tmp_path / f"case{n}.npy", xs[0].astype(np.int8))
    target = get_target("host")
    export_model(ZOO / "softmax_600.tflite", target, None, tmp_path / "m")
    result = CliRunner().invoke(main, ["model", "verify", str(tmp_path / "m"), "--target", "host", *files])
    assert result.exit_code == 0, result.output
    assert "case4.npy: TFLite Micro failed on it: its interpreter aborted (SIGABRT): not run, not checked" in result.output
    assert "4 inferences bit-exact with TFLite Micro; 1 input(s) not checked" in result.output


def test_model_verify_with_no_input_tflite_micro_runs_checks_nothing_and_fails(tmp_path, monkeypatch):
    """TFLite Micro failing on every input: nothing is built or run, exit 1 naming the failure."""
    from edgetune.model import verify
    from edgetune.model.oracle import OracleCase

    monkeypatch.setattr(verify, "run_tflm_isolated",
                        lambda data, cases, n: [OracleCase(None, "its interpreter aborted (SIGABRT)")] * len(cases))
    export_model(ZOO / "softmax_600.tflite", get_target("host"), None, tmp_path / "m")
    result = CliRunner().invoke(main, ["model", "verify", str(tmp_path / "m"), "--target", "host", "--inputs", "2"])
    assert result.exit_code == 1, result.output
    assert ("no input checked: random 0: TFLite Micro failed on it: its interpreter aborted (SIGABRT) (it failed on "
            "all 3 inputs)") in result.output


def test_a_constant_several_operators_read_is_defined_once_in_the_module(tmp_path):
    """MobileNetV3-small's squeeze-excite gates all multiply by one scalar constant (tensor 55,
    read by four MULs): the module defines it once (four definitions did not compile)."""
    export_model(ZOO / "mobilenet_v3_small.tflite", get_target("host"), None, tmp_path / "m")
    source = (tmp_path / "m" / "mobilenet_v3_small.c").read_text(encoding="utf-8")
    assert source.count("static const int8_t mobilenet_v3_small_t55[1]") == 1
    assert source.count("mobilenet_v3_small_t55, ") == 4


SUPPORTED_NOW = [name for name in NAMES if verdict(name)[0] is not None]


@pytest.mark.slow
@pytest.mark.parametrize("target_name", ["cortex-m55", "cortex-m4"])
@pytest.mark.parametrize("name", SUPPORTED_NOW)
def test_supported_models_verify_bit_exact_in_the_emulator(tmp_path, name, target_name, request):
    request.getfixturevalue("m55" if target_name == "cortex-m55" else "m4")
    target = get_target(target_name)
    inputs = []
    for n, (xs, _) in enumerate(cases(saved(name))):
        path = tmp_path / f"case{n}.npy"
        np.save(path, np.concatenate([x.reshape(-1) for x in xs]))  # the saved inputs' own type: int8, int16
        inputs.append(path)
    export_model(ZOO / f"{name}.tflite", target, None, tmp_path / "m")
    outcome = verify_model(tmp_path / "m", target, input_files=inputs)
    assert outcome.ok, (outcome.layer_problem, [i.problem for i in outcome.inferences])
    assert len(outcome.unchecked) == sum(want is None for _, want in cases(saved(name)))
