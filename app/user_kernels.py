"""Kernels of the user's own in the command line: those `--kernel-file PATH` names
(edgetune.cli.options), and the kernels installed packages declare (codegen/kernels/user_loader.py)."""
from __future__ import annotations

import warnings
from typing import Callable

from edgetune.tuner import TuningDatabase, Workload

from edgetune.codegen.kernels import KernelError, register_kernel
from edgetune.codegen.kernels.user import UnknownUnitWarning
from edgetune.codegen.kernels.user_loader import installed_kernels, load_kernel_file

_installed_loaded = False


def load_installed() -> list[str]:
    """Register every installed kernel (once per process); the problems of those that do
    not load, one line each (a broken package must not stop unrelated commands)."""
    global _installed_loaded
    if _installed_loaded:
        return []
    _installed_loaded = True
    kernels, problems = installed_kernels()
    for kernel in kernels:
        try:
            register_kernel(kernel)
        except KernelError as exc:
            problems.append(str(exc))
    return problems


def show_kernel_warnings(echo: Callable[[str], None]) -> None:
    """Show Python's warnings about kernels of the user's own (UnknownUnitWarning) through
    `echo`, the command line's warning line; every other warning as Python would."""
    shown = warnings.showwarning
    if getattr(shown, "kernel_warnings", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UnknownUnitWarning):
            echo(str(message))
        else:
            shown(message, category, filename, lineno, file, line)

    show.kernel_warnings = True
    warnings.showwarning = show


def register_files(paths) -> tuple[str, ...]:
    """Load and register the kernels of these folders or .py files; their names."""
    return tuple(register_kernel(load_kernel_file(path)).name for path in paths)


def only_kernel(names: tuple[str, ...], from_export: str | None = None) -> str | None:
    """The kernel meant when KERNEL is omitted: the one --kernel-file named."""
    if from_export or not names:
        return None
    if len(names) > 1:
        raise KernelError(f"--kernel-file named {len(names)} kernels ({', '.join(names)}): give KERNEL")
    return names[0]


def first_failure(db: TuningDatabase, workload: Workload) -> str | None:
    """The first failed trial of a workload, in one line: its outcome, its configuration
    and the first line of its error that says `error` (a compiler's first error), or its first."""
    for trial in db.trials(workload):
        if trial.outcome.failed:
            lines = [line.strip() for line in trial.error.splitlines() if line.strip()]
            first = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")
            return f"first failure ({trial.outcome.value}) at {trial.config.key()}: {first}"
    return None
