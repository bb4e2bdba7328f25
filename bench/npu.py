"""Vela's estimates for a few layers across the Ethos-U55 MAC configurations, side by side.

For each layer: npu_cycles and total_cycles per configuration (Shared_Sram, Performance,
HillClimb, the board's data), the speed-up against the 32-MAC configuration measured in the
same run, and the achieved MACs per NPU cycle against the configuration's peak.

    .venv/bin/python bench/npu.py [--device ethos-u55] [--mode Shared_Sram]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from edgetune.npu import build_model, get_npu_operator
from edgetune.targets import get_target
from edgetune.targets.vela import VelaOptions, compile_model

LAYERS = [
    ("matmul_s8", "m=16,n=64,k=64"),
    ("conv2d_s8", "h=16,w=16,cin=16,cout=32,kh=3,kw=3,stride=1,pad=1,dilation=1"),
    ("conv2d_s8", "h=32,w=32,cin=32,cout=64,kh=1,kw=1,stride=1,pad=0,dilation=1"),
    ("dwconv2d_s8", "h=32,w=32,c=64,kh=3,kw=3,stride=1,pad=same,dilation=1"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cortex-m55")
    parser.add_argument("--device", default="ethos-u55")
    parser.add_argument("--mode", default="Shared_Sram")
    args = parser.parse_args()
    target = get_target(args.target)
    npu = target.npu(args.device)
    print(f"{args.device} on {target.name}, memory mode {args.mode}, Performance, HillClimb, arena 131072")
    print(f"{'layer':64} {'MACs/cc':>7} {'npu_cycles':>10} {'total':>8} {'vs ' + str(npu.macs_per_cycle[0]):>7} "
          f"{'MAC/cycle':>9} {'of peak':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape_text in LAYERS:
            op = get_npu_operator(name)
            shape = op.parse_shape(shape_text)
            model = build_model(op.model(shape, np.random.default_rng(0)))
            reference = None
            for macs in npu.macs_per_cycle:
                options = VelaOptions(macs, args.mode, "Performance", 131072, "HillClimb")
                values = compile_model(model, name, target, npu, options, Path(tmp) / f"{name}-{macs}").values
                reference = reference or values["total_cycles"]
                per_cycle = values["layer_macs"] / values["total_cycles"]
                print(f"{name + ' ' + shape_text:64} {macs:7d} {values['npu_cycles']:10d} {values['total_cycles']:8d} "
                      f"{reference / values['total_cycles']:6.2f}x {per_cycle:9.1f} {per_cycle / macs:6.0%}")


if __name__ == "__main__":
    main()
