/* Harness for boards reached over a serial port (docs/serial-protocol.md).

   The host loads the I/O block (firmware/common/harness.h) in chunks into its I/O area, asks
   for N runs, reads the output buffers back and then the counts. The kernel is reached
   through the same generated glue as in the semihosting harness (et_glue_check,
   et_glue_run). Every region is counted with both the DWT cycle counter and SysTick:
   real boards have a DWT CYCCNT, QEMU 7.2 reads it as 0 (docs/measurements.md), and the reply
   says which counter saw what, so the host never has to guess.

   The I/O area is segment 0 (ET_IO_BASE, ET_IO_CAPACITY bytes) followed, when the build
   defines ET_IO_BASE1 and ET_IO_CAPACITY1 (weights placed in another memory region), by
   segment 1: LOAD and READ offsets at or beyond ET_IO_CAPACITY address segment 1.

   Build-time defines (from the board's TOML): ET_IO_BASE, ET_IO_CAPACITY, optionally
   ET_IO_BASE1 and ET_IO_CAPACITY1, ET_UART_BASE, ET_UART_BAUDDIV (uart_cmsdk.c),
   ET_BOARD_NAME, ET_CORE_HZ, ET_COUNTER_DWT (0 or 1).
   The linker defines the absolute symbol et_image_id (the host's identity for the image). */
#include <stdint.h>
#include <string.h>
#include "harness.h"
#include "serial_proto.h"
#include "uart_cmsdk.h"

#if !defined(ET_IO_BASE) || !defined(ET_IO_CAPACITY) || !defined(ET_BOARD_NAME) || !defined(ET_CORE_HZ)
#error "ET_IO_BASE, ET_IO_CAPACITY, ET_BOARD_NAME and ET_CORE_HZ must be defined by the build"
#endif
#ifndef ET_COUNTER_DWT
#define ET_COUNTER_DWT 1
#endif

#define ET_MAX_PAYLOAD 1024u
#define ET_MAX_RUNS 32u

/* System control registers: Armv8-M Architecture Reference Manual (DEMCR, DWT, SysTick, AIRCR). */
#define DEMCR (*(volatile uint32_t *)0xE000EDFCu)
#define DEMCR_TRCENA (1u << 24)
#define DWT_CTRL (*(volatile uint32_t *)0xE0001000u)
#define DWT_CTRL_NOCYCCNT (1u << 25)
#define DWT_CTRL_CYCCNTENA 1u
#define DWT_CYCCNT (*(volatile uint32_t *)0xE0001004u)
#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define SYST_CSR_ENABLE_CORECLK 0x5u /* ENABLE | CLKSOURCE (processor clock), no interrupt */
#define SYST_CSR_COUNTFLAG (1u << 16)
#define SYST_MAX 0x00FFFFFFu
#define AIRCR (*(volatile uint32_t *)0xE000ED0Cu)
#define AIRCR_SYSRESETREQ 0x05FA0004u

extern const uint8_t et_image_id[]; /* absolute symbol: its address is the id */

static uint8_t frame[ET_FRAME_OVERHEAD + ET_MAX_PAYLOAD];
static uint8_t reply[ET_FRAME_OVERHEAD + ET_MAX_PAYLOAD];

typedef struct {
    uint32_t dwt;
    uint32_t systick;
    uint8_t flags;
} et_count_t;

static et_count_t counts[ET_MAX_RUNS + 1]; /* [0]: empty region (counter overhead) */
static uint32_t counted_runs;               /* 0 until a RUN completes after the last LOAD */
static int dwt_present;
static volatile int kernel_status;
static uint8_t current_type, current_seq;   /* for the fault handler's report */
static uint32_t session;                    /* the host's token; 0 after every reset (.bss) */

/* --- frames ---------------------------------------------------------------------------- */
static void put_u16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put_u32(uint8_t *p, uint32_t v) { put_u16(p, v); put_u16(p + 2, v >> 16); }
static uint32_t get_u16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t get_u32(const uint8_t *p) { return get_u16(p) | get_u16(p + 2) << 16; }

static void send(uint8_t type, uint8_t seq, uint32_t length)
{
    reply[0] = ET_SYNC0;
    reply[1] = ET_SYNC1;
    reply[2] = ET_PROTO_VERSION;
    reply[3] = type;
    reply[4] = seq;
    put_u16(reply + 5, length);
    uint16_t crc = 0xFFFFu;
    for (uint32_t i = 2; i < ET_FRAME_HEADER + length; i++) crc = et_crc16_update(crc, reply[i]);
    put_u16(reply + ET_FRAME_HEADER + length, crc);
    for (uint32_t i = 0; i < ET_FRAME_OVERHEAD + length; i++) et_uart_putc(reply[i]);
}

