"""Helpers for kernel tests: run one configuration of a kernel on a target through the
tuning Evaluator (render, then the measuring pipeline: build -> run -> compare with the numpy
reference)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from edgetune.evaluate import Evaluator
from edgetune.targets.measure import MeasureResult
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


def assert_ok(measured: "Trial | MeasureResult") -> None:
    """A trial, or a measurement of a source that is no configuration, came out right."""
    where = f"{measured.config.key()}: " if isinstance(measured, Trial) else ""
    assert measured.outcome is Outcome.OK, f"{where}{measured.outcome.value}: {measured.error}"


def check_drawn_variants(kernel, targets, shapes, vector: str, work, examples: int = 10) -> None:
    """Hypothesis draws a target, a shape (from the `shapes` strategy of shape dicts), one
    legal configuration of the `vector` path, inputs (random or saturating) and a seed; every
    drawn variant must match the reference. No shrinking: each example builds and runs."""
    @settings(max_examples=examples, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])
    @given(shape=shapes, seed=st.integers(0, 2**16), data=st.data(), edge=st.sampled_from(["random", "extreme"]))
    def run(shape, seed, data, edge):
        target = data.draw(st.sampled_from(list(targets)), "target")
        shape = kernel.parse_shape(shape)
        space = kernel.space(target, shape)
        indices = [int(i) for i in space.legal_indices() if space.config_at(int(i))["vector"] == vector]
        config = space.config_at(data.draw(st.sampled_from(indices), "config index"))
        io = kernel.make_io(shape, np.random.default_rng(seed), edge=edge)
        trial = Evaluator(kernel, target, shape, space, io, work)(config)
        assert trial.outcome is Outcome.OK, f"{shape} {config.key()}: {trial.outcome.value}: {trial.error}"

    run()


def _window_fits(shape: dict) -> bool:
    """Every axis has at least one output: the dilated kernel spans no more than the
    input plus its padding on that axis."""
    return all(shape[f"dilation_{a}"] * (shape[f"k{a}"] - 1) + 1 <= shape[a] + shape[before] + shape[after]
               for a, before, after in (("h", "pad_top", "pad_bottom"), ("w", "pad_left", "pad_right")))


PAD_SIDES = ("pad_top", "pad_bottom", "pad_left", "pad_right")


def _unpadded(shape: dict) -> dict:
    return {**shape, **dict.fromkeys(PAD_SIDES, 0)}


def geometry_shapes(channels: dict, size: int = 8, kernel: int = 3, pad: int = 3):
    """Convolution shapes with TFLite's full geometry drawn independently per axis and per
    side (asymmetric padding, stride and dilation per axis), plus the kernel's channel keys
    (strategies), keeping only shapes with an output. A quarter have no padding at all (the
    variants' fast paths), which independent sides would almost never give."""
    padded = st.fixed_dictionaries({
        "h": st.integers(1, size), "w": st.integers(1, size), **channels,
        "kh": st.integers(1, kernel), "kw": st.integers(1, kernel),
        "stride_h": st.integers(1, 3), "stride_w": st.integers(1, 3),
        "dilation_h": st.integers(1, 2), "dilation_w": st.integers(1, 2),
        "pad_top": st.integers(0, pad), "pad_bottom": st.integers(0, pad),
        "pad_left": st.integers(0, pad), "pad_right": st.integers(0, pad),
    })
    return st.one_of(padded, padded, padded, padded.map(_unpadded)).filter(_window_fits)
