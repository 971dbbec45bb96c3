/* comm_nccl.cu — the NCCL collectives table of src/comm/comm_nccl.h for the CUDA backend.
 *
 * Bootstrap: an MPI comm table on host memory (zt_comm_mpi, or zt_comm_mpi_group for a group comm:
 * one code path, nccl_over) broadcasts its rank 0's ncclUniqueId, and then serves the host-side
 * calls (barrier, allreduce_host_double, agree_max), so this file needs no MPI header. Device collectives run on a dedicated high-priority stream:
 *   compute stream --event--> comm stream: NCCL op --event--> (wait) compute stream
 * so communication overlaps with whatever the compute stream does next, and a wait() costs the
 * host nothing. The comm stream is one per process, shared by every NCCL comm (the world's, a
 * data-parallel and a tensor-parallel group's): NCCL's kernels of two communicators in flight at
 * once can deadlock when they cannot all be resident ("Using multiple NCCL communicators
 * concurrently"), so every rank's collectives of all its comms run one after the other, in the
 * program order in which every rank issues them. zt_comm.order names that stream (comm.h).
 * Variable counts: when every rank's piece has the same size, one ncclReduceScatter /
 * ncclAllGather; otherwise one ncclReduce / ncclBroadcast per root inside a ncclGroupStart/End
 * (pieces of size 0 are skipped on every rank alike).
 *
 * The hang watchdog (comm/watchdog.h) watches the comm stream: every operation also records an
 * event of its own into a ring, and the watchdog thread (nccl_probe) walks the ring from the oldest
 * operation it has not seen complete, and asks NCCL for asynchronous errors; a sticky CUDA error,
 * which fails the ring's events whatever kernel caused it, is reported as the GPU's. The stream is
 * drained, watched, before the comm is destroyed. NCCL itself is loaded at run time (nccl_load). */
#include "cuda_common.cuh"
#include <nccl.h>
#include <cstring>
#include <dlfcn.h>
#include <pthread.h>

extern "C" {
#include "util/util.h"
#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "comm/watchdog.h"
#include "comm/fail_together.h"
#include "util/test_hooks.h"
}

/* NCCL is loaded at run time (dlopen), not linked: a binary carried to a GPU machine without NCCL's
 * 218 MB still starts, and its ranks train on the host-staged comm (comm/comm_staged.c) instead.
 * libnccl.so.2 is looked up as any library is (LD_LIBRARY_PATH, the binary's RUNPATH, ldconfig). */
#define NCCL_API(X) X(AllGather) X(AllReduce) X(Broadcast) X(CommAbort) X(CommDestroy) X(CommGetAsyncError) \
    X(CommInitRank) X(GetErrorString) X(GetUniqueId) X(GetVersion) X(GroupEnd) X(GroupStart) X(Reduce) X(ReduceScatter)
static struct {
#define NCCL_MEMBER(f) decltype(&nccl##f) f;
    NCCL_API(NCCL_MEMBER)
#undef NCCL_MEMBER
} g_nccl;
#define NCCL(f) g_nccl.f

/* ncclGetVersion's code for 2.10.0 (major * 10000 + minor * 100 + patch since 2.9) */
#define ZT_NCCL_MIN_VERSION 21000

/* NULL once every entry is loaded and NCCL is new enough, else why not (the first call decides for
 * the process) */
