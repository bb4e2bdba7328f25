/* Start-up for Cortex-M boards under QEMU: vector table, .data/.bss set-up, FPU and MVE
   enabled, main() called, and its return value handed to the host through semihosting.
   Every fault handler exits with ET_EXIT_FAULT so a crashing kernel ends the emulator
   instead of spinning in a handler until the timeout. */
#include <stdint.h>
#include "harness.h"
#include "semihost.h"

extern uint32_t __data_load, __data_start, __data_end, __bss_start, __bss_end, __stack_top;
/* (load, start, end) per RAM region holding code or constants a model's code plan put there
   (the linker script's .et_copy_table): filled from their stored copy before main. */
extern const uint32_t __et_copy_table[], __et_copy_table_end[];
int main(void);

#define CPACR (*(volatile uint32_t *)0xE000ED88u)

__attribute__((noreturn)) void et_reset_handler(void)
{
    uint32_t *src = &__data_load;
    for (uint32_t *dst = &__data_start; dst < &__data_end;) *dst++ = *src++;
    for (uint32_t *dst = &__bss_start; dst < &__bss_end;) *dst++ = 0;
    for (const uint32_t *entry = __et_copy_table; entry < __et_copy_table_end; entry += 3) {
        const uint32_t *from = (const uint32_t *)entry[0];
        for (uint32_t *dst = (uint32_t *)entry[1]; dst < (uint32_t *)entry[2];) *dst++ = *from++;
    }
    __asm__ volatile("dsb\n\tisb" ::: "memory"); /* copied code is fetched only after the copy */
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    CPACR |= (0xFu << 20); /* CP10 and CP11 full access: FPU and MVE */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    et_sh_exit(main());
}

/* Weak: a harness that can report faults another way (harness_serial.c) overrides it. */
__attribute__((weak, noreturn)) void et_fault_handler(void)
{
    et_sh_write0("edgetune: fault\n");
    et_sh_exit(ET_EXIT_FAULT);
}

typedef void (*et_vector_t)(void);

/* 16 system exceptions; external interrupts are never enabled by the harness. */
__attribute__((section(".vectors"), used)) const et_vector_t et_vector_table[16] = {
    (et_vector_t)(uintptr_t)&__stack_top,
    et_reset_handler,
    et_fault_handler, /* NMI */
    et_fault_handler, /* HardFault */
    et_fault_handler, /* MemManage */
    et_fault_handler, /* BusFault */
    et_fault_handler, /* UsageFault */
    et_fault_handler, /* SecureFault */
    0, 0, 0,
    et_fault_handler, /* SVCall */
    et_fault_handler, /* DebugMonitor */
    0,
    et_fault_handler, /* PendSV */
    et_fault_handler, /* SysTick */
};
