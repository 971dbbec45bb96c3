/* twin_flow.c — Twin-Flow, the optimizer split between host and device (engine.h has the split):
 * the host part's buffers, ratio auto (calibrated at start), and the split update.
 *
 * The step: the host part runs on three threads, the device part on the caller's, all at once:
 *   D2H lane         the host part's gradients down, chunk by chunk (into host_grad), never waiting
 *   host Adam lane   SIMD CPU Adam of chunk c once its gradients are down
 *   H2D lane         chunk c's updated parameters up as soon as the CPU Adam has finished it
 *   caller           device Adam of [opt_lo, split)
 * so the H2D of chunk c overlaps the CPU Adam of chunk c+1 and the D2H of chunk c+2 (ZeRO-Offload's
 * pipeline), and the whole host pipeline overlaps the device Adam. On the CPU backend the "device"
 * is host memory and be->copy a memcpy, but the code path is the same. The copy lanes call the
 * backend, so they bind to its device first (backend.h: bind_thread); the host Adam lane does not. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_adam.h"
#include "engine/engine_internal.h"
#include "engine/infinity.h"
#include "util/test_hooks.h"
#include "util/clock.h"

/* ---------------------------------------------------------------- split and host buffers */

/* host_n for ratio r of n elements: the device part n - host_n is round((1 - r) n) to a multiple of
 * ZT_TWIN_ALIGN, so the split stays aligned with the host part at the tail (all of n at r = 1) */
static size_t split_elements(size_t n, double r) {
    if (r >= 1.0) return n;
    if (r <= 0.0) return 0;
    size_t dev = (size_t)llround((1.0 - r) * (double)n);
    dev = (dev + ZT_TWIN_ALIGN / 2) / ZT_TWIN_ALIGN * ZT_TWIN_ALIGN;
    return n - min_sz(dev, n);
}

static void *host_buf(zt_engine *e, size_t bytes, int transfer, int category) {
    return engine_host_alloc(e, bytes, transfer && e->host_pinned, category);
}

static void host_buf_free(zt_engine *e, void *p, int transfer) { engine_host_free(e, p, transfer && e->host_pinned); }

/* Where the host part's updated parameters go: straight into the offloaded parameter shard
 * (offload_param: nothing goes up), else into a compute-dtype buffer for the H2D lane — needed on
 * 16-bit backends, and with NVMe (the fp32 master is only in a staging buffer while its group is
 * updated). Only the fp32 backends' in-memory master is itself the H2D source. */
int twin_has_out_buffer(const zt_engine *e) {
    if (e->param_nvme) return 1; /* written to the parameter swap file after the update */
    return !e->params_on_host && (e->be->compute_dtype != ZT_F32 || e->off.nvme_path);
}

void *twin_host_out(zt_engine *e, size_t off) {
    if (e->params_on_host && !e->param_nvme) return params_at_opt(e, e->host_lo + off);
    return e->host_params16 ? at(e, e->host_params16, off) : NULL;
}

/* Transfer buffers (gradients down, parameters up) are pinned when pin_memory asks; m and v are
 * only touched by the CPU, and so is the 16-bit backends' master (the fp32 backends' master is
 * the H2D source itself). With NVMe, master, m and v are in the swap file (engine_infinity.c). */
