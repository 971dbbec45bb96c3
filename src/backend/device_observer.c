/* device_observer.c — the process's one device observer (backend.h): set by the engine when it
 * opens a trace, read by the backends' threads on every item, so it is one atomic pointer. Also
 * the items reported after the fact (zt_device_defer): held under a lock until the next
 * zt_device_report_deferred, which hands them over sorted by start, so that the observer's busy
 * intervals (io/trace.c joins a lane's intervals in the order they come) see them in time order. */
#include "backend/backend.h"
#include "util/util.h"

#include <pthread.h>
#include <stdlib.h>

static const zt_device_observer *g_observer;

void zt_device_observe(const zt_device_observer *obs) { __atomic_store_n(&g_observer, obs, __ATOMIC_RELEASE); }

const zt_device_observer *zt_device_observer_now(void) { return __atomic_load_n(&g_observer, __ATOMIC_ACQUIRE); }

void zt_device_report(const zt_device_observer *obs, const zt_device_item *it) {
    if (it->is_copy && obs->transfer) obs->transfer(obs->ctx, it->kind, it->bytes, it->stream, it->t0, it->t1);
    else if (!it->is_copy && obs->compute) obs->compute(obs->ctx, it->t0, it->t1);
}

static pthread_mutex_t g_deferred_mu = PTHREAD_MUTEX_INITIALIZER;
static zt_device_item *g_deferred;
static size_t g_deferred_n, g_deferred_cap;

void zt_device_defer(const zt_device_item *item) {
    pthread_mutex_lock(&g_deferred_mu);
    if (g_deferred_n == g_deferred_cap) {
        g_deferred_cap = g_deferred_cap ? 2 * g_deferred_cap : 256;
        g_deferred = zt_xrealloc(g_deferred, g_deferred_cap * sizeof *g_deferred);
    }
    g_deferred[g_deferred_n++] = *item;
    pthread_mutex_unlock(&g_deferred_mu);
}

static int by_start(const void *a, const void *b) {
    double x = ((const zt_device_item *)a)->t0, y = ((const zt_device_item *)b)->t0;
    return (x > y) - (x < y);
}

void zt_device_report_deferred(void) {
    pthread_mutex_lock(&g_deferred_mu); /* held while reporting: a second drain must not interleave */
    const zt_device_observer *obs = zt_device_observer_now();
    qsort(g_deferred, g_deferred_n, sizeof *g_deferred, by_start);
    for (size_t i = 0; obs && i < g_deferred_n; i++) zt_device_report(obs, &g_deferred[i]);
    g_deferred_n = 0;
    pthread_mutex_unlock(&g_deferred_mu);
}
