/* zero_comm.c — the communication of ZeRO stages 0-3 (see engine.c for what each stage keeps):
 * gradient reduction in buckets that never span a segment (all-reduce for stage 0, reduce-scatter
 * into this rank's shard for 1-3), optionally left in flight while backward goes on (overlap_comm);
 * at stages 2-3 with the whole optimizer shard on the host, where the engine sends the gradients
 * there (engine.c: gradients_to_host), each reduced piece goes down to the host's gradients on the
 * gradient lane (grads_lane.c) instead of into a device shard;
 * stage 3's parameter gathering segment by segment, the next one prefetched, residents kept for
 * the step; the global gradient norm; and the all-gather of updated parameters (stages 1-2). The
 * model reaches all of it through the parameter source (zero_param_source). The part's state is its
 * own (struct zero_comm); the engine hands it the shared facts and its parameter and gradient
 * buffers at zero_open (zero_comm.h). */
#include "engine/zero_comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grads_lane.h"
#include "engine/zero_formula.h"
#include "util/clock.h"

/* where a finished reduction's piece of recv_tmp goes */
typedef enum {
    ZT_LAND_NOTHING, /* stage 0: the all-reduce wrote the result in place */
    ZT_LAND_ADD,     /* stages 2-3: added to the grad shard (one reduction per micro-step) */
    ZT_LAND_COPY,    /* stage 1: copied into the grad shard (one reduction per step) */
    ZT_LAND_HOST,    /* stages 2-3, gradients on the host: queued on the gradient lane (grads_lane.c) */
} zt_landing;

/* one reduction in flight: when it completes, its piece of recv_tmp goes into the grad shard */
typedef struct zt_inflight {
    zt_comm_req *req;
    size_t shard_off, count; /* the piece of this rank's shard it delivers */
    zt_landing landing;      /* what happens to its piece of recv_tmp */
    const void *send;        /* the gradient buffer it reads (so the buffer is not reused early) */
    void *recv;              /* where its piece lands on the device (recv_tmp, or a landing slot) */
    long ticket;             /* one rank, gradients on the host (no collective): its piece on the lane */
    int land_flags;          /* GRADS_LAND_* of the micro-step that issued it */
    size_t flat_lo, flat_hi; /* the bucket, in the flat vector */
} zt_inflight;

typedef struct zt_gather_buf {
    void *buf;
    size_t cap;        /* elements */
    int seg;           /* segment gathered into it, -1 if none (a released segment stays for reuse) */
    zt_comm_req *req;  /* gather in flight */
    int held;          /* between acquire and release */
    int resident;      /* persistent segment: kept until the next optimizer step */
    size_t released_at; /* gathered_elems when it was last released */
} zt_gather_buf;

struct zero_comm {
    engine_facts f;
    zero_buffers b;
    void *recv_tmp;     /* reduce-scatter landing zone, one shard (several ranks only); with
                           gradients on the host, landing_slots zones of landing elements each */
    size_t landing;     /* gradients on the host: the most elements of a bucket's piece (zero_formula.h) */
    int landing_slots;
    grads_lane *lane;   /* gradients on the host: each reduced piece goes down on it */
    long *slot_ticket;  /* [landing_slots] the lane's ticket of the piece last queued from each zone */
    /* stages 2-3: gradient buffers handed to backward, per segment */
    void **seg_grad;    /* [n_segments] buffer assigned in this micro-step or NULL */
    void *grad_pool[3]; /* [0] for the embedding segments (used at both ends), [1..2] rotate */
    int grad_pool_seg[3];
    int grad_rotate;
    /* stage 3: gathered parameters */
    zt_gather_buf *gather; int n_gather;
    int *seg_gather;    /* [n_segments] the gather buffer holding the segment now, or -1 */
    int *seg_resident;  /* [n_segments] a resident segment's own gather buffer, or -1 */
    int n_rotating;     /* rotating gather buffers: 1 + prefetch_depth */
    int prefetch_depth; /* segments gathered ahead of use (zt_zero3_prefetch_depth); 0 = no prefetch */
    /* prefetch deeper than the model's next-segment hint: the order of the acquires of one training
     * micro-step, recorded in the first and followed in the next ones */
    int *use_order; int use_n, use_cap, use_pos;
    int use_state, use_lost; /* USE_*; this micro-step left the recorded order (hints only until the next) */
    int in_micro;       /* between zero_begin_micro and the step */
    size_t gathered_elems; /* elements gathered so far (the clock of stage3_max_reuse_distance) */
    zt_inflight *inflight; int n_inflight, cap_inflight;
    int reduce_now;     /* this micro-step's gradients are reduced (last micro-step, or stage >= 2) */
    int land_flags;     /* gradients on the host: GRADS_LAND_FIRST / _LAST for this micro-step's pieces */
    double comm_seconds; /* time spent waiting on collectives this step */
};

