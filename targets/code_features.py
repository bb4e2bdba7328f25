"""Static features of a compiled variant, read from the disassembly of its kernel object:
what a ranker can know about a configuration after compiling it and before running it.

Compiling is cached and cheap beside a board's flash-and-run, so a search can compile a
candidate, look at its code and skip it if it looks like a sure loser (docs/search-priors.md,
"Ranking by compiled code"). The features are counts:
- `code_bytes`, `instructions`: the object's whole code;
- `loops`, `loop_depth`: loops found from backward branches (a branch, or an Armv8.1-M
  low-overhead loop end LE/LETP, whose target lies before it in the same section), and how
  deeply they nest;
- `hot_<class>` for every instruction class of edgetune.hal.cost.INSTRUCTION_CLASSES, and
  `hot_instructions`: the instructions inside innermost loops (loops holding no other
  loop), where a kernel spends nearly all of its instructions, sorted by targets/mix.py's
  classifier (vector MAC, vector and scalar loads/stores, branches, scalar ALU, ...);
- `mac_loop_<class>`, `mac_loop_instructions`, `mac_loops`: the same counts over only the
  innermost loops holding a multiply (scalar or vector), and `copy_loop_instructions`, the
  instructions of the innermost loops holding none. Static counts know no trip counts: an
  im2col copy loop that runs once per pixel weighs as much in `hot_*` as the MAC loop that
  runs once per multiply; these tell the two apart (docs/search-priors.md).
- `multiplies`, `hot_multiplies`, `mac_loop_multiplies`: the products those instructions
  compute (targets.mix.multiplies: 16 for an MVE vmladav.s8, 2 for an smlad, 1 for a mul),
  in the whole code, the innermost loops and the multiplying ones. A kernel's products are
  fixed by its shape, so instructions per product in the multiplying loops estimates the
  run's cost without trip counts (edgetune.tuner.product_rank).
A call into another function is not followed: the innermost loops of the object's own code
are what is counted.
- `profile_instructions`, `profile_loops_unknown` (T32 code only): the instructions one call
  of the entry point runs, estimated from the code with its loops' trip counts worked out
  (edgetune.targets.static_profile), and how many loops' counts were not (guessed).
"""
from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import edgetune.hal
from edgetune.codegen import Kernel
from edgetune.errors import EdgetuneError
from edgetune.hal import INSTRUCTION_CLASSES, CostModel
from edgetune.tuner import Config, Outcome

from . import elf
from .build import Runner
from .buildcache import ArtifactStore, content_key
from .control_flow import target_address
from .mix import Instruction, classify_a64, classify_thumb, multiplies
from .static_profile import Relocations, estimate, read_relocations
from .toolchain import run_tool

FEATURE_NAMES = ("code_bytes", "instructions", "loops", "loop_depth", "hot_instructions",
                 *(f"hot_{name}" for name in INSTRUCTION_CLASSES),
                 "mac_loops", "mac_loop_instructions", *(f"mac_loop_{name}" for name in INSTRUCTION_CLASSES),
                 "copy_loop_instructions", "multiplies", "hot_multiplies", "mac_loop_multiplies")
# The static profile's estimate (T32 only), kept apart from the counts a learnt ranker reads.
PROFILE_FEATURES = ("profile_instructions", "profile_loops_unknown")
# Classes that mark an innermost loop as the arithmetic one: the loop that runs once per
# multiply-accumulate, where a kernel spends its time; an innermost loop without them (an
# im2col copy, a bias fill) runs once per pixel or per channel, far fewer times.
_MULTIPLY_CLASSES = frozenset({"mul", "mac", "vec_mac"})
_A64_BRANCHES = ("b", "bl", "cbz", "cbnz", "tbz", "tbnz")
_THUMB_LOOP_ENDS = ("le", "letp")


class CodeFeaturesError(EdgetuneError, ValueError):
    """Features asked of a target that names no disassembler."""


@dataclass(frozen=True)
class Located:
    section: str
    address: int
    insn: Instruction


