"""The Python API: the same machine as the command line, with the same defaults.

    import edgetune
    summary = edgetune.tune("examples/kernels/vector_add", "n=256", target="host", budget=10)
    edgetune.export("out", target="host")
    results, env = edgetune.tune_kernel("vector_add", source, {"n": 256}, args, tune_params, answer=answer)

A kernel is named by a shipped or installed kernel's name, a kernel folder or .py file
(as `--kernel-file`), or a `KernelDef`. Errors in what you pass are `EdgetuneError`s with
the one line the command line prints.
"""
from __future__ import annotations

import hashlib
import inspect
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from edgetune.codegen.kernels import Kernel, KernelError, get_kernel, register_kernel
from edgetune.codegen.kernels import user
from edgetune.codegen.kernels.user import DTYPES
from edgetune.codegen.kernels.user_loader import kernel_from_def, load_kernel_file
from edgetune.hal import Target
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase, parse_bound
from edgetune.tuner.strategies import DEFAULT_STRATEGY

from . import __version__
from .export import ExportResult
from .identity import recompute_estimates
from .session import (TuneRequest, check_seed, TuneSummary, choose_objective, goal_of, parse_config, summarize,
                      tune as run_tune, workload_of)
from .user_kernels import load_installed
from .verify import VerifyReport, export_and_measure, manifest_target, verify_export

__all__ = ["tune", "best", "export", "verify", "tune_kernel", "register", "KernelDef", "Binding", "quantize_multiplier",
           "Input", "Output", "Weight",
           "Scalar", "Vector", "UnknownUnitWarning"]

# The definition's types, as the API's own: subclasses adding nothing, so that the reference
# page (docs/api.md, scripts/reference_pages.py) documents them where users import them from.
class KernelDef(user.KernelDef):
    __doc__ = user.KernelDef.__doc__


class Arg(user.Arg):
    __doc__ = user.Arg.__doc__


class Scalar(user.Scalar):
    __doc__ = user.Scalar.__doc__


class Vector(user.Vector):
    __doc__ = user.Vector.__doc__


UnknownUnitWarning = user.UnknownUnitWarning  # a vector path requiring a unit no known target has


class Binding(user.Binding):
    __doc__ = user.Binding.__doc__


def quantize_multiplier(real: float) -> tuple[int, int]:
    """A real multiplier M >= 0 as TFLite's fixed-point pair (q, shift), M = q * 2^(shift - 31)
    with q in [2^30, 2^31) (TFLite's QuantizeMultiplier): for an operator adapter's scalars."""
    from edgetune.model.arithmetic import quantize_multiplier as quantize

    try:
        return quantize(float(real))
    except ValueError as exc:
        raise KernelError(f"quantize_multiplier: {exc}") from None


def Input(name: str, dtype: str, shape: object, **options) -> Arg:  # noqa: N802 - reads as a declaration
    """A buffer the kernel reads: `Input("x", "int8", "n")`; options as `Arg`'s (low, high, fill, doc)."""
    return Arg(name, dtype, shape, "input", **options)


def Output(name: str, dtype: str, shape: object, **options) -> Arg:  # noqa: N802
    """A buffer the kernel writes, checked against the reference after every trial."""
    return Arg(name, dtype, shape, "output", **options)


def Weight(name: str, dtype: str, shape: object, **options) -> Arg:  # noqa: N802
    """A constant input (coefficients, weights): placed with the weights on targets that place buffers."""
    return Arg(name, dtype, shape, "weight", **options)


DEFAULT_TARGET = "cortex-m55"
DEFAULT_DB = "edgetune.db"


