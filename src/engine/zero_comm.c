/* zero_comm.c — the communication of ZeRO stages 0-3 (see engine.c for what each stage keeps):
 * gradient reduction in buckets that never span a segment (all-reduce for stage 0, reduce-scatter
 * into this rank's shard for 1-3), optionally left in flight while backward goes on (overlap_comm);
 * stage 3's parameter gathering segment by segment, the next one prefetched, residents kept for
 * the step; the global gradient norm; and the all-gather of updated parameters (stages 1-2). The
 * model reaches all of it through the parameter source (zt_engine_param_source). */
#include <math.h>
#include <stdlib.h>

#include "engine/engine_internal.h"
#include "engine/zero_formula.h"
#include "util/clock.h"

/* per-rank piece sizes of the flat range [a, b) under the shard partition */
static void range_counts(const zt_engine *e, size_t a, size_t b, size_t *counts) {
    for (int r = 0; r < e->lay.world; r++) {
        size_t rlo = (size_t)r * e->lay.shard, rhi = rlo + e->lay.shard;
        size_t x = max_sz(a, rlo), y = min_sz(b, rhi);
        counts[r] = y > x ? y - x : 0;
    }
}

/* ---------------------------------------------------------------- collectives bookkeeping */

/* waits for req, counting the time in the step's comm time, in *bucket and in the trace as `what` */
static void timed_wait(zt_engine *e, zt_comm_req *req, double *bucket, const char *what) {
    double t0 = zt_clock_now();
    e->comm->wait(e->comm, req);
    double t1 = zt_clock_now();
    e->comm_seconds += t1 - t0;
    *bucket += t1 - t0;
    zt_trace_complete(e->trace, ZT_LANE_COMM, what, t0, t1);
}

static void finish(zt_engine *e, zt_inflight *f) {
    timed_wait(e, f->req, &e->timing.reduce_scatter, e->opt.stage == 0 ? "all-reduce wait" : "reduce-scatter wait");
    if (f->count && f->landing == ZT_LAND_ADD)
        e->be->accumulate(at(e, e->grad_shard, f->shard_off), at(e, e->recv_tmp, f->shard_off), f->count);
    else if (f->count && f->landing == ZT_LAND_COPY)
        e->be->copy(at(e, e->grad_shard, f->shard_off), at(e, e->recv_tmp, f->shard_off), f->count * esz(e), ZT_D2D);
}

void zero_finish_all(zt_engine *e) {
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
        e->inflight = zt_xrealloc(e->inflight, (size_t)e->cap_inflight * sizeof *e->inflight);
    }
    e->inflight[e->n_inflight++] = f;
    if (!e->opt.overlap_comm) zero_finish_all(e);
}

/* Reduces the gradients of flat range [a, b) held in buf (buf[0] is element a), in buckets. */
static void reduce_range(zt_engine *e, const void *buf, size_t a, size_t b) {
    size_t bucket = e->opt.reduce_bucket_size >= 1 ? (size_t)e->opt.reduce_bucket_size : b - a;
    size_t *counts = zt_xcalloc((size_t)e->lay.world, sizeof *counts);
    for (size_t x = a; x < b; x += bucket) {
        size_t y = min_sz(b, x + bucket);
        const void *send = at(e, buf, x - a);
        zt_inflight f = {0};
        f.send = send;
        if (e->opt.stage == 0) {
            f.req = e->comm->allreduce_sum(e->comm, (void *)send, y - x, e->be->compute_dtype);
        } else if (e->lay.world == 1) {
            /* one rank (stages 2-3): the bucket is the whole sum already; it lands in the shard directly,
             * queued after backward's writes, with no landing zone and no collective */
            e->be->accumulate(at(e, e->grad_shard, x - e->lay.lo), send, y - x);
            continue;
        } else {
            range_counts(e, x, y, counts);
            size_t mine_lo = max_sz(x, e->lay.lo);
            f.shard_off = mine_lo - e->lay.lo;
            f.count = counts[e->lay.rank];
            f.landing = e->opt.stage == 1 ? ZT_LAND_COPY : ZT_LAND_ADD;
            f.req = e->comm->reduce_scatter_sum(e->comm, send, at(e, e->recv_tmp, f.shard_off), counts,
                                                e->be->compute_dtype);
        }
        push_inflight(e, f);
    }
    free(counts);
}

