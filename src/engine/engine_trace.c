/* engine_trace.c — what the engine writes to its trace beyond the phases its modules mark
 * themselves: the device's work as the backend reports it (the engine is backend.h's device
 * observer while a trace is open) and the NVMe swap's requests (reported to the same observer),
 * the host Adam's chunks with their casts, the memory counters, the end of each optimizer step,
 * and the NVML sampler's life (io/trace_nvml.h, started on request, stopped before the trace closes).
 *
 * The observer's callbacks run on the backend's threads (the simulated GPU's lanes), so what
 * they count is updated atomically or under dev_mu. Without a trace no observer is set and the
 * backends pay one pointer load per item: tracing costs nothing unless asked for. */
#include "engine/engine_internal.h"

#include <stdio.h>

#include "backend/backend.h" /* zt_node_local_rank */
#include "io/trace_nvml.h"
#include "util/clock.h"

/* ---------------------------------------------------------------- the device observer */

static void on_transfer(void *ctx, zt_copy_kind kind, size_t bytes, int stream, double t0, double t1) {
    zt_engine *e = ctx;
    __atomic_add_fetch(&e->link_bytes[kind == ZT_D2H], bytes, __ATOMIC_RELAXED);
    zt_trace_transfer(e->trace, kind == ZT_D2H, bytes, stream, t0, t1);
}

static void on_host_adam(void *ctx, int thread, double t0, double t1) {
    zt_engine *e = ctx;
    int lane = ZT_LANE_ADAM_THREAD + (thread < ZT_ADAM_THREAD_LANES ? thread : ZT_ADAM_THREAD_LANES - 1);
    zt_trace_busy(e->trace, lane, t0, t1);
}

static void on_compute(void *ctx, double t0, double t1) {
    zt_engine *e = ctx;
    zt_trace_busy(e->trace, ZT_LANE_DEVICE, t0, t1);
}

static void on_nvme(void *ctx, int write, size_t bytes, double t0, double t1) {
    zt_engine *e = ctx;
    zt_trace_nvme(e->trace, write, bytes, t0, t1);
}

/* the allocator's count, written in bytes (exact) with the device's capacity beside it */
static void on_memory(void *ctx, size_t in_use, double t) {
    zt_engine *e = ctx;
    pthread_mutex_lock(&e->dev_mu);
    e->dev_in_use = in_use;
    if (in_use > e->dev_peak) e->dev_peak = in_use;
    pthread_mutex_unlock(&e->dev_mu);
    static const char *const keys[] = {"in use", "capacity"};
    double vals[] = {(double)in_use, (double)e->dev_capacity};
    zt_trace_counters(e->trace, "device memory (bytes)", t, 2, keys, vals);
}

/* a timed device's lanes (util/clock.h) onto the trace, beside the engine's */
static void trace_device_item(void *ctx, int lane, const char *lane_name, const char *name, double t0, double t1) {
    zt_trace_device(ctx, lane, lane_name, name, t0, t1);
}

int zt_engine_open_trace(zt_engine *e, const char *path, zt_err *err) {
    engine_trace_close(e);
    e->trace = zt_trace_open(path, e->lay.rank, err);
    if (!e->trace) return -1;
    zt_clock_set_sink(trace_device_item, e->trace);
    pthread_mutex_init(&e->dev_mu, NULL);
    size_t free_b = 0, total_b = 0;
    if (e->be->mem_info) e->be->mem_info(&free_b, &total_b);
    e->dev_capacity = total_b;
    e->dev_in_use = e->dev_peak = total_b > free_b ? total_b - free_b : 0;
    e->link_bytes[0] = e->link_bytes[1] = 0;
    e->observer = (zt_device_observer){.ctx = e, .transfer = on_transfer, .compute = on_compute, .memory = on_memory,
                                       .host_adam = on_host_adam, .nvme = on_nvme};
    if (e->be->memory_is_host) e->observer.transfer = NULL, e->observer.compute = NULL, e->observer.memory = NULL;
    zt_device_observe(&e->observer); /* the CPU backend has no device of its own: its host Adam threads only */
    if (!e->be->memory_is_host) on_memory(e, e->dev_in_use, zt_clock_now()); /* what the engine allocated before the trace */
    engine_trace_memory(e);
    return 0;
}