def register(kernel: str | Path | KernelDef | Kernel) -> Kernel:
    """The kernel meant by `kernel`, registered so export and verify find it by name: a
    shipped or installed kernel's name, a kernel folder or .py file, a KernelDef (its
    relative sources found in `base`, default the current folder) or a Kernel."""
    load_installed()
    if isinstance(kernel, Kernel):
        return register_kernel(kernel) if kernel.name not in _known() else get_kernel(kernel.name)
    if isinstance(kernel, KernelDef):
        folder = Path(kernel.base or ".").resolve()
        return _register_latest(kernel_from_def(kernel, f"KernelDef {kernel.name!r}", folder,
                                                extra=_fingerprint(kernel)))
    path = Path(kernel)
    if isinstance(kernel, Path) or path.is_dir() or path.suffix == ".py":
        return _register_latest(load_kernel_file(path))
    return get_kernel(str(kernel))


def _register_latest(kernel: Kernel) -> Kernel:
    """Register a definition given in Python, replacing an earlier one of the same name: in
    one session (a notebook) the user edits their kernel and tunes it again, and the latest
    definition is the one meant. Its workloads are new (the version follows the definition);
    the earlier one's trials stay stored."""
    from edgetune.codegen.kernels import KERNELS, unregister_kernel

    known = KERNELS.get(kernel.name)
    if isinstance(known, user.UserKernel) and known.definition != kernel.definition:
        unregister_kernel(kernel.name)
    return register_kernel(kernel)


def _known() -> set[str]:
    from edgetune.codegen.kernels import KERNELS

    return set(KERNELS)


def _fingerprint(spec: KernelDef) -> bytes:
    """What a KernelDef given in Python says, for its definition digest (its files are
    hashed besides): names, values, restriction texts and the reference's source."""
    def text(obj) -> str:
        if callable(obj):
            try:
                return inspect.getsource(obj)
            except (OSError, TypeError):
                return getattr(obj, "__qualname__", type(obj).__name__)
        return repr(obj)

    parts = [spec.name, spec.description, repr(tuple(spec.shape)), repr(sorted((k, repr(v)) for k, v in spec.params.items())),
             *map(text, spec.restrictions), text(spec.reference), repr(spec.tolerance), spec.source_text,
             *(f"{key}:{text(adapter)}" for key, adapter in dict(spec.operators).items()),
             *(f"{a.name}:{a.dtype}:{a.role}:{text(a.shape)}:{a.low}:{a.high}:{text(a.fill)}" if isinstance(a, Arg)
               else f"{a.name}:scalar:{text(a.value)}" for a in spec.args)]
    return "\0".join(parts).encode()


def _target(target: str | Target) -> Target:
    return target if isinstance(target, Target) else get_target(str(target))


def tune(kernel, shape: str | Mapping[str, int], target: str | Target = DEFAULT_TARGET, *,
         strategy: str = DEFAULT_STRATEGY, budget: int = 20, jobs: int = 2, seed: int = 0, objective: str = "",
         constraints: Sequence[str] = (), db: str | Path = DEFAULT_DB, initial: Sequence[str | Mapping] = (),
         time_budget: float | None = None, patience: int | None = None) -> TuneSummary:
    """Tune `kernel` for one shape on a target, as `edgetune tune` does (same defaults):
    resumes from the trials `db` holds and returns the summary (`.best` is the best
    stored trial, None when no trial succeeded)."""
    kernel, target = register(kernel), _target(target)
    shape_dict = kernel.parse_shape(shape)
    kernel.check_fits(target, shape_dict)
    bounds = tuple(parse_bound(text) for text in constraints)
    if objective or bounds:
        choose_objective(target, objective or target.measures, bounds)
    space = kernel.tuning_space(target, shape_dict)
    # A mapping is checked as its text is (an unknown parameter, a value not offered, an illegal
    # configuration are refused naming it), never dropped in silence.
    starts = tuple(parse_config(space, c if isinstance(c, str) else ",".join(f"{k}={v}" for k, v in dict(c).items()))
                   for c in initial)
    request = TuneRequest(kernel, target, shape_dict, strategy, budget, jobs, seed, objective, bounds,
                          time_budget=time_budget, patience=patience, initial=starts)
    database = TuningDatabase(Path(db))
    try:
        return run_tune(request, database)
    finally:
        database.close()


