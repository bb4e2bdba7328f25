"""manifest.json of an export folder, as frozen dataclasses.

Everything that reads an export (verify, `tune --from-export`, the runners' export build,
placement) reads a `Manifest`, never the JSON by string keys. `Manifest.from_json` is the
one place a manifest is checked: its checksum, its version, its required keys, and every
value that later reaches a command line, a file name or generated C (a manifest's checksum
only catches accidents: anyone can recompute it). The JSON keys are those of every
earlier export, so existing exports still read and verify.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from edgetune.errors import EdgetuneError
from edgetune.hal.loader import NAME_RE, PROGRAM_RE, flags_problem
from edgetune.tuner import Bound
from edgetune.tuner.database import TOOLCHAIN_RE
from edgetune.tuner.trial import VALUE_NAME_RE

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
PER_KERNEL = "per_kernel"  # the manifest's objective when its kernels were chosen by different ones

SOURCE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\.c")
FILE_RE = re.compile(r"(zephyr/)?[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # a file of the folder or of its zephyr/
IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Shape keys and parameter names: C identifiers (a kernel of your own may name a parameter
# UNROLL, Kernel Tuner's #define convention; codegen/kernels/user.py allows 64 characters).
PARAM_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
DIGEST_RE = re.compile(r"[0-9a-f]{64}")
CONFIG_TEXT_RE = re.compile(r"[A-Za-z0-9_.+-]{0,64}")


class ManifestError(EdgetuneError, ValueError):
    """An export folder whose manifest is missing, unreadable, edited or from a newer edgetune."""


@dataclass(frozen=True)
class CompiledUnit:
    """A compiled file of the export: its name, and the compiler and flags it was measured with."""
    source: str
    compiler_command: str
    cflags: tuple[str, ...]

    def to_json(self) -> dict:
        return {"source": self.source, "compiler_command": self.compiler_command, "cflags": list(self.cflags)}


@dataclass(frozen=True)
class KernelEntry:
    """One exported variant: the workload, the configuration and what chose it, how it is
    compiled, and (once the export measured it) what it measured as built."""
    kernel: str
    kernel_version: int
    shape: tuple[tuple[str, int], ...]
    function: str
    source: str
    config: tuple[tuple[str, object], ...]
    objective: str
    bounds: tuple[Bound, ...]
    chosen_by: str  # "tuned", "override" or "default" (tuner.resolve_goal)
    value: float
    values: tuple[tuple[str, object], ...]  # the trial's measured values
    compiler: str
    compiler_command: str
    cflags: tuple[str, ...]
    trial_id: int
    measured: str  # when the trial ran
    toolchain: str = ""  # the workload's measurement fingerprint
    weights_region: str = ""  # where the variant expects its buffers ("" where the target places none)
    activations_region: str = ""
    scratch: bool = False  # has static scratch (export time only: not stored in the manifest)
    exported_value: float | None = None  # the chosen-by value, measured as exported
    exported_values: tuple[tuple[str, object], ...] | None = None
    # A kernel defined outside edgetune: the sha256 of its definition's files at export
    # (codegen/kernels/user_loader.py); "" for a shipped kernel.
    definition: str = ""

    @property
    def unit(self) -> CompiledUnit:
        return CompiledUnit(self.source, self.compiler_command, self.cflags)

    @property
    def config_dict(self) -> dict:
        return dict(self.config)

    @property
    def shape_dict(self) -> dict:
        return dict(self.shape)

    @property
    def config_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.config)

    @property
    def shape_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.shape)

    def to_json(self) -> dict:
        data = {"kernel": self.kernel, "kernel_version": self.kernel_version, "shape": dict(self.shape),
                "function": self.function, "source": self.source, "config": dict(self.config),
                "objective": self.objective, "constraints": [b.text() for b in self.bounds],
                "bounds": [[b.name, b.limit] for b in self.bounds], "chosen_by": self.chosen_by,
                "value": self.value, "values": dict(self.values), "compiler": self.compiler,
                "compiler_command": self.compiler_command, "cflags": list(self.cflags), "trial_id": self.trial_id,
                "measured": self.measured, "toolchain": self.toolchain}
        if self.weights_region:
            data["placement"] = {"weights": self.weights_region, "activations": self.activations_region}
        if self.exported_value is not None:
            data["exported_value"] = self.exported_value
        if self.exported_values is not None:
            data["exported_values"] = dict(self.exported_values)
        if self.definition:
            data["definition"] = self.definition
        return data


@dataclass(frozen=True)
class LayerFunction:
    """One operator of an exported model: the C function the module calls for it, and (for a
    tuned layer) whether the variant is a tuned trial or the kernel's default configuration."""
    index: int
    op: str
    function: str
    source: str  # "tuned", "default" (no trial in the database), "library", "folded" or "patched" (band by band)

    def to_json(self) -> dict:
        return {"index": self.index, "op": self.op, "function": self.function, "source": self.source}


