"""A kernel whose search space is cut down by one extra constraint, for benchmarks that
compare code paths (vector=dsp only against vector=c only, packed weights or not).

The restricted kernel is an instance of a subclass of the kernel's own class whose `space`
adds the constraint; `tuning_space` (what a tuning session searches: the kernel's space plus
the target-level parameters such as buffer placement) is built from `space`, so both are
restricted. Shipped kernels only (their classes take no arguments)."""
from __future__ import annotations

from edgetune.codegen import Kernel
from edgetune.tuner import Constraint, Space


def restricted(kernel: Kernel, constraint: Constraint) -> Kernel:
    """`kernel` with `constraint` added to its space (same name and version: same workloads)."""

    class Restricted(type(kernel)):
        def space(self, target, shape) -> Space:
            space = super().space(target, shape)
            return Space(space.params, (*space.constraints, constraint))

    return Restricted()


def one_vector_path(kernel: Kernel, vector: str) -> Kernel:
    """Only configurations with vector=`vector`."""
    return restricted(kernel, Constraint(f"vector={vector} only", lambda c: c["vector"] == vector,
                                               reads=("vector",)))
