"""A kernel whose search space is cut down by one extra constraint, for benchmarks that
compare code paths (vector=dsp only against vector=c only, packed weights or not).

Both spaces are restricted: `space` (the kernel's own parameters) and `tuning_space` (the
one a tuning session searches, with the target-level parameters such as buffer placement).
Wrapping only `space` would not do: the session asks for `tuning_space`, which the wrapped
kernel would build from its own, unrestricted `space`."""
from __future__ import annotations

from edgetune.tuner import Constraint, Space


class Restricted:
    def __init__(self, kernel, constraint: Constraint):
        self.kernel, self.constraint = kernel, constraint

    def __getattr__(self, name):
        return getattr(self.kernel, name)

    def _restrict(self, space: Space) -> Space:
        return Space(space.params, (*space.constraints, self.constraint))

    def space(self, target, shape):
        return self._restrict(self.kernel.space(target, shape))

    def tuning_space(self, target, shape):
        return self._restrict(self.kernel.tuning_space(target, shape))


def one_vector_path(kernel, vector: str) -> Restricted:
    """Only configurations with vector=`vector`."""
    return Restricted(kernel, Constraint(f"vector={vector} only", lambda c: c["vector"] == vector))
