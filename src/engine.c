/* engine.c — ZeRO stages 0-3 over the comm table (see engine.h).
 *
 *   stage 0: full params, full grads (all-reduced), full optimizer on every rank
 *   stage 1: full params, full grads, optimizer states of [lo, hi) only; grads reduce-scattered once
 *            per step, updated params all-gathered
 *   stage 2: as 1, but each micro-step's gradients are reduce-scattered segment by segment as
 *            backward finishes them, into a grad shard; no full gradient vector exists
 *   stage 3: as 2, and parameters are sharded too: each segment is all-gathered just before use
 *            (the next one prefetched), and released after
 * A "segment" is the model's unit of use (embeddings, one block, final LayerNorm); reductions and
 * gathers go segment by segment, split into buckets of at most reduce_bucket_size elements.
 *
 * Twin-Flow step (see engine.h for the split): three lanes run at once,
 *   main thread     device Adam of [split, opt_hi)
 *   transfer thread D2H of the host part's gradients chunk by chunk (into host_grad), and H2D of
 *                   each chunk's updated parameters as soon as the CPU Adam has finished it
 *   host-adam thread SIMD CPU Adam of chunk c once its gradients have arrived
 * so the H2D of chunk c overlaps the CPU Adam of chunk c+1 and the D2H of chunk c+2 (ZeRO-Offload's
 * pipeline), and the whole host pipeline overlaps the device Adam. On the CPU backend the "device"
 * is host memory and be->copy a memcpy, but the code path is the same. */
#include "engine.h"
#include "zero_formula.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_adam.h"

const char *const zt_mem_category_names[ZT_MEM_NCAT] = {"params", "grads", "optimizer", "activations", "comm"};

/* one reduction in flight: when it completes, its piece of recv_tmp goes into the grad shard */
struct zt_inflight {
    zt_comm_req *req;
    size_t shard_off, count; /* the piece of this rank's shard it delivers */
    int accumulate;          /* stage 2/3: add to grad shard; stage 1: copy; stage 0: nothing */
    const void *send;        /* the gradient buffer it reads (so the buffer is not reused early) */
};

struct zt_gather_buf {
    void *buf;
    size_t cap;        /* elements */
    int seg;           /* segment gathered into it, -1 if none */
    zt_comm_req *req;  /* gather in flight */
    int held;          /* between acquire and release */
    int resident;      /* persistent segment: kept until the next optimizer step */
};

static size_t esz(const zt_engine *e) { return zt_dtype_size(e->be->compute_dtype); }
static void *at(const zt_engine *e, const void *base, size_t elems) { return (char *)base + elems * esz(e); }
static size_t seg_lo(const zt_engine *e, int s) { return e->table->segment_lo[s]; }
static size_t seg_hi(const zt_engine *e, int s) { return e->table->segment_lo[s + 1]; }
static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static void *dev_alloc(zt_engine *e, size_t bytes, int category) {
    void *p = e->be->alloc(bytes);
    if (p) e->mem.device[category] += bytes;
    return p;
}

/* per-rank piece sizes of the flat range [a, b) under the shard partition */
static void range_counts(const zt_engine *e, size_t a, size_t b, size_t *counts) {
    for (int r = 0; r < e->world; r++) {
        size_t rlo = (size_t)r * e->shard, rhi = rlo + e->shard;
        size_t x = max_sz(a, rlo), y = min_sz(b, rhi);
        counts[r] = y > x ? y - x : 0;
    }
}

/* ---------------------------------------------------------------- collectives bookkeeping */

static void finish(zt_engine *e, zt_inflight *f) {
    double t0 = zt_now();
    e->comm->wait(e->comm, f->req);
    double t1 = zt_now();
    e->comm_seconds += t1 - t0;
    e->timing.reduce_scatter += t1 - t0;
    zt_trace_complete(e->trace, ZT_LANE_COMM, e->opt.stage == 0 ? "all-reduce wait" : "reduce-scatter wait", t0, t1);
    if (f->count && f->accumulate == 1)
        e->be->accumulate(at(e, e->grad_shard, f->shard_off), at(e, e->recv_tmp, f->shard_off), f->count);
    else if (f->count && f->accumulate == 2)
        e->be->copy(at(e, e->grad_shard, f->shard_off), at(e, e->recv_tmp, f->shard_off), f->count * esz(e), ZT_D2D);
}

static void finish_all(zt_engine *e) {
    for (int i = 0; i < e->n_inflight; i++) finish(e, &e->inflight[i]);
    e->n_inflight = 0;
}

/* completes the reductions that read buf, so it can be reused */
static void finish_reading(zt_engine *e, const void *buf, size_t bytes) {
    int kept = 0;
    for (int i = 0; i < e->n_inflight; i++) {
        zt_inflight *f = &e->inflight[i];
        if ((const char *)f->send >= (const char *)buf && (const char *)f->send < (const char *)buf + bytes)
            finish(e, f);
        else
            e->inflight[kept++] = *f;
    }
    e->n_inflight = kept;
}

static void push_inflight(zt_engine *e, zt_inflight f) {
    if (e->n_inflight == e->cap_inflight) {
        e->cap_inflight = e->cap_inflight ? 2 * e->cap_inflight : 64;
        e->inflight = realloc(e->inflight, (size_t)e->cap_inflight * sizeof *e->inflight);
        if (!e->inflight) { fprintf(stderr, "zerotrain: error: out of host memory\n"); abort(); }
    }
    e->inflight[e->n_inflight++] = f;
    if (!e->opt.overlap_comm) finish_all(e);
}