/* ---------------------------------------------------------------- parameter source */

/* Twin-Flow with overlap_step: the host part's updated parameters of flat range [x, y) in place */
static void wait_updated(zt_engine *e, size_t x, size_t y) {
    size_t a = max_sz(x, e->lay.opt_lo), b = min_sz(y, e->lay.opt_hi);
    if (b > a) twin_wait_params(e, a - e->lay.opt_lo, b - e->lay.opt_lo);
}

zt_stage3_plan zt_engine_stage3_plan(const zt_param_table *t, const zt_engine_opts *opt) {
    zt_stage3_plan w = {0, 0, 0, 0};
    int whole = t->n_embed_segments == 1;
    if (whole) w.embed = t->segment_lo[1];
    for (int s = whole; s < t->n_segments; s++) {
        size_t n = t->segment_lo[s + 1] - t->segment_lo[s];
        w.largest = max_sz(w.largest, n);
        if (s >= t->n_embed_segments && (double)n < opt->stage3_param_persistence_threshold) w.residents += n;
    }
    w.depth = zt_zero3_prefetch_depth(opt->stage3_prefetch_bucket_size, opt->stage3_max_live_parameters, w.embed,
                                      w.largest, w.residents);
    return w;
}

int zt_engine_embedding_rows(const zt_param_table *table, const zt_engine_opts *opt) {
    double bound = opt->stage3_max_live_parameters; /* < 0: the least working set */
    if (opt->stage != 3 || bound == 0 || table->n_embed_segments != 1) return 0;
    zt_stage3_plan w = zt_engine_stage3_plan(table, opt);
    int rotating = opt->stage3_prefetch_bucket_size >= 1 ? 2 : 1; /* whole with at least one segment ahead */
    if (bound > 0 && (double)(w.embed + rotating * w.largest + w.residents) <= bound) return 0; /* fits whole */
    int V = table->params[0].shape[0], C = table->params[0].shape[1];
    /* blocks no larger than the largest other segment (a transformer block), in whole 128-row tiles
     * so every block's logits and rows start 256-byte aligned */
    int rows = (int)(w.largest / (size_t)C / 128 * 128);
    if (rows < 128) rows = 128;
    return rows < V ? rows : 0;
}

/* Stage 3 gather buffers: the whole embedding's own (used at both ends of the step; none when it is
 * gathered in row blocks), one or two rotating ones for the rest (two when the next segment is
 * prefetched while one is in use), and one per resident segment (gathered once a step, kept until
 * the update). Their sum is the most gathered parameters the device ever holds, so
 * stage3_max_live_parameters is enforced here: the embedding is cut in row blocks first (the
 * session asked zt_engine_embedding_rows), then prefetch is given up, and a bound below the least
 * working set is an error. */