static size_t esz(const zero_comm *z) { return facts_esz(&z->f); }
static void *at(const zero_comm *z, const void *base, size_t elems) { return facts_at(&z->f, base, elems); }
static size_t seg_lo(const zero_comm *z, int s) { return z->f.table->segment_lo[s]; }
static size_t seg_hi(const zero_comm *z, int s) { return z->f.table->segment_lo[s + 1]; }

/* The landing zone for reductions (one rank reduces straight into its shard), and stages 2-3's
 * gradient pools: the embeddings' (all its segments) in use from the LM head to the token lookup,
 * and two rotating ones for the other segments. */
zero_comm *zero_open(const engine_facts *f, const zero_buffers *b) {
    zero_comm *z = zt_xcalloc(1, sizeof *z);
    z->f = *f;
    z->b = *b;
    const zt_param_table *table = f->table;
    size_t E = esz(z);
    if (f->opt.stage >= 2) {
        zt_segment_sizes sizes = zt_param_table_segment_sizes(table);
        z->grad_pool[0] = facts_dev_alloc(f, sizes.embed * E, ZT_MEM_GRADS);
        z->grad_pool[1] = facts_dev_alloc(f, sizes.block * E, ZT_MEM_GRADS);
        z->grad_pool[2] = facts_dev_alloc(f, sizes.block * E, ZT_MEM_GRADS);
        z->grad_pool_seg[0] = z->grad_pool_seg[1] = z->grad_pool_seg[2] = -1;
        z->seg_grad = zt_xcalloc((size_t)table->n_segments, sizeof *z->seg_grad);
    }
    size_t zone = f->lay.shard;
    if (b->grads_land) { /* bucket by bucket to the host: zones for a bucket's piece, not the shard */
        z->landing = zt_zero_landing_elems(f->opt.reduce_bucket_size, zt_param_table_segment_sizes(table).any,
                                           f->lay.shard);
        z->landing_slots = zt_zero_landing_slots(f->opt.overlap_comm);
        zone = z->landing * (size_t)z->landing_slots;
        z->lane = grads_lane_open(f, z->landing, b->owner, b->grads_land);
        z->slot_ticket = zt_xcalloc((size_t)z->landing_slots, sizeof *z->slot_ticket);
        for (int k = 0; k < z->landing_slots; k++) z->slot_ticket[k] = -1;
    }
    if (f->opt.stage >= 1 && f->lay.world > 1) z->recv_tmp = facts_dev_alloc(f, zone * E, ZT_MEM_COMM);
    return z;
}

int zero_buffers_ok(const zero_comm *z) {
    int stage = z->f.opt.stage;
    return !(stage >= 1 && z->f.lay.world > 1 && !z->recv_tmp) &&
           !(stage >= 2 && (!z->grad_pool[0] || !z->grad_pool[1])) && !(z->b.grads_land && !z->lane);
}

static void zero_free_gather(zero_comm *z);

void zero_close(zero_comm *z) {
    if (!z) return;
    grads_lane_close(z->lane); /* lands what is queued: it reads the buffers below */
    free(z->slot_ticket);
    void *bufs[] = {z->recv_tmp, z->grad_pool[0], z->grad_pool[1], z->grad_pool[2]};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) z->f.be->free(bufs[i]);
    zero_free_gather(z);
    free(z->seg_grad);
    free(z->inflight);
    free(z);
}

double zero_comm_seconds(const zero_comm *z) { return z->comm_seconds; }
int zero_prefetch_depth(const zero_comm *z) { return z->prefetch_depth; }
int zero_in_micro(const zero_comm *z) { return z->in_micro; }

/* per-rank piece sizes of the flat range [a, b) under the shard partition */
static void range_counts(const zero_comm *z, size_t a, size_t b, size_t *counts) {
    for (int r = 0; r < z->f.lay.world; r++) {
        size_t rlo = (size_t)r * z->f.lay.shard, rhi = rlo + z->f.lay.shard;
        size_t x = max_sz(a, rlo), y = min_sz(b, rhi);
        counts[r] = y > x ? y - x : 0;
    }
}

/* ---------------------------------------------------------------- collectives bookkeeping */

