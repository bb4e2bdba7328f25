"""Ranking compiled candidates by instructions per product: a cost estimate from the code alone.

Static counts know no trip counts, so a learnt model of them (tuner.code_rank.CodeRanker)
can order a space and still miss its top: the loop that runs once per multiply weighs what
a copy loop that runs once per pixel does. But a kernel's multiplies are fixed by its shape
(a matmul computes m*n*k products however it is tiled), so the loops that multiply run
about products / (products per iteration) times, and their share of the run is the
instructions they spend per product. That ratio, read from a variant's disassembly
(edgetune.targets.code_features: `mac_loop_instructions / mac_loop_multiplies`, the
innermost loops that multiply; code without such a loop is straight-line, and then every
instruction runs once: `instructions / multiplies`), needs no training and no centring, and
compares shapes directly. Of the six recorded M55 spaces, it puts the best configuration
among its first four on five (docs/code-ranking-live.md).

Where the features carry a static profile (`profile_instructions`: the instructions one call
runs, estimated with the loops' trip counts worked out from the code, edgetune.targets.
static_profile), that ranks instead: it weighs each loop by how often it runs, which
instructions per product cannot (O3's loop versions and a requantization's skipped branches
count as if each ran), and ranks the Cortex-M4's matmul_s8 spaces at 0.97 where
instructions per product ranked them at 0.74-0.77 (docs/static-profile.md). Rows are ranked
on one basis: the profile when every row has it, else instructions per product.

`ProductRanker` ranks as a CodeRanker does (predicted_ranks, agreement), so the replays and
benchmarks that scored a learnt ranker score this one the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .recorded import RecordedSpace
from .code_explore import KernelFit
from .code_rank import agreement_on

Features = Mapping[str, float]
PRODUCT_FEATURES = ("instructions", "multiplies", "mac_loop_instructions", "mac_loop_multiplies")
PROFILE_FEATURE = "profile_instructions"


def instructions_per_product(features: Features) -> float | None:
    """Instructions per product of the multiplying loops (of the whole code where no loop
    multiplies); None for code that multiplies nothing, or features recorded before
    multiplies were counted."""
    if any(name not in features for name in PRODUCT_FEATURES):
        return None
    if features["mac_loop_multiplies"] > 0:
        return features["mac_loop_instructions"] / features["mac_loop_multiplies"]
    if features["multiplies"] > 0:
        return features["instructions"] / features["multiplies"]
    return None


def holds_products(space: RecordedSpace) -> bool:
    """Whether a recorded space's features count multiplies (recorded or recomputed since)."""
    return bool(space.features) and all(
        all(name in feats for name in PRODUCT_FEATURES) for feats in space.features.values())


def estimates(rows: Sequence[Features]) -> np.ndarray:
    """Each row's estimated cost, lower is better, on one basis for all: the static profile's
    instructions when every row has one, else instructions per product (inf where a row has
    neither)."""
    if rows and all(PROFILE_FEATURE in row for row in rows):
        return np.array([float(row[PROFILE_FEATURE]) for row in rows], dtype=float)
    return np.array([_or_inf(instructions_per_product(row)) for row in rows], dtype=float)


@dataclass(frozen=True)
class ProductRanker:
    """Ranks by the code's estimated cost (`estimates`: the static profile, else instructions
    per product; lower is better; no estimate ranks last). It learns from nothing, so it holds
    nothing."""

    def predict(self, rows: Sequence[Features]) -> np.ndarray:
        """Each row's estimated cost (inf where there is none)."""
        return estimates(rows)

    def predicted_ranks(self, space: RecordedSpace) -> dict[int, float]:
        indices = sorted(space.features)
        return dict(zip(indices, estimates([space.features[i] for i in indices]).tolist()))

    def agreement(self, space: RecordedSpace) -> float:
        """How well the estimate ranks a recorded space (code_rank.agreement_on)."""
        return agreement_on(self.predicted_ranks(space), space)


def _or_inf(value: float | None) -> float:
    return np.inf if value is None else float(value)


def spaces_with_products(spaces: Sequence[RecordedSpace], kernel: str, target: str = "") -> list[RecordedSpace]:
    """The recorded spaces of `kernel` (on `target`, where given) whose features count products:
    the ones instructions per product can be judged on."""
    return [s for s in spaces if s.kernel == kernel and holds_products(s) and (not target or s.target == target)]


def product_fit_among(spaces: Sequence[RecordedSpace], kernel: str, target: str = "") -> KernelFit | None:
    """How well the code estimate (`estimates`) ranks the recorded spaces of `kernel` (on `target`,
    where given) among `spaces` (the space being tuned already left out): the lowest rank
    correlation and the number of spaces, or None when none counts multiplies. It is the
    evidence, before any trial is measured, that the estimate knows the kernel's code
    (tuner.code_explore's gate): with the static profile the matmul_s8 spaces rank at
    0.998-0.999 on the M55 and 0.99-0.999 on the M4, dwconv2d_s8's on the M4 at 0.965-0.995
    (by instructions per product: 0.83-0.88, 0.74-0.77, 0.15)."""
    siblings = spaces_with_products(spaces, kernel, target)
    if not siblings:
        return None
    return KernelFit(min(ProductRanker().agreement(s) for s in siblings), len(siblings))
