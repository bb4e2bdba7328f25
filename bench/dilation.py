"""A dilated convolution on the Cortex-M55 (QEMU, exact instruction counts): the converter's
three operators (SPACE_TO_BATCH_ND -> CONV_2D or DEPTHWISE_CONV_2D -> BATCH_TO_SPACE_ND) against
edgetune's rewrite of them into one dilated convolution (app/model/dilation.py), in the same run.

Every figure is a whole exported module run by `edgetune model verify` (bit-exact with TFLite
Micro on each run), the convolutions on the same kernel code both ways: once on the kernel's
default configuration (the plain C loop, what an untuned export ships), once on the first
configuration of the target's vector path (Helium on the M55; packed weights and im2col where
offered) stored as the workload's one trial, a hand-picked point, not a tuned optimum:

  three operators   SPACE_TO_BATCH_ND alone + the middle convolution on one block, times the
                    bh x bw blocks (edgetune's kernels take a batch of 1: the batch of blocks is
                    bh x bw calls) + BATCH_TO_SPACE_ND alone
  rewrite           the model as edgetune runs it: the dilated convolution, plus one 1x1-block
                    SPACE_TO_BATCH_ND padding copy where the input's zero point is not 0 (TFLite
                    Micro pads with 0, ops/space_batch.py), none where it is 0

usage: .venv/bin/python bench/dilation.py [--target cortex-m55]
"""
from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgetune.codegen import KERNELS
from edgetune.model import load_model
from edgetune.model.builder import build_model, constant
from edgetune.model.export import export_model
from edgetune.model.graph import Operator, Quantization, Tensor
from edgetune.model.verify import verify_model
from edgetune.session import TuneRequest, tune
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

VALID = 1  # TFLite's Padding.VALID