/* waits for req, counting the time in the step's comm time, in *bucket and in the trace as `what` */
static void timed_wait(zero_comm *z, zt_comm_req *req, double *bucket, const char *what) {
    double t0 = zt_clock_now();
    z->f.comm->wait(z->f.comm, req);
    double t1 = zt_clock_now();
    z->comm_seconds += t1 - t0;
    *bucket += t1 - t0;
    zt_trace_complete(*z->f.trace, ZT_LANE_COMM, what, t0, t1);
}

/* the last micro-step's reduction of flat range [a, b) is queued (or handed to the gradient lane):
 * those gradients are final, for whoever asked (zero_buffers.grads_final) */
static void final_range(zero_comm *z, int flags, size_t a, size_t b) {
    if (z->b.grads_final && (flags & GRADS_LAND_LAST) && b > a) z->b.grads_final(z->b.owner, a, b);
}

/* gradients on the host: n reduced elements at dev_src (queued device work may still write them)
 * queued on the lane, which brings them down and adds them to the host's gradients at shard offset
 * off while backward goes on; its ticket */
static long land_on_host(zero_comm *z, size_t off, const void *dev_src, size_t n, int flags) {
    z->b.grads_ready(z->b.owner);
    z->f.be->synchronize(); /* the lane's D2H is not ordered after the work that wrote dev_src */
    final_range(z, flags, z->f.lay.lo + off, z->f.lay.lo + off + n); /* before it can land */
    return grads_lane_push(z->lane, dev_src, off, n, flags);
}

static void finish(zero_comm *z, zt_inflight *f) {
    if (!f->req) { /* one rank: its piece was queued on the lane as it was reduced */
        grads_lane_wait(z->lane, f->ticket, 0, "wait for a gradient buffer to be read");
        return;
    }
    timed_wait(z, f->req, &z->f.timing->reduce_scatter, z->f.opt.stage == 0 ? "all-reduce wait" : "reduce-scatter wait");
    if (f->count && f->landing == ZT_LAND_ADD)
        z->f.be->accumulate(at(z, z->b.grad_shard, f->shard_off), f->recv, f->count);
    else if (f->count && f->landing == ZT_LAND_COPY)
        z->f.be->copy(at(z, z->b.grad_shard, f->shard_off), f->recv, f->count * esz(z), ZT_D2D);
    else if (f->count && f->landing == ZT_LAND_HOST) /* the zone is the lane's until its ticket is done */
        z->slot_ticket[(size_t)((char *)f->recv - (char *)z->recv_tmp) / (z->landing * esz(z))] =
            land_on_host(z, f->shard_off, f->recv, f->count, f->land_flags);
    if (f->landing == ZT_LAND_NOTHING) final_range(z, f->land_flags, f->flat_lo, f->flat_hi); /* in place */
    else if (f->landing != ZT_LAND_HOST && f->count)
        final_range(z, f->land_flags, z->f.lay.lo + f->shard_off, z->f.lay.lo + f->shard_off + f->count);
}

/* every reduction in flight completed (their pieces may still be on the gradient lane) */
static void finish_inflight(zero_comm *z) {
    for (int i = 0; i < z->n_inflight; i++) finish(z, &z->inflight[i]);
    z->n_inflight = 0;
}

void zero_finish_all(zero_comm *z) {
    finish_inflight(z);
    if (!z->lane) return;
    grads_lane_drain(z->lane);
    for (int k = 0; k < z->landing_slots; k++) z->slot_ticket[k] = -1;
}

/* completes the reductions that read buf, so it can be reused */
static void finish_reading(zero_comm *z, const void *buf, size_t bytes) {
    int kept = 0;
    for (int i = 0; i < z->n_inflight; i++) {
        zt_inflight *f = &z->inflight[i];
        if ((const char *)f->send >= (const char *)buf && (const char *)f->send < (const char *)buf + bytes)
            finish(z, f);
        else
            z->inflight[kept++] = *f;
    }
    z->n_inflight = kept;
}

static void append_inflight(zero_comm *z, zt_inflight f) {
    if (z->n_inflight == z->cap_inflight) {
        z->cap_inflight = z->cap_inflight ? 2 * z->cap_inflight : 64;
        z->inflight = zt_xrealloc(z->inflight, (size_t)z->cap_inflight * sizeof *z->inflight);
    }
    z->inflight[z->n_inflight++] = f;
}

static void push_inflight(zero_comm *z, zt_inflight f) {
    append_inflight(z, f);
    if (!z->f.opt.overlap_comm) finish_inflight(z);
}

