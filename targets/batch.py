"""Batched evaluation: several variants of one workload in one image, booted once.

Each variant is rendered under its own function name (`member_function`), compiled on its
own (its object is cached like any other: one translation unit per variant, since the
compiler's inlining limits depend on the size of the unit and a kernel's own macros need
not be prefixed), and linked with the others and a generated table (`variant_table`) into
one image. The harness runs every variant between its own count markers on its own copy
of the I/O block, so each variant sees exactly what it sees alone: the same data at the
same alignment (blocks `STRIDE_ALIGN` apart) in the same memory region.

What fits in one image: the variants' I/O blocks in the I/O regions (`fit_by_data`), their
code in the code region (`pack_by_code`); at most `MAX_BATCH`. Whatever stops an image
(a fault, a hang killed at the time limit, the emulator dying) ends the batch at the
variant that was running: the variants before it keep their results, that variant is
handed back to be evaluated alone (so its outcome is its own), and the variants after it
form the next image. A batch that cannot link is handed back whole. `measure_batch`
returns, per variant: `Measured` (checked by the caller, which evaluates any wrong answer
again alone), `Failed` (its own build failed: its trial), or None (evaluate alone).
"""
from __future__ import annotations

import hashlib
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from edgetune.codegen import Kernel, KernelIO, RenderedKernel, render_glue
from edgetune.hal import Target
from edgetune.tuner import Config

from . import elf, iobuf
from .toolchain import BuildResult, MeasureError

TABLE_MARK = "/* edgetune: variant table */"
MAX_BATCH = 16  # variants per image: the harness allows 64; more only lengthens a lost batch
STRIDE_ALIGN = 4096  # variant blocks this far apart keep every buffer's alignment up to 4 KiB
# Code region bytes left to the harness and the C library parts it links (an image that
# still overflows fails to link and its variants are evaluated alone).
HARNESS_CODE_BYTES = 32 * 1024


def member_function(kernel: Kernel, shape: dict, config: Config) -> str:
    """The entry point of a variant in a batch: the kernel's name for the shape plus a digest
    of the configuration, so the same variant has the same name (and cached object) in any
    batch."""
    digest = hashlib.sha256(config.key().encode()).hexdigest()[:10]
    return f"{kernel.function_name(shape)}_v{digest}"


def variant_table(glues: Sequence[str], segments: Sequence[Sequence[int]]) -> str:
    """One C unit holding every variant's glue (each renamed by macros, so the glue
    template serves batches unchanged) and the table the harness walks (harness.h):
    `segments[v]`, the addresses of variant v's block segments. The tables are constant,
    so they sit with the code, where the harness's own table of one variant always did
    (the glue's loads of them are charged to the same memory)."""
    parts = [TABLE_MARK, "#include <stdint.h>", '#include "harness.h"']
    for index, (glue, bases) in enumerate(zip(glues, segments)):
        pointers = ", ".join(f"(uint8_t *)(uintptr_t){int(base):#x}u" for base in bases) or "0"  # host: from files
        parts += [f"#define et_glue_check et_variant_check_{index}", f"#define et_glue_run et_variant_run_{index}",
                  glue, "#undef et_glue_check", "#undef et_glue_run",
                  f"static uint8_t *const et_segments_{index}[ET_MAX_SEGMENTS] = {{{pointers}}};"]
    entries = ", ".join(f"{{et_variant_check_{i}, et_variant_run_{i}, et_segments_{i}}}" for i in range(len(glues)))
    parts += [f"const et_variant_t et_variants[] = {{{entries}}};",
              f"const uint32_t et_variant_count = {len(glues)}u;", ""]
    return "\n".join(parts)


def as_table(glue_text: str, bases: Sequence[int]) -> str:
    """A glue unit as the harness's variant table (a single variant: a table of one)."""
    return glue_text if glue_text.startswith(TABLE_MARK) else variant_table([glue_text], [bases])


