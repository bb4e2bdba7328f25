"""The compiler options edgetune may tune, as data: a few parameters, each a short list of
values, each value the flags it stands for under GCC and under Clang.

Only options that keep results exact are here. None of them lets the compiler reassociate
floating-point arithmetic or contract it into fused multiply-adds (no -ffast-math, no
-fassociative-math, no -ffp-contract): GCC and LLVM vectorise a float reduction only when
reassociation is allowed (GCC manual, -ftree-loop-vectorize and -fassociative-math; LLVM
"Auto-Vectorization in LLVM", reductions), so vectorising, unrolling, scheduling, aligning
and inlining change how fast a kernel runs, never what it computes. The one exception is
marked `reorders_float`: LLVM treats a forced vector width as permission to reorder a float
reduction, so those values are offered to integer kernels only. Integer kernels stay
bit-exact; float kernels keep the order of their operations (tests/test_compiler_options.py
compares their outputs bit for bit with every value against the default).

A value stands for no flag ("default") or for a few; a compiler family without a value
(None) never offers it. Which flags a compiler really accepts is probed once per compiler
(edgetune.targets.option_probe): a value whose flags it refuses is not offered. A target
file opts in with `compiler_options = [...]`, naming parameters of this table (or "all"),
and can only narrow the table: no string of a target file becomes a flag here.

Sources: GCC 12 manual, "Options That Control Optimization" (-funroll-loops, --param
max-unroll-times, -ftree-vectorize, -fvect-cost-model, -fschedule-insns, -fsched-pressure,
-falign-loops, -falign-functions, -finline-limit, -fivopts, -ftree-loop-distribute-patterns,
-fpeel-loops); Clang command line reference (-funroll-loops, -fvectorize, -fslp-vectorize,
-falign-functions, -falign-loops); LLVM LoopVectorize and LoopUnroll pass options
(-force-vector-width, -force-vector-interleave, -unroll-count, -unroll-threshold,
-enable-unroll-and-jam), reached through Clang's -mllvm.
"""
from __future__ import annotations

from dataclasses import dataclass

FAMILIES = ("gcc", "clang")
DEFAULT = "default"  # the value of every parameter that adds no flag
ALL = "all"  # a target file's shorthand for every parameter of the table


@dataclass(frozen=True)
class OptionValue:
    """One value of a compiler-option parameter: its flags per compiler family (None: the
    family does not offer it)."""

    name: str
    gcc: tuple[str, ...] | None
    clang: tuple[str, ...] | None
    doc: str = ""
    # It may reorder a floating-point reduction: offered only to kernels whose outputs are
    # integers (LLVM's loop vectoriser lets a forced width reassociate: LoopVectorizeHints).
    reorders_float: bool = False

    def flags(self, family: str) -> tuple[str, ...] | None:
        return self.gcc if family == "gcc" else self.clang if family == "clang" else None


@dataclass(frozen=True)
class OptionParam:
    """A tunable parameter of the compiler's options: its name in a configuration and its
    values, the first one always "default" (no flag)."""

    name: str
    doc: str
    values: tuple[OptionValue, ...]

    def value(self, name: str) -> OptionValue:
        for value in self.values:
            if value.name == name:
                return value
        raise KeyError(f"{self.name} has no value {name!r}")


def _unroll(times: int) -> OptionValue:
    return OptionValue(f"x{times}", ("-funroll-loops", "--param", f"max-unroll-times={times}"),
                       ("-mllvm", f"-unroll-count={times}"), f"unroll loops up to {times} times")


def _width(lanes: int) -> OptionValue:
    return OptionValue(f"width{lanes}", None, ("-mllvm", f"-force-vector-width={lanes}"),
                       f"vectorise loops {lanes} elements wide", reorders_float=True)


_NONE = OptionValue(DEFAULT, (), (), "the -O level's choice")

