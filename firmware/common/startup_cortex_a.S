/* Start-up for bare-metal AArch64 (QEMU `virt`, entered at EL1 with the MMU off): stack,
   .bss cleared, FP/SIMD enabled, exception vectors that end the run, main() called, and its
   return value handed to the host through semihosting (et_sh_exit).

   CPACR_EL1.FPEN (bits 21:20) = 0b11 stops FP/SIMD instructions from trapping at EL1 and
   EL0 (Arm Architecture Reference Manual for A-profile, D13.2.30 CPACR_EL1); NEON code
   faults without it. The image is linked at its load address, so no
   .data copy is needed. */
    .section .text.boot, "ax"
    .global et_reset_handler
    .type et_reset_handler, %function
et_reset_handler:
    ldr     x0, =__stack_top
    mov     sp, x0
    adr     x0, et_vectors
    msr     vbar_el1, x0
    mrs     x0, cpacr_el1
    orr     x0, x0, #(3 << 20)
    msr     cpacr_el1, x0
    isb
    ldr     x0, =__bss_start
    ldr     x1, =__bss_end
1:  cmp     x0, x1
    b.hs    2f
    str     xzr, [x0], #8
    b       1b
2:  bl      main
    bl      et_sh_exit
3:  b       3b
    .size et_reset_handler, . - et_reset_handler

/* Any exception (synchronous abort, undefined instruction, IRQ, SError) means the kernel
   crashed: report ET_EXIT_FAULT (5, firmware/common/harness.h) rather than spin until the
   host's timeout. 16 entries of 0x80 bytes, table aligned to 2 KiB (VBAR_EL1). */
    .section .text.vectors, "ax"
    .balign 2048
et_vectors:
    .rept 16
    .balign 128
    ldr     x0, =__stack_top
    mov     sp, x0
    mov     w0, #5
    bl      et_sh_exit
    .endr

/* The compilers may turn loops into calls to these (freestanding builds link no C
   library), and their instructions count towards the kernel's: 16 bytes per iteration,
   then a byte tail, like a plain C library's. QEMU does not fault unaligned accesses with
   the MMU off (docs/measurements.md). */
    .text
    .global memset
    .type memset, %function
memset:                       /* x0 = dest, w1 = byte, x2 = count; returns dest */
    mov     x3, x0
    and     x1, x1, #0xff
    mov     x4, #0x0101010101010101
    mul     x4, x4, x1        /* the byte in all eight lanes */
1:  cmp     x2, #16
    b.lo    2f
    stp     x4, x4, [x3], #16
    sub     x2, x2, #16
    b       1b
2:  cbz     x2, 3f
    strb    w4, [x3], #1
    sub     x2, x2, #1
    b       2b
3:  ret
    .size memset, . - memset

    .global memcpy
    .type memcpy, %function
memcpy:                       /* x0 = dest, x1 = src, x2 = count; returns dest */
    mov     x3, x0
1:  cmp     x2, #16
    b.lo    2f
    ldp     x4, x5, [x1], #16
    stp     x4, x5, [x3], #16
    sub     x2, x2, #16
    b       1b
2:  cbz     x2, 3f
    ldrb    w4, [x1], #1
    strb    w4, [x3], #1
    sub     x2, x2, #1
    b       2b
3:  ret
    .size memcpy, . - memcpy

    .global memmove
    .type memmove, %function
memmove:                      /* overlapping copy: backwards when dest is above src */
    cmp     x0, x1
    b.ls    memcpy
    add     x3, x0, x2
    add     x1, x1, x2
1:  cbz     x2, 2f
    ldrb    w4, [x1, #-1]!
    strb    w4, [x3, #-1]!
    sub     x2, x2, #1
    b       1b
2:  ret
    .size memmove, . - memmove