/* Reduces the gradients of flat range [a, b) held in buf (buf[0] is element a), in buckets. */
static void reduce_range(zt_engine *e, const void *buf, size_t a, size_t b) {
    size_t bucket = e->opt.reduce_bucket_size >= 1 ? (size_t)e->opt.reduce_bucket_size : b - a;
    size_t *counts = zt_xcalloc((size_t)e->world, sizeof *counts);
    for (size_t x = a; x < b; x += bucket) {
        size_t y = min_sz(b, x + bucket);
        const void *send = at(e, buf, x - a);
        zt_inflight f = {0};
        f.send = send;
        if (e->opt.stage == 0) {
            f.req = e->comm->allreduce_sum(e->comm, (void *)send, y - x, e->be->compute_dtype);
        } else {
            range_counts(e, x, y, counts);
            size_t mine_lo = max_sz(x, e->lo);
            f.shard_off = mine_lo - e->lo;
            f.count = counts[e->rank];
            f.accumulate = e->opt.stage == 1 ? 2 : 1;
            f.req = e->comm->reduce_scatter_sum(e->comm, send, at(e, e->recv_tmp, f.shard_off), counts,
                                                e->be->compute_dtype);
        }
        push_inflight(e, f);
    }
    free(counts);
}

/* ---------------------------------------------------------------- memory counters */

static size_t sum_cat(const size_t *a) {
    size_t t = 0;
    for (int c = 0; c < ZT_MEM_NCAT; c++) t += a[c];
    return t;
}

/* device bytes in use now: allocations (stage 3 gather buffers counted whole) + activations */
static void trace_memory(zt_engine *e) {
    if (!e->trace) return;
    zt_trace_counter(e->trace, "memory (MiB)", zt_now(), "device", (double)sum_cat(e->mem.device) / 1048576.0, "host",
                     (double)sum_cat(e->mem.host) / 1048576.0);
}

/* ---------------------------------------------------------------- parameter source */

static void start_gather(zt_engine *e, int seg, zt_gather_buf *g) {
    size_t a = seg_lo(e, seg), b = seg_hi(e, seg);
    size_t *counts = zt_xcalloc((size_t)e->world, sizeof *counts);
    range_counts(e, a, b, counts);
    size_t mine = max_sz(a, e->lo);
    const void *send = counts[e->rank] ? at(e, e->params, mine - e->lo) : e->params;
    g->seg = seg;
    g->req = e->comm->allgather(e->comm, send, g->buf, counts, e->be->compute_dtype);
    e->seg_gather[seg] = (int)(g - e->gather);
    free(counts);
}

static size_t params_held_bytes(const zt_engine *e) {
    size_t bytes = e->shard * esz(e);
    for (int i = 0; i < e->n_gather; i++)
        if (e->gather[i].seg >= 0) bytes += (seg_hi(e, e->gather[i].seg) - seg_lo(e, e->gather[i].seg)) * esz(e);
    return bytes;
}

/* a free gather buffer able to hold segment seg, or NULL */
static zt_gather_buf *free_gather_buf(zt_engine *e, int seg) {
    size_t need = seg_hi(e, seg) - seg_lo(e, seg);
    for (int i = 0; i < 3; i++) { /* buffer 0 is segment 0's; 1 and 2 rotate; the rest are residents' */
        zt_gather_buf *g = &e->gather[i];
        if (i == 0 && seg != 0) continue;
        if (g->held || g->req || g->cap < need) continue;
        if (g->seg >= 0) e->seg_gather[g->seg] = -1;
        g->seg = -1;
        return g;
    }
    return NULL;
}

/* the buffer segment seg should be gathered into now: its reserved one (resident segments not yet
 * gathered this step are marked -2 - index) or a free rotating one; NULL if none is free */
static zt_gather_buf *gather_target(zt_engine *e, int seg) {
    if (e->seg_gather[seg] <= -2) return &e->gather[-2 - e->seg_gather[seg]];
    return free_gather_buf(e, seg);
}

static void stage3_prefetch(void *ctx, int seg) {
    zt_engine *e = ctx;
    if (e->opt.stage != 3 || seg < 0 || seg >= e->table->n_segments || e->seg_gather[seg] >= 0) return;
    zt_gather_buf *g = gather_target(e, seg);
    if (g) start_gather(e, seg, g);
}

static void *src_acquire(void *ctx, int seg) {
    zt_engine *e = ctx;
    if (e->opt.stage < 3) return at(e, e->params, seg_lo(e, seg));
    if (e->seg_gather[seg] < 0) {
        zt_gather_buf *g = gather_target(e, seg);
        if (!g) { fprintf(stderr, "zerotrain: error: stage 3: no free gather buffer for segment %d\n", seg); abort(); }
        start_gather(e, seg, g);
    }
    zt_gather_buf *g = &e->gather[e->seg_gather[seg]];
    if (g->req) {
        double t0 = zt_now();
        e->comm->wait(e->comm, g->req);
        double t1 = zt_now();
        e->comm_seconds += t1 - t0;
        e->timing.allgather += t1 - t0;
        zt_trace_complete(e->trace, ZT_LANE_COMM, "all-gather wait", t0, t1);
        g->req = NULL;
    }
    g->held = 1;
    size_t held = params_held_bytes(e);
    if (held > e->mem.params_peak) e->mem.params_peak = held;
    if (e->trace) zt_trace_counter(e->trace, "stage-3 params held (MiB)", zt_now(), "held", held / 1048576.0, "peak",
                                   e->mem.params_peak / 1048576.0);
    return g->buf;
}

static void src_release(void *ctx, int seg) {
    zt_engine *e = ctx;
    if (e->opt.stage < 3 || e->seg_gather[seg] < 0) return;
    zt_gather_buf *g = &e->gather[e->seg_gather[seg]];
    g->held = 0;
    if (!g->resident) { /* released: the buffer may be reused by the next gather */
        e->seg_gather[seg] = -1;
        g->seg = -1;
    }
}

