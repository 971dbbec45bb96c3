/* engine_infinity.c — ZeRO-Infinity's NVMe tier for the optimizer (offload_optimizer.device: nvme):
 * the Twin-Flow host part's fp32 master, m and v live in one swap file per rank (io/swap.h) instead
 * of host memory, and only swap_nbuf groups of them are in host memory at a time.
 *
 * File layout: the host part is cut into groups of swap_group elements (sub_group_size rounded up to
 * whole 8 KiB blocks of fp32); group g is one region at byte 12 G g holding [master | m | v], so a
 * group comes in with one read and goes out with one write.
 *
 * The step's pipeline (inf_host_adam_lane, on the host Adam lane of twin_flow.c): while group g is
 * updated, the reads of the next groups and the write of the previous one are in flight:
 *     read g+1 (g+2 ...)  |  CPU Adam of g  |  write g-1
 * Reads start before the step's clip coefficient is known (they need nothing from it). The updated
 * compute-dtype parameters go where twin_host_out says (the H2D buffer, or the offloaded shard), so
 * nothing else reads the staging buffers. A failed read or write (a full disk, an I/O error) or a
 * read whose checksum does not match what was written (io/swap.h) ends the job on every rank with the
 * swap's one-line error, which names the step, before anything read is used: no update and no
 * checkpoint is ever made from corrupted state. Checkpoints are never written here. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_adam.h"
#include "comm/comm.h"
#include "engine/engine_internal.h"
#include "io/swap.h"
#include "util/test_hooks.h"
#include "util/clock.h"

#define GROUP_ALIGN 2048 /* elements: 8 KiB of fp32, so every region starts on an O_DIRECT boundary */

static size_t n_groups(const zt_engine *e) { return (e->host_n + e->swap_group - 1) / e->swap_group; }
static size_t group_bytes(const zt_engine *e) { return 3 * e->swap_group * sizeof(float); }
static size_t group_offset(const zt_engine *e, size_t g) { return g * group_bytes(e); }

int inf_open(zt_engine *e, zt_err *err) {
    size_t G = (size_t)e->off.sub_group_size; /* 0 (DeepSpeed: one tensor a group): the smallest, GROUP_ALIGN */
    size_t whole = (e->host_n + GROUP_ALIGN - 1) / GROUP_ALIGN * GROUP_ALIGN;
    G = (G + GROUP_ALIGN - 1) / GROUP_ALIGN * GROUP_ALIGN;
    e->swap_group = min_sz(max_sz(G, GROUP_ALIGN), whole);
    size_t ng = n_groups(e);
    zt_swap_opts so = {e->off.aio_block_size, e->off.aio_queue_depth, e->off.aio_single_submit,
                       e->off.aio_overlap_events, !zt_test_hook_no_prealloc()};
    zt_err why;
    e->opt_swap = zt_swap_open(e->off.nvme_path, "optimizer", e->lay.rank, ng * group_bytes(e), &so, &why);
    if (!e->opt_swap) return zt_fail(err, "zero_optimization.offload_optimizer.nvme_path: %s", why.msg);
    e->mem.nvme[ZT_MEM_OPTIM] += ng * group_bytes(e);
    e->mem.host[ZT_MEM_OPTIM] += zt_swap_checksum_bytes(e->opt_swap);
    /* one group in use, the next read ahead, the previous being written: 3 keep all three going */
    e->swap_nbuf = (int)min_sz((size_t)(e->off.buffer_count > 0 ? e->off.buffer_count : 4), ng);
    e->swap_buf = zt_xcalloc((size_t)e->swap_nbuf, sizeof *e->swap_buf);
    for (int i = 0; i < e->swap_nbuf; i++) {
        e->swap_buf[i] = zt_swap_buffer_alloc(group_bytes(e));
        if (!e->swap_buf[i]) return zt_fail(err, "out of host memory for %d NVMe staging buffers of %.1f MiB",
                                            e->swap_nbuf, group_bytes(e) / 1048576.0);
        e->mem.host[ZT_MEM_OPTIM] += group_bytes(e);
    }
    zt_info("zero-infinity: rank %d swaps master, m and v of %zu elements to %s (%s, %.1f MiB in %zu groups of %zu, "
            "%d staging buffers)", e->lay.rank, e->host_n, zt_swap_path(e->opt_swap),
            zt_swap_is_direct(e->opt_swap) ? "O_DIRECT" : "buffered: the file system refuses O_DIRECT",
            ng * group_bytes(e) / 1048576.0, ng, e->swap_group, e->swap_nbuf);
    return 0;
}

