/* twin_lanes.c — a Twin-Flow update's host threads (twin_flow.c's header says how a step runs):
 *   D2H lane          brings the host part's gradients down, range by range as the engine queues them
 *                     (each from its point of the compute stream on: backend.h's mark), chunk by chunk
 *   speculative lane  super_offload: the CPU Adam of the window's chunks before the verdict, out of
 *                     place, earliest deadline first (next_speculation)
 *   host Adam lane    after the verdict: settles the speculation (kept or forgotten), then the CPU Adam
 *                     of every chunk not done, lowest first, in place
 *   H2D lane          each done chunk's parameters up, lowest first, accepted speculations in the gaps
 *                     (next_up)
 * They hand each other chunk states (CH_*: set under the flow's mutex, each with the time it was
 * reached on the run's clock, util/clock.h's handoff), so on a virtual clock the schedule follows the
 * costs whatever order the threads ran in. The flow's life (start, go, join, free) is here too; what
 * a step asks of it is twin_flow.c's. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/twin_internal.h"
#include "util/clock.h"
#include "util/test_hooks.h"

/* ---- chunk states: set under tf->mu, each with the time it was reached (util/clock.h's handoff) */

static double *time_of(twin_flow *tf, unsigned bit) {
    return bit == CH_DOWN ? tf->down_at : bit == CH_DONE ? tf->done_at : bit == CH_UP ? tf->up_at : tf->spec_end;
}

/* holding mu: chunk c has reached `bit` at `when` (the caller wakes the lanes) */
static void mark_locked(twin_flow *tf, size_t c, unsigned bit, double when) {
    if (tf->state[c] & bit) return;
    tf->state[c] |= (unsigned char)bit;
    if (bit != CH_KEPT) time_of(tf, bit)[c] = when;
    tf->count[bit]++;
    tf->last_at[bit] = fmax(tf->last_at[bit], when);
    if (bit == CH_DOWN) tf->release_clock = fmax(tf->release_clock, when);
}