static void *src_grads(void *ctx, int seg) {
    zt_engine *e = ctx;
    if (e->opt.stage < 2) return at(e, e->grads_full, seg_lo(e, seg));
    if (e->seg_grad[seg]) return e->seg_grad[seg];
    int slot = seg == 0 ? 0 : 1 + (e->grad_rotate++ % 2);
    void *buf = e->grad_pool[slot];
    size_t n = seg_hi(e, seg) - seg_lo(e, seg);
    finish_reading(e, buf, n * esz(e) + 1);
    if (e->grad_pool_seg[slot] >= 0) e->seg_grad[e->grad_pool_seg[slot]] = NULL;
    e->be->memset_zero(buf, n * esz(e));
    e->grad_pool_seg[slot] = seg;
    e->seg_grad[seg] = buf;
    return buf;
}

static void src_grads_done(void *ctx, int seg) {
    zt_engine *e = ctx;
    if (e->world == 1 && e->opt.stage < 2) return; /* nothing to reduce */
    if (!e->reduce_now) return;
    const void *buf = e->opt.stage < 2 ? at(e, e->grads_full, seg_lo(e, seg)) : e->seg_grad[seg];
    reduce_range(e, buf, seg_lo(e, seg), seg_hi(e, seg));
    if (e->opt.stage >= 2) e->seg_grad[seg] = NULL; /* a later grads() call in this micro-step gets a fresh buffer */
}

zt_param_source zt_engine_param_source(zt_engine *e) {
    zt_param_source s = {e, src_acquire, src_release, src_grads, src_grads_done, stage3_prefetch};
    return s;
}

