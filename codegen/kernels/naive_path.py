"""The plain loop nest as a path of a kernel (issue 29, goal 2): `vector=naive` renders the
kernel's naive template (the loop nest a programmer writes first, what `model tune` and the
benchmarks compare tuned variants against: render_naive) as one more point of the tuning
space. So it is measured like any variant, stored as a trial, and exported when it is the
fastest a layer has: a tuned layer never ships slower than its own plain loop. The path
has none of the kernel's knobs: each is held at its first value (the compiler, its
optimisation level and the buffers' placement stay free)."""
from __future__ import annotations

from typing import Mapping

from .paths import Rule, VectorPath, anywhere

NAIVE = "naive"


def naive_path(template: str, firsts: Mapping[str, object]) -> VectorPath:
    """The `naive` path of a kernel rendering `template`; `firsts`: each of the kernel's own
    parameters (tiles, layouts, algorithms) and the one value the loop nest stands for."""
    held = dict(firsts)
    reason = f"vector={NAIVE} is the plain loop nest: {', '.join(f'{k}={v}' for k, v in held.items())}"

    def rules(target, shape) -> list[Rule]:
        return [(reason, lambda c: all(c[name] == value for name, value in held.items()), tuple(held))]

    return VectorPath(NAIVE, anywhere, template, rules)
