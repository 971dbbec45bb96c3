/* checkpoint_async.c — asynchronous checkpoint saves (checkpoint_async.h): the snapshot, the writer
 * thread and the collective completion.
 *
 * Snapshot: at the step boundary, this rank's range [lo, hi) of master, adam_m and adam_v is read
 * through the engine's state view (state_read reaches the state wherever it lives: device memory,
 * host memory, or the NVMe swap files, whose bytes are copied, so the next step may overwrite them)
 * into one host staging buffer of 12 (hi - lo) bytes (host_alloc: pinned on a GPU), allocated at the
 * first save and kept for the run; the trainer state (step, data position, RNG, loss scale) and the
 * optimizer step count are copies in the job. The writer thread's view reads the buffer through the
 * same state_read, so it runs the code a blocking save runs and writes the same bytes.
 *
 * Completion, deadlock-free across ranks: the ranks start a save together (start is collective), so
 * every rank knows at the same steps that a save is in flight. At each step boundary while one is,
 * every rank calls zt_async_save_poll: one agree_max of "my thread's part is still running", reached
 * by every rank because whether it is called depends on collectively agreed state only. When no
 * rank's write runs any more, every rank joins its (ended) thread and gathers the digests and manifest
 * records (collective) at that same boundary, and rank 0 hands the index, the manifest, the rename
 * and `latest` to its thread again (publish); at the boundary where the poll finds that done too, the
 * ranks agree on its outcome and rank 0 prunes (finish). So training stands still for the snapshot,
 * one gather and one agreement, not for rank 0's index and fsyncs. zt_async_save_finish waits for this rank's own thread (local, no MPI) and then completes:
 * every rank calls it at the same boundary (a save due while one is in flight, the run's end, a stop
 * signal, a divergence the guard acts on). A rank never waits for another rank's thread except inside
 * those collectives, and the writer thread never calls MPI, so a rank that dies mid-write ends the
 * others the way any dead peer does (the comm's failure handling), with `latest` unmoved.
 *
 * HDF5 (a thread-safe build serializes calls, but a reader racing the writer would read a file being
 * written): the writer thread is the process's only HDF5 user while it runs. Training calls no HDF5
 * between saves; load, the 16-bit export and prune run after finish or complete only. `writing` (an
 * atomic) lets zt_checkpoint_load refuse rather than race, should that order ever break. */
#define _GNU_SOURCE
#include "io/checkpoint_async.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "comm/fail_together.h"
#include "io/checkpoint_common.h"
#include "io/checkpoint_save.h"
#include "util/test_hooks.h"

#define WRITER_NICE 10

struct zt_async_saver {
    float *stage;        /* [3][cap]: master, adam_m, adam_v of [lo, hi) */
    size_t cap;
    const zt_backend *stage_be; /* whose host_free frees stage */
    size_t base;         /* lo - opt_lo: the view's offsets count from opt_lo */
    zt_backend host_be;  /* the snapshot view's backend: host memory for write's staging, from any thread */
    zt_save_job *job;    /* the save in flight (NULL: none) */
    zt_comm *comm;
    pthread_t thread;
    atomic_int done;     /* the thread's part has ended: the write, then rank 0's publish */
    int publishing;      /* every rank's file is written and gathered; rank 0's thread publishes */
    double begun_at, written_s; /* when the save began; its write's seconds */
};

static atomic_int writing = 0;

int zt_async_save_writing(void) { return atomic_load(&writing); }

zt_async_saver *zt_async_saver_new(void) { return zt_xcalloc(1, sizeof(zt_async_saver)); }

int zt_async_save_in_flight(const zt_async_saver *a) { return a && a->job; }

long zt_async_save_step(const zt_async_saver *a) { return a->job ? zt_save_job_step(a->job) : 0; }

/* the snapshot view's state_read: from the staging buffer */
static void snapshot_read(void *owner, zt_opt_state which, size_t off, size_t n, float *out) {
    zt_async_saver *a = owner;
    memcpy(out, a->stage + (size_t)which * a->cap + (off - a->base), n * sizeof(float));
}

static void *host_zeroed(size_t bytes) { return calloc(1, bytes); }
static void nothing_queued(void) {}

/* ZEROTRAIN_INJECT_ASYNC_HOLD (util/test_hooks.h): says the write is in flight, then waits for the file */
static void hold_for_test(long step, int rank) {
    const char *path = zt_test_hook_async_hold(step);
    if (!path) return;
    char mark[4200];
    snprintf(mark, sizeof mark, "%s.rank%d", path, rank);
    FILE *f = fopen(mark, "w");
    if (f) fclose(f);
    while (access(path, F_OK)) usleep(10000);
}

/* rank 0's index, manifest, rename and `latest`, beside the steps */
static void *publisher(void *arg) {
    zt_async_saver *a = arg;
    setpriority(PRIO_PROCESS, (id_t)gettid(), WRITER_NICE);
    zt_checkpoint_save_publish(a->job);
    atomic_store(&a->done, 1);
    return NULL;
}

