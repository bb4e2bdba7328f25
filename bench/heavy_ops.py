"""The tuned kernels of TRANSPOSE_CONV (tconv2d_s8) and BATCH_MATMUL (bmm_s8) on the Cortex-M55
(QEMU, exact instruction counts): each kernel's plain loop (render_naive: for tconv2d_s8 every
output, every tap, a test for the taps that miss; for bmm_s8 a triple loop per batch; GCC -O3)
beside every configuration of the kernel's space at -O3 (each tile, plain C and Helium, both
compilers), on the same inputs in the same run, each checked against the kernel's reference
(itself bit-exact with TFLite Micro: tests/test_tconv2d.py, tests/test_bmm.py). The shapes
are an upsampling decoder's layers and one attention head's two products.

usage: .venv/bin/python bench/heavy_ops.py [--target cortex-m55] [--opt O3] [--only tconv2d_s8|bmm_s8]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from kernels import plain_loop_values  # noqa: E402  (bench/kernels.py: the plain loop, checked)

from edgetune.codegen import get_kernel  # noqa: E402
from edgetune.evaluate import Evaluator  # noqa: E402
from edgetune.targets import get_target  # noqa: E402
from edgetune.tuner import Outcome  # noqa: E402

SHAPES = {
    "tconv 3x3 s2 SAME 8x8x32 -> 16x16x16": ("tconv2d_s8",
        "h=8,w=8,cin=32,cout=16,kh=3,kw=3,stride_h=2,stride_w=2,pad_top=0,pad_left=0,oh=16,ow=16"),
    "tconv 2x2 s2 VALID 8x8x32 -> 16x16x32": ("tconv2d_s8",
        "h=8,w=8,cin=32,cout=32,kh=2,kw=2,stride_h=2,stride_w=2,pad_top=0,pad_left=0,oh=16,ow=16"),
    "tconv 4x4 s2 SAME 16x16x8 -> 32x32x3": ("tconv2d_s8",
        "h=16,w=16,cin=8,cout=3,kh=4,kw=4,stride_h=2,stride_w=2,pad_top=1,pad_left=1,oh=32,ow=32"),
    "bmm Q K^T, 2 heads, 32 tokens, d=16": ("bmm_s8",
        "batch=2,lhs_batches=2,rhs_batches=2,m=32,n=32,k=16,adj_x=0,adj_y=1"),
    "bmm P V, 2 heads, 32 tokens, d=16": ("bmm_s8",
        "batch=2,lhs_batches=2,rhs_batches=2,m=32,n=16,k=32,adj_x=0,adj_y=0"),
}


def macs_of(name: str, shape: dict) -> int:
    if name == "bmm_s8":
        return shape["batch"] * shape["m"] * shape["n"] * shape["k"]
    return shape["h"] * shape["w"] * shape["cin"] * shape["kh"] * shape["kw"] * shape["cout"]


def sweep(kernel, target, shape, io, opt: str, work: Path) -> list[tuple[dict, int]]:
    """Every legal configuration at `opt`: (its parameters, instructions); a failed one stops the bench."""
    space = kernel.space(target, shape)
    rows = []
    for n, config in enumerate(c for c in space if c["opt"] == opt):
        folder = work / f"v{n}"
        folder.mkdir()
        trial = Evaluator(kernel, target, shape, space, io, folder)(config)
        if trial.outcome is not Outcome.OK:
            raise SystemExit(f"{config.key()} failed: {trial.outcome.value}: {trial.error}")
        rows.append((dict(config.items), int(trial.values["instructions"])))
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="cortex-m55")
    parser.add_argument("--opt", default="O3")
    parser.add_argument("--only", choices=("tconv2d_s8", "bmm_s8"), help="one kernel's shapes")
    args = parser.parse_args(argv)
    target = get_target(args.target)
    print(f"{target.name}: instructions per call (QEMU), -{args.opt} for the tuned variants")
    print(f"{'layer':42} {'MACs':>9} {'plain loop':>11} {'best C':>9} {'best Helium':>12} {'x plain':>8}  best")
    for label, (name, text) in SHAPES.items():
        if args.only and name != args.only:
            continue
        kernel = get_kernel(name)
        shape = kernel.parse_shape(text)
        io = kernel.make_io(shape, np.random.default_rng(0))
        with tempfile.TemporaryDirectory() as folder:
            plain = int(plain_loop_values(kernel, target, shape, io, Path(folder))["instructions"])
            rows = sweep(kernel, target, shape, io, args.opt, Path(folder))
        best = min(rows, key=lambda r: r[1])
        by_path = {v: min((n for c, n in rows if c["vector"] == v), default=None) for v in ("c", "mve")}
        macs = macs_of(name, shape)
        text_best = ",".join(f"{k}={v}" for k, v in best[0].items() if k in ("tile_c", "tile_n", "vector", "compiler"))
        helium = "-" if by_path["mve"] is None else f"{by_path['mve']:,}"
        print(f"{label:42} {macs:>9,} {plain:>11,} {by_path['c']:>9,} {helium:>12} {best[1] / plain:>8.3f}  {text_best}")


if __name__ == "__main__":
    main()
