"""conv2d_s8 and dwconv2d_s8 on the Cortex-M55 (QEMU): MACs per estimated cycle on the
layers where the per-channel requantisation weighs most (issue 19): the issue's 3x3
depthwise shape, the MLPerf Tiny depthwise layers (bench/dwconv.py's list) and the MLPerf
Tiny convolutions with the smallest reductions (K = cin * kh * kw of 8 to 40).

Each shape gets the same fixed search: known-good starts (bench/dwconv.py's for depthwise,
CONV_STARTS for convolutions), then seeded random search up to the budget, ranked by
estimated cycles. The MLPerf layers run on their own weights, biases, multipliers, shifts,
zero points and activation ranges (every shift negative, no clamp narrower than int8) with a
seeded random input; the issue's 3x3 shape on the kernel's own random inputs (left shifts
among the right ones, random clamps) and on TFLite-like quantisation (tflite_quant).
Random search draws the same configurations whatever they measure, so two runs of this
script on two versions of the templates measure the same variants: run it before and after a
change to compare them in the same conditions.

usage: .venv/bin/python bench/requant.py [--budget N] [--seed S] [--only dw|conv]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from dwconv import ISSUE_SHAPE, KNOWN_GOOD  # noqa: E402  (bench/dwconv.py)
from kernels import macs_of, short_shape  # noqa: E402  (bench/kernels.py)

import numpy as np  # noqa: E402
from dataclasses import replace  # noqa: E402

from edgetune.codegen.model import load_model  # noqa: E402

from edgetune.codegen import get_kernel  # noqa: E402
from edgetune.session import TuneRequest, tune  # noqa: E402
from edgetune.targets import get_target  # noqa: E402
from edgetune.tuner import TuningDatabase  # noqa: E402

PEAK = 8  # int8 MACs per cycle on the dual-beat M55
MODELS = Path(__file__).parent.parent / "tests" / "data" / "models"
MLPERF_TINY = ("ds_cnn_kws", "mobilenet_v1_025_vww", "resnet8_cifar10")
SMALL_K = 48  # the convolutions measured: K = cin * kh * kw at most this (1x1 fully connected layers left out)


def layer_inputs(kernel, layer):
    """`kernel` (a shipped one) whose workload inputs are one model layer's own constants
    (weights, bias, multipliers, shifts, zero points, activation range) and a seeded random
    int8 input: an instance of a subclass of its class."""

    class LayerInputs(type(kernel)):
        def make_io(self, shape, rng, edge="random"):
            return layer.io(rng.integers(-128, 128, size=layer.kernel_input, dtype=np.int8))

    return LayerInputs()


def tflite_quant(kernel):
    """`kernel` (a shipped one) whose random workload inputs get quantisation as TFLite's
    converter writes it for these models: every shift in [-10, -5], no clamp narrower than int8."""

    class TfliteQuant(type(kernel)):
        def make_io(self, shape, rng, edge="random"):
            io = super().make_io(shape, rng, edge)
            buffers = tuple(replace(b, data=rng.integers(-10, -4, size=b.data.shape).astype(np.int32))
                            if b.name == "shift" else b for b in io.buffers)
            params = tuple((k, {"act_min": -128, "act_max": 127}.get(k, v)) for k, v in io.params)
            return replace(io, buffers=buffers, params=params)

    return TfliteQuant()


def model_layers():
    """(label, kernel name, layer) of every distinct depthwise workload of the MLPerf Tiny
    models and of their convolutions with K <= SMALL_K, first occurrence of each."""
    seen, found = set(), []
    for name in MLPERF_TINY:
        for layer in load_model(MODELS / f"{name}.tflite").layers:
            s = layer.shape_dict
            if layer.kernel not in ("conv2d_s8", "dwconv2d_s8") or (layer.kernel, layer.shape) in seen:
                continue
            if layer.kernel == "conv2d_s8" and (s["cin"] * s["kh"] * s["kw"] > SMALL_K or s["h"] * s["w"] == 1):
                continue
            seen.add((layer.kernel, layer.shape))
            found.append((f"{name.split('_')[0]} {layer.index} {short_shape(layer.kernel, s)}", layer.kernel, layer))
    return found


# Measured first on every convolution: the Helium direct tile and a strong im2col tile.
CONV_STARTS = (
    {"algo": "direct", "vector": "mve", "layout": "ohwi", "fusion": "fused", "tile_oc": 4, "compiler": "clang", "opt": "O3"},
    {"algo": "im2col", "vector": "mve", "layout": "ohwi", "fusion": "fused", "tile_p": 2, "tile_oc": 3,
     "im2col_pixels": 4, "weight_sums": "precomputed", "compiler": "clang", "opt": "O3"},
)


def starts(kernel, target, shape) -> tuple[dict, ...]:
    """The known-good configurations the shape's space allows: bench/dwconv.py's for
    depthwise, CONV_STARTS for convolutions."""
    wanted_list = ([w for family in KNOWN_GOOD.values() for w in family] if kernel.name == "dwconv2d_s8"
                   else list(CONV_STARTS))
    space = list(kernel.space(target, shape))
    found = []
    for wanted in wanted_list:
        match = next((c for c in space if all(c[k] == v for k, v in wanted.items())), None)
        if match is not None:
            found.append(match.as_dict())
    return tuple(found)


def measure(kernel, label, shape, budget, seed, work):
    target = get_target("cortex-m55")
    db = TuningDatabase(work / f"{kernel.name}-{abs(hash(label))}.db")
    summary = tune(TuneRequest(kernel, target, shape, "random", budget, 2, seed, "cycles",
                               initial=starts(kernel, target, shape)), db)
    ok = [t for t in db.trials(summary.workload) if not t.outcome.failed]
    if not ok:
        raise SystemExit(f"{kernel.name} {label}: no trial ran: {summary.failures}")
    best = min(ok, key=lambda t: t.values["cycles"])
    macs, cycles = macs_of(kernel.name, shape), best.values["cycles"]
    print(f"{kernel.name:>11} {label:>34} {macs:>8} {len(ok):>3} {cycles:>9.0f} {macs / cycles:>7.3f}  "
          f"{best.config.key()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=16, help="trials per shape (default 16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=("dw", "conv"), help="only the depthwise or only the conv shapes")
    args = parser.parse_args()
    dw = get_kernel("dwconv2d_s8")
    issue = dw.parse_shape(ISSUE_SHAPE)
    jobs = [(dw, "issue 3x3, kernel's inputs", issue), (tflite_quant(dw), "issue 3x3, TFLite quantisation", issue)]
    jobs += [(layer_inputs(get_kernel(name), layer), label, get_kernel(name).parse_shape(layer.shape_text))
             for label, name, layer in model_layers()]
    jobs = [job for job in jobs if args.only is None or (job[0].name == "dwconv2d_s8") == (args.only == "dw")]
    print(f"cortex-m55, estimated cycles; random search of {args.budget} trials per shape, seed {args.seed}; "
          f"peak {PEAK} MACs/cycle")
    print(f"{'kernel':>11} {'layer':>34} {'MACs':>8} {'ok':>3} {'cycles':>9} {'MAC/cyc':>7}  best configuration")
    with tempfile.TemporaryDirectory() as tmp:
        for kernel, label, shape in jobs:
            measure(kernel, label, shape, args.budget, args.seed, Path(tmp))


if __name__ == "__main__":
    main()
