"""Which flags a target file (or an export manifest) may hand to a compiler driver, a linker
or objdump: an allow-list of option shapes, not a list of known-bad ones.

Every shape below changes how code is generated, checked or linked; none makes the tool
write a file besides its output, read options, headers or plugins from elsewhere, or run
another program. A flag outside them is refused, even when harmless, and the error says
which shapes are allowed (docs/targets.md lists them for users).

Sources: GCC manual, "Option Summary" (Optimize Options, Code Gen Options, Warning Options,
Preprocessor Options, Link Options, Developer Options: the file-writing -fdump-*, -save-temps,
-fstack-usage, -fopt-info=FILE, --coverage live there and are absent here); Clang command line
reference; LLVM `opt` options of LoopVectorize, LoopUnroll, LoopInterchange, LoopFlatten and
LoopUnrollAndJam (for -mllvm); GNU ld manual (for -Wl,); GNU objdump manual.
"""
from __future__ import annotations

import re

# -f options that choose code generation or optimisation and write nothing: -fNAME and -fno-NAME.
F_SWITCHES = frozenset({
    "aggressive-loop-optimizations", "allow-store-data-races", "associative-math", "asynchronous-unwind-tables",
    "builtin", "caller-saves", "color-diagnostics", "common", "cse-follow-jumps", "data-sections",
    "delete-null-pointer-checks", "diagnostics-color", "exceptions", "expensive-optimizations", "fast-math",
    "finite-math-only", "freestanding", "function-sections", "gcse", "hosted", "ident", "inline",
    "inline-functions", "inline-functions-called-once", "inline-small-functions", "ipa-cp-clone", "ipa-pta",
    "ipa-ra", "ivopts", "jump-tables", "lax-vector-conversions", "loop-interchange", "loop-unroll-and-jam",
    "math-errno", "merge-constants", "modulo-sched", "move-loop-invariants", "omit-frame-pointer",
    "optimize-sibling-calls", "pack-struct", "peel-loops", "peephole2", "pic", "PIC", "pie", "PIE", "plt",
    "predictive-commoning", "prefetch-loop-arrays", "reciprocal-math", "rename-registers", "reorder-blocks",
    "rounding-math", "sched-pressure", "schedule-insns", "schedule-insns2", "short-enums", "short-wchar",
    "signed-char", "signed-zeros", "single-precision-constant", "slp-vectorize", "split-loops", "split-paths",
    "stack-protector", "stack-protector-all", "stack-protector-strong", "strict-aliasing", "strict-overflow",
    "strict-volatile-bitfields", "thread-jumps", "trapping-math", "trapv", "tree-loop-distribute-patterns",
    "tree-loop-distribution", "tree-loop-ivcanon", "tree-loop-vectorize", "tree-pre", "tree-slp-vectorize", "tree-vectorize",
    "unroll-all-loops", "unroll-loops", "unsafe-math-optimizations", "unsigned-char", "vectorize",
    "version-loops-for-strides", "web", "wrapv", "zero-initialized-in-bss",
})
# -f options with a value, and the values each takes.
_NUMBER = r"[0-9]{1,6}"
F_VALUES = {
    "align-functions": rf"{_NUMBER}(:{_NUMBER}){{0,3}}", "align-jumps": rf"{_NUMBER}(:{_NUMBER}){{0,3}}",
    "align-labels": rf"{_NUMBER}(:{_NUMBER}){{0,3}}", "align-loops": rf"{_NUMBER}(:{_NUMBER}){{0,3}}",
    "denormal-fp-math": r"ieee|preserve-sign|positive-zero", "diagnostics-color": r"always|never|auto",
    "excess-precision": r"fast|standard|16", "fp-contract": r"off|on|fast|fast-honor-pragmas",
    "fp-model": r"precise|strict|fast", "inline-limit": _NUMBER, "max-errors": _NUMBER,
    "simd-cost-model": r"unlimited|dynamic|cheap|very-cheap",
    "tls-model": r"global-dynamic|local-dynamic|initial-exec|local-exec",
    "trivial-auto-var-init": r"uninitialized|pattern|zero", "vect-cost-model": r"unlimited|dynamic|cheap|very-cheap",
    "visibility": r"default|hidden|protected|internal",
}
# Options after -mllvm (Clang passes them to LLVM): loop transformation knobs only.
MLLVM_OPTIONS = {"force-vector-width": _NUMBER, "force-vector-interleave": _NUMBER, "unroll-threshold": _NUMBER,
                 "unroll-count": _NUMBER, "enable-loopinterchange": None, "enable-loop-flatten": None,
                 "enable-unroll-and-jam": None, "enable-interleaved-mem-accesses": None}
