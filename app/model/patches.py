"""Patch-based (row-band) execution of a model's memory-bound first layers (docs/model-export.md,
"Patches"): a stage of consecutive convolutions runs band by band, each band of the stage's
output rows computed from the input rows its receptive field needs, so the full-size tensors
between the stage's layers never exist; only a few rows of each (the stage's work buffers).

The idea and its figures are MCUNetV2's patch-based inference (Lin et al., "MCUNetV2:
Memory-Efficient Patch-based Inference for Tiny Deep Learning", NeurIPS 2021). Here the bands
are whole rows (the tensors are row-major, so a band is contiguous) and the overlap between
bands (the halo) is either recomputed, as in the paper, or cached: the rows a later band needs
again are kept and moved to the front of the layer's work buffer (no recomputation, a memmove).

This module is pure geometry: which rows each layer computes in each band, with which padding,
where it reads and writes, and how large each work buffer is. app/model/patch_module.py turns a
plan into C and into the module's schedule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from edgetune.codegen.export import ExportError

HALOS = ("cache", "recompute")


class PatchError(ExportError):
    """A patch plan the model does not allow (one clear line naming what is at fault)."""


@dataclass(frozen=True)
class RowGeometry:
    """A convolution's geometry along the rows: what a band of its output reads."""
    h: int  # input rows
    kh: int
    stride: int
    dilation: int
    pad_top: int
    pad_bottom: int
    in_row_bytes: int
    out_row_bytes: int

    @property
    def span(self) -> int:
        return (self.kh - 1) * self.dilation + 1

    @property
    def out_h(self) -> int:
        return (self.h + self.pad_top + self.pad_bottom - self.span) // self.stride + 1

    def source(self, a: int, b: int) -> tuple[int, int, int, int]:
        """Output rows [a, b): the input rows [lo, hi) they read (inside the tensor) and the
        padding rows above and below them (the band's pad_top, pad_bottom): a kernel run on
        those rows with that padding computes exactly rows [a, b) of the whole layer."""
        lo = a * self.stride - self.pad_top
        hi = (b - 1) * self.stride - self.pad_top + self.span
        return max(lo, 0), min(hi, self.h), max(0, -lo), max(0, hi - self.h)


def row_geometry(shape: Mapping[str, int], in_channels: int, out_channels: int) -> RowGeometry:
    """A conv2d_s8 / dwconv2d_s8 layer's row geometry from its kernel shape (int8 rows)."""
    return RowGeometry(shape["h"], shape["kh"], shape["stride_h"], shape["dilation_h"], shape["pad_top"],
                       shape["pad_bottom"], shape["w"] * in_channels,
                       _out_w(shape) * out_channels)


def _out_w(shape: Mapping[str, int]) -> int:
    span = (shape["kw"] - 1) * shape["dilation_w"] + 1
    return (shape["w"] + shape["pad_left"] + shape["pad_right"] - span) // shape["stride_w"] + 1


@dataclass(frozen=True)
class BandCall:
    """One kernel call of a band: layer `layer` (position in the stage) computes its output
    rows `rows` from its input rows `source` with `pads` (top, bottom) padding rows; it reads
    at `read` and writes at `write` (a buffer: -1 the stage's input or output tensor, else
    the work buffer of that stage position; and a byte offset into it)."""
    layer: int
    rows: tuple[int, int]
    source: tuple[int, int]
    pads: tuple[int, int]
    read: tuple[int, int]
    write: tuple[int, int]


@dataclass(frozen=True)
class BandMove:
    """Before a band's calls: the rows of buffer `buffer` still needed (cached halo) moved to
    its start: `nbytes` bytes from byte `start`."""
    buffer: int
    start: int
    nbytes: int


@dataclass(frozen=True)
class Band:
    rows: tuple[int, int]  # the stage's output rows this band writes
    moves: tuple[BandMove, ...]
    calls: tuple[BandCall, ...]


@dataclass(frozen=True)
class StageSchedule:
    bands: tuple[Band, ...]
    buffer_bytes: tuple[int, ...]  # per stage position but the last: its work buffer's size

    @property
    def work_bytes(self) -> int:
        return sum(_aligned(n) for n in self.buffer_bytes)

    def buffer_offsets(self) -> tuple[int, ...]:
        offsets, at = [], 0
        for n in self.buffer_bytes:
            offsets.append(at)
            at += _aligned(n)
        return tuple(offsets)

    def computed_rows(self) -> tuple[int, ...]:
        """Per layer, the output rows its calls compute in all (its out_h when nothing is recomputed)."""
        count: dict[int, int] = {}
        for band in self.bands:
            for c in band.calls:
                count[c.layer] = count.get(c.layer, 0) + c.rows[1] - c.rows[0]
        return tuple(count.get(k, 0) for k in range(len(self.buffer_bytes) + 1))


