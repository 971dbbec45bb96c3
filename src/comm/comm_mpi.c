/* comm_mpi.c — the MPI collectives table (see comm.h). Uses MPI-3 non-blocking collectives
 * (MPI_Iallreduce, MPI_Ireduce_scatter, MPI_Iallgatherv) on a communicator of its own, duplicated
 * from MPI_COMM_WORLD or split from it for a group (one code: open_mpi_comm), so data-parallel/ZeRO
 * traffic never mixes with other groups'. Every collective names ranks of its own communicator
 * (a group's broadcast root is a group rank); what names world ranks is process-wide and stays so
 * on purpose: zt_mpi_abort ends the whole job, the watchdog's lines and roll use world ranks
 * (watchdog.h), and the start-up/shut-down deadlines below are the world's.
 * Also MPI start-up and shut-down, each bounded in time (the watchdog covers what lies between). */
#include "comm/comm.h"

#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/watchdog.h"
#include "util/test_hooks.h"

struct zt_comm_req {
    MPI_Request req;
    int *counts, *displs; /* for the variable-count collectives */
    const char *what;     /* the collective, for the watchdog's message */
    size_t bytes;         /* its size on this rank */
};

typedef struct {
    MPI_Comm comm; /* the world's duplicate or a group's split */
} mpi_impl;

static MPI_Comm comm_of(zt_comm *c) { return ((mpi_impl *)c->impl)->comm; }

static MPI_Datatype mpi_type(zt_dtype t) {
    /* 16-bit dtypes are not reduced over MPI (the CPU backend is fp32; GPUs use NCCL) */
    return t == ZT_F32 ? MPI_FLOAT : MPI_UINT16_T;
}

static zt_comm_req *new_req(const char *what, size_t bytes) {
    zt_comm_req *r = zt_xcalloc(1, sizeof(zt_comm_req));
    r->what = what;
    r->bytes = bytes;
    return r;
}

static zt_comm_req *mpi_allreduce_sum(zt_comm *c, void *buf, size_t count, zt_dtype t) {
    zt_comm_req *r = new_req("all-reduce", count * zt_dtype_size(t));
    zt_comm_count_allreduce(c, ZT_COLL_ALLREDUCE, r->bytes);
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(t), MPI_SUM, comm_of(c), &r->req);
    return r;
}

/* MPI takes int counts and displacements: fill them from size_t counts (ranges stay < 2^31 per
 * rank piece, which bucketing guarantees). The arrays live in the request until it completes. */
static zt_comm_req *new_req_v(zt_comm *c, const size_t *counts, const char *what, size_t esz) {
    zt_comm_req *r = new_req(what, 0);
    r->counts = zt_xcalloc((size_t)c->world, sizeof(int));
    r->displs = zt_xcalloc((size_t)c->world, sizeof(int));
    size_t off = 0;
    for (int i = 0; i < c->world; i++) {
        r->counts[i] = (int)counts[i];
        r->displs[i] = (int)off;
        off += counts[i];
    }
    r->bytes = off * esz;
    return r;
}

static zt_comm_req *mpi_reduce_scatter_sum(zt_comm *c, const void *send, void *recv, const size_t *counts,
                                           zt_dtype t) {
    zt_comm_req *r = new_req_v(c, counts, "reduce-scatter", zt_dtype_size(t));
    zt_comm_count_reduce_scatter(c, counts, zt_dtype_size(t));
    MPI_Ireduce_scatter(send, recv, r->counts, mpi_type(t), MPI_SUM, comm_of(c), &r->req);
    return r;
}

static zt_comm_req *mpi_allgather(zt_comm *c, const void *send, void *recv, const size_t *counts, zt_dtype t) {
    size_t esz = zt_dtype_size(t);
    zt_comm_req *r = new_req_v(c, counts, "all-gather", esz);
    zt_comm_count_allgather(c, counts, esz);
    const void *src = (const char *)recv + (size_t)r->displs[c->rank] * esz == send ? MPI_IN_PLACE : send;
    MPI_Iallgatherv(src, r->counts[c->rank], mpi_type(t), recv, r->counts, r->displs, mpi_type(t), comm_of(c),
                    &r->req);
    return r;
}

static zt_comm_req *mpi_broadcast(zt_comm *c, void *buf, size_t bytes, int root) {
    zt_comm_req *r = new_req("broadcast", bytes);
    zt_comm_count_broadcast(c, bytes, root);
    MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, comm_of(c), &r->req);
    return r;
}

static void mpi_wait(zt_comm *c, zt_comm_req *r) {
    if (!r) return;
    zt_watchdog_enter(r->what, r->bytes, c->world);
    MPI_Wait(&r->req, MPI_STATUS_IGNORE);
    zt_watchdog_leave();
    free(r->counts);
    free(r->displs);
    free(r);
}

static void mpi_barrier(zt_comm *c) {
    zt_watchdog_enter("barrier", 0, c->world);
    MPI_Barrier(comm_of(c));
    zt_watchdog_leave();
}

