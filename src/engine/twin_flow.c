/* twin_flow.c — Twin-Flow, the optimizer split between host and device (engine.h has the split):
 * the host part's buffers, ratio auto (calibrated at start), and the split update.
 *
 * The step: the host part runs on three threads, the device part on the caller's, all at once:
 *   D2H lane         the host part's gradients down, chunk by chunk (into host_grad), never waiting
 *   host Adam lane   SIMD CPU Adam of chunk c once its gradients are down
 *   H2D lane         chunk c's updated parameters up as soon as the CPU Adam has finished it
 *   caller           device Adam of [split, opt_hi)
 * so the H2D of chunk c overlaps the CPU Adam of chunk c+1 and the D2H of chunk c+2 (ZeRO-Offload's
 * pipeline), and the whole host pipeline overlaps the device Adam. On the CPU backend the "device"
 * is host memory and be->copy a memcpy, but the code path is the same. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_adam.h"
#include "engine/engine_internal.h"

/* ---------------------------------------------------------------- split and host buffers */

/* host_n for ratio r of n elements: round(r n) to a multiple of ZT_TWIN_ALIGN (all of n at r = 1) */
static size_t split_elements(size_t n, double r) {
    if (r >= 1.0) return n;
    size_t x = (size_t)llround(r * (double)n);
    x = (x + ZT_TWIN_ALIGN / 2) / ZT_TWIN_ALIGN * ZT_TWIN_ALIGN;
    return min_sz(x, n);
}

static void *host_buf(zt_engine *e, size_t bytes, int transfer, int category) {
    if (bytes == 0) bytes = 64;
    void *p;
    if (transfer && e->host_pinned) {
        p = e->be->host_alloc(bytes);
    } else {
        size_t sz = (bytes + 63) & ~(size_t)63;
        p = aligned_alloc(64, sz);
        if (p) memset(p, 0, sz);
    }
    if (p) e->mem.host[category] += bytes;
    return p;
}

static void host_buf_free(zt_engine *e, void *p, int transfer) {
    if (!p) return;
    if (transfer && e->host_pinned) e->be->host_free(p);
    else free(p);
}

/* Transfer buffers (gradients down, parameters up) are pinned when pin_memory asks; m and v are
 * only touched by the CPU, and so is the 16-bit backends' master (the fp32 backends' master is
 * the H2D source itself). */
int twin_alloc(zt_engine *e) {
    int fp32 = e->be->compute_dtype == ZT_F32;
    size_t n = e->host_n, E = esz(e);
    e->host_pinned = e->off.pin_memory;
    /* chunks of n/8 (so the CPU Adam starts after an eighth of the D2H), at least 64 Ki elements
     * (long enough to amortise a copy's start-up) and at most 1 Mi (4 MiB of fp32 in flight) */
    size_t chunk = (n / 8 + ZT_TWIN_ALIGN - 1) / ZT_TWIN_ALIGN * ZT_TWIN_ALIGN;
    e->host_chunk = max_sz(min_sz(max_sz(chunk, (size_t)1 << 16), (size_t)1 << 20), 1);
    e->host_master = host_buf(e, n * sizeof(float), fp32, ZT_MEM_OPTIM);
    e->host_m = host_buf(e, n * sizeof(float), 0, ZT_MEM_OPTIM);
    e->host_v = host_buf(e, n * sizeof(float), 0, ZT_MEM_OPTIM);
    e->host_grad = host_buf(e, n * E, 1, ZT_MEM_GRADS);
    if (!fp32) {
        e->host_grad32 = host_buf(e, e->host_chunk * sizeof(float), 0, ZT_MEM_GRADS);
        e->host_params16 = host_buf(e, n * E, 1, ZT_MEM_COMM);
    }
    if (!e->host_master || !e->host_m || !e->host_v || !e->host_grad || (!fp32 && (!e->host_grad32 || !e->host_params16)))
        return -1;
    return 0;
}

void twin_free(zt_engine *e) {
    int fp32 = e->be->compute_dtype == ZT_F32;
    host_buf_free(e, e->host_master, fp32);
    host_buf_free(e, e->host_m, 0);
    host_buf_free(e, e->host_v, 0);
    host_buf_free(e, e->host_grad, 1);
    host_buf_free(e, e->host_grad32, 0);
    host_buf_free(e, e->host_params16, 1);
}

