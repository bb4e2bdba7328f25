"""What every kernel provides: a shape, a search space per target, inputs, a numpy
reference, and C source for a configuration."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from edgetune.errors import EdgetuneError
from edgetune.hal import Placement, Target
from edgetune.tuner import Config, Space

from ..compiler_options import option_cflags, with_compiler_options
from ..placement import fit_problem, placement_of, scratch_section, with_placement
from ..render import render
from ..scratch import ScratchLayout
from .paths import VectorPath, offered_paths, path_named

C_TYPES = {np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t", np.dtype(np.int32): "int32_t",
           np.dtype(np.int64): "int64_t", np.dtype(np.float32): "float"}


class KernelError(EdgetuneError, ValueError):
    """An unknown kernel, a malformed shape, or a workload a target cannot hold."""


@dataclass(frozen=True)
class Buffer:
    name: str
    data: np.ndarray  # for outputs: an array of the right shape and dtype (contents unused)
    is_output: bool = False
    # A constant input of the kernel (weights, bias, quantisation tables, coefficients):
    # placed with the weights (codegen/placement.py), everything else with the activations.
    weight: bool = False

    @property
    def ctype(self) -> str:
        return C_TYPES[self.data.dtype]


@dataclass(frozen=True)
class KernelIO:
    """Inputs and output slots of one run, in the kernel function's argument order:
    every buffer as a pointer, then every scalar parameter as int32_t."""

    buffers: tuple[Buffer, ...]
    params: tuple[tuple[str, int], ...]

    @property
    def nbytes(self) -> int:
        return sum(b.data.nbytes for b in self.buffers)

    def outputs(self) -> list[Buffer]:
        return [b for b in self.buffers if b.is_output]


@dataclass(frozen=True)
class RenderedKernel:
    """One variant as C: the source, its entry point, and how it must be compiled."""

    source: str
    function: str
    declaration: str
    compiler: str  # the target compiler's name ("gcc", "clang")
    cflags: tuple[str, ...]  # flags chosen by the configuration (optimisation level, ...)
    placement: Placement | None = None  # where its buffers live (None: the target's default)
    scratch_bytes: int = 0  # its static scratch, laid out as in a shared area (codegen/scratch.py)
    scratch_align: int = 16  # the alignment that area needs for its buffers
    arena_scratch_bytes: int = 0  # in a model module: its scratch in the arena (codegen/scratch.py)


# Index arithmetic is done in `int` (32 bits on every target offered); keep every tensor's
# element count far from its limit. No single shape value may exceed it either: every key
# is a tensor dimension, a padding or a step, and none is sensible beyond that, while a
# value like 2**70 would otherwise reach numpy (or a C `int`) and fail without naming the key.
# A kernel's function name for a shape is also its file's name and the stem of the export's
# identifiers and macros: the variant's own (`<fn>_kernel` for plain C, a batch member's
# `<fn>_v<digest>`) stay within the 63 significant characters MISRA C and every toolchain
# keep, and the file name within any file system's.
MAX_FUNCTION_NAME = 40
NAME_DIGEST_CHARS = 8


def short_identifier(name: str, limit: int = MAX_FUNCTION_NAME) -> str:
    """`name` itself when it fits `limit`; else its start, cut after a `_` where one is near,
    and `_` plus a digest of the whole name, `limit` characters in all (names differing
    anywhere stay distinct)."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:NAME_DIGEST_CHARS]
    start = name[:limit - NAME_DIGEST_CHARS - 1]
    cut = start.rfind("_")
    start = start[:cut] if cut >= len(start) // 2 else start
    return f"{start}_{digest}"


MAX_ELEMENTS = 1 << 24
MAX_SHAPE_VALUE = MAX_ELEMENTS


def check_elements(**counts: int) -> None:
    """Refuse a shape whose tensors would be too large, naming the tensor."""
    for name, count in counts.items():
        if count > MAX_ELEMENTS:
            raise KernelError(f"shape: the {name} tensor has {count} elements, more than {MAX_ELEMENTS}")


# NAME=INTEGER or NAME=WORD: a word (pad=same, rounding=truncate) is kept as text for the
# kernel's expand_shape, which says which words a key takes (pad=full is refused naming them);
# a word left after it is refused as not an integer.
SHAPE_ITEM = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*=\s*(-?\d+|[A-Za-z]+)\s*$")
MAX_SHAPE_DIGITS = 30  # far beyond any shape's range check, far below Python's int-parsing limit
OPT_LEVELS = ("O2", "O3", "Os")
COMMON_CFLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-ffunction-sections", "-fdata-sections")


def comment_safe(text: str) -> str:
    """Text that can sit inside a C block comment: one line, no comment delimiters."""
    return " ".join(str(text).split()).replace("*/", "* /").replace("/*", "/ *")


