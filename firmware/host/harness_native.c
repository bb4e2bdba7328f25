/* Harness for native host runs: for each variant of the image's table (harness.h), reads
   its I/O block from a file into 64-byte aligned memory, runs the kernel once and writes its
   outputs, then times it, and prints its times; a variant that crashes ends the process,
   after the variants before it printed theirs.

   Timing (docs/measurements.md, "x86 host"): single runs were up to ~9% off on measurement,
   so the kernel runs in batches of at least ET_MIN_BATCH_NS each, and the median
   per-call time over ET_BATCHES batches is reported. The kernel lives in its own object
   file (no LTO), so calls cannot be hoisted or removed.

   usage: harness BATCHES IN0.bin OUT0.bin [IN1.bin OUT1.bin ...]   (one pair per variant)
   prints, per variant v: "variant v", "time_ns <median>", "time_ns_min <min>", ... */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "harness.h"

#define ET_MIN_BATCH_NS 2000000.0
#define ET_DEFAULT_BATCHES 15

void et_mark_start(void) {}
void et_mark_stop(void) {}

void et_glue_failed(int status)
{
    fprintf(stderr, "kernel entry point failed with status %d\n", status);
    exit(ET_EXIT_BAD_IO);
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Variant v of the table on the block in file `in`: outputs to `out`, times to stdout. */
static int run_variant(uint32_t v, const char *in_path, const char *out_path, int batches)
{
    FILE *in = fopen(in_path, "rb");
    if (!in) return ET_EXIT_BAD_IO;
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    if (size < (long)sizeof(et_io_header_t)) return ET_EXIT_BAD_IO;
    size_t padded = ((size_t)size + 63u) & ~(size_t)63u;
    void *memory = NULL;
    if (posix_memalign(&memory, 64, padded) != 0) return ET_EXIT_BAD_IO;
    uint8_t *block = memory;
    if (fread(block, 1, (size_t)size, in) != (size_t)size) return ET_EXIT_BAD_IO;
    fclose(in);

    const et_io_header_t *hdr = (const et_io_header_t *)block;
    if (hdr->magic != ET_IO_MAGIC || hdr->version != ET_IO_VERSION || hdr->n_buffers > ET_MAX_BUFFERS)
        return ET_EXIT_BAD_IO;
    const et_io_buffer_t *bufs = (const et_io_buffer_t *)(block + sizeof *hdr);
    const int32_t *params = (const int32_t *)(bufs + hdr->n_buffers);
    /* One segment: the host places no buffers (codegen/placement.py). */
    for (uint32_t i = 0; i < hdr->n_buffers; i++)
        if (bufs[i].segment != 0 || bufs[i].offset > (uint32_t)size || bufs[i].size > (uint32_t)size - bufs[i].offset)
            return ET_EXIT_BAD_IO;
    const et_variant_t *variant = &et_variants[v];
    if (variant->check(hdr, bufs, params) != 0) return ET_EXIT_BAD_IO;
    uint8_t *const segments[1] = {block};

    variant->run(segments, bufs, params);
    if (!et_guards_intact(segments, bufs, hdr->n_buffers)) {
        fprintf(stderr, "the kernel wrote outside its output buffers (a guard byte changed)\n");
        return ET_EXIT_OVERRUN;
    }
    FILE *out = fopen(out_path, "wb");
    if (!out) return ET_EXIT_OUTPUT_FAILED;
    for (uint32_t i = 0; i < hdr->n_buffers; i++)
        if (bufs[i].is_output && fwrite(block + bufs[i].offset, 1, bufs[i].size, out) != bufs[i].size)
            return ET_EXIT_OUTPUT_FAILED;
    fclose(out);

    /* Calibrate the batch length, then measure. */
    long reps = 1;
    for (;;) {
        double t0 = now_ns();
        for (long r = 0; r < reps; r++) variant->run(segments, bufs, params);
        if (now_ns() - t0 >= ET_MIN_BATCH_NS || reps >= (1L << 30)) break;
        reps *= 2;
    }
    double *per_call = malloc(sizeof(double) * (size_t)batches);
    if (!per_call) return ET_EXIT_OUTPUT_FAILED;
    for (int b = 0; b < batches; b++) {
        double t0 = now_ns();
        for (long r = 0; r < reps; r++) variant->run(segments, bufs, params);
        per_call[b] = (now_ns() - t0) / (double)reps;
    }
    qsort(per_call, (size_t)batches, sizeof(double), compare_doubles);
    printf("variant %u\ntime_ns %.3f\ntime_ns_min %.3f\nrepetitions %ld\nbatches %d\n", v, per_call[batches / 2],
           per_call[0], reps, batches);
    fflush(stdout); /* on the host's side before the next variant runs (and perhaps crashes) */
    free(per_call);
    free(block);
    return ET_EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc < 4 || (argc - 2) % 2 != 0 || (uint32_t)(argc - 2) / 2 != et_variant_count) {
        fprintf(stderr, "usage: %s BATCHES IN0.bin OUT0.bin [IN1.bin OUT1.bin ...] (%u variants)\n", argv[0],
                et_variant_count);
        return ET_EXIT_BAD_IO;
    }
    int batches = atoi(argv[1]);
    if (batches < 1 || batches > 1000) batches = ET_DEFAULT_BATCHES;
    for (uint32_t v = 0; v < et_variant_count; v++) {
        int status = run_variant(v, argv[2 + 2 * v], argv[3 + 2 * v], batches);
        if (status != ET_EXIT_OK) return status;
    }
    return ET_EXIT_OK;
}
