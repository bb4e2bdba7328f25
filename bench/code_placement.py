"""Code placement on the Cortex-M55: the MobileNetV2 (alpha 0.35, 96x96) whose code and constants
exceed the 512 KiB ITCM, exported with the code plan's placement (hot code and the most reused
weights in the ITCM, the rest in SRAM: app/model/code_plan.py) against everything in flash
(the module's code and constants all in the QSPI flash, executed in place), both verified
bit-exact against TFLite Micro and measured in the same run on the same input.

Instructions hardly move (QEMU counts instructions, not stalls: only the long-branch veneers
between regions differ). The HAL's cycle estimate does: the cost model charges every load,
store and instruction fetch by the region it touches (wait_states in targets/boards/cortex-m55.toml:
ITCM and DTCM 0, SRAM 2, QSPI flash 8; estimates, see README "Cycle and energy estimates").
"Everything in flash" is the M55 board with its ITCM cut to the firmware's own 64 KiB and
its SRAM to 16 bytes, so that the plan has only the flash left.

usage: .venv/bin/python bench/code_placement.py [--inputs N]
"""
from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

from edgetune.codegen.code_placement import FIRMWARE_CODE_RESERVE
from edgetune.hal import load_target
from edgetune.model.export import export_model
from edgetune.model.verify import verify_model
from edgetune.targets import get_target

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "data" / "models" / "large" / "mobilenet_v2_035_96.tflite"
BOARD = ROOT / "targets" / "boards" / "cortex-m55.toml"


def flash_only_board(text: str) -> str:
    """The M55 board file with no room for a module but in its flash: the ITCM holds only the
    firmware's reserve, the SRAM 16 bytes."""
    text = text.replace('name = "cortex-m55"', 'name = "cortex-m55-flash-only"', 1)
    text = text.replace('size = 0x0008_0000           # 512 KiB\naccess = "rwx"',
                        f'size = {FIRMWARE_CODE_RESERVE:#x}\naccess = "rwx"', 1)
    out = text.replace("size = 0x0020_0000", "size = 0x10", 1)
    if out == text or 'cortex-m55-flash-only' not in out:
        raise SystemExit(f"{BOARD}: its ITCM or SRAM entries changed; update bench/code_placement.py")
    return out


def placement_summary(folder: Path) -> str:
    """Where the module's tagged functions and arrays went, counted by section."""
    text = "".join(p.read_text() for p in sorted(folder.glob("*.c")))
    found = re.findall(r'"\.edgetune\.(\w+)\.(text|rodata)"', text)
    counts = {}
    for region, kind in found:
        counts[f"{region} {kind}"] = counts.get(f"{region} {kind}", 0) + 1
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "all in the ITCM"


def measure(target, folder: Path, inputs: int) -> tuple[int, float, dict]:
    outcome = verify_model(folder, target, n_inputs=inputs)
    if not outcome.ok:
        raise SystemExit(f"{target.name}: not bit-exact: {outcome.layer_problem or [i.problem for i in outcome.inferences]}")
    first = outcome.inferences[0]
    values = dict(first.values)
    return first.instructions, float(values["cycles"]), dict(dict(first.mix).get("accesses", {}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1, help="random inputs per module (then a saturating one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        flash_board = Path(tmp) / "cortex-m55-flash-only.toml"
        flash_board.write_text(flash_only_board(BOARD.read_text()))
        rows = []
        for label, target in (("code plan", get_target("cortex-m55")), ("all in flash", load_target(flash_board))):
            folder = Path(tmp) / label.replace(" ", "_")
            export_model(MODEL, target, None, folder)
            rows.append((label, placement_summary(folder), *measure(target, folder, args.inputs)))
    print(f"{MODEL.name} on cortex-m55 (QEMU mps3-an547), default configurations, first random input; "
          "both bit-exact with TFLite Micro")
    print(f"{'placement':>12} {'instructions':>13} {'est. cycles':>13} {'x plan':>7}  sections / accesses by region")
    reference = rows[0][3]
    for label, where, instructions, cycles, accesses in rows:
        shown = ", ".join(f"{k} {v:,}" for k, v in sorted(accesses.items()))
        print(f"{label:>12} {instructions:>13,} {cycles:>13,.0f} {cycles / reference:>7.2f}  {where}; {shown}")


if __name__ == "__main__":
    main()
