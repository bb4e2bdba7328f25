"""Variants chosen under a RAM bound (app/model/ram_fit.py, app/model/ram_tune.py,
`model export --max-ram`, `model tune --max-ram`): the cheapest choice the real memory
planner fits under the bound, against every choice tried; the refusal in one line; a
search that proposes no variant whose scratch alone cannot fit; and, on the M55, a bounded
module that keeps to its bound and stays bit-exact with TFLite Micro."""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import KERNELS
from edgetune.codegen.export import ExportEntry
from edgetune.model import load_model
from edgetune.model.export import export_model, layer_variants
from edgetune.model.ram_fit import (Option, RamBoundError, VariantRam, _Planner, fit_ram, lean_front, model_keys,
                                    room_for, variant_ram)
from edgetune.model.ram_tune import measure_lean
from edgetune.model.verify import verify_model
from edgetune.session import TuneRequest, tune, within_scratch
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

MODELS = Path(__file__).parent / "data" / "models"
DS_CNN = MODELS / "ds_cnn_kws.tflite"  # workloads: first conv (1 layer), depthwise (4), pointwise (4), FC (1)

# Synthetic variants per DS-CNN workload (by kernel and filter height): (cost, arena scratch,
# static scratch, in-place mode). Built so that the fastest of each is fat, a lean one is
# slower, and the cheapest fit under a bound is not the per-layer greedy one.
SYNTHETIC = {
    ("conv2d_s8", 10): [(250, 32_896, 0, "start"), (280, 576, 0, "")],
    ("dwconv2d_s8", 3): [(100, 12_096, 0, "start"), (120, 64, 0, ""), (150, 0, 1_136, "start")],
    ("conv2d_s8", 1): [(140, 34_048, 0, "start"), (150, 2_048, 0, "start"), (300, 0, 0, "")],
}


def _synthetic(model):
    """layer_variants-like entries (trial ids as the option's rank + 1) and their RAM."""
    variants, ram = {}, {}
    for kernel, shape in model_keys(model)[0]:
        spec = SYNTHETIC.get((kernel, dict(shape)["kh"]), [(3, 0, 0, "")])
        entries = []
        for n, (cost, arena, static, mode) in enumerate(spec):
            entry = ExportEntry(kernel=kernel, kernel_version=KERNELS[kernel].version, shape=shape,
                                config=(("rank", n),), objective="instructions", value=float(cost), values=(),
                                trial_id=n + 1, created="", trials=len(spec))
            entries.append(entry)
            ram[entry] = VariantRam(arena, static, mode)
        variants[(kernel, shape)] = tuple(entries)
    return variants, lambda target, entry: ram[entry]


def _every_choice(model, target, variants, ram_of):
    """(cost, planned RAM) of every combination of the options, by the real planner."""
    keys, weights = model_keys(model)
    options = [tuple(Option(e, ram_of(target, e)) for e in variants[k]) for k in keys]
    planner = _Planner(model, target, keys, options, weights)
    for choice in itertools.product(*(range(len(o)) for o in options)):
        yield planner.cost(choice), planner.plan(choice).total


@pytest.mark.parametrize("bound", [12_000, 14_000, 20_700, 60_000])
def test_the_choice_is_the_cheapest_that_fits_among_every_combination(bound):
    model, target = load_model(DS_CNN), get_target("cortex-m55")
    variants, ram_of = _synthetic(model)
    fit = fit_ram(model, target, variants, bound, ram_of)
    assert fit.fitted.total <= bound
    cheapest = min(cost for cost, total in _every_choice(model, target, variants, ram_of) if total <= bound)
    assert fit.cost(fit.fitted) == cheapest
    assert fit.fastest.choice == (0, 0, 0, 0)  # the fastest of each workload, whatever the bound


def test_a_tighter_bound_trades_speed_for_ram_and_none_needs_the_fat_variants():
    model, target = load_model(DS_CNN), get_target("cortex-m55")
    variants, ram_of = _synthetic(model)
    loose, tight = (fit_ram(model, target, variants, bound, ram_of) for bound in (60_000, 14_000))
    assert loose.changed() == () and loose.fitted.total == loose.fastest.total > 14_000
    assert tight.fitted.total <= 14_000 < loose.fitted.total
    assert tight.cost(tight.fitted) > loose.cost(loose.fitted)
    # Under 14,000 bytes no workload keeps a variant whose scratch alone is over 10 KB.
    assert all(tight.options[w][o].ram.arena_scratch < 10_000 for w, o in enumerate(tight.fitted.choice))