/* ---------------------------------------------------------------- Twin-Flow: split and host buffers */

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
static int host_part_alloc(zt_engine *e) {
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

static void host_part_free(zt_engine *e) {
    int fp32 = e->be->compute_dtype == ZT_F32;
    host_buf_free(e, e->host_master, fp32);
    host_buf_free(e, e->host_m, 0);
    host_buf_free(e, e->host_v, 0);
    host_buf_free(e, e->host_grad, 1);
    host_buf_free(e, e->host_grad32, 0);
    host_buf_free(e, e->host_params16, 1);
}

/* ---------------------------------------------------------------- Twin-Flow: ratio auto */

/* best of 3 timed runs (after a warm-up) of one measurement */
#define BEST_OF_3(var, stmt)                             \
    do {                                                 \
        stmt;                                            \
        var = 1e30;                                      \
        for (int r_ = 0; r_ < 3; r_++) {                 \
            double t0_ = zt_now();                       \
            stmt;                                        \
            double d_ = zt_now() - t0_;                  \
            if (d_ < var) var = d_;                      \
        }                                                \
    } while (0)

/* Measures, on scratch buffers of up to 2^24 elements, the CPU Adam (elements/s), the device Adam
 * and both copy directions (bytes/s), averages them over ranks (so every rank picks the same
 * ratio), and picks r for the optimizer step time model
 *   host lane   t_h(r) = r N / H,  H = min(CPU Adam, D2H bw / E, H2D bw / E)   (pipelined chunks)
 *   device lane t_d(r) = (1 - r) N / D
 * whose maximum is smallest where t_h = t_d: r* = H / (H + D) (D2H, CPU Adam and H2D are separate
 * lanes, so the slowest of the three sets H). The device part's optimizer bytes (1 - r) N K_dev
 * (K_dev = 8: m, v; + 4 for the master on 16-bit backends) must then fit, r >= r_min: in
 * device_memory less the engine's other buffers when that is set, else in the device's free memory
 * less offload.device_reserve (activations and scratch, allocated after the engine). */
static double choose_ratio(zt_engine *e) {
    const zt_backend *be = e->be;
    /* 2^24 elements (256 MiB of fp32 master, m, v, grads): beyond any CPU cache, so the CPU Adam is
     * timed at its memory-bound speed; at 2^20 it ran from cache 5x faster than in real steps */
    size_t N = e->opt_hi - e->opt_lo, n = max_sz(min_sz(N, (size_t)1 << 24), 4096), E = esz(e);
    int fp32 = be->compute_dtype == ZT_F32;
    float *hp = zt_xcalloc(n, 4), *hm = zt_xcalloc(n, 4), *hv = zt_xcalloc(n, 4), *hg = zt_xcalloc(n, 4);
    float *dp = be->alloc(n * 4), *dm = be->alloc(n * 4), *dv = be->alloc(n * 4);
    void *dg = be->alloc(n * E), *dout = fp32 ? NULL : be->alloc(n * E);
    void *pin = be->host_alloc(n * E);
    double rates[4] = {0, 0, 0, 0}; /* host adam el/s, device adam el/s, D2H B/s, H2D B/s */
    if (dp && dm && dv && dg && pin && (fp32 || dout)) {
        zt_adam_step st = {1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f, 0.001f, 1.0f};
        double th, td, tdown, tup;
        BEST_OF_3(th, zt_cpu_adamw(hp, hm, hv, hg, n, &st, NULL, ZT_F32, e->off.host_threads));
        BEST_OF_3(td, (be->adamw(dp, dm, dv, dg, dout, n, &st), be->synchronize()));
        BEST_OF_3(tdown, be->transfer(pin, dg, n * E, ZT_D2H));
        BEST_OF_3(tup, be->transfer(dg, pin, n * E, ZT_H2D));
        double tiny = 1e-9;
        rates[0] = n / (th + tiny), rates[1] = n / (td + tiny), rates[2] = n * E / (tdown + tiny), rates[3] = n * E / (tup + tiny);
    }
    free(hp); free(hm); free(hv); free(hg);
    void *dbufs[] = {dp, dm, dv, dg, dout};
    for (int i = 0; i < 5; i++)
        if (dbufs[i]) be->free(dbufs[i]);
    if (pin) be->host_free(pin);
    e->comm->allreduce_host_double(e->comm, rates, 4);
    for (int i = 0; i < 4; i++) rates[i] /= e->world;
    if (!(rates[0] > 0 && rates[1] > 0)) {
        zt_warn("twin-flow: ratio auto: calibration failed (out of memory?); using ratio 1 (full offload)");
        return 1.0;
    }
    double H = fmin(rates[0], fmin(rates[2] / E, rates[3] / E)), D = rates[1];
    double r = H / (H + D);
    /* the device part's optimizer bytes must fit: in device_memory less the engine's other device
     * buffers when it is set, else in what the device has free now less what the caller reserved */
    double r_min = 0;
    double K = fp32 ? 8 : 12, budget = e->off.device_memory, avail = 0;
    int limited = budget > 0; /* whether avail bounds the device part */
    size_t free_now = 0, total_dev = 0;
    be->mem_info(&free_now, &total_dev);
    char why_mem[240] = "device memory is host memory: no device budget";
    if (budget > 0) {
        double other = (double)sum_cat(e->mem.device); /* params, grads, comm buffers allocated so far */
        avail = budget - other;
        snprintf(why_mem, sizeof why_mem, "budget %.1f MiB (device_memory), other device buffers %.1f MiB",
                 budget / 1048576.0, other / 1048576.0);
    } else if (total_dev > 0) {
        limited = 1;
        avail = (double)free_now - e->off.device_reserve;
        snprintf(why_mem, sizeof why_mem, "%.1f MiB free on the device, %.1f MiB kept for activations and scratch",
                 free_now / 1048576.0, e->off.device_reserve / 1048576.0);
    }
    if (limited && N > 0) {
        r_min = 1.0 - avail / ((double)N * K);
        size_t len = strlen(why_mem);
        snprintf(why_mem + len, sizeof why_mem - len, ": at least %.3f must go to the host", fmax(r_min, 0.0));
    }
    /* every rank takes the largest (in millionths, rounded up) */
    r_min = e->comm->agree_max(e->comm, (int)ceil(fmin(fmax(r_min, 0.0), 2.0) * 1e6)) / 1e6;
    if (r_min > 1) zt_warn("twin-flow: the device is short of memory even with everything offloaded (%s)", why_mem);
    r = fmax(r, r_min);
    r = fmin(fmax(r, 0.0), 1.0);
    zt_info("twin-flow: ratio auto = %.3f: CPU Adam %.0f M el/s, device Adam %.0f M el/s, D2H %.2f GB/s, H2D %.2f GB/s; "
            "host pipeline %.0f M el/s -> balanced ratio H/(H+D) = %.3f; %s",
            r, rates[0] * 1e-6, D * 1e-6, rates[2] * 1e-9, rates[3] * 1e-9, H * 1e-6, H / (H + D), why_mem);
    return r;
}

/* ---------------------------------------------------------------- lifecycle */

int zt_engine_create(zt_engine *e, const zt_backend *be, zt_comm *comm, const zt_param_table *table,
                     const zt_engine_opts *opt, const float *init_f32, zt_err *err) {
    return zt_engine_create_offload(e, be, comm, table, opt, NULL, init_f32, err);
}

int zt_engine_open_trace(zt_engine *e, const char *path, zt_err *err) {
    if (e->trace) zt_trace_close(e->trace, NULL);
    e->trace = zt_trace_open(path, e->rank, err);
    if (!e->trace) return -1;
    trace_memory(e);
    return 0;
}

int zt_engine_create_offload(zt_engine *e, const zt_backend *be, zt_comm *comm, const zt_param_table *table,
                             const zt_engine_opts *opt, const zt_engine_offload *off, const float *init_f32,
                             zt_err *err) {
    memset(e, 0, sizeof *e);
    if (off) e->off = *off;
    if (e->off.enabled && !(e->off.ratio <= 1.0)) /* NaN too */
        return zt_fail(err, "zero_optimization.offload_optimizer.ratio must be in [0, 1] or auto, got %g", e->off.ratio);
    e->be = be;
    e->comm = comm;
    e->table = table;
    e->opt = *opt;
    e->rank = comm->rank;
    e->world = comm->world;
    e->total = table->total;
    e->shard = zt_zero_shard(e->total, e->world, ZT_SHARD_ALIGN);
    e->padded_total = e->shard * (size_t)e->world;
    e->lo = min_sz((size_t)e->rank * e->shard, e->total);
    e->hi = min_sz(e->lo + e->shard, e->total);
    int stage = opt->stage;
    e->opt_lo = stage == 0 ? 0 : e->lo;
    e->opt_hi = stage == 0 ? e->total : e->hi;
    size_t opt_n = stage == 0 ? e->padded_total : e->shard;
    size_t E = esz(e);
    int fp32 = be->compute_dtype == ZT_F32;

    /* parameters (compute dtype) */
    size_t param_n = stage == 3 ? e->shard : e->padded_total;
    e->params = dev_alloc(e, param_n * E, ZT_MEM_PARAMS);
    /* gradients */
    if (stage < 2) {
        e->grads_full = dev_alloc(e, e->padded_total * E, ZT_MEM_GRADS);
        e->grad_shard = e->grads_full ? at(e, e->grads_full, e->opt_lo) : NULL;
    } else {
        e->grad_shard = dev_alloc(e, e->shard * E, ZT_MEM_GRADS);
        size_t seg0 = seg_hi(e, 0) - seg_lo(e, 0), other = 0;
        for (int s = 1; s < table->n_segments; s++) other = max_sz(other, seg_hi(e, s) - seg_lo(e, s));
        e->grad_pool[0] = dev_alloc(e, seg0 * E, ZT_MEM_GRADS);
        e->grad_pool[1] = dev_alloc(e, other * E, ZT_MEM_GRADS);
        e->grad_pool[2] = dev_alloc(e, other * E, ZT_MEM_GRADS);
        e->grad_pool_seg[0] = e->grad_pool_seg[1] = e->grad_pool_seg[2] = -1;
        e->seg_grad = zt_xcalloc((size_t)table->n_segments, sizeof *e->seg_grad);
    }
    if (stage >= 2 || (stage == 1 && e->world > 1)) e->recv_tmp = dev_alloc(e, e->shard * E, ZT_MEM_COMM);
    /* stage 3 gather buffers: segment 0's own, two rotating for the rest, and one per persistent segment */
    if (stage == 3) {
        e->seg_gather = zt_xcalloc((size_t)table->n_segments, sizeof *e->seg_gather);
        for (int s = 0; s < table->n_segments; s++) e->seg_gather[s] = -1;
        e->gather = zt_xcalloc((size_t)table->n_segments + 3, sizeof *e->gather);
        size_t other = 0;
        for (int s = 1; s < table->n_segments; s++) other = max_sz(other, seg_hi(e, s) - seg_lo(e, s));
        size_t caps[3] = {seg_hi(e, 0) - seg_lo(e, 0), other, other};
        for (int i = 0; i < 3; i++) {
            e->gather[i].cap = caps[i];
            e->gather[i].seg = -1;
            e->gather[i].buf = dev_alloc(e, caps[i] * E, ZT_MEM_COMM);
        }
        e->n_gather = 3;
        for (int s = 1; s < table->n_segments; s++) {
            size_t n = seg_hi(e, s) - seg_lo(e, s);
            if ((double)n >= opt->stage3_param_persistence_threshold) continue;
            zt_gather_buf *g = &e->gather[e->n_gather++];
            g->cap = n;
            g->seg = -1;
            g->resident = 1;
            g->buf = dev_alloc(e, n * E, ZT_MEM_COMM);
            e->seg_gather[s] = -2 - (int)(g - e->gather); /* reserved, not yet gathered */
        }
        for (int i = 0; i < e->n_gather; i++)
            if (!e->gather[i].buf) goto oom;
    }
    /* Twin-Flow split, then the optimizer states: the host part's in host memory, the device
     * part's on the device (fp32 master aliasing the fp32 params there) */
    if (e->off.enabled) {
        if (e->off.ratio < 0) e->offload_ratio = choose_ratio(e);
        else e->offload_ratio = e->off.ratio;
        e->host_n = split_elements(e->opt_hi - e->opt_lo, e->offload_ratio);
    }
    size_t dev_n = opt_n - e->host_n;
    if (fp32)
        e->master = stage == 3 ? (float *)at(e, e->params, e->host_n) : (float *)at(e, e->params, e->opt_lo + e->host_n);
    else
        e->master = dev_alloc(e, max_sz(dev_n, 16) * sizeof(float), ZT_MEM_OPTIM);
    e->adam_m = dev_alloc(e, max_sz(dev_n, 16) * sizeof(float), ZT_MEM_OPTIM);
    e->adam_v = dev_alloc(e, max_sz(dev_n, 16) * sizeof(float), ZT_MEM_OPTIM);
    if (e->host_n && host_part_alloc(e)) goto oom;
    if (!e->params || !e->grad_shard || !e->master || !e->adam_m || !e->adam_v ||
        (e->opt.stage >= 1 && !e->recv_tmp && (stage >= 2 || e->world > 1)) || (stage >= 2 && (!e->grad_pool[0] || !e->grad_pool[1])))
        goto oom;

    /* parameters from the fp32 init */
    if (stage == 3) {
        if (e->hi > e->lo) {
            if (fp32) be->copy(e->params, init_f32 + e->lo, (e->hi - e->lo) * 4, ZT_H2D);
        }
    } else if (fp32) {
        be->copy(e->params, init_f32, e->total * 4, ZT_H2D);
    }
    if (e->host_n) memcpy(e->host_master, init_f32 + e->opt_lo, e->host_n * sizeof(float));
    if (!fp32) { /* master from fp32, compute copy converted on the device */
        size_t n = e->opt_hi - e->opt_lo;
        if (n > e->host_n) be->copy(e->master, init_f32 + e->opt_lo + e->host_n, (n - e->host_n) * sizeof(float), ZT_H2D);
        if (stage == 3) {
            be->to_compute(e->params, e->master, n);
        } else { /* through a bounded fp32 staging buffer: a whole-model one would not fit big models */
            size_t step = min_sz(e->total, (size_t)1 << 24);
            float *tmp = be->alloc(max_sz(step, 1) * sizeof(float));
            if (!tmp) goto oom;
            for (size_t a = 0; a < e->total; a += step) {
                size_t k = min_sz(step, e->total - a);
                be->copy(tmp, init_f32 + a, k * sizeof(float), ZT_H2D);
                be->to_compute(at(e, e->params, a), tmp, k);
            }
            be->free(tmp);
        }
    }
    e->mem.params_peak = stage == 3 ? e->shard * E : param_n * E;
    if (e->off.enabled)
        zt_info("twin-flow: rank %d updates %zu of %zu optimizer elements on the host (ratio %.3f, split at %zu), "
                "the rest on the %s; CPU Adam path %s", e->rank, e->host_n, e->opt_hi - e->opt_lo, e->offload_ratio,
                e->opt_lo + e->host_n, be->name, zt_cpu_adam_isa_name(zt_cpu_adam_best_isa()));
    return 0;
oom:
    {
        int host_failed = e->host_n && (!e->host_master || !e->host_m || !e->host_v || !e->host_grad);
        size_t host_n = e->host_n;
        size_t total = 0, shard = e->shard;
        int world = e->world;
        for (int c = 0; c < ZT_MEM_NCAT; c++) total += e->mem.device[c];
        zt_engine_destroy(e);
        if (host_failed) return zt_fail(err, "out of host memory for the offloaded optimizer states (%zu elements)", host_n);
        /* what the model states need on this device: the ZeRO formula minus the offloaded part */
        size_t K = fp32 ? 8 : 12;
        double need = (double)zt_zero_model_state_bytes(stage, E, K, shard, world) - (double)K * host_n;
        const char *offload = fp32 ? "" /* the CPU backend: device memory is host memory */
                                   : "offload the optimizer (zero_optimization.offload_optimizer: {device: cpu, "
                                     "ratio: auto}), ";
        return zt_fail(err,
                       "out of %s memory for model states: stage %d with %zu parameters on %d rank(s) needs about "
                       "%.2f GiB of them per rank (allocated %.2f GiB before failing); %suse a higher stage or "
                       "more ranks (zerotrain estimate CONFIG --ranks N shows the options)",
                       be->name, stage, table->total, world, need / 1073741824.0, (double)total / 1073741824.0,
                       offload);
    }
}

/* stage 3: resident segment slots are stored as -2 - index until first gathered */
static void stage3_reset_residents(zt_engine *e) {
    for (int i = 3; i < e->n_gather; i++) {
        zt_gather_buf *g = &e->gather[i];
        if (g->seg >= 0) {
            e->seg_gather[g->seg] = -2 - i;
            g->seg = -1;
        }
    }
}

void zt_engine_destroy(zt_engine *e) {
    if (!e->be) return;
    const zt_backend *be = e->be;
    int fp32 = be->compute_dtype == ZT_F32;
    void *bufs[] = {e->params, e->grads_full, e->opt.stage >= 2 ? e->grad_shard : NULL, e->recv_tmp,
                    fp32 ? NULL : e->master, e->adam_m, e->adam_v, e->grad_pool[0], e->grad_pool[1], e->grad_pool[2]};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(bufs[i]);
    for (int i = 0; i < e->n_gather; i++)
        if (e->gather[i].buf) be->free(e->gather[i].buf);
    host_part_free(e);
    zt_trace_close(e->trace, NULL);
    free(e->gather);
    free(e->seg_gather);
    free(e->seg_grad);
    free(e->inflight);
    memset(e, 0, sizeof *e);
}

/* ---------------------------------------------------------------- step */

/* ---------------------------------------------------------------- Twin-Flow: the split update */

static float decay_of(const zt_engine *e, const zt_param_info *p) {
    return (p->decay || e->opt.decay_all_params) ? e->opt.weight_decay : 0.0f;
}

/* where the compute-dtype parameters of optimizer offset off live */
static void *params_at_opt(const zt_engine *e, size_t off) {
    return e->opt.stage == 3 ? at(e, e->params, off) : at(e, e->params, e->opt_lo + off);
}

typedef struct twin_flow {
    zt_engine *e;
    zt_adam_step st;
    size_t nchunks;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;                     /* st is set: the CPU Adam may start */
    size_t d2h_done, adam_done; /* chunks */
    double adam_busy, d2h_busy, h2d_busy;
} twin_flow;

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
            size_t x = max_sz(p->offset, e->opt_lo + a), y = min_sz(p->offset + p->numel, e->opt_lo + b);
            if (y <= x) continue;
            size_t off = x - e->opt_lo;
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
    size_t split = e->opt_lo + e->host_n;
    for (int i = 0; i < e->table->count; i++) {
        const zt_param_info *p = &e->table->params[i];
        size_t a = max_sz(p->offset, split), b = min_sz(p->offset + p->numel, e->opt_hi);
        if (b <= a) continue;
        size_t off = a - e->opt_lo, doff = a - split;
        st.weight_decay = decay_of(e, p);
        be->adamw(e->master + doff, e->adam_m + doff, e->adam_v + doff, at(e, e->grad_shard, off),
                  fp32 ? NULL : params_at_opt(e, off), b - a, &st);
    }
    be->synchronize();
}

