"""A cascade of biquad IIR sections in Q31, in the conventions CMSIS-DSP documents for
arm_biquad_cascade_df1_q31 (Direct Form I):

- coefficients, 5 per stage in stage order: {b0, b1, b2, a1, a2}, each Q31 and scaled down
  by 2^post_shift (so a filter's coefficients may lie in [-2^post_shift, 2^post_shift));
  the feedback coefficients enter with a plus sign, y[n] = b0 x[n] + b1 x[n-1] + b2 x[n-2]
  + a1 y[n-1] + a2 y[n-2] (a design tool's -a1, -a2 negated);
- state, 4 values per stage in stage order: {x[n-1], x[n-2], y[n-1], y[n-2]};
- arithmetic: the five products summed in a 64-bit accumulator (2.62), shifted right by
  31 - post_shift (arithmetic shift: truncation, no rounding) and kept to 32 bits (wraps,
  no saturation); each stage's output is the next stage's input.

CMSIS-DSP updates the state in place; here the state after the block is written to
`state_out` (the same layout), which the caller passes as `state` next time.
Inputs are kept in [-0.25, 0.25) and coefficients in [-0.5, 0.5) (Q31), so the 64-bit sum
cannot overflow (C would call that undefined behaviour; CMSIS documents a wrap).
"""
import numpy as np

import edgetune as et

Q31 = 1 << 31


def wrap32(value: int) -> int:
    return (value + Q31) % (1 << 32) - Q31


def reference(shape, inputs):
    x, coeffs, state = (inputs[name].astype(np.int64).tolist() for name in ("x", "coeffs", "state"))
    shift = 31 - inputs["post_shift"]
    y = list(x)
    state_out = list(state)
    for stage in range(shape["stages"]):
        b0, b1, b2, a1, a2 = coeffs[5 * stage: 5 * stage + 5]
        x1, x2, y1, y2 = state[4 * stage: 4 * stage + 4]
        for n, xn in enumerate(y):
            acc = b0 * xn + b1 * x1 + b2 * x2 + a1 * y1 + a2 * y2
            yn = wrap32(acc >> shift)
            x2, x1, y2, y1 = x1, xn, y1, yn
            y[n] = yn
        state_out[4 * stage: 4 * stage + 4] = [x1, x2, y1, y2]
    return {"y": np.array(y, dtype=np.int32), "state_out": np.array(state_out, dtype=np.int32)}


KERNEL = et.KernelDef(
    name="biquad_q31",
    shape=("stages", "block"),
    source="biquad_q31.c.j2",
    args=[et.Input("x", "int32", "block", low=-(1 << 29), high=(1 << 29) - 1, doc="input samples, Q31"),
          et.Weight("coeffs", "int32", "5 * stages", low=-(1 << 30), high=(1 << 30) - 1,
                    doc="{b0, b1, b2, a1, a2} per stage, Q31 scaled by 2^-post_shift"),
          et.Input("state", "int32", "4 * stages", low=-(1 << 29), high=(1 << 29) - 1,
                   doc="{x[n-1], x[n-2], y[n-1], y[n-2]} per stage, before the block"),
          et.Output("y", "int32", "block", doc="output samples, Q31"),
          et.Output("state_out", "int32", "4 * stages", doc="the state after the block (pass it as state next)"),
          et.Scalar("post_shift", 1, doc="coefficient scaling exponent, 0..31 (CMSIS postShift)")],
    params={"order": {"stage_major", "sample_major"}, "unroll": [1, 2, 4]},
    restrictions=["order == 'stage_major' or unroll == 1", "block % unroll == 0"],
    reference=reference,
    tolerance=0,
    example_shape="stages=2,block=32",
    description="Q31 biquad cascade, Direct Form I (CMSIS-DSP arm_biquad_cascade_df1_q31 conventions)",
)
