"""The floor of each DS-CNN layer's space on the Cortex-M55 (issue 29, goal 1): named Helium
configurations of the kernels measured on the layer's tuning inputs, beside the kernel's
default configuration (the space's first legal point: what an untuned layer runs and what
`model tune` measures first) and the plain loop nest at GCC -O3, all in the same run.

The configurations are the best ones found by hand for these shapes (bench/RESULTS.md,
"DS-CNN's layers: the floor of the spaces"); each is checked against the kernel's reference
like any trial. MACs per instruction = the layer's MACs / instructions. Exact QEMU counts:
one run each.

usage: .venv/bin/python bench/ds_cnn_layers.py
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from kernels import macs_of, measure_naive  # noqa: E402  (bench/kernels.py)

from edgetune.codegen import get_kernel  # noqa: E402
from edgetune.evaluate import Evaluator  # noqa: E402
from edgetune.model.module import default_config  # noqa: E402
from edgetune.session import workload_inputs, workload_of  # noqa: E402
from edgetune.targets import get_target  # noqa: E402

PACKED = dict(unroll=1, vector="mve", weight_sums="in_loop", layout="packed", fusion="fused", compiler="clang", opt="O3")
# (label, kernel, shape, occurrences in the model, named configurations)
LAYERS = [
    ("conv 0: 49x10x1 -> 64, 10x4, stride 2", "conv2d_s8",
     "h=49,w=10,cin=1,cout=64,kh=10,kw=4,stride_h=2,stride_w=2,dilation_h=1,dilation_w=1,"
     "pad_top=4,pad_bottom=5,pad_left=1,pad_right=1", 1,
     {"im2col packed 2x3": dict(PACKED, algo="im2col", im2col_pixels=8, tile_p=2, tile_oc=3),
      "im2col packed 2x4": dict(PACKED, algo="im2col", im2col_pixels=8, tile_p=2, tile_oc=4),
      "im2col ohwi 4x2, weight sums once": dict(PACKED, algo="im2col", im2col_pixels=8, tile_p=4, tile_oc=2,
                                                layout="ohwi", weight_sums="precomputed")}),
    ("depthwise 3x3, 25x5x64", "dwconv2d_s8", "h=25,w=5,c=64,mult=1,kh=3,kw=3,stride=1,dilation=1,pad=same", 4,
     {"mve_pixels, tap loop": dict(tile_c=4, tile_p=1, taps="loop", layout="hwc", vector="mve_pixels",
                                   compiler="clang", opt="O3"),
      "mve 4 ch x 2 px, padded copy": dict(tile_c=4, tile_p=2, taps="padded3x3", layout="packed", vector="mve",
                                           compiler="clang", opt="O2")}),
    ("pointwise 1x1, 25x5x64 -> 64", "conv2d_s8", "h=25,w=5,cin=64,cout=64,kh=1,kw=1,stride=1,dilation=1,pad=valid", 4,
     {"direct packed 2 px x 3 ch": dict(PACKED, algo="direct", im2col_pixels=1, tile_p=2, tile_oc=3),
      "direct packed 1 px x 4 ch": dict(PACKED, algo="direct", im2col_pixels=1, tile_p=1, tile_oc=4),
      "direct packed 2 px x 4 ch": dict(PACKED, algo="direct", im2col_pixels=1, tile_p=2, tile_oc=4)}),
]


def measure(kernel, target, shape, evaluator, values: dict) -> int | str:
    space = evaluator.space
    config = space.make({**default_config(kernel, target, shape).as_dict(), **values})
    if not space.is_legal(config):
        return "illegal"
    trial = evaluator(config)
    return trial.values["instructions"] if not trial.outcome.failed else trial.outcome.value


def print_floors(model: str, layers: list) -> None:
    """One table row per named configuration of each layer, beside its plain loop and default."""
    target = get_target("cortex-m55")
    print(f"{model}'s layers on {target.name} (QEMU {target.runner.machine}): instructions per call")
    print(f"| layer (x occurrences) | configuration | instructions | MACs / instruction | x plain loop |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for label, name, text, times, named in layers:
            kernel = get_kernel(name)
            shape = kernel.parse_shape(text)
            workload = workload_of(kernel, target, shape)
            evaluator = Evaluator(kernel, target, shape, kernel.tuning_space(target, shape),
                                  workload_inputs(kernel, workload), work)
            macs = macs_of(name, shape)
            plain = measure_naive(kernel, target, shape, workload, work, ("-O3",))
            rows = [("plain loop, gcc -O3", plain), ("default configuration", measure(kernel, target, shape, evaluator, {}))]
            rows += [(what, measure(kernel, target, shape, evaluator, values)) for what, values in named.items()]
            for what, value in rows:
                if isinstance(value, int):
                    print(f"| {label} (x{times}) | {what} | {value:,} | {macs / value:.2f} | {plain / value:.1f} |")
                else:
                    print(f"| {label} (x{times}) | {what} | {value} | | |")


if __name__ == "__main__":
    print_floors("DS-CNN", LAYERS)
