"""Helpers for kernel tests: run one configuration of a kernel on a target through the
tuning session's Evaluator (render -> build -> run -> compare with the numpy reference)."""
from __future__ import annotations

import numpy as np

from edgetune.session import Evaluator
from edgetune.tuner import Outcome, Trial


def run_config(kernel, target, shape, values: dict, tmp_path, edge="random", seed=0) -> Trial:
    """Measure the configuration `values` (a full or partial mapping: missing parameters take
    the space's first legal value with the given ones) on inputs drawn with `seed`."""
    space = kernel.space(target, shape)
    config = complete(space, values)
    io = kernel.make_io(shape, np.random.default_rng(seed), edge=edge)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return Evaluator(kernel, target, shape, space, io, work)(config)


def complete(space, values: dict):
    """The first legal configuration that has the given parameter values."""
    for config in space:
        if all(config[k] == v for k, v in values.items()):
            return config
    raise AssertionError(f"no legal configuration has {values}")


def assert_ok(trial: Trial) -> None:
    assert trial.outcome is Outcome.OK, f"{trial.config.key()}: {trial.outcome.value}: {trial.error}"
