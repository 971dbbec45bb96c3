/* selftest_comm.c — the selftest's comm checks (zt_selftest_comm): every collective of the NCCL
 * table on device buffers against the MPI table on host buffers, and (on 4+ ranks) the group comms
 * against results known from each group's members; the NCCL side of the hang watchdog after them
 * (selftest_watchdog.c). Run by `zerotrain selftest` (src/cmd/selftest.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "comm/watchdog.h"
#include "config/config.h"
#include "selftest/selftest.h"
#include "util/util.h"

/* ---------------------------------------------------------------- NCCL against MPI */
/* Runs only under mpirun with more than one rank and the CUDA backend: every collective of the
 * NCCL table on device buffers against the MPI table on host buffers, from the same per-rank
 * random inputs. fp32 sums may be added in another order (tolerance 1e-6 relative); bf16 sums are
 * checked against the fp32 MPI sum of the same bf16 inputs (TOL_BF16); gathers and broadcasts
 * move bits and must match exactly. Each rank checks its own result; the errors are summed over
 * ranks before the PASS/FAIL line (printed by rank 0). */
static double comm_err_all(zt_comm *mpi, double err) {
    double v = isfinite(err) ? err : 1e30;
    mpi->allreduce_host_double(mpi, &v, 1);
    return v;
}
static void comm_check(zt_selftest *st, zt_comm *mpi, zt_comm *nc, const char *what, double err, double tol) {
    char name[160];
    snprintf(name, sizeof name, "%s %s", nc->name, what);
    zt_selftest_check(st, name, comm_err_all(mpi, err), tol);
}
/* pieces of n elements: equal, or rank r gets (r % 3) + r * 5 + 1 (rank 1 gets 0 when `zero`) */
static void comm_counts(size_t *counts, int world, int equal, int zero) {
    for (int r = 0; r < world; r++) counts[r] = equal ? 1000 : (size_t)((r % 3) + r * 5 + 1);
    if (zero && world > 1) counts[1] = 0;
}
static size_t sum_counts(const size_t *c, int world) {
    size_t s = 0;
    for (int r = 0; r < world; r++) s += c[r];
    return s;
}
static void test_comm_pair(zt_selftest *st, zt_comm *mpi, zt_comm *nc, zt_rng *rng) {
    const zt_backend *be = st->dev;
    int world = mpi->world, rank = mpi->rank;
    char name[128];
    /* allreduce, fp32 and bf16 */
    size_t n = 100003;
    float *x = st_rnd(rng, n, 1, 0), *want = st_zeros(n), *got = st_zeros(n);
    memcpy(want, x, n * sizeof(float));
    mpi->wait(mpi, mpi->allreduce_sum(mpi, want, n, ZT_F32));
    float *d = st_up_f(be, x, n);
    nc->wait(nc, nc->allreduce_sum(nc, d, n, ZT_F32));
    st_down_f(be, got, d, n);
    comm_check(st, mpi, nc, "allreduce_sum f32 vs mpi", zt_selftest_rel_err(got, want, n), 1e-6);
    be->free(d);
    void *dc = st_up_c(be, x, n);
    nc->wait(nc, nc->allreduce_sum(nc, dc, n, be->compute_dtype));
    st_down_c(be, got, dc, n);
    comm_check(st, mpi, nc, "allreduce_sum compute dtype vs mpi f32", zt_selftest_rel_err(got, want, n), TOL_BF16);
    be->free(dc);
    free(x), free(want), free(got);

    size_t counts[64];
    for (int variant = 0; variant < 3; variant++) {
        int equal = variant == 0, zero = variant == 2;
        const char *tag = equal ? "equal counts" : zero ? "variable counts, one empty" : "variable counts";
        comm_counts(counts, world, equal, zero);
        size_t total = sum_counts(counts, world), off = 0;
        for (int r = 0; r < rank; r++) off += counts[r];
        /* reduce-scatter */
        float *s = st_rnd(rng, total, 1, 0), *w = st_zeros(counts[rank] + 1), *g = st_zeros(counts[rank] + 1);
        mpi->wait(mpi, mpi->reduce_scatter_sum(mpi, s, w, counts, ZT_F32));
        float *ds = st_up_f(be, s, total), *dr = st_alloc(be, (counts[rank] + 1) * sizeof(float));
        nc->wait(nc, nc->reduce_scatter_sum(nc, ds, dr, counts, ZT_F32));
        st_down_f(be, g, dr, counts[rank]);
        snprintf(name, sizeof name, "reduce_scatter_sum f32 vs mpi (%s)", tag);
        comm_check(st, mpi, nc, name, zt_selftest_rel_err(g, w, counts[rank]), 1e-6);
        be->free(ds), be->free(dr), free(s), free(w), free(g);
        /* all-gather, out of place and in place */
        float *mine = st_rnd(rng, counts[rank] + 1, 1, 0), *aw = st_zeros(total), *ag = st_zeros(total);
        mpi->wait(mpi, mpi->allgather(mpi, mine, aw, counts, ZT_F32));
        float *dm = st_up_f(be, mine, counts[rank] + 1), *da = st_alloc(be, total * sizeof(float));
        nc->wait(nc, nc->allgather(nc, dm, da, counts, ZT_F32));
        st_down_f(be, ag, da, total);
        snprintf(name, sizeof name, "allgather f32 vs mpi (%s, mismatches)", tag);
        comm_check(st, mpi, nc, name, (double)st_count_diff(ag, aw, total), 0);
        float *pre = st_zeros(total);
        memcpy(pre + off, mine, counts[rank] * sizeof(float));
        be->free(da);
        da = st_up_f(be, pre, total);
        nc->wait(nc, nc->allgather(nc, da + off, da, counts, ZT_F32));
        st_down_f(be, ag, da, total);
        snprintf(name, sizeof name, "allgather in place f32 vs mpi (%s, mismatches)", tag);
        comm_check(st, mpi, nc, name, (double)st_count_diff(ag, aw, total), 0);
        be->free(dm), be->free(da), free(mine), free(aw), free(ag), free(pre);
    }
    /* broadcast from the last rank */
    size_t nb = 4097;
    float *b = st_rnd(rng, nb, 1, (float)rank), *bw = st_zeros(nb), *bg = st_zeros(nb);
    memcpy(bw, b, nb * sizeof(float));
    mpi->wait(mpi, mpi->broadcast(mpi, bw, nb * sizeof(float), world - 1));
    float *db = st_up_f(be, b, nb);
    nc->wait(nc, nc->broadcast(nc, db, nb * sizeof(float), world - 1));
    st_down_f(be, bg, db, nb);
    comm_check(st, mpi, nc, "broadcast vs mpi (mismatches)", (double)st_count_diff(bg, bw, nb), 0);
    be->free(db), free(b), free(bw), free(bg);
    /* host-side calls */
    double hv[2] = {rank + 0.5, 1.0}, want_sum = world * (world - 1) / 2.0 + 0.5 * world;
    nc->allreduce_host_double(nc, hv, 2);
    comm_check(st, mpi, nc, "allreduce_host_double", fabs(hv[0] - want_sum) + fabs(hv[1] - world), 0);
    comm_check(st, mpi, nc, "agree_max", (double)abs(nc->agree_max(nc, rank * 3) - (world - 1) * 3), 0);
    nc->barrier(nc);
}
/* ---------------------------------------------------------------- group comms */
/* Under mpirun with an even number >= 4 of ranks: the group comms (comm.h) for two splits of the
 * ranks, color = rank % 2 (key: the world rank) and color = rank / 2 (key: minus the world rank, so
 * a group's rank 0 is its highest world rank): zt_comm_mpi_group on host buffers in fp32, and on a
 * device backend zt_comm_staged_group on device buffers in fp32 and the compute dtype. Element k of
 * world rank w's input is group_val(w, k), a small integer (exact in 16 bits and in any order of
 * summation), so every result is known from the group's members alone: a comm over the wrong ranks
 * or in the wrong order fails. The byte counters must have grown by comm.h's formulas with n = the
 * group's size. */
