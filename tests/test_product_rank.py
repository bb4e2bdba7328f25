"""Ranking compiled code by instructions per product (edgetune.tuner.product_rank): the
estimate from the multiplying loops or from straight-line code, no estimate where nothing
multiplies, and its fit on a kernel's recorded spaces (two at least) as the gate's evidence."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from edgetune.tuner import Trial
from edgetune.tuner.code_explore import KernelFit
from edgetune.tuner.product_rank import (ProductRanker, estimates, holds_products, instructions_per_product,
                                         product_fit_among)
from edgetune.tuner.recorded import load_recorded

from test_code_rank import write_space


def test_instructions_per_product_reads_the_multiplying_loops_first():
    looped = {"instructions": 400, "multiplies": 40, "mac_loop_instructions": 12, "mac_loop_multiplies": 32}
    assert instructions_per_product(looped) == 12 / 32
    # Straight-line code (no loop multiplies): every instruction runs once.
    unrolled = dict(looped, mac_loop_instructions=0, mac_loop_multiplies=0)
    assert instructions_per_product(unrolled) == 400 / 40
    assert instructions_per_product(dict(unrolled, multiplies=0)) is None  # nothing multiplies
    assert instructions_per_product({"instructions": 400, "hot_mac": 2}) is None  # recorded before products


def test_the_ranker_orders_by_the_estimate_and_ranks_no_estimate_last():
    rows = [{"instructions": 90, "multiplies": 2, "mac_loop_instructions": 9, "mac_loop_multiplies": 2},
            {"instructions": 90, "multiplies": 0, "mac_loop_instructions": 0, "mac_loop_multiplies": 0},
            {"instructions": 90, "multiplies": 32, "mac_loop_instructions": 9, "mac_loop_multiplies": 32}]
    predicted = ProductRanker().predict(rows)
    assert list(np.argsort(predicted)) == [2, 0, 1] and np.isinf(predicted[1])


def test_the_static_profile_ranks_when_every_row_has_one():
    # Instructions per product would put row 0 first (9/32 against 9/2); the profile (what a
    # call runs, trip counts worked out) says row 1 runs fewer instructions, and decides.
    rows = [{"instructions": 90, "multiplies": 32, "mac_loop_instructions": 9, "mac_loop_multiplies": 32,
             "profile_instructions": 5000.0},
            {"instructions": 90, "multiplies": 2, "mac_loop_instructions": 9, "mac_loop_multiplies": 2,
             "profile_instructions": 4000.0}]
    assert list(np.argsort(estimates(rows))) == [1, 0]
    # One row without a profile (recorded before it existed): all rank on one basis, per product.
    mixed = [rows[0], {k: v for k, v in rows[1].items() if k != "profile_instructions"}]
    assert list(np.argsort(estimates(mixed))) == [0, 1]


def test_its_fit_is_its_worst_rank_correlation_on_the_kernels_spaces_on_the_target(tmp_path):
    spaces = [load_recorded(write_space(tmp_path, name, scale)) for name, scale in (("a", 1), ("b", 3), ("c", 7))]
    assert all(holds_products(s) for s in spaces)
    ranker = ProductRanker()
    fits = [ranker.agreement(s) for s in spaces]
    assert min(fits) > 0.5  # the toy's Helium code costs less and computes 16 products per MAC
    assert product_fit_among(spaces, "toy", "cortex-m55") == KernelFit(min(fits), 3)
    # A space of the kernel whose cost the code does not explain (its order reversed) pulls it down ...
    odd = replace(spaces[1], trials={i: Trial(t.config, t.outcome, {"instructions": 1e6 / t.value("instructions")})
                                     for i, t in spaces[1].trials.items()})
    assert product_fit_among([spaces[0], odd], "toy", "cortex-m55").rho < 0
    # ... but only on its own target, and the fit says on how many shapes; another kernel or
    # target gives none.
    elsewhere = load_recorded(write_space(tmp_path, "m4", 5, target="cortex-m4"))
    assert product_fit_among([*spaces[:2], elsewhere], "toy", "cortex-m55") == KernelFit(min(fits[:2]), 2)
    assert product_fit_among([spaces[0], elsewhere], "toy", "cortex-m55") == KernelFit(fits[0], 1)
    assert product_fit_among([elsewhere], "toy", "cortex-m55") is None
    assert product_fit_among(spaces, "other", "cortex-m55") is None
    assert product_fit_among(spaces, "toy", "cortex-a53") is None