/* The host lanes start as soon as the gradients are final (the D2H needs no clip coefficient), the
 * CPU Adam once twin_go has set the step; the device part runs on this thread meanwhile. */
static int twin_start(zt_engine *e, twin_flow *tf, pthread_t th[3]) {
    memset(tf, 0, sizeof *tf);
    tf->e = e;
    tf->nchunks = e->host_n ? (e->host_n + e->host_chunk - 1) / e->host_chunk : 0;
    if (!tf->nchunks) return 0;
    /* transfer() is not ordered after queued device work: the gradients must be complete first */
    e->be->synchronize();
    pthread_mutex_init(&tf->mu, NULL);
    pthread_cond_init(&tf->cv, NULL);
    if (pthread_create(&th[0], NULL, host_adam_lane, tf) || pthread_create(&th[1], NULL, d2h_lane, tf) ||
        pthread_create(&th[2], NULL, h2d_lane, tf)) {
        fprintf(stderr, "zerotrain: error: cannot start the Twin-Flow host threads\n");
        abort();
    }
    return 1;
}

static void twin_go(twin_flow *tf, int threads, const zt_adam_step *st) {
    if (!threads) return;
    pthread_mutex_lock(&tf->mu);
    tf->st = *st;
    tf->go = 1;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

static void split_update(zt_engine *e, twin_flow *tf, int threads, pthread_t th[3], double t0, const zt_adam_step *st) {
    twin_go(tf, threads, st);
    double td0 = zt_now();
    device_adam(e, *st);
    double td1 = zt_now();
    if (e->opt_hi > e->opt_lo + e->host_n) zt_trace_complete(e->trace, ZT_LANE_MAIN, "device adam", td0, td1);
    if (threads) {
        for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
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

void zt_engine_begin_micro(zt_engine *e, int first, int last) {
    if (first) {
        e->comm_seconds = 0;
        memset(&e->timing, 0, sizeof e->timing);
        trace_memory(e);
        size_t n = e->opt.stage < 2 ? e->padded_total : e->shard;
        e->be->memset_zero(e->opt.stage < 2 ? e->grads_full : e->grad_shard, n * esz(e));
    }
    e->reduce_now = e->opt.stage >= 2 || last;
}

/* global gradient norm: stage 0 holds the full reduced gradient on every rank; otherwise each rank
 * sums the squares of its shard and the partial sums are added across ranks */
static double global_grad_norm(zt_engine *e) {
    double sumsq = e->be->sumsq(e->grad_shard, e->opt_hi - e->opt_lo);
    if (e->opt.stage >= 1 && e->world > 1) e->comm->allreduce_host_double(e->comm, &sumsq, 1);
    return sqrt(sumsq);
}

void zt_engine_finish_reductions(zt_engine *e) { finish_all(e); }

double zt_engine_step(zt_engine *e, float lr, float max_norm) {
    int skipped;
    return zt_engine_step_scaled(e, lr, max_norm, 1.0, &skipped);
}

double zt_engine_step_scaled(zt_engine *e, float lr, float max_norm, double loss_scale, int *skipped) {
    const zt_backend *be = e->be;
    finish_all(e);
    twin_flow tf;
    pthread_t th[3];
    double tn0 = zt_now();
    *skipped = 0;
    /* with loss scaling the step may be skipped (overflow), so the norm comes before the host
     * threads start moving gradients; without it the first transfers overlap the norm */
    double norm = loss_scale != 1.0 ? global_grad_norm(e) / loss_scale : -1.0;
    if (!isfinite(norm)) {
        *skipped = 1;
        zt_trace_complete(e->trace, ZT_LANE_MAIN, "grad norm (overflow, step skipped)", tn0, zt_now());
        return norm;
    }
    int threads = twin_start(e, &tf, th);
    if (norm < 0) norm = global_grad_norm(e);
    float clip = 1.0f;
    if (max_norm > 0 && norm > max_norm) clip = (float)(max_norm / (norm + 1e-6)); /* torch.nn.utils.clip_grad_norm_ */
    double tn1 = zt_now();
    e->timing.grad_norm = tn1 - tn0;
    zt_trace_complete(e->trace, ZT_LANE_MAIN, "grad norm", tn0, tn1);

    e->adam_t++;
    zt_adam_step st = {lr, e->opt.beta1, e->opt.beta2, e->opt.eps, 0.0f,
                       1.0f - powf(e->opt.beta1, (float)e->adam_t), 1.0f - powf(e->opt.beta2, (float)e->adam_t),
                       (float)(clip / loss_scale)};
    split_update(e, &tf, threads, th, tn0, &st);
    /* stages 1-2: everyone needs everyone's updated parameters */
    if ((e->opt.stage == 1 || e->opt.stage == 2) && e->world > 1) {
        size_t *counts = zt_xcalloc((size_t)e->world, sizeof *counts);
        for (int r = 0; r < e->world; r++) counts[r] = e->shard;
        double t0 = zt_now();
        e->comm->wait(e->comm, e->comm->allgather(e->comm, at(e, e->params, e->lo), e->params, counts,
                                                  be->compute_dtype));
        double t1 = zt_now();
        e->comm_seconds += t1 - t0;
        e->timing.allgather += t1 - t0;
        zt_trace_complete(e->trace, ZT_LANE_COMM, "all-gather params", t0, t1);
        free(counts);
    }
    if (e->opt.stage == 3) stage3_reset_residents(e);
    trace_memory(e);
    return norm;
}

void zt_engine_gather_params(zt_engine *e, float *out) {
    const zt_backend *be = e->be;
    if (e->opt.stage < 3) {
        if (be->compute_dtype == ZT_F32) {
            be->copy(out, e->params, e->total * 4, ZT_D2H);
            return;
        }
    }
    /* sharded (or 16-bit): gather the fp32 master shards of every rank */
    size_t *counts = zt_xcalloc((size_t)e->world, sizeof *counts);
    for (int r = 0; r < e->world; r++) counts[r] = e->shard;
    float *full = be->alloc(e->padded_total * sizeof(float));
    size_t own = e->opt.stage == 0 ? e->total : e->hi - e->lo;
    /* this rank's master, host part then device part, into full at opt_lo */
    size_t h = min_sz(e->host_n, own);
    float *mine = full + e->opt_lo;
    if (h) be->copy(mine, e->host_master, h * 4, ZT_H2D);
    if (own > h) be->copy(mine + h, e->master, (own - h) * 4, ZT_D2D);
    if (e->opt.stage != 0) {
        e->comm->wait(e->comm, e->comm->allgather(e->comm, (char *)full + e->lo * 4, full, counts, ZT_F32));
    }
    be->copy(out, full, e->total * 4, ZT_D2H);
    be->free(full);
    free(counts);
}

/* Model-state bytes per rank, ZeRO paper section 5 with Ψ parameters and N ranks, for the
 * compute dtype's size P (2 for bf16/fp16, 4 for fp32) and K bytes of optimizer state per parameter
 * (fp32 master + m + v = 12; on fp32 backends the master aliases the parameters, so K = 8):
 *   stage 0: (2P + K) Ψ    stage 1: 2P Ψ + K Ψ/N    stage 2: P Ψ + (P + K) Ψ/N    stage 3: (2P + K) Ψ/N
 * With P = 2 and K = 12 these are the paper's 16Ψ, 4Ψ+12Ψ/N, 2Ψ+14Ψ/N, 16Ψ/N. Ψ is the padded
 * vector (padded_total); segment gradient buffers, gather buffers and reduce landing zones are
 * counted separately (grads pool, comm). */
size_t zt_engine_model_state_formula(const zt_engine *e) {
    size_t K = e->be->compute_dtype == ZT_F32 ? 8 : 12;
    return zt_zero_model_state_bytes(e->opt.stage, esz(e), K, e->shard, e->world);
}

/* the bytes of the same model states as allocated (excluding pools and comm buffers) */
size_t zt_engine_model_state_bytes(const zt_engine *e) {
    size_t E = esz(e);
    size_t params = (e->opt.stage == 3 ? e->shard : e->padded_total) * E;
    size_t grads = (e->opt.stage < 2 ? e->padded_total : e->shard) * E;
    size_t opt_n = e->opt.stage == 0 ? e->padded_total : e->shard;
    size_t optim = 2 * opt_n * sizeof(float) + (e->be->compute_dtype == ZT_F32 ? 0 : opt_n * sizeof(float));
    return params + grads + optim;
}

void zt_engine_print_memory(const zt_engine *e, size_t act_bytes) {
    char line[512];
    int n = snprintf(line, sizeof line, "memory per rank (%s):", e->be->name);
    for (int c = 0; c < ZT_MEM_NCAT; c++) {
        size_t b = c == ZT_MEM_ACTS ? act_bytes : e->mem.device[c];
        n += snprintf(line + n, sizeof line - (size_t)n, " %s %.1f MiB%s", zt_mem_category_names[c],
                      (double)b / 1048576.0, c + 1 < ZT_MEM_NCAT ? "," : "");
    }
    zt_info("%s", line);
    n = snprintf(line, sizeof line, "memory per rank (host):");
    for (int c = 0; c < ZT_MEM_NCAT; c++)
        n += snprintf(line + n, sizeof line - (size_t)n, " %s %.1f MiB%s", zt_mem_category_names[c],
                      (double)e->mem.host[c] / 1048576.0, c + 1 < ZT_MEM_NCAT ? "," : "");
    zt_info("%s", line);
    if (e->off.enabled)
        zt_info("twin-flow: ratio %.3f; rank 0 keeps master, m, v of %zu of its %zu optimizer elements in host memory "
                "(%.1f MiB, %s transfer buffers)", e->offload_ratio, e->host_n, e->opt_hi - e->opt_lo,
                (double)e->mem.host[ZT_MEM_OPTIM] / 1048576.0, e->host_pinned ? "pinned" : "pageable");
    zt_info("model states: %.1f MiB allocated, ZeRO formula %.1f MiB (stage %d, %d ranks, shard %zu of %zu elements)",
            (double)zt_engine_model_state_bytes(e) / 1048576.0, (double)zt_engine_model_state_formula(e) / 1048576.0,
            e->opt.stage, e->world, e->shard, e->total);
}

/* ---------------------------------------------------------------- state access, timing */

static float *state_host(zt_engine *e, int which) { return which == 0 ? e->host_master : which == 1 ? e->host_m : e->host_v; }
static float *state_device(zt_engine *e, int which) { return which == 0 ? e->master : which == 1 ? e->adam_m : e->adam_v; }

void zt_engine_state_read(zt_engine *e, int which, size_t off, size_t n, float *host_out) {
    size_t end = off + n;
    if (off < e->host_n) { /* host part */
        size_t k = min_sz(end, e->host_n) - off;
        memcpy(host_out, state_host(e, which) + off, k * sizeof(float));
        host_out += k;
        off += k;
    }
    if (end > off) e->be->copy(host_out, state_device(e, which) + (off - e->host_n), (end - off) * sizeof(float), ZT_D2H);
}

void zt_engine_state_write(zt_engine *e, int which, size_t off, size_t n, const float *host_in) {
    size_t end = off + n;
    if (off < e->host_n) {
        size_t k = min_sz(end, e->host_n) - off;
        memcpy(state_host(e, which) + off, host_in, k * sizeof(float));
        if (which == 0 && e->be->compute_dtype == ZT_F32) /* the device params mirror the host master */
            e->be->copy(params_at_opt(e, off), host_in, k * sizeof(float), ZT_H2D);
        host_in += k;
        off += k;
    }
    if (end > off) e->be->copy(state_device(e, which) + (off - e->host_n), host_in, (end - off) * sizeof(float), ZT_H2D);
}

float *zt_engine_state_span(zt_engine *e, int which, size_t off, size_t *n_out, int *host_memory) {
    size_t n = e->opt_hi - e->opt_lo;
    if (off < e->host_n) {
        *n_out = e->host_n - off;
        *host_memory = 1;
        return state_host(e, which) + off;
    }
    *n_out = n - off;
    *host_memory = strcmp(e->be->name, "cpu") == 0; /* the cpu backend's device memory is host memory */
    return state_device(e, which) + (off - e->host_n);
}

void zt_engine_phase(zt_engine *e, const char *name, double t0, double t1) {
    if (!strcmp(name, "forward")) e->timing.forward += t1 - t0;
    else if (!strcmp(name, "backward")) e->timing.backward += t1 - t0;
    zt_trace_complete(e->trace, ZT_LANE_MAIN, name, t0, t1);
}

void zt_engine_print_timing(const zt_engine *e) {
    const zt_engine_timing *t = &e->timing;
    zt_info("      time (ms): forward %.1f | backward %.1f | reduce-scatter %.1f | grad norm %.1f | host adam %.1f | "
            "device adam %.1f | D2H %.1f | H2D %.1f | all-gather %.1f | optimizer %.1f (host idle %.1f, device idle %.1f)",
            t->forward * 1e3, t->backward * 1e3, t->reduce_scatter * 1e3, t->grad_norm * 1e3, t->host_adam * 1e3,
            t->device_adam * 1e3, t->d2h * 1e3, t->h2d * 1e3, t->allgather * 1e3, t->optimizer * 1e3,
            t->host_idle * 1e3, t->device_idle * 1e3);
}