def test_a_bound_below_every_plan_is_refused_naming_the_smallest_ram_and_its_operator():
    model, target = load_model(DS_CNN), get_target("cortex-m55")
    variants, ram_of = _synthetic(model)
    smallest = min(total for _, total in _every_choice(model, target, variants, ram_of))
    with pytest.raises(RamBoundError) as refused:
        fit_ram(model, target, variants, smallest - 1, ram_of)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"--max-ram {smallest - 1}: ")
    assert f"needs at least {smallest:,} bytes" in line and "operator " in line and "sets the arena's peak" in line


def test_tensors_alone_over_the_bound_are_refused_before_any_search():
    model, target = load_model(DS_CNN), get_target("cortex-m55")
    with pytest.raises(RamBoundError, match=r"^--max-ram 8000: .* at operator \d+ \(\w+\) the tensors alive take"):
        room_for(model, target, 8_000).scratch_limits()
    limits = room_for(model, target, 20_093).scratch_limits()
    # A depthwise layer keeps one 8,000-byte tensor alive (written in place): the rest of the arena is its room.
    dw = next(k for k in limits if k[0] == "dwconv2d_s8")
    assert limits[dw] == 20_093 - 502 - 8_000 - 4 * 4  # inputs and outputs, and the four functions' scratch pointers


def test_the_search_proposes_no_variant_whose_scratch_exceeds_the_layers_room():
    target, kernel = get_target("cortex-m55"), KERNELS["conv2d_s8"]
    shape = kernel.parse_shape({"h": 25, "w": 5, "cin": 64, "cout": 64, "kh": 1, "kw": 1, "pad": 0})
    space = kernel.tuning_space(target, shape)
    bounded = within_scratch(space, kernel, shape, 4_096)
    assert 0 < len(bounded) < len(space)
    assert all(kernel.scratch_estimate(shape, c.as_dict()) <= 4_096 for c in bounded)
    assert any(kernel.scratch_estimate(shape, c.as_dict()) > 4_096 for c in space)  # unfused: 32,000 bytes
    assert within_scratch(space, kernel, shape, None) is space


def test_the_lean_front_drops_options_slower_and_no_leaner():
    entry = lambda n, cost: ExportEntry(kernel="conv2d_s8", kernel_version=1, shape=(), config=(("n", n),),
                                        objective="instructions", value=cost, values=(), trial_id=n + 1, created="",
                                        trials=3)
    options = [Option(entry(0, 100.0), VariantRam(4_000, 0, "")), Option(entry(1, 120.0), VariantRam(8_000, 0, "")),
               Option(entry(2, 130.0), VariantRam(4_000, 0, "start")), Option(entry(3, 90.0), VariantRam(30_000, 0, ""))]
    kept = [o.entry.trial_id for o in lean_front(options)]
    assert kept == [4, 1, 3]  # 120 with more scratch than the 100 is dominated; in place keeps the 130


def _measured(db, target, model, wanted: dict):
    """Each DS-CNN workload measured on the M55 with the configurations `wanted` names."""
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        shape = kernel.parse_shape(dict(w.shape))
        configs = [next(c for c in kernel.tuning_space(target, shape)
                        if all(c.as_dict().get(k) == v for k, v in want.items())).as_dict()
                   for want in wanted[w.kernel]]
        tune(TuneRequest(kernel, target, shape, "random", len(configs), 1, 0, initial=tuple(configs)), db)