static float group_val(int w, size_t k) { return (float)(3 * (w + 1) + (int)(k % 5)); }

typedef struct {
    int n, me, member[64]; /* the group's world ranks in group-rank order; this rank's group rank */
    zt_comm_bytes want;    /* the byte counts expected so far */
} comm_group;

/* the group of this rank under split `by_pairs` (color rank / 2, key -rank) or not (rank % 2, key rank) */
static comm_group group_of(int by_pairs, int world, int rank) {
    comm_group g;
    memset(&g, 0, sizeof g);
    int step = by_pairs ? -1 : 1;
    for (int i = 0, w = by_pairs ? world - 1 : 0; i < world; i++, w += step) /* in key order */
        if ((by_pairs ? w / 2 == rank / 2 : w % 2 == rank % 2) && g.n < 64) {
            if (w == rank) g.me = g.n;
            g.member[g.n++] = w;
        }
    return g;
}

/* elements of got that differ from want (exact results only) */
static double mismatches(const float *got, const float *want, size_t n) { return (double)st_count_diff(got, want, n); }

/* the collectives of c over buffers of be, dtype t, against group g */
static void group_collectives(zt_selftest *st, zt_comm *world, zt_comm *c, const zt_backend *be, zt_dtype t,
                              comm_group *g, const char *split) {
    char name[128];
    const char *dt = t == ZT_F32 ? "f32" : "compute dtype";
    size_t esz = zt_dtype_size(t);
    int is_f32 = t == ZT_F32;
    /* all-reduce */
    size_t n = 1001;
    float *x = st_zeros(n), *want = st_zeros(n), *got = st_zeros(n);
    for (size_t k = 0; k < n; k++) {
        x[k] = group_val(g->member[g->me], k);
        for (int r = 0; r < g->n; r++) want[k] += group_val(g->member[r], k);
    }
    void *d = is_f32 ? (void *)st_up_f(be, x, n) : st_up_c(be, x, n);
    c->wait(c, c->allreduce_sum(c, d, n, t));
    if (is_f32) st_down_f(be, got, d, n);
    else st_down_c(be, got, d, n);
    snprintf(name, sizeof name, "%s: allreduce_sum %s (mismatches)", split, dt);
    comm_check(st, world, c, name, mismatches(got, want, n), 0);
    double ar = 2.0 * (g->n - 1) / g->n * (double)(n * esz);
    g->want.sent[ZT_COLL_ALLREDUCE] += ar, g->want.recv[ZT_COLL_ALLREDUCE] += ar;
    be->free(d), free(x), free(want), free(got);

    /* reduce-scatter and all-gather, uneven pieces: group rank r's is 4 r + 3 elements */
    size_t counts[64], total = 0, off = 0;
    for (int r = 0; r < g->n; r++) {
        counts[r] = (size_t)(4 * r + 3);
        if (r < g->me) off += counts[r];
        total += counts[r];
    }
    size_t mine = counts[g->me];
    float *send = st_zeros(total), *rs_want = st_zeros(mine), *rs_got = st_zeros(mine);
    float *ag_want = st_zeros(total), *ag_got = st_zeros(total);
    for (size_t k = 0; k < total; k++) send[k] = group_val(g->member[g->me], k);
    for (size_t j = 0; j < mine; j++)
        for (int r = 0; r < g->n; r++) rs_want[j] += group_val(g->member[r], off + j);
    for (int r = 0, k = 0; r < g->n; r++)
        for (size_t j = 0; j < counts[r]; j++, k++) ag_want[k] = group_val(g->member[r], (size_t)k);
    void *ds = is_f32 ? (void *)st_up_f(be, send, total) : st_up_c(be, send, total);
    void *dr = st_alloc(be, mine * esz), *da = st_alloc(be, total * esz);
    c->wait(c, c->reduce_scatter_sum(c, ds, dr, counts, t));
    /* the all-gather sends this rank's piece of its own input: ag_want's piece me is send's [off, off + mine) */
    c->wait(c, c->allgather(c, (char *)ds + off * esz, da, counts, t));
    if (is_f32) st_down_f(be, rs_got, dr, mine), st_down_f(be, ag_got, da, total);
    else st_down_c(be, rs_got, dr, mine), st_down_c(be, ag_got, da, total);
    snprintf(name, sizeof name, "%s: reduce_scatter_sum %s, uneven pieces (mismatches)", split, dt);
    comm_check(st, world, c, name, mismatches(rs_got, rs_want, mine), 0);
    snprintf(name, sizeof name, "%s: allgather %s, uneven pieces (mismatches)", split, dt);
    comm_check(st, world, c, name, mismatches(ag_got, ag_want, total), 0);
    g->want.sent[ZT_COLL_REDUCE_SCATTER] += (double)((total - mine) * esz);
    g->want.recv[ZT_COLL_REDUCE_SCATTER] += (double)((size_t)(g->n - 1) * mine * esz);
    g->want.sent[ZT_COLL_ALLGATHER] += (double)((size_t)(g->n - 1) * mine * esz);
    g->want.recv[ZT_COLL_ALLGATHER] += (double)((total - mine) * esz);
    be->free(ds), be->free(dr), be->free(da);
    free(send), free(rs_want), free(rs_got), free(ag_want), free(ag_got);
}