int zero_alloc_gather(zt_engine *e, zt_err *err) {
    const zt_param_table *table = e->table;
    size_t E = esz(e);
    e->seg_gather = zt_xcalloc((size_t)table->n_segments, sizeof *e->seg_gather);
    e->seg_resident = zt_xcalloc((size_t)table->n_segments, sizeof *e->seg_resident);
    for (int s = 0; s < table->n_segments; s++) e->seg_gather[s] = e->seg_resident[s] = -1;
    e->gather = zt_xcalloc((size_t)table->n_segments + 2 + ZT_MAX_PREFETCH, sizeof *e->gather);
    zt_stage3_plan w = zt_engine_stage3_plan(table, &e->opt);
    size_t seg0 = w.embed, other = w.largest, residents = w.residents;
    int E_seg = table->n_embed_segments;
    double bound = e->opt.stage3_max_live_parameters, bucket = e->opt.stage3_prefetch_bucket_size;
    if (bound < 0)
        zt_info("stage 3: stage3_max_live_parameters 0: the least working set (as DeepSpeed reads 0): no prefetch%s",
                E_seg > 1 ? ", the embedding in row blocks" : "");
    if (E_seg > 1)
        zt_info("stage 3: the embedding is gathered in %d row blocks of %d rows: stage3_max_live_parameters %.0f does "
                "not hold it whole beside the blocks", E_seg, table->embed_rows, bound < 0 ? 0 : bound);
    int wanted = zt_zero3_prefetch_depth(bucket, 0, seg0, other, residents); /* without the bound */
    e->prefetch_depth = w.depth;
    e->n_rotating = 1 + e->prefetch_depth;
    if (wanted > 0 && e->prefetch_depth == 0 && bound > 0)
        zt_info("stage 3: no prefetch: stage3_max_live_parameters %.0f leaves room for one block at a time "
                "(embeddings %zu + 2 x block %zu + persistent %zu elements would not fit)", bound, seg0, other, residents);
    else if (e->prefetch_depth < wanted && bound > 0)
        zt_info("stage 3: prefetch %d segment%s ahead, not %d: stage3_max_live_parameters %.0f", e->prefetch_depth,
                e->prefetch_depth == 1 ? "" : "s",
                wanted, bound);
    size_t least = seg0 + other + residents;
    if (bound > 0 && (double)least > bound) {
        char parts[128];
        if (E_seg > 1)
            snprintf(parts, sizeof parts, "the largest segment %zu, with the embedding in row blocks of %d rows,", other,
                     table->embed_rows);
        else
            snprintf(parts, sizeof parts, "embeddings %zu + the largest block %zu", seg0, other);
        return zt_fail(err, "zero_optimization.stage3_max_live_parameters %.0f is below the least stage-3 working set, "
                            "%zu elements (%s + persistent segments %zu)", bound, least, parts, residents);
    }
    for (int i = 0; i <= e->n_rotating; i++) { /* 0: the whole embedding's; 1..n_rotating */
        size_t cap = i == 0 ? seg0 : other;
        e->gather[i].seg = -1;
        if (cap == 0) continue; /* unused slot: cap 0, never chosen */
        e->gather[i].cap = cap;
        e->gather[i].buf = engine_dev_alloc(e, cap * E, ZT_MEM_COMM);
        if (!e->gather[i].buf) return zt_fail(err, "out of %s memory for the stage-3 gather buffers", e->be->name);
    }
    e->n_gather = 1 + e->n_rotating;
    for (int s = E_seg; s < table->n_segments; s++) {
        size_t n = seg_hi(e, s) - seg_lo(e, s);
        if ((double)n >= e->opt.stage3_param_persistence_threshold) continue;
        zt_gather_buf *g = &e->gather[e->n_gather++];
        g->cap = n;
        g->seg = -1;
        g->resident = 1;
        g->buf = engine_dev_alloc(e, n * E, ZT_MEM_COMM);
        if (!g->buf) return zt_fail(err, "out of %s memory for the stage-3 gather buffers", e->be->name);
        e->seg_resident[s] = (int)(g - e->gather);
    }
    return 0;
}

void zero_free_gather(zt_engine *e) {
    for (int i = 0; i < e->n_gather; i++)
        if (e->gather[i].buf) e->be->free(e->gather[i].buf);
    free(e->gather);
    free(e->seg_gather);
    free(e->seg_resident);
    free(e->use_order);
}

/* All-gathers segment seg into g. This rank's piece comes from its shard: on the device it is sent
 * from there; offloaded (offload_param) it goes up into its own place in g first and is gathered in
 * place, so no device copy of the shard exists. */
static void start_gather(zt_engine *e, int seg, zt_gather_buf *g, int ahead) {
    size_t a = seg_lo(e, seg), b = seg_hi(e, seg);
    size_t *counts = zt_xcalloc((size_t)e->lay.world, sizeof *counts);
    range_counts(e, a, b, counts);
    size_t mine = max_sz(a, e->lay.lo), k = counts[e->lay.rank];
    const void *send = g->buf; /* this rank has no piece: sends nothing */
    if (k) {
        wait_updated(e, mine, mine + k);
        send = e->param_swap ? inf_param_fetch(e, seg) /* NVMe -> host staging (read ahead, or now) */
                             : at(e, e->params, mine - e->lay.lo);
        if (e->params_on_host) {
            /* up into its place in g, after the queued work still reading g. From the host shard the copy
             * is queued without waiting (the shard is not written before the step's norm drains the
             * device), so a prefetch does not drain the compute stream; an NVMe staging buffer is
             * reused by the reads ahead, so that copy completes before they can start. */
            void *place = at(e, g->buf, mine - a);
            if (e->param_swap) e->be->copy(place, send, k * esz(e), ZT_H2D);
            else e->be->copy_async(place, send, k * esz(e), ZT_H2D);
            send = place;
        }
    }
    g->seg = seg;
    g->released_at = e->gathered_elems; /* a prefetch in flight ages from its start (reclaim_prefetched) */
    g->req = e->comm->allgather(e->comm, send, g->buf, counts, e->be->compute_dtype);
    e->seg_gather[seg] = (int)(g - e->gather);
    e->gathered_elems += b - a;
    e->timing.stage3_gathers++;
    e->timing.stage3_gathers_ahead += ahead;
    free(counts);
}

