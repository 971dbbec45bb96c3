/* comm_staged.c — the device comms that need no NCCL (see comm.h):
 *   - local: one rank. There is nobody to talk to, so no comm at all: a reduce-scatter or an
 *     all-gather is a copy on the device when its source and destination differ, the rest does
 *     nothing. A one-rank GPU run never hands device buffers to MPI (which is not CUDA-aware here).
 *   - staged: several ranks (all of them, or a group: its MPI comm is then the group's), each
 *     collective carried through host memory over MPI: the device buffer is copied to a pinned host
 *     buffer (ordered after the work queued on the device, as NCCL's calls are), the collective
 *     runs over MPI on the host, and the result is copied back.
 *     16-bit sums are widened to fp32 on the host, summed, and rounded once. It serves the
 *     simulated device and a GPU without a usable NCCL (NCCL refuses several ranks on one GPU).
 *     Every call is blocking: what it returns is already complete, so nothing overlaps with it.
 * Both count the nominal volume of each collective in the compute dtype, as NCCL's table does. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_adam.h"
#include "comm/comm.h"
#include "util/test_hooks.h"

/* every call completes before returning: one request object stands for all of them */
static struct zt_comm_req_done { char unused; } g_done;
#define DONE ((zt_comm_req *)&g_done)

typedef struct {
    const zt_backend *be;
    zt_comm *mpi;      /* host collectives (NULL for the local comm) */
    void *raw;         /* pinned staging of the device bytes */
    float *wide, *out; /* fp32 staging of 16-bit sums */
    size_t raw_cap, wide_cap, out_cap;
} staged_impl;

static staged_impl *impl_of(zt_comm *c) { return c->impl; }

static void *host_buf(const zt_backend *be, void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        if (*buf) be->host_free(*buf);
        *cap = bytes + bytes / 4;
        *buf = be->host_alloc(*cap);
        if (!*buf) {
            fprintf(stderr, "zerotrain: error: cannot allocate %zu bytes of host staging for the device comm\n", *cap);
            zt_mpi_abort(1);
        }
    }
    return *buf;
}

static size_t total_of(const zt_comm *c, const size_t *counts) {
    size_t n = 0;
    for (int r = 0; r < c->world; r++) n += counts[r];
    return n;
}

static size_t offset_of(const zt_comm *c, const size_t *counts) {
    size_t n = 0;
    for (int r = 0; r < c->rank; r++) n += counts[r];
    return n;
}

static void nop_wait(zt_comm *c, zt_comm_req *r) { (void)c, (void)r; }

/* ---------------------------------------------------------------- one rank */

static zt_comm_req *local_allreduce(zt_comm *c, void *buf, size_t count, zt_dtype t) { return DONE; }
static zt_comm_req *local_reduce_scatter(zt_comm *c, const void *send, void *recv, const size_t *counts, zt_dtype t) {
    if (send != recv) impl_of(c)->be->copy(recv, send, counts[0] * zt_dtype_size(t), ZT_D2D);
    return DONE;
}
static zt_comm_req *local_allgather(zt_comm *c, const void *send, void *recv, const size_t *counts, zt_dtype t) {
    if (send != recv) impl_of(c)->be->copy(recv, send, counts[0] * zt_dtype_size(t), ZT_D2D);
    return DONE;
}
static zt_comm_req *local_broadcast(zt_comm *c, void *buf, size_t bytes, int root) { return DONE; }
static void local_barrier(zt_comm *c) {}
static void local_allreduce_host_double(zt_comm *c, double *vals, int n) {}
static int local_agree_max(zt_comm *c, int status) { return status; }

static void staged_destroy(zt_comm *c) {
    staged_impl *m = impl_of(c);
    if (m->raw) m->be->host_free(m->raw);
    if (m->wide) m->be->host_free(m->wide);
    if (m->out) m->be->host_free(m->out);
    if (m->mpi) m->mpi->destroy(m->mpi);
    free(m);
    free(c->rank_bytes);
    free(c);
}

static zt_comm *new_comm(const char *name, const zt_backend *be, int rank, int world) {
    zt_comm *c = zt_xcalloc(1, sizeof *c);
    staged_impl *m = zt_xcalloc(1, sizeof *m);
    m->be = be;
    c->name = name;
    c->impl = m;
    c->rank = rank;
    c->world = world;
    zt_comm_keep_rank_bytes(c);
    c->wait = nop_wait;
    c->destroy = staged_destroy;
    return c;
}

zt_comm *zt_comm_device_local(const zt_backend *be) {
    zt_comm *c = new_comm("local", be, 0, 1);
    c->allreduce_sum = local_allreduce;
    c->reduce_scatter_sum = local_reduce_scatter;
    c->allgather = local_allgather;
    c->broadcast = local_broadcast;
    c->barrier = local_barrier;
    c->allreduce_host_double = local_allreduce_host_double;
    c->agree_max = local_agree_max;
    return c;
}

/* ---------------------------------------------------------------- several ranks, through the host */

/* the device elements [0, n) of buf as fp32 on the host, in m->wide */
static float *widen_from_device(staged_impl *m, const void *buf, size_t n, zt_dtype t) {
    size_t esz = zt_dtype_size(t);
    float *w = host_buf(m->be, (void **)&m->wide, &m->wide_cap, n * sizeof(float));
    if (t == ZT_F32) {
        m->be->copy(w, buf, n * esz, ZT_D2H);
    } else {
        m->be->copy(host_buf(m->be, &m->raw, &m->raw_cap, n * esz), buf, n * esz, ZT_D2H);
        zt_cpu_to_f32(w, m->raw, n, t);
    }
    return w;
}

