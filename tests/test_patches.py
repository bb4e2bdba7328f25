"""Patch-based execution (app/model/patches.py, patch_module.py, patch_render.py): the band
geometry (receptive fields, halo rows, band padding, work buffers, the write front behind the
consumption front) checked against a direct row-by-row model of the convolutions, plan
parsing and refusals, and small models exported band by band, bit-exact with TFLite Micro on
the host and the M55. MobileNet-VWW's case: tests/test_patches_mobilenet.py (slow)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen.manifest import ManifestError
from edgetune.model import load_model
from edgetune.model.export import export_model
from edgetune.model.patch_module import PATCH_OP, PatchPlan, StagePlan, parse_patch_plan, stage_layers
from edgetune.model.patches import (PatchError, RowGeometry, overwrite_problem, stage_schedule)
from edgetune.model.verify import verify_model
from edgetune.targets import get_target

from model_files import chain_model, write


def geometry(h, kh, stride, pad_top, pad_bottom, in_row=4, out_row=4, dilation=1) -> RowGeometry:
    return RowGeometry(h, kh, stride, dilation, pad_top, pad_bottom, in_row, out_row)


def test_source_rows_cover_the_receptive_field_with_band_padding():
    g = geometry(96, 3, 2, 0, 1)  # MobileNet's first convolution: SAME, 96 -> 48
    assert g.out_h == 48
    assert g.source(0, 1) == (0, 3, 0, 0)
    assert g.source(47, 48) == (94, 96, 0, 1)  # the bottom band pads below only
    s1 = geometry(48, 3, 1, 1, 1)
    assert s1.source(0, 2) == (0, 3, 1, 0)  # the top band pads above only
    assert s1.source(5, 7) == (4, 8, 0, 0)
    assert s1.source(0, 48) == (0, 48, 1, 1)
    dilated = geometry(20, 3, 1, 2, 2, dilation=2)
    assert dilated.source(1, 2) == (0, 4, 1, 0)  # a partial pad: one of the two padding rows


@pytest.mark.parametrize("halo", ["cache", "recompute"])
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
def test_bands_compute_each_row_from_the_rows_it_needs(halo, rows):
    """Simulate the schedule on row labels: each call's output rows must be the layer's rows
    [a, b), read from buffers that hold exactly the input rows its receptive field needs."""
    chain = (geometry(17, 3, 2, 1, 1), geometry(9, 3, 1, 1, 1), geometry(9, 1, 1, 0, 0), geometry(9, 3, 2, 0, 1))
    schedule = stage_schedule(chain, rows, halo)
    buffers = [dict() for _ in chain[:-1]]  # buffer -> {byte offset: row}
    written = set()
    for band in schedule.bands:
        for m in band.moves:
            row_bytes = chain[m.buffer].out_row_bytes
            kept = {off - m.start: r for off, r in buffers[m.buffer].items() if m.start <= off < m.start + m.nbytes}
            assert len(kept) * row_bytes == m.nbytes
            buffers[m.buffer] = kept
        for c in band.calls:
            g = chain[c.layer]
            lo, hi, top, bottom = g.source(*c.rows)
            assert (lo, hi) == c.source and (top, bottom) == c.pads
            if c.layer == 0:
                assert c.read == (-1, lo * g.in_row_bytes)
            else:
                held = buffers[c.layer - 1]
                for r in range(lo, hi):
                    assert held[c.read[1] + (r - lo) * g.in_row_bytes] == r  # the right rows, present
            for r in range(*c.rows):
                if c.layer == len(chain) - 1:
                    assert c.write == (-1, c.rows[0] * g.out_row_bytes)
                    written.add(r)
                else:
                    buffers[c.layer][c.write[1] + (r - c.rows[0]) * g.out_row_bytes] = r
                    assert c.write[1] + (r - c.rows[0] + 1) * g.out_row_bytes <= schedule.buffer_bytes[c.layer]
    assert written == set(range(chain[-1].out_h))
    computed = schedule.computed_rows()
    if halo == "cache":  # nothing computed twice
        assert computed == tuple(g.out_h for g in chain)
    else:
        assert all(n >= g.out_h for n, g in zip(computed, chain))


def test_recompute_costs_rows_and_cache_costs_none():
    chain = (geometry(48, 3, 1, 1, 1), geometry(48, 3, 2, 0, 1))
    assert stage_schedule(chain, 1, "cache").computed_rows() == (48, 24)
    assert stage_schedule(chain, 1, "recompute").computed_rows() == (24 * 3 - 1, 24)


def test_write_front_behind_consumption_front():
    """A stride-2 stage's output fits over the rows it consumed; a stage whose output rows are
    wider than the input rows they consume overtakes the reads and may not."""
    narrow = (geometry(16, 1, 1, 0, 0, in_row=8, out_row=8), geometry(16, 3, 2, 0, 1, in_row=8, out_row=8))
    assert overwrite_problem(stage_schedule(narrow, 1, "cache"), narrow, 16 * 8) == ""
    wide = (geometry(16, 3, 1, 1, 1, in_row=4, out_row=16),)
    assert "reads the input" in overwrite_problem(stage_schedule(wide, 1, "cache"), wide, 16 * 4)
    # One 1x1 layer: each band's single call would write the row it is reading.
    pointwise = (geometry(8, 1, 1, 0, 0, in_row=8, out_row=8),)
    assert "reads the input" in overwrite_problem(stage_schedule(pointwise, 1, "cache"), pointwise, 64)
    two = (geometry(8, 1, 1, 0, 0, in_row=8, out_row=8), geometry(8, 1, 1, 0, 0, in_row=8, out_row=8))
    assert overwrite_problem(stage_schedule(two, 1, "cache"), two, 64) == ""  # read by the first, written by the last


def test_bad_stages_are_refused():
    chain = (geometry(16, 3, 1, 1, 1), geometry(8, 3, 1, 1, 1))
    with pytest.raises(PatchError, match="previous layer's output"):
        stage_schedule(chain, 1, "cache")
    with pytest.raises(PatchError, match="band rows 0"):
        stage_schedule(chain[:1], 0, "cache")
    with pytest.raises(PatchError, match="halo 'both'"):
        stage_schedule(chain[:1], 1, "both")


def test_plan_text():
    plan = parse_patch_plan("0-3:2:recompute, 4-7,8-9:1:cache:default")
    assert plan == PatchPlan((StagePlan(0, 3, 2, "recompute"), StagePlan(4, 7, 1, "cache"),
                              StagePlan(8, 9, 1, "cache", True)))
    assert parse_patch_plan(plan.text) == plan
    for bad in ("0-3:x", "a-b", "0-3:1:both", "", "0-3:1:cache:tuned"):
        with pytest.raises(PatchError, match="--patch"):
            parse_patch_plan(bad)


@pytest.fixture
def chain_path(tmp_path) -> Path:
    return write(tmp_path, "chain.tflite", chain_model(np.random.default_rng(5)))


def test_stage_layers_must_be_one_chain_of_convolutions(chain_path):
    model = load_model(chain_path)
    assert [layer.index for layer in stage_layers(model, StagePlan(0, 2))] == [0, 1, 2]
    with pytest.raises(PatchError, match="last operator is before its first"):
        stage_layers(model, StagePlan(2, 1))


@pytest.mark.parametrize("plan", ["0-2:1:cache", "0-2:2:recompute", "0-1:1:recompute,2-2:3:cache", "1-2:1:cache"])
def test_small_model_band_by_band_is_bit_exact_on_the_host(chain_path, tmp_path, plan):
    host = get_target("host")
    result = export_model(chain_path, host, None, tmp_path / "m", patch=parse_patch_plan(plan))
    stages = [s for s in result.rendered.steps if s.op == PATCH_OP]
    assert len(stages) == plan.count(",") + 1
    header = (tmp_path / "m" / "chain.h").read_text()
    # A stage that writes the model's output leaves nothing to plan over the input.
    over = bool(result.rendered.plan.over_input)
    assert over == (not plan.startswith("0-2"))  # 1-2: its work buffers go where the input was
    assert ("CHAIN_OVERWRITES_INPUT 1" in header) == over
    assert ("int chain_run(uint8_t *arena, int8_t *input," in header) == over
    outcome = verify_model(tmp_path / "m", host, 3)
    assert outcome.ok, [i.problem for i in outcome.inferences]
    with pytest.raises(ManifestError, match="--layers: operators"):
        verify_model(tmp_path / "m", host, 1, layers=True)


def test_small_model_band_by_band_is_bit_exact_on_the_m55(chain_path, tmp_path):
    m55 = get_target("cortex-m55")
    export_model(chain_path, m55, None, tmp_path / "plain")
    export_model(chain_path, m55, None, tmp_path / "m", patch=parse_patch_plan("0-1:1:cache"))
    plain, banded = verify_model(tmp_path / "plain", m55, 2), verify_model(tmp_path / "m", m55, 2)
    assert banded.ok, [i.problem for i in banded.inferences]
    assert banded.size.ram_bytes < plain.size.ram_bytes  # the 8x8x8 tensor is gone, 4x4x8 over the input


def test_export_without_a_plan_is_unchanged(chain_path, tmp_path):
    host = get_target("host")
    result = export_model(chain_path, host, None, tmp_path / "m")
    assert not result.rendered.plan.over_input
    header = (tmp_path / "m" / "chain.h").read_text()
    assert "OVERWRITES_INPUT" not in header and "const int8_t *input" in header


def test_cli_refuses_a_plan_the_model_does_not_allow(chain_path, tmp_path):
    out = CliRunner().invoke(main, ["model", "export", str(chain_path), "--target", "host", "--out",
                                    str(tmp_path / "m"), "--db", str(tmp_path / "none.db"), "--patch", "0-9:1:cache"])
    assert out.exit_code == 2
    out = CliRunner().invoke(main, ["model", "export", str(chain_path), "--target", "host", "--out",
                                    str(tmp_path / "m"), "--patch", "0-2:1:sideways"])
    assert out.exit_code == 2 and "halo 'sideways'" in out.output
    assert not (tmp_path / "m").exists()


def test_scratch_planned_over_the_input_is_a_planned_scratch():
    """A layer's scratch the plan put over the input is still the step's scratch (the module
    then points the layer at it; a lost entry left the pointer unset)."""
    from edgetune.model.memory_plan import Allocation, MemoryPlan
    from edgetune.model.patch_module import over_input

    plan = MemoryPlan((Allocation(0, 0, 64, 0, 0), Allocation(5, 0, 32, 0, 1, 0), Allocation(-3, 32, 16, 2, 2),
                       Allocation(-2, 64, 48, 1, 1)), 112)
    split = over_input(plan, 0)
    assert {a.tensor for a in split.over_input} == {5, -3}
    assert split.scratch[2].tensor == -3 and split.scratch[1].offset == 0  # step 1's scratch: in the arena, at 0
    assert split.arena_bytes == 48


def test_a_tensor_across_the_input_end_moves_over_the_input_or_to_the_arena():
    from edgetune.model.memory_plan import Allocation, MemoryPlan
    from edgetune.model.patch_module import over_input

    busy = Allocation(9, 0, 48, 1, 2)  # over the input while 7 lives: no room for 7 there
    plan = MemoryPlan((Allocation(0, 0, 64, 0, 0), Allocation(7, 48, 32, 1, 2), Allocation(8, 64, 16, 0, 1), busy), 80)
    split = over_input(plan, 0)
    assert split.over_input == (busy,)
    assert {a.tensor: a.offset for a in split.allocations} == {8: 0, 7: 16}  # 7 above everything in the arena
    assert split.arena_bytes == 48
    free = MemoryPlan((Allocation(0, 0, 64, 0, 0), Allocation(7, 48, 32, 1, 2), Allocation(8, 64, 16, 0, 1),
                       replace(busy, last=1, nbytes=16)), 80)
    split = over_input(free, 0)
    assert {a.tensor: a.offset for a in split.over_input} == {9: 0, 7: 16}  # beside 9, inside the input
    assert split.arena_bytes == 16


def test_auto_plans_and_the_choice_by_measured_cost():
    from edgetune.model.patch_choice import Candidate, best_candidate, candidate_plans, parse_auto

    assert parse_auto("auto") is None and parse_auto("auto:35582") == 35582 and parse_auto("0-3") is False
    with pytest.raises(PatchError, match="auto:BYTES"):
        parse_auto("auto:-5")
    model = load_model(Path(__file__).parent / "data" / "models" / "mobilenet_v1_025_vww.tflite")
    plans = candidate_plans(model)
    ends = {s.last for p in plans for s in p.stages}
    assert ends == {0, 3, 7, 11}  # the first stride-2 layers: where a stage's output shrinks
    assert all(p.stages[0].first == 0 for p in plans)
    assert parse_patch_plan("0-3:1:cache,4-7:1:cache") in plans
    plan = parse_patch_plan("0-3")
    fast, lean = Candidate(plan, 40_000, 100), Candidate(plan, 30_000, 120)
    assert best_candidate([fast, lean, Candidate(None, 90_000, None, "90000 bytes > 35582")]) is fast
    with pytest.raises(PatchError, match="no patch plan fits the bound"):
        best_candidate([Candidate(None, 90_000, None, "90000 bytes > 35582")])


@pytest.mark.parametrize("text,said", [
    ("0-3,2-5", "stages 0-3 and 2-5 overlap"), ("0-1,1-3", "stages 0-1 and 1-3 overlap"),
    ("0-3,3-5", "stages 0-3 and 3-5 overlap"), ("0-7,2-3", "stages 0-7 and 2-3 overlap"),
    ("0-3,0-3:2", "stages 0-3 and 0-3 are the same operators twice"),
    ("0-3:1:cache,", "an empty stage after a comma"), (",0-3", "an empty stage before a comma"),
    ("", "--patch '': an empty plan")])
def test_overlapping_repeated_and_empty_stages_are_refused_by_name(text, said):
    with pytest.raises(PatchError, match=said.replace("'", ".")):
        parse_patch_plan(text)


def test_overlap_is_refused_also_for_a_plan_built_in_code(chain_path):
    from edgetune.model.patch_module import patched_steps

    with pytest.raises(PatchError, match="stages 0-1 and 1-2 overlap"):
        patched_steps(load_model(chain_path), (), PatchPlan((StagePlan(0, 1), StagePlan(1, 2))), "m", None)


@pytest.mark.parametrize("plan,said", [
    ("0-1,1-2", "--patch: stages 0-1 and 1-2 overlap"), ("0-2:999", "--patch stage 0-2:999:cache: band rows 999"),
    ("", "--patch '': an empty plan"), ("0-2,", "an empty stage after a comma")])
def test_cli_refuses_bad_plans_in_one_line_and_writes_nothing(chain_path, tmp_path, plan, said):
    out = CliRunner().invoke(main, ["model", "export", str(chain_path), "--target", "host", "--out",
                                    str(tmp_path / "m"), "--patch", plan])
    assert out.exit_code == 2, out.output
    assert said in out.output and "internal error" not in out.output
    assert len(out.output.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_a_plan_that_saves_no_ram_says_so(chain_path):
    from edgetune.model.export import choose_layers
    from edgetune.model.patch_choice import _render, no_gain_note

    model, host = load_model(chain_path), get_target("host")
    chosen, _ = choose_layers(model, host, None)
    plan = parse_patch_plan("0-1")
    assert no_gain_note(chain_path, host, None, _render(model, host, chosen, plan), plan, "", (), ()) == ""
    same = no_gain_note(chain_path, host, None, _render(model, host, chosen, None), plan, "", (), ())
    assert same.startswith("--patch 0-1:1:cache: the plan saves no RAM (1,024 B, 1,024 B without it)")


@pytest.mark.slow
def test_the_cli_says_when_a_mobilenet_plan_saves_no_ram(tmp_path):
    vww = Path(__file__).parent / "data" / "models" / "mobilenet_v1_025_vww.tflite"

    def export(plan):
        out = CliRunner().invoke(main, ["model", "export", str(vww), "--out", str(tmp_path / plan.replace(",", "_")),
                                        "--patch", plan])
        assert out.exit_code == 0, out.output
        return out.output
    said = export("26-26")  # the last convolution alone: nothing to gain
    assert "--patch 26-26:1:cache: the plan saves no RAM" in said and "1 stage run band by band" in said
    assert "saves no RAM" not in export("0-3")


def test_a_patched_header_says_the_input_is_written_over_and_when_invoke_fails(chain_path, tmp_path):
    export_model(chain_path, get_target("host"), None, tmp_path / "m", patch=parse_patch_plan("1-2:1:cache"))
    header = (tmp_path / "m" / "chain.h").read_text()
    top = header.split("*/", 1)[0]
    assert "not in the arena" not in top and "WRITES OVER" in top
    invoke = header.split("int chain_invoke(", 1)[0].rsplit("/**", 1)[1]
    assert "@return 0, or -1" in invoke and "aligned" in invoke
    assert "__attribute__((aligned(CHAIN_ARENA_ALIGN)))" in header
    export_model(chain_path, get_target("host"), None, tmp_path / "plain")
    plain = (tmp_path / "plain" / "chain.h").read_text()
    assert "not in the arena" in plain and "@return 0. Not reentrant" in plain


def test_auto_names_the_least_ram_reached_and_lists_each_module_once(chain_path):
    from edgetune.model.export import choose_layers
    from edgetune.model.patch_choice import Candidate, _distinct, best_candidate, rank_candidates

    model, host = load_model(chain_path), get_target("host")
    chosen, _ = choose_layers(model, host, None)
    ranked = rank_candidates(model, host, chosen, 100)
    # Without a database every layer runs its default configuration: `:default` twins are the same module.
    assert ranked and not any(c.plan and c.plan.stages[0].default_variants for c in ranked)
    texts = [c.plan.text if c.plan else "none" for c in ranked]
    assert len(texts) == len(set(texts)) == 1 + 3 * 2  # none, and 3 band heights x 2 halos
    assert all(c.problem == "over the bound of 100 B" for c in ranked)
    least = min(ranked, key=lambda c: c.ram)
    with pytest.raises(PatchError) as e:
        best_candidate(ranked)
    assert f"least RAM a candidate reaches is {least.ram:,} B (plan {least.plan.text if least.plan else 'none'}" \
        in str(e.value)
    plan = parse_patch_plan("0-1")
    twins = [Candidate(plan, 10, None, "", (("f", "a"),)), Candidate(replace(plan, stages=(replace(
        plan.stages[0], default_variants=True),)), 10, None, "", (("f", "b"),))]
    assert len(_distinct(twins)) == 2  # other configurations: another module, kept
