"""One-operator BATCH_MATMUL models for the tests (tests/test_bmm.py), written with the model
writer: both operands activations, or the right one a constant."""
from __future__ import annotations

import numpy as np

from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator, Quantization, Tensor


def operand_shape(batch: tuple[int, ...], rows: int, cols: int, transposed: bool) -> tuple[int, ...]:
    return (*batch, cols, rows) if transposed else (*batch, rows, cols)


def bmm_model(rng, lhs_batch, rhs_batch, out_batch, m, n, k, adj_x=False, adj_y=False, const_rhs=False,
              edge="random") -> bytes:
    extreme = edge == "extreme"
    zeros = [int(rng.choice([-128, 127])) if extreme else int(rng.integers(-128, 128)) for _ in range(3)]
    ls, rs = float(np.float32(rng.uniform(0.01, 0.1))), float(np.float32(rng.uniform(0.01, 0.1)))
    typical = ls * rs * 73 * 73 * np.sqrt(k) / 128
    out_scale = float(np.float32(typical / 50 if extreme else typical * rng.uniform(0.3, 3)))
    rshape = operand_shape(rhs_batch, k, n, adj_y)
    if const_rhs:
        rhs = constant(1, "rhs", rng.integers(-127, 128, size=rshape, dtype=np.int8), Quantization((rs,), (0,)))
    else:
        rhs = Tensor(1, "rhs", rshape, "int8", Quantization((rs,), (zeros[1],)))
    tensors = [Tensor(0, "lhs", operand_shape(lhs_batch, m, k, adj_x), "int8", Quantization((ls,), (zeros[0],))), rhs,
               Tensor(2, "output", (*out_batch, m, n), "int8", Quantization((out_scale,), (zeros[2],)))]
    op = Operator(0, "BATCH_MATMUL", (0, 1), (2,), "BatchMatMulOptions", (("adjX", adj_x), ("adjY", adj_y)))
    return build_model(tensors, [op], [0] if const_rhs else [0, 1], [2])
