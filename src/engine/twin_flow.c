/* twin_flow.c — Twin-Flow, the optimizer split between host and device (engine.h has the split):
 * the host part's buffers, ratio auto (calibrated at start, twin_ratio.c), and the split update (its
 * host threads are twin_lanes.c's).
 *
 * The step: the host part runs on threads of its own, the device part on the caller's, all at once:
 *   D2H lane         the host part's gradients down, chunk by chunk (into host_grad), never waiting
 *   host Adam lane   SIMD CPU Adam of chunk c once its gradients are down
 *   H2D lane         chunk c's updated parameters up as soon as the CPU Adam has finished it, the
 *                    lowest chunk first (the order the next forward needs them in)
 *   caller           device Adam of [opt_lo, split)
 * so the H2D of chunk c overlaps the CPU Adam of chunk c+1 and the D2H of chunk c+2 (ZeRO-Offload's
 * pipeline), and the whole host pipeline overlaps the device Adam. On the CPU backend the "device"
 * is host memory and be->copy a memcpy, but the code path is the same. The copy lanes call the
 * backend, so they bind to its device first (backend.h: bind_thread); the host Adam lanes do not.
 * Each lane marks what it has done chunk by chunk (struct twin_flow's state: CH_DOWN, CH_DONE,
 * CH_UP), with the time it did it on the run's clock (util/clock.h: a lane that waited for a chunk
 * goes on from that time), and a lane waits for exactly the chunks it needs.
 *
 * The speculative step (offload_optimizer.super_offload; SuperOffload's "speculation, then
 * validation"): the update cannot be computed before the step's global gradient norm is known (the
 * clip coefficient scales every gradient) nor before the fp16 overflow check, but the host part is
 * the tail of the optimizer range, whose gradients backward finishes first. So:
 *   - during backward, as each bucket's gradients are final (the last micro-step's reduction: the
 *     engine calls twin_grads_final), the D2H lane brings them down at once (it waits for that point
 *     of the compute stream only: backend.h's mark), and a fourth lane, the speculative lane, runs
 *     the CPU Adam of the window's chunks (the tail chunks) as their gradients come down, assuming
 *     clip coefficient 1 and no overflow: the step as planned before its backward (twin_plan). Of
 *     those down it takes the lowest, the one backward finished last and the next forward needs
 *     first (earliest deadline first): the CPU Adam is slower than backward, and what it has left at
 *     the verdict is then what the next forward needs last;
 *   - it updates out of place (cpu_adam.h: zt_cpu_adamw_g_to): the new master, m and v of chunk c go
 *     to the chunk's other place (its home in host_master/m/v, or its slot in the spare arrays; bit
 *     in_spare[c] says which one holds the state), with the same 28 B an element of traffic as in
 *     place, and the old state stays where it was;
 *   - when the step's update is known (twin_update) it is validated: the same Adam step bit for bit
 *     (the clip coefficient came out 1: the norm was within gradient_clipping; the learning rate and
 *     loss scale as planned) accepts the speculation: the chunks' places flip and they are done;
 *     anything else rolls it back, which is to forget it (the old state was never touched), and every
 *     chunk is updated in place with the real step, as without speculation. A skipped step (fp16
 *     overflow, the divergence guard) forgets it the same way. So a step gives the non-speculative
 *     step's bytes whatever happened;
 *   - the host Adam lane then updates the rest in place, lowest chunk first, so the next forward's
 *     first chunks go up first and its forward of a layer waits only for that layer's chunks (the
 *     accepted ones go up in between: twin_wait_params waits for exactly the chunks it needs);
 *   - a chunk the speculative lane began no earlier than the verdict (on the run's clock) does not
 *     count as speculated: it is updated again after it. On the wall clock it began before the
 *     verdict came; on a virtual clock (predict) this keeps the schedule what the costs say, whatever
 *     order the threads happened to run in, and the speculative lane's clock is its own;
 *   - when the last step's speculation would have been rolled back (its norm was clipped), the next
 *     one validates first (today's order: nothing is updated before the verdict; the gradients still
 *     come down during backward), and speculation starts again after a step that would have been
 *     accepted (early in training clipping can trigger at every step, where it would only add work).
 * The window (the spare arrays, 12 B an element) is offload_optimizer.speculation_window bytes, or
 * what host memory holds beside everything else (0, the default), at most the host part.
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
 * A delayed update never speculates (it changes results; the speculative step must not).
 *
 * The host part's state (struct twin_host: the split, the host buffers, the swap file of its states
 * with offload_optimizer nvme, the lanes still running) is Twin-Flow's, in twin_internal.h for this
 * file and twin_lanes.c (an update's threads, struct twin_flow) only; the engine hands it the shared
 * facts at twin_open and the device part's buffers at twin_alloc (twin_flow.h). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/twin_internal.h"
#include "util/test_hooks.h"
#include "util/clock.h"

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

/* the fp32 master is the H2D source (the fp32 backends' in-memory master): pinned with the transfer buffers */
static int master_is_transfer(const twin_host *t) { return t->f.be->compute_dtype == ZT_F32 && !t->b.params_on_host; }