/* parameter bytes on the device now: the shard (unless offloaded) and every gathered segment */
static size_t params_held_bytes(const zt_engine *e) {
    size_t bytes = e->params_on_host ? 0 : e->lay.shard * esz(e);
    for (int i = 0; i < e->n_gather; i++)
        if (e->gather[i].seg >= 0) bytes += (seg_hi(e, e->gather[i].seg) - seg_lo(e, e->gather[i].seg)) * esz(e);
    return bytes;
}

static void evict(zt_engine *e, zt_gather_buf *g) {
    if (g->seg >= 0) e->seg_gather[g->seg] = -1;
    g->seg = -1;
}

/* a free gather buffer able to hold segment seg, or NULL: an empty one if there is one, else the
 * one whose kept segment was released longest ago */
static zt_gather_buf *free_gather_buf(zt_engine *e, int seg) {
    size_t need = seg_hi(e, seg) - seg_lo(e, seg);
    zt_gather_buf *best = NULL;
    int whole_embedding = e->table->n_embed_segments == 1 && seg == 0;
    for (int i = 0; i <= e->n_rotating; i++) { /* 0 is the whole embedding's; 1..n_rotating rotate; then residents */
        zt_gather_buf *g = &e->gather[i];
        if ((i == 0) != whole_embedding) continue;
        if (g->held || g->req || g->cap < need) continue;
        if (g->seg < 0) { best = g; break; }
        if (!best || g->released_at < best->released_at) best = g;
    }
    if (best) evict(e, best);
    return best;
}

/* the buffer segment seg should be gathered into now: a resident segment's own, or a free
 * rotating one; NULL if none is free */
static zt_gather_buf *gather_target(zt_engine *e, int seg) {
    if (e->seg_resident[seg] >= 0) return &e->gather[e->seg_resident[seg]];
    return free_gather_buf(e, seg);
}

/* ---------------------------------------------------------------- prefetch: the hint and the use order
 * The model hints the next segment (one ahead). Deeper prefetch follows the order of acquires that
 * the first training micro-step recorded (every micro-step runs the same model code, so the order
 * repeats, the same on every rank, like DeepSpeed's trace of the first step): after each acquire
 * the next prefetch_depth segments of it are gathered where a rotating buffer is free. It never
 * reaches past the micro-step's end, so nothing is gathered ahead of the update. A micro-step that
 * leaves the order (it cannot in training; evaluation runs outside micro-steps) falls back to the
 * hints until the next one. */
enum { USE_NONE, USE_RECORDING, USE_READY, USE_OFF };

void zero_begin_micro(zt_engine *e) {
    if (e->prefetch_depth < 2) return;
    if (e->use_state == USE_RECORDING) e->use_state = USE_READY;
    if (e->use_state == USE_NONE) e->use_state = USE_RECORDING, e->use_n = 0;
    e->use_pos = 0;
    e->use_lost = 0;
    e->in_micro = 1;
}

void zero_end_micros(zt_engine *e) {
    if (e->use_state == USE_RECORDING) e->use_state = USE_READY;
    e->in_micro = 0;
}

static void follow_use_order(zt_engine *e, int seg) {
    if (!e->in_micro) return;
    if (e->use_state == USE_RECORDING) {
        if (e->use_n == 64 * e->table->n_segments) { e->use_state = USE_OFF; return; } /* not a training loop */
        if (e->use_n == e->use_cap) {
            e->use_cap = e->use_cap ? 2 * e->use_cap : 256;
            e->use_order = zt_xrealloc(e->use_order, (size_t)e->use_cap * sizeof *e->use_order);
        }
        e->use_order[e->use_n++] = seg;
    } else if (e->use_state == USE_READY && !e->use_lost) {
        if (e->use_pos < e->use_n && e->use_order[e->use_pos] == seg) e->use_pos++;
        else e->use_lost = 1;
    }
}