/* the group's rank and size, the broadcast from group rank 1 and the host-side calls: once per comm */
static void group_broadcast_and_host(zt_selftest *st, zt_comm *world, zt_comm *c, const zt_backend *be,
                                     comm_group *g, const char *split) {
    char name[128];
    snprintf(name, sizeof name, "%s: rank and size are the group's", split);
    comm_check(st, world, c, name, (double)(c->rank != g->me) + (double)(c->world != g->n), 0);
    size_t n = 777;
    float *x = st_zeros(n), *want = st_zeros(n), *got = st_zeros(n);
    for (size_t k = 0; k < n; k++) x[k] = group_val(g->member[g->me], k), want[k] = group_val(g->member[1], k);
    float *d = st_up_f(be, x, n);
    c->wait(c, c->broadcast(c, d, n * sizeof(float), 1));
    st_down_f(be, got, d, n);
    snprintf(name, sizeof name, "%s: broadcast from group rank 1 (mismatches)", split);
    comm_check(st, world, c, name, mismatches(got, want, n), 0);
    if (g->me == 1) g->want.sent[ZT_COLL_BROADCAST] += (double)(n * sizeof(float));
    else g->want.recv[ZT_COLL_BROADCAST] += (double)(n * sizeof(float));
    be->free(d), free(x), free(want), free(got);

    int w = g->member[g->me], max = 0;
    double hv[2] = {w + 0.5, 1.0}, sum = 0;
    for (int r = 0; r < g->n; r++) sum += g->member[r] + 0.5, max = g->member[r] > max ? g->member[r] : max;
    c->allreduce_host_double(c, hv, 2);
    snprintf(name, sizeof name, "%s: allreduce_host_double", split);
    comm_check(st, world, c, name, fabs(hv[0] - sum) + fabs(hv[1] - g->n), 0);
    snprintf(name, sizeof name, "%s: agree_max", split);
    comm_check(st, world, c, name, (double)abs(c->agree_max(c, w) - max), 0);
    double scalar = 2.0 * (g->n - 1) / g->n * (double)(2 * sizeof(double) + sizeof(int));
    g->want.sent[ZT_COLL_SCALAR] += scalar, g->want.recv[ZT_COLL_SCALAR] += scalar;
    c->barrier(c);
}