static void mpi_allreduce_host_double(zt_comm *c, double *vals, int n) {
    zt_comm_count_allreduce(c, ZT_COLL_SCALAR, (size_t)n * sizeof(double));
    zt_watchdog_enter("host all-reduce", (size_t)n * sizeof(double), c->world);
    MPI_Allreduce(MPI_IN_PLACE, vals, n, MPI_DOUBLE, MPI_SUM, comm_of(c));
    zt_watchdog_leave();
}

static int mpi_agree_max(zt_comm *c, int status) {
    int out = status;
    zt_comm_count_allreduce(c, ZT_COLL_SCALAR, sizeof(int));
    zt_watchdog_enter("agreement all-reduce", sizeof(int), c->world);
    MPI_Allreduce(&status, &out, 1, MPI_INT, MPI_MAX, comm_of(c));
    zt_watchdog_leave();
    return out;
}

static void mpi_destroy(zt_comm *c) {
    mpi_impl *m = c->impl;
    MPI_Comm_free(&m->comm);
    free(m);
    free(c->rank_bytes);
    free(c);
}

/* The table over the ranks of MPI_COMM_WORLD that pass the same color (split: MPI_Comm_split,
 * ordered by key), or over all of them (a duplicate of the world). Collective over the world. A
 * negative color would make MPI_Comm_split fail (and MPI abort the job with a message of its own):
 * the ranks first agree that every color is valid, so a bad one fails the call on every rank. */
static zt_comm *open_mpi_comm(int split, int color, int key, zt_err *err) {
    if (zt_comm_costed_active()) return zt_comm_costed_open(split, 0, err); /* predict --ranks */
    MPI_Comm comm;
    zt_watchdog_enter("communicator creation", 0, zt_mpi_world_size()); /* collective: every rank must come */
    int bad = split && color < 0, any_bad = bad;
    if (split) MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any_bad) {
        if (split) MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm);
        else MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    }
    zt_watchdog_leave();
    if (any_bad) {
        if (bad) zt_fail(err, "a group comm's color must be >= 0, not %d (world rank %d)", color, zt_mpi_world_rank());
        else zt_fail(err, "a group comm's color must be >= 0: another rank passed a negative one");
        return NULL;
    }
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_ARE_FATAL);
    zt_comm *c = zt_xcalloc(1, sizeof *c);
    mpi_impl *m = zt_xcalloc(1, sizeof *m);
    m->comm = comm;
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->world);
    zt_comm_keep_rank_bytes(c);
    c->name = split ? "mpi group" : "mpi";
    c->impl = m;
    c->allreduce_sum = mpi_allreduce_sum;
    c->reduce_scatter_sum = mpi_reduce_scatter_sum;
    c->allgather = mpi_allgather;
    c->broadcast = mpi_broadcast;
    c->wait = mpi_wait;
    c->barrier = mpi_barrier;
    c->allreduce_host_double = mpi_allreduce_host_double;
    c->agree_max = mpi_agree_max;
    c->destroy = mpi_destroy;
    return c;
}

zt_comm *zt_comm_mpi(const zt_backend *be, zt_err *err) { return open_mpi_comm(0, 0, 0, err); }

zt_comm *zt_comm_mpi_group(const zt_backend *be, int color, int key, zt_err *err) {
    return open_mpi_comm(1, color, key, err);
}

/* ---------------------------------------------------------------- process-wide MPI */

/* Start-up and shut-down are collective too (Open MPI's MPI_Init and MPI_Finalize exchange with
 * every rank), and the watchdog does not run then (no config yet; shutting down): a rank that never
 * starts or stops in them would leave the others waiting forever. A deadline thread ends this rank
 * with one line when the phase lasts longer than ZEROTRAIN_MPI_TIMEOUT seconds (default
 * ZT_MPI_PHASE_TIMEOUT, 0 = off); mpirun then ends the rest of the job, the stopped rank included. */
#define ZT_MPI_PHASE_TIMEOUT 300.0

static struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, done;
    double seconds;
    const char *phase;
} deadline = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* this rank as the launcher numbered it (MPI cannot say before MPI_Init returns) */
static const char *launcher_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i])) return getenv(vars[i]);
    return "?";
}

static void *deadline_main(void *arg) {
    (void)arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)deadline.seconds;
    pthread_mutex_lock(&deadline.mu);
    int expired = 0;
    while (!deadline.done && !expired) expired = pthread_cond_timedwait(&deadline.cv, &deadline.mu, &until) == ETIMEDOUT;
    pthread_mutex_unlock(&deadline.mu);
    if (!expired || deadline.done) return NULL;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    const char *size = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("SLURM_NTASKS");
    fprintf(stderr, "zerotrain: error: rank %s%s%s (host %s): %s did not complete in %.0f s: another rank %s "
                    "(ZEROTRAIN_MPI_TIMEOUT)\n",
            launcher_rank(), size ? " of " : "", size ? size : "", host, deadline.phase, deadline.seconds,
            strcmp(deadline.phase, "MPI_Init") ? "stopped answering before it finished" : "has not started or stopped answering");
    fflush(stderr);
    _exit(1);
}

