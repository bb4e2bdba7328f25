"""Weights packed at export time for the int8 convolutions (layout=packed).

Both convolutions reduce, for each output channel o, over a row of K weights:
    acc[o] = bias[o] + sum_k (x[k] - in_zero) * w[o][k]
           = sum_k x[k] * w[o][k]  +  (bias[o] - in_zero * sum_k w[o][k])
             plain dot product        per-channel term, computed at pack time
conv2d_s8: o is the output channel, k runs over (ky, kx, c) (OHWI rows). dwconv2d_s8: o is the
channel, k runs over the taps (the rows are the columns of the [kh][kw][c] weights).

The folding is exact only when every tap contributes x * w, padding included: a tap in the
padding must then contribute in_zero * w (the quantised padding value), which the term takes
back out, so the kernels feed in_zero for padded taps instead of skipping them.

Packed weights keep the original size: rows are grouped into blocks of `block` channels
(the variant's channel tile; the last block may be smaller) and each row is cut into
segments of `segment` weights (the reduction the inner loop walks in one go: all of K, or one
tap's channels). Inside a block, each segment holds its full `lanes`-wide chunks channel by
channel, interleaved (chunk 0 of channel 0, chunk 0 of channel 1, ...), then each channel's
tail of segment % lanes weights. A Helium inner loop then reads one vector per channel from a
single pointer that only moves forward. block=1 leaves the rows as they are.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Buffer, KernelIO


@dataclass(frozen=True)
class Packing:
    block: int    # channels interleaved together (the channel tile)
    segment: int  # weights per segment; divides the row length
    lanes: int    # chunk width (16 int8 lanes on Helium)

    def order(self, rows: int, k: int) -> np.ndarray:
        """Flat indices into the [rows][k] weights, in packed order."""
        if k % self.segment:
            raise ValueError(f"segment {self.segment} does not divide the row length {k}")
        full = self.segment - self.segment % self.lanes
        lanes = np.arange(self.lanes)
        tail = np.arange(full, self.segment)
        pieces = []
        for o0 in range(0, rows, self.block):
            starts = np.arange(o0, min(rows, o0 + self.block))[:, None] * k  # row starts of the block's channels
            for g in range(0, k, self.segment):
                chunks = np.arange(g, g + full, self.lanes)[:, None, None]  # [chunk][channel][lane]
                pieces.append((chunks + starts[None] + lanes[None, None]).reshape(-1))
                pieces.append((starts + g + tail[None]).reshape(-1))  # [channel][tail]
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)


def channel_terms(rows: np.ndarray, bias: np.ndarray, in_zero: int) -> np.ndarray:
    """bias[o] - in_zero * sum_k rows[o][k], as int32 (modulo 2^32, as the C helper computes
    it; with |bias| <= 2^30 and K <= 32767 the value fits in int32 anyway)."""
    terms = bias.astype(np.int64) - in_zero * rows.astype(np.int64).sum(axis=1)
    return (terms & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def pack_rows(rows: np.ndarray, bias: np.ndarray, in_zero: int, packing: Packing) -> tuple[np.ndarray, np.ndarray]:
    """(packed int8 weights, flat, same size as rows; int32 per-channel terms)."""
    flat = np.ascontiguousarray(rows).reshape(-1)
    packed = flat[packing.order(*rows.shape)].astype(np.int8)
    return packed, channel_terms(rows, bias, in_zero)


def pack_declaration(fn: str) -> str:
    """The exported packing helper of a packed variant `fn` (common/pack_rows.c.j2)."""
    return f"void {fn}_pack(const int8_t *weights, const int32_t *bias, int32_t in_zero, int8_t *packed, int32_t *term)"


def with_packed_weights(io: KernelIO, packed: np.ndarray, terms: np.ndarray) -> KernelIO:
    """The convolutions' I/O (input, weights, bias, ...) with the packed weights and terms in
    place of the weights and bias: same sizes and types, so every variant has one signature."""
    x, _, _, *rest = io.buffers
    return KernelIO(buffers=(x, Buffer("weights", packed, weight=True), Buffer("bias", terms, weight=True), *rest), params=io.params)
