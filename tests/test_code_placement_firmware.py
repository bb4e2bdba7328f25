"""A model module whose code plan moved arrays out of the code region, built as a user's
firmware builds it (tests/data/user_firmware_m55's start-up code, the export's Make fragment,
a linker script of the user's that defines EDGETUNE_SRAM and EDGETUNE_LOAD and INCLUDEs
edgetune_sections.ld; main copies the SRAM section in from flash with docs/export.md's example
code): it runs in QEMU and
computes TFLite Micro's output, the moved arrays in SRAM. Compiled with
EDGETUNE_DEFAULT_SECTIONS and linked by the user's plain script, the same module keeps
everything in .rodata and computes the same."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgetune.hal import load_target
from edgetune.model.export import export_model
from edgetune.model.oracle import run_tflm

pytestmark = pytest.mark.qemu
ROOT = Path(__file__).resolve().parent
FIRMWARE = ROOT / "data" / "user_firmware_m55"
DS_CNN = ROOT / "data" / "models" / "ds_cnn_kws.tflite"
SRAM = (0x0100_0000, 0x0120_0000)

PLACED_LD = """MEMORY
{
  ITCM  (rx)  : ORIGIN = 0x00000000, LENGTH = 512K
  SRAM  (rwx) : ORIGIN = 0x01000000, LENGTH = 2M
  DTCM  (rw)  : ORIGIN = 0x20000000, LENGTH = 512K
  FLASH (rx)  : ORIGIN = 0x28000000, LENGTH = 8M
}
REGION_ALIAS("EDGETUNE_DTCM", DTCM);
REGION_ALIAS("EDGETUNE_SRAM", SRAM);
REGION_ALIAS("EDGETUNE_LOAD", FLASH);
ENTRY(user_reset)
SECTIONS
{
  .text : { KEEP(*(.vectors)) *(.text .text.*) *(.rodata .rodata.*) . = ALIGN(4); } > ITCM
  .ARM.exidx : { *(.ARM.exidx*) } > ITCM
  __data_load = LOADADDR(.data);
  .data : { . = ALIGN(4); __data_start = .; *(.data .data.*) . = ALIGN(4); __data_end = .; } > DTCM AT > ITCM
  .bss (NOLOAD) : { . = ALIGN(4); __bss_start = .; *(.bss .bss.* COMMON) . = ALIGN(4); __bss_end = .; } > DTCM
  INCLUDE edgetune_sections.ld
  __stack_top = ORIGIN(DTCM) + LENGTH(DTCM);
}
"""

MAIN_C = """#include <stddef.h>
#include <stdint.h>
#include "ds_cnn_kws.h"
int user_write_file(const char *, size_t, const void *, size_t);
#ifndef EDGETUNE_DEFAULT_SECTIONS
%(copy)s
#endif
static const int8_t input[%(n)d] = {%(values)s};
static int8_t output[%(m)d];
int main(void)
{
#ifndef EDGETUNE_DEFAULT_SECTIONS
    edgetune_copy_sram(); /* what the fragment asks of the start-up code */
#endif
    ds_cnn_kws_invoke(input, output);
    return user_write_file("out.bin", 7, output, sizeof output) != 0;
}
"""


def docs_copy_example() -> str:
    """The start-up copy docs/export.md shows, as the reader would paste it."""
    page = (ROOT.parent / "docs" / "export.md").read_text()
    section = page[page.index("### Copying the code plan's sections in"):]
    return section[section.index("```c\n") + 5:section.index("```\n", section.index("```c\n") + 5)]


@pytest.mark.parametrize("cpu", ["cortex-m55", "cortex-m7", "cortex-m4"])
def test_the_documented_start_up_copy_compiles_cleanly(tmp_path, cpu):
    (tmp_path / "copy.c").write_text(docs_copy_example())
    built = subprocess.run(["arm-none-eabi-gcc", f"-mcpu={cpu}", "-mthumb", "-O2", "-std=c99", "-Wall", "-Wextra",
                            "-Werror", "-pedantic", "-c", "copy.c"], cwd=tmp_path, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert "edgetune_copy_sram" in subprocess.run(["arm-none-eabi-nm", "copy.o"], cwd=tmp_path, capture_output=True,
                                                  text=True, check=True).stdout


def _export(tmp_path: Path) -> Path:
    """DS-CNN exported for an M55 whose ITCM leaves the module 24 KiB: the plan moves arrays to SRAM."""
    text = (ROOT.parent / "targets" / "boards" / "cortex-m55.toml").read_text()
    text = text.replace('name = "cortex-m55"', 'name = "small-itcm-m55"', 1)
    text = text.replace('size = 0x0008_0000           # 512 KiB\naccess = "rwx"', 'size = 0x1_6000\naccess = "rwx"', 1)
    (tmp_path / "board.toml").write_text(text)
    export_model(DS_CNN, load_target(tmp_path / "board.toml"), None, tmp_path / "export")
    return tmp_path / "export"


def _build_and_run(tmp_path: Path, folder: Path, x: np.ndarray, script: str, defines: str) -> tuple[np.ndarray, dict]:
    project = tmp_path / f"firmware{'_default' if defines else ''}"
    shutil.copytree(FIRMWARE, project)
    (project / "link.ld").write_text(script)
    (project / "main.c").write_text(MAIN_C % dict(n=x.size, m=12, values=", ".join(map(str, x.reshape(-1))),
                                                  copy=docs_copy_example()))
    made = subprocess.run(["make", "-C", str(project), f"EXPORT={folder}", f"EDGETUNE_DEFINES={defines}",
                           f"CFLAGS=-march=armv8.1-m.main+mve.fp+fp.dp -mfloat-abi=hard -mthumb -O1 -std=c99 "
                           f"-I{folder} {defines}"], capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    proc = subprocess.run(["qemu-system-arm", "-M", "mps3-an547", "-nographic", "-monitor", "none", "-serial", "none",
                           "-semihosting-config", "enable=on,target=native", "-kernel", "firmware.elf"],
                          cwd=project, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run(["arm-none-eabi-objdump", "-t", str(project / "firmware.elf")], capture_output=True, text=True,
                         check=True).stdout
    symbols = {parts[-1]: int(parts[0], 16) for parts in map(str.split, out.splitlines())
               if len(parts) >= 5 and all(c in "0123456789abcdef" for c in parts[0])}
    return np.frombuffer((project / "out.bin").read_bytes(), dtype=np.int8), symbols


def test_a_split_module_runs_in_a_users_firmware_with_its_arrays_in_sram_or_in_default_sections(tmp_path):
    folder = _export(tmp_path)
    model_c = (folder / "ds_cnn_kws.c").read_text()
    moved = [line.split("[")[0].split()[-1] for line in model_c.splitlines() if '_PLACED(".edgetune.sram.rodata")' in line]
    assert moved
    assert "EDGETUNE_DEFINES" in (folder / "edgetune_kernels.mk").read_text()
    x = np.random.default_rng(5).integers(-128, 128, size=(1, 49, 10, 1), dtype=np.int8)
    want = run_tflm(DS_CNN.read_bytes(), [x])[0].reshape(-1)
    got, symbols = _build_and_run(tmp_path, folder, x, PLACED_LD, "")
    assert np.array_equal(got, want)
    assert all(SRAM[0] <= symbols[name] < SRAM[1] for name in moved)
    plain = (FIRMWARE / "link.ld").read_text()  # no SRAM, no EDGETUNE_LOAD: the fallback needs neither
    got, symbols = _build_and_run(tmp_path, folder, x, plain, "-DEDGETUNE_DEFAULT_SECTIONS")
    assert np.array_equal(got, want)
    assert all(symbols[name] < 0x0008_0000 for name in moved)  # in the ITCM's .rodata