void inf_close(zt_engine *e) {
    inf_param_close(e);
    zt_swap **swaps[2] = {&e->opt_swap, &e->param_swap};
    for (int i = 0; i < 2; i++) {
        if (!*swaps[i]) continue;
        zt_err ignored;
        zt_swap_wait_all(*swaps[i], &ignored);
        zt_swap_close(*swaps[i], 1);
        *swaps[i] = NULL;
    }
    for (int i = 0; i < e->swap_nbuf; i++) zt_swap_buffer_free(e->swap_buf[i]);
    free(e->swap_buf);
    e->swap_buf = NULL;
    e->swap_nbuf = 0;
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
void inf_state_rw(zt_engine *e, zt_opt_state which, size_t off, size_t n, float *buf, int write) {
    zt_err err;
    float *stage = e->swap_buf[0];
    size_t G = e->swap_group, bytes = G * sizeof(float);
    inf_swap_at_step(e->opt_swap, e->adam_t); /* a checkpoint of step adam_t, or the start */
    while (n > 0) {
        size_t g = off / G, within = off % G, k = min_sz(n, G - within);
        size_t at_byte = group_offset(e, g) + (size_t)which * bytes;
        int whole = write && within == 0 && k == G; /* nothing of the old region survives: no read */
        if (!whole && zt_swap_wait(e->opt_swap, zt_swap_read(e->opt_swap, at_byte, stage, bytes), &err)) inf_swap_failed(&err);
        if (write) {
            if (!zt_clock_costs_only()) memcpy(stage + within, buf, k * sizeof(float)); /* predict: costed only */
            if (zt_swap_wait(e->opt_swap, zt_swap_write(e->opt_swap, at_byte, stage, bytes), &err)) inf_swap_failed(&err);
        } else if (!zt_clock_costs_only()) {
            memcpy(buf, stage + within, k * sizeof(float));
        }
        off += k, n -= k, buf += k;
    }
}

/* ---------------------------------------------------------------- the step's pipeline */

typedef struct pipe {
    zt_engine *e;
    int *read_ticket, *write_ticket; /* per staging buffer, -1 when none in flight */
    size_t next_read;                /* the next group to read */
} pipe;

static void wait_ticket(pipe *p, int *ticket) {
    zt_err err;
    if (*ticket >= 0 && zt_swap_wait(p->e->opt_swap, *ticket, &err)) inf_swap_failed(&err);
    *ticket = -1;
}

/* issues the reads of groups up to `last` (into their buffers, once those are written out) */
static void read_ahead(pipe *p, size_t last) {
    zt_engine *e = p->e;
    for (; p->next_read <= last && p->next_read < n_groups(e); p->next_read++) {
        int slot = (int)(p->next_read % (size_t)e->swap_nbuf);
        wait_ticket(p, &p->write_ticket[slot]);
        p->read_ticket[slot] = zt_swap_read(e->opt_swap, group_offset(e, p->next_read), e->swap_buf[slot], group_bytes(e));
    }
}

void inf_host_adam_lane(twin_flow *tf) {
    zt_engine *e = tf->e;
    int nb = e->swap_nbuf;
    size_t G = e->swap_group, ng = n_groups(e);
    pipe p = {e, zt_xcalloc((size_t)nb, sizeof(int)), zt_xcalloc((size_t)nb, sizeof(int)), 0};
    for (int i = 0; i < nb; i++) p.read_ticket[i] = p.write_ticket[i] = -1;
    /* look ahead as far as the buffers allow without waiting on the write just issued */
    size_t ahead = nb >= 3 ? (size_t)nb - 2 : nb == 2 ? 1 : 0;
    read_ahead(&p, ahead);
    pthread_mutex_lock(&tf->mu);
    twin_wait_go(tf);
    pthread_mutex_unlock(&tf->mu);
    inf_swap_at_step(e->opt_swap, e->adam_t); /* counted before the go: the step being updated */
    for (size_t g = 0; g < ng; g++) {
        int slot = (int)(g % (size_t)nb);
        double tw = zt_clock_now();
        read_ahead(&p, g); /* one buffer: the read of g waits for the write of g-1 */
        wait_ticket(&p, &p.read_ticket[slot]);
        read_ahead(&p, g + ahead);
        double t0 = zt_clock_now();
        if (t0 - tw > 1e-4) zt_trace_complete(e->trace, ZT_LANE_HOST_ADAM, "nvme read wait", tw, t0);
        float *master = e->swap_buf[slot], *m = master + G, *v = m + G;
        size_t lo = g * G, hi = min_sz(e->host_n, lo + G);
        for (size_t c = lo / e->host_chunk; c * e->host_chunk < hi; c++) {
            pthread_mutex_lock(&tf->mu);
            twin_wait_count(tf, &tf->d2h_done, c + 1);
            pthread_mutex_unlock(&tf->mu);
            size_t ca, cb;
            twin_chunk_range(tf, c, &ca, &cb);
            size_t a = max_sz(ca, lo), b = min_sz(cb, hi);
            twin_adam_span(e, &tf->st, a, b - a, master + (a - lo), m + (a - lo), v + (a - lo), at(e, e->host_grad, a),
                           twin_host_out(e, a));
        }
        p.write_ticket[slot] = zt_swap_write(e->opt_swap, group_offset(e, g), e->swap_buf[slot], group_bytes(e));
        double t1 = zt_clock_now();
        tf->adam_busy += t1 - t0;
        engine_trace_host_adam(e, "host adam (nvme group)", t0, t1, hi - lo);
        /* chunks wholly inside the groups done so far may go up */
        twin_publish(tf, &tf->adam_done, g + 1 == ng ? tf->nchunks : hi / e->host_chunk);
    }
    double tw = zt_clock_now();
    zt_err err;
    if (zt_swap_wait_all(e->opt_swap, &err)) inf_swap_failed(&err);
    zt_trace_complete(e->trace, ZT_LANE_HOST_ADAM, "nvme write wait", tw, zt_clock_now());
    free(p.read_ticket);
    free(p.write_ticket);
}

void zt_engine_nvme_stats(const zt_engine *e, zt_engine_nvme *out) {
    memset(out, 0, sizeof *out);
    const zt_swap *swaps[2] = {e->opt_swap, e->param_swap};
    for (int i = 0; i < 2; i++) {
        if (!swaps[i]) continue;
        zt_swap_stats s = zt_swap_get_stats(swaps[i]);
        out->bytes_read += (double)s.bytes_read;
        out->bytes_written += (double)s.bytes_written;
        out->read_seconds += s.read_seconds;
        out->write_seconds += s.write_seconds;
    }
    inf_param_stats(e, out);
}
