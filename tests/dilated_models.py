"""Small int8 models with dilated convolutions as TensorFlow's converter writes them:
SPACE_TO_BATCH_ND -> CONV_2D or DEPTHWISE_CONV_2D (VALID, stride 1) -> BATCH_TO_SPACE_ND, the
paddings and crops computed as TensorFlow's `required_space_to_batch_paddings` does (the
dilated kernel's SAME padding, the bottom extended to a whole block, the extension cropped
after). Built with edgetune's writer from seeded weights, no TensorFlow. Imported by tests."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor
from model_files import ACTIVATIONS, PADDINGS, draw_quant, f32, int8_weights


@dataclass(frozen=True)
class Dilated:
    """One dilated layer: input h x w x c, kernel kh x kw, dilation (dh, dw), `cout` output
    channels (a depthwise layer: its depth multiplier times c), TFLite's padding of the
    dilated kernel, the fused activation, the input's zero point."""

    h: int
    w: int
    c: int
    cout: int
    k: tuple[int, int] = (3, 3)
    d: tuple[int, int] = (2, 2)
    padding: str = "SAME"
    depthwise: bool = False
    activation: str = "NONE"
    in_zero: int | None = None  # the model's input's (the first layer's only); None: drawn

    def axis(self, n: int) -> tuple[tuple[int, int], tuple[int, int], int]:
        """Along axis n: SPACE_TO_BATCH_ND's paddings, BATCH_TO_SPACE_ND's crops, the output size."""
        size, k, d = (self.h, self.w)[n], self.k[n], self.d[n]
        total = d * (k - 1) if self.padding == "SAME" else 0
        extra = -(size + total) % d
        out = size if self.padding == "SAME" else size - d * (k - 1)
        return (total // 2, total - total // 2 + extra), (0, extra), out


def _act(index: int, name: str, shape, scale: float, zero: int, dynamic: bool = False) -> Tensor:
    """An activation; `dynamic`: as a converter writes it for a dynamic batch, batch 1 stored
    and -1 in the shape signature."""
    shape = (1, *shape[1:]) if dynamic else tuple(shape)
    return Tensor(index, name, shape, "int8", Quantization((f32(scale),), (int(zero),)),
                  signature=(-1, *shape[1:]) if dynamic else None)


def chain(rng: np.random.Generator, layer: Dilated, tensors: list[Tensor], ops: list[Operator], source: int,
          edge: str = "random", dynamic: bool = False) -> int:
    """Append one dilated layer's three operators reading tensor `source`; its output tensor."""
    pads, crops, outs = zip(*(layer.axis(n) for n in range(2)))
    x = tensors[source]
    q = draw_quant(rng, layer.cout, layer.k[0] * layer.k[1] * (1 if layer.depthwise else layer.c), edge)
    scale, zero = x.quantization.scales[0], x.quantization.zero_points[0]
    batches = layer.d[0] * layer.d[1]
    blocked = [(layer.h + sum(pads[0])) // layer.d[0], (layer.w + sum(pads[1])) // layer.d[1]]
    inner = [blocked[n] - layer.k[n] + 1 for n in range(2)]
    shape = (1, *layer.k, layer.cout) if layer.depthwise else (layer.cout, *layer.k, layer.c)
    weights = int8_weights(rng, shape, edge)
    base = len(tensors)
    axis = 3 if layer.depthwise else 0
    tensors += [
        constant(base, f"block{base}", np.array(layer.d, dtype=np.int32)),
        constant(base + 1, f"paddings{base}", np.array(pads, dtype=np.int32)),
        _act(base + 2, f"to_batch{base}", (batches, *blocked, layer.c), scale, zero, dynamic),
        constant(base + 3, f"weights{base}", weights, Quantization(q.w_scales, (0,) * layer.cout, axis)),
        constant(base + 4, f"bias{base}", q.bias, Quantization(tuple(f32(scale * s) for s in q.w_scales),
                                                               (0,) * layer.cout, 0)),
        _act(base + 5, f"conv{base}", (batches, *inner, layer.cout), q.out_scale, q.out_zero, dynamic),
        constant(base + 6, f"crops{base}", np.array(crops, dtype=np.int32)),
        _act(base + 7, f"output{base}", (1, *outs, layer.cout), q.out_scale, q.out_zero)]
    options = (("padding", PADDINGS["VALID"]), ("strideH", 1), ("strideW", 1),
               *((("depthMultiplier", layer.cout // layer.c),) if layer.depthwise else ()),
               ("dilationHFactor", 1), ("dilationWFactor", 1),
               ("fusedActivationFunction", ACTIVATIONS[layer.activation]))
    n = len(ops)
    ops += [Operator(n, "SPACE_TO_BATCH_ND", (source, base, base + 1), (base + 2,), "SpaceToBatchNDOptions", ()),
            Operator(n + 1, "DEPTHWISE_CONV_2D" if layer.depthwise else "CONV_2D", (base + 2, base + 3, base + 4),
                     (base + 5,), "DepthwiseConv2DOptions" if layer.depthwise else "Conv2DOptions", options),
            Operator(n + 2, "BATCH_TO_SPACE_ND", (base + 5, base + 0, base + 6), (base + 7,),
                     "BatchToSpaceNDOptions", ())]
    return base + 7


def dilated_model(rng: np.random.Generator, layers: list[Dilated], edge: str = "random",
                  dynamic: bool = False) -> bytes:
    """The layers one after another on one input (each layer's input quantisation is the
    previous layer's output; the first one's input zero point is its `in_zero`, or drawn);
    `dynamic`: the blocks' tensors as converted with a dynamic batch (batch 1 stored)."""
    first = layers[0]
    zero = first.in_zero if first.in_zero is not None else int(rng.integers(-128, 128))
    tensors: list[Tensor] = [_act(0, "input", (1, first.h, first.w, first.c), 0.05, zero)]
    ops: list[Operator] = []
    source = 0
    for layer in layers:
        source = chain(rng, layer, tensors, ops, source, edge, dynamic)
    return build_model(tensors, ops, [0], [source])