int twin_alloc(zt_engine *e) {
    int fp32 = e->be->compute_dtype == ZT_F32, nvme = e->off.nvme_path != NULL;
    size_t n = e->host_n, E = esz(e);
    e->host_pinned = e->off.pin_memory;
    /* chunks of n/8 (so the CPU Adam starts after an eighth of the D2H), at least 64 Ki elements
     * (long enough to amortise a copy's start-up) and at most 1 Mi (4 MiB of fp32 in flight) */
    size_t chunk = (n / 8 + ZT_TWIN_ALIGN - 1) / ZT_TWIN_ALIGN * ZT_TWIN_ALIGN;
    e->host_chunk = max_sz(min_sz(max_sz(chunk, (size_t)1 << 16), (size_t)1 << 20), 1);
    if (!nvme) {
        e->host_master = host_buf(e, n * sizeof(float), fp32 && !e->params_on_host, ZT_MEM_OPTIM);
        e->host_m = host_buf(e, n * sizeof(float), 0, ZT_MEM_OPTIM);
        e->host_v = host_buf(e, n * sizeof(float), 0, ZT_MEM_OPTIM);
        if (!e->host_master || !e->host_m || !e->host_v) return -1;
    }
    e->host_grad = host_buf(e, n * E, 1, ZT_MEM_GRADS);
    if (twin_has_out_buffer(e)) e->host_params16 = host_buf(e, n * E, 1, ZT_MEM_COMM);
    if (!e->host_grad || (twin_has_out_buffer(e) && !e->host_params16)) return -1;
    return 0;
}

void twin_free(zt_engine *e) {
    int fp32 = e->be->compute_dtype == ZT_F32;
    host_buf_free(e, e->host_master, fp32 && !e->params_on_host);
    host_buf_free(e, e->host_m, 0);
    host_buf_free(e, e->host_v, 0);
    host_buf_free(e, e->host_grad, 1);
    host_buf_free(e, e->host_params16, 1);
}

int twin_init_master(zt_engine *e, const float *init, zt_err *err) {
    (void)err;
    if (!e->off.nvme_path) {
        if (!zt_clock_costs_only()) memcpy(e->host_master, init, e->host_n * sizeof(float));
        return 0;
    }
    inf_states_rw(e->state_nvme, e->adam_t, ZT_STATE_MASTER, 0, e->host_n, (float *)init, 1);
    return 0;
}

/* ---------------------------------------------------------------- ratio auto */

/* The ratio in effect (auto: chosen by twin_ratio.c, the same on every rank) and the host part's size.
 * A bound that decided auto is kept when the split is rounded to ZT_TWIN_ALIGN: the host part is
 * rounded down under the host-memory bound, up under the device-memory bound. */
int twin_plan(zt_engine *e, zt_err *err) {
    size_t n = e->lay.opt_hi - e->lay.opt_lo;
    e->host_lo = n; /* everything on the device unless offloaded */
    if (!e->off.enabled) return 0;
    int bound = TWIN_BOUND_SPEED;
    e->offload_ratio = e->off.ratio;
    if (e->off.ratio < 0 && twin_choose_ratio(e, &e->offload_ratio, &bound, err)) return -1;
    e->host_n = split_elements(n, e->offload_ratio);
    double exact = e->offload_ratio * (double)n;
    if (bound == TWIN_BOUND_HOST && (double)e->host_n > exact && e->host_n >= ZT_TWIN_ALIGN) e->host_n -= ZT_TWIN_ALIGN;
    if (bound == TWIN_BOUND_DEVICE && (double)e->host_n < exact) e->host_n = min_sz(e->host_n + ZT_TWIN_ALIGN, n);
    e->host_lo = n - e->host_n; /* the host part is the tail */
    return 0;
}

/* ---------------------------------------------------------------- the split update */

static float decay_of(const zt_engine *e, const zt_param_info *p) {
    return (p->decay || e->opt.decay_all_params) ? e->opt.weight_decay : 0.0f;
}


void twin_chunk_range(const twin_flow *tf, size_t c, size_t *a, size_t *b) {
    *a = c * tf->e->host_chunk;
    *b = min_sz(tf->e->host_n, *a + tf->e->host_chunk);
}

static double *published_at(twin_flow *tf, const size_t *counter) {
    return counter == &tf->d2h_done ? tf->d2h_at : counter == &tf->adam_done ? tf->adam_at : tf->h2d_at;
}

