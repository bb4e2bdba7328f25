"""The compiler's options as tunable parameters (the table: edgetune.hal.compiler_options).

A target whose file names option parameters (`compiler_options = ["cc_unroll", ...]`) gets
them in every kernel's tuning space, after the kernel's own parameters and placement. Each
value stands for a few flags of GCC or of Clang; a constraint ties it to the configuration's
compiler, offering a value only when the compiler's family has it and the compiler accepted
its flags when probed (edgetune.targets.option_probe fills `Compiler.accepted_options`).
Every parameter's default is "default" (no flag): configurations stored before a target
tuned options keep meaning what they measured.

The legal points are computed, not enumerated: the options depend only on the compiler, so
the legal points are every legal point of the kernel's space times the legal option values
of its compiler (a space of 28,752 points and 16 option combinations would otherwise be
460,000 constraint checks over a Cartesian product 25 times larger).
"""
from __future__ import annotations

import itertools
from typing import Mapping

import numpy as np

from edgetune.hal import Target
from edgetune.hal.compiler_options import DEFAULT, OPTION_PARAMS, expand_names, family_of, option_param
from edgetune.tuner import Config, Constraint, Space, choice


def option_params_of(target: Target) -> tuple:
    """The table's parameters a target tunes, in table order."""
    return tuple(option_param(name) for name in expand_names(target.compiler_options))


def offered(target: Target, compiler_name: str, param, value_name: str, float_outputs: bool = False) -> bool:
    """Whether a value may be chosen with a compiler: its family has it, the compiler
    accepted every flag of it when probed (no flag: always), and it keeps a kernel with
    float outputs exact."""
    compiler = target.compiler(compiler_name)
    value = param.value(value_name)
    flags = value.flags(family_of(compiler.command) or "")
    if flags is None or (float_outputs and value.reorders_float):
        return False
    return not flags or flags in compiler.accepted_options


def option_cflags(target: Target, config: Config | Mapping) -> tuple[str, ...]:
    """The flags a configuration's option values stand for with its compiler (none for a
    configuration without option parameters)."""
    values = config.as_dict() if isinstance(config, Config) else dict(config)
    compiler = target.compiler(str(values.get("compiler", target.compilers[0].name)))
    family = family_of(compiler.command) or ""
    flags: list[str] = []
    for param in OPTION_PARAMS:
        chosen = values.get(param.name, DEFAULT)
        picked = param.value(str(chosen)).flags(family)
        if picked is None:
            raise KeyError(f"{param.name}={chosen} has no flags for {compiler.name}")
        flags.extend(picked)
    return tuple(flags)


def _legal_combinations(target: Target, params: tuple, compiler_name: str, float_outputs: bool) -> np.ndarray:
    """Mixed-radix indices of the option values a compiler may take together."""
    radix = [len(p.values) for p in params]
    legal = []
    for digits in itertools.product(*(range(r) for r in radix)):
        if all(offered(target, compiler_name, p, p.values[d].name, float_outputs) for p, d in zip(params, digits)):
            legal.append(int(np.ravel_multi_index(digits, radix)))
    return np.asarray(legal, dtype=np.int64)


def with_compiler_options(space: Space, target: Target, float_outputs: bool) -> Space:
    """`space` plus the option parameters the target tunes (the same space without any);
    `float_outputs`: the kernel computes floats (values that reorder them are left out)."""
    params = option_params_of(target)
    if not params:
        return space
    names = [c.name for c in target.compilers]
    new = [choice(p.name, [v.name for v in p.values], f"compiler options: {p.doc}", ordered=False, default=DEFAULT)
           for p in params]

    def accepted(c: Mapping) -> bool:
        compiler = str(c.get("compiler", names[0]))
        return all(offered(target, compiler, p, str(c.get(p.name, DEFAULT)), float_outputs) for p in params)

    constraint = Constraint("a compiler option value its compiler does not offer or refused when probed", accepted,
                            reads=(*(["compiler"] if "compiler" in space.names else []), *(p.name for p in new)))
    combos = {name: _legal_combinations(target, params, name, float_outputs) for name in names}
    width = int(np.prod([len(p.values) for p in params]))
    base = space.legal_indices()
    if "compiler" in space.names:
        axis = space.names.index("compiler")
        values = space.param("compiler").values
        compilers = space.legal_digits()[:, axis] if len(base) else np.zeros(0, np.int64)
        parts = [(base[compilers == i][:, None] * width + combos[str(v)][None, :]).ravel()
                 for i, v in enumerate(values) if str(v) in combos]
    else:
        parts = [(base[:, None] * width + combos[names[0]][None, :]).ravel()]
    legal = np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
    return Space([*space.params, *new], [*space.constraints, constraint], legal=legal)