static void *writer(void *arg) {
    zt_async_saver *a = arg;
    /* the writer yields the cores to training (nice +WRITER_NICE, this thread alone): on a CPU the steps
     * compete with its checksums and copies, and a slower write costs only a later `latest`, until
     * the next save must wait for it (SCHED_IDLE starved it into those waits on a busy machine:
     * docs/results/2026-12-07-async-save.md) */
    setpriority(PRIO_PROCESS, (id_t)gettid(), WRITER_NICE);
    hold_for_test(zt_save_job_step(a->job), a->comm->rank);
    zt_checkpoint_save_write(a->job);
    atomic_store(&a->done, 1);
    return NULL;
}

/* FN on a thread of its own (or here, without one, as a blocking save runs it); `writing` until joined */
static void start_thread(zt_async_saver *a, void *(*fn)(void *)) {
    atomic_store(&a->done, 0);
    atomic_store(&writing, 1);
    /* the thread starts with every signal blocked: a stop signal is the training thread's to take, and
     * never interrupts the write's system calls */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int started = pthread_create(&a->thread, NULL, fn, a) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!started) {
        fn(a);
        a->thread = pthread_self();
    }
}

int zt_async_save_begin(zt_async_saver *a, zt_checkpoint_dir *d, const zt_state_view *sv, zt_comm *comm,
                        const zt_gpt2_shape *shape, const zt_train_state *st, const char *config_text,
                        int keep_last, zt_err *err) {
    size_t n = sv->lay.hi - sv->lay.lo;
    int rc = 0;
    if (!a->stage || a->cap < n) {
        if (a->stage) a->stage_be->host_free(a->stage);
        a->stage = sv->be->host_alloc(3 * ck_max(n, 1) * sizeof(float));
        a->cap = a->stage ? ck_max(n, 1) : 0;
        a->stage_be = sv->be;
        if (!a->stage)
            rc = zt_fail(err, "checkpoint.async_save: no host memory for rank %d's snapshot (%.1f MiB: 12 bytes per "
                              "element of its shard); set checkpoint.async_save: false to save blocking",
                         comm->rank, 12.0 * (double)n / 1048576.0);
    }
    if (zt_agree(comm, rc, err)) return -1;
    sv->be->synchronize(); /* the step's state, all of it */
    a->base = sv->lay.lo - sv->lay.opt_lo;
    for (int v = 0; v < ZT_STATE_COUNT && n; v++)
        sv->state_read(sv->owner, (zt_opt_state)v, a->base, n, a->stage + (size_t)v * a->cap);
    a->host_be = *sv->be;
    a->host_be.host_alloc = host_zeroed;
    a->host_be.host_free = free;
    a->host_be.synchronize = nothing_queued;
    zt_state_view snap = {.be = &a->host_be, .table = sv->table, .lay = sv->lay, .steps = sv->steps, .owner = a,
                          .state_read = snapshot_read};
    a->job = zt_checkpoint_save_start(d, &snap, comm, shape, st, config_text, keep_last, err);
    if (!a->job) return -1;
    a->comm = comm;
    a->publishing = 0;
    a->begun_at = zt_now();
    start_thread(a, writer);
    return 0;
}

int zt_async_save_written(const zt_async_saver *a) { return atomic_load(&((zt_async_saver *)a)->done); }

int zt_async_save_poll(zt_async_saver *a) {
    return !a->comm->agree_max(a->comm, !zt_async_save_written(a));
}

static void join_writer(zt_async_saver *a) {
    if (!pthread_equal(a->thread, pthread_self())) pthread_join(a->thread, NULL);
    a->thread = pthread_self(); /* joined: a second join is none */
    atomic_store(&writing, 0);
}

/* the ranks' files are written (this rank's thread joined): gather (collective), then rank 0's publish on
 * its thread (NOW: here) */
static int gathered(zt_async_saver *a, int now, zt_err *err) {
    a->written_s = zt_save_job_written_seconds(a->job);
    if (zt_checkpoint_save_gather(a->job, err)) {
        a->job = NULL;
        return -1;
    }
    a->publishing = 1;
    if (a->comm->rank != 0) atomic_store(&a->done, 1); /* nothing to publish here */
    else if (now) publisher(a);
    else start_thread(a, publisher);
    return 0;
}

/* published on rank 0 (thread joined): the collective finish */
static int finished(zt_async_saver *a, double *written_s, zt_err *err) {
    zt_save_job *j = a->job;
    a->job = NULL;
    a->publishing = 0;
    *written_s = zt_now() - a->begun_at; /* from the snapshot until `latest` names it */
    return zt_checkpoint_save_finish(j, err);
}

int zt_async_save_advance(zt_async_saver *a, int *complete, double *written_s, zt_err *err) {
    join_writer(a);
    *complete = a->publishing;
    if (!a->publishing) return gathered(a, 0, err);
    return finished(a, written_s, err);
}

int zt_async_save_finish(zt_async_saver *a, double *written_s, double *waited_s, zt_err *err) {
    double t0 = zt_now();
    join_writer(a);
    *waited_s = zt_now() - t0;
    if (!a->publishing && gathered(a, 1, err)) return -1;
    join_writer(a);
    return finished(a, written_s, err);
}

void zt_async_saver_free(zt_async_saver *a) {
    if (!a) return;
    if (a->job) {
        join_writer(a);
        zt_checkpoint_save_abandon(a->job);
    }
    if (a->stage) a->stage_be->host_free(a->stage);
    free(a);
}
