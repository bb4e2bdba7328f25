/* The contract between the generic harness and a generated kernel's entry glue.

   The host preloads an I/O block into target memory (QEMU's loader device, a board's
   LOAD requests) or writes it into a file (native host runs). A block has one or two
   segments, each in its own memory region: segment 0 at ET_IO_BASE holds, all fields
   little-endian uint32:
     magic 'ETIO', version, n_buffers, n_params,
     n_buffers x {segment, offset from the segment's start, size in bytes, is_output},
     n_params x int32 parameter,
     the bytes of the buffers of segment 0 (each at its offset, 16-byte aligned);
   every buffer has ET_GUARD_BYTES of ET_GUARD_BYTE before it and from its end to
   ET_GUARD_BYTES past its 16-byte aligned end, checked after each run (et_guards_intact);
   segment 1 at ET_IO_BASE1 (built only when the host placed the kernel's weights in
   another region than its activations: buffer placement, codegen/placement.py) holds the
   bytes of the buffers of segment 1.
*/
#ifndef EDGETUNE_HARNESS_H
#define EDGETUNE_HARNESS_H
#include <stdint.h>

#define ET_IO_MAGIC 0x4F495445u /* "ETIO" */
#define ET_IO_VERSION 2u
#define ET_MAX_BUFFERS 8
#define ET_MAX_SEGMENTS 2

typedef struct {
    uint32_t segment;
    uint32_t offset;
    uint32_t size;
    uint32_t is_output;
} et_io_buffer_t;

typedef struct {
    uint32_t magic;
    uint32_t version;
    uint32_t n_buffers;
    uint32_t n_params;
} et_io_header_t;

/* Exit codes shared with the host runner (edgetune.targets.exitcodes). */
#define ET_EXIT_OK 0
#define ET_EXIT_BAD_IO 3
#define ET_EXIT_OUTPUT_FAILED 4
#define ET_EXIT_FAULT 5
#define ET_EXIT_OVERRUN 6 /* the kernel wrote outside its output buffers: a guard byte changed */

/* The guard bytes around every buffer (targets/iobuf.py lays them out, codegen/placement.py
   GUARD_BYTES and GUARD_BYTE). Checked after the stop marker: never counted or timed. */
#define ET_GUARD_BYTES 16u
#define ET_GUARD_BYTE 0xA5u

static inline int et_guards_intact(uint8_t *const *segments, const et_io_buffer_t *bufs, uint32_t n_buffers)
{
    for (uint32_t i = 0; i < n_buffers; i++) {
        const uint8_t *base = segments[bufs[i].segment];
        const uint32_t end = ((bufs[i].offset + bufs[i].size + 15u) & ~15u) + ET_GUARD_BYTES;
        for (uint32_t at = bufs[i].offset - ET_GUARD_BYTES; at < end; at++) {
            if (at == bufs[i].offset) at += bufs[i].size;
            if (at < end && base[at] != ET_GUARD_BYTE) return 0;
        }
    }
    return 1;
}

/* Implemented by the generated glue: checks the block matches the compiled workload and
   returns 0, or returns nonzero; then runs the kernel once. The harness checks every
   buffer's segment before; segments[s] is the address of segment s. */
int et_glue_check(const et_io_header_t *hdr, const et_io_buffer_t *bufs, const int32_t *params);
void et_glue_run(uint8_t *const *segments, const et_io_buffer_t *bufs, const int32_t *params);

/* Called by glue when the kernel entry point reports failure (e.g. an exported dispatcher
   that has no variant for the shape); ends the run with ET_EXIT_BAD_IO. */
void et_glue_failed(int status);

/* Empty, never-inlined functions whose first instruction the instruction-count plugin
   watches; instructions between a start and the next stop form one region. */
void et_mark_start(void);
void et_mark_stop(void);

/* The variants of one image (harness_semihost.c), from the generated variant table
   (edgetune.targets.batch): each its own glue and its own I/O block (segments[s]: the
   address of segment s), run between its own pair of markers. A single variant is a
   table of one. */
#define ET_MAX_VARIANTS 64u
typedef struct {
    int (*check)(const et_io_header_t *hdr, const et_io_buffer_t *bufs, const int32_t *params);
    void (*run)(uint8_t *const *segments, const et_io_buffer_t *bufs, const int32_t *params);
    uint8_t *const *segments;
} et_variant_t;
extern const et_variant_t et_variants[];
extern const uint32_t et_variant_count;

#endif