/* a lane has finished `chunks` chunks: tell the lanes waiting on it, and when (util/clock.h) */
void twin_publish(twin_flow *tf, size_t *counter, size_t chunks) {
    double now = zt_clock_now(), *at = published_at(tf, counter);
    pthread_mutex_lock(&tf->mu);
    for (size_t c = *counter; c < chunks; c++) at[c] = now;
    *counter = chunks;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

void twin_wait_count(twin_flow *tf, const size_t *counter, size_t target) {
    while (*counter < target) pthread_cond_wait(&tf->cv, &tf->mu);
    if (target) zt_clock_after(published_at(tf, counter)[target - 1]);
}

void twin_wait_go(twin_flow *tf) {
    while (!tf->go) pthread_cond_wait(&tf->cv, &tf->mu);
    zt_clock_after(tf->go_at);
}

/* one chunk's transfer on the backend's stream for that direction, timed and traced on its lane */
static void timed_transfer(twin_flow *tf, int lane, const char *what, void *dst, const void *src, size_t bytes,
                           zt_copy_kind kind, double *busy) {
    double t0 = zt_clock_now();
    tf->e->be->transfer(dst, src, bytes, kind);
    double t1 = zt_clock_now();
    *busy += t1 - t0;
    zt_trace_complete(tf->e->trace, lane, what, t0, t1);
}

void twin_adam_span(const zt_engine *e, const zt_adam_step *st, size_t off, size_t n, float *p, float *m, float *v,
                    const void *g, void *out) {
    const zt_param_table *tab = e->table;
    int fp32 = e->be->compute_dtype == ZT_F32;
    for (int i = 0; i < tab->count; i++) {
        const zt_param_info *q = &tab->params[i];
        size_t first = e->lay.opt_lo + e->host_lo + off; /* the span's first element in the flat vector */
        size_t x = max_sz(q->offset, first), y = min_sz(q->offset + q->numel, first + n);
        if (y <= x) continue;
        size_t d = x - first; /* into the span */
        zt_adam_step sti = *st;
        sti.weight_decay = decay_of(e, q);
        void *o = out ? (char *)out + d * esz(e) : NULL;
        /* read and write master, m, v; read the gradient, write the parameter (on a virtual clock) */
        zt_clock_host_work(ZT_WORK_ADAM, (double)(y - x), (double)(y - x) * (24.0 + 2.0 * (double)esz(e)),
                           e->off.host_threads);
        if (zt_clock_costs_only()) continue;
        zt_cpu_adamw_g(p + d, m + d, v + d, (const char *)g + d * esz(e), e->be->compute_dtype, y - x, &sti,
                       fp32 ? NULL : o, e->be->compute_dtype, e->off.host_threads, ZT_ADAM_ISA_BEST);
        if (fp32 && o) memcpy(o, p + d, (y - x) * sizeof(float)); /* fp32 "casting" is a copy */
    }
}

/* ---- the host Adam lane with the states on NVMe: the swap's pipeline (engine_infinity.c) asks
 * this lane to update each group as it comes in */

static long nvme_wait_go(void *ctx) {
    twin_flow *tf = ctx;
    pthread_mutex_lock(&tf->mu);
    twin_wait_go(tf);
    pthread_mutex_unlock(&tf->mu);
    return tf->e->adam_t;
}

/* the chunks of host-part elements [lo, hi), each once its gradients are down */
static void nvme_update(void *ctx, size_t lo, size_t hi, float *master, float *m, float *v) {
    twin_flow *tf = ctx;
    zt_engine *e = tf->e;
    for (size_t c = lo / e->host_chunk; c * e->host_chunk < hi; c++) {
        pthread_mutex_lock(&tf->mu);
        twin_wait_count(tf, &tf->d2h_done, c + 1);
        pthread_mutex_unlock(&tf->mu);
        size_t ca, cb;
        twin_chunk_range(tf, c, &ca, &cb);
        size_t a = max_sz(ca, lo), b = min_sz(cb, hi);
        twin_adam_span(e, &tf->st, a, b - a, master + (a - lo), m + (a - lo), v + (a - lo), at(e, e->host_grad, a),
                       twin_host_out(e, a));
    }
}

/* chunks wholly inside the groups done so far may go up */
static void nvme_group_done(void *ctx, size_t hi, int last, double t0, double t1) {
    twin_flow *tf = ctx;
    tf->adam_busy += t1 - t0;
    twin_publish(tf, &tf->adam_done, last ? tf->nchunks : hi / tf->e->host_chunk);
}

/* host-adam lane: CPU Adam of each chunk once its gradients are down; on 16-bit backends it reads
 * the 16-bit gradients as they came down and writes the rounded params (to the H2D buffer, or the
 * offloaded shard): no widening pass, no fp32 copy of the gradients */
static void *host_adam_lane(void *arg) {
    twin_flow *tf = arg;
    zt_engine *e = tf->e;
    zt_clock_after(tf->start_at);
    zt_cpu_adam_report_threads(1); /* with a trace, each CPU Adam thread's busy time is on its own lane */
    if (e->off.nvme_path) {
        inf_states_update(e->state_nvme, &(inf_update_hooks){tf, nvme_wait_go, nvme_update, nvme_group_done});
        tf->end_at[0] = zt_clock_now();
        return NULL;
    }
    for (size_t c = 0; c < tf->nchunks; c++) {
        pthread_mutex_lock(&tf->mu);
        twin_wait_go(tf);
        twin_wait_count(tf, &tf->d2h_done, c + 1);
        pthread_mutex_unlock(&tf->mu);
        double t0 = zt_clock_now();
        size_t a, b;
        twin_chunk_range(tf, c, &a, &b);
        twin_adam_span(e, &tf->st, a, b - a, e->host_master + a, e->host_m + a, e->host_v + a, at(e, e->host_grad, a),
                       twin_host_out(e, a));
        double t1 = zt_clock_now();
        tf->adam_busy += t1 - t0;
        zt_trace_complete(e->trace, ZT_LANE_HOST_ADAM, "host adam", t0, t1);
        twin_publish(tf, &tf->adam_done, c + 1);
    }
    tf->end_at[0] = zt_clock_now();
    return NULL;
}

/* D2H lane: brings every chunk's gradients down in order, as fast as the link allows (host_grad
 * holds them all, so it never waits for the CPU Adam) */
static void *d2h_lane(void *arg) {
    twin_flow *tf = arg;
    zt_engine *e = tf->e;
    size_t E = esz(e);
    zt_backend_bind_thread(e->be);
    zt_clock_after(tf->start_at);
    for (size_t c = 0; c < tf->nchunks; c++) {
        size_t a, b;
        twin_chunk_range(tf, c, &a, &b);
        timed_transfer(tf, ZT_LANE_D2H, "D2H grads", at(e, e->host_grad, a), at(e, e->grad_shard, e->host_lo + a), (b - a) * E,
                       ZT_D2H, &tf->d2h_busy);
        twin_publish(tf, &tf->d2h_done, c + 1);
    }
    tf->end_at[1] = zt_clock_now();
    return NULL;
}

/* H2D lane: sends each chunk's updated parameters up as soon as the CPU Adam has finished it; on
 * its own stream, so it runs alongside the D2H of later chunks and the device Adam */
static void *h2d_lane(void *arg) {
    twin_flow *tf = arg;
    zt_engine *e = tf->e;
    size_t E = esz(e);
    tf->end_at[2] = tf->start_at;
    if (e->params_on_host) return NULL; /* the CPU Adam wrote them where they live */
    zt_backend_bind_thread(e->be);
    zt_clock_after(tf->start_at);
    for (size_t c = 0; c < tf->nchunks; c++) {
        pthread_mutex_lock(&tf->mu);
        twin_wait_count(tf, &tf->adam_done, c + 1);
        pthread_mutex_unlock(&tf->mu);
        size_t a, b;
        twin_chunk_range(tf, c, &a, &b);
        const void *src = e->host_params16 ? at(e, e->host_params16, a) : (const void *)(e->host_master + a);
        timed_transfer(tf, ZT_LANE_H2D, "H2D params", params_at_opt(e, e->host_lo + a), src, (b - a) * E, ZT_H2D,
                       &tf->h2d_busy);
        twin_publish(tf, &tf->h2d_done, c + 1);
    }
    tf->end_at[2] = zt_clock_now();
    return NULL;
}

/* device Adam of [opt_lo, opt_lo + host_lo), one call per tensor piece */
static void device_adam(zt_engine *e, zt_adam_step st) {
    const zt_backend *be = e->be;
    int fp32 = be->compute_dtype == ZT_F32;
    size_t split = e->lay.opt_lo + e->host_lo;
    for (int i = 0; i < e->table->count; i++) {
        const zt_param_info *p = &e->table->params[i];
        size_t a = max_sz(p->offset, e->lay.opt_lo), b = min_sz(p->offset + p->numel, split);
        if (b <= a) continue;
        size_t off = a - e->lay.opt_lo;
        st.weight_decay = decay_of(e, p);
        void *out = fp32 ? NULL : e->params_on_host ? at(e, e->dev_params_out, off) : params_at_opt(e, off);
        be->adamw(e->master + off, e->adam_m + off, e->adam_v + off, at(e, e->grad_shard, off), out, b - a, &st);
    }
    /* offloaded parameters: the device part's updated values go down into the shard */
    if (e->params_on_host && e->host_lo)
        engine_params_store_from_device(e, 0, fp32 ? (const void *)e->master : e->dev_params_out, e->host_lo);
    be->synchronize();
}

/* The host lanes start as soon as the gradients are final (the D2H needs no clip coefficient), the
 * CPU Adam once twin_go has set the step; the device part runs on this thread meanwhile. */
void twin_start(zt_engine *e, twin_flow *tf) {
    memset(tf, 0, sizeof *tf);
    tf->e = e;
    tf->nchunks = e->host_n ? (e->host_n + e->host_chunk - 1) / e->host_chunk : 0;
    if (!tf->nchunks) return;
    pthread_t *th = tf->lanes;
    /* transfer() is not ordered after queued device work: the gradients must be complete first */
    if (!zt_test_hook_skip_sync()) e->be->synchronize();
    pthread_mutex_init(&tf->mu, NULL);
    pthread_cond_init(&tf->cv, NULL);
    tf->d2h_at = zt_xcalloc(tf->nchunks, sizeof(double));
    tf->adam_at = zt_xcalloc(tf->nchunks, sizeof(double));
    tf->h2d_at = zt_xcalloc(tf->nchunks, sizeof(double));
    tf->start_at = zt_clock_now();
    if (pthread_create(&th[0], NULL, host_adam_lane, tf) || pthread_create(&th[1], NULL, d2h_lane, tf) ||
        pthread_create(&th[2], NULL, h2d_lane, tf)) {
        fprintf(stderr, "zerotrain: error: cannot start the Twin-Flow host threads\n");
        abort();
    }
}

static void twin_go(twin_flow *tf, const zt_adam_step *st) {
    if (!tf->nchunks) return;
    pthread_mutex_lock(&tf->mu);
    tf->st = *st;
    tf->go_at = zt_clock_now();
    tf->go = 1;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

/* whether this engine's next step may start before the host lanes finish: not where the step ends
 * with an all-gather of everyone's updated parameters (stages 1-2 on several ranks), and not with
 * the parameters on NVMe (their host part is written back after the lanes) */
static int may_defer(const zt_engine *e) {
    if (!e->off.overlap_step || e->param_nvme) return 0;
    return e->opt.stage == 0 || e->opt.stage == 3 || e->lay.world == 1;
}

/* the lanes' figures into the step's timing, once they are done */
static void record_lanes(zt_engine *e, twin_flow *tf, double t1) {
    zt_engine_timing *tm = &e->timing;
    tm->host_adam = tf->adam_busy;
    tm->d2h = tf->d2h_busy;
    tm->h2d = tf->h2d_busy;
    tm->host_idle = (t1 - tf->t_start) - tf->adam_busy;
}

static void join_lanes(zt_engine *e, twin_flow *tf) {
    for (int i = 0; i < 3; i++) {
        pthread_join(tf->lanes[i], NULL);
        zt_clock_after(tf->end_at[i]); /* a join waits for the last of them */
    }
    pthread_mutex_destroy(&tf->mu);
    pthread_cond_destroy(&tf->cv);
    free(tf->d2h_at);
    free(tf->adam_at);
    free(tf->h2d_at);
    record_lanes(e, tf, zt_clock_now());
}

void twin_update(zt_engine *e, twin_flow *tf, double t0, const zt_adam_step *st) {
    int threads = tf->nchunks > 0;
    tf->t_start = t0;
    twin_go(tf, st);
    double td0 = zt_clock_now();
    device_adam(e, *st);
    double td1 = zt_clock_now();
    if (e->host_lo) zt_trace_complete(e->trace, ZT_LANE_MAIN, "device adam", td0, td1);
    zt_engine_timing *tm = &e->timing;
    tm->device_adam = td1 - td0;
    if (threads && may_defer(e)) { /* the next step waits for the host part where it needs it */
        e->pending = tf;
        tm->optimizer = td1 - t0;
        return;
    }
    if (threads) join_lanes(e, tf);
    /* parameters on NVMe: the host part's updated values go to the swap file */
    if (threads && e->param_nvme) engine_params_store(e, e->host_lo, e->host_params16, e->host_n);
    double t1 = zt_clock_now();
    tm->optimizer = t1 - t0;
    tm->device_idle = t1 - td1;
    if (threads && t1 > td1 + 1e-6) zt_trace_complete(e->trace, ZT_LANE_MAIN, "device idle (host part)", td1, t1);
    free(tf);
}

/* chunks whose updated parameters are in place: sent up, or written straight into the offloaded
 * shard by the CPU Adam */
static const size_t *ready_counter(const zt_engine *e, const twin_flow *tf) {
    return e->params_on_host ? &tf->adam_done : &tf->h2d_done;
}

/* waits (timed and traced as device idle) until a lane's counter of finished chunks reaches target */
static void wait_lanes(zt_engine *e, const char *what, const size_t *counter, size_t target) {
    twin_flow *tf = e->pending;
    pthread_mutex_lock(&tf->mu);
    double t0 = zt_clock_now();
    int waited = *counter < target;
    twin_wait_count(tf, counter, target);
    pthread_mutex_unlock(&tf->mu);
    double t1 = zt_clock_now();
    if (!waited && t1 <= t0) return; /* neither the process nor its clock waited */
    e->timing.device_idle += t1 - t0;
    zt_trace_complete(e->trace, ZT_LANE_MAIN, what, t0, t1);
}

void twin_settle(zt_engine *e) {
    twin_flow *tf = e->pending;
    if (!tf) return;
    wait_lanes(e, "wait for the host part (all)", ready_counter(e, tf), tf->nchunks);
    double t0 = zt_clock_now();
    join_lanes(e, tf);
    zt_trace_complete(e->trace, ZT_LANE_MAIN, "host lanes joined", t0, zt_clock_now());
    e->pending = NULL;
    free(tf);
}

/* the last chunk holding optimizer offsets [a, b), or (size_t)-1 when none does */
static size_t last_chunk(const zt_engine *e, size_t a, size_t b) {
    size_t end = min_sz(b, e->lay.opt_hi - e->lay.opt_lo);
    if (end <= max_sz(a, e->host_lo)) return (size_t)-1;
    return (end - 1 - e->host_lo) / e->host_chunk;
}

void twin_wait_params(zt_engine *e, size_t a, size_t b) {
    size_t c = last_chunk(e, a, b);
    if (!e->pending || c == (size_t)-1) return;
    wait_lanes(e, "wait for the host part's parameters", ready_counter(e, e->pending), c + 1);
    if (c + 1 == e->pending->nchunks) twin_settle(e); /* the last chunk: the lanes are finishing */
}

void twin_wait_grads_read(zt_engine *e) {
    if (e->pending) wait_lanes(e, "wait for the gradients to be read", &e->pending->d2h_done, e->pending->nchunks);
}
