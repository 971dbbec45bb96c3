/* twin_flow.c — Twin-Flow, the optimizer split between host and device (engine.h has the split):
 * the host part's buffers, ratio auto (calibrated at start, twin_ratio.c), and the split update.
 *
 * The step: the host part runs on three threads, the device part on the caller's, all at once:
 *   D2H lane         the host part's gradients down, chunk by chunk (into host_grad), never waiting
 *   host Adam lane   SIMD CPU Adam of chunk c once its gradients are down
 *   H2D lane         chunk c's updated parameters up as soon as the CPU Adam has finished it
 *   caller           device Adam of [opt_lo, split)
 * so the H2D of chunk c overlaps the CPU Adam of chunk c+1 and the D2H of chunk c+2 (ZeRO-Offload's
 * pipeline), and the whole host pipeline overlaps the device Adam. On the CPU backend the "device"
 * is host memory and be->copy a memcpy, but the code path is the same. The copy lanes call the
 * backend, so they bind to its device first (backend.h: bind_thread); the host Adam lane does not.
 *
 * offload_optimizer.delayed_update (ZeRO-Offload's "one-step delayed parameter update", DPU): after
 * delayed_update_warmup steps (the paper starts it after a few dozen, once the gradients change
 * slowly; 40 here by default), the CPU Adam of step t runs during step t+1's forward and backward,
 * which use the host part's parameters of step t-1; the H2D lane is held until step t+1's update
 * releases it, and the host part's values of step t go up alongside step t+1's norm and device Adam,
 * chunk by chunk ahead of step t+1's CPU Adam, which writes the buffer they go up from.
 * DeepSpeed has no key for it (the paper's DPU never became a setting; ZenFlow's overlap_step does it
 * for its own split of "unimportant" gradients), so the key sits under offload_optimizer beside
 * overlap_step, which stays exact. Only the host part lags: the device part updates as without it.
 * The clip coefficient is each step's own (the norm of step t's gradients scales step t's update),
 * so the delay moves where the host part's update lands, not what it computes. Whatever must see
 * settled state (a checkpoint save, reading optimizer state, a skipped step) drains the pending
 * update: waits for it and puts its parameters in place. A drain changes what the next step computes,
 * so it must happen at the same steps in every run that is compared: a save step drains in the run
 * that saved and the run resumed from it starts with nothing pending, so resumes continue exactly.
 * Which elements lag must not depend on the layout: with several ranks at ZeRO stages 1-3 each rank's
 * host part is the tail of its own shard, so twin_open refuses a ratio other than 1 there (config
 * checks refuse it with tensor parallelism); offload_param and NVMe are refused (config_checks.c).
 *
 * The host part's state (struct twin_host: the split, the host buffers, the swap file of its states
 * with offload_optimizer nvme, the lanes still running) is this file's; the engine hands it the
 * shared facts at twin_open and the device part's buffers at twin_alloc (twin_flow.h). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/twin_flow.h"
#include "engine/infinity.h"
#include "util/test_hooks.h"
#include "util/clock.h"

/* Optimizer offsets [host_lo, host_lo + host_n) (from opt_lo: the tail of this rank's range) are
 * updated on the host, [0, host_lo) on the device. Arrays of the host part (host_*, chunks) are
 * indexed from host_lo. */
struct twin_host {
    engine_facts f;
    twin_buffers b;        /* the engine's (twin_alloc) */
    size_t host_n, host_lo;
    double offload_ratio;  /* the ratio in effect (auto: the chosen one) */
    float *host_master, *host_m, *host_v; /* [host_n] host memory; NULL with the states on NVMe */
    void *host_grad;       /* [host_n] gradients, compute dtype (D2H landing) */
    void *host_params16;   /* [host_n] updated params in compute dtype (H2D source), where twin_has_out_buffer */
    size_t host_chunk;     /* pipeline chunk, elements */
    int host_pinned;       /* transfer buffers came from be->host_alloc */
    inf_states *nvme;      /* offload_optimizer nvme: master, m and v in a swap file (engine_infinity.c) */
    twin_flow *pending;    /* the last update's host lanes, still running (overlap_step), or NULL */
    /* grads_on_host (twin_grads_*): host_grad holds the last step's gradients until the step's first
     * landing overwrites them; the last micro-step's landings sum each ZT_SUMSQ_CHUNK chunk's squares
     * as the chunk becomes final, so the norm adds sq_part in chunk order instead of reading host_grad */
    int grads_stale;       /* the last update's CPU Adam may still read host_grad */
    size_t first_landed, last_landed; /* elements landed this step by its first / last micro-step */
    size_t sq_chunks;      /* ZT_SUMSQ_CHUNK chunks of host_grad */
    double *sq_part;       /* [sq_chunks] a final chunk's sum of squares (zt_cpu_sumsq_g's per-chunk sum) */
    uint32_t *sq_landed;   /* [sq_chunks] its elements landed by the last micro-step so far */
};

