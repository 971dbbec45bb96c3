/* backend_sim.c — the simulated GPU (`device: sim`): a test device that fills the backend table on
 * the CPU but behaves like a discrete GPU wherever the engine could tell the difference, so that
 * every path the CUDA backend takes (device buffers, 16-bit compute, copy lanes, overlap_step,
 * parameter offload feeding gather buffers, the device comm) runs — and breaks loudly — in
 * `make test` on machines without a GPU. It is not a performance device.
 *
 * What it enforces, and how:
 *   - A separate memory space. Device memory is an arena of address space reserved with no access
 *     rights (PROT_NONE): the pointers alloc() hands out lie there, so any host access to a device
 *     buffer outside the table faults at once — MPI, checkpoint code or the engine touching device
 *     memory is caught where it happens (the SIGSEGV handler names the buffer and prints the host
 *     stack). The table's own entries reach the bytes through a second, private mapping of the same
 *     size ("the shadow", at a fixed distance from the arena). Every pointer handed to an op is
 *     checked to lie inside one live allocation, with its whole extent: a host pointer given to an
 *     op, or an op running past its buffer, stops the run with the op and argument named.
 *   - 16-bit compute: tensors in compute dtype are bf16 or fp16 in memory; each op widens its inputs
 *     to fp32, runs the CPU backend's fp32 op (the math), and rounds its outputs to nearest-even, as
 *     the CUDA kernels keep 16-bit storage and compute in fp32. fp32 tensors (master weights, Adam
 *     moments, LayerNorm statistics, losses) stay fp32.
 *   - Asynchrony, as backend.h's contract says: ops, memset and D2D copies run in order on a compute
 *     thread ("the stream"); transfer() runs on one thread per direction; copy_ahead() on one more,
 *     after the stream's work so far, and the stream's work after wait_ahead() waits for it; copy()
 *     H2D/D2H and sumsq wait for the stream; synchronize() waits for the stream and copy_ahead's lane. ZEROTRAIN_SIM_JITTER=SEED adds
 *     seeded random delays before every item on every lane, widening every window: a missing
 *     synchronize shows up as a wrong loss.
 *   - Pinned memory: copy_async, copy_ahead and transfer take their host end from host_alloc (CUDA's
 *     pinned memory) or stop the run, named: from pageable memory a GPU's copy is staged and may
 *     synchronize, which no result would show. A host_alloc buffer released with free() instead of
 *     host_free faults on the no-access page in front of it, named (cudaFreeHost's memory crashes
 *     free() on a GPU).
 *   - Threads: a thread other than the one that asked for the device must call bind_thread before
 *     any other entry (CUDA's threads start on GPU 0); one that does not is stopped, named.
 *   - Several devices: ZEROTRAIN_SIM_DEVICES=N gives a machine N of them, opened by node-local rank
 *     (zt_node_local_rank, MPI's numbering), so the session's check that a machine's ranks open
 *     distinct devices runs without a GPU or a launcher variable.
 *   - Capacity: mem_info reports ZEROTRAIN_SIM_MEM (bytes with a unit, default 8GiB) and an alloc
 *     past it returns NULL, as cudaMalloc fails, so ratio auto, the estimate's device column and the
 *     out-of-memory messages are exercised.
 *   - Time, when ZEROTRAIN_SIM_PROFILE names a hardware profile (configs/hw/): every item carries
 *     its cost on that GPU, its launch time on the queueing thread and what it waits on, and each
 *     lane keeps a virtual clock of its own (sim_clock.h has the rules). The items still run for
 *     real, in the same order: the virtual schedule is the real one, timed by the profile.
 *     ZEROTRAIN_SIM_DRY=1 (predict's default) keeps the order, the checks and the costs but runs no
 *     item's work (a wait between lanes still waits): device memory is address space only, its
 *     pages never touched, and host_alloc's buffers too (util/clock.h: zt_clock_bulk_alloc).
 * What it cannot show (a real GPU must): the CUDA kernels' own numerics, their real speed, PCIe, NCCL. */
#define _GNU_SOURCE
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu_adam.h"
#include "comm/comm.h" /* zt_node_local_rank */
#include "backend/sim_clock.h"
#include "util/clock.h"
#include "util/util.h"

/* ------------------------------------------------------------------ failures */

static void sim_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void sim_fatal(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "zerotrain: error: simulated device: %s\n", msg);
    void *frames[32];
    int n = backtrace(frames, 32);
    backtrace_symbols_fd(frames, n, 2);
    fflush(stderr);
    abort();
}

/* ------------------------------------------------------------------ the arena and its allocator */

/* ZEROTRAIN_SIM_DRY=1 (`zerotrain predict`): device memory is address space only and the items are
 * costed, checked and ordered but not performed, so a model larger than this machine predicts */
static int g_dry;

#define SIM_ALIGN 256 /* cudaMalloc's alignment */

typedef struct {
    size_t off, size; /* [off, off + size) of the arena */
    int used;
} sim_block;

static struct {
    pthread_mutex_t lock;
    char *arena;  /* PROT_NONE: the device addresses */
    char *shadow; /* read/write: the same bytes as the table's entries see them */
    size_t cap, used;
    sim_block *blocks; /* sorted by offset, covering [0, cap) */
    int n, nmax;
} g_mem = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int in_arena(const void *p) {
    return g_mem.arena && (const char *)p >= g_mem.arena && (const char *)p < g_mem.arena + g_mem.cap;
}

