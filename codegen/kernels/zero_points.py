"""Zero points chosen for standalone tuning (issue 29, goal 5): the int8 kernels tune on
TFLite's conventions (kernel.tuning_edge: weights symmetric, zero point 0), and a
deployment with other zero points (asymmetric weights, a fixed input zero point) takes
other branches. `edgetune tune --zero-point NAME=VALUE` measures those: a copy of the kernel
whose tuning draw has the named scalar parameters set (Kernel.tuning_io applies them). The
workload's identity carries them (edgetune.session.workload_of), so trials measured on
them are never mixed with trials on the convention's draw."""
from __future__ import annotations

import copy
from typing import Mapping

import numpy as np

from .base import Kernel, KernelError

ZERO_SUFFIX = "_zero"


def zero_point_names(kernel: Kernel, shape: Mapping[str, int]) -> tuple[str, ...]:
    """The kernel's scalar parameters that are zero points (named *_zero), in argument order."""
    io = kernel.make_io(shape, np.random.default_rng(0))
    return tuple(name for name, _ in io.params if name.endswith(ZERO_SUFFIX))


def zero_point_range(kernel: Kernel, shape: Mapping[str, int]) -> tuple[int, int]:
    """What a zero point may be: the range of the kernel's (first) activation input type."""
    io = kernel.make_io(shape, np.random.default_rng(0))
    data = next((b.data for b in io.buffers if not b.is_output and not b.weight), None)
    if data is None or data.dtype.kind not in "iu":
        raise KernelError(f"{kernel.name} has no integer activation input: no zero points to set")
    info = np.iinfo(data.dtype)
    return int(info.min), int(info.max)


def with_zero_points(kernel: Kernel, shape: Mapping[str, int], points: Mapping[str, int]) -> Kernel:
    """A copy of `kernel` tuning on `points` (name -> value) over its usual draw; each name
    checked against the kernel's zero points and each value against its activation type."""
    if not points:
        return kernel
    names = zero_point_names(kernel, shape)
    low, high = zero_point_range(kernel, shape) if names else (0, 0)
    for name, value in points.items():
        if name not in names:
            have = f"its zero points are {', '.join(names)}" if names else "it has no zero point parameter"
            raise KernelError(f"--zero-point {name}={value}: {kernel.name} has no zero point {name!r} ({have})")
        if not low <= value <= high:
            raise KernelError(f"--zero-point {name}={value}: out of the range [{low}, {high}] of {kernel.name}'s "
                              "activations")
    chosen = copy.copy(kernel)
    chosen.tuning_zero_points = tuple(sorted(points.items()))
    return chosen


def parse_zero_points(texts: tuple[str, ...]) -> dict[str, int]:
    """`--zero-point NAME=VALUE` options as a mapping; a malformed or repeated one is refused."""
    points: dict[str, int] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name.isidentifier() or not value.lstrip("-").isdigit() or len(value) > 8:
            raise KernelError(f"--zero-point {text!r}: give NAME=INTEGER, e.g. b_zero=3")
        if name in points:
            raise KernelError(f"--zero-point {name}: given twice")
        points[name] = int(value)
    return points