static const char *nccl_load(void) {
    static int state; /* 0 not tried, 1 loaded, -1 failed */
    static char why[512];
    if (state == 0) {
        void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        state = lib ? 1 : -1;
        if (!lib) snprintf(why, sizeof why, "cannot load NCCL: %s", dlerror());
#define NCCL_LOAD(f)                                                                                           \
    if (state == 1 && !(g_nccl.f = (decltype(g_nccl.f))dlsym(lib, "nccl" #f))) {                              \
        snprintf(why, sizeof why, "libnccl.so.2 has no nccl" #f " (NCCL too old?)");                          \
        state = -1;                                                                                           \
    }
        NCCL_API(NCCL_LOAD)
#undef NCCL_LOAD
        /* NCCL before 2.10 has every symbol above but no ncclBfloat16: the first bf16 collective
         * would end the run, so such an NCCL is not used at all (the host-staged comm takes over) */
        int version = 0;
        if (state == 1 && NCCL(GetVersion)(&version) == ncclSuccess) version = zt_test_hook_nccl_version(version);
        if (state == 1 && version < ZT_NCCL_MIN_VERSION) {
            snprintf(why, sizeof why, "NCCL %d.%d.%d is older than 2.10 (no bfloat16 collectives)", version / 10000,
                     version / 100 % 100, version % 100);
            state = -1;
        }
    }
    return state == 1 ? NULL : why;
}

#define ZT_NCCL_CHECK(call)                                                                                   \
    do {                                                                                                      \
        ncclResult_t zt_r_ = (call);                                                                          \
        if (zt_r_ != ncclSuccess) zt_cuda_fatal(#call, NCCL(GetErrorString)(zt_r_), __FILE__, __LINE__);       \
    } while (0)

struct zt_comm_req {
    cudaEvent_t done; /* recorded on the comm stream after the operation */
};

/* one enqueued operation, as the watchdog sees it */
struct watch_slot {
    cudaEvent_t done; /* recorded on the comm stream after the operation */
    const char *what;
    long seq;
    size_t bytes;
    double since; /* zt_now() at enqueue */
};
/* The ring holds the last WATCH_RING operations; a full ring reuses the oldest slot: a later
 * operation completing implies that one did (one stream, in order). */
enum { WATCH_RING = 64 };

/* The comm stream every NCCL comm of this process shares (see the top), created with the first comm
 * and destroyed with the last: used only by the main thread, which creates and destroys comms. */
static struct {
    cudaStream_t stream;
    int users;
} g_comm_stream;

static cudaStream_t comm_stream_acquire(void) {
    if (g_comm_stream.users++ == 0) {
        int lo = 0, hi = 0;
        ZT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
        ZT_CUDA_CHECK(cudaStreamCreateWithPriority(&g_comm_stream.stream, cudaStreamNonBlocking, hi));
    }
    return g_comm_stream.stream;
}
static void comm_stream_release(void) {
    if (--g_comm_stream.users == 0) cudaStreamDestroy(g_comm_stream.stream);
}

struct nccl_impl {
    ncclComm_t nccl;
    cudaStream_t stream;  /* the process's comm stream (g_comm_stream) */
    cudaEvent_t ready;    /* compute-stream position the next operation starts after */
    zt_comm *mpi;         /* host-side helper and bootstrap */
    /* under mu: enqueued by the main thread (head), checked by the watchdog thread (tail) */
    pthread_mutex_t mu;
    watch_slot ring[WATCH_RING];
    long head, tail;      /* operations enqueued; operations seen complete */
    double progress_at;   /* zt_now() when the watchdog last saw one complete */
};

static nccl_impl *impl_of(zt_comm *c) { return (nccl_impl *)c->impl; }

static ncclDataType_t nccl_type(zt_dtype t) {
    switch (t) {
    case ZT_F32: return ncclFloat32;
    case ZT_BF16: return ncclBfloat16;
    default: return ncclFloat16;
    }
}

/* ZEROTRAIN_INJECT_NCCL_HANG (util/test_hooks.h): spins on the comm stream for up to `ns`
 * nanoseconds of the GPU's clock, so the collective queued behind it hangs on the device */
__global__ void nccl_hang_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

/* the comm stream waits for all work queued so far on the compute stream */
static void begin_op(nccl_impl *m) {
    ZT_CUDA_CHECK(cudaEventRecord(m->ready, g_zt.stream));
    ZT_CUDA_CHECK(cudaStreamWaitEvent(m->stream, m->ready, 0));
    if (zt_test_hook_nccl_hang_at(m->head + 1)) {
        nccl_hang_kernel<<<1, 1, 0, m->stream>>>(120ull * 1000000000ull);
        ZT_CUDA_CHECK(cudaGetLastError()); /* not ZT_LAUNCH_CHECK: ZT_CUDA_SYNC=1 would wait here, unwatched */
    }
}
static zt_comm_req *end_op(nccl_impl *m, const char *what, size_t bytes) {
    zt_comm_req *r = (zt_comm_req *)zt_xcalloc(1, sizeof *r);
    ZT_CUDA_CHECK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    ZT_CUDA_CHECK(cudaEventRecord(r->done, m->stream));
    pthread_mutex_lock(&m->mu);
    if (m->head - m->tail == WATCH_RING) m->tail++;
    watch_slot *w = &m->ring[m->head % WATCH_RING];
    cudaError_t e = cudaEventRecord(w->done, m->stream);
    w->what = what, w->seq = m->head + 1, w->bytes = bytes, w->since = zt_now();
    m->head++;
    pthread_mutex_unlock(&m->mu);
    ZT_CUDA_CHECK(e);
    if (g_zt.debug_sync) ZT_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return r;
}

/* Whether this process's CUDA context is lost to a sticky error: a kernel faulted (an illegal
 * address, a trap), after which every CUDA call fails with that error, so an event of the comm
 * stream does too, though the faulting kernel may as well be a compute one. Told apart from an
 * error of the call alone by asking again about something else, the compute stream, after
 * clearing this thread's last error (a sticky error is not cleared). Sets op->error when lost. */
static bool context_lost(zt_watchdog_op *op) {
    (void)cudaGetLastError();
    cudaError_t e = cudaStreamQuery(g_zt.stream);
    if (e == cudaSuccess || e == cudaErrorNotReady) return false;
    snprintf(op->error, sizeof op->error,
             "CUDA error %s (%s) on GPU %d: a kernel of this process faulted, compute or NCCL, and every CUDA call "
             "fails now (ZT_CUDA_SYNC=1 names the op)",
             cudaGetErrorName(e), cudaGetErrorString(e), g_zt.device);
    return true;
}

/* The watchdog's probe (watchdog.h), on its thread: the oldest operation not complete yet, and
 * NCCL's asynchronous errors (a peer gone, a network failure NCCL noticed). An error that is the
 * whole context's (context_lost) is reported as the GPU's (-2), not as this comm's (-1). */
static int nccl_probe(void *ctx, zt_watchdog_op *op) {
    nccl_impl *m = (nccl_impl *)ctx;
    int st = 0;
    cudaError_t failed = cudaSuccess;
    cudaSetDevice(g_zt.device); /* this thread's current device */
    pthread_mutex_lock(&m->mu);
    double now = zt_now();
    while (m->tail < m->head) {
        cudaError_t q = cudaEventQuery(m->ring[m->tail % WATCH_RING].done);
        if (q == cudaErrorNotReady) break;
        if (q != cudaSuccess) {
            failed = q;
            break;
        }
        m->tail++;
        m->progress_at = now;
    }
    if (m->tail < m->head) {
        const watch_slot *w = &m->ring[m->tail % WATCH_RING];
        op->what = w->what, op->seq = w->seq, op->bytes = w->bytes;
        op->since = w->since > m->progress_at ? w->since : m->progress_at;
        st = 1;
    }
    pthread_mutex_unlock(&m->mu);
    if (failed != cudaSuccess) {
        if (context_lost(op)) return -2;
        snprintf(op->error, sizeof op->error, "cudaEventQuery on the comm stream: %s", cudaGetErrorString(failed));
        return -1;
    }
    ncclResult_t async = ncclSuccess;
    if (NCCL(CommGetAsyncError)(m->nccl, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
        if (context_lost(op)) return -2; /* NCCL saw the lost context (ncclUnhandledCudaError) */
        snprintf(op->error, sizeof op->error, "ncclCommGetAsyncError: %s", NCCL(GetErrorString)(async));
        return -1;
    }
    return st;
}
/* before MPI_Abort, on a thread of the watchdog's that waits for it a bounded time (watchdog.h):
 * NCCL's kernels and proxy threads give up at once, its teardown may wait for the device forever */
static void nccl_watch_abort(void *ctx) {
    cudaSetDevice(g_zt.device); /* a new thread's current device is GPU 0 */
    NCCL(CommAbort)(((nccl_impl *)ctx)->nccl);
}

static bool equal_counts(const zt_comm *c, const size_t *counts) {
    for (int r = 1; r < c->world; r++)
        if (counts[r] != counts[0]) return false;
    return true;
}
static size_t sum_counts(const zt_comm *c, const size_t *counts) {
    size_t n = 0;
    for (int r = 0; r < c->world; r++) n += counts[r];
    return n;
}

static zt_comm_req *nccl_allreduce_sum(zt_comm *c, void *buf, size_t count, zt_dtype t) {
    nccl_impl *m = impl_of(c);
    zt_comm_count_allreduce(c, ZT_COLL_ALLREDUCE, count * zt_dtype_size(t));
    begin_op(m);
    if (count) ZT_NCCL_CHECK(NCCL(AllReduce)(buf, buf, count, nccl_type(t), ncclSum, m->nccl, m->stream));
    return end_op(m, "NCCL all-reduce", count * zt_dtype_size(t));
}

static zt_comm_req *nccl_reduce_scatter_sum(zt_comm *c, const void *send, void *recv, const size_t *counts,
                                            zt_dtype t) {
    nccl_impl *m = impl_of(c);
    size_t es = zt_dtype_size(t);
    zt_comm_count_reduce_scatter(c, counts, es);
    begin_op(m);
    if (equal_counts(c, counts)) {
        if (counts[0])
            ZT_NCCL_CHECK(NCCL(ReduceScatter)(send, recv, counts[0], nccl_type(t), ncclSum, m->nccl, m->stream));
    } else {
        /* rank r's piece is the sum of every rank's r-th piece: a reduce rooted at r */
        ZT_NCCL_CHECK(NCCL(GroupStart)());
        size_t off = 0;
        for (int r = 0; r < c->world; r++) {
            if (counts[r])
                ZT_NCCL_CHECK(NCCL(Reduce)((const char *)send + off * es, recv, counts[r], /* recv: used at root r only */
                                         nccl_type(t), ncclSum, r, m->nccl, m->stream));
            off += counts[r];
        }
        ZT_NCCL_CHECK(NCCL(GroupEnd)());
    }
    return end_op(m, "NCCL reduce-scatter", sum_counts(c, counts) * es);
}

static zt_comm_req *nccl_allgather(zt_comm *c, const void *send, void *recv, const size_t *counts, zt_dtype t) {
    nccl_impl *m = impl_of(c);
    size_t es = zt_dtype_size(t);
    zt_comm_count_allgather(c, counts, es);
    begin_op(m);
    if (equal_counts(c, counts)) {
        /* in place when send is this rank's piece of recv (NCCL supports exactly that case) */
        if (counts[0]) ZT_NCCL_CHECK(NCCL(AllGather)(send, recv, counts[0], nccl_type(t), m->nccl, m->stream));
    } else {
        ZT_NCCL_CHECK(NCCL(GroupStart)());
        size_t off = 0;
        for (int r = 0; r < c->world; r++) {
            if (counts[r])
                ZT_NCCL_CHECK(NCCL(Broadcast)(r == c->rank ? send : (char *)recv + off * es, (char *)recv + off * es, counts[r],
                                            nccl_type(t), r, m->nccl, m->stream));
            off += counts[r];
        }
        ZT_NCCL_CHECK(NCCL(GroupEnd)());
    }
    return end_op(m, "NCCL all-gather", sum_counts(c, counts) * es);
}

static zt_comm_req *nccl_broadcast(zt_comm *c, void *buf, size_t bytes, int root) {
    nccl_impl *m = impl_of(c);
    zt_comm_count_broadcast(c, bytes, root);
    begin_op(m);
    if (bytes) ZT_NCCL_CHECK(NCCL(Broadcast)(buf, buf, bytes, ncclUint8, root, m->nccl, m->stream));
    return end_op(m, "NCCL broadcast", bytes);
}

static void nccl_wait(zt_comm *c, zt_comm_req *r) {
    if (!r) return;
    ZT_CUDA_CHECK(cudaStreamWaitEvent(g_zt.stream, r->done, 0));
    ZT_CUDA_CHECK(cudaEventDestroy(r->done)); /* released once the event has completed */
    free(r);
}

/* waits for every operation on the comm stream, as a watched host wait (and the probe watches the
 * operations themselves while the comm is watched) */
static cudaError_t drain_comm_stream(zt_comm *c) {
    zt_watchdog_enter("NCCL stream drain", 0, c->world);
    cudaError_t e = cudaStreamSynchronize(impl_of(c)->stream);
    zt_watchdog_leave();
    return e;
}

static void nccl_barrier(zt_comm *c) {
    nccl_impl *m = impl_of(c);
    ZT_CUDA_CHECK(drain_comm_stream(c));
    m->mpi->barrier(m->mpi);
}

static void nccl_allreduce_host_double(zt_comm *c, double *vals, int n) {
    nccl_impl *m = impl_of(c);
    zt_comm_count_allreduce(c, ZT_COLL_SCALAR, (size_t)n * sizeof(double));
    m->mpi->allreduce_host_double(m->mpi, vals, n);
}

static int nccl_agree_max(zt_comm *c, int status) {
    nccl_impl *m = impl_of(c);
    zt_comm_count_allreduce(c, ZT_COLL_SCALAR, sizeof(int));
    return m->mpi->agree_max(m->mpi, status);
}

static void nccl_destroy(zt_comm *c) {
    if (!c) return;
    nccl_impl *m = impl_of(c);
    /* the drain still watched, so a collective hung on the GPU ends the job here as anywhere else;
     * then NCCL's teardown under a host wait of its own (no longer watched: a watchdog that fired
     * during ncclCommDestroy must not ncclCommAbort the comm being destroyed) */
    (void)drain_comm_stream(c);
    zt_watchdog_unwatch(m);
    zt_watchdog_enter("NCCL comm teardown", 0, c->world);
    NCCL(CommDestroy)(m->nccl);
    zt_watchdog_leave();
    for (int i = 0; i < WATCH_RING; i++) cudaEventDestroy(m->ring[i].done);
    pthread_mutex_destroy(&m->mu);
    cudaEventDestroy(m->ready);
    comm_stream_release();
    m->mpi->destroy(m->mpi);
    free(m);
    free(c->rank_bytes);
    free(c);
}

/* "rank R of N" in a comm, naming the world rank too when the comm is a group's */
static const char *rank_words(char *buf, size_t cap, const zt_comm *mpi) {
    int n = snprintf(buf, cap, "rank %d of %d", mpi->rank, mpi->world);
    if (mpi->world < zt_mpi_world_size() && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " of a group, world rank %d", zt_mpi_world_rank());
    return buf;
}

/* whether be is the CUDA backend (checked before anything collective, as it always was) */
static bool is_cuda_backend(const zt_backend *be, zt_err *err) {
    const char *why = NULL;
    if (be && be == zt_backend_cuda(be->compute_dtype, &why)) return true;
    zt_fail(err, "the NCCL comm needs the CUDA backend%s%s", why ? ": " : "", why ? why : "");
    return false;
}

/* The NCCL comm over the ranks of the host comm `mpi` (the world's or a group's; NULL: its creation
 * failed, err says why), which bootstraps it and then serves its host-side calls: owned by the
 * result, destroyed on failure. Every agreement here is among mpi's ranks. */
static zt_comm *nccl_over(zt_comm *mpi, const char *name, zt_err *err) {
    if (!mpi) return NULL;
    /* every rank must have NCCL (machines differ): all use it, or none does */
    const char *no_nccl = nccl_load();
    if (zt_agree(mpi, no_nccl ? zt_fail(err, "%s", no_nccl) : 0, err)) {
        mpi->destroy(mpi);
        return NULL;
    }
    /* the comm's rank 0 creates the id; everybody learns whether that worked before going on */
    char who[96];
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int rc = 0;
    ncclResult_t res = ncclSuccess;
    if (mpi->rank == 0 && (res = NCCL(GetUniqueId)(&id)) != ncclSuccess)
        rc = zt_fail(err, "ncclGetUniqueId failed on %s: %s", rank_words(who, sizeof who, mpi), NCCL(GetErrorString)(res));
    if (zt_agree(mpi, rc, err)) {
        mpi->destroy(mpi);
        return NULL;
    }
    mpi->wait(mpi, mpi->broadcast(mpi, &id, sizeof id, 0)); /* host memory: the MPI table */

    nccl_impl *m = (nccl_impl *)zt_xcalloc(1, sizeof *m);
    m->mpi = mpi;
    /* NCCL's bootstrap connects to every rank of the comm: a rank that died or stopped during it
     * would leave the others blocked here, so it is a watched host wait like any collective */
    zt_watchdog_enter("NCCL bootstrap (ncclCommInitRank)", 0, mpi->world);
    res = NCCL(CommInitRank)(&m->nccl, mpi->world, id, mpi->rank);
    zt_watchdog_leave();
    int bad = res != ncclSuccess;
    if (bad)
        rc = zt_fail(err, "ncclCommInitRank (%s, GPU %d) failed: %s", rank_words(who, sizeof who, mpi), g_zt.device,
                     NCCL(GetErrorString)(res));
    if (zt_agree(mpi, rc, err)) {
        if (!bad) NCCL(CommDestroy)(m->nccl);
        mpi->destroy(mpi);
        free(m);
        return NULL;
    }
    m->stream = comm_stream_acquire();
    ZT_CUDA_CHECK(cudaEventCreateWithFlags(&m->ready, cudaEventDisableTiming));
    for (int i = 0; i < WATCH_RING; i++) ZT_CUDA_CHECK(cudaEventCreateWithFlags(&m->ring[i].done, cudaEventDisableTiming));
    pthread_mutex_init(&m->mu, NULL);
    zt_watchdog_probe probe = {nccl_probe, nccl_watch_abort, m, mpi->world};
    zt_watchdog_watch(&probe);

    zt_comm *c = (zt_comm *)zt_xcalloc(1, sizeof *c);
    c->name = name;
    c->rank = mpi->rank;
    c->world = mpi->world;
    zt_comm_keep_rank_bytes(c);
    c->impl = m;
    c->order = m->stream; /* shared: one order with every other NCCL comm of this process */
    c->allreduce_sum = nccl_allreduce_sum;
    c->reduce_scatter_sum = nccl_reduce_scatter_sum;
    c->allgather = nccl_allgather;
    c->broadcast = nccl_broadcast;
    c->wait = nccl_wait;
    c->barrier = nccl_barrier;
    c->allreduce_host_double = nccl_allreduce_host_double;
    c->agree_max = nccl_agree_max;
    c->destroy = nccl_destroy;
    return c;
}

extern "C" zt_comm *zt_comm_nccl(const zt_backend *be, zt_err *err) {
    if (!is_cuda_backend(be, err)) return NULL;
    return nccl_over(zt_comm_mpi(NULL, err), "nccl", err);
}

extern "C" zt_comm *zt_comm_nccl_group(const zt_backend *be, int color, int key, zt_err *err) {
    if (!is_cuda_backend(be, err)) return NULL;
    return nccl_over(zt_comm_mpi_group(NULL, color, key, err), "nccl group", err);
}