/* index of the block holding offset off (caller holds the lock) */
static int block_at(size_t off) {
    int lo = 0, hi = g_mem.n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (g_mem.blocks[mid].off <= off) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* device bytes in use after an alloc or free, to the trace (backend.h's observer) */
static void report_memory(size_t in_use) {
    const zt_device_observer *obs = zt_device_observer_now();
    if (obs && obs->memory) obs->memory(obs->ctx, in_use, zt_clock_now());
}

static void *sim_alloc_bytes(size_t bytes) {
    size_t sz = (bytes + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN;
    if (sz == 0) sz = SIM_ALIGN;
    pthread_mutex_lock(&g_mem.lock);
    int i = 0;
    while (i < g_mem.n && (g_mem.blocks[i].used || g_mem.blocks[i].size < sz)) i++;
    if (i == g_mem.n) {
        pthread_mutex_unlock(&g_mem.lock);
        return NULL; /* out of device memory, as cudaMalloc */
    }
    sim_block *b = &g_mem.blocks[i];
    if (b->size > sz) { /* split: the rest stays free */
        if (g_mem.n == g_mem.nmax) {
            g_mem.nmax *= 2;
            g_mem.blocks = zt_xrealloc(g_mem.blocks, (size_t)g_mem.nmax * sizeof *g_mem.blocks);
            b = &g_mem.blocks[i];
        }
        memmove(b + 2, b + 1, (size_t)(g_mem.n - i - 1) * sizeof *b);
        b[1] = (sim_block){b->off + sz, b->size - sz, 0};
        b->size = sz;
        g_mem.n++;
    }
    b->used = 1;
    g_mem.used += sz;
    sim_clock_device_used((double)g_mem.used);
    size_t off = b->off, in_use = g_mem.used;
    pthread_mutex_unlock(&g_mem.lock);
    report_memory(in_use);
    if (!g_dry) memset(g_mem.shadow + off, 0, sz); /* dry: never touched, the pages read as zeros */
    return g_mem.arena + off;
}

static void sim_release(void *p) {
    if (!p) return;
    if (!in_arena(p)) sim_fatal("free: %p is not device memory", p);
    size_t off = (size_t)((char *)p - g_mem.arena);
    pthread_mutex_lock(&g_mem.lock);
    int i = block_at(off);
    sim_block *b = &g_mem.blocks[i];
    if (b->off != off || !b->used) {
        pthread_mutex_unlock(&g_mem.lock);
        sim_fatal("free: %p is not the start of a live allocation", p);
    }
    /* hand the pages back (they read as zeros when touched again) */
    size_t pg = 4096, a = (b->off + pg - 1) / pg * pg, z = (b->off + b->size) / pg * pg;
    if (z > a) madvise(g_mem.shadow + a, z - a, MADV_DONTNEED);
    b->used = 0;
    g_mem.used -= b->size;
    sim_clock_device_used((double)g_mem.used);
    if (i + 1 < g_mem.n && !b[1].used) { /* merge with the next free block */
        b->size += b[1].size;
        memmove(b + 1, b + 2, (size_t)(g_mem.n - i - 2) * sizeof *b);
        g_mem.n--;
    }
    if (i > 0 && !b[-1].used) { /* and with the previous one */
        b[-1].size += b->size;
        memmove(b, b + 1, (size_t)(g_mem.n - i - 1) * sizeof *b);
        g_mem.n--;
    }
    size_t in_use = g_mem.used;
    pthread_mutex_unlock(&g_mem.lock);
    report_memory(in_use);
}

/* Threads other than the one that made the device call bind_thread before using the table, as on
 * CUDA (where they would otherwise make a context on GPU 0): the sim stops the run where one forgets. */
static __thread int t_bound;
static void sim_bind_thread(void) { t_bound = 1; }
static void check_bound(const char *op) {
    if (!t_bound) sim_fatal("%s: called from a thread that did not call bind_thread first", op);
}

/* The shadow address of [p, p + bytes) for op `op`'s argument `arg`, after checking that the range
 * lies inside one live allocation; NULL stays NULL. Runs on the caller's thread, so a bad pointer
 * stops the run with the caller's stack. */
/* The 16-bit operands an op queued on this thread reads or writes whole (their extents, as dev()
 * checks them): its run widens each to fp32 and rounds the written ones back, work a GPU does not do,
 * which the virtual clock prices as operand traffic (sim_cost_operands; 0 on a GPU's profile). Set
 * from op_item to the op's submit. */
static __thread int t_widens;
static __thread double t_operand_bytes;

static void *dev(const void *p, size_t bytes, const char *op, const char *arg) {
    check_bound(op);
    if (!p) return NULL;
    if (t_widens) t_operand_bytes += (double)bytes;
    if (!in_arena(p)) sim_fatal("%s: %s = %p is host memory, not a device buffer", op, arg, p);
    size_t off = (size_t)((const char *)p - g_mem.arena);
    pthread_mutex_lock(&g_mem.lock);
    sim_block b = g_mem.blocks[block_at(off)];
    pthread_mutex_unlock(&g_mem.lock);
    if (!b.used) sim_fatal("%s: %s = %p lies in freed device memory", op, arg, p);
    if (off + bytes > b.off + b.size)
        sim_fatal("%s: %s = %p + %zu bytes runs past its buffer (%zu bytes at %p) by %zu bytes", op, arg, p, bytes,
                  b.size, (void *)(g_mem.arena + b.off), off + bytes - (b.off + b.size));
    return g_mem.shadow + off;
}

/* a host pointer for a copy: must not be device memory */
static void *host(const void *p, const char *op, const char *arg) {
    if (in_arena(p)) sim_fatal("%s: %s = %p is a device buffer where host memory is expected", op, arg, p);
    return (void *)p;
}

static void *pinned_guarded(const void *addr);

/* A host access to the arena: say which buffer, print the host stack, then fault for real. The same
 * for free() of a host_alloc buffer (it reads the guard page in front of it). */
static void on_segv(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    void *pinned = pinned_guarded(si->si_addr);
    if (pinned) {
        char line[256];
        int n = snprintf(line, sizeof line,
                         "zerotrain: error: simulated device: %p is host_alloc's (pinned) memory, released with "
                         "free() or read below its start: pinned memory goes back through host_free\n", pinned);
        if (write(2, line, (size_t)n) < 0) {}
        void *frames[32];
        backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    } else if (in_arena(si->si_addr)) {
        char line[256];
        int n = snprintf(line, sizeof line,
                         "zerotrain: error: simulated device: host access to device memory at %p (arena offset "
                         "%zu): device buffers are reached only through the backend table\n",
                         si->si_addr, (size_t)((char *)si->si_addr - g_mem.arena));
        if (write(2, line, (size_t)n) < 0) {}
        void *frames[32];
        backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    }
    signal(sig, SIG_DFL); /* returning re-runs the access: it faults again, now fatally */
}

/* ------------------------------------------------------------------ lanes (streams) */

typedef struct sim_item sim_item;
typedef void (*sim_fn)(sim_item *);
struct sim_item {
    sim_fn run;
    void *p[10];             /* shadow addresses (or host pointers for copies) */
    long i[10];              /* shapes and flags */
    size_t n;                /* elements or bytes */
    float f;                 /* scale, dloss */
    zt_adam_step step;       /* adamw's step, copied: the caller's may change before the op runs */
    double result;           /* sumsq */
    int waited;              /* the submitter waits for it and frees it */
    /* the virtual clock (sim_clock.h): launched at `ready` on the queueing thread's time, waiting
     * on `dep` (set by a wait item as it runs), costing `cost` on its lane */
    double ready, dep, cost, flops;
    int must_run;            /* runs even when the ops are only costed (a wait between lanes) */
    const char *name;        /* for the trace of the device's lanes (util/clock.h: zt_clock_event) */
    sim_item *next;
};

/* virtual end times of a lane's last SIM_ENDS items, by ticket: what a wait on a ticket reads */
#define SIM_ENDS (1u << 18)

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    sim_item *head, *tail;
    unsigned long long queued, done;
    int index;          /* ZT_SIM_* */
    double *end;        /* [SIM_ENDS]: end[t % SIM_ENDS] = virtual end of ticket t */
    unsigned jitter_us; /* the largest delay before an item; 0: none */
    zt_rng rng;
    pthread_t thread;
} sim_lane;

/* LANE_AHEAD: copy_ahead's side stream; the same order as sim_clock.h's ZT_SIM_* */
enum { LANE_COMPUTE = ZT_SIM_COMPUTE, LANE_H2D = ZT_SIM_H2D, LANE_D2H = ZT_SIM_D2H, LANE_AHEAD = ZT_SIM_AHEAD,
       N_LANES = ZT_SIM_NLANES };
_Static_assert((int)LANE_AHEAD == (int)ZT_STREAM_AHEAD && (int)LANE_D2H == (int)ZT_STREAM_D2H, "lanes are the trace's streams");
static sim_lane g_lane[N_LANES];

static void run_copy(sim_item *it);
static void run_wait_lane(sim_item *it);
/* what an item that ran on lane `lane` from t0 to t1 did, for the trace: a host<->device copy
 * (its kind in i[9]), or compute work on the stream (waits for another lane are not work) */
static void report_item(const zt_device_observer *obs, int lane, const sim_item *it, double t0, double t1) {
    if (it->run == run_copy) {
        if (it->i[9] != ZT_D2D && obs->transfer) obs->transfer(obs->ctx, (zt_copy_kind)it->i[9], it->n, lane, t0, t1);
        else if (obs->compute) obs->compute(obs->ctx, t0, t1);
    } else if (lane == LANE_COMPUTE && it->run != run_wait_lane && obs->compute) {
        obs->compute(obs->ctx, t0, t1);
    }
}

static void *lane_main(void *arg) {
    sim_lane *l = arg;
    for (;;) {
        pthread_mutex_lock(&l->lock);
        while (!l->head) pthread_cond_wait(&l->wake, &l->lock);
        sim_item *it = l->head;
        l->head = it->next;
        if (!l->head) l->tail = NULL;
        unsigned delay = l->jitter_us ? (unsigned)(zt_rng_u64(&l->rng) % (l->jitter_us + 1)) : 0;
        pthread_mutex_unlock(&l->lock);
        if (delay) {
            struct timespec ts = {0, (long)delay * 1000};
            nanosleep(&ts, NULL);
        }
        const zt_device_observer *obs = zt_device_observer_now();
        double w0 = obs ? zt_now() : 0;
        if (!g_dry || it->must_run) it->run(it);
        double end = sim_clock_lane_run(l->index, it->ready, it->dep, it->cost, it->flops);
        if (it->cost > 0 && it->name) zt_clock_event(l->index, zt_sim_lane_names[l->index], it->name, end - it->cost, end);
        /* the trace's observer sees the item on the run's clock: the virtual one's times when it runs */
        if (obs) {
            int v = zt_clock_is_virtual();
            report_item(obs, (int)(l - g_lane), it, v ? end - it->cost : w0, v ? end : zt_now());
        }
        if (!it->waited) free(it); /* else the submitter frees it once done counts it */
        pthread_mutex_lock(&l->lock);
        l->done++;
        l->end[l->done % SIM_ENDS] = end;
        pthread_cond_broadcast(&l->idle);
        pthread_mutex_unlock(&l->lock);
    }
    return NULL;
}

/* queues it on lane l; returns its ticket */
static unsigned long long submit(sim_lane *l, sim_item *it) {
    if (t_widens) it->cost += sim_cost_operands(t_operand_bytes), t_widens = 0;
    it->ready = sim_clock_launch();
    pthread_mutex_lock(&l->lock);
    it->next = NULL;
    if (l->tail) l->tail->next = it;
    else l->head = it;
    l->tail = it;
    unsigned long long ticket = ++l->queued;
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->lock);
    return ticket;
}

/* waits until ticket has run; returns its virtual end (0 for ticket 0: nothing queued yet) */
static double wait_ticket(sim_lane *l, unsigned long long ticket) {
    pthread_mutex_lock(&l->lock);
    while (l->done < ticket) pthread_cond_wait(&l->idle, &l->lock);
    if (ticket + SIM_ENDS <= l->done) {
        pthread_mutex_unlock(&l->lock);
        sim_fatal("a wait on item %llu of a lane that has run %llu since: its time is forgotten", ticket, l->done);
    }
    double end = ticket ? l->end[ticket % SIM_ENDS] : 0;
    pthread_mutex_unlock(&l->lock);
    return end;
}

/* queues it and returns once it has run (it is the caller's to free); the caller's time moves to its end */
static void run_and_wait(sim_lane *l, sim_item *it) {
    it->waited = 1;
    sim_clock_host_waited(wait_ticket(l, submit(l, it)));
}

/* the calling host thread waits for everything queued on l so far */
static void lane_sync(sim_lane *l) {
    pthread_mutex_lock(&l->lock);
    unsigned long long t = l->queued;
    pthread_mutex_unlock(&l->lock);
    sim_clock_host_waited(wait_ticket(l, t));
}

static sim_item *item(sim_fn run) {
    sim_item *it = zt_xcalloc(1, sizeof *it);
    it->run = run;
    return it;
}
static void enqueue(sim_item *it) { submit(&g_lane[LANE_COMPUTE], it); }

/* ------------------------------------------------------------------ 16-bit tensors inside an op */

static const zt_backend *g_cpu; /* the math */

/* The fp32 copies of an op's 16-bit arguments: one per distinct buffer (aliased arguments share
 * theirs, as the ops' contracts allow), written back rounded when the op may have written them:
 * rows x cols elements with row stride ld (a whole tensor is one row of n). */
typedef struct {
    struct { void *shadow; float *f; size_t n; int write; size_t rows, cols, ld; } t[8];
    int k;
    zt_dtype dt;
} wide;

/* Each lane thread keeps the fp32 copies of its ops' operands between ops, one per operand slot (up
 * to SCRATCH_KEEP bytes each; larger ones are allocated per op): a fresh copy per op page-faulted on
 * every use, so an op's cost depended on what the allocator had at hand, which the virtual clock
 * cannot price (calibrate measures operands in a loop where the allocator hands the same memory back). */
#define SCRATCH_KEEP ((size_t)64 << 20)
static __thread struct { float *f; size_t cap; } t_scratch[8];
static float *scratch(int slot, size_t n) {
    size_t bytes = (n ? n : 1) * sizeof(float);
    if (bytes > SCRATCH_KEEP) return zt_xmalloc(bytes);
    if (t_scratch[slot].cap < bytes) {
        free(t_scratch[slot].f);
        t_scratch[slot].f = zt_xmalloc(bytes), t_scratch[slot].cap = bytes;
    }
    return t_scratch[slot].f;
}

static float *w16(wide *w, void *shadow, size_t n, int write) {
    if (!shadow) return NULL;
    for (int j = 0; j < w->k; j++)
        if (w->t[j].shadow == shadow && w->t[j].n >= n) {
            w->t[j].write |= write;
            return w->t[j].f;
        }
    float *f = scratch(w->k, n);
    zt_cpu_to_f32(f, shadow, n, w->dt);
    w->t[w->k++] = (typeof(w->t[0])){shadow, f, n, write, 1, n, n};
    return f;
}

/* elements a matrix of rows x cols with row stride ld spans from its first: the last row ends at
 * its cols-th element, not at ld (a column slice may end before its buffer's last full row) */
static size_t span(long rows, long cols, long ld) { return rows > 0 && cols > 0 ? (size_t)(rows - 1) * ld + cols : 0; }

/* w16 for a strided matrix (a column slice of a wider one): widened over its span, but only its own
 * rows x cols elements are written back, so the rest of each row (another tile's columns) stays bit
 * for bit as it was */
static float *w16_rows(wide *w, void *shadow, long rows, long cols, long ld, int write) {
    float *f = w16(w, shadow, span(rows, cols, ld), write);
    for (int j = 0; write && j < w->k; j++)
        if (w->t[j].f == f) w->t[j].rows = (size_t)rows, w->t[j].cols = (size_t)cols, w->t[j].ld = (size_t)ld;
    return f;
}

static void w16_done(wide *w) {
    for (int j = 0; j < w->k; j++) {
        if (w->t[j].write)
            for (size_t r = 0; r < w->t[j].rows; r++)
                zt_cpu_from_f32((char *)w->t[j].shadow + r * w->t[j].ld * zt_dtype_size(w->dt),
                                w->t[j].f + r * w->t[j].ld, w->t[j].cols, w->dt);
        if (w->t[j].f != t_scratch[j].f) free(w->t[j].f); /* a kept scratch stays for the next op */
    }
}

#define E(n) ((size_t)(n) * zt_dtype_size(dt)) /* bytes of n compute-dtype elements (dt in scope) */
#define F(n) ((size_t)(n) * sizeof(float))

/* ------------------------------------------------------------------ memory entries */

static void *sim_alloc(size_t bytes) {
    check_bound("alloc");
    return sim_alloc_bytes(bytes);
}
static void sim_free(void *p) {
    check_bound("free");
    lane_sync(&g_lane[LANE_COMPUTE]); /* as cudaFree: queued work may still use it */
    sim_release(p);
}
/* host_alloc's buffers, the stand-in for CUDA's pinned memory: the asynchronous copies (copy_async,
 * copy_ahead, transfer) must use one, and a host range outside them stops the run. Stopped, not
 * counted: on a GPU a pageable buffer still gives the right answer, only slowly (the driver stages
 * the copy and may wait for the device), so nothing but a stop would ever be noticed. Under the
 * virtual clock a copy is costed at the profile's pinned rate (a blocking copy from other host
 * memory at the pageable rate, as cudaMemcpy stages it). */
static struct {
    pthread_mutex_t lock;
    struct { char *p; size_t size; } *b;
    int n, cap;
} g_pinned = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Each host_alloc buffer is its own mapping with a page of no access rights in front: free() of it
 * (CUDA's pinned memory wants cudaFreeHost; glibc reads the chunk header just below the pointer)
 * faults there at once, and the SIGSEGV handler names the buffer. On the first H100 run, ratio
 * auto's calibration freed its pinned transfer buffers with free() and crashed, while the sim's
 * malloc'ed stand-ins let the same code pass. Dry (costed, not performed), the mapping is address
 * space only and counts against the profile's host memory as zt_clock_bulk_alloc's do. */
static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }
static size_t pinned_span(size_t bytes) { return (bytes + page_size() - 1) / page_size() * page_size() + page_size(); }

static void *sim_host_alloc(size_t bytes) {
    size_t sz = (bytes + 63) / 64 * 64;
    if (!sz) sz = 64;
    size_t span = pinned_span(sz);
    if (g_dry && !zt_clock_host_reserve((double)span)) return NULL; /* past the profile's host memory */
    char *base = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (g_dry ? MAP_NORESERVE : 0), -1, 0);
    if (base == MAP_FAILED || mprotect(base, page_size(), PROT_NONE)) {
        if (base != MAP_FAILED) munmap(base, span);
        if (g_dry) zt_clock_host_reserve(-(double)span);
        return NULL;
    }
    char *p = base + page_size(); /* zeroed, as every fresh anonymous page */
    pthread_mutex_lock(&g_pinned.lock);
    if (g_pinned.n == g_pinned.cap) {
        g_pinned.cap = g_pinned.cap ? 2 * g_pinned.cap : 64;
        g_pinned.b = zt_xrealloc(g_pinned.b, (size_t)g_pinned.cap * sizeof *g_pinned.b);
    }
    g_pinned.b[g_pinned.n].p = p, g_pinned.b[g_pinned.n].size = sz, g_pinned.n++;
    pthread_mutex_unlock(&g_pinned.lock);
    return p;
}
static void sim_host_free(void *p) {
    if (!p) return;
    lane_sync(&g_lane[LANE_COMPUTE]);
    lane_sync(&g_lane[LANE_AHEAD]);
    pthread_mutex_lock(&g_pinned.lock);
    int i = 0;
    while (i < g_pinned.n && g_pinned.b[i].p != p) i++;
    int found = i < g_pinned.n;
    size_t size = found ? g_pinned.b[i].size : 0;
    if (found) g_pinned.b[i] = g_pinned.b[--g_pinned.n];
    pthread_mutex_unlock(&g_pinned.lock);
    if (!found) sim_fatal("host_free: %p did not come from host_alloc", p);
    munmap((char *)p - page_size(), pinned_span(size));
    if (g_dry) zt_clock_host_reserve(-(double)pinned_span(size));
}
/* the host_alloc buffer whose guard page holds addr, or NULL (from the SIGSEGV handler: no lock,
 * the process is about to end) */