/* gradients on the host: a landing zone no reduction in flight holds, finishing the oldest (the
 * landings of one element keep their order: they are in issue order either way), once the lane has
 * brought down what was queued from it */
static void *free_landing_slot(zero_comm *z) {
    for (;;) {
        for (int k = 0; k < z->landing_slots; k++) {
            void *slot = at(z, z->recv_tmp, (size_t)k * z->landing);
            int held = 0;
            for (int i = 0; i < z->n_inflight && !held; i++) held = z->inflight[i].recv == slot;
            if (held) continue;
            grads_lane_wait(z->lane, z->slot_ticket[k], 0, "wait for a landing zone to be read");
            return slot;
        }
        finish(z, &z->inflight[0]);
        memmove(z->inflight, z->inflight + 1, (size_t)--z->n_inflight * sizeof *z->inflight);
    }
}

/* Reduces the gradients of flat range [a, b) held in buf (buf[0] is element a), in buckets. */
static void reduce_range(zero_comm *z, const void *buf, size_t a, size_t b) {
    size_t bucket = z->f.opt.reduce_bucket_size >= 1 ? (size_t)z->f.opt.reduce_bucket_size : b - a;
    size_t *counts = zt_xcalloc((size_t)z->f.lay.world, sizeof *counts);
    for (size_t x = a; x < b; x += bucket) {
        size_t y = min_sz(b, x + bucket);
        const void *send = at(z, buf, x - a);
        zt_inflight f = {0};
        f.send = send;
        f.land_flags = z->land_flags;
        f.flat_lo = x, f.flat_hi = y;
        if (z->f.opt.stage == 0) {
            f.req = z->f.comm->allreduce_sum(z->f.comm, (void *)send, y - x, z->f.be->compute_dtype);
        } else if (z->f.lay.world == 1) {
            /* one rank (stages 2-3): the bucket is the whole sum already; it lands in the shard directly,
             * queued after backward's writes, with no landing zone and no collective (or goes down to
             * the host's gradients) */
            if (!z->b.grads_land) {
                z->f.be->accumulate(at(z, z->b.grad_shard, x - z->f.lay.lo), send, y - x);
                final_range(z, f.land_flags, x, y);
                continue;
            }
            f.landing = ZT_LAND_HOST; /* its buffer is not reused before the lane has read it */
            f.ticket = land_on_host(z, x - z->f.lay.lo, send, y - x, f.land_flags);
            append_inflight(z, f);
            continue;
        } else {
            range_counts(z, x, y, counts);
            size_t mine_lo = max_sz(x, z->f.lay.lo);
            f.shard_off = mine_lo - z->f.lay.lo;
            f.count = counts[z->f.lay.rank];
            f.landing = z->f.opt.stage == 1 ? ZT_LAND_COPY : z->b.grads_land ? ZT_LAND_HOST : ZT_LAND_ADD;
            f.recv = z->b.grads_land ? free_landing_slot(z) : at(z, z->recv_tmp, f.shard_off);
            f.req = z->f.comm->reduce_scatter_sum(z->f.comm, send, f.recv, counts, z->f.be->compute_dtype);
        }
        push_inflight(z, f);
    }
    free(counts);
}

/* ---------------------------------------------------------------- parameter source */