def best(kernel, shape: str | Mapping[str, int], target: str | Target = DEFAULT_TARGET, *, objective: str = "",
         constraints: Sequence[str] = (), db: str | Path = DEFAULT_DB) -> TuneSummary:
    """The best stored configuration of `kernel` for a shape, as `edgetune best` says it."""
    kernel, target = register(kernel), _target(target)
    if not Path(db).exists():
        raise KernelError(f"{db}: no such database (tune first)")
    database = TuningDatabase(Path(db))
    try:
        recompute_estimates(database, target)
        workload = workload_of(kernel, target, kernel.parse_shape(shape))
        goal = goal_of(database, workload, target, objective, tuple(parse_bound(t) for t in constraints))
        return summarize(database, workload, goal.objective, bounds=goal.bounds)
    finally:
        database.close()


def export(out: str | Path, target: str | Target = DEFAULT_TARGET, *, db: str | Path = DEFAULT_DB,
           objective: str = "", constraints: Sequence[str] = (), kernels: Sequence = ()) -> ExportResult:
    """Bake the best variant of every tuned workload of `target` into C in `out`, as
    `edgetune export` does; `kernels`: kernels of your own the database holds (registered first)."""
    for kernel in kernels:
        register(kernel)
    load_installed()
    if not Path(db).exists():
        raise KernelError(f"{db}: no such database (tune first)")
    database = TuningDatabase(Path(db))
    try:
        return export_and_measure(database, _target(target), Path(out), objective,
                                  tuple(parse_bound(t) for t in constraints))
    finally:
        database.close()


def verify(folder: str | Path, target: str | Target | None = None, *, kernels: Sequence = (),
           tolerance_pct: float | None = None, seed: int | None = None) -> VerifyReport:
    """Check an export as `edgetune verify` does (`.ok`; each kernel's verdict in `.verdicts`)."""
    if seed is not None:
        check_seed(seed)
    for kernel in kernels:
        register(kernel)
    load_installed()
    folder = Path(folder)
    return verify_export(folder, _target(target) if target is not None else manifest_target(folder),
                         tolerance_pct=tolerance_pct, seed=seed)


def tune_kernel(kernel_name: str, kernel_source: str | Path, problem_size, arguments: Sequence, tune_params: Mapping,
                restrictions=None, answer: Sequence | None = None, target: str | Target = DEFAULT_TARGET, *,
                atol: float = 1e-6, strategy: str = DEFAULT_STRATEGY, budget: int = 20, jobs: int = 2,
                seed: int = 0, objective: str = "", db: str | Path | None = None) -> tuple[list[dict], dict]:
    """Kernel Tuner's `tune_kernel`, on an edgetune target: `kernel_source` is C text or a
    file (Kernel Tuner's C convention: `tune_params` arrive as #defines, `kernel_name` is the
    C function's name), `problem_size` a dict of shape keys (or "n=256"; an int means
    {"n": size}), `arguments` numpy arrays and integer scalars in the function's order, each
    passed with its contents (an argument with an answer is an in/out buffer), `answer` a
    list as long with the expected output where the kernel writes and None elsewhere
    (required: every trial is checked), `restrictions` expressions or a function of a
    parameter dict. `db`: a database to keep the trials in and resume from; None (as Kernel
    Tuner without a cache file) writes nothing that outlives the call.
    Returns (results, env) as Kernel Tuner does: one dict per stored trial (its parameters
    and measured values, or `error`), and what was tuned where."""
    spec = kernel_def(kernel_name, kernel_source, problem_size, arguments, tune_params, restrictions, answer, atol)
    shape = {key: int(v) for key, v in _problem(problem_size).items()}
    with tempfile.TemporaryDirectory(prefix="edgetune-tune-kernel-") as scratch:
        path = Path(db) if db is not None else Path(scratch) / "trials.db"
        summary = tune(spec, shape, target, strategy=strategy, budget=budget, jobs=jobs, seed=seed,
                       objective=objective, db=path)
        kernel, target = register(spec), _target(target)
        database = TuningDatabase(path)
        try:
            trials = database.trials(workload_of(kernel, target, kernel.parse_shape(shape)))
        finally:
            database.close()
    results = [{**t.config.as_dict(), **({"error": f"{t.outcome.value}: {t.error.strip().splitlines()[0] if t.error.strip() else ''}"}
                                         if t.outcome.failed else dict(t.values))} for t in trials]
    best_trial = summary.best.trial if summary.best is not None else None
    env = {"kernel_name": kernel_name, "problem_size": shape, "device_name": target.name, "objective": summary.objective,
           "strategy": strategy, "budget": budget, "trials": summary.trials, "failed": summary.failed,
           "best_config": best_trial.config.as_dict() if best_trial else None,
           "best": best_trial.value(summary.objective) if best_trial else None, "definition": kernel.definition,
           "db": str(db) if db is not None else None, "edgetune_version": __version__}
    return results, env