static void *pinned_guarded(const void *addr) {
    const char *a = addr;
    for (int i = 0; i < g_pinned.n; i++)
        if (a >= g_pinned.b[i].p - page_size() && a < g_pinned.b[i].p) return g_pinned.b[i].p;
    return NULL;
}
/* whether host range [p, p + bytes) lies inside one live host_alloc buffer */
static int is_pinned(const void *p, size_t bytes) {
    const char *c = p;
    int in = 0;
    pthread_mutex_lock(&g_pinned.lock);
    for (int i = 0; i < g_pinned.n && !in; i++)
        in = c >= g_pinned.b[i].p && c + bytes <= g_pinned.b[i].p + g_pinned.b[i].size;
    pthread_mutex_unlock(&g_pinned.lock);
    return in;
}

static void run_memset(sim_item *it) { memset(it->p[0], 0, it->n); }
static void sim_memset_zero(void *p, size_t bytes) {
    if (!bytes) return;
    sim_item *it = item(run_memset);
    it->p[0] = dev(p, bytes, "memset_zero", "ptr");
    it->name = "memset";
    it->n = bytes;
    it->cost = sim_cost_bytes((double)bytes);
    enqueue(it);
}

static void run_copy(sim_item *it) { memmove(it->p[0], it->p[1], it->n); }
/* the copy's item; `async`: copy_async, copy_ahead and transfer, whose host end must be pinned */
static sim_item *copy_item(void *dst, const void *src, size_t bytes, zt_copy_kind kind, const char *op, int async) {
    check_bound(op);
    sim_item *it = item(run_copy);
    it->p[0] = kind == ZT_D2H ? host(dst, op, "dst") : dev(dst, bytes, op, "dst");
    it->p[1] = kind == ZT_H2D ? host(src, op, "src") : dev(src, bytes, op, "src");
    it->n = bytes;
    if (async && kind != ZT_D2D && !is_pinned(kind == ZT_H2D ? src : dst, bytes))
        sim_fatal("%s: %s = %p (%zu bytes) is pageable host memory, not from host_alloc: on a GPU the driver stages "
                  "such a copy and may wait for the device, losing the overlap it is for", op,
                  kind == ZT_H2D ? "src" : "dst", kind == ZT_H2D ? src : (const void *)dst, bytes);
    int pinned = kind == ZT_D2D || is_pinned(kind == ZT_H2D ? src : dst, bytes);
    it->name = kind == ZT_H2D ? (pinned ? "H2D" : "H2D pageable") : kind == ZT_D2H ? (pinned ? "D2H" : "D2H pageable") : "D2D";
    it->cost = sim_cost_pcie(kind, pinned, (double)bytes);
    sim_clock_count_pcie(kind, (double)bytes);
    it->i[9] = kind; /* for the trace (report_item) */
    return it;
}
static void sim_copy(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (!bytes) return;
    sim_item *it = copy_item(dst, src, bytes, kind, "copy", 0);
    if (kind == ZT_D2D) { enqueue(it); return; }
    run_and_wait(&g_lane[LANE_COMPUTE], it); /* host memory: returns once it may be reused or read */
    free(it);
}
static void sim_copy_async(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (bytes) enqueue(copy_item(dst, src, bytes, kind, "copy_async", 1)); /* touches the host buffer when it runs */
}
/* an item that holds its lane until the other lane has done what was queued on it before: one stream
 * waiting on an event recorded on another */
