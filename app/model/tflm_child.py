"""The child process of the isolated TFLite Micro oracle (oracle.py, `run_tflm_isolated`):
run as a script by file path (`python tflm_child.py DIR FIRST COUNT OUTPUTS ARENA`), so it imports
only numpy and tflite_micro, not edgetune.

DIR holds `model.tflite` and, per case n, `case{n}.npz` (the model's inputs `arr_0`, `arr_1`,
... in its order). Cases FIRST .. COUNT-1 run one after the other in one interpreter process;
each one's outputs go to `out{n}.npz` as soon as it has them (renamed into place whole), or,
when the interpreter raises, its message to `err{n}.txt`. A case that kills the process (TFLite
Micro aborts with SIGABRT on some inputs) leaves neither file: the parent names it and starts a
new child at the next case.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np


def run_case(runtime, folder: Path, n: int, n_outputs: int, arena: int) -> None:
    interpreter = runtime.Interpreter.from_file(str(folder / "model.tflite"), arena_size=arena)
    with np.load(folder / f"case{n}.npz") as saved:
        inputs = [saved[f"arr_{k}"] for k in range(len(saved.files))]
    for k, x in enumerate(inputs):
        interpreter.set_input(x, k)
    interpreter.invoke()
    outputs = [np.array(interpreter.get_output(k)) for k in range(n_outputs)]
    partial = folder / f"out{n}.partial.npz"
    np.savez(partial, *outputs)
    os.replace(partial, folder / f"out{n}.npz")


def main(argv: list[str]) -> int:
    folder, first, count, n_outputs, arena = Path(argv[0]), int(argv[1]), int(argv[2]), int(argv[3]), int(argv[4])
    from tflite_micro import runtime

    for n in range(first, count):
        try:
            run_case(runtime, folder, n, n_outputs, arena)
        except (RuntimeError, ValueError) as exc:  # the interpreter's own refusal of the model or input
            (folder / f"err{n}.txt").write_text(str(exc).strip()[:600] or type(exc).__name__, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