def _problem(problem_size) -> dict:
    if isinstance(problem_size, (int, np.integer)) and not isinstance(problem_size, bool):
        return {"n": int(problem_size)}
    if isinstance(problem_size, str):
        return dict(part.split("=", 1) for part in problem_size.split(",") if "=" in part)
    if isinstance(problem_size, Mapping):
        return dict(problem_size)
    raise KernelError(f"tune_kernel: problem_size {problem_size!r} is not a dict of shape keys, 'k=v,...' or an int")


def kernel_def(kernel_name: str, kernel_source, problem_size, arguments: Sequence, tune_params: Mapping,
               restrictions=None, answer: Sequence | None = None, atol: float = 1e-6) -> KernelDef:
    """The KernelDef tune_kernel tunes: arguments named arg0, arg1, ... in order."""
    if answer is None or len(answer) != len(arguments) or all(a is None for a in answer):
        raise KernelError("tune_kernel: give answer= as a list as long as the arguments, with the expected output "
                          "where the kernel writes and None elsewhere (edgetune checks every trial)")
    args, outputs = [], []
    for i, (value, want) in enumerate(zip(arguments, answer)):
        name = f"arg{i}"
        if isinstance(value, np.ndarray):
            dtype = next((n for n, t in DTYPES.items() if np.dtype(t) == value.dtype), None)
            if dtype is None:
                raise KernelError(f"tune_kernel: argument {i} is {value.dtype}; edgetune passes {', '.join(DTYPES)}")
            fixed = value.copy()
            args.append(Arg(name, dtype, tuple(value.shape), "output" if want is not None else "input",
                            fill=lambda shape, rng, fixed=fixed: fixed.copy()))
            if want is not None:
                outputs.append(np.asarray(want))
        elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            args.append(Scalar(name, int(value)))
        else:
            raise KernelError(f"tune_kernel: argument {i} ({type(value).__name__}) is neither a numpy array "
                              "nor an integer")
    rules = [restrictions] if callable(restrictions) else restrictions or ()  # a lone string is refused, not split
    data = hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in (*arguments, *answer)
                                   if isinstance(a, np.ndarray))).hexdigest()[:16]
    path = Path(kernel_source) if isinstance(kernel_source, Path) or (
        isinstance(kernel_source, str) and "\n" not in kernel_source and Path(kernel_source).is_file()) else None
    return KernelDef(name=kernel_name, shape=tuple(_problem(problem_size)), args=args,
                     reference=lambda shape, inputs: list(outputs), params=dict(tune_params), restrictions=rules,
                     tolerance=atol, source=path.name if path else f"{kernel_name}.c",
                     source_text="" if path else str(kernel_source), base=path.resolve().parent if path else None,
                     description=f"{kernel_name} (tune_kernel, data {data})")