@dataclass(frozen=True)
class Case:
    """A dilated SAME layer: input h x w x c, `cout` outputs (depthwise: c times the multiplier),
    a k x k kernel of dilation d, the input's zero point."""

    name: str
    h: int
    w: int
    c: int
    cout: int
    k: int
    d: int
    zero: int
    depthwise: bool = False

    def edges(self, size: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """TensorFlow's paddings and crops along an axis of `size` (required_space_to_batch_paddings)."""
        total = self.d * (self.k - 1)
        extra = -(size + total) % self.d
        return (total // 2, total - total // 2 + extra), (0, extra)


CASES = (
    Case("conv 3x3 d2, zero point -128", 32, 32, 16, 16, 3, 2, -128),
    Case("conv 3x3 d2, zero point 0", 32, 32, 16, 16, 3, 2, 0),
    Case("conv 3x3 d4, zero point -128", 24, 24, 8, 16, 3, 4, -128),
    Case("depthwise 3x3 d2, zero point -128", 32, 32, 32, 32, 3, 2, -128, depthwise=True),
)


def _act(index: int, shape, scale: float, zero: int) -> Tensor:
    return Tensor(index, f"t{index}", tuple(shape), "int8", Quantization((float(np.float32(scale)),), (zero,)))


def _conv(case: Case, rng: np.random.Generator, first: int, source: int, output: int) -> tuple[list[Tensor], Operator]:
    """The middle convolution's weights and bias (tensors `first`, `first + 1`) and operator."""
    shape = (1, case.k, case.k, case.cout) if case.depthwise else (case.cout, case.k, case.k, case.c)
    scales = tuple(float(np.float32(s)) for s in rng.uniform(0.002, 0.02, size=case.cout))
    tensors = [constant(first, "weights", rng.integers(-127, 128, size=shape, dtype=np.int8),
                        Quantization(scales, (0,) * case.cout, 3 if case.depthwise else 0)),
               constant(first + 1, "bias", rng.integers(-4000, 4000, size=case.cout, dtype=np.int32),
                        Quantization(tuple(float(np.float32(0.05 * s)) for s in scales), (0,) * case.cout, 0))]
    kind = ("DEPTHWISE_CONV_2D", "DepthwiseConv2DOptions") if case.depthwise else ("CONV_2D", "Conv2DOptions")
    options = (("padding", VALID), ("strideH", 1), ("strideW", 1), ("dilationHFactor", 1), ("dilationWFactor", 1),
               ("fusedActivationFunction", 0), *((("depthMultiplier", case.cout // case.c),) if case.depthwise else ()))
    return tensors, Operator(0, kind[0], (source, first, first + 1), (output,), kind[1], options)


def _blocks(case: Case) -> tuple[int, int, int, int]:
    (pt, pb), _ = case.edges(case.h)
    (pl, pr), _ = case.edges(case.w)
    return case.d * case.d, (case.h + pt + pb) // case.d, (case.w + pl + pr) // case.d, case.c


def models(case: Case) -> dict[str, bytes]:
    """The chain, and its three parts alone: SPACE_TO_BATCH_ND, the convolution on one block,
    BATCH_TO_SPACE_ND (each a one-operator model with the chain's tensors)."""
    rng = np.random.default_rng(0)
    (pads_h, crops_h), (pads_w, crops_w) = case.edges(case.h), case.edges(case.w)
    blocks, bh, bw, c = _blocks(case)
    inner = (blocks, bh - case.k + 1, bw - case.k + 1, case.cout)
    x, s = _act(0, (1, case.h, case.w, c), 0.05, case.zero), _act(3, (blocks, bh, bw, c), 0.05, case.zero)
    weights, conv = _conv(case, rng, 4, 3, 6)
    y_conv, y = _act(6, inner, 0.1, -3), _act(8, (1, case.h, case.w, case.cout), 0.1, -3)
    block = constant(1, "block", np.array([case.d, case.d], dtype=np.int32))
    paddings = constant(2, "paddings", np.array([pads_h, pads_w], dtype=np.int32))
    crops = constant(7, "crops", np.array([crops_h, crops_w], dtype=np.int32))
    to_batch = Operator(0, "SPACE_TO_BATCH_ND", (0, 1, 2), (3,), "SpaceToBatchNDOptions", ())
    to_space = Operator(2, "BATCH_TO_SPACE_ND", (6, 1, 7), (8,), "BatchToSpaceNDOptions", ())
    tensors = [x, block, paddings, s, *weights, y_conv, crops, y]
    one = [_act(0, (1, bh, bw, c), 0.05, case.zero), *_renumbered(weights, 1), _act(3, (1, *inner[1:]), 0.1, -3)]
    return {
        "chain": build_model(tensors, [to_batch, Operator(1, *_fields(conv)), to_space], [0], [8]),
        "to_batch": build_model([x, block, paddings, s], [to_batch], [0], [3]),
        "block conv": build_model(one, [Operator(0, conv.op, (0, 1, 2), (3,), conv.options_type, conv.options)],
                                  [0], [3]),
        "to_space": build_model([_act(0, inner, 0.1, -3), *_renumbered([block, crops], 1), _act(3, y.shape, 0.1, -3)],
                                [Operator(0, to_space.op, (0, 1, 2), (3,), to_space.options_type, ())], [0], [3]),
    }


def _fields(op: Operator) -> tuple:
    return op.op, op.inputs, op.outputs, op.options_type, op.options


def _renumbered(tensors: list[Tensor], first: int) -> list[Tensor]:
    return [Tensor(first + n, t.name, t.shape, t.dtype, t.quantization, t.data) for n, t in enumerate(tensors)]


PREFERRED = ({"layout": "packed", "algo": "im2col"}, {"layout": "packed"}, {})


def vector_db(path: Path, model, target) -> TuningDatabase | None:
    """A database holding, per workload of `model`, one trial of the first configuration on the
    target's vector path (None when no workload has one)."""
    db, stored = TuningDatabase(path), False
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        shape = kernel.parse_shape(dict(w.shape))
        vector = next((v for v in ("mve", "neon", "dsp") if v in [p.name for p in kernel.offered_paths(target)]), None)
        configs = [c.as_dict() for c in kernel.tuning_space(target, shape)] if vector else []
        config = next((c for extra in PREFERRED for c in configs
                       if all(c.get(k) == v for k, v in {"vector": vector, **extra}.items())), None)
        if config is not None:
            tune(TuneRequest(kernel, target, shape, "random", 1, 1, 0, initial=(config,)), db)
            stored = True
    return db if stored else None


def instructions(data: bytes, target, work: Path, vector: bool = False) -> int:
    """One inference of the model's module, checked bit for bit against TFLite Micro: untuned,
    or (`vector`) with each convolution on its first vector configuration."""
    work.mkdir(parents=True)
    path = work / "m.tflite"
    path.write_bytes(data)
    db = vector_db(work / "vector.db", load_model(path), target) if vector else None
    export_model(path, target, db, work / "export")
    outcome = verify_model(work / "export", target, n_inputs=1)
    if not outcome.ok:
        raise SystemExit(f"{work.name}: {outcome.layer_problem or [i.problem for i in outcome.inferences]}")
    return outcome.inferences[0].instructions


def measure(case: Case, target, work: Path, vector: bool = False) -> tuple[int, int, str]:
    """(three operators, rewrite, what the rewrite runs) on `target`."""
    parts = models(case)
    counts = {name: instructions(data, target, work / name.replace(" ", "_"), vector) for name, data in parts.items()}
    three = counts["to_batch"] + case.d * case.d * counts["block conv"] + counts["to_space"]
    model = load_model(work / "chain" / "m.tflite")
    kept = [layer.op for layer in model.layers if layer.index not in dict(model.graph.absorbed)]
    return three, counts["chain"], " + ".join(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="cortex-m55")
    args = parser.parse_args()
    target = get_target(args.target)
    print(f"{'case':<36}{'convolutions':<14}{'three operators':>16}{'rewrite':>12}{'ratio':>8}   rewrite runs   "
          f"({target.measures})")
    with tempfile.TemporaryDirectory(prefix="edgetune-bench-dilation-") as root:
        for n, case in enumerate(CASES):
            for vector in (False, True):
                work = Path(root) / f"{n}-{'vector' if vector else 'plain'}"
                three, rewrite, runs = measure(case, target, work, vector)
                print(f"{case.name:<36}{'vector' if vector else 'plain C':<14}{three:>16,}{rewrite:>12,}"
                      f"{rewrite / three:>8.2f}   {runs}")


if __name__ == "__main__":
    main()
