/*
 * edgetune instruction-count plugin for QEMU's TCG plugin interface (API version 1).
 *
 * Counts guest instructions executed between a start marker and a stop marker address
 * (the first instruction of two empty, noinline firmware functions). Each start/stop pair
 * closes one "region"; the count of every region is written, one per line, to the file
 * named by the out= argument when QEMU exits.
 *
 * Counting is inline (a 64-bit add per executed instruction, no callback) so it is exact
 * and cheap; only the two marker instructions get a callback. Only the few API entry
 * points used are declared here, written from QEMU's plugin API documentation, so no QEMU
 * header is needed to build it.
 *
 * With pcs=1 it also counts executions per guest PC (one inline add per instruction on that
 * PC's own counter) and writes, for each of the first regions, every PC's count inside the
 * region: "pc REGION 0xADDR COUNT". Joined with a disassembly, that is the region's
 * dynamic instruction mix.
 *
 * With mem=1 (and pcs=1) it also notes the last data address each PC accessed ("addr 0xPC
 * 0xADDR"), so the host can tell which memory region a load or store instruction uses.
 *
 * Each region's lines are written and flushed when the region closes, its "region COUNT"
 * line last: when QEMU is killed (a run that hangs past its time limit), every region that
 * closed before is on disk, so a batch of variants keeps the counts of those that finished.
 * With mem=1 each closed region also gets "raddr REGION 0xPC 0xADDR": the last data address
 * each PC accessed inside that region (variants of a batch share library code).
 *
 * Arguments: start=0xADDR stop=0xADDR out=PATH [pcs=1] [mem=1]
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t; /* only used through a pointer */
struct qemu_plugin_tb;
struct qemu_plugin_insn;

enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef uint32_t qemu_plugin_meminfo_t;
enum qemu_plugin_mem_rw { QEMU_PLUGIN_MEM_R = 1, QEMU_PLUGIN_MEM_W, QEMU_PLUGIN_MEM_RW };
typedef void (*qemu_plugin_vcpu_mem_cb_t)(unsigned int vcpu_index, qemu_plugin_meminfo_t info, uint64_t vaddr,
                                          void *userdata);

extern void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
extern size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
extern struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
extern uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
extern void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_udata_cb_t cb,
                                                   enum qemu_plugin_cb_flags flags, void *userdata);
extern void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn, enum qemu_plugin_op op,
                                                       void *ptr, uint64_t imm);
extern void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_mem_cb_t cb,
                                             enum qemu_plugin_cb_flags flags, enum qemu_plugin_mem_rw rw,
                                             void *userdata);
extern void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

static uint64_t executed;       /* every guest instruction, inline-incremented */
static uint64_t region_begin;
static int region_open;
static unsigned region_count;
static unsigned regions_dropped;
static uint64_t start_addr, stop_addr;
static char out_path[4096];
static FILE *out;

/* Regions written: a batch of 64 variants has 65 (harness.h); a program calling its kernel
   in a timing loop has many more, and only the first ones matter. */
#define MAX_REGIONS 128u

/* Per-PC counting (pcs=1). Entries are dense; an open-addressing table maps a PC to its
   entry, so a block translated twice keeps counting on the same counter. */
#define MAX_PCS (1u << 16)
#define PC_TABLE_SIZE (1u << 17)
struct pc_entry {
    uint64_t pc;
    uint64_t count;     /* inline-incremented on every execution */
    uint64_t at_start;  /* count when the current region opened */
    uint64_t last_addr; /* mem=1: the last data address this PC accessed */
    int accessed;       /* ever (the "addr" lines) */
    int accessed_in_region;
};
static int per_pc, per_pc_memory;
static struct pc_entry pc_entries[MAX_PCS];
static uint32_t pc_used;
static uint32_t pc_table[PC_TABLE_SIZE]; /* entry index + 1; 0 = empty */
static unsigned pcs_dropped;

static struct pc_entry *pc_entry_for(uint64_t pc)
{
    uint32_t slot = (uint32_t)((pc >> 1) * 2654435761u) & (PC_TABLE_SIZE - 1);
    while (pc_table[slot]) {
        struct pc_entry *e = &pc_entries[pc_table[slot] - 1];
        if (e->pc == pc) return e;
        slot = (slot + 1) & (PC_TABLE_SIZE - 1);
    }
    if (pc_used == MAX_PCS) return NULL;
    pc_entries[pc_used].pc = pc;
    pc_table[slot] = ++pc_used;
    return &pc_entries[pc_used - 1];
}

