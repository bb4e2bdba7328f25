"""A kernel of the user's own, defined outside edgetune (docs/own-kernel.md).

The definition (`KernelDef`) says what the kernel is: its workload shape keys, its
arguments (buffers with a dtype, a role and a shape as a function of the workload shape;
int32 scalars), its parameters and restrictions, its numpy reference and tolerance, its
source and its vector paths. `UserKernel` makes that a `Kernel` like the shipped ones, so
tuning, export and verify treat both alike.

A source is either a Jinja2 template (a name ending in `.j2`, found in the kernel's folder,
then in edgetune's own templates, so `common/...` helpers are shared) or plain C whose
parameters arrive as `#define`s, Kernel Tuner's convention: the user's function keeps its
name and argument order; edgetune renames it per variant and calls it from an entry point
in edgetune's argument order (buffers, then int32 scalars).

Everything the definition says reaches C only as validated tokens: names are C
identifiers, parameter values integers, finite floats or identifiers, restriction and size
texts are parsed with `ast` against an allow-list (codegen/kernels/restrictions.py).
"""
from __future__ import annotations

import difflib

import math
import re
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import jinja2
import numpy as np

from edgetune.hal import Target, shipped_unit_names
from edgetune.tuner import Config, Constraint, Param, Space, choice

from ..placement import PLACEMENT_PARAMS
from ..render import TEMPLATES_DIR, render
from .base import MAX_ELEMENTS, OPT_LEVELS, Buffer, Kernel, KernelError, KernelIO, comment_safe, describe_mismatch
from .paths import VectorPath, anywhere, path_constraints
from .restrictions import ExpressionError, compiled

