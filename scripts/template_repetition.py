"""How much of each kernel family's templates repeats a sibling template.

A family is a kernel's templates: codegen/templates/<kernel>*.c.j2 and anything under
codegen/templates/<kernel>/ (fir_q15 and fir_f32 form the one family "fir"). A line counts
as repeated when it stands in a run of RUN or more consecutive lines identical, with
whitespace folded, to a run in another template of the same family. Shared partials
(codegen/templates/common/) belong to no family: including one is not repeating it.

    python scripts/template_repetition.py          # a table, per family
    python scripts/template_repetition.py --max 10 # and exit 1 if a family exceeds 10 %
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent.parent / "codegen" / "templates"
RUN = 6
FAMILIES = ("matmul_s8", "matmul_f32", "conv2d_s8", "dwconv2d_s8", "fir")


@dataclass(frozen=True)
class FamilyRepetition:
    family: str
    files: int
    lines: int
    repeated: int

    @property
    def percent(self) -> float:
        return 100.0 * self.repeated / self.lines if self.lines else 0.0


def family_files(family: str, root: Path = TEMPLATES) -> list[Path]:
    files = {*root.glob(f"{family}*.c.j2"), *(root / family).glob("**/*.j2")}
    return sorted(f for f in files if f.is_file())


def folded_lines(path: Path) -> list[str]:
    return [" ".join(line.split()) for line in path.read_text().splitlines()]


def windows(lines: list[str]) -> set[tuple[str, ...]]:
    return {tuple(lines[i:i + RUN]) for i in range(len(lines) - RUN + 1)}


def repeated_lines(lines: list[str], sibling_windows: set[tuple[str, ...]]) -> int:
    """Lines of `lines` inside some run of RUN lines that a sibling also has."""
    marked = [False] * len(lines)
    for i in range(len(lines) - RUN + 1):
        if tuple(lines[i:i + RUN]) in sibling_windows:
            marked[i:i + RUN] = [True] * RUN
    return sum(marked)


def measure(family: str, root: Path = TEMPLATES) -> FamilyRepetition:
    texts = {path: folded_lines(path) for path in family_files(family, root)}
    total = repeated = 0
    for path, lines in texts.items():
        siblings = set().union(*(windows(other) for p, other in texts.items() if p != path))
        total += len(lines)
        repeated += repeated_lines(lines, siblings)
    return FamilyRepetition(family, len(texts), total, repeated)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=float, help="fail when a family's repeated share exceeds this percentage")
    args = parser.parse_args()
    worst = 0.0
    for family in FAMILIES:
        result = measure(family)
        worst = max(worst, result.percent)
        print(f"{family:12} {result.files:3} files {result.lines:6} lines {result.repeated:6} repeated "
              f"{result.percent:5.1f} %")
    return 1 if args.max is not None and worst > args.max else 0


if __name__ == "__main__":
    sys.exit(main())
