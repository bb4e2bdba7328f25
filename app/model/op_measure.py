"""The library operators (app/model/ops: ADD, pooling, SOFTMAX, RESHAPE...) measured on the
target, for `edgetune place MODEL.tflite`.

Each operator runs alone: a one-operator model of the model's own tensors (its quantisation,
options and constants; edgetune.model.verify.operator_model, as `model verify --layers` builds them),
exported as `edgetune model export` exports a model and run by `edgetune model verify` in the
target's emulator, its outputs checked bit for bit against TFLite Micro on a random input and a
saturating one. The figure is the random input's count, in the target's measured unit (it
includes the module's call into the operator: about 34 instructions on the M55). Its input
and output are the module's own buffers there, so an operator the whole module runs in place
(a RESHAPE whose input dies at it) is charged its copy: an upper bound for that one.

Figures are cached in the cache folder (op-counts/), one file per key: the one-operator model's
bytes, the target's measurement fingerprint (tool versions, memory map, compilers and flags,
runner: app/identity.py) and a digest of the sources the operator's C is rendered from. The
instruction mix is stored beside the count, not the estimates: on a target with a cost model,
the cycles are priced again from the current cost table, as stored trials are.
"""
from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from edgetune import codegen
from edgetune.model import Model
from edgetune.model.layers import ModelLayer
from edgetune.errors import EdgetuneError
from edgetune.hal import Target
from edgetune.targets.buildcache import content_key
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import cache_dir

from edgetune.identity import measurement_fingerprint
from .export import export_model
from .verify import operator_model, verify_model

CACHE_PART = "op-counts"  # one of edgetune.targets.buildcache.PARTS: `edgetune cache info|clear` see it
CODEGEN = Path(codegen.__file__).resolve().parent
MODEL = Path(__file__).resolve().parent
# What a library operator's C and the module around it are rendered from.
SOURCES = (MODEL / "ops", MODEL / "templates", CODEGEN / "templates" / "common", MODEL / "module.py",
           MODEL / "memory_plan.py")


@dataclass(frozen=True)
class OpCount:
    value: int | None  # in the target's measured unit; None: not measured (`why`)
    why: str = ""  # why it could not be measured ("" when it was)
    cached: bool = False  # read from the cache, not run now


@functools.lru_cache(maxsize=None)
def sources_digest() -> str:
    parts = []
    for path in SOURCES:
        for file in sorted(path.rglob("*") if path.is_dir() else [path]):
            if file.is_file() and file.suffix in (".py", ".j2"):
                parts += [str(file.relative_to(path.parent)), file.read_bytes()]
    return content_key(*parts)


def alone_model(model: Model, layer: ModelLayer) -> bytes:
    """The operator alone, as `model verify --layers` builds it; its bytes name no operator
    index, so identical operators (in one model or in several) are one cache entry."""
    data, _ = operator_model(model, replace(layer.operator, index=0))
    return data


def cache_key(model: Model, layer: ModelLayer, target: Target) -> str:
    return content_key(alone_model(model, layer), target.name, measurement_fingerprint(target), sources_digest())


def _priced(values: dict, target: Target, unit: str) -> int:
    """The stored figure in `unit`, estimates priced from the current cost table."""
    if target.cost is not None and isinstance(values.get("mix"), dict) and isinstance(values.get("accesses"), dict):
        try:
            values = {**values, **target.estimated_values(values["mix"], values["accesses"])}
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # a mix this cost table cannot price (as app/identity.py): the stored figures stand
    if not isinstance(values.get(unit), (int, float)):
        raise EdgetuneError(f"its run recorded no {unit}")
    return math.ceil(values[unit])


def _read(path: Path) -> dict | None:
    """The stored values, or None (none stored, or a file that is not one of ours: measured again)."""
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return values if isinstance(values, dict) and isinstance(values.get("instructions"), int) else None


def _store(path: Path, values: dict) -> None:
    """Written under a temporary name and renamed: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=".op-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(values, out, sort_keys=True)
    os.replace(staging, path)


def _run_alone(model: Model, layer: ModelLayer, target: Target) -> dict:
    """The operator's one-operator model exported and verified: the random input's values.
    Raises EdgetuneError when it cannot be exported or does not match TFLite Micro."""
    with tempfile.TemporaryDirectory(prefix="edgetune-op-") as tmp:
        model_path = Path(tmp) / f"op{layer.index}.tflite"
        model_path.write_bytes(alone_model(model, layer))
        try:
            export_model(model_path, target, None, Path(tmp) / "export", name="edgetune_op")
            outcome = verify_model(Path(tmp) / "export", target, n_inputs=1)
        except EdgetuneError as exc:  # named by the operator, not by a file of ours it never saw
            raise EdgetuneError(str(exc).replace(f"{model_path}: ", "").replace(str(model_path), "it")) from None
        except RuntimeError as exc:  # TFLite Micro's interpreter refusing the one-operator model
            raise EdgetuneError(f"TFLite Micro cannot run it alone: {str(exc).strip()[:200]}") from None
    if not outcome.ok:
        problem = outcome.layer_problem or next(i.problem for i in outcome.inferences if i.problem)
        raise EdgetuneError(f"run alone it failed: {problem}")
    first = outcome.inferences[0]
    return {**dict(first.values), **dict(first.mix), "instructions": first.instructions, "operator": layer.op}


def measure_library_op(model: Model, layer: ModelLayer, target: Target, unit: str = "") -> OpCount:
    """The operator's count on `target` in `unit` (default: the target's own), from the cache
    or measured now (and cached); a value of None says why not (no emulator, an operator the
    module cannot run alone)."""
    unit = unit or target.measures
    try:
        runner_for(target).check_tools()
        path = cache_dir() / CACHE_PART / f"{cache_key(model, layer, target)}.json"
        stored = _read(path)
        if stored is not None:
            return OpCount(_priced(stored, target, unit), cached=True)
        values = _run_alone(model, layer, target)
    except EdgetuneError as exc:
        return OpCount(None, str(exc).strip().splitlines()[0][:300])
    _store(path, values)
    try:
        return OpCount(_priced(values, target, unit))
    except EdgetuneError as exc:
        return OpCount(None, str(exc))
