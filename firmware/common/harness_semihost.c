/* Harness for emulated boards. The variant table (harness.h) says where each variant's I/O
   block sits (from ET_IO_BASE on, its second segment, weights placed in another region,
   from ET_IO_BASE1 on when the build defines it), all placed there by QEMU's loader
   device. Each variant runs once between count markers, its outputs are appended to the
   host file "out.bin" through semihosting right after its region, and the exit status
   reports what happened: a fault in variant v leaves the counts and outputs of the
   variants before it.

   The counted instructions are fixed by the assembly below, not by how the compiler
   schedules main(): region 0 is empty (the marker overhead, subtracted by the host), and
   each variant's region is the call, the glue with the kernel, and the instructions before
   the stop marker: one literal load on T32, an address computation (adrp, add) on A64.
   Those are what GCC scheduled there when this harness called its one variant directly
   from main(), so every count, instruction mix and memory access equals what was measured
   before, and stored trials stay comparable. */
#include <stdint.h>
#include "harness.h"
#include "semihost.h"

#ifndef ET_IO_BASE
#error "ET_IO_BASE must be defined by the build"
#endif
#ifdef ET_IO_BASE1
#define ET_IO_SEGMENTS 2u
#else
#define ET_IO_SEGMENTS 1u
#endif

typedef void (*et_run_t)(uint8_t *const *segments, const et_io_buffer_t *bufs, const int32_t *params);
/* et_measure(run, segments, bufs, params): run(segments, bufs, params) between the markers.
   et_calibrate(): the empty region. The markers are single returns, so the arguments stay
   in their registers across the start marker. */
void et_measure(et_run_t run, uint8_t *const *segments, const et_io_buffer_t *bufs, const int32_t *params);
void et_calibrate(void);

#if defined(__aarch64__)
__asm__(".section .text.et_markers,\"ax\",%progbits\n"
        ".global et_mark_start\n.type et_mark_start, %function\net_mark_start:\n\tret\n"
        ".global et_mark_stop\n.type et_mark_stop, %function\net_mark_stop:\n\tret\n"
        ".global et_measure\n.type et_measure, %function\net_measure:\n"
        "\tstp x29, x30, [sp, #-32]!\n\tmov x29, sp\n\tstr x19, [sp, #16]\n"
        "\tmov x19, x0\n\tmov x0, x1\n\tmov x1, x2\n\tmov x2, x3\n"
        "\tbl et_mark_start\n\tblr x19\n\tadrp x3, et_mark_stop\n\tadd x3, x3, :lo12:et_mark_stop\n\tbl et_mark_stop\n"
        "\tldr x19, [sp, #16]\n\tldp x29, x30, [sp], #32\n\tret\n"
        ".global et_calibrate\n.type et_calibrate, %function\net_calibrate:\n"
        "\tstp x29, x30, [sp, #-16]!\n\tmov x29, sp\n\tbl et_mark_start\n\tbl et_mark_stop\n"
        "\tldp x29, x30, [sp], #16\n\tret\n"
        ".text\n");
#elif defined(__thumb__)
__asm__(".syntax unified\n.thumb\n.section .text.et_markers,\"ax\",%progbits\n"
        ".global et_mark_start\n.type et_mark_start, %function\n.thumb_func\net_mark_start:\n\tbx lr\n"
        ".global et_mark_stop\n.type et_mark_stop, %function\n.thumb_func\net_mark_stop:\n\tbx lr\n"
        ".global et_measure\n.type et_measure, %function\n.thumb_func\net_measure:\n"
        "\tpush {r4, lr}\n\tmov r4, r0\n\tmov r0, r1\n\tmov r1, r2\n\tmov r2, r3\n"
        "\tbl et_mark_start\n\tblx r4\n\tldr r3, =et_mark_stop\n\tbl et_mark_stop\n\tpop {r4, pc}\n\t.ltorg\n"
        ".global et_calibrate\n.type et_calibrate, %function\n.thumb_func\net_calibrate:\n"
        "\tpush {r4, lr}\n\tbl et_mark_start\n\tbl et_mark_stop\n\tpop {r4, pc}\n"
        ".text\n");
#else
#error "harness_semihost.c: no measuring sequence for this architecture"
#endif

void et_glue_failed(int status)
{
    (void)status;
    et_sh_exit(ET_EXIT_BAD_IO);
}

/* Whether variant v's block is one this image can run. */
static int variant_is_sound(uint32_t v)
{
    uint8_t *const *segments = et_variants[v].segments;
    const et_io_header_t *hdr = (const et_io_header_t *)segments[0];
    if (hdr->magic != ET_IO_MAGIC || hdr->version != ET_IO_VERSION || hdr->n_buffers > ET_MAX_BUFFERS) return 0;
    const et_io_buffer_t *bufs = (const et_io_buffer_t *)(segments[0] + sizeof *hdr);
    for (uint32_t i = 0; i < hdr->n_buffers; i++)
        if (bufs[i].segment >= ET_IO_SEGMENTS) return 0;
    return et_variants[v].check(hdr, bufs, (const int32_t *)(bufs + hdr->n_buffers)) == 0;
}

int main(void)
{
    if (et_variant_count == 0 || et_variant_count > ET_MAX_VARIANTS) return ET_EXIT_BAD_IO;
    for (uint32_t v = 0; v < et_variant_count; v++)
        if (!variant_is_sound(v)) return ET_EXIT_BAD_IO;
    int fd = et_sh_open_write("out.bin");
    if (fd < 0) return ET_EXIT_OUTPUT_FAILED;

    et_calibrate();
    for (uint32_t v = 0; v < et_variant_count; v++) {
        uint8_t *const *segments = et_variants[v].segments;
        const et_io_header_t *hdr = (const et_io_header_t *)segments[0];
        const et_io_buffer_t *bufs = (const et_io_buffer_t *)(segments[0] + sizeof *hdr);
        et_measure(et_variants[v].run, segments, bufs, (const int32_t *)(bufs + hdr->n_buffers));
        /* After the stop marker, before its outputs: an overrun ends the run at variant v. */
        if (!et_guards_intact(segments, bufs, hdr->n_buffers)) return ET_EXIT_OVERRUN;
        for (uint32_t i = 0; i < hdr->n_buffers; i++) {
            if (!bufs[i].is_output) continue;
            if (et_sh_write(fd, segments[bufs[i].segment] + bufs[i].offset, bufs[i].size) != 0) return ET_EXIT_OUTPUT_FAILED;
        }
    }
    et_sh_close(fd);
    return ET_EXIT_OK;
}
