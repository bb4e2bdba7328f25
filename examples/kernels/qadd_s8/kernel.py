"""Saturating int8 add, y[i] = clamp(a[i] + b[i], -128, 127), with a Helium (MVE) vector
path: offered where the target's HAL lists the `mve` vector unit (the Cortex-M55), absent
elsewhere (the host tunes the plain C path only)."""
import numpy as np

import edgetune as et


def reference(shape, inputs):
    total = inputs["a"].astype(np.int16) + inputs["b"].astype(np.int16)
    return np.clip(total, -128, 127).astype(np.int8)


KERNEL = et.KernelDef(
    name="qadd_s8",
    shape=("n",),
    source="qadd_s8.c.j2",
    args=[et.Input("a", "int8", "n"), et.Input("b", "int8", "n"), et.Output("y", "int8", "n")],
    params={"unroll": [1, 2, 4, 8]},
    vectors=[et.Vector("c"),
             et.Vector("mve", requires="mve", restrictions=["unroll <= 4"])],
    reference=reference,
    example_shape="n=100",
    description="saturating int8 elementwise add",
)