DTYPES = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "float32": np.float32}
ROLES = ("input", "output", "weight")
KERNEL_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
C_NUMBER_RE = re.compile(r"-?(0[xX][0-9a-fA-F]+|\d+)[uUlL]{0,3}|-?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?[fF]?")
# What `operators` keys name: a builtin operator (schema.fbs BuiltinOperator), or a custom one by its custom code.
BUILTIN_OP_RE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
CUSTOM_CODE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
SOURCE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
    volatile while _Bool _Complex _Imaginary bool true false""".split())
# The variables Kernel.render gives every template, and the parameters every kernel's space has.
RENDER_VARIABLES = frozenset({"fn", "prefix", "P", "header", "kernel_name", "provenance", "version", "build_hint",
                              "scratch_attr", "scratch_array", "config_text", "shape", "config", "signature"})
RESERVED = frozenset({"compiler", "opt", "vector", *PLACEMENT_PARAMS, *RENDER_VARIABLES})


@dataclass(frozen=True)
class Arg:
    """A buffer argument: name, dtype (int8, int16, int32, float32), role (input, output,
    weight: a constant input placed with the weights), shape (a shape-key expression such
    as "taps + block - 1", a tuple of them, or a function of the shape dict), the range of
    its random values (inclusive; the dtype's range, or [-1, 1] for float32, by default)
    or a `fill(shape, rng)` making them, and a line of documentation for the header."""

    name: str
    dtype: str
    shape: object
    role: str = "input"
    low: float | None = None
    high: float | None = None
    fill: Callable | None = None
    doc: str = ""


@dataclass(frozen=True)
class Scalar:
    """An int32 scalar argument: a value, a shape-key expression ("n", "block - 1"), or a
    function of the shape dict giving it."""

    name: str
    value: object
    doc: str = ""


def Input(name: str, dtype: str, shape: object, **options) -> Arg:  # noqa: N802 - reads as a declaration
    """A buffer the kernel reads."""
    return Arg(name, dtype, shape, "input", **options)


def Output(name: str, dtype: str, shape: object, **options) -> Arg:  # noqa: N802
    """A buffer the kernel writes; checked against the reference after every trial."""
    return Arg(name, dtype, shape, "output", **options)


def Weight(name: str, dtype: str, shape: object, **options) -> Arg:  # noqa: N802
    """A constant input (coefficients, weights): placed with the weights on targets that place buffers."""
    return Arg(name, dtype, shape, "weight", **options)


@dataclass(frozen=True)
class Vector:
    """A vector path: the value `name` of the kernel's `vector` parameter, offered where the
    target's HAL lists the vector unit or core extension `requires` (None: everywhere),
    rendered from `source` (default: the kernel's), with restrictions of its own."""

    name: str
    requires: str | None = None
    source: str = ""
    restrictions: tuple = ()


class UnknownUnitWarning(UserWarning):
    """A vector path requires a unit or extension that no known target has (the shipped
    boards and the target in use): most likely a misspelling, and the path is never offered.
    Not an error: a board file of the user's, not used in this run, may have it."""


_WARNED_UNITS: set[tuple[str, str, str]] = set()  # (definition, path, unit): warned once per process


@dataclass(frozen=True)
class Binding:
    """What an operator adapter returns (KernelDef.operators): one TFLite operator as a call
    of the kernel. `shape`: the workload shape (every shape key); `input`, `output`: the
    kernel's buffers that take the operator's input tensor (its `input_tensor`-th input) and
    write its output tensor (its first); `constants`: an array for every other buffer (the
    operator's weights, as the kernel takes them); `scalars`: int32 values for scalars (the
    others keep their declared value); `macs`: the operator's multiply-accumulates (0: one
    per output element), for `model show` and the scheduler."""

    shape: Mapping[str, int]
    input: str
    output: str
    constants: Mapping[str, object] = field(default_factory=dict)
    scalars: Mapping[str, int] = field(default_factory=dict)
    input_tensor: int = 0
    macs: int = 0


@dataclass(frozen=True)
class KernelDef:
    """A kernel of your own. `params` maps each parameter to its values: a list or tuple
    (ordered when every value is a number), or a set (unordered). `restrictions`: Kernel
    Tuner-style expressions over parameter names and shape keys, or functions of a dict of
    them, each True for a legal configuration. `reference(shape, inputs)` gets the shape
    dict and a dict of input and scalar values by name and returns the outputs (one array,
    a sequence in output order, or a dict by name). `tolerance`: 0 for bit-exact, else the
    largest absolute difference accepted. `source`: a file of the kernel's folder (`.j2`
    is a template; anything else plain C with parameters as #defines) or, with
    `source_text`, the C text itself. `function`: the C function of plain C (default
    `name`). `version`: the workload version (default: taken from the definition's content,
    so an edited kernel starts new workloads and never reuses old trials). `operators`:
    the TFLite operators it serves in a model, each ("LEAKY_RELU", or "CUSTOM:<custom
    code>") mapped to an adapter: a function of the operator (codegen/model/user_layers.py,
    OperatorView: its tensors' shapes, quantisation and data, its options) returning a
    Binding."""

    name: str
    shape: Sequence[str]
    args: Sequence[Arg | Scalar]
    reference: Callable
    source: str = ""
    params: Mapping[str, object] = field(default_factory=dict)
    restrictions: Sequence[object] = ()
    tolerance: float = 0.0
    vectors: Sequence[Vector] = ()
    function: str = ""
    description: str = ""
    example_shape: str = ""
    version: int | None = None
    source_text: str = ""
    base: str | Path | None = None  # the folder relative sources are in (set by the loader)
    operators: Mapping[str, Callable] = field(default_factory=dict)


def c_token(value: object, where: str) -> str:
    """A parameter value as C text: an integer, a finite float, or an identifier."""
    if isinstance(value, (bool, np.bool_)):
        raise KernelError(f"{where}: {value!r} is not a C token (use 0 or 1)")
    if isinstance(value, (int, np.integer)):
        return str(int(value)) if value >= 0 else f"({int(value)})"
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise KernelError(f"{where}: {value!r} is not a finite number")
        return repr(float(value)) if value >= 0 else f"({float(value)!r})"
    if isinstance(value, str) and (IDENTIFIER_RE.fullmatch(value) or C_NUMBER_RE.fullmatch(value)):
        return value if not value.startswith("-") else f"({value})"
    raise KernelError(f"{where}: {value!r} is not a C token (an integer, a finite float or an identifier)")


def check_identifier(name: object, where: str, reserved: frozenset[str] = frozenset()) -> str:
    if not isinstance(name, str) or not IDENTIFIER_RE.fullmatch(name) or name in C_KEYWORDS:
        raise KernelError(f"{where}: {name!r} is not a C identifier")
    if name in reserved:
        raise KernelError(f"{where}: {name!r} is reserved by edgetune (reserved: {', '.join(sorted(reserved))})")
    return name


def _param(name: str, values: object, where: str) -> Param:
    """A parameter from its values: a list or tuple keeps its order, a set is unordered."""
    unordered = isinstance(values, (set, frozenset))
    if unordered:
        values = sorted(values, key=lambda v: (type(v).__name__, v))
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)) or not values:
        raise KernelError(f"{where}: give its values as a non-empty list, tuple or set")
    for value in values:
        c_token(value, f"{where} value")
    if len(set(values)) != len(values):
        raise KernelError(f"{where}: a value is given twice")
    plain = tuple(v.item() if isinstance(v, np.generic) else v for v in values)
    return choice(name, plain, "", ordered=False if unordered else None)