static void run_wait_lane(sim_item *it) { it->dep = wait_ticket(it->p[0], (unsigned long long)it->i[0]); }
static void lane_waits_for(sim_lane *waiter, sim_lane *on) {
    pthread_mutex_lock(&on->lock);
    unsigned long long ticket = on->queued;
    pthread_mutex_unlock(&on->lock);
    sim_item *it = item(run_wait_lane);
    it->must_run = 1;
    it->p[0] = on;
    it->i[0] = (long)ticket;
    submit(waiter, it);
}
static void sim_copy_ahead(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (!bytes) return;
    sim_item *it = copy_item(dst, src, bytes, kind, "copy_ahead", 1);
    lane_waits_for(&g_lane[LANE_AHEAD], &g_lane[LANE_COMPUTE]);
    submit(&g_lane[LANE_AHEAD], it);
}
static void sim_wait_ahead(void) {
    check_bound("wait_ahead");
    lane_waits_for(&g_lane[LANE_COMPUTE], &g_lane[LANE_AHEAD]);
}
static void sim_transfer(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (!bytes) return;
    sim_item *it = copy_item(dst, src, bytes, kind, "transfer", 1);
    /* not ordered after the stream's work: that is the caller's synchronize() */
    run_and_wait(&g_lane[kind == ZT_H2D ? LANE_H2D : kind == ZT_D2H ? LANE_D2H : LANE_COMPUTE], it);
    free(it);
}
/* the stream and copy_ahead's lane, as backend.h says (wait_ahead orders device work only) */
static void sim_synchronize(void) {
    check_bound("synchronize");
    lane_sync(&g_lane[LANE_COMPUTE]);
    lane_sync(&g_lane[LANE_AHEAD]);
}
static void sim_mem_info(size_t *free_bytes, size_t *total_bytes) {
    check_bound("mem_info");
    pthread_mutex_lock(&g_mem.lock);
    *free_bytes = g_mem.cap - g_mem.used;
    *total_bytes = g_mem.cap;
    pthread_mutex_unlock(&g_mem.lock);
}

/* ------------------------------------------------------------------ ops
 * Each entry checks and translates its pointers on the caller's thread, then queues a closure that
 * widens, calls the CPU backend's op and rounds. The dtype travels in i[8]. */

#define OP_BEGIN(it) wide w_ = {.dt = (zt_dtype)(it)->i[8]}
#define OP_END() w16_done(&w_)

static void run_to_compute(sim_item *it);
static void run_to_f32(sim_item *it);
static void run_adamw(sim_item *it);
static sim_item *op_item(sim_fn run, zt_dtype dt, const char *name) {
    /* the conversions and AdamW work on their buffers in place; every other op widens its operands */
    t_widens = run != run_to_compute && run != run_to_f32 && run != run_adamw, t_operand_bytes = 0;
    sim_item *it = item(run);
    it->i[8] = dt;
    it->name = name;
    return it;
}

static void run_to_compute(sim_item *it) { zt_cpu_from_f32(it->p[0], it->p[1], it->n, (zt_dtype)it->i[8]); }
static void run_to_f32(sim_item *it) { zt_cpu_to_f32(it->p[0], it->p[1], it->n, (zt_dtype)it->i[8]); }

static void run_embedding_forward(sim_item *it) {
    OP_BEGIN(it);
    long B = it->i[2], T = it->i[3], C = it->i[4], lo = it->i[0], hi = it->i[1];
    g_cpu->embedding_forward(w16(&w_, it->p[0], B * T * C, 1), it->p[1], w16(&w_, it->p[2], (hi - lo) * C, 0), (int)lo,
                             (int)hi, w16(&w_, it->p[3], T * C, 0), (int)B, (int)T, (int)C);
    OP_END();
}
static void run_embedding_backward(sim_item *it) {
    OP_BEGIN(it);
    long B = it->i[2], T = it->i[3], C = it->i[4], lo = it->i[0], hi = it->i[1];
    g_cpu->embedding_backward(w16(&w_, it->p[0], (hi - lo) * C, 1), (int)lo, (int)hi, w16(&w_, it->p[1], T * C, 1),
                              w16(&w_, it->p[2], B * T * C, 0), it->p[3], (int)B, (int)T, (int)C);
    OP_END();
}
static void run_layernorm_forward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1];
    g_cpu->layernorm_forward(w16(&w_, it->p[0], N * C, 1), it->p[1], it->p[2], w16(&w_, it->p[3], N * C, 0),
                             w16(&w_, it->p[4], C, 0), w16(&w_, it->p[5], C, 0), (int)N, (int)C);
    OP_END();
}
static void run_layernorm_backward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1];
    g_cpu->layernorm_backward(w16(&w_, it->p[0], N * C, 1), w16(&w_, it->p[1], C, 1), w16(&w_, it->p[2], C, 1),
                              w16(&w_, it->p[3], N * C, 0), w16(&w_, it->p[4], N * C, 0), w16(&w_, it->p[5], C, 0),
                              it->p[6], it->p[7], (int)N, (int)C);
    OP_END();
}
static void run_matmul_forward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1], OC = it->i[2], wt = it->i[3], ld = it->i[4];
    g_cpu->matmul_forward(w16_rows(&w_, it->p[0], N, OC, ld, 1), w16(&w_, it->p[1], N * C, 0),
                          w16(&w_, it->p[2], C * OC, 0), w16(&w_, it->p[3], OC, 0), (int)N, (int)C, (int)OC, (int)wt,
                          (int)ld);
    OP_END();
}
static void run_matmul_backward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1], OC = it->i[2], wt = it->i[3], ld = it->i[4];
    g_cpu->matmul_backward(w16(&w_, it->p[0], N * C, 1), w16(&w_, it->p[1], C * OC, 1), w16(&w_, it->p[2], OC, 1),
                           w16(&w_, it->p[3], (N - 1) * ld + OC, 0), w16(&w_, it->p[4], N * C, 0),
                           w16(&w_, it->p[5], C * OC, 0), (int)N, (int)C, (int)OC, (int)wt, (int)ld);
    OP_END();
}
static void run_matmul_forward_gelu(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1], OC = it->i[2];
    g_cpu->matmul_forward_gelu(w16(&w_, it->p[0], N * OC, 1), w16(&w_, it->p[1], N * OC, 1),
                               w16(&w_, it->p[2], N * C, 0), w16(&w_, it->p[3], C * OC, 0), w16(&w_, it->p[4], OC, 0),
                               (int)N, (int)C, (int)OC);
    OP_END();
}
static void run_matmul_backward_dgelu(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1], OC = it->i[2];
    g_cpu->matmul_backward_dgelu(w16(&w_, it->p[0], N * C, 1), w16(&w_, it->p[1], C * OC, 1), w16(&w_, it->p[2], OC, 1),
                                 w16(&w_, it->p[3], N * OC, 0), w16(&w_, it->p[4], N * C, 0),
                                 w16(&w_, it->p[5], C * OC, 0), w16(&w_, it->p[6], N * C, 0), (int)N, (int)C, (int)OC);
    OP_END();
}
/* Attention keeps nothing in att (the CUDA flash path keeps its own statistics there): backward
 * recomputes the probabilities from qkv in fp32, which the CPU forward gives bit for bit. */