def parse_listing(text: str) -> list[Located]:
    """Every instruction of an objdump -d listing, in listing order, with its section."""
    found: list[Located] = []
    section = ""
    for line in text.splitlines():
        if line.startswith("Disassembly of section "):
            section = line.removeprefix("Disassembly of section ").rstrip(":")
            continue
        fields = line.split("\t")
        if len(fields) < 3 or not fields[0].strip().endswith(":"):
            continue
        try:
            address = int(fields[0].strip()[:-1], 16)
        except ValueError:
            continue
        raw = fields[1].replace(" ", "")
        if not raw or any(c not in "0123456789abcdef" for c in raw):
            continue
        operands = fields[3].strip() if len(fields) > 3 else ""
        found.append(Located(section, address, Instruction(len(raw) // 2, fields[2].strip().lower(), operands)))
    return found


def branch_target(insn: Instruction, a64: bool) -> int | None:
    """Where a direct branch (or loop end) goes, as objdump prints it; None for anything else."""
    base = insn.mnemonic.split(".")[0]
    if a64:
        is_branch = insn.mnemonic.startswith("b.") or base in _A64_BRANCHES
    else:
        is_branch = classify_thumb(insn) == "branch" or base in _THUMB_LOOP_ENDS
    return target_address(insn) if is_branch else None


def find_loops(listing: list[Located], a64: bool) -> list[tuple[str, int, int]]:
    """(section, header address, address of its last backward branch) of every loop: the
    back edges to one header (a loop's `continue` paths) make one loop, as in a natural loop."""
    last: dict[tuple[str, int], int] = {}
    for item in listing:
        target = branch_target(item.insn, a64)
        if target is not None and target <= item.address and not item.insn.mnemonic.startswith("bl"):
            key = (item.section, target)
            last[key] = max(last.get(key, item.address), item.address)
    return sorted((section, header, end) for (section, header), end in last.items())


def _contains(outer: tuple[str, int, int], inner: tuple[str, int, int]) -> bool:
    return outer != inner and outer[0] == inner[0] and outer[1] <= inner[1] and inner[2] <= outer[2]


def listing_features(listing: list[Located], a64: bool, entry: str | None = None,
                     relocations: Relocations | None = None) -> dict[str, float]:
    """The features of the module docstring from a parsed listing; `entry`: the function a
    run calls, `relocations`: the listing's (static_profile.read_relocations: calls, loaded
    addresses), for the profile."""
    classify = classify_a64 if a64 else classify_thumb
    loops = find_loops(listing, a64)
    innermost = [loop for loop in loops if not any(_contains(loop, other) for other in loops)]
    depth = max((1 + sum(_contains(other, loop) for other in loops) for loop in loops), default=0)
    features = dict.fromkeys(FEATURE_NAMES, 0)
    features.update(code_bytes=sum(item.insn.size for item in listing), instructions=len(listing),
                    loops=len(loops), loop_depth=depth)
    for item in listing:
        products = multiplies(item.insn, a64)
        features["multiplies"] += products
        if any(_inside(item, loop) for loop in innermost):
            features["hot_instructions"] += 1
            features[f"hot_{classify(item.insn)}"] += 1
            features["hot_multiplies"] += products
    for loop in innermost:
        inside = [item.insn for item in listing if _inside(item, loop)]
        held = [classify(insn) for insn in inside]
        multiplying = bool(_MULTIPLY_CLASSES.intersection(held))
        features["mac_loops"] += multiplying
        features["mac_loop_instructions" if multiplying else "copy_loop_instructions"] += len(held)
        if multiplying:
            features["mac_loop_multiplies"] += sum(multiplies(insn, a64) for insn in inside)
            for name in held:
                features[f"mac_loop_{name}"] += 1
    if not a64:
        features.update(_profile_features(listing, entry, relocations))
    return features


def _profile_features(listing: list[Located], entry: str | None, relocations: Relocations | None) -> dict[str, float]:
    functions: dict[str, tuple[list[int], list[Instruction]]] = {}
    for item in listing:
        addresses, instructions = functions.setdefault(item.section.removeprefix(".text."), ([], []))
        addresses.append(item.address)
        instructions.append(item.insn)
    found = estimate(functions, relocations, entry)
    return {"profile_instructions": round(found.instructions, 1), "profile_loops_unknown": found.loops_unknown}


def _inside(item: Located, loop: tuple[str, int, int]) -> bool:
    section, first, last = loop
    return item.section == section and first <= item.address <= last


@dataclass(frozen=True)
class Disassembly:
    """An object's disassembly as the target's disassembler printed it (with relocations),
    whether it is A64 code, and the function a run calls: everything its features are read
    from (read_features), a string and two small values, so the reading can go to another
    process (edgetune.live_rank reads side by side)."""
    text: str
    a64: bool
    entry: str | None = None


def disassemble(cost: CostModel, obj: Path, entry: str | None = None) -> Disassembly:
    """Disassemble a compiled object with the target's disassembler, with its relocations
    (which name the functions calls go to); `entry`: the function a run calls."""
    proc = run_tool([cost.disassembler, "-d", "-r", *cost.disassembler_flags, obj.name], cwd=obj.parent,
                    outcome=Outcome.RUNTIME_ERROR)
    return Disassembly(proc.stdout, elf.is_aarch64(obj), entry)


def read_features(code: Disassembly) -> dict[str, float]:
    """The features of a disassembly (its static profile is most of the time: about 0.05-1 s
    a variant, against a compile's 0.1 s)."""
    return listing_features(parse_listing(code.text), code.a64, code.entry, read_relocations(code.text))


_READS = ArtifactStore("features")


def cached_read(code: Disassembly, read: Callable[[Disassembly], dict] = read_features) -> dict[str, float]:
    """`read(code)` (read_features, or the same read done elsewhere: edgetune.read_pool)
    through the cache folder, under the disassembly's text and the reading code's own
    digest: a search resumed, run again with a larger budget or by another process on the
    same cache reads each candidate's code once (a read costs up to a second; the compile
    it follows is cached already)."""
    key = content_key("features", reader_digest(), code.text, str(code.a64), code.entry or "")
    meta, _ = _READS.get_or_build(key, Path(tempfile.gettempdir()), lambda: ([], {"features": read(code)}))
    return meta["features"]


@functools.lru_cache(maxsize=None)
def reader_digest() -> str:
    """Hash of every module of this package and of edgetune.hal (the instruction classes):
    a change to the reading makes every cached read stale."""
    folders = (Path(__file__).resolve().parent, Path(edgetune.hal.__file__).resolve().parent)
    return content_key(*(part for folder in folders for path in sorted(folder.glob("*.py"))
                         for part in (path.name, path.read_bytes())))


def object_features(cost: CostModel, obj: Path, entry: str | None = None) -> dict[str, float]:
    """Disassemble a compiled object with the target's disassembler (with its relocations,
    which name the functions calls go to) and count its features; `entry`: the function a
    run calls. Whether it is A64 code the object says (disassemble)."""
    return read_features(disassemble(cost, obj, entry))


def variant_disassembly(runner: Runner, kernel: Kernel, shape: dict, config: Config, workdir: Path,
                        fn: str | None = None) -> Disassembly:
    """Compile one configuration (through the build cache: a variant measured before is not
    compiled again) and disassemble its object; `fn`: its entry point's name (a batched
    image's, targets.batch.member_function, so that the run finds the object cached).
    CodegenError or MeasureError when it does not render or compile."""
    target = runner.target
    if target.cost is None:
        raise CodeFeaturesError(f"target {target.name} has no [cost] table naming its disassembler")
    rendered = kernel.render(target, shape, config, fn=fn)
    obj, _, _ = runner.compile_object(rendered, workdir)
    return disassemble(target.cost, obj, rendered.function)


def variant_features(runner: Runner, kernel: Kernel, shape: dict, config: Config, workdir: Path,
                     fn: str | None = None) -> dict[str, int]:
    """variant_disassembly's features (read_features)."""
    return read_features(variant_disassembly(runner, kernel, shape, config, workdir, fn))