OPTION_PARAMS: tuple[OptionParam, ...] = (
    OptionParam("cc_unroll", "loop unrolling beyond the -O level's", (
        _NONE,
        OptionValue("off", ("-fno-unroll-loops", "-fno-peel-loops"), ("-fno-unroll-loops",), "no unrolling"),
        _unroll(4), _unroll(8),
    )),
    OptionParam("cc_vectorize", "the loop and SLP auto-vectorisers", (
        _NONE,
        OptionValue("off", ("-fno-tree-vectorize",), ("-fno-vectorize", "-fno-slp-vectorize"), "no auto-vectorisation"),
        OptionValue("no_slp", ("-fno-tree-slp-vectorize",), ("-fno-slp-vectorize",), "the loop vectoriser only"),
        OptionValue("unlimited", ("-fvect-cost-model=unlimited",), None, "vectorise whatever is legal"),
        _width(8),
    )),
    # One parameter for the rest, each value one switch: a parameter per switch would
    # multiply the space by their product; this one multiplies it by their number.
    OptionParam("cc_tweak", "one more switch: scheduling, alignment, inlining, a loop pass", (
        _NONE,
        OptionValue("sched_pressure", ("-fschedule-insns", "-fsched-pressure"), None,
                    "schedule before register allocation, register-pressure aware"),
        OptionValue("no_sched2", ("-fno-schedule-insns2",), None, "no scheduling after register allocation"),
        OptionValue("align_loops32", ("-falign-loops=32",), ("-falign-loops=32",), "loop heads on 32 bytes"),
        OptionValue("align_functions32", ("-falign-functions=32",), ("-falign-functions=32",),
                    "functions on 32 bytes"),
        OptionValue("inline_less", ("-fno-inline-functions", "-fno-inline-small-functions"),
                    ("-fno-inline-functions",), "inline only what is marked inline"),
        OptionValue("no_ivopts", ("-fno-ivopts",), None, "no induction-variable optimisation"),
        OptionValue("no_distribute", ("-fno-tree-loop-distribute-patterns",), None,
                    "no loops turned into memset/memcpy calls"),
        OptionValue("unroll_threshold", None, ("-mllvm", "-unroll-threshold=600"), "unroll larger loop bodies"),
        OptionValue("unroll_and_jam", None, ("-mllvm", "-enable-unroll-and-jam"), "unroll-and-jam of loop nests"),
        OptionValue("interleave1", None, ("-mllvm", "-force-vector-interleave=1"),
                    "no interleaving of vectorised loops"),
    )),
)
# What a target file's "all" stands for is every parameter; these two are the ones the
# docs suggest first (16 combinations per compiler; with cc_tweak 128 for GCC, 112 for Clang).
OPTION_NAMES = tuple(p.name for p in OPTION_PARAMS)


def option_param(name: str) -> OptionParam:
    for param in OPTION_PARAMS:
        if param.name == name:
            return param
    raise KeyError(f"no compiler-option parameter {name!r}")


def expand_names(names) -> tuple[str, ...]:
    """A target file's list, in table order ("all": every parameter)."""
    wanted = set(OPTION_NAMES) if ALL in names else set(names)
    return tuple(name for name in OPTION_NAMES if name in wanted)


def family_of(command: str) -> str | None:
    """The option family of a compiler driver, from its program name (arm-none-eabi-gcc and
    aarch64-linux-gnu-gcc are GCC; clang and clang-14 are Clang); None: neither."""
    base = command.rsplit("/", 1)[-1]
    if base == "clang" or base.startswith("clang-") or base.endswith("-clang"):
        return "clang"
    if base == "gcc" or base.endswith("-gcc") or base.startswith("gcc-") or "-gcc-" in base:
        return "gcc"
    return None


def option_flag_sets(family: str) -> tuple[tuple[str, ...], ...]:
    """Every distinct non-empty flag tuple the table offers a family (what a probe tries)."""
    found = []
    for param in OPTION_PARAMS:
        for value in param.values:
            flags = value.flags(family)
            if flags and flags not in found:
                found.append(flags)
    return tuple(found)


def all_option_flags() -> frozenset[str]:
    """Every single argument any value stands for (an exported manifest's allow-list)."""
    return frozenset(flag for family in FAMILIES for flags in option_flag_sets(family) for flag in flags)