static int in_spare_place(const twin_host *t, size_t c) { return c >= t->window_first && t->in_spare[c]; }

/* the state of `which` at host-part offset off in host memory, and the elements after it in the same
 * array (up to the first chunk whose state is in the other place) */
static float *state_host_at(const twin_host *t, zt_opt_state which, size_t off, size_t *avail) {
    size_t c = off / t->host_chunk;
    float *p, *m, *v;
    chunk_state(t, c, 0, &p, &m, &v);
    float *base = which == ZT_STATE_MASTER ? p : which == ZT_STATE_ADAM_M ? m : v;
    int spare = in_spare_place(t, c);
    size_t k = !spare && c < t->window_first ? t->window_first : c + 1; /* below the window: all at home */
    while (k < t->nchunks && in_spare_place(t, k) == spare) k++;
    *avail = min_sz(t->host_n, k * t->host_chunk) - off;
    return base + (off - c * t->host_chunk);
}

/* Transfer buffers (gradients down, parameters up) are pinned when pin_memory asks; m and v are
 * only touched by the CPU, and so is the 16-bit backends' master (the fp32 backends' master is
 * the H2D source itself). With NVMe, master, m and v are in the swap file (engine_infinity.c).
 * The speculative step's spare places (the window's master, m and v) are allocated last, from what
 * host memory still holds (twin_ratio.c: twin_speculation_elems). */
