"""What the values of target-specific parameters stand for on any target (their roles), so
that a transfer search can learn from trials measured on another target
(edgetune.tuner.ValueRoles; the tuner knows no targets, so they come from here).

- `weights_in`, `activations_in` (codegen/placement.py) name memory regions, whose names
  differ from board to board: each region stands for its rank among the target's placement
  regions, nearest first (Target.placement_roles). The Cortex-M55's `dtcm` and the
  Cortex-M4's `ssram23` are both `near0`, `sram2` and `psram` both `near1`; a region whose
  rank the other target lacks has no counterpart.
- `vector` names a code path. An intrinsics path (`dsp`, `mve`, `neon`, `avx2`, ...) is the
  same C wherever it is offered, so it keeps its name, and a path the other target does not
  offer (`mve` on the M4) has no counterpart. Plain C (`c`) is the compiler's choice: on a
  target with a vector unit the compiler vectorises it for that unit (Helium on the M55), on
  one without it stays scalar, so it is a different program. Its role names the units it is
  compiled for (`c+mve` on the M55, `c` on the M4): plain-C trials carry over between
  targets with the same vector units only. Measured on our recorded conv2d_s8 spaces,
  mapping `c` to `c` between the M55 and the M4 made transfer worse than no prior at all
  (docs/search-priors.md).

Every other parameter (tiles, unrolling, layouts, compilers, optimisation levels) means the
same on every target and carries over by value.
"""
from __future__ import annotations

from edgetune.hal import Target
from edgetune.tuner import ValueRoles

from .placement import PLACEMENT_PARAMS

VECTOR_PARAM = "vector"
PLAIN_C = "c"


def value_roles(target: Target) -> ValueRoles:
    """The roles of `target`'s placement regions and of its plain-C path."""
    regions = dict(target.placement_roles)
    roles: dict[str, dict] = {name: regions for name in PLACEMENT_PARAMS} if regions else {}
    roles[VECTOR_PARAM] = {PLAIN_C: plain_c_role(target)}
    return ValueRoles.of(roles)


def plain_c_role(target: Target) -> str:
    """`c` plus the vector units the compiler may vectorise plain C for."""
    return "+".join([PLAIN_C, *sorted(unit.name for unit in target.vector_units)])