static void stage3_prefetch(void *ctx, int seg) {
    zt_engine *e = ctx;
    if (e->opt.stage != 3 || e->n_rotating < 2 || seg < 0 || seg >= e->table->n_segments || e->seg_gather[seg] >= 0)
        return;
    /* a piece still being updated on the host is waited for in start_gather: skipping the prefetch
     * on some ranks only would put their collectives in different orders */
    zt_gather_buf *g = gather_target(e, seg);
    if (g) start_gather(e, seg, g, 1);
}

static void prefetch_ahead(zt_engine *e) {
    if (!e->in_micro || e->use_state != USE_READY || e->use_lost) return;
    for (int j = e->use_pos; j < e->use_n && j < e->use_pos + e->prefetch_depth; j++) {
        int s = e->use_order[j];
        if (e->seg_gather[s] >= 0) continue;
        zt_gather_buf *g = gather_target(e, s);
        if (!g) return;
        start_gather(e, s, g, 1);
    }
}

/* waits for a gather in flight (prefetched, not yet acquired) */
static void complete_gather(zt_engine *e, zt_gather_buf *g) {
    timed_wait(e, g->req, &e->timing.allgather, "all-gather wait");
    g->req = NULL;
}

/* every rotating buffer holds a prefetched segment not yet used (only if the order was left): the
 * oldest prefetch is completed and becomes a released segment, so its buffer may be taken */
static void reclaim_prefetched(zt_engine *e) {
    zt_gather_buf *oldest = NULL;
    for (int i = 1; i <= e->n_rotating; i++) {
        zt_gather_buf *g = &e->gather[i];
        if (g->req && !g->held && (!oldest || g->released_at < oldest->released_at)) oldest = g;
    }
    if (!oldest) return;
    complete_gather(e, oldest);
    oldest->released_at = e->gathered_elems;
}

static void *src_acquire(void *ctx, int seg) {
    zt_engine *e = ctx;
    if (e->opt.stage < 3) {
        wait_updated(e, seg_lo(e, seg), seg_hi(e, seg));
        return at(e, e->params, seg_lo(e, seg));
    }
    if (e->seg_gather[seg] >= 0) { /* still there from an earlier use: reused if it was released recently enough */
        zt_gather_buf *g = &e->gather[e->seg_gather[seg]];
        if (!g->req && !g->held && !g->resident &&
            (double)(e->gathered_elems - g->released_at) > e->opt.stage3_max_reuse_distance)
            evict(e, g);
    }
    follow_use_order(e, seg);
    if (e->seg_gather[seg] < 0) {
        zt_gather_buf *g = gather_target(e, seg);
        if (!g) reclaim_prefetched(e), g = gather_target(e, seg);
        if (!g) { fprintf(stderr, "zerotrain: error: stage 3: no free gather buffer for segment %d\n", seg); abort(); }
        start_gather(e, seg, g, 0);
    }
    zt_gather_buf *g = &e->gather[e->seg_gather[seg]];
    if (g->req) complete_gather(e, g);
    g->held = 1;
    prefetch_ahead(e);
    size_t held = params_held_bytes(e);
    if (held > e->mem.params_peak) e->mem.params_peak = held;
    if (e->trace) zt_trace_counter(e->trace, "stage-3 params held (MiB)", zt_clock_now(), "held", held / 1048576.0, "peak",
                                   e->mem.params_peak / 1048576.0);
    return g->buf;
}

/* Released: the buffer may be reused by the next gather, but until then the segment stays in it
 * and a new use within stage3_max_reuse_distance takes it as it is (the embeddings at the LM head,
 * the last blocks when backward starts) */
static void src_release(void *ctx, int seg) {
    zt_engine *e = ctx;
    if (e->opt.stage < 3 || e->seg_gather[seg] < 0) return;
    zt_gather_buf *g = &e->gather[e->seg_gather[seg]];
    g->held = 0;
    g->released_at = e->gathered_elems;
    if (!g->resident && e->opt.stage3_max_reuse_distance < 1) evict(e, g);
}

