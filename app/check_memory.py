"""What the TFLite Micro check of a model's layers found, remembered by content.

Re-running a finished `model tune` chooses the same variants; checking them again against
TFLite Micro (a build and two runs per layer, a minute on a small model) would only repeat
a verdict. A verdict is remembered under a digest of everything it depends on: the model
file's bytes, the layer, the variant (kernel, its version and definition, configuration),
the target's measurement fingerprint (tool versions, memory map, runner), the seed of the
check's inputs, and the versions of edgetune and TFLite Micro. Anything different is
another key, checked afresh. Only bit-exact verdicts are remembered: a difference, or a
variant that did not build, is checked again, so a fixed cause shows at once.

The verdicts live in edgetune's cache folder (`model-checks/`), one small JSON file each,
written whole and renamed into place; an unreadable one is ignored and checked again.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path

from edgetune.targets.toolchain import cache_dir

from . import __version__

FOLDER = "model-checks"


def check_key(model_bytes: bytes, layer_index: int, seed: int, fingerprint: str, kernel, config_key: str) -> str:
    """The digest a layer's verdict is remembered under (see the module docstring)."""
    try:
        oracle = metadata.version("tflite-micro")
    except metadata.PackageNotFoundError:
        oracle = "absent"
    parts = (hashlib.sha256(model_bytes).hexdigest(), str(layer_index), str(seed), fingerprint, kernel.name,
             str(kernel.version), getattr(kernel, "definition", ""), config_key, __version__, oracle)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def recall(key: str) -> int | None:
    """How many inputs matched when this key was checked bit-exact; None if never (or unreadable)."""
    try:
        data = json.loads((cache_dir() / FOLDER / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    inputs = data.get("inputs") if isinstance(data, dict) else None
    return inputs if isinstance(inputs, int) and not isinstance(inputs, bool) and inputs > 0 else None


def remember(key: str, inputs: int) -> None:
    """Remember a bit-exact verdict on `inputs` inputs (a failure to write only costs a re-check)."""
    folder = cache_dir() / FOLDER
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"inputs": inputs}, out)
        os.replace(tmp, folder / f"{key}.json")
    except OSError:
        Path(tmp).unlink(missing_ok=True)
