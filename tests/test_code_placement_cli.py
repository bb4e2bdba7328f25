"""What the code plan tells a firmware engineer (issue 28, a new user's trial): where the
code and constants go with bytes per region (`model show --target`, `model export`), that
the linker fragment's header says which sections are loaded and which are NOLOAD, and
`--code-reserve` for a firmware whose own code takes more of the code region."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen.code_placement import FIRMWARE_CODE_RESERVE
from edgetune.model import load_model
from edgetune.model.code_plan import model_code_plan, model_items, plan_text
from edgetune.model.export import choose_layers
from edgetune.model.module import render_model_module
from edgetune.targets import get_target

DATA = Path(__file__).resolve().parent / "data" / "models"
DS_CNN = DATA / "ds_cnn_kws.tflite"
MOBILENET_V2 = DATA / "large" / "mobilenet_v2_035_96.tflite"
ITCM = 512 * 1024


def _bytes(text: str) -> int:
    return int(text.replace(",", ""))


def test_model_show_says_how_many_bytes_spill_to_sram_and_that_they_are_copied_at_boot():
    result = CliRunner().invoke(main, ["model", "show", str(MOBILENET_V2), "--target", "cortex-m55"])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    found = re.search(r"fits cortex-m55: ([\d,]+) B of code and ([\d,]+) B of constants in itcm, ([\d,]+) B of "
                      r"constants in sram \(copied from flash at boot\)$", first)
    assert found, first
    code, kept, spilled = map(_bytes, found.groups())
    items = model_items(load_model(MOBILENET_V2))
    assert code + kept + spilled == sum(i.nbytes for i in items)
    assert code + kept <= ITCM - FIRMWARE_CODE_RESERVE and spilled > 100_000
    shown = json.loads(CliRunner().invoke(main, ["model", "show", str(MOBILENET_V2), "--target", "cortex-m55",
                                                 "--json"]).output)["code_plan"]
    assert [(r["region"], r["code_bytes"], r["constant_bytes"], r["copied"]) for r in shown] == \
        [("itcm", code, kept, False), ("sram", 0, spilled, True)]


def _render(model_path: Path, code_reserve: int = FIRMWARE_CODE_RESERVE):
    model, target = load_model(model_path), get_target("cortex-m55")
    chosen, _ = choose_layers(model, target, None)
    return render_model_module(model, target, chosen, name=model_path.stem, database="", date="", version="",
                               model_bytes=b"", code_reserve=code_reserve)


def test_the_export_line_counts_the_bytes_in_each_region():
    rendered = _render(MOBILENET_V2)
    line = plan_text(rendered.code_plan)
    found = re.search(r"exceeds itcm \(placed by accesses per byte\): ([\d,]+) B of code \((\d+) functions\) and "
                      r"([\d,]+) B of constants \((\d+) const arrays\) in itcm, ([\d,]+) B of constants \((\d+) const "
                      r"arrays\) in sram \(copied from flash at boot\)$", line)
    assert found, line
    code, functions, kept, kept_arrays, moved, moved_arrays = map(_bytes, found.groups())
    plan = rendered.code_plan
    assert code + kept + moved == sum(i.nbytes for i in plan.items)
    assert moved == sum(i.nbytes for i in plan.items if plan.region_of(i.name) == "sram")
    assert moved_arrays == sum(1 for _, region in plan.placed if region == "sram")
    assert functions + kept_arrays + moved_arrays == len(plan.placed)


def test_the_fragment_header_calls_only_the_buffer_sections_noload():
    fragment = _render(MOBILENET_V2).files["edgetune_sections.ld"]
    header, body = fragment.split("*/", 1)
    assert "The sections are NOLOAD" not in header
    assert "buffer sections are NOLOAD" in header and "copies them in before the first inference" in header
    assert "measured in flash" not in header
    assert re.search(r'REGION_ALIAS\("EDGETUNE_SRAM".*code and constants placed in sram', header)
    noload = re.findall(r"(\.edgetune\.\w+) \(NOLOAD\)", body)
    assert noload == [".edgetune.dtcm"]  # the arena's; the code plan's SRAM section is loaded
    assert re.search(r"\.edgetune\.sram : ALIGN\(16\)", body) and "} > EDGETUNE_SRAM AT > EDGETUNE_LOAD" in body


def test_a_module_that_fits_keeps_the_fragment_header_it_had():
    fragment = _render(DS_CNN).files["edgetune_sections.ld"]
    assert "The sections are NOLOAD:\n   nothing in them is loaded or zeroed by the linker" in fragment
    assert "AT >" not in fragment and "EDGETUNE_LOAD" not in fragment


def test_a_larger_code_reserve_moves_more_out_of_the_itcm():
    default, larger = _render(MOBILENET_V2).code_plan, _render(MOBILENET_V2, 256 * 1024).code_plan
    in_itcm = [sum(l.code_bytes + l.constant_bytes for l in p.loads() if l.region == "itcm") for p in (default, larger)]
    assert in_itcm[0] <= ITCM - FIRMWARE_CODE_RESERVE and in_itcm[1] <= ITCM - 256 * 1024 < in_itcm[0]
    assert not _render(DS_CNN, 0).code_plan.split and _render(DS_CNN, ITCM - 16 * 1024).code_plan.split
    assert model_code_plan(load_model(MOBILENET_V2), get_target("cortex-m55"), 0).split


def test_model_show_takes_the_code_reserve():
    result = CliRunner().invoke(main, ["model", "show", str(DS_CNN), "--target", "cortex-m55",
                                       "--code-reserve", str(ITCM - 16 * 1024)])
    assert result.exit_code == 0, result.output
    assert re.search(r"fits cortex-m55: .* in itcm, .* in sram \(copied from flash at boot\)$",
                     result.output.splitlines()[0])


@pytest.mark.parametrize("command", ["show", "export"])
@pytest.mark.parametrize("value, says", [(str(ITCM + 1), "--code-reserve 524289: must be 0 to 524,288 bytes"),
                                         ("-1", "--code-reserve"), ("64K", "--code-reserve")])
def test_a_code_reserve_the_code_region_cannot_give_is_refused_in_one_line(tmp_path, command, value, says):
    args = ["model", command, str(DS_CNN), "--target", "cortex-m55", "--code-reserve", value]
    result = CliRunner().invoke(main, args + (["--out", str(tmp_path / "m")] if command == "export" else []))
    assert result.exit_code == 2, result.output
    assert says in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "m").exists()
