"""The runner interface (`Runner`) and what every runner shares: compiling a variant or an
exported folder, then handing the objects to the runner's own link step.

A runner serves one `[runner] kind` of target file. It declares what its runs report
(`measures`), its default tolerance for `edgetune verify`, how many runs may go at once
(`slots`), which programs it needs (`check_tools`, `programs`), and implements `link` and
`run`. The registry of runner classes by kind is edgetune.targets.runners; adding a runner
is docs/extending.md's checklist."""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from edgetune.codegen import Kernel, KernelIO, RenderedKernel, render_glue
from edgetune.codegen.kernels.base import COMMON_CFLAGS, OPT_LEVELS
from edgetune.codegen.kernels import path_cflags
from edgetune.codegen.manifest import MANIFEST, ManifestError, read_manifest
from edgetune.codegen.placement import PLACEMENT_PARAMS, PlacementError, placement_of
from edgetune.hal import Measures, Placement, Target
from edgetune.hal.compiler_options import all_option_flags
from edgetune.tuner import Config, Outcome

from . import elf, iobuf
from .buildcache import ArtifactStore, content_key, firmware_digest, headers_of
from .toolchain import BuildResult, MeasureError, run_tool, tool_version, tool_versions

# Exit statuses of the harnesses (firmware/common/harness.h), bare-metal and native alike.
EXIT_OK, EXIT_BAD_IO, EXIT_OUTPUT_FAILED, EXIT_FAULT = 0, 3, 4, 5
EXIT_OVERRUN = 6  # a guard byte around a buffer changed: the kernel wrote outside its outputs
OVERRUN_MESSAGE = ("the kernel wrote outside its output buffers: a guard byte the harness put around every "
                   "buffer changed")


def kernel_header(declaration: str) -> str:
    return ("#ifndef EDGETUNE_KERNEL_H\n#define EDGETUNE_KERNEL_H\n#include <stdint.h>\n"
            f"{declaration};\n#endif\n")


