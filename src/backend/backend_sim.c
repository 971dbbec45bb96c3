/* backend_sim.c — the simulated GPU (`device: sim`): a test device that fills the backend table on
 * the CPU but behaves like a discrete GPU wherever the engine could tell the difference, so that
 * every path the CUDA backend takes (device buffers, 16-bit compute, copy lanes, overlap_step,
 * parameter offload feeding gather buffers, the device comm) runs — and breaks loudly — in
 * `make test` on machines without a GPU. It is not a performance device. This file is the device:
 * its memory space, lanes, copies and start; the ops, and zt_backend_sim that hands out their
 * table, are backend_sim_ops.c's, written on this file and not called by it (sim_internal.h joins
 * the two).
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
 *   - 16-bit compute (backend_sim_ops.c): tensors in compute dtype are bf16 or fp16 in memory;
 *     each op widens its inputs to fp32, runs the CPU backend's fp32 op (the math), and rounds its
 *     outputs to nearest-even, as the CUDA kernels keep 16-bit storage and compute in fp32. fp32
 *     tensors (master weights, Adam moments, LayerNorm statistics, losses) stay fp32.
 *   - Asynchrony, as backend.h's contract says: ops, memset and D2D copies run in order on a compute
 *     thread ("the stream"); transfer() runs on one thread per direction; copy_ahead() on one more,
 *     after the stream's work so far, and the stream's work after wait_ahead() waits for it; copy()
 *     H2D/D2H and sumsq wait for the stream; synchronize() waits for the stream and copy_ahead's lane. ZEROTRAIN_SIM_JITTER=SEED adds
 *     seeded random delays before every item on every lane, widening every window: a missing
 *     synchronize shows up as a wrong loss.
 *     ZEROTRAIN_SIM_LATE_REPORTS=1 hands the trace's observer each item after the fact, at the next
 *     synchronize (backend.h's zt_device_defer), the path the CUDA backend's event timing takes.
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
 *     ZEROTRAIN_SIM_OP_TIMES=FILE (with a profile, not dry) writes each item's real time beside its
 *     price (sim_clock.h), to find what the virtual clock underprices.
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
#include "backend/sim_clock.h"
#include "backend/sim_internal.h"
#include "util/clock.h"
#include "util/test_hooks.h"
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

/* ZEROTRAIN_SIM_OP_TIMES: the lane thread's CPU time in widening and in rounding operands (the ops
 * add to it, backend_sim_ops.c), taken by the lane loop for the op table */
static __thread double t_widen_cpu, t_round_cpu;
double sim_thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
void sim_operand_cpu_add(double widen, double round) { t_widen_cpu += widen, t_round_cpu += round; }
void sim_operand_cpu_take(double *widen, double *round) {
    *widen = t_widen_cpu, *round = t_round_cpu;
    t_widen_cpu = t_round_cpu = 0;
}

/* Threads other than the one that made the device call bind_thread before using the table, as on
 * CUDA (where they would otherwise make a context on GPU 0): the sim stops the run where one forgets. */
static __thread int t_bound;
void sim_bind_thread(void) { t_bound = 1; }
static void check_bound(const char *op) {
    if (!t_bound) sim_fatal("%s: called from a thread that did not call bind_thread first", op);
}

/* The shadow address of [p, p + bytes) for op `op`'s argument `arg`, after checking that the range
 * lies inside one live allocation; NULL stays NULL. Runs on the caller's thread, so a bad pointer
 * stops the run with the caller's stack. */