# -Wl, passthroughs: section garbage collection, relaxation and warnings; no scripts, maps or plugins.
WL_OPTIONS = frozenset({"--gc-sections", "--no-gc-sections", "--relax", "--no-relax", "--no-warn-rwx-segments",
                        "--no-warn-mismatch", "--as-needed", "--no-as-needed", "--build-id=none", "--sort-common",
                        "--sort-section=alignment", "--sort-section=name", "--no-undefined", "-O1", "-z,noexecstack"})
# Spec files of the Arm GNU toolchain (newlib-nano, no semihosting syscalls), found in its own folders.
SPECS = frozenset({"nano.specs", "nosys.specs"})
# Driver switches of the link step: which start files and libraries, static or not.
DRIVER_SWITCHES = frozenset({"-static", "-no-pie", "-nostdlib", "-nostartfiles", "-nodefaultlibs", "-nolibc",
                             "-static-libgcc", "-pedantic", "-pedantic-errors", "-w", "-ansi"})
STANDARDS = frozenset({"c89", "c90", "c99", "c11", "c17", "c18", "c2x", "c23",
                       "gnu89", "gnu90", "gnu99", "gnu11", "gnu17", "gnu18", "gnu2x", "gnu23"})

OPT_RE = re.compile(r"-O([0-3sgz]|fast)?")
DEBUG_RE = re.compile(r"-g[0-3]?|-gdwarf(-[2-5])?")
M_RE = re.compile(r"-m(?!llvm)[a-z0-9][a-z0-9_.+-]*(=[A-Za-z0-9_.+,:-]+)?")
W_RE = re.compile(r"-W(no-)?(error=)?[a-z0-9][a-z0-9+-]*(=[a-z0-9_-]+)?")
F_RE = re.compile(r"-f(no-)?([A-Za-z0-9][A-Za-z0-9-]*)(=(.*))?")
# Macros from a target file may configure code, never rename a C library function: upper case.
MACRO_RE = re.compile(r"-[DU][A-Z_][A-Z0-9_]*(=[A-Za-z0-9_.+-]*)?")
PARAM_RE = re.compile(r"[a-z][a-z0-9-]{0,63}=[A-Za-z0-9_-]{1,32}")
TARGET_RE = re.compile(r"--target=[a-z0-9_.-]{1,64}")
LIB_RE = re.compile(r"-l:?[A-Za-z0-9_+.-]{1,64}")
# A folder in a flag (--sysroot=, -L) must be one of the system's toolchain folders: headers
# and libraries are read from there, never from a folder a user of the machine can write.
SYSTEM_PATH_RE = re.compile(r"/(usr|opt)(/[A-Za-z0-9_.+-]+)*/?")
MLLVM_RE = re.compile(r"-([a-z][a-z0-9-]*)(=(.*))?")
OBJDUMP_RE = re.compile(r"--architecture=[a-z0-9_.:+-]{1,64}|-m[a-z0-9_.:+-]{1,64}"
                        r"|--disassembler-options=[a-z0-9_.,=+-]{1,128}|-M[a-z0-9_.,=+-]{1,128}"
                        r"|--no-show-raw-insn|--wide|-w|--no-addresses|--disassemble-zeroes|-z")

COMPILER_SHAPES = ("-O<level>, -f[no-]<code-generation option>, -m<target option>, -W<warning>, "
                   "-D/-U<UPPER_CASE>[=value], --param <name>=<value>, -mllvm <loop option>, -std=, -g, "
                   "--target=, --sysroot=/usr|/opt/..., -l<lib>, -L/usr|/opt/..., link switches; see docs/targets.md")
# Flags that take the next list element as their value.
PAIRED = ("-mllvm", "--param")


def _system_path(path: str) -> bool:
    return bool(SYSTEM_PATH_RE.fullmatch(path)) and ".." not in path.split("/")


def _f_problem(flag: str) -> str | None:
    match = F_RE.fullmatch(flag)
    if match:
        negated, name, value = match.group(1), match.group(2), match.group(4)
        if value is None and name in F_SWITCHES:
            return None
        if value is not None and not negated and name in F_VALUES and re.fullmatch(F_VALUES[name], value):
            return None
    return (f"{flag!r} is not an allowed compiler flag (-f options allowed: code generation and optimisation "
            "ones that write no file and load nothing, listed in docs/targets.md)")


