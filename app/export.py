"""`export_best`: choose (edgetune.selection), render (edgetune.codegen.export), publish
(edgetune.publish). docs/export.md describes the folder."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

from edgetune.codegen.export import DISPATCH, HEADER, ExportError, render_export
from edgetune.codegen.manifest import MANIFEST, KernelEntry, read_manifest
from edgetune.hal import Target
from edgetune.tuner import Bound, TuningDatabase, Workload

from . import __version__
from .publish import check_destination, publish
from .selection import select_best


@dataclass(frozen=True)
class ExportResult:
    folder: Path
    header: Path
    dispatch: Path
    sources: tuple[Path, ...]
    manifest: Path
    entries: tuple[KernelEntry, ...]  # as the published manifest holds them (with what `measure` wrote: exported_value)
    skipped: tuple[str, ...]  # workloads that could not be exported, with the reason


def export_best(db: TuningDatabase, target: Target, out_dir: Path, objective: str = "",
                toolchain: str | None = None, toolchain_versions: dict[str, str] | None = None,
                only: Iterable[Workload] | None = None, measure: Callable[[Path], None] | None = None,
                bounds: tuple[Bound, ...] = ()) -> ExportResult:
    """Export the best variant of every workload of `target` (select_best says which: only
    those measured with `toolchain`, only those in `only`, each by the goal it was tuned
    for unless `objective`/`bounds` override it).

    The export is written into a fresh folder beside `out_dir`, handed to `measure` (which
    may rewrite its manifest, e.g. with the values measured at export), and only then put
    in place of `out_dir` in one rename: an export killed part-way leaves the old folder as
    it was, and the new folder holds exactly the files its manifest lists."""
    selection = select_best(db, target, objective, bounds, toolchain, only)
    if not selection.entries:
        detail = "; ".join(selection.skipped) if selection.skipped else "the database holds no trials for it"
        raise ExportError(f"nothing to export for target {target.name}: {detail}")
    out_dir = Path(out_dir)
    check_destination(out_dir)
    rendered = render_export(target, selection.entries, database=str(db.path),
                             date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), version=__version__,
                             toolchain_versions=toolchain_versions)
    publish(out_dir, rendered.files, rendered.manifest, measure)
    # `measure` may have rewritten the manifest (the values measured as exported): the
    # entries returned are the ones the folder holds, never the ones rendered before it.
    kernels = rendered.manifest.kernels
    if measure is not None:
        # `scratch` is known at export only (the manifest does not store it): carried over.
        had_scratch = {k.function: k.scratch for k in kernels}
        kernels = tuple(replace(k, scratch=had_scratch.get(k.function, False)) for k in read_manifest(out_dir).kernels)
    return ExportResult(folder=out_dir, header=out_dir / HEADER, dispatch=out_dir / DISPATCH,
                        sources=tuple(out_dir / k.source for k in kernels), manifest=out_dir / MANIFEST,
                        entries=kernels, skipped=selection.skipped)
