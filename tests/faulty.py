"""A matmul_s8 look-alike whose C source a test chooses, to inject faults into real builds
and runs (hangs, crashes, wrong answers, compile errors, oversized images)."""
from __future__ import annotations

import numpy as np

from edgetune.codegen.kernels.base import RenderedKernel
from edgetune.codegen.placement import placement_of
from edgetune.codegen.kernels.matmul_s8 import MatmulS8

UNUSED = "(void)a; (void)b; (void)bias; (void)c; (void)a_zero; (void)b_zero; (void)c_zero; (void)multiplier; (void)shift;"

BODIES = {
    "hang": UNUSED + " for (;;) { __asm__ volatile(\"\" ::: \"memory\"); }",
    "trap": UNUSED + " __builtin_trap();",
    "bad_store": UNUSED + " *(volatile int32_t *)0xF0000000u = 1;",
    "zeros": UNUSED + " for (int i = 0; i < 4 * 4; i++) c[i] = 0;",
    "syntax": "this is not C",
    "huge": UNUSED + " static const volatile uint8_t table[600 * 1024] = {1}; c[0] = (int8_t)table[0];",
}


class FaultyMatmul(MatmulS8):
    """Renders a fixed faulty body for configurations with tile_m == 2 (or always, with
    `always=True`); other configurations render the real template."""

    def __init__(self, fault: str, always: bool = False):
        self.fault, self.always = fault, always

    def render(self, target, shape, config, **kwargs):
        if not self.always and config["tile_m"] != 2:
            return super().render(target, shape, config, **kwargs)
        fn = kwargs.get("fn") or self.function_name(shape)  # a batch names each variant's entry point
        if self.fault == "overrun":
            return self._overrun(target, shape, config, fn, kwargs)
        source = (f"#include <stdint.h>\n#include \"kernel.h\"\n{self.declaration(shape, fn=fn)}\n"
                  f"{{\n    {BODIES[self.fault]}\n}}\n")
        # Where its buffers live, as for the real variants (a batch shares images by placement).
        placement = placement_of(target, self.make_io(shape, np.random.default_rng(0)), config)
        return RenderedKernel(source=source, function=fn, declaration=self.declaration(shape, fn=fn),
                              compiler=str(config["compiler"]), cflags=(f"-{config['opt']}",), placement=placement)

    def _overrun(self, target, shape, config, fn, kwargs):
        """The real variant, then one byte written just past its output: right answers, and
        a write outside the buffer it was given."""
        real = super().render(target, shape, config, **{**kwargs, "fn": fn + "_inner"})
        wrapper = (f"{self.declaration(shape, fn=fn + '_inner')};\n{self.declaration(shape, fn=fn)}\n{{\n"
                   f"    {fn}_inner(a, b, bias, c, a_zero, b_zero, c_zero, multiplier, shift);\n"
                   f"    c[{shape['m'] * shape['n']}] = 0x5a;\n}}\n")
        return RenderedKernel(source=real.source + "\n" + wrapper, function=fn,
                              declaration=self.declaration(shape, fn=fn), compiler=real.compiler, cflags=real.cflags,
                              placement=real.placement)
