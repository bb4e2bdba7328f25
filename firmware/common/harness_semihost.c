/* Harness for emulated boards: the I/O block sits at ET_IO_BASE, and its second segment
   (weights placed in another region) at ET_IO_BASE1 when the build defines it, both
   placed there by QEMU's loader device; the kernel runs once between count markers,
   outputs go to the host file "out.bin" through semihosting, and the exit status reports
   what happened. */
#include <stdint.h>
#include "harness.h"
#include "semihost.h"

#ifndef ET_IO_BASE
#error "ET_IO_BASE must be defined by the build"
#endif
#ifdef ET_IO_BASE1
#define ET_IO_SEGMENTS 2u
static uint8_t *const segments[ET_IO_SEGMENTS] = {(uint8_t *)(uintptr_t)(ET_IO_BASE), (uint8_t *)(uintptr_t)(ET_IO_BASE1)};
#else
#define ET_IO_SEGMENTS 1u
static uint8_t *const segments[ET_IO_SEGMENTS] = {(uint8_t *)(uintptr_t)(ET_IO_BASE)};
#endif

__attribute__((noinline)) void et_mark_start(void) { __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void et_mark_stop(void) { __asm__ volatile("" ::: "memory"); }

void et_glue_failed(int status)
{
    (void)status;
    et_sh_exit(ET_EXIT_BAD_IO);
}

int main(void)
{
    uint8_t *block = segments[0];
    const et_io_header_t *hdr = (const et_io_header_t *)block;
    if (hdr->magic != ET_IO_MAGIC || hdr->version != ET_IO_VERSION || hdr->n_buffers > ET_MAX_BUFFERS)
        return ET_EXIT_BAD_IO;
    const et_io_buffer_t *bufs = (const et_io_buffer_t *)(block + sizeof *hdr);
    const int32_t *params = (const int32_t *)(bufs + hdr->n_buffers);
    for (uint32_t i = 0; i < hdr->n_buffers; i++)
        if (bufs[i].segment >= ET_IO_SEGMENTS) return ET_EXIT_BAD_IO;
    if (et_glue_check(hdr, bufs, params) != 0) return ET_EXIT_BAD_IO;

    /* Region 1 is empty: its count is the marker overhead, subtracted by the host. */
    et_mark_start();
    et_mark_stop();
    et_mark_start();
    et_glue_run(segments, bufs, params);
    et_mark_stop();

    int fd = et_sh_open_write("out.bin");
    if (fd < 0) return ET_EXIT_OUTPUT_FAILED;
    for (uint32_t i = 0; i < hdr->n_buffers; i++) {
        if (!bufs[i].is_output) continue;
        if (et_sh_write(fd, segments[bufs[i].segment] + bufs[i].offset, bufs[i].size) != 0) return ET_EXIT_OUTPUT_FAILED;
    }
    et_sh_close(fd);
    return ET_EXIT_OK;
}