/* ---------------------------------------------------------------- ratio auto */

/* The ratio in effect (auto: chosen by twin_ratio.c, the same on every rank) and the host part's size.
 * A bound that decided auto is kept when the split is rounded to ZT_TWIN_ALIGN: the host part is
 * rounded down under the host-memory bound, up under the device-memory bound. */
int twin_plan(zt_engine *e, zt_err *err) {
    if (!e->off.enabled) return 0;
    size_t n = e->lay.opt_hi - e->lay.opt_lo;
    int bound = TWIN_BOUND_SPEED;
    e->offload_ratio = e->off.ratio;
    if (e->off.ratio < 0 && twin_choose_ratio(e, &e->offload_ratio, &bound, err)) return -1;
    e->host_n = split_elements(n, e->offload_ratio);
    double exact = e->offload_ratio * (double)n;
    if (bound == TWIN_BOUND_HOST && (double)e->host_n > exact && e->host_n >= ZT_TWIN_ALIGN) e->host_n -= ZT_TWIN_ALIGN;
    if (bound == TWIN_BOUND_DEVICE && (double)e->host_n < exact) e->host_n = min_sz(e->host_n + ZT_TWIN_ALIGN, n);
    return 0;
}

/* ---------------------------------------------------------------- the split update */

static float decay_of(const zt_engine *e, const zt_param_info *p) {
    return (p->decay || e->opt.decay_all_params) ? e->opt.weight_decay : 0.0f;
}


static void chunk_range(const twin_flow *tf, size_t c, size_t *a, size_t *b) {
    *a = c * tf->e->host_chunk;
    *b = min_sz(tf->e->host_n, *a + tf->e->host_chunk);
}