/* one update's host lanes */
struct twin_flow {
    twin_host *t;
    zt_adam_step st;
    long step;                  /* the step being updated (the NVMe swap names it in errors) */
    size_t nchunks;             /* 0: nothing on the host, no threads */
    pthread_t lanes[3];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;                     /* st is set: the CPU Adam may start */
    int delayed;                /* delayed_update: the H2D lane waits until the next step releases it */
    struct twin_flow *prev;     /* the last step's delayed flow, whose H2D lane reads the buffer this
                                   one's CPU Adam writes, chunk by chunk; freed with this one */
    int h2d_held;               /* the H2D lane may not start yet */
    double release_at;          /* when it was released */
    size_t d2h_done, adam_done, h2d_done; /* chunks */
    /* when each chunk was published on the run's clock (util/clock.h), per counter: a thread that
     * waited for chunk c of a counter continues from that time (the virtual clock's handoff) */
    double *d2h_at, *adam_at, *h2d_at; /* [nchunks] */
    double start_at, go_at;     /* the lanes were started; st was set */
    double end_at[3];           /* each lane's time when it finished */
    double adam_busy, d2h_busy, h2d_busy;
    double t_start;             /* when the update started (for the optimizer's wall time) */
};

static size_t esz(const twin_host *t) { return facts_esz(&t->f); }
static void *at(const twin_host *t, const void *base, size_t elems) { return facts_at(&t->f, base, elems); }

/* where the compute-dtype parameters of optimizer offset off live */
static void *params_at_opt(const twin_host *t, size_t off) {
    return t->f.opt.stage == 3 ? at(t, t->b.params, off) : at(t, t->b.params, t->f.lay.opt_lo + off);
}

size_t twin_split(const twin_host *t) { return t->host_lo; }
size_t twin_host_elems(const twin_host *t) { return t->host_n; }
double twin_ratio_in_effect(const twin_host *t) { return t->offload_ratio; }
int twin_pinned(const twin_host *t) { return t->host_pinned; }

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

static void *host_buf(twin_host *t, size_t bytes, int transfer, int category) {
    return facts_host_alloc(&t->f, bytes, transfer && t->host_pinned, category);
}

static void host_buf_free(twin_host *t, void *p, int transfer) { facts_host_free(&t->f, p, transfer && t->host_pinned); }

/* Where the host part's updated parameters go: straight into the offloaded parameter shard
 * (offload_param: nothing goes up), else into a compute-dtype buffer for the H2D lane — needed on
 * 16-bit backends, and with NVMe (the fp32 master is only in a staging buffer while its group is
 * updated). Only the fp32 backends' in-memory master is itself the H2D source. */
int twin_has_out_buffer(const engine_facts *f) {
    if (f->off.param_device == ZT_PARAM_ON_NVME) return 1; /* written to the parameter swap file after the update */
    return f->off.param_device == ZT_PARAM_ON_DEVICE && (f->be->compute_dtype != ZT_F32 || f->off.nvme_path);
}

static void *twin_host_out(twin_host *t, size_t off) {
    if (t->b.params_on_host && !t->b.params_on_nvme) return params_at_opt(t, t->host_lo + off);
    return t->host_params16 ? at(t, t->host_params16, off) : NULL;
}

/* Transfer buffers (gradients down, parameters up) are pinned when pin_memory asks; m and v are
 * only touched by the CPU, and so is the 16-bit backends' master (the fp32 backends' master is
 * the H2D source itself). With NVMe, master, m and v are in the swap file (engine_infinity.c). */
int twin_alloc(twin_host *t, const twin_buffers *b) {
    t->b = *b;
    if (!t->host_n) return 0; /* no host part: the device Adam only */
    int fp32 = t->f.be->compute_dtype == ZT_F32, nvme = t->f.off.nvme_path != NULL;
    size_t n = t->host_n, E = esz(t);
    t->host_pinned = t->f.off.pin_memory;
    /* chunks of n/8 (so the CPU Adam starts after an eighth of the D2H), at least 64 Ki elements
     * (long enough to amortise a copy's start-up) and at most 1 Mi (4 MiB of fp32 in flight) */
    size_t chunk = (n / 8 + ZT_TWIN_ALIGN - 1) / ZT_TWIN_ALIGN * ZT_TWIN_ALIGN;
    t->host_chunk = max_sz(min_sz(max_sz(chunk, (size_t)1 << 16), (size_t)1 << 20), 1);
    if (!nvme) {
        t->host_master = host_buf(t, n * sizeof(float), fp32 && !t->b.params_on_host, ZT_MEM_OPTIM);
        t->host_m = host_buf(t, n * sizeof(float), 0, ZT_MEM_OPTIM);
        t->host_v = host_buf(t, n * sizeof(float), 0, ZT_MEM_OPTIM);
        if (!t->host_master || !t->host_m || !t->host_v) return -1;
    }
    t->host_grad = host_buf(t, n * E, 1, ZT_MEM_GRADS);
    if (t->b.grads_on_host) { /* zero_formula.h: zt_zero_grads_host_bytes counts these for estimate */
        t->sq_chunks = (n + ZT_SUMSQ_CHUNK - 1) / ZT_SUMSQ_CHUNK;
        t->sq_part = host_buf(t, t->sq_chunks * sizeof *t->sq_part, 0, ZT_MEM_GRADS);
        t->sq_landed = host_buf(t, t->sq_chunks * sizeof *t->sq_landed, 0, ZT_MEM_GRADS);
        if (!t->sq_part || !t->sq_landed) return -1;
    }
    if (twin_has_out_buffer(&t->f)) t->host_params16 = host_buf(t, n * E, 1, ZT_MEM_COMM);
    if (!t->host_grad || (twin_has_out_buffer(&t->f) && !t->host_params16)) return -1;
    return 0;
}