def _predicate(rule: object, kernel: str, names: frozenset[str], where: str) -> tuple[str, Callable]:
    """(text shown, predicate of a dict of parameter and shape values) for one restriction."""
    if isinstance(rule, str):
        try:
            fn = compiled(rule, names)
        except ExpressionError as exc:
            raise KernelError(f"kernel {kernel}: {where} {rule!r}: {exc}") from None
        text = rule
    elif callable(rule):
        fn, text = rule, getattr(rule, "__name__", "restriction")
    else:
        raise KernelError(f"{where}: {rule!r} is neither an expression nor a function")

    def holds(values: Mapping) -> bool:
        try:
            result = fn(dict(values))
        except Exception as exc:  # noqa: BLE001 - the user's code: reported, never a traceback
            shown = ", ".join(f"{k}={v}" for k, v in values.items())
            raise KernelError(f"kernel {kernel}: {where} {text!r} raised {type(exc).__name__}: {exc} "
                              f"(for {shown})") from None
        if not isinstance(result, (bool, np.bool_)):
            raise KernelError(f"kernel {kernel}: {where} {text!r} gave {result!r}, not True or False")
        return bool(result)

    return text, holds


def _dims(arg: Arg, keys: frozenset[str], where: str) -> Callable[[Mapping[str, int]], tuple[int, ...]]:
    """A buffer's shape as a function of the workload shape."""
    if callable(arg.shape):
        return lambda shape: _as_dims(arg.shape(dict(shape)), where)
    parts = arg.shape if isinstance(arg.shape, (tuple, list)) else (arg.shape,)
    try:
        fns = [compiled(p, keys) if isinstance(p, str) else (lambda shape, p=p: p) for p in parts]
    except ExpressionError as exc:
        raise KernelError(f"{where}: {exc}") from None
    return lambda shape: _as_dims(tuple(fn(shape) for fn in fns), where)


def _as_dims(value: object, where: str) -> tuple[int, ...]:
    dims = value if isinstance(value, (tuple, list)) else (value,)
    if not dims or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 for d in dims):
        raise KernelError(f"{where}: size {value!r} is not positive integers")
    return tuple(int(d) for d in dims)


def _as_dict(config) -> dict:
    """A configuration's values by name (a Config, or a mapping of them)."""
    return dict(config) if isinstance(config, Mapping) else config.as_dict()


def _check_range(kernel: str, arg: Arg) -> None:
    """A buffer's `low`/`high`: numbers its dtype holds (integers for an integer dtype), low <= high."""
    info = np.iinfo(DTYPES[arg.dtype]) if np.issubdtype(np.dtype(DTYPES[arg.dtype]), np.integer) else None
    for what, value in (("low", arg.low), ("high", arg.high)):
        if value is None:
            continue
        number = not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
        fits = number and math.isfinite(value) and (
            info is None or (float(value).is_integer() and info.min <= value <= info.max))
        if not fits:
            held = f"an integer in [{info.min}, {info.max}]" if info else "a finite number"
            raise KernelError(f"kernel {kernel}: buffer {arg.name!r}: {what}={value!r} is not {held} ({arg.dtype})")
    if arg.low is not None and arg.high is not None and arg.low > arg.high:
        raise KernelError(f"kernel {kernel}: buffer {arg.name!r}: low={arg.low!r} is above high={arg.high!r}")


