/* engine_infinity.c — ZeRO-Infinity's NVMe tier for the optimizer (offload_optimizer.device: nvme):
 * the Twin-Flow host part's fp32 master, m and v live in one swap file per rank (io/swap.h) instead
 * of host memory, and only nbuf groups of them are in host memory at a time. The state (struct
 * inf_states) is this file's; the engine hands it the shared facts and the host part's size.
 *
 * File layout: the host part is cut into groups of swap_group elements (sub_group_size rounded up to
 * whole 8 KiB blocks of fp32); group g is one region at byte 12 G g holding [master | m | v], so a
 * group comes in with one read and goes out with one write.
 *
 * The step's pipeline (inf_states_update, on the host Adam lane of twin_flow.c, which does the
 * update itself through inf_update_hooks): while group g is updated, the reads of the next groups
 * and the write of the previous one are in flight:
 *     read g+1 (g+2 ...)  |  CPU Adam of g  |  write g-1
 * Reads start before the step's clip coefficient is known (they need nothing from it). The updated
 * compute-dtype parameters go where the host lane puts them, so nothing else reads the staging
 * buffers. A failed read or write (a full disk, an I/O error) or a
 * read whose checksum does not match what was written (io/swap.h) ends the job on every rank with the
 * swap's one-line error, which names the step, before anything read is used: no update and no
 * checkpoint is ever made from corrupted state. Checkpoints are never written here. */
#include <stdlib.h>
#include <string.h>

#include "engine/infinity.h"

#include "comm/comm.h"
#include "io/swap.h"
#include "util/test_hooks.h"
#include "util/clock.h"

#define GROUP_ALIGN 2048 /* elements: 8 KiB of fp32, so every region starts on an O_DIRECT boundary */

struct inf_states {
    engine_facts f;
    size_t n;           /* the host part's elements */
    zt_swap *swap;
    size_t group;       /* elements per group (sub_group_size, rounded) */
    int nbuf;           /* staging buffers, each [master | m | v] of one group */
    float **buf;
};

static size_t n_groups(const inf_states *s) { return (s->n + s->group - 1) / s->group; }
static size_t group_bytes(const inf_states *s) { return 3 * s->group * sizeof(float); }
static size_t group_offset(const inf_states *s, size_t g) { return g * group_bytes(s); }

inf_states *inf_states_open(const engine_facts *f, size_t n, zt_err *err) {
    inf_states *s = zt_xcalloc(1, sizeof *s);
    s->f = *f;
    s->n = n;
    size_t G = (size_t)f->off.sub_group_size; /* 0 (DeepSpeed: one tensor a group): the smallest, GROUP_ALIGN */
    size_t whole = (n + GROUP_ALIGN - 1) / GROUP_ALIGN * GROUP_ALIGN;
    G = (G + GROUP_ALIGN - 1) / GROUP_ALIGN * GROUP_ALIGN;
    s->group = min_sz(max_sz(G, GROUP_ALIGN), whole);
    size_t ng = n_groups(s);
    zt_swap_opts so = {f->off.aio_block_size, f->off.aio_queue_depth, f->off.aio_single_submit,
                       f->off.aio_overlap_events, !zt_test_hook_no_prealloc()};
    zt_err why;
    s->swap = zt_swap_open(f->off.nvme_path, "optimizer", f->lay.rank, ng * group_bytes(s), &so, &why);
    if (!s->swap) {
        zt_fail(err, "zero_optimization.offload_optimizer.nvme_path: %s", why.msg);
        inf_states_close(s);
        return NULL;
    }
    f->mem->nvme[ZT_MEM_OPTIM] += ng * group_bytes(s);
    f->mem->host[ZT_MEM_OPTIM] += zt_swap_checksum_bytes(s->swap);
    /* one group in use, the next read ahead, the previous being written: 3 keep all three going */
    s->nbuf = (int)min_sz((size_t)(f->off.buffer_count > 0 ? f->off.buffer_count : 4), ng);
    s->buf = zt_xcalloc((size_t)s->nbuf, sizeof *s->buf);
    for (int i = 0; i < s->nbuf; i++) {
        s->buf[i] = zt_swap_buffer_alloc(group_bytes(s));
        if (!s->buf[i]) {
            zt_fail(err, "out of host memory for %d NVMe staging buffers of %.1f MiB", s->nbuf,
                    group_bytes(s) / 1048576.0);
            inf_states_close(s);
            return NULL;
        }
        f->mem->host[ZT_MEM_OPTIM] += group_bytes(s);
    }
    zt_info("zero-infinity: rank %d swaps master, m and v of %zu elements to %s (%s, %.1f MiB in %zu groups of %zu, "
            "%d staging buffers)", f->lay.rank, n, zt_swap_path(s->swap),
            zt_swap_is_direct(s->swap) ? "O_DIRECT" : "buffered: the file system refuses O_DIRECT",
            ng * group_bytes(s) / 1048576.0, ng, s->group, s->nbuf);
    return s;
}

void inf_states_close(inf_states *s) {
    if (!s) return;
    if (s->swap) {
        zt_err ignored;
        zt_swap_wait_all(s->swap, &ignored);
        zt_swap_close(s->swap, 1);
    }
    for (int i = 0; i < s->nbuf; i++) zt_swap_buffer_free(s->buf[i]);
    free(s->buf);
    free(s);
}

void inf_swap_at_step(struct zt_swap *s, long step) {
    char words[32];
    snprintf(words, sizeof words, "step %ld", step);
    zt_swap_set_context(s, words);
}

