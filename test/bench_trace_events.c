/* bench_trace_events.c — what one trace event costs the thread that writes it (src/io/trace.c: one
 * formatted write(2) under the trace's lock), for `make bench`: a copy ("H2D" with its bytes), a
 * busy interval that is written and one merged into the last (no write), a counter of four series,
 * and zt_now(), which the simulated GPU's lanes call twice per item while a trace is open.
 * bench_trace.py multiplies these by a traced step's events for the trace's share of the step. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "io/trace.h"
#include "util/util.h"

#define N 200000

int main(void) {
    zt_err err = {0};
    char path[] = "build/bench/trace_events_bench.json";
    zt_trace *t = zt_trace_open(path, 0, &err);
    if (!t) {
        zt_print_error(&err);
        return 1;
    }
    double t0 = zt_now();
    for (int i = 0; i < N; i++) zt_trace_transfer(t, i & 1, 65536, 1 + (i & 1), t0 + i * 1e-3, t0 + i * 1e-3 + 1e-4);
    double t1 = zt_now();
    for (int i = 0; i < N; i++) zt_trace_busy(t, ZT_LANE_DEVICE, t0 + i * 1e-3, t0 + i * 1e-3 + 1e-4); /* gaps: each written */
    double t2 = zt_now();
    for (int i = 0; i < N; i++) zt_trace_busy(t, ZT_LANE_DEVICE, t2 + i * 1e-6, t2 + i * 1e-6 + 5e-7); /* merged */
    double t3 = zt_now();
    static const char *const keys[] = {"pinned", "optimizer", "activations", "total"};
    double vals[] = {1, 2, 3, 6};
    for (int i = 0; i < N; i++) zt_trace_counters(t, "host memory (bytes)", t0 + i * 1e-3, 4, keys, vals);
    double t4 = zt_now();
    double sink = 0;
    for (int i = 0; i < N; i++) sink += zt_now();
    double t5 = zt_now();
    if (zt_trace_close(t, &err)) {
        zt_print_error(&err);
        return 1;
    }
    unlink("build/bench/trace_events_bench.rank0.json");
    printf("trace event cost (ns, mean of %d): transfer %.0f | busy written %.0f | busy merged %.0f | counters %.0f | "
           "zt_now %.0f%s\n", N, (t1 - t0) / N * 1e9, (t2 - t1) / N * 1e9, (t3 - t2) / N * 1e9, (t4 - t3) / N * 1e9,
           (t5 - t4) / N * 1e9, sink < 0 ? " " : "");
    return 0;
}