def describe_mismatch(name: str, bad: np.ndarray, got: np.ndarray, want: np.ndarray,
                      what: str = "differ") -> str | None:
    """None when no element is flagged, else a message naming how many and the first one."""
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{name}: {int(bad.sum())} of {want.size} elements {what}; first at {first}: "
            f"got {str(got[first])}, expected {str(want[first])}")  # 1, 0.3: repr says np.int16(1) on numpy 2


class Kernel:
    name: str = ""
    version: int = 1
    shape_keys: tuple[str, ...] = ()
    description: str = ""
    template: str = ""
    zero_allowed: tuple[str, ...] = ()  # shape keys that may be 0 (e.g. padding); the rest must be >= 1
    shape_defaults: tuple[tuple[str, int], ...] = ()  # keys a shape may leave out, and their values
    # The values of the `vector` parameter, one declared unit each (codegen/kernels/paths.py).
    paths: tuple[VectorPath, ...] = ()
    # A kernel defined outside edgetune (codegen/kernels/user.py): the sha256 of its
    # definition's files, recorded in an export's manifest; "" for a shipped kernel.
    definition: str = ""

    # --- shapes -------------------------------------------------------------------------
    def parse_shape(self, shape: str | Mapping[str, int]) -> dict[str, int]:
        """'m=16,n=16,k=32' (or a mapping) -> checked dict in this kernel's key order."""
        if isinstance(shape, str):
            items = {}
            for part in filter(None, (p.strip() for p in shape.split(","))):
                match = SHAPE_ITEM.fullmatch(part)
                if not match:
                    raise KernelError(f"shape: {part!r} is not NAME=INTEGER (e.g. {self.example_shape()})")
                if match.group(1) in items:
                    raise KernelError(f"shape: {match.group(1)!r} is given twice")
                value = match.group(2)
                if len(value) > MAX_SHAPE_DIGITS:  # no shape is that large; Python would not even read it
                    raise KernelError(f"shape: {match.group(1)}={value[:12]}... ({len(value)} digits) is out of range")
                items[match.group(1)] = value.lower() if value.isalpha() else int(value)  # SAME as TFLite spells it
        else:
            items = dict(shape)
        items = {**dict(self.shape_defaults), **self.expand_shape(items)}
        for key in items:
            if key not in self.shape_keys:
                raise KernelError(f"shape: unknown key {key!r} for {self.name} (keys: {', '.join(self.shape_keys)})")
        for key in self.shape_keys:
            if key not in items:
                raise KernelError(f"shape: missing {key!r} for {self.name} (e.g. {self.example_shape()})")
            least = 0 if key in self.zero_allowed else 1
            if not isinstance(items[key], int) or isinstance(items[key], bool) or items[key] < least:
                raise KernelError(f"shape: {key}={items[key]!r} must be {'a non-negative' if least == 0 else 'a positive'} integer")
            if items[key] > MAX_SHAPE_VALUE:
                raise KernelError(f"shape: {key}={items[key]} is too large (at most {MAX_SHAPE_VALUE})")
        shape_dict = {key: items[key] for key in self.shape_keys}
        self.check_shape(shape_dict)
        return shape_dict

    def example_shape(self) -> str:
        return ",".join(f"{k}=16" for k in self.shape_keys)

    def expand_shape(self, items: dict[str, object]) -> dict[str, object]:
        """The kernel's shorthands (e.g. a convolution's stride=2, pad=same) as its full keys;
        raise KernelError naming a key that contradicts its shorthand."""
        return items

    def check_shape(self, shape: dict[str, int]) -> None:
        """Kernel-specific limits; raise KernelError naming the key."""

    def check_fits(self, target: Target, shape: Mapping[str, int]) -> None:
        """Refuse, before any trial, a workload whose buffers no placement on the target can
        hold: every trial would only fail as too large."""
        text = ",".join(f"{k}={v}" for k, v in shape.items())
        problem = fit_problem(target, self.make_io(shape, np.random.default_rng(0)), f"shape {text}")
        if problem:
            raise KernelError(problem)

    def function_name(self, shape: Mapping[str, int]) -> str:
        """The C function (and file) name of the kernel for a shape: et_<kernel>_<key><value>...,
        readable and unchanged while it fits MAX_FUNCTION_NAME; a longer one (a convolution's
        twelve shape keys) keeps its readable start and ends in a digest of the whole name."""
        # Only validated integers and the kernel's own name go into the identifier.
        return short_identifier("et_" + self.name + "_" + "_".join(f"{k}{int(v)}" for k, v in shape.items()))

    # --- to be provided by each kernel ---------------------------------------------------
    def space(self, target: Target, shape: Mapping[str, int]) -> Space:
        """The kernel's own parameters (tiles, vector path, compiler, ...)."""
        raise NotImplementedError

    def tuning_space(self, target: Target, shape: Mapping[str, int]) -> Space:
        """What a tuning session searches: the kernel's own space plus the parameters every
        kernel shares on a target (buffer placement, codegen/placement.py; the compiler's
        options where the target tunes them, codegen/compiler_options.py)."""
        io = self.make_io(shape, np.random.default_rng(0))
        space = with_placement(self.space(target, shape), target, io)
        return with_compiler_options(space, target, any(b.data.dtype.kind == "f" for b in io.outputs()))

    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator) -> KernelIO:
        raise NotImplementedError

    # The parameters a configuration's scratch depends on, for scratch_estimate (() : the
    # kernel gives no estimate): a bound on scratch prunes the space by them alone.
    scratch_reads: tuple[str, ...] = ()

    def scratch_estimate(self, shape: Mapping[str, int], config: Mapping) -> int | None:
        """The bytes of scratch (im2col rows, padded copies, accumulators) a configuration
        needs, from `scratch_reads` alone, without rendering it; None: not known."""
        return None

    # How make_io draws the inputs tuning measures (a kernel's `edge`; "random" for every
    # kernel without one). The int8 kernels draw TFLite's conventions ("tflite"): tuning
    # measures the branches a deployment takes, never only the ones it does not.
    tuning_edge = "random"
    # Zero points the user set for standalone tuning (name, value), over the draw
    # (codegen/kernels/zero_points.py); () on the kernels of the registry.
    tuning_zero_points: tuple[tuple[str, int], ...] = ()

    def tuning_io(self, shape: Mapping[str, int], rng: np.random.Generator) -> KernelIO:
        """The inputs every trial of a workload runs on, from the workload's own seed."""
        io = self.make_io(shape, rng) if self.tuning_edge == "random" else self.make_io(shape, rng, edge=self.tuning_edge)
        if not self.tuning_zero_points:
            return io
        chosen = dict(self.tuning_zero_points)
        return KernelIO(buffers=io.buffers, params=tuple((k, int(chosen.get(k, v))) for k, v in io.params))

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        raise NotImplementedError

    def starting_points(self, target: Target, shape: Mapping[str, int]) -> tuple[dict, ...]:
        """Partial configurations `model tune` measures early on every layer of this kernel
        (over the default configuration's other values; those illegal for a shape, or built
        by a compiler the run may not use, are left out): configurations measured fastest on
        typical layers, so a layer whose own search is short still starts from one. () : none."""
        return ()

    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        raise NotImplementedError

    # --- vector paths --------------------------------------------------------------------
    def offered_paths(self, target: Target) -> list[VectorPath]:
        """The kernel's paths a target offers, in table order (the `vector` values)."""
        return offered_paths(self.paths, target)

    def path(self, config: Config) -> VectorPath:
        """The declared path of a configuration."""
        return path_named(self.paths, str(config["vector"]))

    def template_for(self, config: Config) -> str:
        """The template a configuration renders from: its vector path's."""
        return self.path(config).template_for(config) if self.paths else self.template

    def deployed_io(self, io: KernelIO, config: Config) -> KernelIO:
        """The buffers a variant is called with. Usually the inputs as they are; a variant
        with weights packed at export time gets them packed (same sizes and types)."""
        return io

    def variant_cflags(self, config: Config) -> tuple[str, ...]:
        """Flags a configuration adds to the target compiler's own: its optimisation level,
        plus whatever its vector path relies on (see codegen/kernels/dsp.py)."""
        return (f"-{config['opt']}",) + (self.path(config).cflags if self.paths else ())

    def extra_declarations(self, shape: Mapping[str, int], config: Config, fn: str) -> list[str]:
        """Other public functions of a variant's source (e.g. a weight packing helper)."""
        return []

    def in_place_mode(self, shape: Mapping[str, int], config: Config) -> str:
        """How the variant may be called with its output over its input: "start" (the output
        starts where the input does: every input byte is read before the output byte at its
        address is written), "end" (the output ends where the input ends: it is written in
        order, each write behind the reads still to come), "lag" (the output starts
        in_place_lag bytes before the input: written in order, each write that far behind the
        reads still to come), or "" (not at all). A model's
        memory plan then lays the two over each other (TinyEngine's in-place depthwise).
        "" unless a kernel shows it from its loops (and a module test checks it against the
        oracle)."""
        return ""

    def in_place_lag(self, shape: Mapping[str, int], config: Config) -> int:
        """In mode "lag", the bytes the output starts before the input (0 otherwise)."""
        return 0

    def compare(self, shape: Mapping[str, int], io: KernelIO, name: str, got: np.ndarray,
                want: np.ndarray) -> str | None:
        """None when an output is right, else why not. Integer kernels are bit-exact;
        float kernels override this with their documented tolerance."""
        return describe_mismatch(name, got != want, got, want)

    # --- shared rendering -----------------------------------------------------------------
    def arguments(self, shape: Mapping[str, int]) -> list[str]:
        """The C parameters of every variant: buffer pointers, then int32 scalars."""
        io = self.make_io(shape, np.random.default_rng(0))
        args = [f"{'' if b.is_output else 'const '}{b.ctype} *{b.name}" for b in io.buffers]
        return args + [f"int32_t {name}" for name, _ in io.params]

    def argument_names(self, shape: Mapping[str, int]) -> list[str]:
        return [arg.rsplit(" ", 1)[1].lstrip("*") for arg in self.arguments(shape)]

    def declaration(self, shape: Mapping[str, int], io: KernelIO | None = None, fn: str | None = None) -> str:
        return f"void {fn or self.function_name(shape)}({', '.join(self.arguments(shape))})"

    def dispatch_declaration(self, shape: Mapping[str, int]) -> str:
        """`int et_<kernel>(shape..., args...)`: runs the tuned variant for a shape, or returns -1."""
        dims = [f"int32_t {key}" for key in self.shape_keys]
        return f"int et_{self.name}({', '.join(dims + self.arguments(shape))})"

    def render(self, target: Target, shape: Mapping[str, int], config: Config, *, header: str = "kernel.h",
               fn: str | None = None, provenance: tuple[str, ...] = (), shared_scratch: str = "",
               scratch_pointer: str = "", requant_forms: tuple[int, ...] | None = None) -> RenderedKernel:
        """The variant's C. Its static scratch is its own, or (shared_scratch) placed in that
        area of the module it is part of, or (scratch_pointer) in the module's arena
        (codegen/scratch.py). `requant_forms`: the fast
        requantisation forms (edgetune.codegen.quant.requant_form) its calls will take, where
        the caller knows them (a model module's constant quantisation); the Helium
        convolutions then compile only those and the general form, which serves any call,
        instead of every form. None: every form."""
        fn = fn or self.function_name(shape)
        compiler = target.compiler(str(config["compiler"]))
        cflags = self.variant_cflags(config) + option_cflags(target, config)
        build_hint = " ".join((compiler.command, *compiler.cflags, *COMMON_CFLAGS[:1], *cflags, "-c", f"{fn}.c"))
        variables = dict(self.template_vars(target, shape, config))
        section = scratch_section(target)
        scratch_attr = f' __attribute__((section("{section}")))' if section else ""
        layout = ScratchLayout(scratch_attr, shared_scratch, scratch_pointer)
        if self.paths:
            variables.update(self.path(config).variables(target, shape, config))
        variables.update(fn=fn, prefix=fn, P=fn.upper(), header=header, kernel_name=self.name, provenance=tuple(map(comment_safe, provenance)),
                         version=self.version, build_hint=build_hint,
                         scratch_attr=scratch_attr, scratch_array=layout.array, rq_only=requant_forms,
                         config_text=", ".join(f"{k}={v}" for k, v in config.items))
        source = self.render_source(self.template_for(config), variables)
        placement = placement_of(target, self.make_io(shape, np.random.default_rng(0)), config)
        return RenderedKernel(source=source, function=fn, declaration=self.declaration(shape, fn=fn),
                              compiler=compiler.name, cflags=cflags, placement=placement,
                              scratch_bytes=layout.nbytes, scratch_align=layout.align,
                              arena_scratch_bytes=layout.arena_nbytes)

    def render_source(self, template: str, variables: dict) -> str:
        """The C text of a variant from its template (codegen's own templates; a kernel
        defined elsewhere renders from its own folder)."""
        return render(template, variables)


def render_glue(kernel: Kernel, shape: Mapping[str, int], io: KernelIO, fn: str, via_dispatch: bool = False) -> str:
    """C glue between the harness's I/O block and a kernel variant, or (via_dispatch) the
    exported shape dispatcher, which must then find the variant or the run fails."""
    buffers = [{"ctype": b.ctype, "nbytes": b.data.nbytes, "is_output": b.is_output} for b in io.buffers]
    if via_dispatch:
        return render("harness_glue.c.j2", dict(fn=f"et_{kernel.name}", declaration=kernel.dispatch_declaration(shape),
                                                buffers=buffers, n_params=len(io.params),
                                                leading=[int(shape[key]) for key in kernel.shape_keys], checked=True))
    return render("harness_glue.c.j2", dict(fn=fn, declaration=kernel.declaration(shape, io, fn=fn),
                                            buffers=buffers, n_params=len(io.params), leading=[], checked=False))