/* Twin-Flow with overlap_step: the host part's updated parameters of flat range [x, y) in place */
static void wait_updated(zero_comm *z, size_t x, size_t y) { z->b.wait_updated(z->b.owner, x, y); }

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
int zero_open_gather(zero_comm *z, zt_err *err) {
    const zt_param_table *table = z->f.table;
    size_t E = esz(z);
    z->seg_gather = zt_xcalloc((size_t)table->n_segments, sizeof *z->seg_gather);
    z->seg_resident = zt_xcalloc((size_t)table->n_segments, sizeof *z->seg_resident);
    for (int s = 0; s < table->n_segments; s++) z->seg_gather[s] = z->seg_resident[s] = -1;
    z->gather = zt_xcalloc((size_t)table->n_segments + 2 + ZT_MAX_PREFETCH, sizeof *z->gather);
    zt_stage3_plan w = zt_engine_stage3_plan(table, &z->f.opt);
    size_t seg0 = w.embed, other = w.largest, residents = w.residents;
    int E_seg = table->n_embed_segments;
    double bound = z->f.opt.stage3_max_live_parameters, bucket = z->f.opt.stage3_prefetch_bucket_size;
    if (bound < 0)
        zt_info("stage 3: stage3_max_live_parameters 0: the least working set (as DeepSpeed reads 0): no prefetch%s",
                E_seg > 1 ? ", the embedding in row blocks" : "");
    if (E_seg > 1)
        zt_info("stage 3: the embedding is gathered in %d row blocks of %d rows: stage3_max_live_parameters %.0f does "
                "not hold it whole beside the blocks", E_seg, table->embed_rows, bound < 0 ? 0 : bound);
    int wanted = zt_zero3_prefetch_depth(bucket, 0, seg0, other, residents); /* without the bound */
    z->prefetch_depth = w.depth;
    z->n_rotating = 1 + z->prefetch_depth;
    if (wanted > 0 && z->prefetch_depth == 0 && bound > 0)
        zt_info("stage 3: no prefetch: stage3_max_live_parameters %.0f leaves room for one block at a time "
                "(embeddings %zu + 2 x block %zu + persistent %zu elements would not fit)", bound, seg0, other, residents);
    else if (z->prefetch_depth < wanted && bound > 0)
        zt_info("stage 3: prefetch %d segment%s ahead, not %d: stage3_max_live_parameters %.0f", z->prefetch_depth,
                z->prefetch_depth == 1 ? "" : "s",
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
    for (int i = 0; i <= z->n_rotating; i++) { /* 0: the whole embedding's; 1..n_rotating */
        size_t cap = i == 0 ? seg0 : other;
        z->gather[i].seg = -1;
        if (cap == 0) continue; /* unused slot: cap 0, never chosen */
        z->gather[i].cap = cap;
        z->gather[i].buf = facts_dev_alloc(&z->f, cap * E, ZT_MEM_COMM);
        if (!z->gather[i].buf) return zt_fail(err, "out of %s memory for the stage-3 gather buffers", z->f.be->name);
    }
    z->n_gather = 1 + z->n_rotating;
    for (int s = E_seg; s < table->n_segments; s++) {
        size_t n = seg_hi(z, s) - seg_lo(z, s);
        if ((double)n >= z->f.opt.stage3_param_persistence_threshold) continue;
        zt_gather_buf *g = &z->gather[z->n_gather++];
        g->cap = n;
        g->seg = -1;
        g->resident = 1;
        g->buf = facts_dev_alloc(&z->f, n * E, ZT_MEM_COMM);
        if (!g->buf) return zt_fail(err, "out of %s memory for the stage-3 gather buffers", z->f.be->name);
        z->seg_resident[s] = (int)(g - z->gather);
    }
    return 0;
}

static void zero_free_gather(zero_comm *z) {
    for (int i = 0; i < z->n_gather; i++)
        if (z->gather[i].buf) z->f.be->free(z->gather[i].buf);
    free(z->gather);
    free(z->seg_gather);
    free(z->seg_resident);
    free(z->use_order);
}

/* All-gathers segment seg into g. This rank's piece comes from its shard: on the device it is sent
 * from there; offloaded (offload_param) it goes up into its own place in g first and is gathered in
 * place, so no device copy of the shard exists. */
static void start_gather(zero_comm *z, int seg, zt_gather_buf *g, int ahead) {
    size_t a = seg_lo(z, seg), b = seg_hi(z, seg);
    size_t *counts = zt_xcalloc((size_t)z->f.lay.world, sizeof *counts);
    range_counts(z, a, b, counts);
    size_t mine = max_sz(a, z->f.lay.lo), k = counts[z->f.lay.rank];
    const void *send = g->buf; /* this rank has no piece: sends nothing */
    if (k) {
        wait_updated(z, mine, mine + k);
        send = z->b.fetch_from_nvme ? z->b.fetch_from_nvme(z->b.owner, seg) /* NVMe -> host staging (read ahead, or now) */
                             : at(z, z->b.params, mine - z->f.lay.lo);
        if (z->b.params_on_host) {
            /* up into its place in g, after the queued work still reading g. From the host shard the copy
             * is queued without waiting (the shard is not written before the step's norm drains the
             * device), so a prefetch does not drain the compute stream; an NVMe staging buffer is
             * reused by the reads ahead, so that copy completes before they can start. */
            void *place = at(z, g->buf, mine - a);
            if (z->b.fetch_from_nvme) z->f.be->copy(place, send, k * esz(z), ZT_H2D);
            else z->f.be->copy_async(place, send, k * esz(z), ZT_H2D);
            send = place;
        }
    }
    g->seg = seg;
    g->released_at = z->gathered_elems; /* a prefetch in flight ages from its start (reclaim_prefetched) */
    g->req = z->f.comm->allgather(z->f.comm, send, g->buf, counts, z->f.be->compute_dtype);
    z->seg_gather[seg] = (int)(g - z->gather);
    z->gathered_elems += b - a;
    z->f.timing->stage3_gathers++;
    z->f.timing->stage3_gathers_ahead += ahead;
    free(counts);
}

/* parameter bytes on the device now: the shard (unless offloaded) and every gathered segment */
static size_t params_held_bytes(const zero_comm *z) {
    size_t bytes = z->b.params_on_host ? 0 : z->f.lay.shard * esz(z);
    for (int i = 0; i < z->n_gather; i++)
        if (z->gather[i].seg >= 0) bytes += (seg_hi(z, z->gather[i].seg) - seg_lo(z, z->gather[i].seg)) * esz(z);
    return bytes;
}

static void evict(zero_comm *z, zt_gather_buf *g) {
    if (g->seg >= 0) z->seg_gather[g->seg] = -1;
    g->seg = -1;
}

/* a free gather buffer able to hold segment seg, or NULL: an empty one if there is one, else the
 * one whose kept segment was released longest ago */
static zt_gather_buf *free_gather_buf(zero_comm *z, int seg) {
    size_t need = seg_hi(z, seg) - seg_lo(z, seg);
    zt_gather_buf *best = NULL;
    int whole_embedding = z->f.table->n_embed_segments == 1 && seg == 0;
    for (int i = 0; i <= z->n_rotating; i++) { /* 0 is the whole embedding's; 1..n_rotating rotate; then residents */
        zt_gather_buf *g = &z->gather[i];
        if ((i == 0) != whole_embedding) continue;
        if (g->held || g->req || g->cap < need) continue;
        if (g->seg < 0) { best = g; break; }
        if (!best || g->released_at < best->released_at) best = g;
    }
    if (best) evict(z, best);
    return best;
}

/* the buffer segment seg should be gathered into now: a resident segment's own, or a free
 * rotating one; NULL if none is free */
static zt_gather_buf *gather_target(zero_comm *z, int seg) {
    if (z->seg_resident[seg] >= 0) return &z->gather[z->seg_resident[seg]];
    return free_gather_buf(z, seg);
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

void zero_begin_micro(zero_comm *z, int first, int last) {
    if (first) z->comm_seconds = 0;
    z->reduce_now = z->f.opt.stage >= 2 || last;
    z->land_flags = (first ? GRADS_LAND_FIRST : 0) | (last ? GRADS_LAND_LAST : 0);
    if (z->f.opt.stage != 3 || z->prefetch_depth < 2) return;
    if (z->use_state == USE_RECORDING) z->use_state = USE_READY;
    if (z->use_state == USE_NONE) z->use_state = USE_RECORDING, z->use_n = 0;
    z->use_pos = 0;
    z->use_lost = 0;
    z->in_micro = 1;
}

void zero_end_micros(zero_comm *z) {
    if (z->use_state == USE_RECORDING) z->use_state = USE_READY;
    z->in_micro = 0;
}

static void follow_use_order(zero_comm *z, int seg) {
    if (!z->in_micro) return;
    if (z->use_state == USE_RECORDING) {
        if (z->use_n == 64 * z->f.table->n_segments) { z->use_state = USE_OFF; return; } /* not a training loop */
        if (z->use_n == z->use_cap) {
            z->use_cap = z->use_cap ? 2 * z->use_cap : 256;
            z->use_order = zt_xrealloc(z->use_order, (size_t)z->use_cap * sizeof *z->use_order);
        }
        z->use_order[z->use_n++] = seg;
    } else if (z->use_state == USE_READY && !z->use_lost) {
        if (z->use_pos < z->use_n && z->use_order[z->use_pos] == seg) z->use_pos++;
        else z->use_lost = 1;
    }
}

static void stage3_prefetch(void *ctx, int seg) {
    zero_comm *z = ctx;
    if (z->f.opt.stage != 3 || z->n_rotating < 2 || seg < 0 || seg >= z->f.table->n_segments || z->seg_gather[seg] >= 0)
        return;
    /* a piece still being updated on the host is waited for in start_gather: skipping the prefetch
     * on some ranks only would put their collectives in different orders */
    zt_gather_buf *g = gather_target(z, seg);
    if (g) start_gather(z, seg, g, 1);
}

static void prefetch_ahead(zero_comm *z) {
    if (!z->in_micro || z->use_state != USE_READY || z->use_lost) return;
    for (int j = z->use_pos; j < z->use_n && j < z->use_pos + z->prefetch_depth; j++) {
        int s = z->use_order[j];
        if (z->seg_gather[s] >= 0) continue;
        zt_gather_buf *g = gather_target(z, s);
        if (!g) return;
        start_gather(z, s, g, 1);
    }
}

/* waits for a gather in flight (prefetched, not yet acquired) */
static void complete_gather(zero_comm *z, zt_gather_buf *g) {
    timed_wait(z, g->req, &z->f.timing->allgather, "all-gather wait");
    g->req = NULL;
}

/* every rotating buffer holds a prefetched segment not yet used (only if the order was left): the
 * oldest prefetch is completed and becomes a released segment, so its buffer may be taken */
static void reclaim_prefetched(zero_comm *z) {
    zt_gather_buf *oldest = NULL;
    for (int i = 1; i <= z->n_rotating; i++) {
        zt_gather_buf *g = &z->gather[i];
        if (g->req && !g->held && (!oldest || g->released_at < oldest->released_at)) oldest = g;
    }
    if (!oldest) return;
    complete_gather(z, oldest);
    oldest->released_at = z->gathered_elems;
}

static void *src_acquire(void *ctx, int seg) {
    zero_comm *z = ctx;
    if (z->f.opt.stage < 3) {
        wait_updated(z, seg_lo(z, seg), seg_hi(z, seg));
        return at(z, z->b.params, seg_lo(z, seg));
    }
    if (z->seg_gather[seg] >= 0) { /* still there from an earlier use: reused if it was released recently enough */
        zt_gather_buf *g = &z->gather[z->seg_gather[seg]];
        if (!g->req && !g->held && !g->resident &&
            (double)(z->gathered_elems - g->released_at) > z->f.opt.stage3_max_reuse_distance)
            evict(z, g);
    }
    follow_use_order(z, seg);
    if (z->seg_gather[seg] < 0) {
        zt_gather_buf *g = gather_target(z, seg);
        if (!g) reclaim_prefetched(z), g = gather_target(z, seg);
        if (!g) { fprintf(stderr, "zerotrain: error: stage 3: no free gather buffer for segment %d\n", seg); abort(); }
        start_gather(z, seg, g, 0);
    }
    zt_gather_buf *g = &z->gather[z->seg_gather[seg]];
    if (g->req) complete_gather(z, g);
    g->held = 1;
    prefetch_ahead(z);
    size_t held = params_held_bytes(z);
    if (held > z->f.mem->params_peak) z->f.mem->params_peak = held;
    if (*z->f.trace) zt_trace_counter(*z->f.trace, "stage-3 params held (MiB)", zt_clock_now(), "held", held / 1048576.0, "peak",
                                   z->f.mem->params_peak / 1048576.0);
    return g->buf;
}

/* Released: the buffer may be reused by the next gather, but until then the segment stays in it
 * and a new use within stage3_max_reuse_distance takes it as it is (the embeddings at the LM head,
 * the last blocks when backward starts) */
static void src_release(void *ctx, int seg) {
    zero_comm *z = ctx;
    if (z->f.opt.stage < 3 || z->seg_gather[seg] < 0) return;
    zt_gather_buf *g = &z->gather[z->seg_gather[seg]];
    g->held = 0;
    g->released_at = z->gathered_elems;
    if (!g->resident && z->f.opt.stage3_max_reuse_distance < 1) evict(z, g);
}

static void *src_grads(void *ctx, int seg) {
    zero_comm *z = ctx;
    if (z->f.opt.stage < 2) return at(z, z->b.grads_full, seg_lo(z, seg));
    if (z->seg_grad[seg]) return z->seg_grad[seg];
    size_t n = seg_hi(z, seg) - seg_lo(z, seg);
    if (seg < z->f.table->n_embed_segments) { /* its own place in pool 0 */
        void *buf = at(z, z->grad_pool[0], seg_lo(z, seg));
        finish_reading(z, buf, n * esz(z));
        z->f.be->memset_zero(buf, n * esz(z));
        return z->seg_grad[seg] = buf;
    }
    int slot = 1 + (z->grad_rotate++ % 2);
    void *buf = z->grad_pool[slot];
    finish_reading(z, buf, n * esz(z) + 1);
    if (z->grad_pool_seg[slot] >= 0) z->seg_grad[z->grad_pool_seg[slot]] = NULL;
    z->f.be->memset_zero(buf, n * esz(z));
    z->grad_pool_seg[slot] = seg;
    z->seg_grad[seg] = buf;
    return buf;
}

static void src_grads_done(void *ctx, int seg) {
    zero_comm *z = ctx;
    if (z->f.lay.world == 1 && z->f.opt.stage < 2) { /* nothing to reduce: backward wrote them in place */
        final_range(z, z->land_flags, seg_lo(z, seg), seg_hi(z, seg));
        return;
    }
    if (!z->reduce_now) return;
    const void *buf = z->f.opt.stage < 2 ? at(z, z->b.grads_full, seg_lo(z, seg)) : z->seg_grad[seg];
    reduce_range(z, buf, seg_lo(z, seg), seg_hi(z, seg));
    if (z->f.opt.stage >= 2) z->seg_grad[seg] = NULL; /* a later grads() call in this micro-step gets a fresh buffer */
}

zt_param_source zero_param_source(zero_comm *z) {
    zt_param_source s = {z, src_acquire, src_release, src_grads, src_grads_done, stage3_prefetch};
    return s;
}

void zero_reset_residents(zero_comm *z) {
    for (int i = 0; i < z->n_gather; i++) {
        if (z->gather[i].req) complete_gather(z, &z->gather[i]); /* a prefetch nobody used */
        evict(z, &z->gather[i]);
    }
}


/* ---------------------------------------------------------------- after backward, after the update */

/* sum of squares of the reduced gradients at shard offsets [off, off + n): on the device, or where
 * they landed in host memory (the same sum, bit for bit) */
static double shard_sumsq(zero_comm *z, size_t off, size_t n) {
    if (z->b.grads_sumsq) return z->b.grads_sumsq(z->b.owner, off, n);
    return z->f.be->sumsq(at(z, z->b.grad_shard, off), n);
}

/* Sum of squares of grad_shard over [opt_lo, opt_hi) without the tensors every tensor-parallel rank
 * holds whole (their gradients are the same on every rank, and counted by tp rank 0 only): one sum per
 * run of split tensors. */
static double split_tensors_sumsq(zero_comm *z) {
    const zt_param_table *t = z->f.table;
    double sum = 0.0;
    size_t lo = z->f.lay.opt_lo, hi = z->f.lay.opt_hi, run_lo = 0, run_hi = 0;
    for (int i = 0; i <= t->count; i++) {
        const zt_param_info *p = i < t->count ? &t->params[i] : NULL;
        if (p && p->split != ZT_TP_WHOLE) {
            if (run_hi != p->offset) run_lo = p->offset; /* a new run */
            run_hi = p->offset + p->numel;
            continue;
        }
        size_t a = run_lo > lo ? run_lo : lo, b = run_hi < hi ? run_hi : hi;
        if (a < b) sum += shard_sumsq(z, a - lo, b - a);
        run_lo = run_hi = 0;
    }
    return sum;
}

/* global gradient norm: stage 0 holds the full reduced gradient on every rank; otherwise each rank
 * sums the squares of its shard and the partial sums are added across ranks. Under tensor
 * parallelism the data-parallel sums are added across the tensor-parallel group as well, each whole
 * tensor counted once. A non-finite sum anywhere reaches every rank (the overflow check). */
double zero_grad_norm(zero_comm *z) {
    int tp = z->f.table->tp_size > 1;
    double sumsq = tp && z->f.table->tp_rank > 0 ? split_tensors_sumsq(z)
                                               : shard_sumsq(z, 0, z->f.lay.opt_hi - z->f.lay.opt_lo);
    if (z->f.opt.stage >= 1 && z->f.lay.world > 1) z->f.comm->allreduce_host_double(z->f.comm, &sumsq, 1);
    if (tp) z->f.opt.tp_comm->allreduce_host_double(z->f.opt.tp_comm, &sumsq, 1);
    return sqrt(sumsq);
}

/* stages 1-2: everyone needs everyone's updated parameters */
void zero_allgather_params(zero_comm *z) {
    size_t *counts = zt_xcalloc((size_t)z->f.lay.world, sizeof *counts);
    for (int r = 0; r < z->f.lay.world; r++) counts[r] = z->f.lay.shard;
    timed_wait(z, z->f.comm->allgather(z->f.comm, at(z, z->b.params, z->f.lay.lo), z->b.params, counts, z->f.be->compute_dtype),
               &z->f.timing->allgather, "all-gather params");
    free(counts);
}