@pytest.mark.qemu
@pytest.mark.slow
def test_max_ram_end_to_end_keeps_the_bound_and_stays_bit_exact_on_the_m55(tmp_path):
    """DS-CNN with a fat and a lean variant of each workload measured: the export under a bound
    below the fastest choice's RAM switches variants, `model verify` counts at most the bound,
    exactly the planned figure, and every inference is TFLite Micro's."""
    m55, model = get_target("cortex-m55"), load_model(DS_CNN)
    db = TuningDatabase(tmp_path / "t.db")
    _measured(db, m55, model, {
        "conv2d_s8": [{"vector": "mve", "fusion": "unfused", "algo": "im2col"},
                      {"vector": "mve", "fusion": "fused", "algo": "im2col"}],
        "dwconv2d_s8": [{"vector": "mve", "taps": "padded3x3"}, {"vector": "mve", "taps": "unrolled3x3"}]})
    fastest = fit_ram(model, m55, layer_variants(model, m55, db), 1 << 30).fastest.total
    bound = fastest - 1
    printed = CliRunner().invoke(main, ["model", "export", str(DS_CNN), "--target", "cortex-m55", "--db", str(db.path),
                                        "--out", str(tmp_path / "m"), "--max-ram", str(bound)])
    assert printed.exit_code == 0, printed.output
    planned = int(re.search(r"RAM bound [\d,]+ bytes: planned ([\d,]+) bytes", printed.output)[1].replace(",", ""))
    assert planned <= bound and f"the fastest variants take {fastest:,}" in printed.output
    outcome = verify_model(tmp_path / "m", m55, 1)
    assert outcome.ok, [i.problem for i in outcome.inferences]
    assert outcome.size.ram_bytes == planned == _ram_line(printed.output)[0] <= bound
    assert sum(_ram_line(printed.output)[1]) == planned  # static scratch pointers named too
    # Below DS-CNN's largest activation (25x5x64: 8,000 bytes), which no plan goes under (the
    # leanest, with its 1x1 convolutions in place, takes 9,618).
    refused = CliRunner().invoke(main, ["model", "export", str(DS_CNN), "--target", "cortex-m55", "--db",
                                        str(db.path), "--out", str(tmp_path / "n"), "--max-ram", "7999"])
    assert refused.exit_code == 2 and "--max-ram 7999: " in refused.output and not (tmp_path / "n").exists()