static void run_attention_forward(sim_item *it) {
    OP_BEGIN(it);
    long B = it->i[0], T = it->i[1], C = it->i[2], NH = it->i[3];
    float *att = zt_xmalloc(F(B * NH * T * T));
    g_cpu->attention_forward(w16(&w_, it->p[0], B * T * C, 1), att, w16(&w_, it->p[2], B * T * 3 * C, 0), (int)B,
                             (int)T, (int)C, (int)NH);
    free(att);
    OP_END();
}
static void run_attention_backward(sim_item *it) {
    OP_BEGIN(it);
    long B = it->i[0], T = it->i[1], C = it->i[2], NH = it->i[3];
    float *att = zt_xmalloc(F(B * NH * T * T)), *datt = zt_xmalloc(F(B * NH * T * T)),
          *out = zt_xmalloc(F(B * T * C));
    float *qkv = w16(&w_, it->p[3], B * T * 3 * C, 0);
    g_cpu->attention_forward(out, att, qkv, (int)B, (int)T, (int)C, (int)NH);
    g_cpu->attention_backward(w16(&w_, it->p[0], B * T * 3 * C, 1), datt, w16(&w_, it->p[2], B * T * C, 0), qkv, att,
                              (int)B, (int)T, (int)C, (int)NH);
    free(att);
    free(datt);
    free(out);
    OP_END();
}
static void run_gelu_forward(sim_item *it) {
    OP_BEGIN(it);
    g_cpu->gelu_forward(w16(&w_, it->p[0], it->n, 1), w16(&w_, it->p[1], it->n, 0), it->n);
    OP_END();
}
static void run_gelu_backward(sim_item *it) {
    OP_BEGIN(it);
    g_cpu->gelu_backward(w16(&w_, it->p[0], it->n, 1), w16(&w_, it->p[1], it->n, 0), w16(&w_, it->p[2], it->n, 0),
                         it->n);
    OP_END();
}
static void run_residual_forward(sim_item *it) {
    OP_BEGIN(it);
    g_cpu->residual_forward(w16(&w_, it->p[0], it->n, 1), w16(&w_, it->p[1], it->n, 0), w16(&w_, it->p[2], it->n, 0),
                            it->n);
    OP_END();
}
static void run_accumulate(sim_item *it) {
    OP_BEGIN(it);
    g_cpu->accumulate(w16(&w_, it->p[0], it->n, 1), w16(&w_, it->p[1], it->n, 0), it->n);
    OP_END();
}
static void run_scale(sim_item *it) {
    OP_BEGIN(it);
    g_cpu->scale(w16(&w_, it->p[0], it->n, 1), it->f, it->n);
    OP_END();
}
static void run_softmax_xent(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], V = it->i[1], Vp = it->i[2];
    float *logits = w16(&w_, it->p[2], N * Vp, 0);
    g_cpu->softmax_xent(it->p[0], w16(&w_, it->p[1], N * Vp, 1), logits, it->p[3], (int)N, (int)V, (int)Vp, it->f);
    OP_END();
}
static void run_xent_partial(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], Vl = it->i[1], Vp = it->i[2], lo = it->i[3];
    g_cpu->xent_partial(it->p[0], w16(&w_, it->p[1], N * Vp, 0), it->p[2], (int)N, (int)Vl, (int)Vp, (int)lo);
    OP_END();
}
static void run_xent_parallel(sim_item *it) {
    OP_BEGIN(it);
    long tp = it->i[0], N = it->i[1], Vl = it->i[2], Vp = it->i[3], lo = it->i[4];
    float *logits = w16(&w_, it->p[2], N * Vp, 0);
    g_cpu->xent_parallel(it->p[0], w16(&w_, it->p[1], N * Vp, 1), logits, it->p[3], it->p[4], (int)tp, (int)N, (int)Vl,
                         (int)Vp, (int)lo, it->f);
    OP_END();
}
/* the tiled linears: every matrix is a strided slice, see w16_rows; c in compute dtype (c16), or the
 * tiled forward's fp32 accumulator, used as it is (never rounded here) */
static void run_gemm_widened(sim_item *it, int c16) {
    OP_BEGIN(it);
    long M = it->i[0], N = it->i[1], K = it->i[2], lda = it->i[3], ldb = it->i[4], ldc = it->i[5], ta = it->i[6],
         tb = it->i[7];
    float *a = w16_rows(&w_, it->p[1], ta ? K : M, ta ? M : K, lda, 0);
    float *b = w16_rows(&w_, it->p[2], tb ? N : K, tb ? K : N, ldb, 0);
    float *c = c16 ? w16_rows(&w_, it->p[0], M, N, ldc, 1) : it->p[0];
    g_cpu->gemm(c, a, b, (int)M, (int)N, (int)K, (int)lda, (int)ldb, (int)ldc, (int)ta, (int)tb, it->f);
    OP_END();
}
static void run_gemm(sim_item *it) { run_gemm_widened(it, 1); }
static void run_gemm_f32(sim_item *it) { run_gemm_widened(it, 0); }
static void run_round_bias(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], OC = it->i[1], ld = it->i[2];
    g_cpu->round_bias(w16_rows(&w_, it->p[0], N, OC, ld, 1), it->p[1], w16(&w_, it->p[2], OC, 0), (int)N, (int)OC,
                      (int)ld);
    OP_END();
}
static void run_add_bias(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], OC = it->i[1], ld = it->i[2];
    g_cpu->add_bias(w16_rows(&w_, it->p[1], N, OC, ld, 1), w16(&w_, it->p[0], OC, 0), (int)N, (int)OC, (int)ld);
    OP_END();
}
static void run_bias_grad(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], OC = it->i[1], ld = it->i[2];
    g_cpu->bias_grad(w16(&w_, it->p[0], OC, 1), w16_rows(&w_, it->p[1], N, OC, ld, 0), (int)N, (int)OC, (int)ld);
    OP_END();
}
static void run_adamw(sim_item *it) {
    zt_dtype dt = (zt_dtype)it->i[8];
    zt_cpu_adamw_g(it->p[0], it->p[1], it->p[2], it->p[3], dt, it->n, &it->step, it->p[4], dt, 0, ZT_ADAM_ISA_BEST);
}
static void run_sumsq(sim_item *it) {
    OP_BEGIN(it);
    it->result = g_cpu->sumsq(w16(&w_, it->p[0], it->n, 0), it->n);
    OP_END();
}

/* the virtual clock's price of an item (sim_clock.h): a GEMM [M,K] x [K,N] added to it */
static void gemm_cost(sim_item *it, zt_dtype dt, double M, double N, double K) {
    it->cost += sim_cost_gemm(dt, M, N, K);
    it->flops += 2.0 * M * N * K;
}
/* causal attention over B sequences of T: QK^T and PV are 4 T^2 C FLOPs per sequence, half of
 * them under the mask; backward is costed at `factor` times forward (flash attention recomputes
 * the scores: 2.5) */
static void attention_cost(sim_item *it, zt_dtype dt, double B, double T, double C, double factor) {
    double flops = factor * 2.0 * B * T * T * C;
    it->cost += sim_cost_attention(dt, flops);
    it->flops += flops;
}

/* The entries. Shapes go to i[], pointers through dev() with the extent the op reads or writes. */
/* fp32 <-> compute dtype: dst_bytes and src_bytes are the extents on each side */
static void q_convert(zt_dtype dt, sim_fn run, const char *op, void *dst, size_t dst_bytes, const void *src,
                      size_t src_bytes, size_t n) {
    sim_item *it = op_item(run, dt, op);
    it->p[0] = dev(dst, dst_bytes, op, "dst");
    it->p[1] = dev(src, src_bytes, op, "src");
    it->n = n;
    it->cost = sim_cost_bytes((double)(dst_bytes + src_bytes));
    enqueue(it);
}

/* The entries take the dtype from the table through a per-dtype thunk (SIM_THUNKS below); they are
 * written once against `dt`. */