int twin_states_missing(const twin_host *t) {
    return t->host_n && (!t->host_master || !t->host_m || !t->host_v || !t->host_grad ||
                         (twin_has_out_buffer(&t->f) && !t->host_params16));
}

int twin_open_nvme(twin_host *t, zt_err *err) {
    t->nvme = inf_states_open(&t->f, t->host_n, err);
    return t->nvme ? 0 : -1;
}

void twin_close(twin_host *t) {
    if (!t) return;
    int fp32 = t->f.be->compute_dtype == ZT_F32;
    host_buf_free(t, t->host_master, fp32 && !t->b.params_on_host);
    host_buf_free(t, t->host_m, 0);
    host_buf_free(t, t->host_v, 0);
    host_buf_free(t, t->host_grad, 1);
    host_buf_free(t, t->host_params16, 1);
    host_buf_free(t, t->sq_part, 0);
    host_buf_free(t, t->sq_landed, 0);
    inf_states_close(t->nvme);
    free(t);
}

/* the host part's state of `which`, in host memory (NULL on NVMe) */
static float *state_host(twin_host *t, zt_opt_state which) {
    return which == ZT_STATE_MASTER ? t->host_master : which == ZT_STATE_ADAM_M ? t->host_m : t->host_v;
}

void twin_state_rw(twin_host *t, long step, zt_opt_state which, size_t off, size_t n, float *buf, int write) {
    if (t->nvme) {
        inf_states_rw(t->nvme, step, which, off, n, buf, write);
    } else if (write) {
        memcpy(state_host(t, which) + off, buf, n * sizeof(float));
    } else {
        memcpy(buf, state_host(t, which) + off, n * sizeof(float));
    }
}

float *twin_state_span(twin_host *t, zt_opt_state which, size_t off) {
    return t->nvme ? NULL : state_host(t, which) + off;
}

void twin_nvme_stats(const twin_host *t, zt_engine_nvme *out) { inf_states_stats(t->nvme, out); }

size_t twin_init_piece(const twin_host *t) { return t->nvme ? inf_states_group(t->nvme) : 1; }

int twin_init_master(twin_host *t, size_t off, size_t n, const float *init, zt_err *err) {
    (void)err;
    if (!t->f.off.nvme_path) {
        if (!zt_clock_costs_only()) memcpy(t->host_master + off, init, n * sizeof(float));
        return 0;
    }
    inf_states_rw(t->nvme, 0, ZT_STATE_MASTER, off, n, (float *)init, 1); /* the start */
    return 0;
}

/* ---------------------------------------------------------------- ratio auto */

/* The ratio in effect (auto: chosen by twin_ratio.c, the same on every rank) and the host part's size.
 * A bound that decided auto is kept when the split is rounded to ZT_TWIN_ALIGN: the host part is
 * rounded down under the host-memory bound, up under the device-memory bound. */
twin_host *twin_open(const engine_facts *f, zt_err *err) {
    twin_host *t = zt_xcalloc(1, sizeof *t);
    t->f = *f;
    size_t n = t->f.lay.opt_hi - t->f.lay.opt_lo;
    t->host_lo = n; /* everything on the device unless offloaded */
    if (!t->f.off.enabled) return t;
    int bound = TWIN_BOUND_SPEED;
    t->offload_ratio = t->f.off.ratio;
    if (t->f.off.ratio < 0 && twin_choose_ratio(&t->f, &t->offload_ratio, &bound, err)) {
        free(t);
        return NULL;
    }
    t->host_n = split_elements(n, t->offload_ratio);
    double exact = t->offload_ratio * (double)n;
    if (bound == TWIN_BOUND_HOST && (double)t->host_n > exact && t->host_n >= ZT_TWIN_ALIGN) t->host_n -= ZT_TWIN_ALIGN;
    if (bound == TWIN_BOUND_DEVICE && (double)t->host_n < exact) t->host_n = min_sz(t->host_n + ZT_TWIN_ALIGN, n);
    t->host_lo = n - t->host_n; /* the host part is the tail */
    if (t->f.off.delayed_update && t->f.opt.stage >= 1 && t->f.lay.world > 1 && t->host_lo) {
        zt_fail(err, "offload_optimizer.delayed_update on %d ranks at ZeRO stage %d needs ratio 1 (the ratio in "
                        "effect is %.3f): each rank's host part is the tail of its own shard, so which parameters lag "
                        "would depend on the rank count", t->f.lay.world, t->f.opt.stage, t->offload_ratio);
        free(t);
        return NULL;
    }
    return t;
}

