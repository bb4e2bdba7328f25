"""bmm_s8: int8 batched matrix product with TFLite's BATCH_MATMUL arithmetic: both operands
asymmetric (a zero point each, either may be an activation), one per-tensor multiplier and
shift, the output clamped to int8.

    out[b][i][j] = requantise(sum_k (A_b[i][k] - lhs_zero) * (B_b[k][j] - rhs_zero))

A_b is [m][k] (adj_x=0) or stored [k][m] (adj_x=1); B_b is [k][n] (adj_y=0) or stored [n][k]
(adj_y=1): attention's Q K^T is adj_y=1, its probabilities times V adj_y=0. Broadcast batch
dimensions are two int32 tables, the offset of each output batch's matrix in the left and
the right operand (`lhs_offsets`, `rhs_offsets`: TFLite's broadcasting, any pattern).

Parameters: `tile_n` output columns summed together; `vector`: plain C, or Helium in one of
two forms chosen by the layout: where both operands run along k (adj_x=0, adj_y=1),
VMLADAVA.S8 sixteen products per instruction on the raw values with the zero points folded
(sum a*b - rhs_zero sum a - lhs_zero sum b + k lhs_zero rhs_zero, the sums by VADDVA.S8;
tile_n <= 4); otherwise four columns per int32 vector, VMLA by the scalar (a - lhs_zero)
(tile_n a multiple of 4); with adj_x=1 and adj_y=1 neither form applies and only
plain C is offered; `compiler`, `opt`."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from edgetune.hal import Target
from edgetune.tuner import Config, Constraint, Space, choice, powers_of_two

from ..quant import requantize
from ..render import render
from .base import OPT_LEVELS, Buffer, Kernel, KernelError, KernelIO, RenderedKernel, check_elements
from .convolution import MAX_REDUCTION
from .paths import Rule, VectorPath, anywhere, path_constraints, with_vector

SHAPE_KEYS = ("batch", "lhs_batches", "rhs_batches", "m", "n", "k", "adj_x", "adj_y")


def dot_form(shape: Mapping[str, int]) -> bool:
    """Both operands contiguous along k: the Helium path's dot-product form."""
    return shape["adj_x"] == 0 and shape["adj_y"] == 1


def mve_rules(target: Target, shape: Mapping[str, int]) -> list[Rule]:
    if dot_form(shape):
        return [("the Helium dot form keeps two scalar sums per column in even registers: tile_n at most 4",
                 lambda cfg: cfg["tile_n"] <= 4, ("tile_n",))]
    if shape["adj_y"]:  # B runs along k but A does not: neither form's loads are contiguous
        return [("the Helium path needs adj_x=0 where adj_y=1 (the dot form) or adj_y=0 (the column form)",
                 lambda cfg: False, ("tile_n",))]
    lanes = target.vector_unit("mve").lanes_for("int32")
    return [(f"the Helium column form takes {lanes} columns per vector: tile_n a multiple of {lanes}",
             lambda cfg: cfg["tile_n"] % lanes == 0, ("tile_n",))]


PATHS = (
    VectorPath("c", anywhere, "bmm_s8.c.j2"),
    VectorPath("mve", with_vector("mve"), "bmm_s8.c.j2", mve_rules),
)


def operand(data: np.ndarray, offset: int, rows: int, cols: int, transposed: int) -> np.ndarray:
    """One batch's matrix, [rows][cols], from a flat operand at `offset` (stored transposed or not)."""
    flat = data.reshape(-1)[offset:offset + rows * cols].astype(np.int64)
    return flat.reshape(cols, rows).T if transposed else flat.reshape(rows, cols)


