"""Code and constants placed across a target's regions when its code region cannot hold a model
module (codegen/code_placement.py, app/model/code_plan.py): the plan's choices, the sections
the export tags, the harness's link layout, and modules that verify bit-exact on the M55 with
their code spread across ITCM and SRAM."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen.code_placement import (CODE, CONSTANT, CodePlacementError, CodeRegion, PlacedItem, code_regions,
                                             plan_code, section_name)
from edgetune.hal import load_target
from edgetune.model import load_model
from edgetune.model.code_plan import code_fit_problem, module_items
from edgetune.model.export import choose_layers, export_model
from edgetune.model.module import render_model_module
from edgetune.model.verify import verify_model
from edgetune.targets import get_target
from edgetune.targets.image import linker_script

DATA = Path(__file__).resolve().parent / "data" / "models"
DS_CNN = DATA / "ds_cnn_kws.tflite"
MOBILENET_V2 = DATA / "large" / "mobilenet_v2_035_96.tflite"
BOARDS = Path(__file__).resolve().parent.parent / "targets" / "boards"

FAST = CodeRegion("tcm", 1000, 0.0, True, False)
SLOW_RAM = CodeRegion("ram", 1000, 2.0, True, False)
FLASH = CodeRegion("flash", 10_000, 8.0, True, True)
DATA_ONLY = CodeRegion("dram", 10_000, 1.0, False, False)


def _plan(items, regions=(FAST, SLOW_RAM, FLASH)):
    return dict(plan_code(items, regions, "tcm").placed)


def test_a_module_that_fits_the_code_region_stays_there_whole():
    plan = plan_code([PlacedItem("f", CODE, 400, 10), PlacedItem("w", CONSTANT, 600, 1)], (FAST, FLASH), "tcm")
    assert not plan.split and plan.used() == () and plan.region_of("w") == "tcm"


def test_hot_code_goes_first_then_constants_by_accesses_per_byte():
    items = [PlacedItem("cold_code", CODE, 500, 100), PlacedItem("hot_code", CODE, 500, 10_000),
             PlacedItem("reused_weights", CONSTANT, 400, 400 * 50), PlacedItem("fc_weights", CONSTANT, 400, 400)]
    placed = _plan(items)
    # Both functions before any constant: the TCM is full of code, so the most reused weights
    # take the next fastest region, the least reused the flash only once the RAM is full.
    assert placed["hot_code"] == "tcm" and placed["cold_code"] == "tcm"
    assert placed["reused_weights"] == "ram" and placed["fc_weights"] == "ram"
    crowded = _plan([*items, PlacedItem("big", CONSTANT, 900, 900 * 10)])
    assert crowded["reused_weights"] == "ram" and crowded["big"] == "flash" and crowded["fc_weights"] == "ram"


def test_code_never_lands_in_a_region_that_cannot_execute_it():
    placed = _plan([PlacedItem("f", CODE, 900, 5), PlacedItem("g", CODE, 900, 4)], (FAST, DATA_ONLY, FLASH))
    assert placed == {"f": "tcm", "g": "flash"}


def test_items_that_fit_nowhere_are_refused_naming_the_regions_and_the_need():
    with pytest.raises(CodePlacementError) as exc:
        plan_code([PlacedItem("w", CONSTANT, 20_000, 1), PlacedItem("f", CODE, 100, 1)], (FAST, FLASH), "tcm")
    message = str(exc.value)
    assert "100 bytes of code and 20,000 bytes of constants" in message
    assert "tcm 1,000, flash 10,000" in message and "w (20,000 bytes) is left over" in message


def test_the_m55_offers_itcm_then_sram_then_flash_and_keeps_buffer_regions_out():
    regions = code_regions(get_target("cortex-m55"))
    assert [r.name for r in regions] == ["itcm", "sram", "qspi"]
    assert regions[0].capacity == 512 * 1024 - 64 * 1024 and regions[2].flash and not regions[1].flash
    assert [r.name for r in code_regions(get_target("cortex-m4"))] == ["ssram1"]
    assert code_regions(get_target("host")) == ()


@pytest.mark.parametrize("region", ["dtcm", "sram2", "itcm;", ".text", "nowhere"])
def test_section_names_come_only_from_the_targets_code_regions(region):
    target = get_target("cortex-m55")
    assert section_name(target, "sram", CODE) == ".edgetune.sram.text"
    assert section_name(target, "qspi", CONSTANT) == ".edgetune.qspi.rodata"
    with pytest.raises(CodePlacementError):
        section_name(target, region, CONSTANT)


def test_the_harness_links_placed_sections_into_their_regions_and_copies_ram_ones_from_flash():
    script = linker_script(get_target("cortex-m55"))
    assert "ET_SRAM (rwx) : ORIGIN = 0x01000000" in script and "ET_QSPI (rx) : ORIGIN = 0x28000000" in script
    assert re.search(r"\.edgetune\.sram : ALIGN\(16\) \{.*?\} > ET_SRAM AT > ET_QSPI", script, re.S)
    assert re.search(r"\.edgetune\.qspi : ALIGN\(16\) \{.*?\} > ET_QSPI\n", script, re.S)
    assert "LONG(__et_sram_load) LONG(__et_sram_start) LONG(__et_sram_end)" in script
    assert "__et_qspi_load) LONG" not in script  # flash holds its contents: nothing to copy
    m4 = linker_script(get_target("cortex-m4"))
    assert "ET_" not in m4.split("SECTIONS")[0] and "LONG(" not in m4


def _small_itcm_board(tmp_path: Path, itcm: int) -> Path:
    """The M55 with an ITCM of `itcm` bytes: the code plan's room there is 64 KiB less."""
    text = (BOARDS / "cortex-m55.toml").read_text()
    text = text.replace('name = "cortex-m55"', 'name = "small-itcm-m55"', 1)
    text = text.replace('size = 0x0008_0000           # 512 KiB\naccess = "rwx"', f'size = {itcm:#x}\naccess = "rwx"', 1)
    board = tmp_path / "small-itcm-m55.toml"
    board.write_text(text)
    return board


