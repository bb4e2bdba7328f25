"""What the Arm DSP-extension code paths (vector="dsp") of the kernels share.

The DSP extension of Armv7E-M and Armv8-M Mainline (Cortex-M4, M7, M33, M55) does SIMD inside
32-bit core registers: SXTB16 sign-extends bytes 0 and 2 of a word into two 16-bit halves
(with ROR #8, bytes 1 and 3), SMLAD multiplies two pairs of halves and adds both products to a
32-bit accumulator, SMLALD to a 64-bit one: two 16-bit MACs per instruction, one per cycle on
the M4 (Cortex-M4 TRM DDI 0439, table 3-1). The templates reach them through the ACLE
intrinsics of <arm_acle.h> (__sxtb16, __smlad, __smlald, __ssat, __qadd), which GCC 12 and
Clang 14 both provide when __ARM_FEATURE_DSP is set.

A target offers the path when its HAL description lists the extension ([core] extensions =
["dsp"]): a kernel's "dsp" VectorPath is offered `with_extension("dsp")` (paths.py).
"""
from __future__ import annotations

# The DSP paths load four int8 or two int16 values with one LDR at any address (the packed
# rows of a matmul start at n * K bytes, FIR windows at every sample). Armv7-M and Armv8-M
# Mainline allow unaligned LDR/LDRH/STR/STRH (Armv7-M ARM DDI 0403, A3.2.1; only LDRD, LDM
# and the exclusives fault), and GCC assumes so by default; Clang 14 assumes strict
# alignment on bare-metal triples and would split every such load into four LDRB. The C
# stays alignment-safe either way (the loads are memcpy), this flag only lets Clang use LDR.
# LLVM never merges loads of unknown alignment into LDRD/LDM, so no faulting form appears.
DSP_CFLAGS = ("-munaligned-access",)