@dataclass(frozen=True)
class PlannedTensor:
    """One intermediate tensor of the memory plan: its bytes at an offset of the arena, alive
    from the step that writes it to the last that reads it."""
    tensor: int
    offset: int
    nbytes: int
    first: int
    last: int

    def to_json(self) -> list:
        return [self.tensor, self.offset, self.nbytes, self.first, self.last]


@dataclass(frozen=True)
class ModelEntry:
    """The model an export runs (model export): what it is, how it is called, its plan."""
    name: str  # the module's name: <name>.h, <name>_invoke
    file: str  # the .tflite file's name
    sha256: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    arena_bytes: int
    arena_region: str
    layers: tuple[LayerFunction, ...]
    plan: tuple[PlannedTensor, ...]
    # Every input's and output's shape, in the model's order (the arguments of <name>_run);
    # input_shape and output_shape are the first ones. Empty: just those.
    input_shapes: tuple[tuple[int, ...], ...] = ()
    output_shapes: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self):
        if not self.input_shapes:
            object.__setattr__(self, "input_shapes", (tuple(self.input_shape),))
        if not self.output_shapes:
            object.__setattr__(self, "output_shapes", (tuple(self.output_shape),))

    def to_json(self) -> dict:
        return {"name": self.name, "file": self.file, "sha256": self.sha256, "input_shape": list(self.input_shape),
                "output_shape": list(self.output_shape), "arena_bytes": self.arena_bytes,
                "arena_region": self.arena_region, "layers": [l.to_json() for l in self.layers],
                "plan": [p.to_json() for p in self.plan],
                "input_shapes": [list(s) for s in self.input_shapes],
                "output_shapes": [list(s) for s in self.output_shapes]}


def _is_shape(value) -> bool:
    return isinstance(value, list) and all(_is_int(d) and d > 0 for d in value)