/* host fp32 [0, n) rounded to t and copied to the device buffer buf */
static void narrow_to_device(staged_impl *m, void *buf, const float *w, size_t n, zt_dtype t) {
    size_t esz = zt_dtype_size(t);
    if (t == ZT_F32) {
        m->be->copy(buf, w, n * esz, ZT_H2D);
    } else {
        void *raw = host_buf(m->be, &m->raw, &m->raw_cap, n * esz);
        zt_cpu_from_f32(raw, w, n, t);
        m->be->copy(buf, raw, n * esz, ZT_H2D);
    }
}

static zt_comm_req *staged_allreduce(zt_comm *c, void *buf, size_t count, zt_dtype t) {
    staged_impl *m = impl_of(c);
    zt_comm_count_allreduce(c, ZT_COLL_ALLREDUCE, count * zt_dtype_size(t));
    float *w = widen_from_device(m, buf, count, t);
    m->mpi->wait(m->mpi, m->mpi->allreduce_sum(m->mpi, w, count, ZT_F32));
    narrow_to_device(m, buf, w, count, t);
    return DONE;
}

static zt_comm_req *staged_reduce_scatter(zt_comm *c, const void *send, void *recv, const size_t *counts, zt_dtype t) {
    staged_impl *m = impl_of(c);
    zt_comm_count_reduce_scatter(c, counts, zt_dtype_size(t));
    float *w = widen_from_device(m, send, total_of(c, counts), t);
    float *out = host_buf(m->be, (void **)&m->out, &m->out_cap, (counts[c->rank] + 1) * sizeof(float));
    m->mpi->wait(m->mpi, m->mpi->reduce_scatter_sum(m->mpi, w, out, counts, ZT_F32));
    narrow_to_device(m, recv, out, counts[c->rank], t);
    return DONE;
}

/* no arithmetic: the bytes travel as they are */
static zt_comm_req *staged_allgather(zt_comm *c, const void *send, void *recv, const size_t *counts, zt_dtype t) {
    staged_impl *m = impl_of(c);
    size_t esz = zt_dtype_size(t), total = total_of(c, counts), off = offset_of(c, counts) * esz;
    zt_comm_count_allgather(c, counts, esz);
    char *h = host_buf(m->be, &m->raw, &m->raw_cap, total * esz + 1);
    m->be->copy(h + off, send, counts[c->rank] * esz, ZT_D2H);
    m->mpi->wait(m->mpi, m->mpi->allgather(m->mpi, h + off, h, counts, t)); /* in place */
    m->be->copy(recv, h, total * esz, ZT_H2D);
    return DONE;
}

static zt_comm_req *staged_broadcast(zt_comm *c, void *buf, size_t bytes, int root) {
    staged_impl *m = impl_of(c);
    zt_comm_count_broadcast(c, bytes, root);
    void *h = host_buf(m->be, &m->raw, &m->raw_cap, bytes + 1);
    if (c->rank == root) m->be->copy(h, buf, bytes, ZT_D2H);
    m->mpi->wait(m->mpi, m->mpi->broadcast(m->mpi, h, bytes, root));
    if (c->rank != root) m->be->copy(buf, h, bytes, ZT_H2D);
    return DONE;
}

static void staged_barrier(zt_comm *c) { impl_of(c)->mpi->barrier(impl_of(c)->mpi); }
static void staged_allreduce_host_double(zt_comm *c, double *vals, int n) {
    zt_comm_count_allreduce(c, ZT_COLL_SCALAR, (size_t)n * sizeof(double));
    impl_of(c)->mpi->allreduce_host_double(impl_of(c)->mpi, vals, n);
}
static int staged_agree_max(zt_comm *c, int status) {
    zt_comm_count_allreduce(c, ZT_COLL_SCALAR, sizeof(int));
    return impl_of(c)->mpi->agree_max(impl_of(c)->mpi, status);
}

/* the staged comm over the ranks of the host comm `mpi` (the world's or a group's; owned by the
 * result; NULL: its creation failed, err says why) */
static zt_comm *staged_over(const zt_backend *be, zt_comm *mpi, const char *name) {
    if (!mpi) return NULL;
    zt_comm *c = new_comm(name, be, mpi->rank, mpi->world);
    impl_of(c)->mpi = mpi;
    c->allreduce_sum = staged_allreduce;
    c->reduce_scatter_sum = staged_reduce_scatter;
    c->allgather = staged_allgather;
    c->broadcast = staged_broadcast;
    c->barrier = staged_barrier;
    c->allreduce_host_double = staged_allreduce_host_double;
    c->agree_max = staged_agree_max;
    if (zt_test_hook_own_comm_order()) c->order = c; /* a queue of its own: what the session must refuse */
    return c;
}

zt_comm *zt_comm_staged(const zt_backend *be, zt_err *err) {
    return staged_over(be, zt_comm_mpi(NULL, err), "host-staged");
}

zt_comm *zt_comm_staged_group(const zt_backend *be, int color, int key, zt_err *err) {
    return staged_over(be, zt_comm_mpi_group(NULL, color, key, err), "host-staged group");
}