static void *src_grads(void *ctx, int seg) {
    zt_engine *e = ctx;
    if (e->opt.stage < 2) return at(e, e->grads_full, seg_lo(e, seg));
    if (e->seg_grad[seg]) return e->seg_grad[seg];
    size_t n = seg_hi(e, seg) - seg_lo(e, seg);
    if (seg < e->table->n_embed_segments) { /* its own place in pool 0 */
        void *buf = at(e, e->grad_pool[0], seg_lo(e, seg));
        finish_reading(e, buf, n * esz(e));
        e->be->memset_zero(buf, n * esz(e));
        return e->seg_grad[seg] = buf;
    }
    int slot = 1 + (e->grad_rotate++ % 2);
    void *buf = e->grad_pool[slot];
    finish_reading(e, buf, n * esz(e) + 1);
    if (e->grad_pool_seg[slot] >= 0) e->seg_grad[e->grad_pool_seg[slot]] = NULL;
    e->be->memset_zero(buf, n * esz(e));
    e->grad_pool_seg[slot] = seg;
    e->seg_grad[seg] = buf;
    return buf;
}

static void src_grads_done(void *ctx, int seg) {
    zt_engine *e = ctx;
    if (e->lay.world == 1 && e->opt.stage < 2) return; /* nothing to reduce */
    if (!e->reduce_now) return;
    const void *buf = e->opt.stage < 2 ? at(e, e->grads_full, seg_lo(e, seg)) : e->seg_grad[seg];
    reduce_range(e, buf, seg_lo(e, seg), seg_hi(e, seg));
    if (e->opt.stage >= 2) e->seg_grad[seg] = NULL; /* a later grads() call in this micro-step gets a fresh buffer */
}

zt_param_source zt_engine_param_source(zt_engine *e) {
    zt_param_source s = {e, src_acquire, src_release, src_grads, src_grads_done, stage3_prefetch};
    return s;
}

void zero_reset_residents(zt_engine *e) {
    for (int i = 0; i < e->n_gather; i++) {
        if (e->gather[i].req) complete_gather(e, &e->gather[i]); /* a prefetch nobody used */
        evict(e, &e->gather[i]);
    }
}


/* ---------------------------------------------------------------- after backward, after the update */

/* Sum of squares of grad_shard over [opt_lo, opt_hi) without the tensors every tensor-parallel rank
 * holds whole (their gradients are the same on every rank, and counted by tp rank 0 only): one sum per
 * run of split tensors. */
static double split_tensors_sumsq(zt_engine *e) {
    const zt_param_table *t = e->table;
    double sum = 0.0;
    size_t lo = e->lay.opt_lo, hi = e->lay.opt_hi, run_lo = 0, run_hi = 0;
    for (int i = 0; i <= t->count; i++) {
        const zt_param_info *p = i < t->count ? &t->params[i] : NULL;
        if (p && p->split != ZT_TP_WHOLE) {
            if (run_hi != p->offset) run_lo = p->offset; /* a new run */
            run_hi = p->offset + p->numel;
            continue;
        }
        size_t a = run_lo > lo ? run_lo : lo, b = run_hi < hi ? run_hi : hi;
        if (a < b) sum += e->be->sumsq(at(e, e->grad_shard, a - lo), b - a);
        run_lo = run_hi = 0;
    }
    return sum;
}

/* global gradient norm: stage 0 holds the full reduced gradient on every rank; otherwise each rank
 * sums the squares of its shard and the partial sums are added across ranks. Under tensor
 * parallelism the data-parallel sums are added across the tensor-parallel group as well, each whole
 * tensor counted once. A non-finite sum anywhere reaches every rank (the overflow check). */
double zero_grad_norm(zt_engine *e) {
    int tp = e->table->tp_size > 1;
    double sumsq = tp && e->table->tp_rank > 0 ? split_tensors_sumsq(e)
                                               : e->be->sumsq(e->grad_shard, e->lay.opt_hi - e->lay.opt_lo);
    if (e->opt.stage >= 1 && e->lay.world > 1) e->comm->allreduce_host_double(e->comm, &sumsq, 1);
    if (tp) e->opt.tp_comm->allreduce_host_double(e->opt.tp_comm, &sumsq, 1);
    return sqrt(sumsq);
}

/* stages 1-2: everyone needs everyone's updated parameters */
void zero_allgather_params(zt_engine *e) {
    size_t *counts = zt_xcalloc((size_t)e->lay.world, sizeof *counts);
    for (int r = 0; r < e->lay.world; r++) counts[r] = e->lay.shard;
    timed_wait(e, e->comm->allgather(e->comm, at(e, e->params, e->lay.lo), e->params, counts, e->be->compute_dtype),
               &e->timing.allgather, "all-gather params");
    free(counts);
}