class Runner(ABC):
    """Builds kernels for one kind of target and measures them there.

    Subclasses declare `kind` and `measures` and implement `slots`, `check_tools`, `link`
    and `run`; `build` and `build_export` are shared. Kernel objects and linked images go
    through the content-addressed cache (buildcache): a variant built before, by this
    session or any other sharing the cache folder, is copied instead of compiled; a variant
    that failed to build fails again the same way."""

    kind: ClassVar[str]  # the target file's [runner] kind this runner serves
    # What a successful run reports (the HAL's description of the kind: targets carry it).
    measures: ClassVar[Measures]
    # Whether the same code counts the same on every run (verify then also checks an
    # exported variant's count against its stored trial's).
    counts_exactly: ClassVar[bool] = False
    # Whether it measures the machine edgetune runs on (so never on a cluster's workers).
    measures_this_machine: ClassVar[bool] = False
    # Whether the firmware is built with the core clock (delays, baud arithmetic): the clock
    # is then part of what is measured, not only of an estimate (app/identity.py).
    builds_with_clock: ClassVar[bool] = False
    # The version of this runner's harness as far as counts go: bumped when a change of the
    # harness (firmware/) changes what the same variant measures, so trials stored under the
    # old harness belong to another workload (app/identity.py). 1: every harness before the
    # variant table of batched evaluation.
    harness_version: ClassVar[int] = 1

    def __init__(self, target: Target):
        self.target = target
        self._objects = ArtifactStore("objects")
        self._images = ArtifactStore("images")

    @classmethod
    @abstractmethod
    def default_tolerance_pct(cls, target: Target) -> float:
        """The slow-down `edgetune verify` allows on this target by default, in per cent."""

    @abstractmethod
    def slots(self) -> int:
        """How many runs may go at once (>= 1)."""

    @abstractmethod
    def check_tools(self) -> None:
        """Raise ToolMissing (a clear one-line message naming the program) unless every
        program the target needs is installed and every device it names is reachable."""

    @classmethod
    def programs(cls, target: Target) -> tuple[str, ...]:
        """Every program that builds or runs code for the target (their versions are part of
        each workload's identity)."""
        programs = [c.command for c in target.compilers]
        if target.firmware is not None:
            programs.append(target.firmware.linker)
        if target.runner.program:
            programs.append(target.runner.program)
        if target.serial is not None and target.serial.flash:
            programs.append(target.serial.flash[0])  # the flasher, or the emulator that is the board
        return tuple(dict.fromkeys(programs))

    @abstractmethod
    def link(self, workdir: Path, objects: list[Path], glue_text: str, io: KernelIO,
             placement: Placement | None = None) -> BuildResult:
        """The runnable artefact from the kernel's objects and the glue source."""

    @abstractmethod
    def run(self, build: BuildResult, io: KernelIO, timeout_s: float | None = None) -> tuple[dict, bytes]:
        """Run a build once: (measured values, holding measures.primary; the raw output
        bytes). A fault of the measured code raises MeasureError with its Outcome."""

    def build(self, kernel: Kernel, shape: dict, io: KernelIO, rendered: RenderedKernel, workdir: Path) -> BuildResult:
        """One tuning variant: kernel.c compiled as its configuration says."""
        started = time.monotonic()
        compiled, object_key = self.compile_variant(rendered, workdir, io)
        linking = time.monotonic()
        glue = render_glue(kernel, shape, io, rendered.function)
        result, image_hit = self.link_cached(workdir, [object_key], [compiled.path], glue, io, rendered.placement)
        info = {**result.info, **compiled.info,
                # hit: nothing compiled or linked; object: the kernel object reused, linked anew
                "build_cache": "hit" if image_hit else compiled.info["build_cache"],
                "seconds_compile": round(linking - started, 3), "seconds_link": round(time.monotonic() - linking, 3)}
        return BuildResult(path=result.path, workdir=workdir, values={**result.values, **compiled.values}, info=info,
                           placement=result.placement)

    # Runners whose images run several variants in one boot (edgetune.targets.batch):
    # they implement run_batch.
    batches: ClassVar[bool] = False

    def run_batch(self, build: BuildResult, ios: list[KernelIO], timeout_s: float):
        """Run an image of several variants once: ([(values, raw output)] of the variants
        that completed, in table order; and None, or the MeasureError that stopped the run
        at the variant after them)."""
        raise NotImplementedError(f"{type(self).__name__} does not run batches")

    def compile_variant(self, rendered: RenderedKernel, workdir: Path, io: KernelIO) -> tuple[BuildResult, str]:
        """kernel.c of one variant compiled in `workdir` through the cache: (the object with
        its code and RAM bytes and how it was compiled, the object's cache key)."""
        compiler = self.target.compiler(rendered.compiler)
        obj, object_key, object_hit = self.compile_object(rendered, workdir)
        # RAM: the workload's buffers plus the kernel's own .data/.bss (its stack is not counted).
        values = {"code_bytes": elf.code_bytes(obj), "ram_bytes": io.nbytes + elf.ram_bytes(obj)}
        info = {"compiler": compiler.command, "compiler_version": tool_version(compiler.command),
                "cflags": " ".join(rendered.cflags), "build_cache": "object" if object_hit else "miss"}
        return BuildResult(path=obj, workdir=workdir, values=values, info=info), object_key

    def compile_object(self, rendered: RenderedKernel, workdir: Path) -> tuple[Path, str, bool]:
        """A variant's kernel.c (and kernel.h) written to workdir and compiled to kernel.o as its
        configuration says, through the cache: (the object, its key, whether it was a hit)."""
        workdir.mkdir(parents=True, exist_ok=True)
        compiler = self.target.compiler(rendered.compiler)
        (workdir / "kernel.h").write_text(kernel_header(rendered.declaration))
        (workdir / "kernel.c").write_text(rendered.source)
        args = [compiler.command, *compiler.cflags, *COMMON_CFLAGS, *rendered.cflags]
        object_key, object_hit = self.compile(args, workdir / "kernel.c", workdir, workdir / "kernel.o")
        return workdir / "kernel.o", object_key, object_hit

    def compile(self, args: list[str], source: Path, include_dir: Path, obj: Path) -> tuple[str, bool]:
        """`args -I include_dir -c source -o obj`, run in obj's folder, through the cache:
        (the object's key, whether it was a hit). Paths are not part of the key; the
        source's and the include folder's contents are."""
        key = content_key("object", tool_version(args[0]), *args, source.read_bytes(), *headers_of(include_dir))
        name = source.name if source.parent == obj.parent else str(source)

        def build():
            run_tool([*args, "-I", str(include_dir), "-c", name, "-o", obj.name], cwd=obj.parent)
            return [obj], {}

        _, hit = self._objects.get_or_build(key, obj.parent, build)
        return key, hit

    def link_cached(self, workdir: Path, object_keys: list[str], objects: list[Path], glue_text: str,
                    io: KernelIO, placement: Placement | None = None) -> tuple[BuildResult, bool]:
        """`link` through the cache, keyed by the objects' keys and everything else the image
        is made of, the buffers' placement and segment sizes included: (the result, whether
        it was a hit)."""
        versions = sorted(tool_versions(self.programs(self.target)).items())
        sizes = [buf.data.nbytes for buf in io.buffers] + [int(buf.weight) for buf in io.buffers]
        key = content_key("image", type(self).__name__, repr(self.target), firmware_digest(),
                          str(iobuf.block_size(io)), repr(sizes), repr(placement), glue_text, *object_keys,
                          *(f"{k}={v}" for k, v in versions))

        def build():
            result = self.link(workdir, objects, glue_text, io, placement)
            where = None if result.placement is None else [result.placement.weights, result.placement.activations]
            return [result.path], {"image": result.path.name, "values": result.values, "info": result.info,
                                   "placement": where}

        meta, hit = self._images.get_or_build(key, workdir, build)
        where = meta.get("placement")
        return BuildResult(path=workdir / meta["image"], workdir=workdir, values=dict(meta["values"]),
                           info=dict(meta["info"]), placement=None if where is None else Placement(*where)), hit

    def build_export(self, kernel: Kernel, shape: dict, io: KernelIO, export_dir: Path, workdir: Path,
                     direct: bool = False) -> BuildResult:
        """An exported folder built as a user's firmware would: every file with the compiler
        and flags its manifest records, the kernel reached through the shape dispatcher (or,
        `direct`, called as a tuning run calls it: the count is then the trial's count)."""
        export_dir = Path(export_dir).resolve()  # the compiler runs in workdir
        manifest_path = export_dir / MANIFEST
        try:
            manifest = read_manifest(export_dir)
            units = [manifest.dispatch, *(k.unit for k in manifest.kernels)]
            entry = next(k for k in manifest.kernels if k.kernel == kernel.name and k.shape_dict == dict(shape))
            placement = self._export_placement(io, entry.config_dict)
        except StopIteration:
            raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: no {kernel.name} variant for shape "
                                                      f"{dict(shape)}") from None
        except PlacementError as exc:
            raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: {exc}") from None
        except (OSError, ManifestError) as exc:  # read_manifest checked every value it holds
            raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: unreadable manifest ({exc})") from None
        commands = {c.command for c in self.target.compilers}
        # Manifest values reach a command line: only the target's own compilers, plain file
        # names inside the folder, and flags edgetune itself compiles with pass (its option
        # table's among them).
        allowed = {*(f for c in self.target.compilers for f in c.cflags), *COMMON_CFLAGS,
                   *(f"-{level}" for level in OPT_LEVELS), *path_cflags(), *all_option_flags()}
        objects, keys = [], []
        for source, command, cflags in ((u.source, u.compiler_command, u.cflags) for u in units):
            if command not in commands:
                raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: compiler {command!r} is not one of {self.target.name}'s")
            if Path(source).name != source or not source.endswith(".c") or source.startswith("."):
                raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: source {source!r} is not a file in the export")
            bad = [flag for flag in cflags if not isinstance(flag, str) or flag not in allowed]
            if bad:
                raise MeasureError(Outcome.RUNTIME_ERROR, f"{manifest_path}: flag {bad[0]!r} is not allowed")
            obj = workdir / (Path(source).stem + ".o")
            keys.append(self.compile([command, *cflags], export_dir / source, export_dir, obj)[0])
            objects.append(obj)
        glue = render_glue(kernel, shape, io, kernel.function_name(shape), via_dispatch=not direct)
        return self.link_cached(workdir, keys, objects, glue, io, placement)[0]

    def _export_placement(self, io: KernelIO, config: dict) -> Placement | None:
        """Where the exported variant expects its buffers (its configuration's placement;
        region names from the manifest are checked against the HAL's before use)."""
        chosen = {k: v for k, v in config.items() if k in PLACEMENT_PARAMS}
        return placement_of(self.target, io, Config(tuple(chosen.items())))