static uint8_t *reply_payload(void) { return reply + ET_FRAME_HEADER; }

static void send_error(uint8_t seq, uint8_t request, uint8_t code, uint32_t detail)
{
    uint8_t *p = reply_payload();
    p[0] = code;
    p[1] = request;
    put_u32(p + 2, detail);
    send(ET_MSG_ERROR, seq, 6);
}

/* Waits for the next intact frame addressed to this protocol version; answers damaged ones
   with an error and goes back to scanning for the sync pair. Returns the payload length. */
static uint32_t receive(void)
{
    for (;;) {
        uint8_t byte = et_uart_getc();
        if (byte != ET_SYNC0) continue;
        do byte = et_uart_getc(); while (byte == ET_SYNC0);
        if (byte != ET_SYNC1) continue;
        uint16_t crc = 0xFFFFu;
        for (uint32_t i = 2; i < ET_FRAME_HEADER; i++) crc = et_crc16_update(crc, frame[i] = et_uart_getc());
        uint32_t length = get_u16(frame + 5);
        if (length > ET_MAX_PAYLOAD) {
            send_error(frame[4], frame[3], ET_ERR_BAD_LENGTH, length);
            continue;
        }
        for (uint32_t i = 0; i < length; i++) crc = et_crc16_update(crc, frame[ET_FRAME_HEADER + i] = et_uart_getc());
        uint32_t lo = et_uart_getc();
        uint32_t got = lo | (uint32_t)et_uart_getc() << 8;
        if (got != crc) {
            send_error(frame[4], frame[3], ET_ERR_BAD_CRC, 0);
            continue;
        }
        if (frame[2] != ET_PROTO_VERSION) {
            send_error(frame[4], frame[3], ET_ERR_BAD_VERSION, frame[2]);
            continue;
        }
        return length;
    }
}

/* --- counting --------------------------------------------------------------------------- */
static void counters_init(void)
{
#if ET_COUNTER_DWT
    DEMCR |= DEMCR_TRCENA;
    dwt_present = !(DWT_CTRL & DWT_CTRL_NOCYCCNT);
    if (dwt_present) DWT_CTRL |= DWT_CTRL_CYCCNTENA;
#endif
}

/* SysTick is restarted right before each region: a free-running one shows a tick of phase
   jitter depending on what ran before (docs/measurements.md, "Counting work"). */
static inline __attribute__((always_inline)) uint32_t counters_start(void)
{
    SYST_CSR = 0;
    SYST_RVR = SYST_MAX;
    SYST_CVR = 0; /* clears the counter and COUNTFLAG */
    SYST_CSR = SYST_CSR_ENABLE_CORECLK;
    uint32_t start = SYST_CVR;
#if ET_COUNTER_DWT
    DWT_CYCCNT = 0;
#endif
    __asm__ volatile("" ::: "memory");
    return start;
}

static inline __attribute__((always_inline)) void counters_stop(uint32_t start, et_count_t *out)
{
    __asm__ volatile("" ::: "memory");
#if ET_COUNTER_DWT
    uint32_t dwt = DWT_CYCCNT;
#else
    uint32_t dwt = 0;
#endif
    uint32_t now = SYST_CVR;
    uint32_t csr = SYST_CSR;
    SYST_CSR = 0;
    out->dwt = dwt;
    out->systick = (start - now) & SYST_MAX;
    out->flags = (uint8_t)((dwt_present ? ET_COUNTER_FLAG_DWT : 0u) |
                           ((csr & SYST_CSR_COUNTFLAG) ? 0u : ET_COUNTER_FLAG_SYSTICK));
}

/* --- requests ----------------------------------------------------------------------------- */
void et_glue_failed(int status) { kernel_status = status ? status : -1; }

#if defined(ET_IO_BASE1) && defined(ET_IO_CAPACITY1)
#define ET_IO_SEGMENTS 2u
static uint8_t *const segments[ET_IO_SEGMENTS] = {(uint8_t *)(uintptr_t)(ET_IO_BASE), (uint8_t *)(uintptr_t)(ET_IO_BASE1)};
static const uint32_t capacities[ET_IO_SEGMENTS] = {(uint32_t)(ET_IO_CAPACITY), (uint32_t)(ET_IO_CAPACITY1)};
#else
#define ET_IO_SEGMENTS 1u
static uint8_t *const segments[ET_IO_SEGMENTS] = {(uint8_t *)(uintptr_t)(ET_IO_BASE)};
static const uint32_t capacities[ET_IO_SEGMENTS] = {(uint32_t)(ET_IO_CAPACITY)};
#endif

