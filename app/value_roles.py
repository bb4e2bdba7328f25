"""The value roles of a stored workload's target, for transfer searches.

A transfer search (edgetune.tuner.strategies.transfer) learns from the same kernel's
trials on other workloads. Where those ran on another target, some values mean something
else there (a memory region's name, plain C compiled for another vector unit), so they are
mapped by their roles instead (edgetune.codegen.roles). Workloads
store their target's name only: its roles come from the shipped target of that name, or
from the target being tuned when it is the same; a target known by neither (a user's own
target file, tuned another day) gives no roles, and its values carry over by name as they
always did.
"""
from __future__ import annotations

from edgetune.codegen.roles import value_roles
from edgetune.hal import Target
from edgetune.targets.catalog import shipped_target
from edgetune.tuner import ValueRoles


def target_roles(name: str, here: Target | None = None) -> ValueRoles:
    """The value roles of the target called `name` (`here` when it has that name)."""
    target = here if here is not None and here.name == name else shipped_target(name)
    return value_roles(target) if target is not None else ValueRoles()
