"""bench/code_placement.py's pieces without the emulator: the flash-only board it measures
against, and how it reads where an export put its code and constants."""
from __future__ import annotations

from pathlib import Path

from edgetune.codegen.code_placement import code_regions
from edgetune.hal import load_target

from bench_scripts import load_bench

BOARD = Path(__file__).resolve().parent.parent / "targets" / "boards" / "cortex-m55.toml"


def test_the_flash_only_board_leaves_a_module_nothing_but_the_flash(tmp_path):
    bench = load_bench("code_placement")
    board = tmp_path / "flash.toml"
    board.write_text(bench.flash_only_board(BOARD.read_text()))
    regions = {r.name: r for r in code_regions(load_target(board))}
    assert regions["itcm"].capacity == 0 and regions["sram"].capacity == 16
    assert regions["qspi"].capacity == 8 * 1024 * 1024 and regions["qspi"].flash


def test_the_summary_counts_sections_by_region_and_kind(tmp_path):
    bench = load_bench("code_placement")
    (tmp_path / "a.c").write_text('X_PLACED(".edgetune.sram.rodata") Y_PLACED(".edgetune.sram.rodata")\n'
                                  '__attribute__((section(".edgetune.qspi.text")));\n')
    assert bench.placement_summary(tmp_path) == "qspi text: 1, sram rodata: 2"
    (tmp_path / "a.c").write_text("int x;\n")
    assert bench.placement_summary(tmp_path) == "all in the ITCM"