/* the counters against the formulas, relative (they are sums of doubles) */
static void group_bytes(zt_selftest *st, zt_comm *world, zt_comm *c, const comm_group *g, const char *split) {
    double worst = 0;
    for (int k = 0; k < ZT_COLL_NKIND; k++) {
        double es = fabs(c->bytes.sent[k] - g->want.sent[k]), er = fabs(c->bytes.recv[k] - g->want.recv[k]);
        worst = fmax(worst, fmax(es / fmax(g->want.sent[k], 1.0), er / fmax(g->want.recv[k], 1.0)));
    }
    char name[128];
    snprintf(name, sizeof name, "%s: byte counters per comm.h with n = the group's size", split);
    comm_check(st, world, c, name, worst, 1e-12);
}

static void test_comm_groups(zt_selftest *st, zt_comm *world) {
    if (world->world < 4 || world->world % 2 || world->world > 64) {
        if (st->verbose && world->world > 1)
            printf("selftest: the group comm check runs on an even number of ranks from 4 to 64\n");
        return;
    }
    /* a negative color on one rank: every rank gets NULL (none waits in a split the others skipped) */
    zt_err bad = {{0}};
    zt_comm *none = zt_comm_mpi_group(NULL, world->rank == 1 ? -1 : 0, world->rank, &bad);
    comm_check(st, world, world, "group comm refused on every rank when one rank's color is negative",
               (double)(none != NULL) + (double)!strstr(bad.msg, "color must be >= 0"), 0);
    if (none) none->destroy(none);
    int device = !st->dev->memory_is_host;
    for (int by_pairs = 0; by_pairs < 2; by_pairs++) {
        const char *split = by_pairs ? "color rank/2, key -rank" : "color rank%2, key rank";
        int color = by_pairs ? world->rank / 2 : world->rank % 2, key = by_pairs ? -world->rank : world->rank;
        zt_err err = {{0}};
        zt_comm *host = zt_comm_mpi_group(NULL, color, key, &err);
        zt_comm *dev = device ? zt_comm_staged_group(st->dev, color, key, &err) : NULL;
        if (!host || (device && !dev)) {
            char name[1200];
            snprintf(name, sizeof name, "group comms created (%s): %s", split, err.msg);
            zt_selftest_check(st, name, 1, 0); /* every rank fails alike: the split is collective */
            if (host) host->destroy(host);
            if (dev) dev->destroy(dev);
            continue;
        }
        comm_group g = group_of(by_pairs, world->world, world->rank);
        group_collectives(st, world, host, zt_backend_cpu(), ZT_F32, &g, split);
        group_broadcast_and_host(st, world, host, zt_backend_cpu(), &g, split);
        group_bytes(st, world, host, &g, split);
        if (dev) {
            g = group_of(by_pairs, world->world, world->rank);
            group_collectives(st, world, dev, st->dev, ZT_F32, &g, split);
            group_collectives(st, world, dev, st->dev, st->dev->compute_dtype, &g, split);
            group_broadcast_and_host(st, world, dev, st->dev, &g, split);
            group_bytes(st, world, dev, &g, split);
            dev->destroy(dev);
        }
        host->destroy(host);
    }
}