static void q_embedding_forward(zt_dtype dt, void *out, const int *tokens, const void *wte, int lo, int hi,
                                const void *wpe, int B, int T, int C) {
    const char *op = "embedding_forward";
    sim_item *it = op_item(run_embedding_forward, dt, "embedding_forward");
    size_t BT = (size_t)B * T;
    it->p[0] = dev(out, E(BT * C), op, "out");
    it->p[1] = dev(tokens, BT * sizeof(int), op, "tokens");
    it->p[2] = dev(wte, E((size_t)(hi - lo) * C), op, "wte");
    it->p[3] = dev(wpe, E((size_t)T * C), op, "wpe");
    it->i[0] = lo, it->i[1] = hi, it->i[2] = B, it->i[3] = T, it->i[4] = C;
    it->cost = sim_cost_bytes(3.0 * E(BT * C));
    enqueue(it);
}
static void q_embedding_backward(zt_dtype dt, void *dwte, int lo, int hi, void *dwpe, const void *dout,
                                 const int *tokens, int B, int T, int C) {
    const char *op = "embedding_backward";
    sim_item *it = op_item(run_embedding_backward, dt, "embedding_backward");
    size_t BT = (size_t)B * T;
    it->p[0] = dev(dwte, E((size_t)(hi - lo) * C), op, "dwte");
    it->p[1] = dev(dwpe, E((size_t)T * C), op, "dwpe");
    it->p[2] = dev(dout, E(BT * C), op, "dout");
    it->p[3] = dev(tokens, BT * sizeof(int), op, "tokens");
    it->i[0] = lo, it->i[1] = hi, it->i[2] = B, it->i[3] = T, it->i[4] = C;
    it->cost = sim_cost_bytes(3.0 * E(BT * C) + (dwpe ? 2.0 * E((size_t)T * C) : 0));
    enqueue(it);
}
static void q_layernorm_forward(zt_dtype dt, void *out, float *mean, float *rstd, const void *inp, const void *w,
                                const void *b, int N, int C) {
    const char *op = "layernorm_forward";
    sim_item *it = op_item(run_layernorm_forward, dt, "layernorm_forward");
    size_t NC = (size_t)N * C;
    it->p[0] = dev(out, E(NC), op, "out");
    it->p[1] = dev(mean, F(N), op, "mean");
    it->p[2] = dev(rstd, F(N), op, "rstd");
    it->p[3] = dev(inp, E(NC), op, "inp");
    it->p[4] = dev(w, E(C), op, "w");
    it->p[5] = dev(b, E(C), op, "b");
    it->i[0] = N, it->i[1] = C;
    it->cost = sim_cost_bytes(2.0 * E(NC));
    enqueue(it);
}
static void q_layernorm_backward(zt_dtype dt, void *dinp, void *dw, void *db, const void *dout, const void *inp,
                                 const void *w, const float *mean, const float *rstd, int N, int C) {
    const char *op = "layernorm_backward";
    sim_item *it = op_item(run_layernorm_backward, dt, "layernorm_backward");
    size_t NC = (size_t)N * C;
    it->p[0] = dev(dinp, E(NC), op, "dinp");
    it->p[1] = dev(dw, E(C), op, "dw");
    it->p[2] = dev(db, E(C), op, "db");
    it->p[3] = dev(dout, E(NC), op, "dout");
    it->p[4] = dev(inp, E(NC), op, "inp");
    it->p[5] = dev(w, E(C), op, "w");
    it->p[6] = dev(mean, F(N), op, "mean");
    it->p[7] = dev(rstd, F(N), op, "rstd");
    it->i[0] = N, it->i[1] = C;
    it->cost = sim_cost_bytes(4.0 * E(NC));
    enqueue(it);
}
static void q_matmul_forward(zt_dtype dt, void *out, const void *inp, const void *w, const void *bias, int N, int C,
                             int OC, int wt, int ld) {
    const char *op = "matmul_forward";
    sim_item *it = op_item(run_matmul_forward, dt, "matmul_forward");
    it->p[0] = dev(out, E(span(N, OC, ld)), op, "out");
    it->p[1] = dev(inp, E((size_t)N * C), op, "inp");
    it->p[2] = dev(w, E((size_t)C * OC), op, "w");
    it->p[3] = dev(bias, E(OC), op, "bias");
    it->i[0] = N, it->i[1] = C, it->i[2] = OC, it->i[3] = wt, it->i[4] = ld;
    gemm_cost(it, dt, N, OC, C);
    enqueue(it);
}
static void q_matmul_backward(zt_dtype dt, void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                              const void *w, int N, int C, int OC, int wt, int ld) {
    const char *op = "matmul_backward";
    sim_item *it = op_item(run_matmul_backward, dt, "matmul_backward");
    it->p[0] = dev(dinp, E((size_t)N * C), op, "dinp");
    it->p[1] = dev(dw, E((size_t)C * OC), op, "dw");
    it->p[2] = dev(dbias, E(OC), op, "dbias");
    it->p[3] = dev(dout, E((size_t)(N - 1) * ld + OC), op, "dout");
    it->p[4] = dev(inp, E((size_t)N * C), op, "inp");
    it->p[5] = dev(w, E((size_t)C * OC), op, "w");
    it->i[0] = N, it->i[1] = C, it->i[2] = OC, it->i[3] = wt, it->i[4] = ld;
    if (dinp) gemm_cost(it, dt, N, C, OC);
    gemm_cost(it, dt, C, OC, N);
    if (dbias) it->cost += sim_cost_bytes(E((size_t)N * OC));
    enqueue(it);
}
static void q_matmul_forward_gelu(zt_dtype dt, void *out, void *pre, const void *inp, const void *w, const void *bias,
                                  int N, int C, int OC) {
    const char *op = "matmul_forward_gelu";
    sim_item *it = op_item(run_matmul_forward_gelu, dt, "matmul_forward_gelu");
    it->p[0] = dev(out, E((size_t)N * OC), op, "out");
    it->p[1] = dev(pre, E((size_t)N * OC), op, "pre");
    it->p[2] = dev(inp, E((size_t)N * C), op, "inp");
    it->p[3] = dev(w, E((size_t)C * OC), op, "w");
    it->p[4] = dev(bias, E(OC), op, "bias");
    it->i[0] = N, it->i[1] = C, it->i[2] = OC;
    gemm_cost(it, dt, N, OC, C);
    it->cost += sim_cost_bytes(E((size_t)N * OC)); /* the epilogue writes pre as well */
    enqueue(it);
}
static void q_matmul_backward_dgelu(zt_dtype dt, void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                                    const void *w, const void *gelu_pre, int N, int C, int OC) {
    const char *op = "matmul_backward_dgelu";
    sim_item *it = op_item(run_matmul_backward_dgelu, dt, "matmul_backward_dgelu");
    it->p[0] = dev(dinp, E((size_t)N * C), op, "dinp");
    it->p[1] = dev(dw, E((size_t)C * OC), op, "dw");
    it->p[2] = dev(dbias, E(OC), op, "dbias");
    it->p[3] = dev(dout, E((size_t)N * OC), op, "dout");
    it->p[4] = dev(inp, E((size_t)N * C), op, "inp");
    it->p[5] = dev(w, E((size_t)C * OC), op, "w");
    it->p[6] = dev(gelu_pre, E((size_t)N * C), op, "gelu_pre");
    it->i[0] = N, it->i[1] = C, it->i[2] = OC;
    gemm_cost(it, dt, N, C, OC);
    gemm_cost(it, dt, C, OC, N);
    it->cost += sim_cost_bytes(2.0 * E((size_t)N * C) + (dbias ? E((size_t)N * OC) : 0));
    enqueue(it);
}
static void q_attention_forward(zt_dtype dt, void *out, void *att, const void *qkv, int B, int T, int C, int NH) {
    const char *op = "attention_forward";
    sim_item *it = op_item(run_attention_forward, dt, "attention_forward");
    it->p[0] = dev(out, E((size_t)B * T * C), op, "out");
    it->p[1] = dev(att, E((size_t)B * NH * T * T), op, "att");
    it->p[2] = dev(qkv, E((size_t)B * T * 3 * C), op, "qkv");
    it->i[0] = B, it->i[1] = T, it->i[2] = C, it->i[3] = NH;
    attention_cost(it, dt, B, T, C, 1.0);
    enqueue(it);
}
static void q_attention_backward(zt_dtype dt, void *dqkv, void *datt, const void *dout, const void *qkv,
                                 const void *att, int B, int T, int C, int NH) {
    const char *op = "attention_backward";
    sim_item *it = op_item(run_attention_backward, dt, "attention_backward");
    it->p[0] = dev(dqkv, E((size_t)B * T * 3 * C), op, "dqkv");
    it->p[1] = dev(datt, E((size_t)B * NH * T * T), op, "datt");
    it->p[2] = dev(dout, E((size_t)B * T * C), op, "dout");
    it->p[3] = dev(qkv, E((size_t)B * T * 3 * C), op, "qkv");
    it->p[4] = dev(att, E((size_t)B * NH * T * T), op, "att");
    it->i[0] = B, it->i[1] = T, it->i[2] = C, it->i[3] = NH;
    attention_cost(it, dt, B, T, C, 2.5);
    enqueue(it);
}
/* pointwise ops over n elements with up to three tensors */
static void q_pointwise(zt_dtype dt, sim_fn run, const char *op, const void *a, const void *b, const void *c, size_t n,
                        float f) {
    sim_item *it = op_item(run, dt, op);
    it->p[0] = dev(a, E(n), op, "arg 1");
    it->p[1] = dev(b, E(n), op, "arg 2");
    it->p[2] = dev(c, E(n), op, "arg 3");
    it->n = n;
    it->f = f;
    it->cost = sim_cost_bytes((double)E(n) * ((a != NULL) + (b != NULL) + (c != NULL) + 1));
    enqueue(it);
}
static void q_softmax_xent(zt_dtype dt, float *losses, void *dlogits, const void *logits, const int *targets, int N,
                           int V, int Vp, float dloss) {
    const char *op = "softmax_xent";
    sim_item *it = op_item(run_softmax_xent, dt, "softmax_xent");
    it->p[0] = dev(losses, F(N), op, "losses");
    it->p[1] = dev(dlogits, E((size_t)N * Vp), op, "dlogits");
    it->p[2] = dev(logits, E((size_t)N * Vp), op, "logits");
    it->p[3] = dev(targets, (size_t)N * sizeof(int), op, "targets");
    it->i[0] = N, it->i[1] = V, it->i[2] = Vp;
    it->f = dloss;
    it->cost = sim_cost_bytes(2.0 * E((size_t)N * Vp));
    enqueue(it);
}
static void q_xent_partial(zt_dtype dt, float *stats, const void *logits, const int *targets, int N, int Vl, int Vp,
                           int vocab_lo) {
    const char *op = "xent_partial";
    sim_item *it = op_item(run_xent_partial, dt, "xent_partial");
    it->p[0] = dev(stats, F(3 * (size_t)N), op, "stats");
    it->p[1] = dev(logits, E((size_t)N * Vp), op, "logits");
    it->p[2] = dev(targets, (size_t)N * sizeof(int), op, "targets");
    it->i[0] = N, it->i[1] = Vl, it->i[2] = Vp, it->i[3] = vocab_lo;
    it->cost = sim_cost_bytes((double)E((size_t)N * Vp));
    enqueue(it);
}
static void q_xent_parallel(zt_dtype dt, float *losses, void *dlogits, const void *logits, const int *targets,
                            const float *stats_all, int tp, int N, int Vl, int Vp, int vocab_lo, float dloss) {
    const char *op = "xent_parallel";
    sim_item *it = op_item(run_xent_parallel, dt, "xent_parallel");
    it->p[0] = dev(losses, F(N), op, "losses");
    it->p[1] = dev(dlogits, E((size_t)N * Vp), op, "dlogits");
    it->p[2] = dev(logits, E((size_t)N * Vp), op, "logits");
    it->p[3] = dev(targets, (size_t)N * sizeof(int), op, "targets");
    it->p[4] = dev(stats_all, F(3 * (size_t)tp * N), op, "stats_all");
    it->i[0] = tp, it->i[1] = N, it->i[2] = Vl, it->i[3] = Vp, it->i[4] = vocab_lo;
    it->f = dloss;
    it->cost = sim_cost_bytes(2.0 * E((size_t)N * Vp));
    enqueue(it);
}
/* gemm and gemm_f32: C = op(A) op(B) (+ beta C), C in compute dtype or fp32 (c_elem bytes) */
static void q_gemm_into(sim_fn run, const char *op, zt_dtype dt, void *c, size_t c_elem, const void *a, const void *b,
                        int M, int N, int K, int lda, int ldb, int ldc, int ta, int tb, float beta) {
    sim_item *it = op_item(run, dt, op);
    it->p[0] = dev(c, c_elem * span(M, N, ldc), op, "c");
    it->p[1] = dev(a, E(ta ? span(K, M, lda) : span(M, K, lda)), op, "a");
    it->p[2] = dev(b, E(tb ? span(N, K, ldb) : span(K, N, ldb)), op, "b");
    it->i[0] = M, it->i[1] = N, it->i[2] = K, it->i[3] = lda, it->i[4] = ldb, it->i[5] = ldc, it->i[6] = ta,
    it->i[7] = tb;
    it->f = beta;
    gemm_cost(it, dt, M, N, K);
    enqueue(it);
}
static void q_gemm(zt_dtype dt, void *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc,
                   int ta, int tb, float beta) {
    q_gemm_into(run_gemm, "gemm", dt, c, zt_dtype_size(dt), a, b, M, N, K, lda, ldb, ldc, ta, tb, beta);
}
static void q_gemm_f32(zt_dtype dt, float *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb,
                       int ldc, int ta, int tb, float beta) {
    q_gemm_into(run_gemm_f32, "gemm_f32", dt, c, sizeof(float), a, b, M, N, K, lda, ldb, ldc, ta, tb, beta);
}
static void q_round_bias(zt_dtype dt, void *out, const float *acc, const void *bias, int N, int OC, int ld) {
    const char *op = "round_bias";
    sim_item *it = op_item(run_round_bias, dt, op);
    it->p[0] = dev(out, E(span(N, OC, ld)), op, "out");
    it->p[1] = dev(acc, F((size_t)N * OC), op, "acc");
    it->p[2] = dev(bias, E(OC), op, "bias");
    it->i[0] = N, it->i[1] = OC, it->i[2] = ld;
    it->cost = sim_cost_bytes((double)N * OC * 4.0 + E(span(N, OC, ld))); /* the fp32 sums in, the output out */
    enqueue(it);
}
/* add_bias and bias_grad: the same shapes, a bias [OC] (p[0]) and a strided [N, OC] slice (p[1]) */
static void q_bias(zt_dtype dt, sim_fn run, const char *op, const void *bias, const void *rows, int N, int OC, int ld,
                   const char *bias_arg, const char *rows_arg) {
    sim_item *it = op_item(run, dt, op);
    it->p[0] = dev(bias, E(OC), op, bias_arg);
    it->p[1] = dev(rows, E(span(N, OC, ld)), op, rows_arg);
    it->i[0] = N, it->i[1] = OC, it->i[2] = ld;
    it->cost = sim_cost_bytes(2.0 * E(span(N, OC, ld)));
    enqueue(it);
}
static void q_adamw(zt_dtype dt, float *master, float *m, float *v, const void *grad, void *params_out, size_t n,
                    const zt_adam_step *step) {
    const char *op = "adamw";
    sim_item *it = op_item(run_adamw, dt, "adamw");
    it->p[0] = dev(master, F(n), op, "master");
    it->p[1] = dev(m, F(n), op, "m");
    it->p[2] = dev(v, F(n), op, "v");
    it->p[3] = dev(grad, E(n), op, "grad");
    it->p[4] = dev(params_out, E(n), op, "params_out");
    it->n = n;
    it->step = *step;
    it->cost = sim_cost_bytes((double)n * (24 + 2 * zt_dtype_size(dt))); /* read and write master, m, v; grad in, params out */
    enqueue(it);
}
static double q_sumsq(zt_dtype dt, const void *x, size_t n) {
    sim_item *it = op_item(run_sumsq, dt, "sumsq");
    it->p[0] = dev(x, E(n), "sumsq", "x");
    it->n = n;
    it->cost = sim_cost_bytes((double)E(n));
    run_and_wait(&g_lane[LANE_COMPUTE], it); /* returns a host value: waits for the stream, as the CUDA sumsq */
    double r = it->result;
    free(it);
    return r;
}