@pytest.mark.parametrize("name", ["ds_cnn_kws", "resnet8_cifar10", "fc_autoencoder_ad", "mobilenet_v1_025_vww"])
def test_the_committed_models_fit_the_itcm_and_render_without_sections(name):
    """Their modules render as before code placement: no item moved, no section, no macro."""
    model = load_model(DATA / f"{name}.tflite")
    target = get_target("cortex-m55")
    chosen, _ = choose_layers(model, target, None)
    rendered = render_model_module(model, target, chosen, name=name, database="", date="", version="",
                                   model_bytes=b"")
    assert rendered.code_plan is not None and not rendered.code_plan.split
    text = "".join(rendered.files.values())
    assert "_PLACED" not in text and "edgetune.itcm" not in text and "EDGETUNE_DEFINES" not in text


def test_a_small_itcm_splits_the_module_and_it_verifies_bit_exact_on_the_m55(tmp_path, monkeypatch):
    board = _small_itcm_board(tmp_path, 64 * 1024 + 24 * 1024)  # 24 KiB for the module's code and constants
    target = load_target(board)
    monkeypatch.chdir(tmp_path)  # no edgetune.db here: every layer at its kernel's default configuration
    result = CliRunner().invoke(main, ["model", "export", str(DS_CNN), "--target", str(board), "--out",
                                       str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert re.search(r"code plan: the module exceeds itcm \(placed by accesses per byte\): .* in itcm, "
                     r"[\d,]+ B of constants \(\d+ const arrays?\) in sram \(copied from flash at boot\)", result.output)
    folder = tmp_path / "m"
    model_c = (folder / "ds_cnn_kws.c").read_text()
    placed = re.findall(r'(\w+)\[\d+\] __attribute__\(\(aligned\(16\)\)\) DS_CNN_KWS_PLACED\("\.edgetune\.sram\.rodata"\)',
                        model_c)
    kept = re.findall(r'(\w+)\[\d+\] __attribute__\(\(aligned\(16\)\)\) = \{', model_c)
    assert placed and kept
    # The classifier's weights (read once per inference) leave before the first convolution's
    # (read at every output position). Constants are named by their operator's index.
    classifier = re.search(r"(\d+) FULLY_CONNECTED", result.output).group(1)
    assert f"ds_cnn_kws_l{classifier}_weights" in placed
    assert "ds_cnn_kws_l0_weights" in kept
    fragment = (folder / "edgetune_sections.ld").read_text()
    assert "} > EDGETUNE_SRAM AT > EDGETUNE_LOAD" in fragment and "REGION_ALIAS(\"EDGETUNE_LOAD\"" in fragment
    assert "EDGETUNE_SRAM" in (folder / "edgetune_kernels.mk").read_text()
    outcome = verify_model(folder, target, n_inputs=1)
    assert outcome.ok, outcome.layer_problem or [i.problem for i in outcome.inferences]


def test_a_model_whose_code_and_constants_fit_nowhere_is_refused_in_one_line(tmp_path):
    text = (BOARDS / "cortex-m55.toml").read_text().replace('name = "cortex-m55"', 'name = "no-room-m55"', 1)
    text = text.replace("size = 0x0020_0000", "size = 0x0000_4000", 1)  # SRAM: 16 KiB
    text = text.replace("size = 0x0080_0000", "size = 0x0000_4000", 1)  # QSPI: 16 KiB
    board = tmp_path / "no-room-m55.toml"
    board.write_text(text)
    problem = code_fit_problem(load_model(MOBILENET_V2), load_target(board))
    assert problem and "itcm 458,752, sram 16,384, qspi 16,384" in problem
    for command in (["model", "show", str(MOBILENET_V2), "--target", str(board)],
                    ["model", "export", str(MOBILENET_V2), "--target", str(board), "--out", str(tmp_path / "m")]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2, result.output
        assert "do not fit the regions that may hold them" in result.output
        assert "is left over" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_the_mobilenet_v2_is_shown_as_fitting_the_m55_because_its_plan_places_it():
    assert code_fit_problem(load_model(MOBILENET_V2), get_target("cortex-m55")) is None


@pytest.mark.slow
def test_the_mobilenet_v2_verifies_on_the_m55_with_its_code_placed_by_the_plan(tmp_path):
    """Issue 28: Keras's MobileNetV2 (alpha 0.35, 96x96) exceeds the 512 KiB ITCM; exported,
    its largest little-reused weights go to SRAM, and it runs bit for bit as TFLite Micro."""
    target = get_target("cortex-m55")
    export_model(MOBILENET_V2, target, None, tmp_path / "m")
    model_c = (tmp_path / "m" / "mobilenet_v2_035_96.c").read_text()
    assert 'MOBILENET_V2_035_96_PLACED(".edgetune.sram.rodata")' in model_c
    outcome = verify_model(tmp_path / "m", target, n_inputs=1)
    assert outcome.ok, [i.problem for i in outcome.inferences]
    assert outcome.size.flash_bytes > 512 * 1024  # more than the whole ITCM: it could not run unplaced


def test_with_no_room_in_the_itcm_the_functions_run_from_sram_copied_in_at_start_up(tmp_path):
    """Every function and array of the module in SRAM (stored in flash, copied at start-up,
    called through the linker's long-branch veneers from the ITCM): still bit-exact."""
    target = load_target(_small_itcm_board(tmp_path, 64 * 1024))
    export_model(DS_CNN, target, None, tmp_path / "m")
    sources = {p.name: p.read_text() for p in (tmp_path / "m").glob("*.c")}
    functions = [n for n, text in sources.items() if '__attribute__((section(".edgetune.sram.text")))' in text]
    assert len(functions) == len(sources) - 2  # all but the module's own dispatch and arena files
    assert "] __attribute__((aligned(16))) = {" not in sources["ds_cnn_kws.c"]  # no array left in .rodata
    outcome = verify_model(tmp_path / "m", target, n_inputs=1)
    assert outcome.ok, outcome.layer_problem or [i.problem for i in outcome.inferences]
    assert dict(outcome.inferences[0].mix).get("accesses", {}).get("sram", 0) > outcome.inferences[0].instructions / 2
    # Stored in flash and copied to SRAM: the constants count in both figures.
    assert outcome.size.ram_bytes > outcome.size.flash_bytes - outcome.size.code_bytes


def test_a_tuned_functions_measured_instructions_and_code_bytes_are_its_benefit_and_size():
    model = load_model(DS_CNN)
    target = get_target("cortex-m55")
    chosen, _ = choose_layers(model, target, None)
    rendered = render_model_module(model, target, chosen, name="kws", database="", date="", version="", model_bytes=b"")
    steps = [s for s in rendered.steps if s.kernel is not None]
    fn = steps[0].function
    calls = sum(1 for s in rendered.steps if s.function == fn)
    items = {i.name: i for i in module_items(model, rendered.steps, [], {fn: {"instructions": 1000, "code_bytes": 300}},
                                             {f"{fn}.c": "x" * 3000})}
    assert items[fn].accesses == 1000 * calls and items[fn].nbytes == 304 + 16  # 16-byte aligned, and a veneer
    other = steps[-1].function  # not measured: its layers' MACs, and a third of its (empty) source
    assert other != fn and items[other].nbytes == 16
    assert items[other].accesses == sum(model.layers[s.index].macs for s in rendered.steps if s.function == other)


def test_without_flash_a_ram_regions_contents_are_loaded_in_place_not_copied(tmp_path):
    text = (BOARDS / "cortex-m55.toml").read_text().replace('name = "cortex-m55"', 'name = "no-flash-m55"', 1)
    board = tmp_path / "no-flash-m55.toml"
    board.write_text(text.replace('kind = "flash"', 'kind = "dram"', 1))  # the QSPI memory as a DRAM
    script = linker_script(load_target(board))
    assert re.search(r"\.edgetune\.sram : ALIGN\(16\) \{.*?\} > ET_SRAM\n", script, re.S)
    assert "LONG(" not in script and " AT > " not in script.split(".data :")[0]


def test_a_much_read_array_that_missed_the_fast_region_swaps_in_for_less_read_ones():
    """First fit alone leaves `conv` (400 bytes read 9 times each) in the slow region, `twin`
    (read as often per byte, placed first) and the classifier's weights (read once) in the
    fast one; the swap moves those two out for it: 2,900 slow reads instead of 3,600."""
    fast, slow = CodeRegion("tcm", 1000, 0.0, True, False), CodeRegion("ram", 10_000, 2.0, True, False)
    items = [PlacedItem("early", CONSTANT, 500, 500 * 50), PlacedItem("a_twin", CONSTANT, 300, 300 * 9),
             PlacedItem("conv", CONSTANT, 400, 400 * 9), PlacedItem("classifier", CONSTANT, 200, 200)]
    placed = dict(plan_code(items, (fast, slow), "tcm").placed)
    assert placed == {"early": "tcm", "a_twin": "ram", "conv": "tcm", "classifier": "ram"}
    # No swap that would raise the stalls: room for `b` (3,200 reads) means pushing out `a_twin`
    # and `c`, read 4,200 times.
    items = [PlacedItem("early", CONSTANT, 300, 300 * 50), PlacedItem("a_twin", CONSTANT, 500, 500 * 8),
             PlacedItem("b", CONSTANT, 400, 400 * 8), PlacedItem("c", CONSTANT, 200, 200)]
    assert dict(plan_code(items, (fast, slow), "tcm").placed) == {"early": "tcm", "a_twin": "tcm", "b": "ram",
                                                                    "c": "tcm"}
