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
 * gathers go segment by segment, split into buckets of at most reduce_bucket_size elements. */
#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    e->comm_seconds += zt_now() - t0;
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
        e->comm_seconds += zt_now() - t0;
        g->req = NULL;
    }
    g->held = 1;
    size_t held = params_held_bytes(e);
    if (held > e->mem.params_peak) e->mem.params_peak = held;
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

/* ---------------------------------------------------------------- lifecycle */

int zt_engine_create(zt_engine *e, const zt_backend *be, zt_comm *comm, const zt_param_table *table,
                     const zt_engine_opts *opt, const float *init_f32, zt_err *err) {
    memset(e, 0, sizeof *e);
    e->be = be;
    e->comm = comm;
    e->table = table;
    e->opt = *opt;
    e->rank = comm->rank;
    e->world = comm->world;
    e->total = table->total;
    size_t per = (e->total + (size_t)e->world - 1) / (size_t)e->world;
    e->shard = (per + ZT_SHARD_ALIGN - 1) / ZT_SHARD_ALIGN * ZT_SHARD_ALIGN;
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
    /* optimizer states: fp32 master (aliasing the fp32 params), Adam moments */
    if (fp32)
        e->master = stage == 3 ? (float *)e->params : (float *)at(e, e->params, e->opt_lo);
    else
        e->master = dev_alloc(e, opt_n * sizeof(float), ZT_MEM_OPTIM);
    e->adam_m = dev_alloc(e, opt_n * sizeof(float), ZT_MEM_OPTIM);
    e->adam_v = dev_alloc(e, opt_n * sizeof(float), ZT_MEM_OPTIM);
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
    if (!fp32) { /* master from fp32, compute copy converted on the device */
        size_t n = e->opt_hi - e->opt_lo;
        be->copy(e->master, init_f32 + e->opt_lo, n * sizeof(float), ZT_H2D);
        if (stage == 3) {
            be->to_compute(e->params, e->master, n);
        } else {
            float *tmp = be->alloc(e->total * sizeof(float));
            if (!tmp) goto oom;
            be->copy(tmp, init_f32, e->total * sizeof(float), ZT_H2D);
            be->to_compute(e->params, tmp, e->total);
            be->free(tmp);
        }
    }
    e->mem.params_peak = stage == 3 ? e->shard * E : param_n * E;
    return 0;
oom:
    {
        size_t total = 0;
        for (int c = 0; c < ZT_MEM_NCAT; c++) total += e->mem.device[c];
        zt_engine_destroy(e);
        return zt_fail(err, "out of %s memory for model states (stage %d, %zu parameters; allocated %.1f MiB before failing)",
                       be->name, stage, table->total, (double)total / 1048576.0);
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
    free(e->gather);
    free(e->seg_gather);
    free(e->seg_grad);
    free(e->inflight);
    memset(e, 0, sizeof *e);
}

/* ---------------------------------------------------------------- step */

void zt_engine_begin_micro(zt_engine *e, int first, int last) {
    if (first) {
        e->comm_seconds = 0;
        size_t n = e->opt.stage < 2 ? e->padded_total : e->shard;
        e->be->memset_zero(e->opt.stage < 2 ? e->grads_full : e->grad_shard, n * esz(e));
    }
    e->reduce_now = e->opt.stage >= 2 || last;
}

double zt_engine_step(zt_engine *e, float lr, float max_norm) {
    const zt_backend *be = e->be;
    finish_all(e);
    /* global gradient norm: stage 0 holds the full reduced gradient on every rank; otherwise each
     * rank sums the squares of its shard and the partial sums are added across ranks */
    double sumsq = be->sumsq(e->grad_shard, e->opt_hi - e->opt_lo);
    if (e->opt.stage >= 1 && e->world > 1) e->comm->allreduce_host_double(e->comm, &sumsq, 1);
    double norm = sqrt(sumsq);
    float clip = 1.0f;
    if (max_norm > 0 && norm > max_norm) clip = (float)(max_norm / (norm + 1e-6)); /* torch.nn.utils.clip_grad_norm_ */

    e->adam_t++;
    zt_adam_step st = {lr, e->opt.beta1, e->opt.beta2, e->opt.eps, 0.0f,
                       1.0f - powf(e->opt.beta1, (float)e->adam_t), 1.0f - powf(e->opt.beta2, (float)e->adam_t), clip};
    int fp32 = be->compute_dtype == ZT_F32;
    /* one AdamW call per tensor piece in [opt_lo, opt_hi): weight decay differs per tensor */
    for (int i = 0; i < e->table->count; i++) {
        const zt_param_info *p = &e->table->params[i];
        size_t a = max_sz(p->offset, e->opt_lo), b = min_sz(p->offset + p->numel, e->opt_hi);
        if (b <= a) continue;
        size_t off = a - e->opt_lo;
        st.weight_decay = (p->decay || e->opt.decay_all_params) ? e->opt.weight_decay : 0.0f;
        void *out = NULL;
        if (!fp32) out = e->opt.stage == 3 ? at(e, e->params, off) : at(e, e->params, a);
        be->adamw(e->master + off, e->adam_m + off, e->adam_v + off, at(e, e->grad_shard, off), out, b - a, &st);
    }
    /* stages 1-2: everyone needs everyone's updated parameters */
    if ((e->opt.stage == 1 || e->opt.stage == 2) && e->world > 1) {
        size_t *counts = zt_xcalloc((size_t)e->world, sizeof *counts);
        for (int r = 0; r < e->world; r++) counts[r] = e->shard;
        double t0 = zt_now();
        e->comm->wait(e->comm, e->comm->allgather(e->comm, at(e, e->params, e->lo), e->params, counts,
                                                  be->compute_dtype));
        e->comm_seconds += zt_now() - t0;
        free(counts);
    }
    if (e->opt.stage == 3) stage3_reset_residents(e);
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
    if (e->opt.stage == 0) {
        be->copy(full, e->master, own * 4, ZT_D2D);
    } else {
        be->copy((char *)full + e->lo * 4, e->master, own * 4, ZT_D2D);
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
    size_t P = esz(e), K = e->be->compute_dtype == ZT_F32 ? 8 : 12, psi = e->padded_total, sh = e->shard;
    switch (e->opt.stage) {
    case 0: return (2 * P + K) * psi;
    case 1: return 2 * P * psi + K * sh;
    case 2: return P * psi + (P + K) * sh;
    default: return (2 * P + K) * sh;
    }
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
    zt_info("model states: %.1f MiB allocated, ZeRO formula %.1f MiB (stage %d, %d ranks, shard %zu of %zu elements)",
            (double)zt_engine_model_state_bytes(e) / 1048576.0, (double)zt_engine_model_state_formula(e) / 1048576.0,
            e->opt.stage, e->world, e->shard, e->total);
}