class BmmS8(Kernel):
    name = "bmm_s8"
    version = 1
    shape_keys = SHAPE_KEYS
    zero_allowed = ("adj_x", "adj_y")
    description = "int8 batched matrix product (TFLite's BATCH_MATMUL): adj_x/adj_y, broadcast batches, both zero points"
    template = "bmm_s8.c.j2"
    paths = PATHS

    def example_shape(self) -> str:
        return "batch=2,lhs_batches=2,rhs_batches=2,m=16,n=16,k=32,adj_x=0,adj_y=1"

    def check_shape(self, shape: dict[str, int]) -> None:
        if shape["adj_x"] > 1 or shape["adj_y"] > 1:
            raise KernelError(f"shape: adj_x={shape['adj_x']}, adj_y={shape['adj_y']} must be 0 or 1")
        if shape["lhs_batches"] > shape["batch"] or shape["rhs_batches"] > shape["batch"]:
            raise KernelError(f"shape: lhs_batches={shape['lhs_batches']} and rhs_batches={shape['rhs_batches']} "
                              f"may not exceed batch={shape['batch']} (they broadcast to it)")
        if shape["k"] > MAX_REDUCTION:
            raise KernelError(f"shape: k={shape['k']} exceeds {MAX_REDUCTION} (int32 accumulators could overflow)")
        check_elements(lhs=shape["lhs_batches"] * shape["m"] * shape["k"],
                       rhs=shape["rhs_batches"] * shape["k"] * shape["n"], output=shape["batch"] * shape["m"] * shape["n"])

    def space(self, target: Target, shape: Mapping[str, int]) -> Space:
        paths = self.offered_paths(target)
        cover = max(4, 1 << (shape["n"] - 1).bit_length())
        constraints = [Constraint("tile_n larger than needed to cover the columns",
                                  lambda cfg: cfg["tile_n"] <= cover, reads=("tile_n",)),
                       *path_constraints(paths, target, shape)]
        params = [
            powers_of_two("tile_n", 1, 16, "output columns summed together (each load of the left row serves them)"),
            choice("vector", [p.name for p in paths], "plain C (compiler's choice) or Helium/MVE intrinsics"),
            choice("compiler", [cc.name for cc in target.compilers], "compiler from the target description"),
            choice("opt", OPT_LEVELS, "optimisation level"),
        ]
        return Space(params, constraints)

    def make_io(self, shape: Mapping[str, int], rng: np.random.Generator, edge: str = "random") -> KernelIO:
        s = shape
        draw = (lambda size: rng.choice(np.array([-128, 127], dtype=np.int8), size=size)) if edge == "extreme" else \
            (lambda size: rng.integers(-128, 128, size=size, dtype=np.int8))
        batches = np.arange(s["batch"])
        lhs_offsets = ((batches % s["lhs_batches"]) * s["m"] * s["k"]).astype(np.int32)
        rhs_offsets = ((batches % s["rhs_batches"]) * s["k"] * s["n"]).astype(np.int32)
        zeros = [int(rng.choice([-128, 127])) for _ in range(3)] if edge == "extreme" else \
            [int(v) for v in rng.integers(-128, 128, size=3)]
        shift = int(rng.integers(-31, -9)) if edge == "extreme" else int(rng.integers(-20, 0))
        params = (("lhs_zero", zeros[0]), ("rhs_zero", zeros[1]), ("out_zero", zeros[2]),
                  ("multiplier", int(rng.integers(1 << 30, (1 << 31) - 1))), ("shift", shift))
        return KernelIO(buffers=(Buffer("lhs", draw(s["lhs_batches"] * s["m"] * s["k"])),
                                 Buffer("rhs", draw(s["rhs_batches"] * s["k"] * s["n"])),
                                 Buffer("lhs_offsets", lhs_offsets, weight=True),
                                 Buffer("rhs_offsets", rhs_offsets, weight=True),
                                 Buffer("output", np.zeros((s["batch"], s["m"], s["n"]), dtype=np.int8), is_output=True)),
                        params=params)

    def reference(self, shape: Mapping[str, int], io: KernelIO) -> list[np.ndarray]:
        s, p = shape, dict(io.params)
        lhs, rhs, lo, ro = (buf.data for buf in io.buffers[:4])
        out = np.zeros((s["batch"], s["m"], s["n"]), dtype=np.int8)
        for b in range(s["batch"]):
            a = operand(lhs, int(lo[b]), s["m"], s["k"], s["adj_x"]) - p["lhs_zero"]
            w = operand(rhs, int(ro[b]), s["k"], s["n"], s["adj_y"]) - p["rhs_zero"]
            out[b] = requantize(a @ w, p["multiplier"], p["shift"], p["out_zero"])
        return [out]

    def template_vars(self, target: Target, shape: Mapping[str, int], config: Config) -> dict:
        return dict(**shape, tn=int(config["tile_n"]), vector=config["vector"], dot=dot_form(shape))

    def argument_docs(self, shape: Mapping[str, int]) -> dict[str, tuple[str, str]]:
        """The export header's text for each argument (codegen/calling.py asks the kernel)."""
        from ..calling import MULTIPLIER, REQUANT, SHIFT, ZERO_POINT

        s = shape
        a = f"[k={s['k']}][m={s['m']}] (adj_x)" if s["adj_x"] else f"[m={s['m']}][k={s['k']}]"
        b = f"[n={s['n']}][k={s['k']}] (adj_y)" if s["adj_y"] else f"[k={s['k']}][n={s['n']}]"
        return {
            "lhs": ("in", f"left operand, int8, {s['lhs_batches']} matrices {a}, one after another."),
            "rhs": ("in", f"right operand, int8, {s['rhs_batches']} matrices {b}, one after another."),
            "lhs_offsets": ("in", f"int32 [{s['batch']}]: where each output batch's left matrix starts in lhs "
                                  "(broadcast batches repeat an offset)."),
            "rhs_offsets": ("in", f"int32 [{s['batch']}]: where each output batch's right matrix starts in rhs."),
            "output": ("out", f"int8, {s['batch']} matrices [m={s['m']}][n={s['n']}]: "
                              + REQUANT.format(zero="out_zero", lo="-128", hi="127") + "."),
            "lhs_zero": ("in", f"zero point of lhs, in [-128, 127]: {ZERO_POINT}."),
            "rhs_zero": ("in", f"zero point of rhs, in [-128, 127]: {ZERO_POINT}."),
            "out_zero": ("in", "zero point of the output, in [-128, 127], added after requantisation."),
            "multiplier": ("in", MULTIPLIER + " (one for the tensor)."),
            "shift": ("in", SHIFT + " (one for the tensor)."),
        }

    def render_naive(self, target: Target, shape: Mapping[str, int], compiler: str, cflags: tuple[str, ...]) -> RenderedKernel:
        """The plain triple loop per batch: what tuned variants are compared against."""
        fn = self.function_name(shape)
        source = render("bmm_s8_naive.c.j2", dict(fn=fn, prefix=fn, header="kernel.h", **shape))
        return RenderedKernel(source=source, function=fn, declaration=self.declaration(shape, fn=fn),
                              compiler=compiler, cflags=cflags)