void zt_engine_trace_nvml(zt_engine *e, int period_ms) {
    if (!e->trace || period_ms <= 0 || e->nvml) return;
    zt_err err;
    int local = zt_node_local_rank();
    e->nvml = zt_nvml_sampler_start(e->trace, period_ms, local, &err);
    if (!e->nvml && local == 0) zt_warn("trace_nvml_ms: %s: the trace has no NVML counters; the run goes on", err.msg);
}

void engine_trace_close(zt_engine *e) {
    if (!e->trace) return;
    zt_nvml_sampler_stop(e->nvml); /* before the trace it writes into closes */
    e->nvml = NULL;
    zt_clock_set_sink(NULL, NULL);
    if (zt_device_observer_now() == &e->observer) {
        if (e->be) e->be->synchronize(); /* no lane item still reporting to this engine */
        zt_device_observe(NULL);
    }
    zt_trace_close(e->trace, NULL);
    e->trace = NULL;
    pthread_mutex_destroy(&e->dev_mu);
}

void zt_engine_link_bytes(zt_engine *e, double out[2]) {
    out[0] = (double)__atomic_load_n(&e->link_bytes[0], __ATOMIC_RELAXED);
    out[1] = (double)__atomic_load_n(&e->link_bytes[1], __ATOMIC_RELAXED);
}

double zt_engine_device_peak(zt_engine *e) {
    if (!e->trace) return 0;
    pthread_mutex_lock(&e->dev_mu);
    size_t peak = e->dev_peak;
    e->dev_peak = e->dev_in_use;
    pthread_mutex_unlock(&e->dev_mu);
    return (double)peak;
}

/* The casts of the host part (16-bit gradients widened to fp32, fp32 parameters rounded to 16 bits)
 * run inside the CPU Adam's pass, element by element (cpu_adam.c): there is no separate pass whose
 * time could be taken. So the casts get a marker of their own on the same interval, with the bytes
 * cast (each element's 16-bit gradient read and 16-bit parameter written), from which the figures
 * give the rate the fused pass cast at. fp32 backends cast nothing (their "cast" is a copy). */
void facts_trace_host_adam(const engine_facts *f, const char *what, double t0, double t1, size_t n) {
    zt_trace *trace = *f->trace;
    if (!trace) return;
    char args[64];
    snprintf(args, sizeof args, "\"elements\":%zu", n);
    zt_trace_complete_args(trace, ZT_LANE_HOST_ADAM, what, t0, t1, args);
    if (f->be->compute_dtype == ZT_F32) return;
    snprintf(args, sizeof args, "\"bytes\":%zu,\"fused\":1", 2 * n * facts_esz(f));
    zt_trace_complete_args(trace, ZT_LANE_HOST_ADAM, "casts (fp32<->16-bit, fused in host adam)", t0, t1, args);
}

/* ---------------------------------------------------------------- counters and steps */

/* the engine's accounting: device bytes per its categories (stage 3 gather buffers counted whole,
 * activations as the model declared them) and host memory as the figures split it */
void engine_trace_memory(zt_engine *e) {
    if (!e->trace) return;
    double now = zt_clock_now();
    zt_trace_counter(e->trace, "memory (MiB)", now, "device", (double)mem_sum(e->mem.device) / 1048576.0, "host",
                     (double)mem_sum(e->mem.host) / 1048576.0);
    static const char *const keys[] = {"pinned", "optimizer", "activations", "total"};
    double vals[] = {(double)e->host_pinned_bytes, (double)e->mem.host[ZT_MEM_OPTIM],
                     (double)e->mem.host[ZT_MEM_ACTS], (double)mem_sum(e->mem.host)};
    zt_trace_counters(e->trace, "host memory (bytes)", now, 4, keys, vals);
}

void zt_engine_trace_step(zt_engine *e, long step, double t0, double t1, const double link_bytes[2], double dev_peak) {
    if (!e->trace) return;
    char args[160];
    snprintf(args, sizeof args, "\"step\":%ld,\"h2d_bytes\":%.0f,\"d2h_bytes\":%.0f,\"device_peak_bytes\":%.0f", step,
             link_bytes[0], link_bytes[1], dev_peak);
    zt_trace_flush(e->trace); /* the step's busy intervals first: what follows its "step" event is the next step's */
    zt_trace_complete_args(e->trace, ZT_LANE_STEP, "step", t0, t1, args);
}
