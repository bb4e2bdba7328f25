"""SPLIT, SPLIT_V, UNPACK and PACK (app/model/ops/split.py) on the Cortex-M55 (QEMU, exact
instruction counts): each operator's plain C byte loop beside the C edgetune exports for the
M55 (runs copied 16 bytes a step by Helium), measured in the same run on the same input, every
output checked against the operator's numpy reference (itself checked bit for bit against
TFLite Micro by tests/test_ops_split.py).

The cases are the shapes users' models give them: a GRU's and an LSTM's gates (SPLIT of a
fully connected layer's 48 or 64 values), a feature map split by channels, an unrolled
sequence (UNPACK), the states packed back (PACK); at most 7 parts, as the harness takes 8 buffers.

usage: .venv/bin/python bench/moves.py [--target cortex-m55]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor, read_graph
from edgetune.model.operators import operator_params
from edgetune.targets import get_target

sys.path.insert(0, str(Path(__file__).parent))

from ops import measure  # noqa: E402  (bench/ops.py: one call of an operator measured, every output checked)

Q = Quantization((0.05,), (3,))


@dataclass(frozen=True)
class Case:
    op: str  # SPLIT (equal parts of the input along `axis`), UNPACK or PACK
    shape: tuple[int, ...]  # SPLIT, UNPACK: the input's; PACK: each input's
    axis: int
    parts: int  # outputs (SPLIT, UNPACK) or inputs (PACK)
    what: str


CASES = (
    Case("SPLIT", (1, 48), 1, 3, "a GRU's three gates"),
    Case("SPLIT", (1, 64), 1, 4, "an LSTM's four gates"),
    Case("SPLIT", (1, 16, 16, 32), 3, 2, "a feature map's channels in halves"),
    Case("SPLIT", (1, 8, 8, 12), 3, 3, "channels in thirds, runs of 4"),
    Case("UNPACK", (1, 6, 12), 1, 6, "an unrolled sequence of 6 steps"),
    Case("PACK", (1, 16), 1, 6, "6 states packed back"),
)


def _tensor(index: int, shape) -> Tensor:
    return Tensor(index, f"t{index}", tuple(shape), "int8", Q)


def params_of(case: Case, work: Path):
    """The operator's parameters from a one-operator model written and read back."""
    shape, axis, n = case.shape, case.axis, case.parts
    if case.op == "PACK":
        tensors = [_tensor(i, shape) for i in range(n)] + [_tensor(n, (*shape[:axis], n, *shape[axis:]))]
        op = Operator(0, "PACK", tuple(range(n)), (n,), "PackOptions", (("valuesCount", n), ("axis", axis)))
        inputs, outputs = list(range(n)), [n]
    elif case.op == "UNPACK":
        part = (*shape[:axis], *shape[axis + 1:])
        tensors = [_tensor(0, shape)] + [_tensor(k + 1, part) for k in range(n)]
        op = Operator(0, "UNPACK", (0,), tuple(range(1, n + 1)), "UnpackOptions", (("num", n), ("axis", axis)))
        inputs, outputs = [0], list(range(1, n + 1))
    else:
        part = tuple(d // n if k == axis else d for k, d in enumerate(shape))
        tensors = [constant(0, "axis", np.array(axis, dtype=np.int32)), _tensor(1, shape)]
        tensors += [_tensor(k + 2, part) for k in range(n)]
        op = Operator(0, "SPLIT", (0, 1), tuple(range(2, n + 2)), "SplitOptions", (("numSplits", n),))
        inputs, outputs = [1], list(range(2, n + 2))
    path = work / f"{case.op.lower()}.tflite"
    path.write_bytes(build_model(tensors, [op], inputs, outputs))
    graph = read_graph(path)
    return operator_params(graph, graph.operators[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="cortex-m55")
    args = parser.parse_args()
    target = get_target(args.target)
    rng = np.random.default_rng(0)
    print(f"{'operator':<10}{'shape':<16}{'parts':>6}{'plain C':>10}{'exported':>10}{'ratio':>7}   "
          f"what ({target.measures})")
    with tempfile.TemporaryDirectory(prefix="edgetune-bench-moves-") as root:
        for n, case in enumerate(CASES):
            work = Path(root) / str(n)
            work.mkdir()
            params = params_of(case, work)
            inputs = [rng.integers(-128, 128, size=s, dtype=np.int8) for s in params.input_shapes]
            plain = measure(params, params.render("et_op"), inputs, target, work / "plain")
            exported = measure(params, params.render("et_op", target=target), inputs, target, work / "target")
            shape = "x".join(map(str, case.shape))
            print(f"{case.op:<10}{shape:<16}{case.parts:>6}{plain:>10,}{exported:>10,}{exported / plain:>7.2f}   "
                  f"{case.what}")


if __name__ == "__main__":
    main()