def _aligned(n: int, alignment: int = 16) -> int:
    return (n + alignment - 1) // alignment * alignment


def _chain_check(geometry: Sequence[RowGeometry]) -> None:
    for k in range(1, len(geometry)):
        if geometry[k].h != geometry[k - 1].out_h or geometry[k].in_row_bytes != geometry[k - 1].out_row_bytes:
            raise PatchError(f"stage position {k}: its input ({geometry[k].h} rows of {geometry[k].in_row_bytes} B) "
                             f"is not the previous layer's output ({geometry[k - 1].out_h} rows of "
                             f"{geometry[k - 1].out_row_bytes} B)")


def _band(geometry: Sequence[RowGeometry], rows: tuple[int, int], halo: str, present: list[tuple[int, int]]) -> Band:
    """One band's moves and calls, last layer first walked back to the first; `present`
    (per work buffer: the rows [first, end) it holds) is updated."""
    last = len(geometry) - 1
    need, moves, calls = rows, [], []
    for k in range(last, -1, -1):
        g = geometry[k]
        if need[1] <= need[0]:
            break
        if k == last:
            todo, write = need, (-1, need[0] * g.out_row_bytes)
        else:
            start, end = present[k]
            if halo == "cache" and start <= need[0] < end:
                if need[0] > start:
                    moves.append(BandMove(k, (need[0] - start) * g.out_row_bytes, (end - need[0]) * g.out_row_bytes))
                todo = (max(need[0], end), need[1])
            else:
                todo = need
            present[k] = need
            write = (k, (todo[0] - need[0]) * g.out_row_bytes)
        if todo[1] <= todo[0]:
            break
        lo, hi, pad_top, pad_bottom = g.source(*todo)
        read = (-1, lo * g.in_row_bytes) if k == 0 else (k - 1, None)
        calls.append((k, todo, (lo, hi), (pad_top, pad_bottom), read, write))
        need = (lo, hi)
    done = []
    for k, todo, source, pads, read, write in reversed(calls):
        if read[1] is None:  # the previous layer's buffer: rows from the first it holds
            read = (k - 1, (source[0] - present[k - 1][0]) * geometry[k].in_row_bytes)
        done.append(BandCall(k, todo, source, pads, read, write))
    return Band(rows, tuple(reversed(moves)), tuple(done))


def stage_schedule(geometry: Sequence[RowGeometry], band_rows: int, halo: str) -> StageSchedule:
    """The bands of a stage (consecutive layers, each reading the one before it) that writes
    `band_rows` rows of its output per band, the halo cached or recomputed."""
    if halo not in HALOS:
        raise PatchError(f"halo {halo!r}: one of {', '.join(HALOS)}")
    if not geometry:
        raise PatchError("a stage takes at least one layer")
    _chain_check(geometry)
    out_h = geometry[-1].out_h
    if not 1 <= band_rows <= out_h:
        raise PatchError(f"band rows {band_rows}: between 1 and the stage's {out_h} output rows")
    present = [(0, 0)] * len(geometry)
    bands, sizes = [], [0] * (len(geometry) - 1)
    for a in range(0, out_h, band_rows):
        band = _band(geometry, (a, min(a + band_rows, out_h)), halo, present)
        for k in range(len(sizes)):
            sizes[k] = max(sizes[k], (present[k][1] - present[k][0]) * geometry[k].out_row_bytes)
        bands.append(band)
    return StageSchedule(tuple(bands), tuple(sizes))


def overwrite_problem(schedule: StageSchedule, geometry: Sequence[RowGeometry], in_bytes: int) -> str:
    """Why the stage's output may not be written over its input from the same start (""
    when it may): every band writes only bytes of the input that no later band reads (the
    consumption front runs ahead of the write front); nor, in a stage of one layer (whose one
    call per band reads and writes together), that band itself."""
    first, last = geometry[0], geometry[-1]
    written = 0
    # One layer: a band's one call reads and writes at once, so its own reads count too.
    own = 1 if len(geometry) == 1 else 0
    for n, band in enumerate(schedule.bands):
        written = max(written, band.rows[1] * last.out_row_bytes)
        later = [c.source[0] * first.in_row_bytes for b in schedule.bands[n + 1 - own:] for c in b.calls if c.layer == 0]
        if later and min(later) < written:
            return (f"band {n} writes the output up to byte {written}, but a later band reads the input from byte "
                    f"{min(later)}")
    return "" if written <= in_bytes or not schedule.bands else "the output is larger than the input"
