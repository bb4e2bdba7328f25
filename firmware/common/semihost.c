#include "semihost.h"

#define SYS_OPEN 0x01
#define SYS_CLOSE 0x02
#define SYS_WRITE0 0x04
#define SYS_WRITE 0x05
#define SYS_EXIT_EXTENDED 0x20
#define ADP_STOPPED_APPLICATION_EXIT 0x20026
#define OPEN_MODE_WB 5 /* "wb" in the semihosting mode table */

static uintptr_t semihost_call(uintptr_t op, uintptr_t arg)
{
#if defined(__aarch64__)
    register uintptr_t x0 __asm__("x0") = op;
    register uintptr_t x1 __asm__("x1") = arg;
    __asm__ volatile("hlt #0xf000" : "+r"(x0) : "r"(x1) : "memory");
    return x0;
#else
    register uintptr_t r0 __asm__("r0") = op;
    register uintptr_t r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
#endif
}

/* No C library call: freestanding AArch64 images link none. */
static size_t text_length(const char *text)
{
    size_t n = 0;
    while (text[n]) n++;
    return n;
}

int et_sh_open_write(const char *path)
{
    uintptr_t block[3] = {(uintptr_t)path, OPEN_MODE_WB, text_length(path)};
    return (int)semihost_call(SYS_OPEN, (uintptr_t)block);
}

int et_sh_write(int handle, const void *data, size_t len)
{
    uintptr_t block[3] = {(uintptr_t)handle, (uintptr_t)data, len};
    return (int)semihost_call(SYS_WRITE, (uintptr_t)block);
}

void et_sh_close(int handle)
{
    uintptr_t block[1] = {(uintptr_t)handle};
    semihost_call(SYS_CLOSE, (uintptr_t)block);
}

void et_sh_write0(const char *text)
{
    semihost_call(SYS_WRITE0, (uintptr_t)text);
}

void et_sh_exit(int code)
{
    uintptr_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uintptr_t)code};
    for (;;) semihost_call(SYS_EXIT_EXTENDED, (uintptr_t)block);
}
