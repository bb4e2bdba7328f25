"""The floor of ResNet-8's convolutions on the Cortex-M55 (issue 29, goal 1), as
bench/ds_cnn_layers.py measures DS-CNN's: named configurations on each layer's tuning inputs,
beside the kernel's default configuration and the plain loop nest at gcc -O3, in one run.

The named rows are the configuration a default-budget tune had shipped before conv2d_s8's
starting points existed, and the starting points themselves (codegen/kernels/conv2d_s8.py,
HELIUM_TILINGS) with their neighbours: the sweep that chose them (bench/RESULTS.md, "Starting
points and the table ADD").

usage: .venv/bin/python bench/resnet8_layers.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from ds_cnn_layers import PACKED, print_floors  # noqa: E402  (bench/ds_cnn_layers.py)

IM2COL = dict(PACKED, algo="im2col")
DIRECT = dict(PACKED, algo="direct", im2col_pixels=1)
LAYERS = [
    ("conv 0: 32x32x3 -> 16, 3x3", "conv2d_s8", "h=32,w=32,cin=3,cout=16,kh=3,kw=3,stride=1,dilation=1,pad=same", 1,
     {"shipped before: im2col 4 px, OHWI, 4x1, weight sums once":
          dict(IM2COL, im2col_pixels=4, tile_p=4, tile_oc=1, layout="ohwi", weight_sums="precomputed"),
      "im2col 4 px, packed, 4x2": dict(IM2COL, im2col_pixels=4, tile_p=4, tile_oc=2),
      "im2col 16 px, packed, 4x1": dict(IM2COL, im2col_pixels=16, tile_p=4, tile_oc=1),
      "starting point: im2col 32 px, packed, 4x1": dict(IM2COL, im2col_pixels=32, tile_p=4, tile_oc=1)}),
    ("convs 1, 2: 32x32x16 -> 16, 3x3", "conv2d_s8", "h=32,w=32,cin=16,cout=16,kh=3,kw=3,stride=1,dilation=1,pad=same", 2,
     {"starting point: im2col 64 px, packed, 2x3": dict(IM2COL, im2col_pixels=64, tile_p=2, tile_oc=3),
      "im2col 64 px, packed, 2x4": dict(IM2COL, im2col_pixels=64, tile_p=2, tile_oc=4),
      "im2col 64 px, packed, 4x1": dict(IM2COL, im2col_pixels=64, tile_p=4, tile_oc=1)}),
    ("conv 6: 32x32x16 -> 32, 1x1, stride 2", "conv2d_s8", "h=32,w=32,cin=16,cout=32,kh=1,kw=1,stride=2,dilation=1,pad=valid", 1,
     {"shipped before: im2col 8 px, packed, 4x1, -O2": dict(IM2COL, im2col_pixels=8, tile_p=4, tile_oc=1, opt="O2"),
      "direct, packed, 2x3": dict(DIRECT, tile_p=2, tile_oc=3),
      "starting point: direct, packed, 4x2": dict(DIRECT, tile_p=4, tile_oc=2)}),
]

if __name__ == "__main__":
    print_floors("ResNet-8", LAYERS)