static uint8_t *io_block(void) { return segments[0]; }

static uint32_t io_capacity(void)
{
    uint32_t total = 0;
    for (uint32_t s = 0; s < ET_IO_SEGMENTS; s++) total += capacities[s];
    return total;
}

/* The bytes [offset, offset + n) of the I/O area, or NULL unless they lie in one segment. */
static uint8_t *io_range(uint32_t offset, uint32_t n)
{
    for (uint32_t s = 0; s < ET_IO_SEGMENTS; s++) {
        if (offset < capacities[s]) return n <= capacities[s] - offset ? segments[s] + offset : 0;
        offset -= capacities[s];
    }
    return 0;
}

static void on_hello(uint8_t seq, uint32_t length)
{
    static const char name[] = ET_BOARD_NAME;
    if (length != 4) {
        send_error(seq, ET_MSG_HELLO, ET_ERR_BAD_LENGTH, length);
        return;
    }
    uint32_t previous = session;
    session = get_u32(frame + ET_FRAME_HEADER);
    uint8_t *p = reply_payload();
    p[0] = ET_PROTO_VERSION;
    p[1] = (uint8_t)((dwt_present ? ET_COUNTER_FLAG_DWT : 0u) | ET_COUNTER_FLAG_SYSTICK);
    put_u16(p + 2, ET_MAX_PAYLOAD);
    put_u32(p + 4, (uint32_t)(ET_IO_BASE));
    put_u32(p + 8, io_capacity());
    put_u16(p + 12, ET_MAX_RUNS);
    put_u32(p + 14, (uint32_t)(uintptr_t)et_image_id);
    put_u32(p + 18, previous);
    p[22] = (uint8_t)(sizeof name - 1);
    memcpy(p + 23, name, sizeof name - 1);
    send(ET_MSG_HELLO | ET_REPLY_BIT, seq, 23 + sizeof name - 1);
}

static void on_load(uint8_t seq, uint32_t length)
{
    if (length < 4) {
        send_error(seq, ET_MSG_LOAD, ET_ERR_BAD_LENGTH, length);
        return;
    }
    uint32_t offset = get_u32(frame + ET_FRAME_HEADER), n = length - 4;
    uint8_t *to = io_range(offset, n);
    if (!to) {
        send_error(seq, ET_MSG_LOAD, ET_ERR_OUT_OF_RANGE, offset);
        return;
    }
    memcpy(to, frame + ET_FRAME_HEADER + 4, n);
    counted_runs = 0;
    uint8_t *p = reply_payload();
    put_u32(p, offset);
    put_u16(p + 4, n);
    send(ET_MSG_LOAD | ET_REPLY_BIT, seq, 6);
}

/* The block must describe buffers that lie inside the I/O area before the kernel may
   write through them. */
static int block_is_sound(const et_variant_t *variant)
{
    const et_io_header_t *hdr = (const et_io_header_t *)io_block();
    if (hdr->magic != ET_IO_MAGIC || hdr->version != ET_IO_VERSION || hdr->n_buffers > ET_MAX_BUFFERS) return 0;
    const et_io_buffer_t *bufs = (const et_io_buffer_t *)(io_block() + sizeof *hdr);
    for (uint32_t i = 0; i < hdr->n_buffers; i++) {
        if (bufs[i].segment >= ET_IO_SEGMENTS) return 0;
        uint32_t capacity = capacities[bufs[i].segment];
        if (bufs[i].offset > capacity || bufs[i].size > capacity - bufs[i].offset) return 0;
    }
    const int32_t *params = (const int32_t *)(bufs + hdr->n_buffers);
    return variant->check(hdr, bufs, params) == 0;
}

/* RUN carries the number of runs and, in an image of several variants (the generated
   variant table, harness.h), which variant to run (absent: the first). */
