"""A vector path as one declared unit: where it is offered, what it allows, how it renders.

A kernel lists its paths in one table (`Kernel.paths`). Everything that used to branch on
`config["vector"]` is a loop over that table: the `vector` parameter's values are the paths a
target offers, each path's constraints apply to its own configurations only, the template,
the compiler flags and the extra template variables come from the configuration's path, and
the build's flag allow-list is the union of every path's flags (`path_cflags`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from edgetune.hal import Target
from edgetune.tuner import Config, Constraint

Shape = Mapping[str, int]
# A rule of a path: the reason shown when a configuration breaks it, and a predicate that
# is only ever asked about configurations of that path (no `c["vector"] != X or ...`).
# (reason, predicate) or (reason, predicate, names of the parameters it reads): see Constraint.reads
Rule = tuple[str, Callable[[Mapping], bool]] | tuple[str, Callable[[Mapping], bool], tuple[str, ...]]


def anywhere(target: Target) -> bool:
    """Plain C: every target offers it."""
    return True


def with_vector(unit: str) -> Callable[[Target], bool]:
    """Offered when the HAL lists the vector unit `unit` (mve, neon, avx2, avx512, ...)."""
    def offered(target: Target) -> bool:
        return target.has_vector(unit)
    offered.__name__ = f"with_vector_{unit}"
    return offered


def with_extension(extension: str) -> Callable[[Target], bool]:
    """Offered when the HAL lists the core extension `extension` (dsp, ...)."""
    def offered(target: Target) -> bool:
        return target.has_extension(extension)
    offered.__name__ = f"with_extension_{extension}"
    return offered


def no_rules(target: Target, shape: Shape) -> list[Rule]:
    return []


def no_variables(target: Target, shape: Shape, config: Config) -> dict:
    return {}


@dataclass(frozen=True)
class VectorPath:
    """One value of a kernel's `vector` parameter.

    name: the value itself; offered: whether a target's HAL description offers it;
    rules: its constraints for a target and shape (asked only about its own configurations);
    template: the template its configurations render from, or a function of the
    configuration (a path whose layouts have their own template blocks); cflags: flags its
    code relies on (they also join the build's allow-list); variables: template variables
    it adds to the kernel's shared ones."""

    name: str
    offered: Callable[[Target], bool]
    template: str | Callable[[Config], str]
    rules: Callable[[Target, Shape], Sequence[Rule]] = no_rules
    cflags: tuple[str, ...] = ()
    variables: Callable[[Target, Shape, Config], dict] = no_variables

    def template_for(self, config: Config) -> str:
        return self.template if isinstance(self.template, str) else self.template(config)

    def constraints(self, target: Target, shape: Shape) -> list[Constraint]:
        """The path's rules as constraints of the whole space: other paths pass them. A rule
        naming the parameters it reads is decided as soon as they and `vector` are chosen."""
        return [Constraint(reason, lambda c, holds=holds, name=self.name: c["vector"] != name or holds(c),
                           reads=("vector", *reads[0]) if reads else None)
                for reason, holds, *reads in self.rules(target, shape)]


def offered_paths(paths: Sequence[VectorPath], target: Target) -> list[VectorPath]:
    """The paths of a table a target offers, in table order."""
    return [path for path in paths if path.offered(target)]


def path_constraints(paths: Sequence[VectorPath], target: Target, shape: Shape) -> list[Constraint]:
    """The constraints of every offered path, in table order."""
    return [constraint for path in offered_paths(paths, target) for constraint in path.constraints(target, shape)]


def path_named(paths: Sequence[VectorPath], name: str) -> VectorPath:
    for path in paths:
        if path.name == name:
            return path
    raise KeyError(f"no vector path {name!r} (paths: {', '.join(p.name for p in paths)})")
