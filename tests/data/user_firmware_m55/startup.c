/* The user's start-up: vector table, .data copied, .bss zeroed, FPU/MVE enabled, main()'s
   status handed to QEMU through semihosting (SYS_EXIT_EXTENDED). */
#include <stddef.h>
#include <stdint.h>

extern uint32_t __data_load, __data_start, __data_end, __bss_start, __bss_end, __stack_top;
int main(void);

static uintptr_t semihost(uintptr_t op, uintptr_t arg)
{
    register uintptr_t r0 __asm__("r0") = op;
    register uintptr_t r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

__attribute__((noreturn)) void user_exit(int code)
{
    uintptr_t block[2] = {0x20026u, (uintptr_t)code};
    for (;;) semihost(0x20u, (uintptr_t)block);
}

/* Writes len bytes to a new file `path` (relative to QEMU's working directory); 0 on success. */
int user_write_file(const char *path, size_t path_len, const void *data, size_t len)
{
    uintptr_t open_block[3] = {(uintptr_t)path, 5u /* "wb" */, path_len};
    int handle = (int)semihost(0x01u, (uintptr_t)open_block);
    if (handle < 0) return -1;
    uintptr_t write_block[3] = {(uintptr_t)handle, (uintptr_t)data, len};
    int left = (int)semihost(0x05u, (uintptr_t)write_block);
    uintptr_t close_block[1] = {(uintptr_t)handle};
    semihost(0x02u, (uintptr_t)close_block);
    return left;
}

__attribute__((noreturn)) void user_reset(void)
{
    uint32_t *src = &__data_load;
    for (uint32_t *dst = &__data_start; dst < &__data_end;) *dst++ = *src++;
    for (uint32_t *dst = &__bss_start; dst < &__bss_end;) *dst++ = 0;
    *(volatile uint32_t *)0xE000ED88u |= (0xFu << 20); /* CPACR: CP10/CP11 (FPU, MVE) */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    user_exit(main());
}

__attribute__((noreturn)) static void user_fault(void) { user_exit(99); }

typedef void (*vector_t)(void);
__attribute__((section(".vectors"), used)) const vector_t user_vectors[16] = {
    (vector_t)(uintptr_t)&__stack_top, user_reset, user_fault, user_fault, user_fault, user_fault, user_fault,
    user_fault, 0, 0, 0, user_fault, user_fault, 0, user_fault, user_fault,
};