/* Starts the deadline for `phase` (a string literal). */
double zt_mpi_phase_timeout(void) {
    const char *env = getenv("ZEROTRAIN_MPI_TIMEOUT");
    return env ? atof(env) : ZT_MPI_PHASE_TIMEOUT;
}

static void deadline_arm(const char *phase) {
    double s = zt_mpi_phase_timeout();
    if (s <= 0) return;
    deadline.seconds = s;
    deadline.phase = phase;
    deadline.done = 0;
    deadline.running = pthread_create(&deadline.thread, NULL, deadline_main, NULL) == 0;
}

static void deadline_disarm(void) {
    if (!deadline.running) return;
    pthread_mutex_lock(&deadline.mu);
    deadline.done = 1;
    pthread_cond_signal(&deadline.cv);
    pthread_mutex_unlock(&deadline.mu);
    pthread_join(deadline.thread, NULL);
    deadline.running = 0;
}

int zt_mpi_init(int *argc, char ***argv, zt_err *err) {
    int provided = 0;
    deadline_arm("MPI_Init");
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    deadline_disarm();
    if (rc != MPI_SUCCESS) return zt_fail(err, "MPI_Init_thread failed");
    /* any MPI failure (a dead peer included) aborts the whole job instead of hanging */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    /* the ranks sharing this machine's memory, numbered by MPI itself: a launcher that sets no local
     * rank variable (a plain hostfile, another MPI's mpiexec) still gives each its own GPU */
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        int local = 0;
        MPI_Comm_rank(node, &local);
        zt_node_local_rank_set(local); /* the backends' device choice (backend/node_rank.c) */
        MPI_Comm_free(&node);
    }
    if (zt_test_hook_stop_after_init(zt_mpi_world_rank())) raise(SIGSTOP);
    return 0;
}

/* Before MPI_Finalize every rank checks in with rank 0 (a one-int message: sent eagerly, so no rank
 * waits here), and rank 0 names the ranks that did not arrive within the deadline: those stopped or
 * hung before the end. The others then wait in MPI_Finalize under their own deadline. */
#define ZT_TAG_AT_END 7177

static void check_in_at_end(double seconds) {
    int rank = zt_mpi_world_rank(), world = zt_mpi_world_size();
    if (world < 2) return;
    if (rank != 0) {
        MPI_Send(&rank, 1, MPI_INT, 0, ZT_TAG_AT_END, MPI_COMM_WORLD);
        return;
    }
    char *arrived = zt_xcalloc((size_t)world, 1);
    int missing = world - 1;
    double until = zt_now() + seconds;
    while (missing > 0 && (seconds <= 0 || zt_now() < until)) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, ZT_TAG_AT_END, MPI_COMM_WORLD, &flag, &st);
        if (!flag) {
            struct timespec nap = {0, 2 * 1000 * 1000};
            nanosleep(&nap, NULL);
            continue;
        }
        int who;
        MPI_Recv(&who, 1, MPI_INT, st.MPI_SOURCE, ZT_TAG_AT_END, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (!arrived[st.MPI_SOURCE]) arrived[st.MPI_SOURCE] = 1, missing--;
    }
    if (missing > 0) {
        char list[160] = "";
        int shown = 0;
        for (int r = 1; r < world && shown < 8; r++)
            if (!arrived[r]) {
                size_t len = strlen(list);
                snprintf(list + len, sizeof list - len, "%s%d", shown++ ? ", " : "", r);
            }
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        fprintf(stderr, "zerotrain: error: rank 0 of %d (host %s): rank%s %s%s did not reach the end within %.0f s "
                        "(stopped or hung; ZEROTRAIN_MPI_TIMEOUT)\n",
                world, host, missing > 1 ? "s" : "", list, missing > shown ? ", ..." : "", seconds);
        fflush(stderr);
        _exit(1);
    }
    free(arrived);
}

void zt_mpi_finalize(void) {
    zt_watchdog_stop();
    int done = 0;
    MPI_Finalized(&done);
    if (done) return;
    if (zt_test_hook_stop_in_finalize(zt_mpi_world_rank())) raise(SIGSTOP);
    check_in_at_end(zt_mpi_phase_timeout());
    deadline_arm("MPI_Finalize");
    MPI_Finalize();
    deadline_disarm();
}

int zt_mpi_world_rank(void) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int zt_mpi_world_size(void) {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

void zt_mpi_abort(int status) {
    fflush(stdout);
    fflush(stderr);
    zt_scratch_remove_all(); /* MPI_Abort runs no atexit handlers */
    if (zt_mpi_world_size() > 1) MPI_Abort(MPI_COMM_WORLD, status);
    MPI_Finalize();
    exit(status);
}