@pytest.mark.qemu
@pytest.mark.slow
def test_3x3_convolutions_written_with_a_lag_over_their_input_are_bit_exact_layer_by_layer_on_the_m55(tmp_path):
    """ResNet-8 with every convolution fused on Helium: the second 3x3 of each block, whose
    input dies there, writes its output starting KernelBase.in_place_lag bytes before its
    input (the arena shrinks by almost a tensor), and every operator is TFLite Micro's."""
    m55, resnet = get_target("cortex-m55"), MODELS / "resnet8_cifar10.tflite"
    model = load_model(resnet)
    db = TuningDatabase(tmp_path / "t.db")
    _measured(db, m55, model, {"conv2d_s8": [{"vector": "mve", "fusion": "fused", "algo": "im2col"}]})
    result = export_model(resnet, m55, db, tmp_path / "m")
    plan, steps = result.rendered.plan, result.rendered.steps
    by = plan.by_tensor()
    lagged = [s for s in steps if s.kernel and s.in_place and by[s.outputs[0]].shares == s.inputs[0]
              and by[s.outputs[0]].offset < by[s.inputs[0]].offset]
    assert len(lagged) >= 2
    for step in lagged:
        kernel, shape = KERNELS[step.kernel], dict(model.layers[step.index].shape)
        config = dict(next(k for k in result.rendered.manifest.kernels if k.function == step.function).config)
        lag = kernel.in_place_lag(kernel.parse_shape(shape), kernel.tuning_space(m55, kernel.parse_shape(shape))
                                  .make(config))
        assert by[step.inputs[0]].offset - by[step.outputs[0]].offset == -(-lag // 16) * 16
    outcome = verify_model(tmp_path / "m", m55, 1, layers=True)
    assert outcome.ok, (outcome.layer_problem, [i.problem for i in outcome.inferences])


def test_model_tune_refuses_a_bound_the_tensors_exceed_before_measuring_anything(tmp_path):
    printed = CliRunner().invoke(main, ["model", "tune", str(DS_CNN), "--target", "cortex-m55", "--db",
                                        str(tmp_path / "t.db"), "--max-ram", "8000", "--no-check"])
    assert printed.exit_code == 2
    assert printed.output.count("\n") == 1 and "--max-ram 8000: " in printed.output
    assert not (tmp_path / "t.db").exists()


@pytest.mark.qemu
@pytest.mark.slow
def test_model_tune_under_a_bound_proposes_only_variants_that_fit_and_prints_the_choice(tmp_path):
    """A small tune of DS-CNN under 0.7x TFLite Micro's RAM: no layer's search measures a
    variant whose scratch alone exceeds that layer's room, the choice under the bound fits
    it, and each layer is checked against TFLite Micro on the variant the bound chose."""
    m55, model = get_target("cortex-m55"), load_model(DS_CNN)
    printed = CliRunner().invoke(main, ["model", "tune", str(DS_CNN), "--target", "cortex-m55", "--db",
                                        str(tmp_path / "t.db"), "--budget", "12", "--max-ram", "20093", "--json"])
    assert printed.exit_code == 0, printed.output
    summary = json.loads(printed.output)
    assert summary["max_ram"]["planned_ram"] <= 20_093 == summary["max_ram"]["max_ram"]
    # The table's total is over every trial, the lean ones too: the fastest variants' cost quoted.
    assert summary["total"] == pytest.approx(summary["max_ram"]["fastest_cost"])
    limits = room_for(model, m55, 20_093).scratch_limits()
    db = TuningDatabase(tmp_path / "t.db")
    # The layers are checked against TFLite Micro on the variants the bound chose.
    chosen = fit_ram(model, m55, layer_variants(model, m55, db), 20_093).chosen()
    by_layer = {layer.index: chosen[(layer.kernel, layer.shape)] for layer in model.tuned}
    for check in summary["checks"]:
        entry = by_layer[check["layer"]]
        assert check["ok"] and check["config"] == KERNELS[entry.kernel].tuning_space(
            m55, dict(entry.shape)).make(dict(entry.config)).key()
    for key, entries in layer_variants(model, m55, db).items():
        kernel = KERNELS[key[0]]
        assert all(kernel.scratch_estimate(dict(e.shape), dict(e.config)) <= limits[key] for e in entries)


@pytest.mark.qemu
@pytest.mark.slow
def test_lean_siblings_are_measured_when_the_fastest_variants_cannot_fit(tmp_path):
    """A database holding only DS-CNN's fat variants (unfused accumulators, padded copies):
    the lean siblings measured for the workloads that cannot fit, each within the bound's
    room, and a choice under the bound then exists."""
    m55, model = get_target("cortex-m55"), load_model(DS_CNN)
    db = TuningDatabase(tmp_path / "t.db")
    _measured(db, m55, model, {"conv2d_s8": [{"vector": "mve", "fusion": "unfused", "algo": "im2col"}],
                               "dwconv2d_s8": [{"vector": "mve", "taps": "padded3x3"}]})
    room = room_for(model, m55, 20_093)
    before = fit_ram(model, m55, layer_variants(model, m55, db), 20_093)
    assert before.unmeasured()  # only the kernels' default configurations fit, never measured
    template = TuneRequest(KERNELS["conv2d_s8"], m55, {}, "random", 0, 1, 0)
    rounds = measure_lean(model, m55, db, room, template)
    assert rounds and all(r.measured > 0 for r in rounds)
    for key, entries in layer_variants(model, m55, db).items():
        kernel = KERNELS[key[0]]
        lean = [e for e in entries if e.trial_id and room.fits(key, variant_ram(m55, e))]
        assert lean, key
    after = fit_ram(model, m55, layer_variants(model, m55, db), 20_093)
    assert after.fitted.total <= 20_093 and len(after.unmeasured()) < len(before.unmeasured())


@pytest.mark.parametrize("kernel_name", ["conv2d_s8", "dwconv2d_s8"])
def test_the_scratch_estimate_is_the_rendered_scratch_up_to_alignment(kernel_name):
    """What a bound prunes the search by (no render) is what the variant lays out: at least
    its buffers' bytes, at most their 16-byte alignment more."""
    target, kernel = get_target("cortex-m55"), KERNELS[kernel_name]
    model = load_model(DS_CNN)
    rng = np.random.default_rng(0)
    for w in (w for w in model.workloads() if w.kernel == kernel_name):
        shape = kernel.parse_shape(dict(w.shape))
        space = kernel.tuning_space(target, shape)
        for index in rng.choice(space.legal_indices(), size=12, replace=False):
            config = space.config_at(int(index))
            rendered = kernel.render(target, shape, config, fn="x", shared_scratch="s", scratch_pointer="p")
            laid_out = rendered.arena_scratch_bytes + rendered.scratch_bytes
            estimate = kernel.scratch_estimate(shape, config.as_dict())
            assert estimate <= laid_out <= estimate + 64, config.as_dict()


# --- the bound counts what `model verify` counts: code and constants copied to RAM too -----

MOBILENET = MODELS / "large" / "mobilenet_v2_035_96.tflite"


def _ram_line(output: str) -> tuple[int, list[int]]:
    """The export's `RAM: N bytes (part n, ...)` line: N and its parts' figures."""
    found = re.search(r"^RAM: ([\d,]+) bytes \((.*)\)$", output, re.M)
    return int(found[1].replace(",", "")), [int(n.replace(",", "")) for n in re.findall(r" ([\d,]+)(?:,|$)", found[2])]


@pytest.mark.parametrize("bound", [200_000, 400_000])
def test_the_code_plan_copies_into_ram_only_what_the_bound_leaves(tmp_path, monkeypatch, bound):
    """MobileNetV2-0.35 (weights beyond the M55's ITCM) with no database: its tensors plan
    165,920 bytes; the code plan would copy 154,528 bytes of arrays into SRAM. Under 200,000
    they go to flash instead (the planned total is at most the bound); under 400,000 they fit
    and the printed total names them, every part adding up."""
    monkeypatch.chdir(tmp_path)  # no edgetune.db: every layer on its default configuration
    printed = CliRunner().invoke(main, ["model", "export", str(MOBILENET), "--target", "cortex-m55", "--out",
                                        str(tmp_path / "m"), "--max-ram", str(bound)])
    assert printed.exit_code == 0, printed.output
    planned = int(re.search(r"RAM bound [\d,]+ bytes: planned ([\d,]+) bytes", printed.output)[1].replace(",", ""))
    total, parts = _ram_line(printed.output)
    assert planned == total == sum(parts) <= bound
    copied = "code and constants copied to RAM" in printed.output
    assert copied == (bound == 400_000) and (total > 200_000) == copied
    assert "no tuned layers" in printed.output and "0 under the bound" not in printed.output
    assert ("in sram" in printed.output) == copied and ("in qspi" in printed.output) != copied


def test_the_code_plans_ram_cap_shares_one_room_among_the_copied_regions():
    from edgetune.model.code_plan import capped, code_regions, copied_regions
    m55 = get_target("cortex-m55")
    regions = code_regions(m55)
    assert copied_regions(m55) == ("sram",)
    cut = {r.name: r.capacity for r in capped(m55, regions, 1_000)}
    assert cut["sram"] == 1_000 and cut["itcm"] == regions[0].capacity
    assert {r.name: r.capacity for r in capped(m55, regions, None)} == {r.name: r.capacity for r in regions}
    assert {r.name: r.capacity for r in capped(m55, regions, -5)}["sram"] == 0


@pytest.mark.qemu
@pytest.mark.slow
def test_model_verify_counts_at_most_the_bound_when_the_constants_would_spill_into_sram(tmp_path, monkeypatch):
    """The new user's case: MobileNetV2-0.35 under --max-ram 200000 was accepted with 165,920
    planned and verified at 320,448 (arrays the code plan had copied to SRAM)."""
    monkeypatch.chdir(tmp_path)
    m55 = get_target("cortex-m55")
    printed = CliRunner().invoke(main, ["model", "export", str(MOBILENET), "--target", "cortex-m55", "--out",
                                        str(tmp_path / "m"), "--max-ram", "200000"])
    assert printed.exit_code == 0, printed.output
    outcome = verify_model(tmp_path / "m", m55, 1)
    assert outcome.ok and outcome.size.ram_bytes == _ram_line(printed.output)[0] <= 200_000


def test_a_max_ram_that_is_not_a_positive_whole_number_is_one_line_naming_the_flag(tmp_path):
    for value in ("abc", "0", "1.5", "-3"):
        printed = CliRunner().invoke(main, ["model", "export", str(DS_CNN), "--target", "cortex-m55", "--out",
                                            str(tmp_path / "m"), "--max-ram", value])
        assert printed.exit_code == 2 and printed.output.count("\n") == 1, printed.output
        assert "--max-ram" in printed.output and "positive whole number of bytes" in printed.output
        assert "integer range" not in printed.output and not (tmp_path / "m").exists()


def test_the_planned_parts_add_up_to_the_total_static_scratch_pointers_and_code_named():
    from edgetune.cli.model_ram import ram_parts
    from edgetune.model.ram_fit import PlannedRam
    model, target = load_model(DS_CNN), get_target("cortex-m55")
    planned = _Planner(model, target, (), (), ()).plan(())
    planned = PlannedRam(planned.choice, planned.plan, planned.steps, 2_048, 12, planned.io_bytes)
    text = ram_parts(planned, 5_000)
    figures = [int(n.replace(",", "")) for n in re.findall(r" ([\d,]+)(?:,|$)", text)]
    assert sum(figures) == planned.total + 5_000
    assert "scratch pointers 12" in text and "static scratch 2,048" in text and "copied to RAM 5,000" in text


def test_verifys_ram_label_names_the_code_and_constants_copied_to_ram_when_there_are_any():
    from edgetune.model.verify import ModuleSize
    assert "copied" not in ModuleSize(100, 500, 300).ram_parts
    label = ModuleSize(100, 500, 160_000, 154_528).ram_parts
    assert "static scratch and pointers" in label and "code and constants copied to RAM (154,528)" in label