/* per-dtype thunks: the table entries have no dtype argument */
#define SIM_THUNKS(SFX, DTYPE)                                                                                         \
    static void to_compute_##SFX(void *d, const float *s, size_t n) {                                                  \
        q_convert(DTYPE, run_to_compute, "to_compute", d, n * zt_dtype_size(DTYPE), s, n * sizeof(float), n);          \
    }                                                                                                                  \
    static void to_f32_##SFX(float *d, const void *s, size_t n) {                                                      \
        q_convert(DTYPE, run_to_f32, "to_f32", d, n * sizeof(float), s, n * zt_dtype_size(DTYPE), n);                  \
    }                                                                                                                  \
    static void embedding_forward_##SFX(void *o, const int *t, const void *w, int lo, int hi, const void *p, int B,    \
                                        int T, int C) { q_embedding_forward(DTYPE, o, t, w, lo, hi, p, B, T, C); }    \
    static void embedding_backward_##SFX(void *dw, int lo, int hi, void *dp, const void *d, const int *t, int B,       \
                                         int T, int C) { q_embedding_backward(DTYPE, dw, lo, hi, dp, d, t, B, T, C); } \
    static void layernorm_forward_##SFX(void *o, float *m, float *r, const void *i, const void *w, const void *b,      \
                                        int N, int C) { q_layernorm_forward(DTYPE, o, m, r, i, w, b, N, C); }         \
    static void layernorm_backward_##SFX(void *di, void *dw, void *db, const void *d, const void *i, const void *w,    \
                                         const float *m, const float *r, int N, int C) {                              \
        q_layernorm_backward(DTYPE, di, dw, db, d, i, w, m, r, N, C);                                                  \
    }                                                                                                                  \
    static void matmul_forward_##SFX(void *o, const void *i, const void *w, const void *b, int N, int C, int OC,       \
                                     int wt, int ld) { q_matmul_forward(DTYPE, o, i, w, b, N, C, OC, wt, ld); }       \
    static void matmul_backward_##SFX(void *di, void *dw, void *db, const void *d, const void *i, const void *w,       \
                                      int N, int C, int OC, int wt, int ld) {                                         \
        q_matmul_backward(DTYPE, di, dw, db, d, i, w, N, C, OC, wt, ld);                                               \
    }                                                                                                                  \
    static void matmul_forward_gelu_##SFX(void *o, void *p, const void *i, const void *w, const void *b, int N, int C, \
                                          int OC) { q_matmul_forward_gelu(DTYPE, o, p, i, w, b, N, C, OC); }          \
    static void matmul_backward_dgelu_##SFX(void *di, void *dw, void *db, const void *d, const void *i, const void *w, \
                                            const void *g, int N, int C, int OC) {                                    \
        q_matmul_backward_dgelu(DTYPE, di, dw, db, d, i, w, g, N, C, OC);                                              \
    }                                                                                                                  \
    static void attention_forward_##SFX(void *o, void *a, const void *q, int B, int T, int C, int NH) {                \
        q_attention_forward(DTYPE, o, a, q, B, T, C, NH);                                                              \
    }                                                                                                                  \
    static void attention_backward_##SFX(void *dq, void *da, const void *d, const void *q, const void *a, int B,       \
                                         int T, int C, int NH) { q_attention_backward(DTYPE, dq, da, d, q, a, B, T, C, NH); } \
    static void gelu_forward_##SFX(void *o, const void *i, size_t n) {                                                 \
        q_pointwise(DTYPE, run_gelu_forward, "gelu_forward", o, i, NULL, n, 0);                                        \
    }                                                                                                                  \
    static void gelu_backward_##SFX(void *di, const void *i, const void *d, size_t n) {                                \
        q_pointwise(DTYPE, run_gelu_backward, "gelu_backward", di, i, d, n, 0);                                        \
    }                                                                                                                  \
    static void residual_forward_##SFX(void *o, const void *a, const void *b, size_t n) {                              \
        q_pointwise(DTYPE, run_residual_forward, "residual_forward", o, a, b, n, 0);                                   \
    }                                                                                                                  \
    static void accumulate_##SFX(void *d, const void *s, size_t n) {                                                   \
        q_pointwise(DTYPE, run_accumulate, "accumulate", d, s, NULL, n, 0);                                            \
    }                                                                                                                  \
    static void scale_##SFX(void *x, float s, size_t n) { q_pointwise(DTYPE, run_scale, "scale", x, NULL, NULL, n, s); } \
    static void softmax_xent_##SFX(float *l, void *dl, const void *lg, const int *t, int N, int V, int Vp, float d) {  \
        q_softmax_xent(DTYPE, l, dl, lg, t, N, V, Vp, d);                                                              \
    }                                                                                                                  \
    static void xent_partial_##SFX(float *st, const void *lg, const int *t, int N, int Vl, int Vp, int lo) {          \
        q_xent_partial(DTYPE, st, lg, t, N, Vl, Vp, lo);                                                               \
    }                                                                                                                  \
    static void xent_parallel_##SFX(float *l, void *dl, const void *lg, const int *t, const float *st, int tp, int N,  \
                                    int Vl, int Vp, int lo, float d) {                                                \
        q_xent_parallel(DTYPE, l, dl, lg, t, st, tp, N, Vl, Vp, lo, d);                                                \
    }                                                                                                                  \
    static void adamw_##SFX(float *p, float *m, float *v, const void *g, void *o, size_t n, const zt_adam_step *s) {   \
        q_adamw(DTYPE, p, m, v, g, o, n, s);                                                                           \
    }                                                                                                                  \
    static void gemm_##SFX(void *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc,     \
                           int ta, int tb, float beta) { q_gemm(DTYPE, c, a, b, M, N, K, lda, ldb, ldc, ta, tb, beta); } \
    static void add_bias_##SFX(void *o, const void *b, int N, int OC, int ld) {                                        \
        q_bias(DTYPE, run_add_bias, "add_bias", b, o, N, OC, ld, "bias", "out");                                       \
    }                                                                                                                  \
    static void bias_grad_##SFX(void *db, const void *d, int N, int OC, int ld) {                                      \
        q_bias(DTYPE, run_bias_grad, "bias_grad", db, d, N, OC, ld, "dbias", "dout");                                  \
    }                                                                                                                  \
    static void gemm_f32_##SFX(float *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc, \
                               int ta, int tb, float beta) {                                                         \
        q_gemm_f32(DTYPE, c, a, b, M, N, K, lda, ldb, ldc, ta, tb, beta);                                              \
    }                                                                                                                  \
    static void round_bias_##SFX(void *o, const float *acc, const void *b, int N, int OC, int ld) {                    \
        q_round_bias(DTYPE, o, acc, b, N, OC, ld);                                                                     \
    }                                                                                                                  \
    static double sumsq_##SFX(const void *x, size_t n) { return q_sumsq(DTYPE, x, n); }                                \
    static zt_backend sim_##SFX = { /* device, device_count: set by zt_backend_sim */                                \
        .name = "sim", .compute_dtype = DTYPE, .memory_is_host = 0,                                                    \
        .alloc = sim_alloc, .free = sim_free, .host_alloc = sim_host_alloc, .host_free = sim_host_free,                \
        .memset_zero = sim_memset_zero, .copy = sim_copy, .copy_async = sim_copy_async,                                 \
        .copy_ahead = sim_copy_ahead, .wait_ahead = sim_wait_ahead,                                                    \
        .transfer = sim_transfer, .synchronize = sim_synchronize, .bind_thread = sim_bind_thread,                      \
        .mem_info = sim_mem_info, .to_compute = to_compute_##SFX, .to_f32 = to_f32_##SFX,                              \
        .embedding_forward = embedding_forward_##SFX, .embedding_backward = embedding_backward_##SFX,                  \
        .layernorm_forward = layernorm_forward_##SFX, .layernorm_backward = layernorm_backward_##SFX,                  \
        .matmul_forward = matmul_forward_##SFX, .matmul_backward = matmul_backward_##SFX,                              \
        .matmul_forward_gelu = matmul_forward_gelu_##SFX, .matmul_backward_dgelu = matmul_backward_dgelu_##SFX,        \
        .attention_forward = attention_forward_##SFX, .attention_backward = attention_backward_##SFX,                  \
        .gelu_forward = gelu_forward_##SFX, .gelu_backward = gelu_backward_##SFX,                                      \
        .residual_forward = residual_forward_##SFX, .accumulate = accumulate_##SFX,                                    \
        .softmax_xent = softmax_xent_##SFX, .xent_partial = xent_partial_##SFX, .xent_parallel = xent_parallel_##SFX,  \
        .gemm = gemm_##SFX, .add_bias = add_bias_##SFX, .bias_grad = bias_grad_##SFX,                                  \
        .gemm_f32 = gemm_f32_##SFX, .round_bias = round_bias_##SFX,                                                    \
        .adamw = adamw_##SFX, .sumsq = sumsq_##SFX, .scale = scale_##SFX,                                              \
    };