def _paired_problem(option: str, value) -> str | None:
    """The value after -mllvm or --param."""
    if not isinstance(value, str):
        return f"{option} needs a value after it"
    if option == "--param":
        return None if PARAM_RE.fullmatch(value) else f"{value!r} is not an allowed --param (NAME=VALUE)"
    match = MLLVM_RE.fullmatch(value)
    if match and match.group(1) in MLLVM_OPTIONS:
        shape = MLLVM_OPTIONS[match.group(1)]
        if (shape is None) == (match.group(3) is None) and (shape is None or re.fullmatch(shape, match.group(3))):
            return None
    return (f"{value!r} is not an allowed -mllvm option (allowed: "
            f"{', '.join('-' + name + ('=N' if shape else '') for name, shape in MLLVM_OPTIONS.items())})")


def flag_problem(flag) -> str | None:
    """Why one flag may not reach a compiler driver's argument list (compiling or linking),
    or None when it may. -mllvm and --param take the next flag as their value: check a whole
    list with `flags_problem`."""
    if not isinstance(flag, str) or not flag.isascii() or not flag.isprintable() or not flag.startswith("-"):
        return f"{flag!r} is not an allowed compiler flag (one option, plain characters, starting with -)"
    if flag in DRIVER_SWITCHES or flag in PAIRED or OPT_RE.fullmatch(flag) or DEBUG_RE.fullmatch(flag) \
            or M_RE.fullmatch(flag) or W_RE.fullmatch(flag) or TARGET_RE.fullmatch(flag) or LIB_RE.fullmatch(flag):
        return None
    if flag.startswith("-f"):
        return _f_problem(flag)
    if flag[1:2] in ("D", "U"):
        return None if MACRO_RE.fullmatch(flag) else \
            f"{flag!r} is not an allowed compiler flag (macros from a target file are UPPER_CASE names with plain values)"
    if flag.startswith("-std="):
        return None if flag[5:] in STANDARDS else f"{flag!r} is not an allowed compiler flag (unknown C standard)"
    if flag.startswith("-Wl,"):
        return None if flag[4:] in WL_OPTIONS else \
            f"{flag!r} is not an allowed compiler flag (linker options allowed: {', '.join(sorted(WL_OPTIONS))})"
    if flag.startswith("--param="):
        return None if PARAM_RE.fullmatch(flag[8:]) else f"{flag!r} is not an allowed compiler flag (--param=NAME=VALUE)"
    if flag.startswith("--specs="):
        return None if flag[8:] in SPECS else \
            f"{flag!r} is not an allowed compiler flag (spec files allowed: {', '.join(sorted(SPECS))})"
    for prefix in ("--sysroot=", "-L"):
        if flag.startswith(prefix):
            return None if _system_path(flag[len(prefix):]) else \
                f"{flag!r} is not an allowed compiler flag (toolchain folders must lie under /usr or /opt)"
    return f"{flag!r} is not an allowed compiler flag (allowed: {COMPILER_SHAPES})"


def flags_problem(flags, check=flag_problem) -> tuple[int, str] | None:
    """(index, why) of the first flag of a list that may not pass, or None. -mllvm and
    --param consume the next element as their value."""
    if not isinstance(flags, (list, tuple)):
        return 0, "expected a list of flags"
    i = 0
    while i < len(flags):
        problem = check(flags[i])
        if problem:
            return i, problem
        if check is flag_problem and flags[i] in PAIRED:
            problem = _paired_problem(flags[i], flags[i + 1] if i + 1 < len(flags) else None)
            if problem:
                return min(i + 1, len(flags) - 1), problem
            i += 1
        i += 1
    return None


def lib_problem(flag) -> str | None:
    """A library the link step adds: -l<name> only."""
    if isinstance(flag, str) and LIB_RE.fullmatch(flag):
        return None
    return f"{flag!r} is not an allowed library (-l<name>)"


def objdump_flag_problem(flag) -> str | None:
    """A flag for objdump: which architecture and disassembler options, how wide the lines."""
    if isinstance(flag, str) and OBJDUMP_RE.fullmatch(flag):
        return None
    return (f"{flag!r} is not an allowed objdump flag (allowed: --architecture=, -m, --disassembler-options=, -M, "
            "--no-show-raw-insn, --wide, --no-addresses, --disassemble-zeroes)")
