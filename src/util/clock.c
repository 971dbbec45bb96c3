/* clock.c — the run's clock (clock.h): the wall clock, or the virtual one a timed device installs. */
#include "util/clock.h"

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