/* chunks [c0, c1) have reached `bit`, now on the calling thread's clock */
static void publish(twin_flow *tf, size_t c0, size_t c1, unsigned bit) {
    double now = zt_clock_now();
    pthread_mutex_lock(&tf->mu);
    for (size_t c = c0; c < c1; c++) mark_locked(tf, c, bit, now);
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

/* holding mu: until chunk c has `bit`; the calling thread goes on from when it got it */
void twin_wait_chunk(twin_flow *tf, size_t c, unsigned bit) {
    while (!(tf->state[c] & bit)) pthread_cond_wait(&tf->cv, &tf->mu);
    zt_clock_after(time_of(tf, bit)[c]);
}

/* holding mu: until the verdict is in */
static void wait_go(twin_flow *tf) {
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

/* AdamW of host-part elements [off, off + n), tensor piece by tensor piece (weight decay is per
 * tensor): the state read from (p, m, v) and written to (po, mo, vo) (the same arrays in place,
 * others for a speculative update), the gradients g in the compute dtype, the updated parameters to
 * out in it (NULL: none); all point at element off */
static void adam_span(const twin_host *t, const zt_adam_step *st, size_t off, size_t n, const float *p, const float *m,
                      const float *v, float *po, float *mo, float *vo, const void *g, void *out) {
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
        zt_cpu_adamw_g_to(p + d, m + d, v + d, po + d, mo + d, vo + d, (const char *)g + d * esz(t),
                          t->f.be->compute_dtype, y - x, &sti, fp32 ? NULL : o, t->f.be->compute_dtype,
                          t->f.off.host_threads, ZT_ADAM_ISA_BEST);
        if (fp32 && o) memcpy(o, po + d, (y - x) * sizeof(float)); /* fp32 "casting" is a copy */
    }
}

/* chunk c updated in place with the step's update */
static void adam_chunk(twin_flow *tf, size_t c) {
    twin_host *t = tf->t;
    size_t a, b;
    twin_chunk_range(t, c, &a, &b);
    float *p, *m, *v;
    chunk_state(t, c, 0, &p, &m, &v);
    adam_span(t, &tf->st, a, b - a, p, m, v, p, m, v, at(t, t->host_grad, a), twin_host_out(t, a));
}

/* ---- the host Adam lane with the states on NVMe: the swap's pipeline (engine_infinity.c) asks
 * this lane to update each group as it comes in */

static long nvme_wait_go(void *ctx) {
    twin_flow *tf = ctx;
    pthread_mutex_lock(&tf->mu);
    wait_go(tf);
    pthread_mutex_unlock(&tf->mu);
    return tf->step;
}

/* the chunks of host-part elements [lo, hi), each once its gradients are down */
static void nvme_update(void *ctx, size_t lo, size_t hi, float *master, float *m, float *v) {
    twin_flow *tf = ctx;
    twin_host *t = tf->t;
    for (size_t c = lo / t->host_chunk; c * t->host_chunk < hi; c++) {
        pthread_mutex_lock(&tf->mu);
        twin_wait_chunk(tf, c, CH_DOWN);
        pthread_mutex_unlock(&tf->mu);
        size_t ca, cb;
        twin_chunk_range(t, c, &ca, &cb);
        size_t a = max_sz(ca, lo), b = min_sz(cb, hi);
        float *p = master + (a - lo), *mm = m + (a - lo), *vv = v + (a - lo);
        adam_span(t, &tf->st, a, b - a, p, mm, vv, p, mm, vv, at(t, t->host_grad, a), twin_host_out(t, a));
    }
}

/* chunks wholly inside the groups done so far may go up */
static void nvme_group_done(void *ctx, size_t hi, int last, double t0, double t1) {
    twin_flow *tf = ctx;
    tf->adam_busy += t1 - t0;
    size_t upto = last ? tf->nchunks : hi / tf->t->host_chunk;
    pthread_mutex_lock(&tf->mu);
    size_t from = tf->count[CH_DONE]; /* the groups go in order: the done chunks are a prefix */
    pthread_mutex_unlock(&tf->mu);
    if (upto > from) publish(tf, from, upto, CH_DONE);
}

/* ---- the lanes */

/* holding mu: the speculated chunks that count (CH_KEPT) are done, once the host Adam lane settled them */
static int accepted(const twin_flow *tf) {
    return tf->verdict == VERDICT_ACCEPT || (tf->verdict == VERDICT_REDO && zt_test_hook_skip_rollback());
}

/* After the verdict, on the host Adam lane once the speculative lane has ended: which speculated
 * chunks count (those begun before the verdict, on the run's clock: CH_KEPT), and with an accepted
 * update their new state is the state: their places flip and they are done. A rejected one is
 * forgotten: the old state is where it was. The lane's clock goes on from the end of the last chunk
 * that counted (the CPU was busy with it until then). */
static void settle_speculation(twin_flow *tf) {
    twin_host *t = tf->t;
    pthread_mutex_lock(&tf->mu);
    while (!tf->spec_stopped) pthread_cond_wait(&tf->cv, &tf->mu);
    for (size_t c = t->window_first; c < tf->nchunks; c++) {
        if (!(tf->state[c] & CH_SPEC) || tf->spec_start[c] >= tf->go_at) continue;
        mark_locked(tf, c, CH_KEPT, 0);
        tf->kept_until = fmax(tf->kept_until, tf->spec_end[c]);
        if (!accepted(tf)) continue;
        t->in_spare[c] ^= 1;
        mark_locked(tf, c, CH_DONE, fmax(tf->spec_end[c], tf->go_at));
    }
    tf->kept = tf->count[CH_KEPT];
    tf->adam_clock = fmax(tf->kept_until, tf->go_at);
    tf->settled = 1;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
    zt_clock_after(tf->kept_until);
}

/* host Adam lane: once the verdict is in, the CPU Adam of each chunk not done, lowest first, in place,
 * once its gradients are down; on 16-bit backends it reads the 16-bit gradients as they came down and
 * writes the rounded params (to the H2D buffer, or the offloaded shard): no widening pass, no fp32
 * copy of the gradients */
static void *host_adam_lane(void *arg) {
    twin_flow *tf = arg;
    twin_host *t = tf->t;
    zt_clock_after(tf->start_at);
    zt_cpu_adam_report_threads(1); /* with a trace, each CPU Adam thread's busy time is on its own lane */
    if (t->f.off.nvme_path) {
        inf_states_update(t->nvme, &(inf_update_hooks){tf, nvme_wait_go, nvme_update, nvme_group_done});
        tf->end_at[LANE_ADAM] = zt_clock_now();
        return NULL;
    }
    pthread_mutex_lock(&tf->mu);
    wait_go(tf);
    int discard = tf->verdict == VERDICT_DISCARD;
    pthread_mutex_unlock(&tf->mu);
    if (!discard && tf->speculate) settle_speculation(tf);
    for (size_t c = 0; c < tf->nchunks && !discard; c++) {
        pthread_mutex_lock(&tf->mu);
        int done = tf->state[c] & CH_DONE;
        if (!done) twin_wait_chunk(tf, c, CH_DOWN);
        pthread_mutex_unlock(&tf->mu);
        if (done) continue;
        if (tf->prev) { /* the last step's delayed parameters of this chunk have gone up */
            pthread_mutex_lock(&tf->prev->mu);
            twin_wait_chunk(tf->prev, c, CH_UP);
            pthread_mutex_unlock(&tf->prev->mu);
        }
        double t0 = zt_clock_now();
        adam_chunk(tf, c);
        double t1 = zt_clock_now();
        tf->adam_busy += t1 - t0;
        size_t a, b;
        twin_chunk_range(t, c, &a, &b);
        facts_trace_host_adam(&t->f, "host adam", t0, t1, b - a);
        pthread_mutex_lock(&tf->mu);
        tf->adam_clock = t1;
        pthread_mutex_unlock(&tf->mu);
        publish(tf, c, c + 1, CH_DONE);
    }
    pthread_mutex_lock(&tf->mu);
    tf->adam_clock = INFINITY;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
    tf->end_at[LANE_ADAM] = zt_clock_now();
    return NULL;
}

/* holding mu: the speculative lane's next chunk at its time *v (it may move *v on to the next chunk's
 * arrival), or SIZE_MAX to stop. Of the window's chunks down by *v it takes the lowest: the one
 * backward finished last, which the next forward needs first (earliest deadline first: what is left
 * at the verdict is then what that forward needs last). On a virtual clock "down by *v" is known once
 * a chunk came down later than *v or every chunk is down, so the choice follows the clocks whatever
 * order the threads ran in; on the wall clock what is down now is all there is. It stops at the first
 * chunk it would begin no earlier than the verdict (on a virtual clock it waits to know), and when the
 * step is discarded. */
static size_t next_speculation(twin_flow *tf, double *v) {
    twin_host *t = tf->t;
    for (;;) {
        if (tf->verdict == VERDICT_DISCARD || (tf->go && *v >= tf->go_at)) return SIZE_MAX;
        int complete = !zt_clock_is_virtual() || tf->releases_final || tf->release_clock > *v;
        size_t pick = SIZE_MAX;
        double next = INFINITY; /* the earliest arrival after *v of a window chunk not yet taken */
        for (size_t c = t->window_first; c < tf->nchunks; c++) {
            if ((tf->state[c] & (CH_DOWN | CH_SPEC)) != CH_DOWN) continue;
            if (tf->down_at[c] <= *v) { pick = c; break; }
            next = fmin(next, tf->down_at[c]);
        }
        /* begun before the verdict, on a virtual clock, is known once the verdict is in or the step's
         * thread has gone past *v (the verdict comes later); the test hook's verdict waits for the lane */
        int before_verdict = !zt_clock_is_virtual() || tf->go || tf->main_clock > *v || zt_test_hook_speculate() == 1;
        if (complete && pick != SIZE_MAX) {
            if (before_verdict) return pick;
            pthread_cond_wait(&tf->cv, &tf->mu);
            continue;
        }
        if (complete && next < INFINITY) { *v = next; continue; } /* idle until it comes down */
        if (complete && tf->releases_final) return SIZE_MAX;    /* the window is done */
        pthread_cond_wait(&tf->cv, &tf->mu);
    }
}

/* speculative lane (header): before the verdict, the window's chunks as their gradients come down,
 * with clip coefficient 1, out of place (next_speculation says which and when) */
static void *spec_lane(void *arg) {
    twin_flow *tf = arg;
    twin_host *t = tf->t;
    zt_clock_after(tf->start_at);
    zt_cpu_adam_report_threads(1);
    for (;;) {
        pthread_mutex_lock(&tf->mu);
        double v = zt_clock_now();
        size_t c = next_speculation(tf, &v);
        if (c != SIZE_MAX) tf->spec_start[c] = v;
        pthread_mutex_unlock(&tf->mu);
        if (c == SIZE_MAX) break;
        zt_clock_after(v);
        size_t a, b;
        twin_chunk_range(t, c, &a, &b);
        float *p, *m, *vv, *po, *mo, *vo;
        chunk_state(t, c, 0, &p, &m, &vv);
        chunk_state(t, c, 1, &po, &mo, &vo);
        adam_span(t, &tf->spec_st, a, b - a, p, m, vv, po, mo, vo, at(t, t->host_grad, a), twin_host_out(t, a));
        double t1 = zt_clock_now();
        tf->spec_busy += t1 - v;
        facts_trace_host_adam(&t->f, "host adam (speculative)", v, t1, b - a);
        pthread_mutex_lock(&tf->mu);
        mark_locked(tf, c, CH_SPEC, t1);
        pthread_cond_broadcast(&tf->cv);
        pthread_mutex_unlock(&tf->mu);
    }
    pthread_mutex_lock(&tf->mu);
    tf->end_at[LANE_SPEC] = zt_clock_now();
    tf->spec_stopped = 1;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
    return NULL;
}

/* holding mu: the D2H lane's next range; 0 when the step is discarded */
static int take_range(twin_flow *tf, d2h_item *it) {
    while (tf->taken == tf->queued && tf->verdict != VERDICT_DISCARD) pthread_cond_wait(&tf->cv, &tf->mu);
    if (tf->verdict == VERDICT_DISCARD) return 0;
    *it = tf->queue[tf->taken++];
    return 1;
}

/* the gradients of chunk c's [a, b) are down: the chunk is, once all its elements are */
void twin_range_down(twin_flow *tf, size_t c, size_t a, size_t b) {
    size_t ca, cb;
    twin_chunk_range(tf->t, c, &ca, &cb);
    double now = zt_clock_now();
    pthread_mutex_lock(&tf->mu);
    tf->down_elems[c] += b - a;
    if (tf->down_elems[c] >= cb - ca) mark_locked(tf, c, CH_DOWN, now);
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

/* D2H lane: brings the queued ranges down in order as fast as the link allows (host_grad holds them
 * all, so it never waits for the CPU Adam): during backward each bucket's once the compute stream has
 * written it (its mark), then at the step every chunk not down yet (the caller synchronized). With
 * grads_on_host backward brought them down already (twin_grads_land), and nothing is copied. */
static void *d2h_lane(void *arg) {
    twin_flow *tf = arg;
    twin_host *t = tf->t;
    size_t E = esz(t);
    zt_backend_bind_thread(t->f.be);
    zt_clock_after(tf->start_at);
    d2h_item it;
    for (;;) {
        pthread_mutex_lock(&tf->mu);
        int more = take_range(tf, &it);
        pthread_mutex_unlock(&tf->mu);
        if (!more) break;
        zt_clock_after(it.at);
        if (it.flush) {
            for (size_t c = 0; c < tf->nchunks; c++) {
                pthread_mutex_lock(&tf->mu);
                int down = tf->state[c] & CH_DOWN;
                pthread_mutex_unlock(&tf->mu);
                if (down) continue;
                size_t a, b;
                twin_chunk_range(t, c, &a, &b);
                if (!t->b.grads_on_host)
                    timed_transfer(tf, ZT_LANE_D2H, "D2H grads", at(t, t->host_grad, a),
                                   at(t, t->b.grad_shard, t->host_lo + a), (b - a) * E, ZT_D2H, &tf->d2h_busy);
                publish(tf, c, c + 1, CH_DOWN);
            }
            pthread_mutex_lock(&tf->mu);
            tf->releases_final = 1;
            pthread_cond_broadcast(&tf->cv);
            pthread_mutex_unlock(&tf->mu);
            break;
        }
        if (!zt_test_hook_skip_sync()) t->f.be->wait_mark(it.mark); /* backward has written them */
        for (size_t a = it.off, b; a < it.off + it.n; a = b) { /* chunk by chunk: the CPU Adam starts on the first */
            size_t c = a / t->host_chunk;
            b = min_sz(it.off + it.n, (c + 1) * t->host_chunk);
            timed_transfer(tf, ZT_LANE_D2H, "D2H grads", at(t, t->host_grad, a),
                           at(t, t->b.grad_shard, t->host_lo + a), (b - a) * E, ZT_D2H, &tf->d2h_busy);
            twin_range_down(tf, c, a, b);
        }
    }
    tf->end_at[LANE_D2H] = zt_clock_now();
    return NULL;
}

/* holding mu: the H2D lane's next chunk at its time h (SIZE_MAX: all sent): the lowest not sent, the
 * order the next forward needs them in, once the CPU Adam has done it; while that one is not done, a
 * done chunk above it (an accepted speculation's, done at the verdict) goes up in the gap. On a virtual
 * clock "not done at h" is known once the lowest's done time is later than h, or the host Adam lane's
 * clock passed h without reaching it (it does them in order, each later than the last), so the choice
 * follows the clocks whatever order the threads ran in; on the wall clock a gap is now. *next, *above:
 * cursors. */
static size_t next_up(twin_flow *tf, double h, size_t *next, size_t *above) {
    size_t n = tf->nchunks;
    int virtual = zt_clock_is_virtual();
    for (;;) {
        while (*next < n && (tf->state[*next] & CH_UP)) (*next)++;
        if (*next >= n) return SIZE_MAX;
        /* the gap's chunks: an accepted speculation's (kept, done at the verdict) not sent yet; fixed once
         * settled, so the cursor passes every other chunk for good */
        int accept = tf->settled && accepted(tf);
        if (*above <= *next) *above = *next + 1;
        while (accept && *above < n && (tf->state[*above] & (CH_KEPT | CH_UP)) != CH_KEPT) (*above)++;
        int done = tf->state[*next] & CH_DONE;
        int gap = accept && *above < n && tf->done_at[*above] <= h;
        if (virtual && done) return gap && tf->done_at[*next] > h ? *above : *next;
        if (virtual && gap && tf->adam_clock > h) return *above;
        if (!virtual && (done || gap)) return done ? *next : *above;
        pthread_cond_wait(&tf->cv, &tf->mu);
    }
}

/* H2D lane: sends each chunk's updated parameters up once the CPU Adam has finished it, on its own
 * stream, so it runs alongside the D2H of later chunks and the device Adam */
static void *h2d_lane(void *arg) {
    twin_flow *tf = arg;
    twin_host *t = tf->t;
    size_t E = esz(t);
    tf->end_at[LANE_H2D] = tf->start_at;
    if (t->b.params_on_host) return NULL; /* the CPU Adam wrote them where they live */
    zt_backend_bind_thread(t->f.be);
    zt_clock_after(tf->start_at);
    pthread_mutex_lock(&tf->mu);
    wait_go(tf); /* twin_go says whether this update is delayed */
    while (tf->h2d_held) pthread_cond_wait(&tf->cv, &tf->mu);
    if (tf->delayed) zt_clock_after(tf->release_at);
    int discard = tf->verdict == VERDICT_DISCARD;
    size_t next = 0, above = 0;
    pthread_mutex_unlock(&tf->mu);
    while (!discard) {
        pthread_mutex_lock(&tf->mu);
        size_t c = next_up(tf, zt_clock_now(), &next, &above);
        if (c != SIZE_MAX) zt_clock_after(tf->done_at[c]);
        pthread_mutex_unlock(&tf->mu);
        if (c == SIZE_MAX) break;
        size_t a, b;
        twin_chunk_range(t, c, &a, &b);
        float *p, *m, *v;
        chunk_state(t, c, 0, &p, &m, &v);
        const void *src = t->host_params16 ? at(t, t->host_params16, a) : (const void *)p;
        timed_transfer(tf, ZT_LANE_H2D, "H2D params", params_at_opt(t, t->host_lo + a), src, (b - a) * E, ZT_H2D,
                       &tf->h2d_busy);
        publish(tf, c, c + 1, CH_UP);
    }
    tf->end_at[LANE_H2D] = zt_clock_now();
    return NULL;
}

/* ---- a flow's life */

void twin_queue_range(twin_flow *tf, d2h_item it) {
    pthread_mutex_lock(&tf->mu);
    if (tf->queued == tf->queue_cap) {
        tf->queue_cap = tf->queue_cap ? 2 * tf->queue_cap : 64;
        tf->queue = zt_xrealloc(tf->queue, tf->queue_cap * sizeof *tf->queue);
    }
    tf->queue[tf->queued++] = it;
    tf->main_clock = fmax(tf->main_clock, it.at);
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

/* A flow and its lanes, started now: the D2H lane takes the ranges queued from here on, the host Adam
 * and H2D lanes wait for the verdict, and (speculate) the speculative lane goes down the window. */
twin_flow *twin_flow_start(twin_host *t, int speculate) {
    twin_flow *tf = zt_xcalloc(1, sizeof *tf); /* freed by twin_update or, later, settle_pending */
    tf->t = t;
    tf->nchunks = t->host_n ? t->nchunks : 0;
    if (!tf->nchunks) return tf;
    size_t n = tf->nchunks;
    pthread_mutex_init(&tf->mu, NULL);
    pthread_cond_init(&tf->cv, NULL);
    tf->state = zt_xcalloc(n, 1);
    tf->down_elems = zt_xcalloc(n, sizeof *tf->down_elems);
    double **times[] = {&tf->down_at, &tf->done_at, &tf->up_at, &tf->spec_start, &tf->spec_end};
    for (int i = 0; i < 5; i++) *times[i] = zt_xcalloc(n, sizeof(double));
    tf->adam_clock = -INFINITY;
    tf->settled = !speculate;
    tf->speculate = speculate;
    if (speculate) tf->spec_st = t->plan_st;
    else tf->spec_stopped = 1;
    tf->start_at = zt_clock_now();
    void *(*mains[NLANES])(void *) = {host_adam_lane, d2h_lane, h2d_lane, spec_lane};
    for (int i = 0; i < NLANES; i++) {
        if (i == LANE_SPEC && !speculate) continue;
        if (pthread_create(&tf->lanes[i], NULL, mains[i], tf)) {
            fprintf(stderr, "zerotrain: error: cannot start the Twin-Flow host threads\n");
            abort();
        }
        tf->started[i] = 1;
    }
    return tf;
}

/* the lanes' figures into the step's timing, once they are done */
static void record_lanes(twin_host *t, twin_flow *tf, double t1) {
    zt_engine_timing *tm = t->f.timing;
    tm->host_adam = tf->adam_busy + tf->spec_busy;
    tm->d2h = tf->d2h_busy;
    tm->h2d = tf->h2d_busy;
    tm->host_idle = fmax(0.0, (t1 - tf->t_start) - tf->adam_busy);
}

/* the lanes have ended: their figures are the step's (the flow itself may still be a later one's prev) */
void twin_join_lanes(twin_host *t, twin_flow *tf) {
    for (int i = 0; i < NLANES; i++) {
        if (!tf->started[i]) continue;
        pthread_join(tf->lanes[i], NULL);
        tf->started[i] = 0;
        zt_clock_after(tf->end_at[i]); /* a join waits for the last of them */
    }
    record_lanes(t, tf, zt_clock_now());
    if (tf->speculate && tf->kept) { /* what the speculation did, for the counts */
        double kept = 0;
        for (size_t c = t->window_first; c < tf->nchunks; c++) {
            size_t a, b;
            twin_chunk_range(t, c, &a, &b);
            kept += tf->state[c] & CH_KEPT ? (double)(b - a) : 0;
        }
        t->report.kept_elems += kept;
        t->report.accepted_elems += accepted(tf) ? kept : 0;
    }
}

/* after join_lanes (or with no lanes): the flow, and the prev its host Adam lane waited on (at most
 * one: twin_update frees a flow's prev once that flow is joined, so the chain never grows with the steps) */
void twin_flow_free(twin_flow *tf) {
    if (tf->prev) twin_flow_free(tf->prev);
    if (tf->nchunks) {
        pthread_mutex_destroy(&tf->mu);
        pthread_cond_destroy(&tf->cv);
        double *times[] = {tf->down_at, tf->done_at, tf->up_at, tf->spec_start, tf->spec_end};
        for (int i = 0; i < 5; i++) free(times[i]);
        free(tf->state);
        free(tf->down_elems);
        free(tf->queue);
    }
    free(tf);
}

void twin_flow_go(twin_flow *tf, const zt_adam_step *st, long step, int delayed, int verdict) {
    if (!tf->nchunks) return;
    pthread_mutex_lock(&tf->mu);
    tf->st = *st;
    tf->step = step;
    tf->delayed = tf->h2d_held = delayed;
    tf->verdict = verdict;
    tf->go_at = zt_clock_now();
    tf->go = 1;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}

/* delayed_update: the held H2D lane of a delayed update may send the parameters up */
void twin_flow_release(twin_flow *tf) {
    pthread_mutex_lock(&tf->mu);
    if (tf->h2d_held) tf->release_at = zt_clock_now();
    tf->h2d_held = 0;
    pthread_cond_broadcast(&tf->cv);
    pthread_mutex_unlock(&tf->mu);
}
