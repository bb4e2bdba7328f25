"""Compile a kernel of the user's own once before searching.

A definition that cannot compile at all (a function name that is not the C function's, a
typo in the source, a parameter the C does not use as the C expects) would otherwise fail
every trial of the budget as a compile error and end with exit 0. Two configurations are
compiled before the first trial: the space's first and last legal ones (far apart, and on
the first and last compilers the space offers). When both fail, the definition is at fault
and the kernel is refused in one line naming the compiler's first error; when only one
fails, the failure may be that configuration's, and the search goes on (its trials fail as
compile errors, each with its first error).

The objects land in the build cache, so the trials of those configurations reuse them.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Mapping

from edgetune.codegen.kernels import Kernel, KernelError
from edgetune.codegen.kernels.user import UserKernel
from edgetune.hal import Target
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import MeasureError


def check_compiles(kernel: Kernel, target: Target, shape: Mapping[str, int], compilers: tuple[str, ...] = ()) -> None:
    """Refuse (KernelError) a kernel of the user's own whose first and last legal
    configurations (built by `compilers`, when given) both fail to compile; shipped kernels
    are compiled by their own tests."""
    if not isinstance(kernel, UserKernel):
        return
    space = kernel.tuning_space(target, dict(shape))
    legal = [i for i in space.legal_indices() if not compilers or space.config_at(int(i))["compiler"] in compilers]
    if not legal:
        return  # check_fits says why
    problems = []
    for index in dict.fromkeys((int(legal[0]), int(legal[-1]))):
        config = space.config_at(index)
        problem = compile_problem(kernel, target, shape, config)
        if problem is None:
            return
        problems.append((config, problem))
    problem = problems[0][1]
    raise KernelError(f"kernel {kernel.name}: its source does not compile on {target.name} "
                      f"(tried {' and '.join(c.key() for c, _ in problems)}): {problem}")


def compile_problem(kernel: Kernel, target: Target, shape: Mapping[str, int], config) -> str | None:
    """The compiler's first error for one configuration, or None when it compiles."""
    runner = runner_for(target)
    with tempfile.TemporaryDirectory(prefix="edgetune-check-") as tmp:
        try:
            runner.compile_object(kernel.render(target, dict(shape), config), Path(tmp))
        except MeasureError as exc:
            return str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None
