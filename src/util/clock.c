/* clock.c — the run's clock (clock.h): the wall clock, or the virtual one a timed device installs. */
#include "util/clock.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util/util.h"

static const zt_clock_ops *g_ops;

void zt_clock_install(const zt_clock_ops *ops) { g_ops = ops; }
int zt_clock_is_virtual(void) { return g_ops != NULL; }
double zt_clock_now(void) { return g_ops ? g_ops->now() : zt_now(); }
void zt_clock_after(double t) {
    if (g_ops) g_ops->after(t);
}
void zt_clock_host_work(int kind, double amount, double bytes, int threads) {
    if (g_ops) g_ops->host_work(kind, amount, bytes, threads);
}
double zt_clock_queue(int queue, double bytes) { return g_ops ? g_ops->queue(queue, bytes) : 0; }
int zt_clock_costs_only(void) { return g_ops && g_ops->costs_only; }
int zt_clock_host_cores(void) { return g_ops && g_ops->host_cores > 0 ? g_ops->host_cores : omp_get_max_threads(); }

/* the address-space-only buffers handed out, so that zt_clock_bulk_free knows which to unmap */
static struct {
    pthread_mutex_t mu;
    struct { void *p; size_t n; } *r;
    int n, cap;
    double in_use; /* bytes handed out as address space */
} g_bulk = {.mu = PTHREAD_MUTEX_INITIALIZER};

void *zt_clock_bulk_alloc(size_t bytes) {
    size_t sz = ((bytes ? bytes : 64) + 63) & ~(size_t)63;
    if (!zt_clock_costs_only()) {
        void *p = aligned_alloc(64, sz);
        if (p) memset(p, 0, sz);
        return p;
    }
    pthread_mutex_lock(&g_bulk.mu);
    if (g_ops->host_bytes > 0 && g_bulk.in_use + (double)sz > g_ops->host_bytes) {
        pthread_mutex_unlock(&g_bulk.mu);
        return NULL; /* past the host memory of the machine the clock stands for */
    }
    void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        pthread_mutex_unlock(&g_bulk.mu);
        return NULL;
    }
    g_bulk.in_use += (double)sz;
    if (g_bulk.n == g_bulk.cap) {
        g_bulk.cap = g_bulk.cap ? 2 * g_bulk.cap : 32;
        g_bulk.r = zt_xrealloc(g_bulk.r, (size_t)g_bulk.cap * sizeof *g_bulk.r);
    }
    g_bulk.r[g_bulk.n].p = p, g_bulk.r[g_bulk.n].n = sz;
    g_bulk.n++;
    pthread_mutex_unlock(&g_bulk.mu);
    return p;
}

int zt_clock_host_reserve(double bytes) {
    if (!zt_clock_costs_only()) return 1;
    pthread_mutex_lock(&g_bulk.mu);
    int ok = bytes <= 0 || g_ops->host_bytes <= 0 || g_bulk.in_use + bytes <= g_ops->host_bytes;
    if (ok) g_bulk.in_use += bytes;
    pthread_mutex_unlock(&g_bulk.mu);
    return ok;
}

double zt_clock_host_available(void) {
    if (!zt_clock_costs_only() || g_ops->host_bytes <= 0) return -1;
    pthread_mutex_lock(&g_bulk.mu);
    double v = g_ops->host_bytes - g_bulk.in_use;
    pthread_mutex_unlock(&g_bulk.mu);
    return v;
}

void zt_clock_bulk_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_bulk.mu);
    for (int i = 0; i < g_bulk.n; i++)
        if (g_bulk.r[i].p == p) {
            size_t n = g_bulk.r[i].n;
            g_bulk.r[i] = g_bulk.r[--g_bulk.n];
            g_bulk.in_use -= (double)n;
            pthread_mutex_unlock(&g_bulk.mu);
            munmap(p, n);
            return;
        }
    pthread_mutex_unlock(&g_bulk.mu);
    free(p);
}

static zt_clock_sink g_sink;
static void *g_sink_ctx;
void zt_clock_set_sink(zt_clock_sink fn, void *ctx) { g_sink = fn, g_sink_ctx = ctx; }
void zt_clock_event(int lane, const char *lane_name, const char *name, double t0, double t1) {
    zt_clock_sink fn = g_sink;
    if (fn) fn(g_sink_ctx, lane, lane_name, name, t0, t1);
}
