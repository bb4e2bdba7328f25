"""What every runner shares: compiling a variant or an exported folder, then handing the
objects to the runner's own link step."""
from __future__ import annotations

import json
from pathlib import Path

from edgetune.codegen import Kernel, KernelIO, RenderedKernel, render_glue
from edgetune.codegen.kernels.base import COMMON_CFLAGS, OPT_LEVELS
from edgetune.codegen.placement import PLACEMENT_PARAMS, PlacementError, placement_of
from edgetune.hal import Placement, Target
from edgetune.tuner import Config, Outcome

from . import elf
from .toolchain import BuildResult, MeasureError, run_tool, tool_version


def kernel_header(declaration: str) -> str:
    return ("#ifndef EDGETUNE_KERNEL_H\n#define EDGETUNE_KERNEL_H\n#include <stdint.h>\n"
            f"{declaration};\n#endif\n")


class Builder:
    """Base of the runners: subclasses provide `link(workdir, objects, glue_text, io, placement)`."""

    def __init__(self, target: Target):
        self.target = target

    def link(self, workdir: Path, objects: list[Path], glue_text: str, io: KernelIO,
             placement: Placement | None = None) -> BuildResult:
        raise NotImplementedError

    def build(self, kernel: Kernel, shape: dict, io: KernelIO, rendered: RenderedKernel, workdir: Path) -> BuildResult:
        """One tuning variant: kernel.c compiled as its configuration says."""
        compiler = self.target.compiler(rendered.compiler)
        (workdir / "kernel.h").write_text(kernel_header(rendered.declaration))
        (workdir / "kernel.c").write_text(rendered.source)
        run_tool([compiler.command, *compiler.cflags, *COMMON_CFLAGS, *rendered.cflags, "-I", str(workdir),
                  "-c", "kernel.c", "-o", "kernel.o"], cwd=workdir)
        result = self.link(workdir, [workdir / "kernel.o"], render_glue(kernel, shape, io, rendered.function), io,
                           rendered.placement)
        # RAM: the workload's buffers plus the kernel's own .data/.bss (its stack is not counted).
        values = {**result.values, "code_bytes": elf.code_bytes(workdir / "kernel.o"),
                  "ram_bytes": io.nbytes + elf.ram_bytes(workdir / "kernel.o")}
        info = {**result.info, "compiler": compiler.command, "compiler_version": tool_version(compiler.command),
                "cflags": " ".join(rendered.cflags)}
        return BuildResult(path=result.path, workdir=workdir, values=values, info=info, placement=result.placement)

    def build_export(self, kernel: Kernel, shape: dict, io: KernelIO, export_dir: Path, workdir: Path) -> BuildResult:
        """An exported folder built as a user's firmware would: every file with the compiler
        and flags its manifest records, the kernel reached through the shape dispatcher."""
        export_dir = Path(export_dir).resolve()  # the compiler runs in workdir
        manifest_path = export_dir / "manifest.json"
        try:
            manifest = json.loads(manifest_path.read_text())
            units = [(manifest["dispatch"]["source"], manifest["dispatch"]["compiler_command"],
                      manifest["dispatch"]["cflags"])]
            units += [(k["source"], k["compiler_command"], k["cflags"]) for k in manifest["kernels"]]
            entry = next(k for k in manifest["kernels"] if k["kernel"] == kernel.name and k["shape"] == dict(shape))
            placement = self._export_placement(io, entry["config"])
        except StopIteration:
            raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: no {kernel.name} variant for shape "
                                                      f"{dict(shape)}") from None
        except PlacementError as exc:
            raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: {exc}") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: unreadable manifest ({exc})") from None
        commands = {c.command for c in self.target.compilers}
        # Manifest values reach a command line: only the target's own compilers, plain file
        # names inside the folder, and flags edgetune itself compiles with pass.
        allowed = {*(f for c in self.target.compilers for f in c.cflags), *COMMON_CFLAGS,
                   *(f"-{level}" for level in OPT_LEVELS)}
        objects = []
        for source, command, cflags in units:
            if command not in commands:
                raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: compiler {command!r} is not one of {self.target.name}'s")
            if Path(source).name != source or not source.endswith(".c") or source.startswith("."):
                raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: source {source!r} is not a file in the export")
            bad = [flag for flag in cflags if not isinstance(flag, str) or flag not in allowed]
            if bad:
                raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: flag {bad[0]!r} is not allowed")
            obj = workdir / (Path(source).stem + ".o")
            run_tool([command, *cflags, "-I", str(export_dir), "-c", str(export_dir / source), "-o", str(obj)], cwd=workdir)
            objects.append(obj)
        glue = render_glue(kernel, shape, io, kernel.function_name(shape), via_dispatch=True)
        return self.link(workdir, objects, glue, io, placement)

    def _export_placement(self, io: KernelIO, config: dict) -> Placement | None:
        """Where the exported variant expects its buffers (its configuration's placement;
        region names from the manifest are checked against the HAL's before use)."""
        chosen = {k: v for k, v in config.items() if k in PLACEMENT_PARAMS}
        return placement_of(self.target, io, Config(tuple(chosen.items())))
