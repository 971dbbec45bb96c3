/* clock.h — the clock a run's schedule is measured on: step times, the engine's timing breakdown,
 * the trace and ratio auto's speed measurements all read zt_clock_now(). It is the monotonic wall
 * clock, unless a timed device installs a virtual one (the simulated GPU under a hardware profile,
 * backend/sim_clock.c), where each thread keeps its own time and the costs come from the profile.
 *
 * What the virtual clock needs from the code it times, and the wall clock ignores:
 *   - a handoff between host threads carries a time: the thread that publishes progress (a chunk
 *     done, a thread started) takes zt_clock_now() and hands it over with the data; the thread that
 *     waited for it calls zt_clock_after(t), so its time is the later of its own and t;
 *   - host work that the device does not see (CPU Adam, a cast or copy in host memory) is declared
 *     with zt_clock_host_work, which advances the calling thread by what the profile says it costs
 *     (on the wall clock the work itself took the time);
 *   - a request to a device with a queue of its own (the NVMe drive) is declared with
 *     zt_clock_queue when it is issued, which returns when it will complete; the thread that waits
 *     for it passes that to zt_clock_after.
 * Timeouts (the watchdog, MPI start-up) stay on zt_now(): they are about the real process. */
#ifndef ZT_CLOCK_H
#define ZT_CLOCK_H

#include <stddef.h>

/* host work kinds for zt_clock_host_work */
enum {
    ZT_WORK_ADAM,       /* CPU AdamW: amount = elements, bytes = bytes moved through host memory */
    ZT_WORK_COPY,       /* a memcpy or cast in host memory: bytes = read + write */
    ZT_WORK_NKIND
};
/* queues for zt_clock_queue: one lane each, requests in issue order */
enum { ZT_QUEUE_NVME_READ, ZT_QUEUE_NVME_WRITE, ZT_QUEUE_NKIND };

typedef struct zt_clock_ops {
    double (*now)(void);
    void (*after)(double t);
    void (*host_work)(int kind, double amount, double bytes, int threads);
    double (*queue)(int queue, double bytes);
    int costs_only; /* the work is costed, not performed: see zt_clock_costs_only */
    double host_bytes; /* costs_only: the host memory bulk buffers may take in all (0: no limit) */
    int host_cores;    /* the cores the clock's machine gives this process (0: this machine's) */
} zt_clock_ops;

/* Installs ops as the process's clock (NULL: back to the wall clock). Done once at start, before
 * any thread reads the clock. */
void zt_clock_install(const zt_clock_ops *ops);
/* whether a virtual clock is installed */
int zt_clock_is_virtual(void);
/* seconds on the run's clock: the calling thread's time (zt_now() on the wall clock) */
double zt_clock_now(void);
/* the calling thread has waited for an event that happened at time t (another thread's
 * zt_clock_now() when it published it); nothing on the wall clock */
void zt_clock_after(double t);
/* the calling thread did host work of `kind` on `threads` threads; nothing on the wall clock */
void zt_clock_host_work(int kind, double amount, double bytes, int threads);

/* The host cores the run's work is timed on: a virtual clock's machine's share for this process, else
 * what OpenMP runs here (omp_get_max_threads). Host-work thread counts are shares of it. */
int zt_clock_host_cores(void);

/* 1 when the clock only costs work (predict's dry run, ZEROTRAIN_SIM_DRY): no value computed
 * matters, so the host math a caller declares with zt_clock_host_work is skipped by that caller, and
 * bulk host buffers are address space only. 0 on the wall clock. */
int zt_clock_costs_only(void);

/* Host memory for a large buffer whose contents only matter when work is performed (the init
 * vector, Twin-Flow's host part, offloaded parameters): zero-filled and 64-byte aligned; under
 * zt_clock_costs_only, address space only (reserved without swap and never touched), so a model
 * larger than this machine's memory can be costed, and the clock's host memory binds instead (an
 * allocation past it fails, as it would on that machine). NULL when out of memory. */
void *zt_clock_bulk_alloc(size_t bytes);
void zt_clock_bulk_free(void *p);
/* Costs only: counts `bytes` of host memory someone else mapped as address space (a negative count
 * gives them back) against the same limit as the bulk buffers; 0, counting nothing, when it would pass
 * the limit. 1 on the wall clock. */
int zt_clock_host_reserve(double bytes);
/* Host memory still free on the machine the clock stands for, under zt_clock_costs_only with a
 * host limit: that limit less the bulk buffers in use; -1 otherwise (ask this machine). */
double zt_clock_host_available(void);

/* A timed device reports each item its lanes run (lane index, lane name, the item's name, its start
 * and end on the clock) to the sink that the trace's owner sets (the engine, for the Chrome trace);
 * with no sink nothing is reported. */
typedef void (*zt_clock_sink)(void *ctx, int lane, const char *lane_name, const char *name, double t0, double t1);
void zt_clock_set_sink(zt_clock_sink fn, void *ctx);
void zt_clock_event(int lane, const char *lane_name, const char *name, double t0, double t1);

/* the calling thread issues a request of `bytes` on queue `queue` (ZT_QUEUE_*): it starts when both
 * the thread (now) and the queue's earlier requests allow; returns when it ends (0 on the wall clock) */
double zt_clock_queue(int queue, double bytes);

#endif