static void on_run(uint8_t seq, uint32_t length)
{
    if (length != 2 && length != 4) {
        send_error(seq, ET_MSG_RUN, ET_ERR_BAD_LENGTH, length);
        return;
    }
    uint32_t runs = get_u16(frame + ET_FRAME_HEADER);
    if (runs == 0 || runs > ET_MAX_RUNS) {
        send_error(seq, ET_MSG_RUN, ET_ERR_BAD_ARGUMENT, runs);
        return;
    }
    uint32_t v = length == 4 ? get_u16(frame + ET_FRAME_HEADER + 2) : 0u;
    if (v >= et_variant_count) {
        send_error(seq, ET_MSG_RUN, ET_ERR_BAD_ARGUMENT, v);
        return;
    }
    const et_variant_t *variant = &et_variants[v];
    void (*const run)(uint8_t *const *, const et_io_buffer_t *, const int32_t *) = variant->run;
    if (!block_is_sound(variant)) {
        send_error(seq, ET_MSG_RUN, ET_ERR_BAD_IO, 0);
        return;
    }
    uint8_t *block = io_block();
    const et_io_header_t *hdr = (const et_io_header_t *)block;
    const et_io_buffer_t *bufs = (const et_io_buffer_t *)(block + sizeof *hdr);
    const int32_t *params = (const int32_t *)(bufs + hdr->n_buffers);

    /* Outputs start from zero on every RUN: the host need not send them, and a kernel
       that writes nothing can never pass with a previous trial's results left in RAM. */
    for (uint32_t i = 0; i < hdr->n_buffers; i++)
        if (bufs[i].is_output) memset(segments[bufs[i].segment] + bufs[i].offset, 0, bufs[i].size);

    counted_runs = 0;
    kernel_status = 0;
    uint8_t *p = reply_payload();
    p[0] = ET_RUN_STARTED;
    put_u16(p + 1, runs);
    send(ET_MSG_RUN | ET_REPLY_BIT, seq, 3);

    uint32_t start = counters_start();
    counters_stop(start, &counts[0]);
    for (uint32_t i = 1; i <= runs && kernel_status == 0; i++) {
        start = counters_start();
        run(segments, bufs, params);
        counters_stop(start, &counts[i]);
    }
    if (kernel_status != 0) {
        send_error(seq, ET_MSG_RUN, ET_ERR_KERNEL_FAILED, (uint32_t)kernel_status);
        return;
    }
    counted_runs = runs;
    p = reply_payload();
    p[0] = ET_RUN_DONE;
    put_u16(p + 1, runs);
    send(ET_MSG_RUN | ET_REPLY_BIT, seq, 3);
}

static void on_read(uint8_t seq, uint32_t length)
{
    if (length != 6) {
        send_error(seq, ET_MSG_READ, ET_ERR_BAD_LENGTH, length);
        return;
    }
    uint32_t offset = get_u32(frame + ET_FRAME_HEADER), n = get_u16(frame + ET_FRAME_HEADER + 4);
    if (n > ET_MAX_PAYLOAD - 4) {
        send_error(seq, ET_MSG_READ, ET_ERR_BAD_LENGTH, n);
        return;
    }
    const uint8_t *from = io_range(offset, n);
    if (!from) {
        send_error(seq, ET_MSG_READ, ET_ERR_OUT_OF_RANGE, offset);
        return;
    }
    uint8_t *p = reply_payload();
    put_u32(p, offset);
    memcpy(p + 4, from, n);
    send(ET_MSG_READ | ET_REPLY_BIT, seq, 4 + n);
}

static void on_cycles(uint8_t seq)
{
    if (counted_runs == 0) {
        send_error(seq, ET_MSG_CYCLES, ET_ERR_NOT_RUN, 0);
        return;
    }
    uint8_t *p = reply_payload();
    put_u16(p, counted_runs);
    p += 2;
    for (uint32_t i = 0; i <= counted_runs; i++, p += 9) {
        put_u32(p, counts[i].dwt);
        put_u32(p + 4, counts[i].systick);
        p[8] = counts[i].flags;
    }
    send(ET_MSG_CYCLES | ET_REPLY_BIT, seq, 2 + 9 * (counted_runs + 1));
}

/* Overrides the start-up code's semihosting fault handler: report the fault over the UART,
   give the last byte time to leave the shift register, and reset the board. */
__attribute__((noreturn)) void et_fault_handler(void)
{
    uint32_t ipsr;
    __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
    send_error(current_seq, current_type, ET_ERR_FAULT, ipsr & 0x1FFu);
    for (volatile uint32_t i = 0; i < (ET_CORE_HZ) / 1000u; i++) {
    }
    __asm__ volatile("dsb" ::: "memory");
    AIRCR = AIRCR_SYSRESETREQ;
    for (;;) {
    }
}

int main(void)
{
    et_uart_init();
    counters_init();
    for (;;) {
        uint32_t length = receive();
        current_type = frame[3];
        current_seq = frame[4];
        switch (current_type) {
        case ET_MSG_HELLO: on_hello(current_seq, length); break;
        case ET_MSG_LOAD: on_load(current_seq, length); break;
        case ET_MSG_RUN: on_run(current_seq, length); break;
        case ET_MSG_READ: on_read(current_seq, length); break;
        case ET_MSG_CYCLES: on_cycles(current_seq); break;
        default: send_error(current_seq, current_type, ET_ERR_UNKNOWN_TYPE, current_type); break;
        }
    }
}