/* a lane has finished `chunks` chunks: tell the lanes waiting on it */
static void publish(twin_flow *tf, size_t *counter, size_t chunks) {
    pthread_mutex_lock(&tf->mu);
    *counter = chunks;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

/* one chunk's transfer on the backend's stream for that direction, timed and traced on its lane */
static void timed_transfer(twin_flow *tf, int lane, const char *what, void *dst, const void *src, size_t bytes,
                           zt_copy_kind kind, double *busy) {
    double t0 = zt_now();
    tf->e->be->transfer(dst, src, bytes, kind);
    double t1 = zt_now();
    *busy += t1 - t0;
    zt_trace_complete(tf->e->trace, lane, what, t0, t1);
}

/* host-adam lane: CPU Adam of each chunk once its gradients are down, per tensor piece (weight decay
 * differs per tensor); 16-bit backends widen the gradients first and write the rounded params */
static void *host_adam_lane(void *arg) {
    twin_flow *tf = arg;
    zt_engine *e = tf->e;
    const zt_param_table *tab = e->table;
    int fp32 = e->be->compute_dtype == ZT_F32;
    for (size_t c = 0; c < tf->nchunks; c++) {
        pthread_mutex_lock(&tf->mu);
        while (!tf->go || tf->d2h_done <= c) pthread_cond_wait(&tf->cv, &tf->mu);
        pthread_mutex_unlock(&tf->mu);
        double t0 = zt_now();
        size_t a, b;
        chunk_range(tf, c, &a, &b);
        const float *g = (const float *)e->host_grad + a;
        if (!fp32) {
            zt_cpu_to_f32(e->host_grad32, at(e, e->host_grad, a), b - a, e->be->compute_dtype);
            g = e->host_grad32;
        }
        for (int i = 0; i < tab->count; i++) {
            const zt_param_info *p = &tab->params[i];
            size_t x = max_sz(p->offset, e->lay.opt_lo + a), y = min_sz(p->offset + p->numel, e->lay.opt_lo + b);
            if (y <= x) continue;
            size_t off = x - e->lay.opt_lo;
            zt_adam_step st = tf->st;
            st.weight_decay = decay_of(e, p);
            zt_cpu_adamw(e->host_master + off, e->host_m + off, e->host_v + off, g + (off - a), y - x, &st,
                         fp32 ? NULL : at(e, e->host_params16, off), e->be->compute_dtype, e->off.host_threads);
        }
        double t1 = zt_now();
        tf->adam_busy += t1 - t0;
        zt_trace_complete(e->trace, ZT_LANE_HOST_ADAM, "host adam", t0, t1);
        publish(tf, &tf->adam_done, c + 1);
    }
    return NULL;
}

/* D2H lane: brings every chunk's gradients down in order, as fast as the link allows (host_grad
 * holds them all, so it never waits for the CPU Adam) */
static void *d2h_lane(void *arg) {
    twin_flow *tf = arg;
    zt_engine *e = tf->e;
    size_t E = esz(e);
    for (size_t c = 0; c < tf->nchunks; c++) {
        size_t a, b;
        chunk_range(tf, c, &a, &b);
        timed_transfer(tf, ZT_LANE_D2H, "D2H grads", at(e, e->host_grad, a), at(e, e->grad_shard, a), (b - a) * E,
                       ZT_D2H, &tf->d2h_busy);
        publish(tf, &tf->d2h_done, c + 1);
    }
    return NULL;
}

/* H2D lane: sends each chunk's updated parameters up as soon as the CPU Adam has finished it; on
 * its own stream, so it runs alongside the D2H of later chunks and the device Adam */
static void *h2d_lane(void *arg) {
    twin_flow *tf = arg;
    zt_engine *e = tf->e;
    int fp32 = e->be->compute_dtype == ZT_F32;
    size_t E = esz(e);
    for (size_t c = 0; c < tf->nchunks; c++) {
        pthread_mutex_lock(&tf->mu);
        while (tf->adam_done <= c) pthread_cond_wait(&tf->cv, &tf->mu);
        pthread_mutex_unlock(&tf->mu);
        size_t a, b;
        chunk_range(tf, c, &a, &b);
        const void *src = fp32 ? (const void *)(e->host_master + a) : at(e, e->host_params16, a);
        timed_transfer(tf, ZT_LANE_H2D, "H2D params", params_at_opt(e, a), src, (b - a) * E, ZT_H2D, &tf->h2d_busy);
    }
    return NULL;
}

/* device Adam of [opt_lo + host_n, opt_hi), one call per tensor piece */
static void device_adam(zt_engine *e, zt_adam_step st) {
    const zt_backend *be = e->be;
    int fp32 = be->compute_dtype == ZT_F32;
    size_t split = e->lay.opt_lo + e->host_n;
    for (int i = 0; i < e->table->count; i++) {
        const zt_param_info *p = &e->table->params[i];
        size_t a = max_sz(p->offset, split), b = min_sz(p->offset + p->numel, e->lay.opt_hi);
        if (b <= a) continue;
        size_t off = a - e->lay.opt_lo, doff = a - split;
        st.weight_decay = decay_of(e, p);
        be->adamw(e->master + doff, e->adam_m + doff, e->adam_v + doff, at(e, e->grad_shard, off),
                  fp32 ? NULL : params_at_opt(e, off), b - a, &st);
    }
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
    e->be->synchronize();
    pthread_mutex_init(&tf->mu, NULL);
    pthread_cond_init(&tf->cv, NULL);
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
    tf->go = 1;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

void twin_update(zt_engine *e, twin_flow *tf, double t0, const zt_adam_step *st) {
    int threads = tf->nchunks > 0;
    twin_go(tf, st);
    double td0 = zt_now();
    device_adam(e, *st);
    double td1 = zt_now();
    if (e->lay.opt_hi > e->lay.opt_lo + e->host_n) zt_trace_complete(e->trace, ZT_LANE_MAIN, "device adam", td0, td1);
    if (threads) {
        for (int i = 0; i < 3; i++) pthread_join(tf->lanes[i], NULL);
        pthread_mutex_destroy(&tf->mu);
        pthread_cond_destroy(&tf->cv);
    }
    double t1 = zt_now();
    zt_engine_timing *tm = &e->timing;
    tm->device_adam = td1 - td0;
    tm->host_adam = tf->adam_busy;
    tm->d2h = tf->d2h_busy;
    tm->h2d = tf->h2d_busy;
    tm->optimizer = t1 - t0;
    tm->device_idle = t1 - td1;
    tm->host_idle = threads ? (t1 - t0) - tf->adam_busy : 0;
    if (threads && t1 > td1 + 1e-6) zt_trace_complete(e->trace, ZT_LANE_MAIN, "device idle (host part)", td1, t1);
}