/* ---------------------------------------------------------------- the split update */

static float decay_of(const twin_host *t, const zt_param_info *p) {
    return (p->decay || t->f.opt.decay_all_params) ? t->f.opt.weight_decay : 0.0f;
}


static void twin_chunk_range(const twin_flow *tf, size_t c, size_t *a, size_t *b) {
    *a = c * tf->t->host_chunk;
    *b = min_sz(tf->t->host_n, *a + tf->t->host_chunk);
}

static double *published_at(twin_flow *tf, const size_t *counter) {
    return counter == &tf->d2h_done ? tf->d2h_at : counter == &tf->adam_done ? tf->adam_at : tf->h2d_at;
}

/* a lane has finished `chunks` chunks: tell the lanes waiting on it, and when (util/clock.h) */
static void twin_publish(twin_flow *tf, size_t *counter, size_t chunks) {
    double now = zt_clock_now(), *at = published_at(tf, counter);
    pthread_mutex_lock(&tf->mu);
    for (size_t c = *counter; c < chunks; c++) at[c] = now;
    *counter = chunks;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

static void twin_wait_count(twin_flow *tf, const size_t *counter, size_t target) {
    while (*counter < target) pthread_cond_wait(&tf->cv, &tf->mu);
    if (target) zt_clock_after(published_at(tf, counter)[target - 1]);
}

static void twin_wait_go(twin_flow *tf) {
    while (!tf->go) pthread_cond_wait(&tf->cv, &tf->mu);
    zt_clock_after(tf->go_at);
}

/* one chunk's transfer on the backend's stream for that direction, timed and traced on its lane */
static void timed_transfer(twin_flow *tf, int lane, const char *what, void *dst, const void *src, size_t bytes,
                           zt_copy_kind kind, double *busy) {
    double t0 = zt_clock_now();
    tf->t->f.be->transfer(dst, src, bytes, kind);
    double t1 = zt_clock_now();
    *busy += t1 - t0;
    zt_trace_complete(*tf->t->f.trace, lane, what, t0, t1);
}

static void twin_adam_span(const twin_host *t, const zt_adam_step *st, size_t off, size_t n, float *p, float *m, float *v,
                    const void *g, void *out) {
    const zt_param_table *tab = t->f.table;
    int fp32 = t->f.be->compute_dtype == ZT_F32;
    for (int i = 0; i < tab->count; i++) {
        const zt_param_info *q = &tab->params[i];
        size_t first = t->f.lay.opt_lo + t->host_lo + off; /* the span's first element in the flat vector */
        size_t x = max_sz(q->offset, first), y = min_sz(q->offset + q->numel, first + n);
        if (y <= x) continue;
        size_t d = x - first; /* into the span */
        zt_adam_step sti = *st;
        sti.weight_decay = decay_of(t, q);
        void *o = out ? (char *)out + d * esz(t) : NULL;
        /* read and write master, m, v; read the gradient, write the parameter (on a virtual clock) */
        zt_clock_host_work(ZT_WORK_ADAM, (double)(y - x), (double)(y - x) * (24.0 + 2.0 * (double)esz(t)),
                           t->f.off.host_threads);
        if (zt_clock_costs_only()) continue;
        zt_cpu_adamw_g(p + d, m + d, v + d, (const char *)g + d * esz(t), t->f.be->compute_dtype, y - x, &sti,
                       fp32 ? NULL : o, t->f.be->compute_dtype, t->f.off.host_threads, ZT_ADAM_ISA_BEST);
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
    return tf->step;
}

/* the chunks of host-part elements [lo, hi), each once its gradients are down */
static void nvme_update(void *ctx, size_t lo, size_t hi, float *master, float *m, float *v) {
    twin_flow *tf = ctx;
    twin_host *t = tf->t;
    for (size_t c = lo / t->host_chunk; c * t->host_chunk < hi; c++) {
        pthread_mutex_lock(&tf->mu);
        twin_wait_count(tf, &tf->d2h_done, c + 1);
        pthread_mutex_unlock(&tf->mu);
        size_t ca, cb;
        twin_chunk_range(tf, c, &ca, &cb);
        size_t a = max_sz(ca, lo), b = min_sz(cb, hi);
        twin_adam_span(t, &tf->st, a, b - a, master + (a - lo), m + (a - lo), v + (a - lo), at(t, t->host_grad, a),
                       twin_host_out(t, a));
    }
}

/* chunks wholly inside the groups done so far may go up */
static void nvme_group_done(void *ctx, size_t hi, int last, double t0, double t1) {
    twin_flow *tf = ctx;
    tf->adam_busy += t1 - t0;
    twin_publish(tf, &tf->adam_done, last ? tf->nchunks : hi / tf->t->host_chunk);
}

/* host-adam lane: CPU Adam of each chunk once its gradients are down; on 16-bit backends it reads
 * the 16-bit gradients as they came down and writes the rounded params (to the H2D buffer, or the
 * offloaded shard): no widening pass, no fp32 copy of the gradients */
static void *host_adam_lane(void *arg) {
    twin_flow *tf = arg;
    twin_host *t = tf->t;
    zt_clock_after(tf->start_at);
    zt_cpu_adam_report_threads(1); /* with a trace, each CPU Adam thread's busy time is on its own lane */
    if (t->f.off.nvme_path) {
        inf_states_update(t->nvme, &(inf_update_hooks){tf, nvme_wait_go, nvme_update, nvme_group_done});
        tf->end_at[0] = zt_clock_now();
        return NULL;
    }
    for (size_t c = 0; c < tf->nchunks; c++) {
        pthread_mutex_lock(&tf->mu);
        twin_wait_go(tf);
        twin_wait_count(tf, &tf->d2h_done, c + 1);
        pthread_mutex_unlock(&tf->mu);
        if (tf->prev) { /* the last step's delayed parameters of this chunk have gone up */
            pthread_mutex_lock(&tf->prev->mu);
            twin_wait_count(tf->prev, &tf->prev->h2d_done, c + 1);
            pthread_mutex_unlock(&tf->prev->mu);
        }
        double t0 = zt_clock_now();
        size_t a, b;
        twin_chunk_range(tf, c, &a, &b);
        twin_adam_span(t, &tf->st, a, b - a, t->host_master + a, t->host_m + a, t->host_v + a, at(t, t->host_grad, a),
                       twin_host_out(t, a));
        double t1 = zt_clock_now();
        tf->adam_busy += t1 - t0;
        facts_trace_host_adam(&t->f, "host adam", t0, t1, b - a);
        twin_publish(tf, &tf->adam_done, c + 1);
    }
    tf->end_at[0] = zt_clock_now();
    return NULL;
}

/* D2H lane: brings every chunk's gradients down in order, as fast as the link allows (host_grad
 * holds them all, so it never waits for the CPU Adam); with grads_on_host backward brought them
 * down already, and every chunk is there at once */
static void *d2h_lane(void *arg) {
    twin_flow *tf = arg;
    twin_host *t = tf->t;
    size_t E = esz(t);
    zt_backend_bind_thread(t->f.be);
    zt_clock_after(tf->start_at);
    if (t->b.grads_on_host) twin_publish(tf, &tf->d2h_done, tf->nchunks);
    for (size_t c = tf->d2h_done; c < tf->nchunks; c++) {
        size_t a, b;
        twin_chunk_range(tf, c, &a, &b);
        timed_transfer(tf, ZT_LANE_D2H, "D2H grads", at(t, t->host_grad, a), at(t, t->b.grad_shard, t->host_lo + a), (b - a) * E,
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
    twin_host *t = tf->t;
    size_t E = esz(t);
    tf->end_at[2] = tf->start_at;
    if (t->b.params_on_host) return NULL; /* the CPU Adam wrote them where they live */
    zt_backend_bind_thread(t->f.be);
    zt_clock_after(tf->start_at);
    pthread_mutex_lock(&tf->mu);
    twin_wait_go(tf); /* twin_go says whether this update is delayed */
    while (tf->h2d_held) pthread_cond_wait(&tf->cv, &tf->mu);
    if (tf->delayed) zt_clock_after(tf->release_at);
    pthread_mutex_unlock(&tf->mu);
    for (size_t c = 0; c < tf->nchunks; c++) {
        pthread_mutex_lock(&tf->mu);
        twin_wait_count(tf, &tf->adam_done, c + 1);
        pthread_mutex_unlock(&tf->mu);
        size_t a, b;
        twin_chunk_range(tf, c, &a, &b);
        const void *src = t->host_params16 ? at(t, t->host_params16, a) : (const void *)(t->host_master + a);
        timed_transfer(tf, ZT_LANE_H2D, "H2D params", params_at_opt(t, t->host_lo + a), src, (b - a) * E, ZT_H2D,
                       &tf->h2d_busy);
        twin_publish(tf, &tf->h2d_done, c + 1);
    }
    tf->end_at[2] = zt_clock_now();
    return NULL;
}

/* device Adam of [opt_lo, opt_lo + host_lo), one call per tensor piece */
static void device_adam(twin_host *t, zt_adam_step st) {
    const zt_backend *be = t->f.be;
    int fp32 = be->compute_dtype == ZT_F32;
    size_t split = t->f.lay.opt_lo + t->host_lo;
    for (int i = 0; i < t->f.table->count; i++) {
        const zt_param_info *p = &t->f.table->params[i];
        size_t a = max_sz(p->offset, t->f.lay.opt_lo), b = min_sz(p->offset + p->numel, split);
        if (b <= a) continue;
        size_t off = a - t->f.lay.opt_lo;
        st.weight_decay = decay_of(t, p);
        void *out = fp32 ? NULL : t->b.params_on_host ? at(t, t->b.dev_params_out, off) : params_at_opt(t, off);
        be->adamw(t->b.master + off, t->b.adam_m + off, t->b.adam_v + off, at(t, t->b.grad_shard, off), out, b - a, &st);
    }
    /* offloaded parameters: the device part's updated values go down into the shard */
    if (t->b.params_on_host && t->host_lo)
        t->b.params_store_from_device(t->b.owner, 0, fp32 ? (const void *)t->b.master : t->b.dev_params_out, t->host_lo);
    be->synchronize();
}

/* The host lanes start as soon as the gradients are final (the D2H needs no clip coefficient), the
 * CPU Adam once twin_go has set the step; the device part runs on this thread meanwhile. */
twin_flow *twin_start(twin_host *t) {
    twin_flow *tf = zt_xcalloc(1, sizeof *tf); /* freed by twin_update or, later, twin_settle */
    tf->t = t;
    tf->nchunks = t->host_n ? (t->host_n + t->host_chunk - 1) / t->host_chunk : 0;
    if (!tf->nchunks) return tf;
    pthread_t *th = tf->lanes;
    /* transfer() is not ordered after queued device work: the gradients must be complete first */
    if (!zt_test_hook_skip_sync()) t->f.be->synchronize();
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
    return tf;
}

static void twin_go(twin_flow *tf, const zt_adam_step *st, long step, int delayed) {
    if (!tf->nchunks) return;
    pthread_mutex_lock(&tf->mu);
    tf->st = *st;
    tf->step = step;
    tf->delayed = tf->h2d_held = delayed;
    tf->go_at = zt_clock_now();
    tf->go = 1;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

/* delayed_update: the held H2D lane of a delayed update may send the parameters up */
static void twin_release(twin_flow *tf) {
    pthread_mutex_lock(&tf->mu);
    if (tf->h2d_held) tf->release_at = zt_clock_now();
    tf->h2d_held = 0;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

static void wait_lanes(twin_host *t, const char *what, const size_t *counter, size_t target);

/* whether the update of step `step` is delayed (delayed_update, past the warm-up) */
static int delays(const twin_host *t, const twin_flow *tf, long step) {
    return t->f.off.delayed_update && tf->nchunks && step > t->f.off.delayed_warmup;
}

/* whether this engine's next step may start before the host lanes finish: not where the step ends
 * with an all-gather of everyone's updated parameters (stages 1-2 on several ranks), and not with
 * the parameters on NVMe (their host part is written back after the lanes) */
static int may_defer(const twin_host *t) {
    if (!t->f.off.overlap_step || t->b.params_on_nvme) return 0;
    return t->f.opt.stage == 0 || t->f.opt.stage == 3 || t->f.lay.world == 1;
}

/* the lanes' figures into the step's timing, once they are done */
static void record_lanes(twin_host *t, twin_flow *tf, double t1) {
    zt_engine_timing *tm = t->f.timing;
    tm->host_adam = tf->adam_busy;
    tm->d2h = tf->d2h_busy;
    tm->h2d = tf->h2d_busy;
    tm->host_idle = (t1 - tf->t_start) - tf->adam_busy;
}

/* the lanes have ended: their figures are the step's (the flow itself may still be a later one's prev) */
static void join_lanes(twin_host *t, twin_flow *tf) {
    for (int i = 0; i < 3; i++) {
        pthread_join(tf->lanes[i], NULL);
        zt_clock_after(tf->end_at[i]); /* a join waits for the last of them */
    }
    record_lanes(t, tf, zt_clock_now());
}

/* after join_lanes (or with no lanes): the flow, and the prev its host Adam lane waited on (at most
 * one: twin_update frees a flow's prev once that flow is joined, so the chain never grows with the steps) */
static void flow_free(twin_flow *tf) {
    if (tf->prev) flow_free(tf->prev);
    if (tf->nchunks) {
        pthread_mutex_destroy(&tf->mu);
        pthread_cond_destroy(&tf->cv);
        free(tf->d2h_at);
        free(tf->adam_at);
        free(tf->h2d_at);
    }
    free(tf);
}

void twin_update(twin_host *t, twin_flow *tf, double t0, const zt_adam_step *st, long step) {
    int threads = tf->nchunks > 0, delayed = delays(t, tf, step);
    tf->t_start = t0;
    /* a delayed update of the last step (released by twin_before_step) is sending its parameters up
     * from the buffer this step's CPU Adam writes: the CPU Adam of each chunk waits for that chunk's
     * H2D (host_adam_lane), and the last flow lives on as this one's prev until this one is joined */
    twin_flow *last = t->pending;
    tf->prev = last;
    twin_go(tf, st, step, delayed);
    double td0 = zt_clock_now();
    device_adam(t, *st);
    double td1 = zt_clock_now();
    if (t->host_lo) zt_trace_complete(*t->f.trace, ZT_LANE_MAIN, "device adam", td0, td1);
    zt_engine_timing *tm = t->f.timing;
    tm->device_adam = td1 - td0;
    if (last) { /* its parameters are in place before this update ends */
        wait_lanes(t, "wait for the delayed parameters", &last->h2d_done, last->nchunks);
        join_lanes(t, last);
        t->pending = NULL;
        if (last->prev) { /* its host Adam lane, which waited on the flow before it, has ended */
            flow_free(last->prev);
            last->prev = NULL;
        }
    }
    if (threads && (delayed || may_defer(t))) { /* the next step waits for the host part where it needs it,
                                                  or (delayed) uses its values of the last step */
        t->pending = tf;
        tm->optimizer = td1 - t0;
        return;
    }
    if (threads) join_lanes(t, tf);
    /* parameters on NVMe: the host part's updated values go to the swap file */
    if (threads && t->b.params_on_nvme) t->b.params_store(t->b.owner, t->host_lo, t->host_params16, t->host_n);
    double t1 = zt_clock_now();
    tm->optimizer = t1 - t0;
    tm->device_idle = t1 - td1;
    if (threads && t1 > td1 + 1e-6) zt_trace_complete(*t->f.trace, ZT_LANE_MAIN, "device idle (host part)", td1, t1);
    flow_free(tf);
}

/* chunks whose updated parameters are in place: sent up, or written straight into the offloaded
 * shard by the CPU Adam */
static const size_t *ready_counter(const twin_host *t, const twin_flow *tf) {
    return t->b.params_on_host ? &tf->adam_done : &tf->h2d_done;
}

/* waits (timed and traced as device idle) until a lane's counter of finished chunks reaches target */
static void wait_lanes(twin_host *t, const char *what, const size_t *counter, size_t target) {
    twin_flow *tf = t->pending;
    pthread_mutex_lock(&tf->mu);
    double t0 = zt_clock_now();
    int waited = *counter < target;
    twin_wait_count(tf, counter, target);
    pthread_mutex_unlock(&tf->mu);
    double t1 = zt_clock_now();
    if (!waited && t1 <= t0) return; /* neither the process nor its clock waited */
    t->f.timing->device_idle += t1 - t0;
    zt_trace_complete(*t->f.trace, ZT_LANE_MAIN, what, t0, t1);
}

void twin_before_step(twin_host *t) {
    twin_flow *tf = t ? t->pending : NULL;
    if (!tf || !tf->delayed) {
        twin_settle(t);
        return;
    }
    /* its CPU Adam ran during this step's forward and backward; its parameters go up during this update */
    wait_lanes(t, "wait for the delayed host adam", &tf->adam_done, tf->nchunks);
    twin_release(tf);
}

void twin_settle(twin_host *t) {
    if (!t) return;
    twin_flow *tf = t->pending;
    if (!tf) return;
    twin_release(tf); /* a delayed update drains here */
    wait_lanes(t, "wait for the host part (all)", ready_counter(t, tf), tf->nchunks);
    double t0 = zt_clock_now();
    join_lanes(t, tf);
    zt_trace_complete(*t->f.trace, ZT_LANE_MAIN, "host lanes joined", t0, zt_clock_now());
    t->pending = NULL;
    flow_free(tf);
}

/* the last chunk holding optimizer offsets [a, b), or (size_t)-1 when none does */
static size_t last_chunk(const twin_host *t, size_t a, size_t b) {
    size_t end = min_sz(b, t->f.lay.opt_hi - t->f.lay.opt_lo);
    if (end <= max_sz(a, t->host_lo)) return (size_t)-1;
    return (end - 1 - t->host_lo) / t->host_chunk;
}

void twin_wait_params(twin_host *t, size_t a, size_t b) {
    size_t c = last_chunk(t, a, b);
    if (!t->pending || t->pending->delayed || c == (size_t)-1) return; /* delayed: the last step's values are used */
    wait_lanes(t, "wait for the host part's parameters", ready_counter(t, t->pending), c + 1);
    if (c + 1 == t->pending->nchunks) twin_settle(t); /* the last chunk: the lanes are finishing */
}

void twin_wait_grads_read(twin_host *t) {
    if (t->pending) wait_lanes(t, "wait for the gradients to be read", &t->pending->d2h_done, t->pending->nchunks);
}

/* ---------------------------------------------------------------- gradients landed in host memory */

void twin_grads_begin_step(twin_host *t) {
    t->grads_stale = 1;
    t->first_landed = t->last_landed = 0;
    if (!zt_clock_costs_only()) memset(t->sq_landed, 0, t->sq_chunks * sizeof *t->sq_landed);
}

/* before the step's first write to host_grad: the last update's CPU Adam has read all of it (with
 * overlap_step it may still run; the forward has waited for its parameters, so this rarely waits).
 * No zeroing: the first micro-step's pieces cover the host part once and are written as adds into
 * zeros (twin_grads_land). */
void twin_grads_ready(twin_host *t) {
    if (!t->grads_stale) return;
    if (t->pending)
        wait_lanes(t, "wait for the host adam to read the gradients", &t->pending->adam_done, t->pending->nchunks);
    t->grads_stale = 0;
}

/* The squares of the chunks of [off, off + n) that this landing made final (every element of a chunk
 * landed by the last micro-step), each summed alone as zt_cpu_sumsq_g sums it: for one chunk its
 * total is 0.0 + the chunk's sum, which is that sum exactly (a sum of squares is +0 or more, or NaN). */
static void sum_final_chunks(twin_host *t, size_t off, size_t n) {
    size_t C = ZT_SUMSQ_CHUNK, c0 = off / C, c1 = (off + n - 1) / C;
    zt_dtype dt = t->f.be->compute_dtype;
#pragma omp parallel for schedule(static) if (c1 > c0)
    for (size_t c = c0; c <= c1; c++) { /* each chunk is one iteration's: no two write the same one */
        size_t lo = max_sz(off, c * C), hi = min_sz(off + n, (c + 1) * C), len = min_sz(C, t->host_n - c * C);
        t->sq_landed[c] += (uint32_t)(hi - lo);
        if (t->sq_landed[c] == len) t->sq_part[c] = zt_cpu_sumsq_g(at(t, t->host_grad, c * C), len, dt);
    }
}

/* Lands n values at off as the device's accumulate would (widened, fp32 add, rounded to nearest even).
 * The first micro-step's land into what is taken as zeros (zt_cpu_accumulate_into_zero_g: the same
 * add, bit for bit, without the zeroing pass or reading the old values); the last one's sum their
 * chunks' squares as they become final, on this (the gradient lane's) thread during backward. */
void twin_grads_land(twin_host *t, size_t off, const void *src, size_t n, int flags) {
    int first = flags & GRADS_LAND_FIRST, last = flags & GRADS_LAND_LAST;
    double E = (double)esz(t);
    /* read src (and dst unless first), write dst; then read the final values again for their squares */
    zt_clock_host_work(ZT_WORK_COPY, (double)n, (first ? 2.0 : 3.0) * n * E + (last ? n * E : 0), 0);
    t->first_landed += first ? n : 0;
    t->last_landed += last ? n : 0;
    if (zt_clock_costs_only() || n == 0) return;
    if (first) zt_cpu_accumulate_into_zero_g(at(t, t->host_grad, off), src, n, t->f.be->compute_dtype);
    else zt_cpu_accumulate_g(at(t, t->host_grad, off), src, n, t->f.be->compute_dtype);
    if (last) sum_final_chunks(t, off, n);
}

/* The device's sumsq of [off, off + n). The whole host part, once the last micro-step has landed all
 * of it: the chunk sums added in chunk order, as zt_cpu_sumsq_g adds them (the same total, bit for
 * bit); a part of it (tensor parallelism's split tensors) is summed from host_grad. */
double twin_grads_sumsq(twin_host *t, size_t off, size_t n) {
    twin_grads_ready(t);
    if (t->first_landed != t->host_n) { /* every landing of a training step's first micro-step covers it */
        if (t->first_landed) {
            fprintf(stderr, "zerotrain: error: internal: the step's first micro-step landed %zu of the %zu host "
                            "gradients\n", t->first_landed, t->host_n);
            abort();
        }
        if (!zt_clock_costs_only()) memset(t->host_grad, 0, t->host_n * esz(t)); /* nothing landed: no gradients */
        t->first_landed = t->host_n;
    }
    if (off == 0 && n == t->host_n && t->last_landed == n) {
        zt_clock_host_work(ZT_WORK_COPY, (double)t->sq_chunks, (double)t->sq_chunks * sizeof(double), 1);
        double total = 0.0;
        for (size_t c = 0; c < t->sq_chunks && !zt_clock_costs_only(); c++) total += t->sq_part[c];
        return total;
    }
    zt_clock_host_work(ZT_WORK_COPY, (double)n, (double)(n * esz(t)), 0);
    return zt_clock_costs_only() ? 0.0 : zt_cpu_sumsq_g(at(t, t->host_grad, off), n, t->f.be->compute_dtype);
}

void twin_grads_poison(twin_host *t) {
    twin_grads_ready(t);
    if (zt_clock_costs_only()) return;
    float first;
    zt_cpu_to_f32(&first, t->host_grad, 1, t->f.be->compute_dtype);
    first *= INFINITY; /* as the device's scale(grad_shard, INFINITY, 1) */
    zt_cpu_from_f32(t->host_grad, &first, 1, t->f.be->compute_dtype);
    size_t len = min_sz(ZT_SUMSQ_CHUNK, t->host_n); /* its chunk's sum, if already taken */
    if (t->host_n) t->sq_part[0] = zt_cpu_sumsq_g(t->host_grad, len, t->f.be->compute_dtype);
}