void inf_swap_failed(const zt_err *err) {
    fprintf(stderr, "zerotrain: error: %s\n", err->msg);
    fflush(stderr);
    zt_mpi_abort(1);
}

/* Synchronous access outside the step (initialisation, checkpoints, export), through staging
 * buffer 0: the group's region of `which` (aligned: G is a multiple of GROUP_ALIGN) is read, changed
 * and written back whole. Only that third of the group is written, so at start the m and v regions
 * stay unwritten (they read as zeros, which they are) until the first update writes them. */
size_t inf_states_group(const inf_states *s) { return s->group; }

void inf_states_rw(inf_states *s, long step, zt_opt_state which, size_t off, size_t n, float *buf, int write) {
    zt_err err;
    float *stage = s->buf[0];
    size_t G = s->group, bytes = G * sizeof(float);
    inf_swap_at_step(s->swap, step); /* a checkpoint of that step, or the start */
    while (n > 0) {
        size_t g = off / G, within = off % G, k = min_sz(n, G - within);
        size_t at_byte = group_offset(s, g) + (size_t)which * bytes;
        int whole = write && within == 0 && k == G; /* nothing of the old region survives: no read */
        if (!whole && zt_swap_wait(s->swap, zt_swap_read(s->swap, at_byte, stage, bytes), &err)) inf_swap_failed(&err);
        if (write) {
            if (!zt_clock_costs_only()) memcpy(stage + within, buf, k * sizeof(float)); /* predict: costed only */
            if (zt_swap_wait(s->swap, zt_swap_write(s->swap, at_byte, stage, bytes), &err)) inf_swap_failed(&err);
        } else if (!zt_clock_costs_only()) {
            memcpy(buf, stage + within, k * sizeof(float));
        }
        off += k, n -= k, buf += k;
    }
}

/* ---------------------------------------------------------------- the step's pipeline */

typedef struct pipe {
    inf_states *s;
    int *read_ticket, *write_ticket; /* per staging buffer, -1 when none in flight */
    size_t next_read;                /* the next group to read */
} pipe;

static void wait_ticket(pipe *p, int *ticket) {
    zt_err err;
    if (*ticket >= 0 && zt_swap_wait(p->s->swap, *ticket, &err)) inf_swap_failed(&err);
    *ticket = -1;
}

/* issues the reads of groups up to `last` (into their buffers, once those are written out) */
static void read_ahead(pipe *p, size_t last) {
    inf_states *s = p->s;
    for (; p->next_read <= last && p->next_read < n_groups(s); p->next_read++) {
        int slot = (int)(p->next_read % (size_t)s->nbuf);
        wait_ticket(p, &p->write_ticket[slot]);
        p->read_ticket[slot] = zt_swap_read(s->swap, group_offset(s, p->next_read), s->buf[slot], group_bytes(s));
    }
}

void inf_states_update(inf_states *s, const inf_update_hooks *h) {
    int nb = s->nbuf;
    size_t G = s->group, ng = n_groups(s);
    pipe p = {s, zt_xcalloc((size_t)nb, sizeof(int)), zt_xcalloc((size_t)nb, sizeof(int)), 0};
    for (int i = 0; i < nb; i++) p.read_ticket[i] = p.write_ticket[i] = -1;
    /* look ahead as far as the buffers allow without waiting on the write just issued */
    size_t ahead = nb >= 3 ? (size_t)nb - 2 : nb == 2 ? 1 : 0;
    read_ahead(&p, ahead);
    inf_swap_at_step(s->swap, h->wait_go(h->ctx)); /* counted before the go: the step being updated */
    for (size_t g = 0; g < ng; g++) {
        int slot = (int)(g % (size_t)nb);
        double tw = zt_clock_now();
        read_ahead(&p, g); /* one buffer: the read of g waits for the write of g-1 */
        wait_ticket(&p, &p.read_ticket[slot]);
        read_ahead(&p, g + ahead);
        double t0 = zt_clock_now();
        if (t0 - tw > 1e-4) zt_trace_complete(*s->f.trace, ZT_LANE_HOST_ADAM, "nvme read wait", tw, t0);
        float *master = s->buf[slot], *m = master + G, *v = m + G;
        size_t lo = g * G, hi = min_sz(s->n, lo + G);
        h->update(h->ctx, lo, hi, master, m, v);
        p.write_ticket[slot] = zt_swap_write(s->swap, group_offset(s, g), s->buf[slot], group_bytes(s));
        double t1 = zt_clock_now();
        facts_trace_host_adam(&s->f, "host adam (nvme group)", t0, t1, hi - lo);
        h->group_done(h->ctx, hi, g + 1 == ng, t0, t1);
    }
    double tw = zt_clock_now();
    zt_err err;
    if (zt_swap_wait_all(s->swap, &err)) inf_swap_failed(&err);
    zt_trace_complete(*s->f.trace, ZT_LANE_HOST_ADAM, "nvme write wait", tw, zt_clock_now());
    free(p.read_ticket);
    free(p.write_ticket);
}

void inf_swap_stats(const zt_swap *swap, zt_engine_nvme *out) {
    zt_swap_stats st = zt_swap_get_stats(swap);
    out->bytes_read += (double)st.bytes_read;
    out->bytes_written += (double)st.bytes_written;
    out->read_seconds += st.read_seconds;
    out->write_seconds += st.write_seconds;
}

void inf_states_stats(const inf_states *s, zt_engine_nvme *out) {
    if (s) inf_swap_stats(s->swap, out);
}