static void on_start(unsigned int vcpu, void *udata)
{
    (void)vcpu; (void)udata;
    region_begin = executed;
    region_open = 1;
    for (uint32_t i = 0; i < pc_used; i++) {
        pc_entries[i].at_start = pc_entries[i].count;
        pc_entries[i].accessed_in_region = 0;
    }
}

static void on_stop(unsigned int vcpu, void *udata)
{
    (void)vcpu; (void)udata;
    if (!region_open || !out) return;
    region_open = 0;
    if (region_count >= MAX_REGIONS) {
        regions_dropped++;
        return;
    }
    uint64_t count = executed - region_begin;
    for (uint32_t i = 0; i < pc_used; i++) {
        const struct pc_entry *e = &pc_entries[i];
        if (e->count != e->at_start)
            fprintf(out, "pc %u 0x%" PRIx64 " %" PRIu64 "\n", region_count, e->pc, e->count - e->at_start);
        if (e->accessed_in_region)
            fprintf(out, "raddr %u 0x%" PRIx64 " 0x%" PRIx64 "\n", region_count, e->pc, e->last_addr);
    }
    fprintf(out, "region %" PRIu64 "\n", count);
    fflush(out);
    region_count++;
}

static void on_memory(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata)
{
    (void)vcpu; (void)info;
    struct pc_entry *e = udata;
    e->last_addr = vaddr;
    e->accessed = 1;
    e->accessed_in_region = 1;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t pc = qemu_plugin_insn_vaddr(insn);
        /* Whatever order QEMU runs a marker's callback and its inline add in, it is the
           same every run; the firmware measures an empty region to calibrate it away. */
        if (pc == start_addr) qemu_plugin_register_vcpu_insn_exec_cb(insn, on_start, QEMU_PLUGIN_CB_NO_REGS, NULL);
        if (pc == stop_addr) qemu_plugin_register_vcpu_insn_exec_cb(insn, on_stop, QEMU_PLUGIN_CB_NO_REGS, NULL);
        qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &executed, 1);
        if (per_pc) {
            struct pc_entry *e = pc_entry_for(pc);
            if (e) qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &e->count, 1);
            else pcs_dropped++;
            if (e && per_pc_memory)
                qemu_plugin_register_vcpu_mem_cb(insn, on_memory, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW, e);
        }
    }
}

static void write_counts(qemu_plugin_id_t id, void *udata)
{
    (void)id; (void)udata;
    if (!out) return;
    fprintf(out, "total %" PRIu64 "\n", executed);
    if (regions_dropped) fprintf(out, "dropped %u\n", regions_dropped);
    if (pcs_dropped) fprintf(out, "pcs_dropped %u\n", pcs_dropped);
    for (uint32_t i = 0; i < pc_used; i++)
        if (pc_entries[i].accessed)
            fprintf(out, "addr 0x%" PRIx64 " 0x%" PRIx64 "\n", pc_entries[i].pc, pc_entries[i].last_addr);
    fclose(out);
    out = NULL;
}

static int parse_arg(const char *arg)
{
    if (strncmp(arg, "start=", 6) == 0) { start_addr = strtoull(arg + 6, NULL, 0); return 0; }
    if (strncmp(arg, "stop=", 5) == 0) { stop_addr = strtoull(arg + 5, NULL, 0); return 0; }
    if (strcmp(arg, "pcs=1") == 0) { per_pc = 1; return 0; }
    if (strcmp(arg, "pcs=0") == 0) { per_pc = 0; return 0; }
    if (strcmp(arg, "mem=1") == 0) { per_pc_memory = 1; return 0; }
    if (strcmp(arg, "mem=0") == 0) { per_pc_memory = 0; return 0; }
    if (strncmp(arg, "out=", 4) == 0) {
        size_t len = strlen(arg + 4);
        if (len == 0 || len >= sizeof out_path) return -1;
        memcpy(out_path, arg + 4, len + 1);
        return 0;
    }
    return -1;
}

__attribute__((visibility("default")))
int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (parse_arg(argv[i]) != 0) {
            fprintf(stderr, "edgetune insn_count plugin: bad argument '%s'\n", argv[i]);
            return -1;
        }
    }
    if (!start_addr || !stop_addr || !out_path[0]) {
        fprintf(stderr, "edgetune insn_count plugin: start=, stop= and out= are required\n");
        return -1;
    }
    out = fopen(out_path, "w");
    if (!out) {
        fprintf(stderr, "edgetune insn_count plugin: cannot write '%s'\n", out_path);
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, write_counts, NULL);
    return 0;
}