void zt_selftest_comm(zt_selftest *st) {
    /* alone, both sides are one-rank communicators: that still runs NCCL's MPI bootstrap, its comm
     * stream and events and every collective call on this GPU; the sums across GPUs need 2+ ranks */
    if (zt_mpi_world_size() < 2 && st->verbose && st->device_kind != ZT_DEVICE_SIM)
        printf("selftest: NCCL vs MPI on a one-rank communicator (run under mpirun with 2+ GPUs for sums across "
               "GPUs)\n");
    zt_err err;
    memset(&err, 0, sizeof err);
    zt_comm *mpi = zt_comm_mpi(NULL, &err);
    /* on the cpu backend a second MPI comm stands in for NCCL: that checks the harness itself */
    int cpu = st->dev->memory_is_host, sim = st->device_kind == ZT_DEVICE_SIM;
    zt_rng rng;
    zt_rng_seed(&rng, st->seed * 7919u + (uint64_t)mpi->rank);
    test_comm_groups(st, mpi);
    if (!cpu) { /* the device comm without NCCL: none for one rank, else staged through host memory */
        zt_comm *dc = mpi->world == 1 ? zt_comm_device_local(st->dev) : zt_comm_staged(st->dev, &err);
        test_comm_pair(st, mpi, dc, &rng);
        dc->destroy(dc);
    }
    if (sim) { /* the simulated GPU has no NCCL */
        mpi->destroy(mpi);
        return;
    }
    if (!cpu) zt_watchdog_start(30.0, mpi->rank, mpi->world); /* the NCCL comm registers with it */
    zt_comm *nc = cpu ? zt_comm_mpi(NULL, &err) : zt_comm_nccl(st->dev, &err);
    /* several ranks on one GPU: NCCL refuses, and training runs on the host-staged comm checked above */
    if (!cpu && mpi->world > 1 && mpi->agree_max(mpi, nc ? 0 : 1)) {
        if (nc) nc->destroy(nc);
        if (st->verbose) printf("SKIP nccl: NCCL refused on some rank (%s); training uses the host-staged comm\n", err.msg);
        zt_watchdog_stop();
        mpi->destroy(mpi);
        return;
    }
    if (!nc) {
        char name[1200];
        snprintf(name, sizeof name, "nccl comm created (%s)", err.msg);
        zt_selftest_check(st, name, 1, 0);
        mpi->destroy(mpi);
        return;
    }
    test_comm_pair(st, mpi, nc, &rng);
    if (!cpu) zt_selftest_nccl_watchdog_healthy(st);
    nc->destroy(nc);
    zt_watchdog_stop();
    if (!cpu && mpi->world == 1) zt_selftest_nccl_watchdog_hang(st);
    else if (!cpu && st->verbose) printf("selftest: the hung-collective watchdog check runs with one rank only\n");
    mpi->destroy(mpi);
}