def _rule_list(rules: object, where: str) -> tuple:
    """Restrictions as given: a list or tuple of expressions and functions. A lone string
    would be read character by character (restriction 'u': unknown name 'u'), so it is refused."""
    if not isinstance(rules, (list, tuple)):  # ordered: a set would reorder them run to run
        raise KernelError(f"{where}: give a list of expressions or functions, e.g. [{rules!r}], "
                          f"not a lone {type(rules).__name__}")
    return tuple(rules)


def where_raised(fn: Callable, exc: BaseException) -> str:
    """" (at FILE:LINE)": the deepest line of `fn`'s own file the exception passed through,
    so a one-line error about the user's function names the line to fix; "" if unknown."""
    code = getattr(fn, "__code__", None)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if code and f.filename == code.co_filename]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


class UserKernel(Kernel):
    """A KernelDef as a Kernel (see the module docstring). `folder`: where its sources are;
    `definition`: the sha256 of its files (codegen/kernels/user_loader.py); `bundle`: those
    files, for a kernel loaded from a folder or .py file (sent to a cluster's workers)."""

    bundle = None

    def __init__(self, spec: KernelDef, folder: Path | None, definition: str):
        self.spec, self.folder, self.definition = spec, folder, definition
        self.name = spec.name
        self.version = spec.version if spec.version is not None else int(definition[:7], 16)
        self.description = spec.description or f"{spec.name} (a kernel of your own)"
        self.template = spec.source or f"{spec.name}.c"
        self.shape_keys = tuple(spec.shape)
        self.buffers = tuple(a for a in spec.args if isinstance(a, Arg))
        self.scalars = tuple(a for a in spec.args if isinstance(a, Scalar))
        self._check_names()
        keys = frozenset(self.shape_keys)
        self._dims = {a.name: _dims(a, keys, f"kernel {self.name}: buffer {a.name!r} shape") for a in self.buffers}
        self.params = tuple(_param(name, values, f"kernel {self.name}: parameter {name!r}")
                            for name, values in spec.params.items() if name not in ("compiler", "opt"))
        names = keys | {p.name for p in self.params} | {"vector", "compiler", "opt"}
        self.rules = tuple(_predicate(r, self.name, names, "restriction")
                           for r in _rule_list(spec.restrictions, f"kernel {self.name}: restrictions"))
        self.paths = tuple(self._path(v, names) for v in spec.vectors)
        self.operators = self._operators()

    def _check_names(self) -> None:
        spec = self.spec
        if not isinstance(spec.name, str) or not KERNEL_NAME_RE.fullmatch(spec.name):
            raise KernelError(f"kernel name {spec.name!r} must be lower case letters, digits and _ (a C identifier)")
        # Shape keys and arguments are C parameters (of the shape dispatcher), parameters
        # #defines: no two may share a name.
        groups = [("shape key", list(self.shape_keys)), ("argument", [a.name for a in spec.args]),
                  ("parameter", [p for p in spec.params if p not in ("compiler", "opt")])]
        for what, names in groups:
            for name in names:
                check_identifier(name, f"kernel {spec.name}: {what}", RESERVED)
            if len(set(names)) != len(names):
                raise KernelError(f"kernel {spec.name}: a {what} name is given twice")
        clash = set(groups[2][1]) & (set(groups[0][1]) | set(groups[1][1]))
        if clash:
            raise KernelError(f"kernel {spec.name}: parameter {sorted(clash)[0]!r} has the name of a shape key "
                              "or argument (parameters become #defines)")
        clash = set(groups[0][1]) & set(groups[1][1])
        if clash:  # the exported shape dispatcher takes the shape keys, then the arguments
            raise KernelError(f"kernel {spec.name}: argument {sorted(clash)[0]!r} has the name of a shape key "
                              "(the shape dispatcher takes both); rename one")
        for arg in self.buffers:
            if arg.dtype not in DTYPES or arg.role not in ROLES:
                raise KernelError(f"kernel {spec.name}: buffer {arg.name!r}: dtype {arg.dtype!r} / role {arg.role!r} "
                                  f"(dtypes: {', '.join(DTYPES)}; roles: {', '.join(ROLES)})")
            _check_range(spec.name, arg)
        if not any(a.role == "output" for a in self.buffers):
            raise KernelError(f"kernel {spec.name}: no output buffer (declare one with Output(...))")
        if not callable(spec.reference):
            raise KernelError(f"kernel {spec.name}: reference {spec.reference!r} is not a function")
        if isinstance(spec.tolerance, bool) or not isinstance(spec.tolerance, (int, float)) or not spec.tolerance >= 0:
            raise KernelError(f"kernel {spec.name}: tolerance {spec.tolerance!r} is not a number >= 0")
        check_identifier(spec.function or spec.name, f"kernel {spec.name}: function")

    def _operators(self) -> dict[str, Callable]:
        """The TFLite operators it serves: key -> adapter, keys checked."""
        served = self.spec.operators
        if not isinstance(served, Mapping):
            raise KernelError(f"kernel {self.name}: operators must map operator names to adapters")
        for key, adapter in served.items():
            op, _, code = key.partition(":") if isinstance(key, str) else ("", "", "")
            if not BUILTIN_OP_RE.fullmatch(op) or (op == "CUSTOM") != bool(code) or (code and not CUSTOM_CODE_RE.fullmatch(code)):
                raise KernelError(f"kernel {self.name}: operators key {key!r} is neither a builtin operator name "
                                  "(LEAKY_RELU) nor CUSTOM:<custom code> (CUSTOM:LeakyRelu)")
            builtins = known_builtins()
            if op != "CUSTOM" and builtins is not None and op not in builtins:
                raise KernelError(f"kernel {self.name}: operators key {key!r}: TFLite has no builtin operator {op!r} "
                                  f"(a custom one is 'CUSTOM:<custom code>'){did_you_mean(op, builtins)}")
            if not callable(adapter):
                raise KernelError(f"kernel {self.name}: operators[{key!r}] is {adapter!r}, not an adapter function")
        if served and sum(a.role == "output" for a in self.buffers) != 1:
            raise KernelError(f"kernel {self.name}: a kernel serving model operators has exactly one output buffer")
        return dict(served)

    def _path(self, vector: Vector, names: frozenset[str]) -> VectorPath:
        check_identifier(vector.name, f"kernel {self.name}: vector path")
        rules = tuple(_predicate(r, self.name, names, f"vector path {vector.name!r} restriction")
                      for r in _rule_list(vector.restrictions, f"kernel {self.name}: vector path {vector.name!r} "
                                          "restrictions"))
        unit = vector.requires

        def offered(target: Target) -> bool:
            return target.has_vector(unit) or target.has_extension(unit)

        def path_rules(target: Target, shape: Mapping[str, int]):
            return [(text, lambda c, holds=holds: holds({**shape, **_as_dict(c)})) for text, holds in rules]

        return VectorPath(vector.name, anywhere if unit is None else offered, vector.source or self.template, path_rules)

    # --- shapes and space ---------------------------------------------------------------
    def example_shape(self) -> str:
        return self.spec.example_shape or super().example_shape()

    def check_shape(self, shape: dict[str, int]) -> None:
        for arg in self.buffers:
            count = int(np.prod(self._dims[arg.name](shape)))
            if count > MAX_ELEMENTS:
                raise KernelError(f"shape: buffer {arg.name} has {count} elements, more than {MAX_ELEMENTS}")

    def space(self, target: Target, shape: Mapping[str, int]) -> Space:
        params = list(self.params)
        paths = self.offered_paths(target)
        if self.paths:
            if not paths:
                raise KernelError(f"kernel {self.name}: none of its vector paths "
                                  f"({', '.join(p.name for p in self.paths)}) is offered by {target.name}")
            params.append(choice("vector", [p.name for p in paths], "vector path"))
        params.append(choice("compiler", self._values("compiler", [c.name for c in target.compilers], target),
                             "compiler from the target description"))
        params.append(choice("opt", self._values("opt", list(OPT_LEVELS), target), "optimisation level"))
        constraints = [Constraint(text, lambda c, holds=holds: holds({**shape, **_as_dict(c)}))
                       for text, holds in self.rules]
        return Space(params, [*constraints, *path_constraints(paths, target, shape)])

    def _values(self, name: str, offered: list[str], target: Target) -> list[str]:
        """The values of `compiler` or `opt`: the target's, or those the definition picks of them."""
        wanted = self.spec.params.get(name)
        if wanted is None:
            return offered
        unknown = [v for v in wanted if v not in offered]
        if unknown or not wanted:
            raise KernelError(f"kernel {self.name}: parameter {name!r} value {unknown[0] if unknown else None!r} "
                              f"is not one of {target.name}'s ({', '.join(offered)})")
        return list(wanted)

    # --- inputs, reference, comparison ---------------------------------------------------
    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator, edge: str = "random") -> KernelIO:
        buffers = tuple(Buffer(a.name, self._data(a, shape, rng, edge), is_output=a.role == "output",
                               weight=a.role == "weight") for a in self.buffers)
        return KernelIO(buffers=buffers, params=tuple((s.name, self._scalar(s, shape)) for s in self.scalars))

    def _data(self, arg: Arg, shape: Mapping[str, int], rng: np.random.Generator, edge: str) -> np.ndarray:
        dims, dtype = self._dims[arg.name](shape), np.dtype(DTYPES[arg.dtype])
        if arg.role == "output" and arg.fill is None:
            return np.zeros(dims, dtype=dtype)
        if arg.fill is not None:  # an output with a fill is an in/out buffer: it starts with the fill's values
            data = self._call(f"buffer {arg.name!r} fill", arg.fill, dict(shape), rng)
            return self._checked(np.asarray(data), dims, dtype, f"fill of buffer {arg.name!r}")
        integer = np.issubdtype(dtype, np.integer)
        low = arg.low if arg.low is not None else (np.iinfo(dtype).min if integer else -1.0)
        high = arg.high if arg.high is not None else (np.iinfo(dtype).max if integer else 1.0)
        if edge == "extreme":
            return rng.choice(np.array([low, high], dtype=dtype), size=dims)
        if integer:
            return rng.integers(int(low), int(high), size=dims, dtype=dtype, endpoint=True)
        return rng.uniform(float(low), float(high), size=dims).astype(dtype)

    def _in_out(self, name: str) -> bool:
        """Whether buffer `name` is an in/out buffer: an output starting with its fill's values."""
        return any(a.name == name and a.role == "output" and a.fill is not None for a in self.buffers)

    def _scalar(self, scalar: Scalar, shape: Mapping[str, int]) -> int:
        value = scalar.value
        if isinstance(value, str):
            try:
                value = compiled(value, frozenset(self.shape_keys))(dict(shape))
            except ExpressionError as exc:
                raise KernelError(f"kernel {self.name}: scalar {scalar.name!r}: {exc}") from None
        elif callable(value):
            value = self._call(f"scalar {scalar.name!r}", value, dict(shape))
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not -2**31 <= value < 2**31:
            raise KernelError(f"kernel {self.name}: scalar {scalar.name!r} is {value!r}, not an int32")
        return int(value)

    def _call(self, what: str, fn: Callable, *args):
        try:
            return fn(*args)
        except KernelError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's code: one line, never a traceback
            raise KernelError(f"kernel {self.name}: {what} raised {type(exc).__name__}: {exc}"
                              f"{where_raised(fn, exc)}") from None

    def _checked(self, data: np.ndarray, dims: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
        if data.shape != dims or data.dtype != dtype:
            raise KernelError(f"kernel {self.name}: {what} is {data.dtype}{list(data.shape)}, "
                              f"expected {dtype}{list(dims)}")
        return data

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        inputs = {b.name: b.data.copy() for b in io.buffers if not b.is_output or self._in_out(b.name)}
        inputs.update(io.params)
        got = self._call("reference", self.spec.reference, dict(shape), inputs)
        outputs = io.outputs()
        if isinstance(got, Mapping):
            missing = [b.name for b in outputs if b.name not in got]
            if missing:
                raise KernelError(f"kernel {self.name}: reference returned no output {missing[0]!r}")
            got = [got[b.name] for b in outputs]
        elif isinstance(got, np.ndarray):
            got = [got]
        if not isinstance(got, (list, tuple)) or len(got) != len(outputs):
            raise KernelError(f"kernel {self.name}: reference returned {type(got).__name__}, expected "
                              f"{len(outputs)} array(s) for {', '.join(b.name for b in outputs)}")
        return [self._checked(np.asarray(g), b.data.shape, b.data.dtype, f"reference output {b.name!r}")
                for g, b in zip(got, outputs)]

    def check_fits(self, target: Target, shape: Mapping[str, int]) -> None:
        """As every kernel, then every restriction asked about every configuration and the
        reference run once: one that raises, or a wrong shape or dtype, is refused before
        any trial (never inside one). A path requiring a unit no known target has is
        warned about first (UnknownUnitWarning), once per process: commands check the fit
        before their trials, never per trial, and some more than once (tune: the CLI, then
        the session)."""
        self.warn_unknown_units(target)
        self.check_function()
        super().check_fits(target, shape)
        space = self.space(target, shape)
        if not len(space.legal_indices()):
            raise KernelError(f"kernel {self.name}: no configuration meets its restrictions on {target.name}: "
                              f"{unmet_restrictions(space, shape)}")
        self.reference(shape, self.make_io(shape, np.random.default_rng(0)))

    def check_function(self) -> None:
        """Plain C: the source defines the function the definition names (`function`, else
        `name`; tune_kernel's `kernel_name`), or every variant fails to compile calling it."""
        if any(t.endswith(".j2") for t in (self.template, *(p.template for p in self.paths))):
            return  # a template defines {{ signature }}, whatever its C names
        function = self.spec.function or self.name
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", self.source_text(self.template), flags=re.S)
        if re.search(rf"\b{function}\s*\(", text):
            return
        defined = [m for m in re.findall(r"^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{]*\)\s*\{", text, re.M)
                   if m not in C_KEYWORDS]
        found = f" (it defines {', '.join(dict.fromkeys(defined))})" if defined else ""
        raise KernelError(f"kernel {self.name}: source {self.template!r} has no function {function!r}{found}: "
                          "name the C function (KernelDef's function=, or tune_kernel's kernel_name)")

    def unknown_units(self, target: Target) -> list[tuple[str, str]]:
        """(path, unit) for each vector path requiring a unit that neither a shipped target
        nor `target` has."""
        known = known_units(target)
        return [(v.name, v.requires) for v in self.spec.vectors if v.requires is not None and v.requires not in known]

    def warn_unknown_units(self, target: Target) -> None:
        for path, unit in self.unknown_units(target):
            if (self.definition, path, unit) in _WARNED_UNITS:
                continue
            _WARNED_UNITS.add((self.definition, path, unit))
            warnings.warn(f"kernel {self.name}: vector path {path!r} requires {unit!r}, which no known target has "
                          f"(the shipped ones, {target.name}), so the path is never offered"
                          f"{did_you_mean(unit, known_units(target))}", UnknownUnitWarning, stacklevel=3)

    def compare(self, shape, io: KernelIO, name: str, got: np.ndarray, want: np.ndarray) -> str | None:
        if not self.spec.tolerance:
            return describe_mismatch(name, got != want, got, want)
        bad = ~(np.abs(got.astype(np.float64) - want.astype(np.float64)) <= self.spec.tolerance)
        return describe_mismatch(name, bad, got, want, f"differ by more than {self.spec.tolerance:g}")

    def argument_docs(self, shape: Mapping[str, int]) -> dict[str, tuple[str, str]]:
        """The header's text for each argument (codegen/calling.py)."""
        docs = {}
        for a in self.buffers:
            dims = "][".join(map(str, self._dims[a.name](shape)))
            docs[a.name] = ("out" if a.role == "output" else "in", f"{a.doc or a.role}: {a.dtype} [{dims}].")
        docs.update({s.name: ("in", f"{s.doc or 'scalar'}: int32.") for s in self.scalars})
        return docs

    # --- rendering -----------------------------------------------------------------------
    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        values = {k: v for k, v in config.items if k not in RENDER_VARIABLES}
        return dict(shape=dict(shape), config=dict(config.items), **dict(shape), **values)

    def variant_cflags(self, config: Config) -> tuple[str, ...]:
        return (f"-{config['opt']}",)

    def render_source(self, template: str, variables: dict) -> str:
        signature = self.declaration(variables["shape"], fn=variables["fn"])
        if template.endswith(".j2"):
            folders = (self.folder, TEMPLATES_DIR) if self.folder else (TEMPLATES_DIR,)
            return render(template, {**variables, "signature": signature}, folders)
        return self._plain_c(template, variables, signature)

    def source_text(self, name: str) -> str:
        if self.spec.source_text and name == self.template:
            return self.spec.source_text
        try:
            return (Path(self.folder or ".") / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise KernelError(f"kernel {self.name}: cannot read source {name!r} ({exc})") from None

    def _plain_c(self, template: str, variables: dict, signature: str) -> str:
        """Kernel Tuner's convention: the parameters as #defines before the user's C, which
        is compiled as written; an entry point in edgetune's argument order calls it."""
        fn, function = variables["fn"], self.spec.function or self.name
        defines = [f"#define {p.name} {c_token(variables['config'][p.name], p.name)}" for p in self.params]
        call = ", ".join(f"({DTYPE_C[a.dtype]} *){a.name}" if isinstance(a, Arg) else a.name for a in self.spec.args)
        lines = ["/*", f" * {fn}: {comment_safe(self.description)}, plain C with its parameters as #defines."]
        lines += [f" * {line}" for line in variables["provenance"]]
        lines += [f" * Configuration: {variables['config_text']}", f" * Build with: {variables['build_hint']}", " */",
                  "#include <stdint.h>", f'#include "{variables["header"]}"', "",
                  *defines, f"#define {function} {fn}_kernel",
                  f'#line 1 "{template}"', self.source_text(template).rstrip("\n"), "",
                  "/* edgetune's entry point: the arguments in edgetune's order. */",
                  signature, "{", f"    (void){function}({call});", "}", ""]
        return "\n".join(lines)

    def check_templates(self) -> None:
        """Parse every template source now: a syntax error names its file and line."""
        env = jinja2.Environment(undefined=jinja2.StrictUndefined)
        for name in dict.fromkeys([self.template, *(p.template for p in self.paths)]):
            if not SOURCE_NAME_RE.fullmatch(name) or name.startswith("."):
                raise KernelError(f"kernel {self.name}: source {name!r} is not a plain file name of its folder")
            text = self.source_text(name)
            if name.endswith(".j2"):
                try:
                    env.parse(text, name, name)
                except jinja2.TemplateSyntaxError as exc:
                    where = Path(self.folder or ".") / name
                    raise KernelError(f"{where}:{exc.lineno}: template syntax error: {exc.message}") from None


DTYPE_C = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "float32": "float"}



def unmet_restrictions(space: Space, shape: Mapping[str, int]) -> str:
    """Which restrictions leave a space empty: those no configuration meets on its own, or
    (each met by some) the ones that exclude some configuration, which together exclude
    all; with the values they were asked about."""
    configs = [space.config_at(i).as_dict() for i in range(space.cartesian_size)]
    never = [c.reason for c in space.constraints if not any(c.check(values) for values in configs)]
    values = "; ".join(f"{p.name} in {list(p.values)}" for p in space.params)
    where = f" ({values}; shape {', '.join(f'{k}={v}' for k, v in shape.items())})"
    if never:
        return f"{', '.join(repr(r) for r in never)} {'holds' if len(never) == 1 else 'hold'} for none{where}"
    narrowing = [c.reason for c in space.constraints if not all(c.check(values) for values in configs)]
    return f"{', '.join(repr(r) for r in narrowing)} exclude every configuration together{where}"


def known_builtins() -> frozenset[str] | None:
    """TFLite's builtin operator names (schema.fbs BuiltinOperator) where the schema bindings
    are installed (the `model` extra); None without them (a model cannot be read then anyway)."""
    from edgetune.codegen.model.schema import ModelError, builtin_names
    try:
        return frozenset(builtin_names().values())
    except ModelError:
        return None


def known_units(target: Target) -> frozenset[str]:
    """The vector units and core extensions of the shipped targets and of `target` (which
    may be a board file of the user's)."""
    return shipped_unit_names() | {unit.name for unit in target.vector_units} | set(target.core.extensions)


def did_you_mean(name: str, names) -> str:
    """'; did you mean X?' for the nearest of `names`, or ''."""
    names = sorted(names)
    same = [n for n in names if n.lower() == name.lower()]  # "MVE" for mve: too far apart for difflib
    near = same or difflib.get_close_matches(name, names, n=1)
    return f"; did you mean {near[0]}?" if near else ""