def variant_segments(target: Target, plan: iobuf.IoPlan, io: KernelIO, count: int) -> list[tuple[int, ...]]:
    """Where each of `count` variants' block segments go: `strides` apart from the start of
    each segment's region (none on the host, whose harness reads each block from a file)."""
    if not target.placement_regions:
        return [()] * count
    bases = [target.io_address(region) for region in plan.regions]
    step = strides(io, plan)
    return [tuple(base + v * step[s] for s, base in enumerate(bases)) for v in range(count)]


# --- memory ----------------------------------------------------------------------------------
def strides(io: KernelIO, plan: iobuf.IoPlan) -> tuple[int, int]:
    """Bytes between two variants' blocks, per segment."""
    sizes = iobuf.segment_sizes(io, plan)
    return tuple(-(-size // STRIDE_ALIGN) * STRIDE_ALIGN for size in (*sizes, 0)[:2])


def fit_by_data(target: Target, io: KernelIO, plan: iobuf.IoPlan) -> int:
    """How many variants' I/O blocks the plan's regions hold side by side."""
    if not target.placement_regions:
        return MAX_BATCH  # the host: each block is its own allocation
    room = [target.io_capacity(region) for region in plan.regions]
    return max(1, min(MAX_BATCH, *(free // stride for free, stride in zip(room, strides(io, plan)) if stride)))


def pack_by_code(sizes: Sequence[int], capacity: int, limit: int) -> list[list[int]]:
    """Consecutive groups of indices whose sizes fit `capacity`, at most `limit` each (a
    variant larger than the capacity alone: its link then says it is too large)."""
    groups: list[list[int]] = []
    used = 0
    for index, size in enumerate(sizes):
        if groups and len(groups[-1]) < limit and used + size <= capacity:
            groups[-1].append(index)
            used += size
        else:
            groups.append([index])
            used = size
    return groups


def code_capacity(target: Target) -> int:
    if target.firmware is None:
        return 1 << 40  # the host
    fw = target.firmware
    return max(0, (fw.code_size or target.region(fw.code_region).size) - HARNESS_CODE_BYTES)


def pack_io(ios: Sequence[KernelIO], plan: iobuf.IoPlan) -> list[bytes]:
    """Per segment, every variant's part of its block, `strides` apart."""
    step = strides(ios[0], plan)
    files = [bytearray() for _ in plan.regions]
    for io in ios:
        for segment, data in enumerate(iobuf.pack_segments(io, plan)):
            files[segment] += data + bytes(step[segment] - len(data))
    return [bytes(f) for f in files]


def split_outputs(ios: Sequence[KernelIO], raw: bytes) -> list[bytes]:
    """The harness's output file cut into each variant's outputs (the last ones may be
    short or missing when the run stopped early)."""
    out, pos = [], 0
    for io in ios:
        n = sum(b.data.nbytes for b in io.outputs())
        out.append(raw[pos:pos + n])
        pos += n
    return out


# --- what the session hands over and gets back -------------------------------------------------
@dataclass(frozen=True)
class Variant:
    rendered: RenderedKernel  # under member_function's name
    io: KernelIO  # as deployed (kernel.deployed_io)


@dataclass(frozen=True)
class Measured:
    values: dict
    raw: bytes
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Failed:
    error: MeasureError  # the variant's own build failure
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Compiled:
    index: int
    variant: Variant
    build: BuildResult  # the object (path) with its values and info
    key: str


@dataclass(frozen=True)
class Stopped:
    """How a batch image's run ended early: at the variant after the `completed` ones."""

    completed: int
    error: MeasureError


Result = Measured | Failed | None


@dataclass(frozen=True)
class BatchResults:
    results: tuple[Result, ...]  # per variant, in the order given
    refusal: str = ""  # why these variants cannot share an image at all (then none was run)


def measure_batch(runner, kernel: Kernel, shape: dict, variants: Sequence[Variant], workdir: Path,
                  timeout_s: Callable[[int], float], slots: threading.Semaphore) -> BatchResults:
    """Compile each variant, link what fits into images, boot each image once; see the
    module's docstring for what comes back. `timeout_s(n)`: the time limit of an image of n
    variants."""
    results: list[Result] = [None] * len(variants)
    compiled = []
    for index, variant in enumerate(variants):
        started = time.monotonic()
        try:
            build, key = runner.compile_variant(variant.rendered, workdir / f"v{index}", variant.io)
        except MeasureError as exc:
            results[index] = Failed(exc, {"seconds_compile": round(time.monotonic() - started, 3)})
            continue
        build = BuildResult(build.path, build.workdir, build.values,
                            {**build.info, "seconds_compile": round(time.monotonic() - started, 3)})
        compiled.append(Compiled(index, variant, build, key))
    clash = shared_definition(compiled)
    if clash:
        return BatchResults(tuple(results), f"its variants each define the global symbol {clash!r}, so no "
                                            f"two of them can be linked into one image")
    for group in _image_groups(runner.target, compiled):
        _measure_image(runner, kernel, shape, group, workdir, timeout_s, slots, results)
    return BatchResults(tuple(results))


def shared_definition(compiled: Sequence[Compiled]) -> str:
    """A global symbol two of the objects define ("" if none): such variants (a kernel
    whose own helpers are not named after its entry point) cannot share an image."""
    seen: set[str] = set()
    for member in compiled:
        names = elf.global_definitions(member.build.path)
        if names & seen:
            return sorted(names & seen)[0]
        seen |= names
    return ""


def _image_groups(target: Target, compiled: list[Compiled]) -> list[list[Compiled]]:
    """Variants that can share an image: the same buffer placement, and what fits."""
    by_placement: dict = {}
    for member in compiled:
        by_placement.setdefault(member.variant.rendered.placement, []).append(member)
    groups = []
    for members in by_placement.values():
        io = members[0].variant.io
        limit = fit_by_data(target, io, iobuf.plan_io(target, io, members[0].variant.rendered.placement))
        sizes = {m.index: elf.alloc_bytes(m.build.path) for m in members}
        # A variant too large for any image is left to be evaluated alone (and found too large).
        members = [m for m in members if sizes[m.index] <= code_capacity(target)]
        packed = pack_by_code([sizes[m.index] for m in members], code_capacity(target), limit)
        groups += [[members[i] for i in indices] for indices in packed]
    return groups


def _measure_image(runner, kernel: Kernel, shape: dict, members: list[Compiled], workdir: Path,
                   timeout_s: Callable[[int], float], slots: threading.Semaphore, results: list[Result]) -> None:
    """Link and run `members` in one image; then the same for what a stop left over."""
    while members:
        folder = workdir / f"image{members[0].index}"
        folder.mkdir(parents=True, exist_ok=True)
        ios = [m.variant.io for m in members]
        placement = members[0].variant.rendered.placement
        started = time.monotonic()
        try:
            plan = iobuf.plan_io(runner.target, ios[0], placement)
            glue = variant_table([render_glue(kernel, shape, io, m.variant.rendered.function)
                                  for m, io in zip(members, ios)], variant_segments(runner.target, plan, ios[0], len(ios)))
            image, hit = runner.link_cached(folder, [m.key for m in members], [m.build.path for m in members],
                                            glue, ios[0], placement)
        except MeasureError:
            return  # each is evaluated alone: the one at fault then fails on its own
        linked = time.monotonic()
        with slots:
            ran_at = time.monotonic()
            done, stopped = runner.run_batch(image, ios, timeout_s(len(members)))
            ran = time.monotonic() - ran_at
        share = {"seconds_link": round((linked - started) / len(members), 3),
                 "seconds_run": round(ran / len(members), 3), "batch": len(members)}
        for member, (values, raw) in zip(members, done):
            # hit: nothing compiled or linked (as for one variant); else how its object was had
            cache = {"build_cache": "hit"} if hit else {}
            results[member.index] = Measured({**values, **member.build.values}, raw,
                                             {**image.info, **member.build.info, **share, **cache})
        if stopped is None:
            return
        members = members[len(done) + 1:]  # the one running when it stopped goes alone
        shutil.rmtree(folder, ignore_errors=True)