int twin_alloc(twin_host *t, const twin_buffers *b) {
    t->b = *b;
    if (!t->host_n) return 0; /* no host part: the device Adam only */
    int nvme = t->f.off.nvme_path != NULL;
    size_t n = t->host_n, E = esz(t);
    t->host_pinned = t->f.off.pin_memory;
    /* chunks of n/8 (so the CPU Adam starts after an eighth of the D2H), at least 64 Ki elements
     * (long enough to amortise a copy's start-up) and at most 1 Mi (4 MiB of fp32 in flight) */
    size_t chunk = (n / 8 + ZT_TWIN_ALIGN - 1) / ZT_TWIN_ALIGN * ZT_TWIN_ALIGN;
    t->host_chunk = max_sz(min_sz(max_sz(chunk, (size_t)1 << 16), (size_t)1 << 20), 1);
    t->nchunks = (n + t->host_chunk - 1) / t->host_chunk;
    t->window_first = t->nchunks;
    t->in_spare = zt_xcalloc(t->nchunks, 1);
    if (!nvme) {
        t->host_master = host_buf(t, n * sizeof(float), master_is_transfer(t), ZT_MEM_OPTIM);
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
    if (t->super) { /* the window's spare places: the tail chunks, as many as fit */
        size_t want = t->window_elems, k = min_sz(t->nchunks, want / t->host_chunk);
        if (want >= n) k = t->nchunks; /* the whole host part (its last chunk may be short) */
        size_t elems = k == t->nchunks ? n - (t->nchunks - k) * t->host_chunk : k * t->host_chunk;
        if (k) {
            size_t counted = t->f.mem->host[ZT_MEM_OPTIM], pinned = *t->f.host_pinned_bytes;
            t->spare_master = host_buf(t, elems * sizeof(float), master_is_transfer(t), ZT_MEM_OPTIM);
            t->spare_m = host_buf(t, elems * sizeof(float), 0, ZT_MEM_OPTIM);
            t->spare_v = host_buf(t, elems * sizeof(float), 0, ZT_MEM_OPTIM);
            if (!t->spare_master || !t->spare_m || !t->spare_v) { /* optional: given back, and none */
                host_buf_free(t, t->spare_master, master_is_transfer(t));
                host_buf_free(t, t->spare_m, 0);
                host_buf_free(t, t->spare_v, 0);
                t->f.mem->host[ZT_MEM_OPTIM] = counted, *t->f.host_pinned_bytes = pinned;
                t->spare_master = t->spare_m = t->spare_v = NULL;
                k = 0, elems = 0;
            }
        }
        t->window_first = t->nchunks - k;
        if (!k) t->super_off = "no host memory is left for a speculation window";
        char w[32];
        zt_format_bytes(12.0 * (double)elems, w, sizeof w);
        if (t->f.lay.rank == 0)
            zt_info("super-offload: the update speculates during backward on up to %zu of rank 0's %zu host-part "
                    "elements (the last %zu of %zu chunks: %s of host memory, 12 B an element for their new master, "
                    "m and v beside the old ones until the step is validated; "
                    "offload_optimizer.speculation_window)%s", elems, n, k, t->nchunks, w,
                    k ? "" : ": it validates first, as super_offload false does");
    }
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
    int tr = t->host_n && master_is_transfer(t);
    host_buf_free(t, t->host_master, tr);
    host_buf_free(t, t->host_m, 0);
    host_buf_free(t, t->host_v, 0);
    host_buf_free(t, t->spare_master, tr);
    host_buf_free(t, t->spare_m, 0);
    host_buf_free(t, t->spare_v, 0);
    host_buf_free(t, t->host_grad, 1);
    host_buf_free(t, t->host_params16, 1);
    host_buf_free(t, t->sq_part, 0);
    host_buf_free(t, t->sq_landed, 0);
    inf_states_close(t->nvme);
    free(t->in_spare);
    pthread_mutex_destroy(&t->land_mu);
    free(t);
}

void twin_state_rw(twin_host *t, long step, zt_opt_state which, size_t off, size_t n, float *buf, int write) {
    if (t->nvme) {
        inf_states_rw(t->nvme, step, which, off, n, buf, write);
        return;
    }
    for (size_t done = 0, k; done < n; done += k) {
        float *p = state_host_at(t, which, off + done, &k);
        k = min_sz(k, n - done);
        if (write) memcpy(p, buf + done, k * sizeof(float));
        else memcpy(buf + done, p, k * sizeof(float));
    }
}

float *twin_state_span(twin_host *t, zt_opt_state which, size_t off, size_t *n_out) {
    if (t->nvme) return NULL;
    return state_host_at(t, which, off, n_out);
}

void twin_nvme_stats(const twin_host *t, zt_engine_nvme *out) { inf_states_stats(t->nvme, out); }

size_t twin_init_piece(const twin_host *t) { return t->nvme ? inf_states_group(t->nvme) : 1; }

int twin_init_master(twin_host *t, size_t off, size_t n, const float *init, zt_err *err) {
    (void)err;
    if (!t->f.off.nvme_path) {
        if (!zt_clock_costs_only()) twin_state_rw(t, 0, ZT_STATE_MASTER, off, n, (float *)init, 1);
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
    pthread_mutex_init(&t->land_mu, NULL);
    size_t n = t->f.lay.opt_hi - t->f.lay.opt_lo;
    t->host_lo = n; /* everything on the device unless offloaded */
    if (!t->f.off.enabled) return t;
    double share = t->f.off.cpuadam_share; /* cpuadam_cores_perc: the CPU Adam's threads, of the cores it is timed on */
    if (!t->f.off.host_threads && share > 0 && share < 1) {
        int cores = zt_clock_host_cores();
        t->f.off.host_threads = (int)fmax(1.0, floor(share * cores + 0.5));
    }
    int bound = TWIN_BOUND_SPEED;
    t->offload_ratio = t->f.off.ratio;
    if (t->f.off.ratio < 0 && twin_choose_ratio(&t->f, &t->offload_ratio, &bound, err)) {
        twin_close(t);
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
        twin_close(t);
        return NULL;
    }
    /* the speculative step, where it applies (the header); off, the step validates first as it always did */
    if (t->f.off.super_offload && t->host_n) {
        t->super_off = t->f.off.delayed_update ? "delayed_update is on (it changes results; the speculative step must not)"
                       : t->f.off.nvme_path    ? "the optimizer states are on NVMe (the window's second place would be "
                                                 "in the swap file: not yet)"
                                               : NULL;
        t->super = !t->super_off;
        t->speculate_next = 1; /* until a step says otherwise */
    }
    /* the window's elements (collective: every rank asks, with a host part or not) */
    if (t->f.off.super_offload) {
        size_t w = twin_speculation_elems(&t->f, t->host_n);
        t->window_elems = t->super ? w : 0;
        if (t->super_off && t->f.lay.rank == 0) zt_info("super-offload: off: %s; the update validates first", t->super_off);
    }
    return t;
}

/* ---------------------------------------------------------------- the split update */


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

/* This step's lanes, started early: the first final gradients of the host part (header). The last
 * update's lanes are done first (they read the buffers this one writes); the step speculates when it
 * was planned, the policy says so (the last planned step's verdict) and there is a window. */
static twin_flow *current_flow(twin_host *t);

void twin_grads_final(twin_host *t, size_t off, size_t n) {
    if (!t || !t->super) return;
    size_t a = max_sz(off, t->host_lo), b = min_sz(off + n, t->host_lo + t->host_n);
    if (b <= a) return; /* the device part's: its update waits for the step */
    twin_flow *tf = current_flow(t);
    if (t->b.grads_on_host) return; /* its landings mark the chunks down (twin_grads_land) */
    twin_queue_range(tf, (d2h_item){a - t->host_lo, b - a, t->f.be->mark(), zt_clock_now(), 0});
}

static void settle_pending(twin_host *t);

static twin_flow *current_flow(twin_host *t) {
    if (t->current) return t->current;
    settle_pending(t);
    int hook = zt_test_hook_speculate(); /* -1: the policy; 0: never; 1: every planned step */
    int spec = t->super && t->planned && t->window_first < t->nchunks && (hook < 0 ? t->speculate_next : hook);
    twin_flow *tf = twin_flow_start(t, spec);
    pthread_mutex_lock(&t->land_mu);
    t->current = tf;
    pthread_mutex_unlock(&t->land_mu);
    return tf;
}

void twin_plan(twin_host *t, const zt_adam_step *st, long step) {
    if (!t) return;
    t->planned = 1;
    t->plan_step = step;
    t->plan_st = *st;
}

/* The host lanes start as soon as the gradients are final (the D2H needs no clip coefficient), the
 * CPU Adam once twin_go has set the step; the device part runs on this thread meanwhile. With
 * super_offload they started during backward (twin_grads_final), and this brings the rest down. */
twin_flow *twin_start(twin_host *t) {
    twin_flow *tf = t->current ? t->current : (t->current = twin_flow_start(t, 0)); /* no landing is left: no lock */
    if (!tf->nchunks) return tf;
    /* transfer() is not ordered after queued device work: the gradients must be complete first */
    if (!zt_test_hook_skip_sync()) t->f.be->synchronize();
    twin_queue_range(tf, (d2h_item){0, 0, 0, zt_clock_now(), 1});
    return tf;
}

static void wait_chunks(twin_host *t, twin_flow *tf, const char *what, size_t c0, size_t c1, unsigned bit);

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

static int same_step(const zt_adam_step *a, const zt_adam_step *b) { return !memcmp(a, b, sizeof *a); }

/* the verdict on the update (the header), the policy's next choice and the step's report */
static int judge(twin_host *t, twin_flow *tf, const zt_adam_step *st, long step) {
    int planned = t->planned && t->plan_step == step;
    int accept = planned && same_step(&t->plan_st, st);
    t->planned = 0;
    if (planned && t->super) t->speculate_next = accept; /* a step that would roll back: the next validates first */
    int verdict = !tf->speculate ? VERDICT_NONE : accept ? VERDICT_ACCEPT : VERDICT_REDO;
    twin_update_report *r = &t->report;
    r->mode = !t->super || !tf->nchunks ? TWIN_MODE_PLAIN : tf->speculate ? TWIN_MODE_SPECULATED : TWIN_MODE_VALIDATED;
    r->rolled_back = verdict == VERDICT_REDO;
    r->rollbacks += r->rolled_back;
    r->speculated_steps += tf->speculate;
    return verdict;
}

void twin_update(twin_host *t, twin_flow *tf, double t0, const zt_adam_step *st, long step) {
    int threads = tf->nchunks > 0, delayed = delays(t, tf, step);
    tf->t_start = t0;
    int verdict = judge(t, tf, st, step);
    pthread_mutex_lock(&t->land_mu);
    t->current = NULL; /* the flow is this update's from here on: pending or joined below */
    pthread_mutex_unlock(&t->land_mu);
    /* a delayed update of the last step (released by twin_before_step) is sending its parameters up
     * from the buffer this step's CPU Adam writes: the CPU Adam of each chunk waits for that chunk's
     * H2D (host_adam_lane), and the last flow lives on as this one's prev until this one is joined */
    twin_flow *last = t->pending;
    tf->prev = last;
    if (tf->speculate && zt_test_hook_speculate() == 1) { /* the test hook: the whole window first */
        pthread_mutex_lock(&tf->mu);
        while (!tf->spec_stopped) pthread_cond_wait(&tf->cv, &tf->mu);
        pthread_mutex_unlock(&tf->mu);
        zt_clock_after(tf->end_at[LANE_SPEC]); /* on every clock the verdict comes after the window */
    }
    twin_flow_go(tf, st, step, delayed, verdict);
    double td0 = zt_clock_now();
    device_adam(t, *st);
    double td1 = zt_clock_now();
    if (t->host_lo) zt_trace_complete(*t->f.trace, ZT_LANE_MAIN, "device adam", td0, td1);
    zt_engine_timing *tm = t->f.timing;
    tm->device_adam = td1 - td0;
    if (last) { /* its parameters are in place before this update ends */
        wait_chunks(t, last, "wait for the delayed parameters", 0, last->nchunks, CH_UP);
        twin_join_lanes(t, last);
        t->pending = NULL;
        if (last->prev) { /* its host Adam lane, which waited on the flow before it, has ended */
            twin_flow_free(last->prev);
            last->prev = NULL;
        }
    }
    if (threads && (delayed || may_defer(t))) { /* the next step waits for the host part where it needs it,
                                                  or (delayed) uses its values of the last step */
        t->pending = tf;
        tm->optimizer = td1 - t0;
        return;
    }
    if (threads) twin_join_lanes(t, tf);
    /* parameters on NVMe: the host part's updated values go to the swap file */
    if (threads && t->b.params_on_nvme) t->b.params_store(t->b.owner, t->host_lo, t->host_params16, t->host_n);
    double t1 = zt_clock_now();
    tm->optimizer = t1 - t0;
    tm->device_idle = t1 - td1;
    if (threads && t1 > td1 + 1e-6) zt_trace_complete(*t->f.trace, ZT_LANE_MAIN, "device idle (host part)", td1, t1);
    twin_flow_free(tf);
}

const twin_update_report *twin_last_update(const twin_host *t) { return &t->report; }

/* what makes chunk c's parameters in place: sent up, or written straight into the offloaded shard
 * by the CPU Adam */
static unsigned ready_bit(const twin_host *t) { return t->b.params_on_host ? CH_DONE : CH_UP; }

/* waits (timed and traced as device idle) until chunks [c0, c1) of tf have `bit` */
static void wait_chunks(twin_host *t, twin_flow *tf, const char *what, size_t c0, size_t c1, unsigned bit) {
    pthread_mutex_lock(&tf->mu);
    double t0 = zt_clock_now();
    int waited = 0;
    for (size_t c = c0; c < c1; c++) {
        waited |= !(tf->state[c] & bit);
        twin_wait_chunk(tf, c, bit);
    }
    pthread_mutex_unlock(&tf->mu);
    double t1 = zt_clock_now();
    if (!waited && t1 <= t0) return; /* neither the process nor its clock waited */
    t->f.timing->device_idle += t1 - t0;
    zt_trace_complete(*t->f.trace, ZT_LANE_MAIN, what, t0, t1);
}

void twin_before_step(twin_host *t) {
    twin_flow *tf = t ? t->pending : NULL;
    if (!tf || !tf->delayed) {
        settle_pending(t);
        return;
    }
    /* its CPU Adam ran during this step's forward and backward; its parameters go up during this update */
    wait_chunks(t, tf, "wait for the delayed host adam", 0, tf->nchunks, CH_DONE);
    twin_flow_release(tf);
}

/* the last update's lanes done, its parameters in place (a delayed one drains here) */
static void settle_pending(twin_host *t) {
    if (!t) return;
    twin_flow *tf = t->pending;
    if (!tf) return;
    twin_flow_release(tf); /* a delayed update drains here */
    wait_chunks(t, tf, "wait for the host part (all)", 0, tf->nchunks, ready_bit(t));
    double t0 = zt_clock_now();
    twin_join_lanes(t, tf);
    zt_trace_complete(*t->f.trace, ZT_LANE_MAIN, "host lanes joined", t0, zt_clock_now());
    t->pending = NULL;
    twin_flow_free(tf);
}

/* this step's lanes started during backward, before any update: forgotten (a skipped step, or a
 * caller that needs everything still) */
static void discard_current(twin_host *t) {
    twin_flow *tf = t->current;
    if (!tf) return;
    pthread_mutex_lock(&t->land_mu); /* a landing in progress finishes with it first */
    t->current = NULL;
    pthread_mutex_unlock(&t->land_mu);
    t->planned = 0;
    if (tf->nchunks) {
        twin_flow_go(tf, &tf->spec_st, tf->step, 0, VERDICT_DISCARD);
        for (int i = 0; i < NLANES; i++)
            if (tf->started[i]) pthread_join(tf->lanes[i], NULL), tf->started[i] = 0;
    }
    t->report.mode = tf->speculate ? TWIN_MODE_SPECULATED : t->super ? TWIN_MODE_VALIDATED : TWIN_MODE_PLAIN;
    t->report.rolled_back = tf->speculate;
    twin_flow_free(tf);
}

void twin_settle(twin_host *t) {
    if (!t) return;
    discard_current(t);
    settle_pending(t);
}

/* the last chunk holding optimizer offsets [a, b), or (size_t)-1 when none does */
static size_t last_chunk(const twin_host *t, size_t a, size_t b) {
    size_t end = min_sz(b, t->f.lay.opt_hi - t->f.lay.opt_lo);
    if (end <= max_sz(a, t->host_lo)) return (size_t)-1;
    return (end - 1 - t->host_lo) / t->host_chunk;
}

void twin_wait_params(twin_host *t, size_t a, size_t b) {
    size_t c = last_chunk(t, a, b);
    twin_flow *tf = t->pending;
    if (!tf || tf->delayed || c == (size_t)-1) return; /* delayed: the last step's values are used */
    size_t first = max_sz(a, t->host_lo) - t->host_lo;
    wait_chunks(t, tf, "wait for the host part's parameters", first / t->host_chunk, c + 1, ready_bit(t));
    pthread_mutex_lock(&tf->mu);
    /* all there by this thread's clock, not just by the lanes' threads (on a virtual clock they run ahead) */
    int all = tf->count[ready_bit(t)] == tf->nchunks && tf->last_at[ready_bit(t)] <= zt_clock_now();
    pthread_mutex_unlock(&tf->mu);
    if (all) settle_pending(t); /* everything is in place: the lanes are finishing */
}

void twin_wait_grads_read(twin_host *t) {
    if (t->pending) wait_chunks(t, t->pending, "wait for the gradients to be read", 0, t->pending->nchunks, CH_DOWN);
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
        wait_chunks(t, t->pending, "wait for the host adam to read the gradients", 0, t->pending->nchunks, CH_DONE);
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
    if (!zt_clock_costs_only() && n) {
        if (first) zt_cpu_accumulate_into_zero_g(at(t, t->host_grad, off), src, n, t->f.be->compute_dtype);
        else zt_cpu_accumulate_g(at(t, t->host_grad, off), src, n, t->f.be->compute_dtype);
        if (last) sum_final_chunks(t, off, n);
    }
    if (!last || !n || !t->super) return;
    /* final: the step's lanes (started for it by twin_grads_final) may take these chunks */
    pthread_mutex_lock(&t->land_mu);
    for (size_t a = off, b; t->current && a < off + n; a = b) {
        size_t c = a / t->host_chunk;
        b = min_sz(off + n, (c + 1) * t->host_chunk);
        twin_range_down(t->current, c, a, b);
    }
    pthread_mutex_unlock(&t->land_mu);
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
