"""Inputs and TFLite Micro's outputs for a user's own firmware test (`model verify
--save-vectors DIR`), and inputs of the user's own (`model verify --input FILE`).

A firmware that links an exported model module wants to check, in its own test, that its
build computes what TFLite Micro computes: it needs inputs and the outputs to expect. The
folder gets, for each input case, the model's inputs and the oracle's outputs as raw int8
files (`case0_input0.bin`, `case0_output0.bin`), `vectors.json` saying which is which, and
`edgetune_vectors.h`, the same as C arrays (`et_case0_input0`, `et_case0_expected0`) with
their counts, to compile into the test.

An input file holds one case: every input of the model, in the model's order, as int8
values: raw bytes, or a `.npy` array of int8 holding exactly that many values.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from edgetune.model import Model
from edgetune.errors import EdgetuneError

from .reference import model_outputs

HEADER = "edgetune_vectors.h"
PER_LINE = 16


class VectorError(EdgetuneError):
    """An input file that is not one input case of the model."""


def read_input_files(paths, shapes: tuple[tuple[int, ...], ...]) -> list[tuple[str, list[np.ndarray]]]:
    """Each file as one case (label: its name), split into the model's inputs."""
    sizes = [int(np.prod(s)) for s in shapes]
    cases = []
    for path in map(Path, paths):
        try:
            values = np.load(path, allow_pickle=False) if path.suffix == ".npy" else np.fromfile(path, dtype=np.int8)
        except (OSError, ValueError) as exc:
            raise VectorError(f"{path}: cannot be read as int8 values ({exc})") from None
        if values.dtype != np.int8 or values.size != sum(sizes):
            raise VectorError(f"{path}: holds {values.size} {values.dtype} values; the model's inputs take "
                              f"{sum(sizes)} int8 values ({' + '.join(map(str, sizes))}, in the model's order)")
        parts = np.split(values.reshape(-1), np.cumsum(sizes)[:-1])
        cases.append((path.name, [p.reshape(s) for p, s in zip(parts, shapes)]))
    return cases


def save_vectors(out: Path, model: Model, data: bytes, cases: list[tuple[str, list[np.ndarray]]],
                 outputs: list[list[np.ndarray]] | None = None) -> list[Path]:
    """Write every case's inputs and the oracle's outputs (`outputs`, one list per case, or
    computed here) into `out` (see the module); the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written, index, arrays = [], [], []
    for n, (label, xs) in enumerate(cases):
        found = outputs[n] if outputs is not None else model_outputs(model, data, xs)
        wants = [np.asarray(w, dtype=np.int8) for w in found]
        entry = {"label": label, "inputs": [], "outputs": []}
        for kind, key, values in [("input", "inputs", x) for x in xs] + [("output", "outputs", w) for w in wants]:
            k = len(entry[key])
            name = f"case{n}_{kind}{k}.bin"
            (out / name).write_bytes(np.ascontiguousarray(values, dtype=np.int8).tobytes())
            written.append(out / name)
            entry[key].append({"file": name, "shape": list(values.shape)})
            arrays.append(_c_array(f"et_case{n}_{'input' if kind == 'input' else 'expected'}{k}", values, label))
        index.append(entry)
    (out / "vectors.json").write_text(json.dumps({"cases": index}, indent=2) + "\n", encoding="utf-8")
    (out / HEADER).write_text(_header(arrays, len(cases)), encoding="utf-8")
    return [*written, out / "vectors.json", out / HEADER]


def _c_array(name: str, values: np.ndarray, label: str) -> str:
    flat = [str(int(v)) for v in values.reshape(-1)]
    rows = [", ".join(flat[i:i + PER_LINE]) for i in range(0, len(flat), PER_LINE)]
    comment = "".join(c if c.isalnum() or c in " ._-" else "_" for c in label)  # a file name: never ends a comment
    return (f"/* {comment}: shape {list(values.shape)} */\n#define {name.upper()}_COUNT {len(flat)}\n"
            f"static const int8_t {name}[{len(flat)}] = {{\n    " + ",\n    ".join(rows) + "\n};\n")


def _header(arrays: list[str], cases: int) -> str:
    return ("/* Test vectors written by `edgetune model verify --save-vectors`: each case's model inputs\n"
            " * (et_caseN_inputK) and the outputs TFLite Micro computes for them (et_caseN_expectedK). */\n"
            "#ifndef EDGETUNE_VECTORS_H\n#define EDGETUNE_VECTORS_H\n#include <stdint.h>\n\n"
            f"#define ET_VECTOR_CASES {cases}\n\n" + "\n".join(arrays) + "\n#endif\n")