SIM_THUNKS(bf16, ZT_BF16)
SIM_THUNKS(f16, ZT_F16)

/* ------------------------------------------------------------------ start */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const char *g_why;
static char g_why_buf[256];

/* Which of the machine's ZEROTRAIN_SIM_DEVICES simulated GPUs (default 1) this process opens: the
 * node-local rank modulo the count, as the CUDA backend picks its GPU, so that a run with a device per
 * rank checks that the ranks of a machine open distinct devices with no launcher variable set (the
 * session refuses two on one: comm.h, zt_comm_check_devices). Each process's device is its own arena
 * whatever the number; the number only says which one it is. */
static int g_device, g_device_count;

static void sim_start(void) {
    const char *ndev = getenv("ZEROTRAIN_SIM_DEVICES");
    g_device_count = ndev && *ndev ? atoi(ndev) : 1;
    if (g_device_count < 1 || g_device_count > 64) {
        snprintf(g_why_buf, sizeof g_why_buf, "ZEROTRAIN_SIM_DEVICES: expected 1 to 64, got '%.32s'", ndev);
        g_why = g_why_buf;
        return;
    }
    g_device = zt_node_local_rank() % g_device_count;
    double cap = 8.0 * 1073741824.0;
    zt_err err;
    if (zt_sim_clock_start(&err)) {
        snprintf(g_why_buf, sizeof g_why_buf, "ZEROTRAIN_SIM_PROFILE: %.200s", err.msg);
        g_why = g_why_buf;
        return;
    }
    const char *dry = getenv("ZEROTRAIN_SIM_DRY");
    g_dry = dry && *dry && strcmp(dry, "0") != 0;
    /* timed: the device has the profile's memory, unless ZEROTRAIN_SIM_MEM says otherwise */
    if (zt_sim_profile()) cap = zt_sim_profile()->dev_memory;
    const char *mem = getenv("ZEROTRAIN_SIM_MEM");
    if (mem && *mem && (zt_parse_bytes(mem, &cap) || cap < 1048576.0 || cap > 1099511627776.0)) {
        snprintf(g_why_buf, sizeof g_why_buf, "ZEROTRAIN_SIM_MEM: expected a size from 1MiB to 1TiB, got '%.64s'", mem);
        g_why = g_why_buf;
        return;
    }
    size_t sz = (size_t)cap / SIM_ALIGN * SIM_ALIGN;
    char *arena = mmap(NULL, sz, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    char *shadow = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (arena == MAP_FAILED || shadow == MAP_FAILED) {
        snprintf(g_why_buf, sizeof g_why_buf, "cannot reserve %zu bytes of address space for the simulated device", sz);
        g_why = g_why_buf;
        return;
    }
    g_mem.cap = sz;
    g_mem.nmax = 64;
    g_mem.blocks = zt_xcalloc((size_t)g_mem.nmax, sizeof *g_mem.blocks);
    g_mem.blocks[0] = (sim_block){0, sz, 0};
    g_mem.n = 1;
    g_mem.shadow = shadow;
    g_mem.arena = arena; /* last: in_arena() is false until the arena is complete */

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);

    g_cpu = zt_backend_cpu();
    const char *jit = getenv("ZEROTRAIN_SIM_JITTER");
    unsigned long long seed = jit && *jit ? strtoull(jit, NULL, 10) : 0;
    static const unsigned max_delay_us[N_LANES] = {200, 100, 100, 400}; /* copy_ahead's lane the slowest: it must be waited for */
    for (int i = 0; i < N_LANES; i++) {
        sim_lane *l = &g_lane[i];
        pthread_mutex_init(&l->lock, NULL);
        pthread_cond_init(&l->wake, NULL);
        pthread_cond_init(&l->idle, NULL);
        l->jitter_us = seed ? max_delay_us[i] : 0;
        l->index = i;
        l->end = zt_xcalloc(SIM_ENDS, sizeof *l->end);
        zt_rng_seed(&l->rng, seed * 3 + (unsigned long long)i);
        pthread_create(&l->thread, NULL, lane_main, l);
        pthread_detach(l->thread);
    }
}

const zt_backend *zt_backend_sim(zt_dtype dtype, const char **why) {
    pthread_once(&g_once, sim_start);
    t_bound = 1; /* the thread that asks for the device uses it, as zt_backend_cuda's caller does */
    if (why) *why = g_why;
    if (g_why) return NULL;
    sim_bf16.device = sim_f16.device = g_device;
    sim_bf16.device_count = sim_f16.device_count = g_device_count;
    return dtype == ZT_F16 ? &sim_f16 : &sim_bf16;
}