def _model_problem(data) -> str | None:
    """A model entry: every value that reaches a file name, a C identifier or a number checked."""
    if not isinstance(data, dict):
        return "model: expected an object"
    for key in ("name", "file", "sha256", "input_shape", "output_shape", "arena_bytes", "arena_region", "layers", "plan"):
        if key not in data:
            return f"model: required key {key!r} is missing"
    if not isinstance(data["name"], str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", data["name"]):
        return f"model.name: {data['name']!r} is not a module name"
    if not isinstance(data["sha256"], str) or not re.fullmatch(r"[0-9a-f]{64}", data["sha256"]):
        return f"model.sha256: {data['sha256']!r} is not a sha256"
    if not isinstance(data["file"], str) or not FILE_RE.fullmatch(data["file"]) or "/" in data["file"] \
            or not data["file"].endswith(".tflite"):
        return f"model.file: {data['file']!r} is not a .tflite file name inside the export"
    if not isinstance(data["arena_region"], str) or (data["arena_region"] and not NAME_RE.fullmatch(data["arena_region"])):
        return f"model.arena_region: {data['arena_region']!r} is not a region name"
    for key in ("input_shape", "output_shape"):
        if not _is_shape(data[key]):
            return f"model.{key}: {data[key]!r} is not a shape"
    for key in ("input_shapes", "output_shapes"):
        shapes = data.get(key, [data[key[:-1]]])
        if not isinstance(shapes, list) or not shapes or not all(_is_shape(s) for s in shapes) \
                or shapes[0] != data[key[:-1]]:
            return f"model.{key}: {shapes!r} is not a list of shapes starting with model.{key[:-1]}"
    if not _is_int(data["arena_bytes"]) or data["arena_bytes"] < 0:
        return f"model.arena_bytes: {data['arena_bytes']!r} is not a size"
    if not isinstance(data["layers"], list):
        return "model.layers: expected a list"
    for i, layer in enumerate(data["layers"]):
        if not (isinstance(layer, dict) and _is_int(layer.get("index")) and isinstance(layer.get("op"), str)
                and isinstance(layer.get("function"), str) and (layer["function"] == "" or IDENTIFIER_RE.fullmatch(layer["function"]))
                and layer.get("source") in ("tuned", "default", "library", "folded", "patched")):
            return f"model.layers[{i}]: {layer!r} is not an operator entry"
    if not isinstance(data["plan"], list) or not all(
            isinstance(p, list) and len(p) == 5 and all(_is_int(v) and v >= 0 for v in p) for p in data["plan"]):
        return "model.plan: expected [[tensor, offset, bytes, first, last], ...]"
    return None


def _model_entry(data: dict) -> ModelEntry:
    return ModelEntry(data["name"], data["file"], data["sha256"], tuple(data["input_shape"]),
                      tuple(data["output_shape"]), data["arena_bytes"], data["arena_region"],
                      tuple(LayerFunction(l["index"], l["op"], l["function"], l["source"]) for l in data["layers"]),
                      tuple(PlannedTensor(*p) for p in data["plan"]),
                      tuple(tuple(s) for s in data.get("input_shapes", [data["input_shape"]])),
                      tuple(tuple(s) for s in data.get("output_shapes", [data["output_shape"]])))


@dataclass(frozen=True)
class Manifest:
    target: str
    objective: str  # what every kernel was chosen by, or PER_KERNEL when they differ
    dispatch: CompiledUnit
    kernels: tuple[KernelEntry, ...]
    files: tuple[tuple[str, str], ...]  # file name -> sha256 of its content, sorted by name
    edgetune_version: str = ""
    exported: str = ""  # when
    database: str = ""  # the database the variants were chosen from
    toolchain_versions: tuple[tuple[str, str], ...] | None = None
    manifest_version: int = MANIFEST_VERSION
    model: ModelEntry | None = None  # a model export's model (edgetune model export)

    @property
    def file_digests(self) -> dict[str, str]:
        return dict(self.files)

    def to_json(self) -> dict:
        """The manifest's JSON object (without its checksum, which write_manifest adds)."""
        data = {"manifest_version": self.manifest_version, "edgetune_version": self.edgetune_version,
                "target": self.target, "objective": self.objective, "exported": self.exported,
                "database": self.database, "dispatch": self.dispatch.to_json(),
                "kernels": [k.to_json() for k in self.kernels], "files": dict(self.files)}
        if self.toolchain_versions is not None:
            data["toolchain_versions"] = dict(self.toolchain_versions)
        if self.model is not None:
            data["model"] = self.model.to_json()
        return data

    @classmethod
    def from_json(cls, data, where: str = MANIFEST) -> Manifest:
        """A manifest read from JSON, checked: its checksum, version, required keys and every
        value. ManifestError, naming `where` and the key at fault, when anything is wrong."""
        if not isinstance(data, dict) or "manifest_sha256" not in data:
            raise ManifestError(f"{where}: not an edgetune manifest (no manifest_sha256)")
        body = {k: v for k, v in data.items() if k != "manifest_sha256"}
        if _digest(body) != data["manifest_sha256"]:
            raise ManifestError(f"{where}: checksum mismatch: the manifest was edited or corrupted after export")
        if data.get("manifest_version") != MANIFEST_VERSION:
            raise ManifestError(f"{where}: manifest_version {data.get('manifest_version')!r} is not {MANIFEST_VERSION}")
        for key in ("target", "objective", "kernels", "files", "dispatch"):
            if key not in data:
                raise ManifestError(f"{where}: required key {key!r} is missing")
        problem = _manifest_problem(data) or ("model" in data and _model_problem(data["model"])) or None
        if problem:
            raise ManifestError(f"{where}: {problem}")
        kernels = tuple(_kernel_entry(entry, data["objective"]) for entry in data["kernels"])
        versions = data.get("toolchain_versions")
        return cls(target=data["target"], objective=data["objective"], dispatch=_unit(data["dispatch"]),
                   kernels=kernels, files=tuple(sorted(data["files"].items())),
                   edgetune_version=str(data.get("edgetune_version", "")), exported=str(data.get("exported", "")),
                   database=str(data.get("database", "")),
                   toolchain_versions=tuple(sorted(versions.items())) if isinstance(versions, dict) else None,
                   model=_model_entry(data["model"]) if "model" in data else None)

    def with_exported_values(self, measured: dict[str, tuple[float, dict]]) -> Manifest:
        """This manifest with each kernel's value measured as exported: function -> (the
        chosen-by value, every measured number)."""
        kernels = tuple(replace(k, exported_value=measured[k.function][0],
                                exported_values=tuple(measured[k.function][1].items()))
                        if k.function in measured else k for k in self.kernels)
        return replace(self, kernels=kernels)


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def write_manifest(folder: Path, manifest: Manifest | dict) -> Path:
    """Write manifest.json with a checksum over its own content (hand edits are detected).
    A dict is written as it is (tests and tools write deliberately odd manifests)."""
    data = manifest.to_json() if isinstance(manifest, Manifest) else manifest
    body = {k: v for k, v in data.items() if k != "manifest_sha256"}
    body["manifest_sha256"] = _digest(body)
    path = Path(folder) / MANIFEST
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_manifest(folder: Path) -> Manifest:
    """The manifest of an export folder, checked (Manifest.from_json)."""
    path = Path(folder) / MANIFEST
    if Path(folder).exists() and not Path(folder).is_dir():  # e.g. the .tflite given instead of the export's folder
        raise ManifestError(f"{folder}: not a folder; verify takes the folder the export wrote (its --out)")
    if not Path(folder).is_dir():
        raise ManifestError(f"{folder}: no such export folder")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path}: missing (is {folder} an edgetune export?)") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: not valid JSON ({exc})") from None
    return Manifest.from_json(data, where=str(path))