void *sim_dev(const void *p, size_t bytes, const char *op, const char *arg) {
    check_bound(op);
    if (!p) return NULL;
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
    double idle_from; /* real time its last item ended (ZEROTRAIN_SIM_OP_TIMES) */
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
static int g_late_reports; /* ZEROTRAIN_SIM_LATE_REPORTS: items reported at synchronize, as the CUDA backend does */
static void report_item(const zt_device_observer *obs, int lane, const sim_item *it, double t0, double t1) {
    zt_device_item d = {.t0 = t0, .t1 = t1};
    if (it->run == run_copy && it->i[9] != ZT_D2D) d.is_copy = 1, d.kind = (zt_copy_kind)it->i[9], d.bytes = it->n, d.stream = lane;
    else if (it->run != run_copy && (lane != LANE_COMPUTE || it->run == run_wait_lane)) return;
    if (g_late_reports) zt_device_defer(&d);
    else zt_device_report(obs, &d);
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
        int timed = !g_dry && sim_clock_op_times_on();
        double w0 = obs || timed ? zt_now() : 0, c0 = timed ? sim_thread_cpu() : 0;
        sim_op_sample sample = {.cost = it->cost, .operand_cost = it->operand_cost, .flops = it->flops,
                                .widened = it->widened, .rounded = it->rounded};
        if (timed) sim_operand_cpu_take(&sample.widen_cpu, &sample.round_cpu);
        if (!g_dry || it->must_run) it->run(it);
        if (timed) {
            sample.wall = zt_now() - w0, sample.cpu = sim_thread_cpu() - c0;
            sim_operand_cpu_take(&sample.widen_cpu, &sample.round_cpu);
            sim_clock_op_measured(l->index, it->name ? it->name : "wait", &sample);
        }
        if (timed) l->idle_from = zt_now();
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
    it->cost += it->operand_cost;
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

sim_item *sim_item_new(sim_fn run) {
    sim_item *it = zt_xcalloc(1, sizeof *it);
    it->run = run;
    return it;
}
void sim_enqueue(sim_item *it) {
    static int launch_blocking = -1; /* a test hook, read once (a race reads the same value twice) */
    if (launch_blocking < 0) launch_blocking = zt_test_hook_launch_blocking();
    unsigned long long ticket = submit(&g_lane[LANE_COMPUTE], it);
    if (launch_blocking) sim_clock_host_waited(wait_ticket(&g_lane[LANE_COMPUTE], ticket));
}
void sim_stream_run_and_wait(sim_item *it) { run_and_wait(&g_lane[LANE_COMPUTE], it); }

/* ------------------------------------------------------------------ memory entries */

void *sim_alloc(size_t bytes) {
    check_bound("alloc");
    return sim_alloc_bytes(bytes);
}
void sim_free(void *p) {
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

void *sim_host_alloc(size_t bytes) {
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
void sim_host_free(void *p) {
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
void sim_memset_zero(void *p, size_t bytes) {
    if (!bytes) return;
    sim_item *it = sim_item_new(run_memset);
    it->p[0] = sim_dev(p, bytes, "memset_zero", "ptr");
    it->name = "memset";
    it->n = bytes;
    it->cost = sim_cost_bytes((double)bytes);
    sim_enqueue(it);
}

static void run_copy(sim_item *it) { memmove(it->p[0], it->p[1], it->n); }
/* the copy's item; `async`: copy_async, copy_ahead and transfer, whose host end must be pinned */
static sim_item *copy_item(void *dst, const void *src, size_t bytes, zt_copy_kind kind, const char *op, int async) {
    check_bound(op);
    sim_item *it = sim_item_new(run_copy);
    it->p[0] = kind == ZT_D2H ? host(dst, op, "dst") : sim_dev(dst, bytes, op, "dst");
    it->p[1] = kind == ZT_H2D ? host(src, op, "src") : sim_dev(src, bytes, op, "src");
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
void sim_copy(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (!bytes) return;
    sim_item *it = copy_item(dst, src, bytes, kind, "copy", 0);
    if (kind == ZT_D2D) { sim_enqueue(it); return; }
    run_and_wait(&g_lane[LANE_COMPUTE], it); /* host memory: returns once it may be reused or read */
    free(it);
}
void sim_copy_async(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (bytes) sim_enqueue(copy_item(dst, src, bytes, kind, "copy_async", 1)); /* touches the host buffer when it runs */
}
/* an item that holds its lane until the other lane has done what was queued on it before: one stream
 * waiting on an event recorded on another */
static void run_wait_lane(sim_item *it) { it->dep = wait_ticket(it->p[0], (unsigned long long)it->i[0]); }
static void lane_waits_for_ticket(sim_lane *waiter, sim_lane *on, unsigned long long ticket) {
    sim_item *it = sim_item_new(run_wait_lane);
    it->must_run = 1;
    it->p[0] = on;
    it->i[0] = (long)ticket;
    submit(waiter, it);
}
static void lane_waits_for(sim_lane *waiter, sim_lane *on) {
    pthread_mutex_lock(&on->lock);
    unsigned long long ticket = on->queued;
    pthread_mutex_unlock(&on->lock);
    lane_waits_for_ticket(waiter, on, ticket);
}
void sim_copy_ahead(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (!bytes) return;
    sim_item *it = copy_item(dst, src, bytes, kind, "copy_ahead", 1);
    lane_waits_for(&g_lane[LANE_AHEAD], &g_lane[LANE_COMPUTE]);
    submit(&g_lane[LANE_AHEAD], it);
}
void sim_wait_ahead(void) {
    check_bound("wait_ahead");
    lane_waits_for(&g_lane[LANE_COMPUTE], &g_lane[LANE_AHEAD]);
}
/* the comm lane (sim_clock.h): a collective's cost, after the compute lane's work */
static void run_nothing(sim_item *it) { (void)it; }
unsigned long long zt_sim_comm_issue(double cost, const char *name) {
    lane_waits_for(&g_lane[ZT_SIM_COMM], &g_lane[LANE_COMPUTE]);
    sim_item *it = sim_item_new(run_nothing);
    it->cost = cost;
    it->name = name;
    return submit(&g_lane[ZT_SIM_COMM], it);
}
void zt_sim_comm_wait(unsigned long long ticket) { lane_waits_for_ticket(&g_lane[LANE_COMPUTE], &g_lane[ZT_SIM_COMM], ticket); }
void sim_transfer(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (!bytes) return;
    sim_item *it = copy_item(dst, src, bytes, kind, "transfer", 1);
    /* not ordered after the stream's work: that is the caller's synchronize() */
    run_and_wait(&g_lane[kind == ZT_H2D ? LANE_H2D : kind == ZT_D2H ? LANE_D2H : LANE_COMPUTE], it);
    free(it);
}
/* a mark is the compute lane's ticket of its last item queued; waiting for it is waiting for that
 * ticket, as a host thread does on a CUDA event (the thread's clock moves to the item's end) */
unsigned long long sim_mark(void) {
    check_bound("mark");
    sim_lane *l = &g_lane[LANE_COMPUTE];
    pthread_mutex_lock(&l->lock);
    unsigned long long ticket = l->queued;
    pthread_mutex_unlock(&l->lock);
    return ticket;
}
void sim_wait_mark(unsigned long long mark) {
    check_bound("wait_mark");
    sim_clock_host_waited(wait_ticket(&g_lane[LANE_COMPUTE], mark));
}
/* the stream and copy_ahead's lane, as backend.h says (wait_ahead orders device work only) */
void sim_synchronize(void) {
    check_bound("synchronize");
    lane_sync(&g_lane[LANE_COMPUTE]);
    lane_sync(&g_lane[LANE_AHEAD]);
    if (g_late_reports) zt_device_report_deferred();
}
void sim_mem_info(size_t *free_bytes, size_t *total_bytes) {
    check_bound("mem_info");
    pthread_mutex_lock(&g_mem.lock);
    *free_bytes = g_mem.cap - g_mem.used;
    *total_bytes = g_mem.cap;
    pthread_mutex_unlock(&g_mem.lock);
}

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
    const char *late = getenv("ZEROTRAIN_SIM_LATE_REPORTS");
    g_late_reports = late && *late && strcmp(late, "0") != 0;
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

const char *sim_device_open(int *device, int *device_count) {
    pthread_once(&g_once, sim_start);
    t_bound = 1; /* the thread that asks for the device uses it, as zt_backend_cuda's caller does */
    *device = g_device, *device_count = g_device_count;
    return g_why;
}