def _unit(data: dict) -> CompiledUnit:
    return CompiledUnit(data["source"], data["compiler_command"], tuple(data["cflags"]))


def _kernel_entry(entry: dict, manifest_objective: str) -> KernelEntry:
    """One checked kernel entry (_kernels_problem passed) as a KernelEntry. An entry from
    before goals were recorded was chosen by the export's objective, unbounded."""
    placement = entry.get("placement") or {}
    exported_values = entry.get("exported_values")
    return KernelEntry(
        kernel=entry["kernel"], kernel_version=entry["kernel_version"], shape=tuple(entry["shape"].items()),
        function=entry["function"], source=entry["source"], config=tuple(entry["config"].items()),
        objective=entry.get("objective", manifest_objective),
        bounds=tuple(Bound(name, float(limit)) for name, limit in entry.get("bounds", [])),
        chosen_by=entry.get("chosen_by", "default"), value=entry.get("value", 0.0),
        values=tuple(entry.get("values", {}).items()), compiler=entry.get("compiler", ""),
        compiler_command=entry["compiler_command"], cflags=tuple(entry["cflags"]),
        trial_id=entry.get("trial_id", 0), measured=entry.get("measured", ""), toolchain=entry.get("toolchain", ""),
        weights_region=placement.get("weights", ""), activations_region=placement.get("activations", ""),
        exported_value=entry.get("exported_value"),
        exported_values=tuple(exported_values.items()) if isinstance(exported_values, dict) else None,
        definition=entry.get("definition", ""))


def _unit_problem(where: str, unit) -> str | None:
    """A compiled file of the export: {source, compiler_command, cflags}."""
    if not isinstance(unit, dict):
        return f"{where}: expected an object"
    source, command, cflags = unit.get("source"), unit.get("compiler_command"), unit.get("cflags")
    if not isinstance(source, str) or not SOURCE_RE.fullmatch(source):
        return f"{where}.source: {source!r} is not a .c file name inside the export"
    if not isinstance(command, str) or not PROGRAM_RE.fullmatch(command):
        return f"{where}.compiler_command: {command!r} is not a program name or absolute path"
    if not isinstance(cflags, list):
        return f"{where}.cflags: expected a list of flags"
    problem = flags_problem(cflags)  # -mllvm and --param take the next flag as their value
    if problem:
        return f"{where}.cflags[{problem[0]}]: {problem[1]}"
    return None


def _manifest_problem(data: dict) -> str | None:
    if not isinstance(data["target"], str) or not NAME_RE.fullmatch(data["target"]):
        return f"target: {data['target']!r} is not a target name"
    if not isinstance(data["objective"], str) or not VALUE_NAME_RE.fullmatch(data["objective"]):
        return f"objective: {data['objective']!r} is not a measured value's name"
    if not isinstance(data["files"], dict):
        return "files: expected an object of file name -> checksum"
    for name, digest in data["files"].items():
        if not FILE_RE.fullmatch(name):
            return f"files: {name!r} is not a plain file name"
        if not isinstance(digest, str):
            return f"files: {name!r}: checksum {digest!r} is not text"
    problem = _unit_problem("dispatch", data["dispatch"])
    if problem:
        return problem
    if not isinstance(data["kernels"], list):
        return "kernels: expected a list"
    for i, entry in enumerate(data["kernels"]):
        problem = _entry_problem(f"kernels[{i}]", entry) or _measured_problem(f"kernels[{i}]", entry,
                                                                               data["objective"])
        if problem:
            return problem
    return None


def _entry_problem(where: str, entry) -> str | None:
    """What a kernel entry names: its kernel, function, shape and configuration."""
    problem = _unit_problem(where, entry)
    if problem:
        return problem
    for key in ("kernel", "kernel_version", "shape", "function", "config"):
        if key not in entry:
            return f"{where}: required key {key!r} is missing"
    if not isinstance(entry["kernel"], str) or not NAME_RE.fullmatch(entry["kernel"]):
        return f"{where}.kernel: {entry['kernel']!r} is not a kernel name"
    if not _is_int(entry["kernel_version"]):
        return f"{where}.kernel_version: {entry['kernel_version']!r} is not an integer"
    if "definition" in entry and not (isinstance(entry["definition"], str) and DIGEST_RE.fullmatch(entry["definition"])):
        return f"{where}.definition: {entry['definition']!r} is not a sha256 digest"
    if not isinstance(entry["function"], str) or not IDENTIFIER_RE.fullmatch(entry["function"]):
        return f"{where}.function: {entry['function']!r} is not a C identifier"
    for field in ("shape", "config"):
        if not isinstance(entry[field], dict):
            return f"{where}.{field}: expected an object"
        for name, value in entry[field].items():
            if not PARAM_NAME_RE.fullmatch(name):
                return f"{where}.{field}: {name!r} is not a plain name"
            if field == "shape" and not _is_int(value):
                return f"{where}.shape.{name}: {value!r} is not an integer"
            if isinstance(value, str) and not CONFIG_TEXT_RE.fullmatch(value) or \
                    not isinstance(value, (str, int, float, bool)):
                return f"{where}.{field}.{name}: {value!r} is not an allowed value"
    return None


def _measured_problem(where: str, entry: dict, manifest_objective: str) -> str | None:
    """What a kernel entry says was measured, and what chose it (a manifest written before
    goals were recorded has no objective or bounds per kernel: the export's objective, unbounded)."""
    objective, bounds = entry.get("objective", manifest_objective), entry.get("bounds", [])
    if not isinstance(objective, str) or not VALUE_NAME_RE.fullmatch(objective) or objective == PER_KERNEL:
        return f"{where}.objective: {objective!r} is not a measured value's name"
    if not isinstance(bounds, list) or not all(
            isinstance(b, list) and len(b) == 2 and isinstance(b[0], str) and VALUE_NAME_RE.fullmatch(b[0])
            and _is_number(b[1]) for b in bounds):
        return f"{where}.bounds: {bounds!r} are not [[NAME, LIMIT], ...]"
    checks = (("value", _is_number), ("values", lambda v: isinstance(v, dict)),
              ("compiler", lambda v: isinstance(v, str)), ("trial_id", _is_int),
              ("measured", lambda v: isinstance(v, str)),
              ("toolchain", lambda v: isinstance(v, str) and TOOLCHAIN_RE.fullmatch(v)),
              ("exported_value", lambda v: v is None or _is_number(v)),
              ("placement", lambda v: isinstance(v, dict) and set(v) <= {"weights", "activations"}
               and all(isinstance(r, str) and NAME_RE.fullmatch(r) for r in v.values())))
    for key, valid in checks:
        if key in entry and not valid(entry[key]):
            return f"{where}.{key}: {entry[key]!r} is not an allowed value"
    return None


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
