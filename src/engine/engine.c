/* engine.c — the engine's lifecycle and its step (see engine.h): buffers by stage, the micro-step
 * and optimizer-step entry points, optimizer state access and the memory accounting.
 *
 *   stage 0: full params, full grads (all-reduced), full optimizer on every rank
 *   stage 1: full params, full grads, optimizer states of [lo, hi) only; grads reduce-scattered once
 *            per step, updated params all-gathered
 *   stage 2: as 1, but each micro-step's gradients are reduce-scattered segment by segment as
 *            backward finishes them, into a grad shard; no full gradient vector exists
 *   stage 3: as 2, and parameters are sharded too: each segment is all-gathered just before use
 *            (the next one prefetched), and released after
 * At stages 2-3 with the whole optimizer shard on the host (offload ratio 1) the grad shard may be the
 * host's (Twin-Flow's gradient buffer), each reduced bucket going down as backward produces it: where
 * the device cannot hold it, or as offload_optimizer.gradients says (gradients_to_host).
 * A "segment" is the model's unit of use (embeddings, one block, final LayerNorm); reductions and
 * gathers go segment by segment, split into buckets of at most reduce_bucket_size elements.
 * The engine's parts own their state behind opaque pointers: the communication (zero_comm.c), the
 * host/device optimizer split (twin_flow.c) and the NVMe swap files (engine_infinity.c,
 * infinity_params.c). This file hands each the shared facts (engine_facts.h) and the buffers it
 * works on when it opens it, and the few things a part needs of another (the host part's updated
 * parameters before a gather, a piece read from NVMe) go through the engine as hooks.
 *
 * One optimizer step, as train.c drives it: for each micro-step zt_engine_begin_micro, the model's
 * forward and backward through the parameter source (gathers and reductions happen there), then
 * zt_engine_step_scaled: wait for the reductions, global norm, clip coefficient, the split AdamW
 * update (twin_update), and the parameter all-gather of stages 1-2. */
#include "engine/engine_internal.h"
#include "engine/infinity.h"
#include "engine/twin_flow.h"
#include "engine/zero_comm.h"
#include "engine/zero_formula.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_adam.h"
#include "config/config.h" /* ZT_GRADS_* */
#include "comm/fail_together.h"
#include "util/clock.h"
#include "util/test_hooks.h"

static size_t esz(const zt_engine *e) { return zt_dtype_size(e->be->compute_dtype); }
static void *at(const zt_engine *e, const void *base, size_t elems) { return (char *)base + elems * esz(e); }

/* where the compute-dtype parameters of optimizer offset off live */
static void *params_at_opt(const zt_engine *e, size_t off) {
    return e->opt.stage == 3 ? at(e, e->params, off) : at(e, e->params, e->lay.opt_lo + off);
}

static void *engine_dev_alloc(zt_engine *e, size_t bytes, int category) {
    return facts_dev_alloc(&e->facts, bytes, category);
}

/* Compute-dtype values of n shard elements from host memory into the offloaded parameters at shard
 * offset off: the host shard (offload_param cpu) or the parameter swap file (nvme). */
static void engine_params_store(zt_engine *e, size_t off, const void *src, size_t n) {
    if (e->param_nvme) inf_params_rw(e->param_nvme, e->adam_t, off, n, (void *)src, 1);
    else if (zt_clock_host_work(ZT_WORK_COPY, (double)n, 2.0 * (double)(n * esz(e)), 1), !zt_clock_costs_only())
        memcpy(at(e, e->params, off), src, n * esz(e));
}

/* The same from device memory (the device part of the update): straight down into host memory, or
 * through a bounded host buffer to NVMe */
static void engine_params_store_from_device(zt_engine *e, size_t off, const void *dev_src, size_t n) {
    if (!e->param_nvme) {
        e->be->copy(at(e, e->params, off), dev_src, n * esz(e), ZT_D2H);
        return;
    }
    size_t step = min_sz(n, (size_t)1 << 22);
    void *tmp = zt_xmalloc(max_sz(step, 1) * esz(e));
    for (size_t a = 0; a < n; a += step) {
        size_t k = min_sz(step, n - a);
        e->be->copy(tmp, at(e, dev_src, a), k * esz(e), ZT_D2H);
        engine_params_store(e, off + a, tmp, k);
    }
    free(tmp);
}

/* Writes the compute-dtype parameters of n elements starting at element `first` of e->params (the
 * shard at stage 3) from fp32 host values: converted on the host when the parameters are offloaded
 * (host memory or NVMe), else copied up and converted on the device through a bounded staging
 * buffer. */
static int params_from_f32(zt_engine *e, size_t first, const float *src, size_t n) {
    const zt_backend *be = e->be;
    size_t step = min_sz(n, (size_t)1 << 22); /* a whole-model staging buffer would not fit big models */
    if (e->params_on_host) {
        void *tmp = zt_xmalloc(max_sz(step, 1) * esz(e));
        for (size_t a = 0; a < n && !zt_clock_costs_only(); a += step) { /* start-up: not costed */
            size_t k = min_sz(step, n - a);
            zt_cpu_from_f32(tmp, src + a, k, be->compute_dtype);
            engine_params_store(e, first + a, tmp, k);
        }
        free(tmp);
        return 0;
    }
    void *dst = at(e, e->params, first);
    if (be->compute_dtype == ZT_F32) { be->copy(dst, src, n * sizeof(float), ZT_H2D); return 0; }
    float *tmp = be->alloc(max_sz(step, 1) * sizeof(float));
    if (!tmp) return -1;
    for (size_t a = 0; a < n; a += step) {
        size_t k = min_sz(step, n - a);
        be->copy(tmp, src + a, k * sizeof(float), ZT_H2D);
        be->to_compute(at(e, dst, a), tmp, k);
    }
    be->free(tmp);
    return 0;
}

void zt_engine_params_write_f32(zt_engine *e, size_t flat_off, const float *src, size_t n) {
    size_t base = e->opt.stage == 3 ? e->lay.lo : 0;
    if (params_from_f32(e, flat_off - base, src, n)) {
        fprintf(stderr, "zerotrain: error: out of %s memory for a parameter staging buffer\n", e->be->name);
        abort();
    }
}

int zt_engine_params_on_host(const zt_engine *e) { return e->params_on_host; }

/* ---------------------------------------------------------------- what the parts reach through the engine */

/* Twin-Flow with overlap_step: the host part's updated parameters of flat range [x, y) in place */
static void wait_updated(void *owner, size_t x, size_t y) {
    zt_engine *e = owner;
    size_t a = max_sz(x, e->lay.opt_lo), b = min_sz(y, e->lay.opt_hi);
    if (b > a) twin_wait_params(e->twin, a - e->lay.opt_lo, b - e->lay.opt_lo);
}

/* gradients on the host: what the communication part lands and sums, in Twin-Flow's host gradients */
static void grads_land_hook(void *owner, size_t off, const void *src, size_t n, int flags) {
    twin_grads_land(((zt_engine *)owner)->twin, off, src, n, flags);
}
static double grads_sumsq_hook(void *owner, size_t off, size_t n) {
    return twin_grads_sumsq(((zt_engine *)owner)->twin, off, n);
}
static void grads_ready_hook(void *owner) { twin_grads_ready(((zt_engine *)owner)->twin); }

/* the step's final gradients of flat range [a, b): this rank's optimizer range's part goes to Twin-Flow
 * (its host part's come down and may be updated speculatively) */
static void grads_final_hook(void *owner, size_t a, size_t b) {
    zt_engine *e = owner;
    size_t x = max_sz(a, e->lay.opt_lo), y = min_sz(b, e->lay.opt_hi);
    if (y > x) twin_grads_final(e->twin, x - e->lay.opt_lo, y - x);
}

/* Whether the gradients skip a device shard (offload_optimizer.gradients). The host path exists at
 * stages 2-3 with the whole optimizer shard in host memory (ratio 1 as configured), as ZeRO-Offload
 * copies each reduced bucket into the host's gradient buffer; not with the states on NVMe (their
 * pipeline reads the host gradients group by group as they came down), nor with delayed_update (its
 * CPU Adam reads the last step's gradients during this backward). It saves the device a gradient
 * shard but costs the step: backward waits on the host lane's D2H and adds, and the norm is summed on
 * the host. So auto keeps the shard on the device whenever the device holds it beside everything the
 * step still needs, counted as `estimate` counts it (the parameters allocated so far, the segment
 * pools, the landing zone, stage 3's gather buffers, the activations and scratch), against
 * offload_optimizer.device_memory when set, else the device's total memory (on the simulated GPU
 * under a profile, the profile's). Called after the parameters, before any gradient buffer. */
static int gradients_to_host(zt_engine *e) {
    const zt_engine_opts *opt = &e->opt;
    const zt_engine_offload *off = &e->off;
    if (!(opt->stage >= 2 && off->enabled && off->ratio >= 1.0 && !off->nvme_path && !off->delayed_update)) return 0;
    if (off->gradients != ZT_GRADS_AUTO) {
        zt_info("gradients: %s (offload_optimizer.gradients)", off->gradients == ZT_GRADS_HOST
                    ? "to the host bucket by bucket, no device gradient shard" : "the gradient shard on the device");
        return off->gradients == ZT_GRADS_HOST;
    }
    size_t free_b = 0, total_b = 0;
    e->be->mem_info(&free_b, &total_b);
    double budget = off->device_memory > 0 ? off->device_memory : (double)total_b;
    if (e->be->memory_is_host || budget <= 0) {
        zt_info("gradients: the gradient shard stays in device memory (auto: the %s backend's device memory is host "
                "memory)", e->be->name);
        return 0;
    }
    const zt_param_table *t = e->table;
    size_t E = esz(e);
    zt_segment_sizes sizes = zt_param_table_segment_sizes(t); /* zero_comm.c's gradient pools */
    double rest = (double)mem_sum(e->mem.device) + (double)E * (double)(sizes.embed + 2 * sizes.block) + off->device_acts;
    if (opt->stage == 3) {
        zt_stage3_plan g = zt_engine_stage3_plan(t, opt);
        rest += zt_zero3_gather_bytes(E, g.embed, g.largest, g.depth);
    }
    size_t landing = zt_zero_landing_elems(opt->reduce_bucket_size, sizes.any, e->lay.shard);
    int slots = zt_zero_landing_slots(opt->overlap_comm), world = e->lay.world;
    double on_device = rest + zt_zero_grads_device_bytes(0, E, e->lay.shard, landing, slots, world);
    double on_host = rest + zt_zero_grads_device_bytes(1, E, e->lay.shard, landing, slots, world);
    int to_host = on_device > budget;
    char a[32], b[32], c[32];
    zt_format_bytes(on_device, a, sizeof a), zt_format_bytes(budget, b, sizeof b), zt_format_bytes(on_host, c, sizeof c);
    zt_info("gradients: %s (auto: with the gradient shard the device needs %s, %s the %s %s; sent to the host "
            "bucket by bucket, %s)", to_host ? "to the host bucket by bucket, no device gradient shard"
                                             : "the gradient shard on the device",
            a, to_host ? "more than" : "within", b, off->device_memory > 0 ? "of offload_optimizer.device_memory"
                                                                        : "of the device's memory", c);
    return to_host;
}

static void engine_params_store_hook(void *e, size_t off, const void *src, size_t n) {
    engine_params_store(e, off, src, n);
}
static void engine_params_store_from_device_hook(void *e, size_t off, const void *dev_src, size_t n) {
    engine_params_store_from_device(e, off, dev_src, n);
}

/* offload_param nvme: this rank's piece of segment seg, read ahead or read now; in a training
 * micro-step it belongs to the step under way */
static const void *fetch_from_nvme(void *owner, int seg) {
    zt_engine *e = owner;
    return inf_params_fetch(e->param_nvme, e->adam_t + (zero_in_micro(e->zero) ? 1 : 0), seg);
}

zt_param_source zt_engine_param_source(zt_engine *e) { return zero_param_source(e->zero); }

void zt_engine_nvme_stats(const zt_engine *e, zt_engine_nvme *out) {
    memset(out, 0, sizeof *out);
    twin_nvme_stats(e->twin, out);
    inf_params_stats(e->param_nvme, out);
}

static void fill_from_vector(void *values, size_t off, size_t n, float *dst) {
    memcpy(dst, (const float *)values + off, n * sizeof *dst);
}

zt_engine_init zt_engine_init_from_vector(const float *values) {
    return (zt_engine_init){fill_from_vector, (void *)values};
}

int zt_engine_create(zt_engine *e, const zt_backend *be, zt_comm *comm, const zt_param_table *table,
                     const zt_engine_opts *opt, const float *init_f32, zt_err *err) {
    zt_engine_init init = zt_engine_init_from_vector(init_f32);
    return zt_engine_create_offload(e, be, comm, table, opt, NULL, &init, err);
}

/* The first values, chunk by chunk through one bounded host buffer: each chunk of the parameters this
 * rank holds (the shard at stage 3, else the whole vector) is converted into them, and the part of it
 * in this rank's optimizer range goes to the master weights: the device part's up to the device, the
 * host part's into host memory or its swap file (in chunks that start where the host part starts and
 * hold whole groups of the file, so that no group is read before it is written). When the clock only
 * costs the work, nothing is filled: nothing reads the values. */
static int fill_initial_values(zt_engine *e, const zt_engine_init *init, int master_is_params, zt_err *err) {
    size_t first = e->opt.stage == 3 ? e->lay.lo : 0, last = e->opt.stage == 3 ? e->lay.hi : e->lay.total;
    size_t dev_hi = e->lay.opt_lo + twin_split(e->twin), host_n = twin_host_elems(e->twin);
    size_t piece = host_n ? twin_init_piece(e->twin) : 1, step = (((size_t)1 << 22) + piece - 1) / piece * piece;
    step = min_sz(max_sz(last - first, 1), step);
    float *chunk = zt_xmalloc(step * sizeof *chunk);
    int rc = 0;
    for (size_t a = first, k; a < last && !rc; a += k) {
        k = min_sz(step, (a < dev_hi ? dev_hi : last) - a);
        if (!zt_clock_costs_only()) init->fill(init->ctx, a, k, chunk);
        if (params_from_f32(e, a - first, chunk, k)) {
            rc = 1; /* out of device memory for the staging buffer */
            break;
        }
        size_t x = max_sz(a, e->lay.opt_lo), y = min_sz(a + k, dev_hi); /* the device part's master */
        if (!master_is_params && y > x)
            e->be->copy(e->master + (x - e->lay.opt_lo), chunk + (x - a), (y - x) * sizeof *chunk, ZT_H2D);
        x = max_sz(a, dev_hi), y = min_sz(a + k, e->lay.opt_hi); /* the host part's */
        if (host_n && y > x) rc = twin_init_master(e->twin, x - dev_hi, y - x, chunk + (x - a), err) ? -1 : 0;
    }
    free(chunk);
    return rc;
}

int zt_engine_create_offload(zt_engine *e, const zt_backend *be, zt_comm *comm, const zt_param_table *table,
                             const zt_engine_opts *opt, const zt_engine_offload *off, const zt_engine_init *init,
                             zt_err *err) {
    memset(e, 0, sizeof *e);
    if (off) e->off = *off;
    if (e->off.enabled && !(e->off.ratio <= 1.0)) /* NaN too */
        return zt_fail(err, "zero_optimization.offload_optimizer.ratio must be in [0, 1] or auto, got %g", e->off.ratio);
    e->be = be;
    e->comm = comm;
    e->table = table;
    e->opt = *opt;
    e->lay.stage = opt->stage;
    e->lay.rank = comm->rank;
    e->lay.world = comm->world;
    e->lay.total = table->total;
    e->lay.shard = zt_zero_shard(e->lay.total, e->lay.world, ZT_SHARD_ALIGN);
    e->lay.padded_total = e->lay.shard * (size_t)e->lay.world;
    e->lay.lo = min_sz((size_t)e->lay.rank * e->lay.shard, e->lay.total);
    e->lay.hi = min_sz(e->lay.lo + e->lay.shard, e->lay.total);
    int stage = opt->stage;
    e->lay.opt_lo = stage == 0 ? 0 : e->lay.lo;
    e->lay.opt_hi = stage == 0 ? e->lay.total : e->lay.hi;
    size_t E = esz(e);
    int fp32 = be->compute_dtype == ZT_F32;
    e->facts = (engine_facts){be, comm, table, e->opt, e->off, e->lay, &e->mem, &e->host_pinned_bytes, &e->timing,
                              &e->trace};

    int failed = 0; /* before the first collective (below), failures are agreed on, not returned */
    /* parameters (compute dtype): on the device, or with offload_param the stage-3 shard in host
     * memory (each segment's piece goes up when it is gathered) */
    size_t param_n = stage == 3 ? e->lay.shard : e->lay.padded_total;
    if (e->off.param_device != ZT_PARAM_ON_DEVICE) {
        if (stage != 3)
            return zt_fail(err, "zero_optimization.offload_param needs zero_optimization.stage 3 (it is %d)", stage);
        e->params_on_host = 1;
        if (e->off.param_device == ZT_PARAM_ON_NVME) { /* the shard is in a swap file (engine_infinity.c) */
            e->param_nvme = inf_params_open(&e->facts, err);
            failed = e->param_nvme ? 0 : -1;
        } else {
            e->params = facts_host_alloc(&e->facts, param_n * E, e->off.param_pin_memory, ZT_MEM_PARAMS);
        }
    } else {
        e->params = engine_dev_alloc(e, param_n * E, ZT_MEM_PARAMS);
    }
    /* gradients */
    if (stage < 2) {
        e->grads_full = engine_dev_alloc(e, e->lay.padded_total * E, ZT_MEM_GRADS);
        e->grad_shard = e->grads_full ? at(e, e->grads_full, e->lay.opt_lo) : NULL;
    } else if (gradients_to_host(e)) {
        e->grads_on_host = 1; /* Twin-Flow's host gradients (twin_alloc) are the shard */
    } else {
        e->grad_shard = engine_dev_alloc(e, e->lay.shard * E, ZT_MEM_GRADS);
    }
    /* the communication part: its landing zone and gradient pools, and stage 3's gather buffers */
    zero_buffers zb = {e->params, e->params_on_host, e->grads_full, e->grad_shard, e, wait_updated,
                       e->param_nvme ? fetch_from_nvme : NULL, e->grads_on_host ? grads_land_hook : NULL,
                       e->grads_on_host ? grads_sumsq_hook : NULL, e->grads_on_host ? grads_ready_hook : NULL,
                       e->off.enabled && e->off.super_offload ? grads_final_hook : NULL};
    e->zero = zero_open(&e->facts, &zb);
    if (!failed && stage == 3) failed = zero_open_gather(e->zero, err);
    /* ratio auto below is collective: what failed on some ranks only (a swap file that does not fit,
     * out of memory) must stop every rank here, not leave the others waiting in the calibration */
    if (zt_agree(e->comm, failed, err)) {
        zt_engine_destroy(e);
        return -1;
    }
    /* Twin-Flow split, then the optimizer states: the host part's in host memory (or on NVMe), the
     * device part's on the device (the fp32 master is the fp32 params there, unless those are
     * offloaded) */
    e->twin = twin_open(&e->facts, err);
    if (!e->twin) {
        zt_engine_destroy(e);
        return -1;
    }
    size_t dev_n = twin_split(e->twin), host_n = twin_host_elems(e->twin); /* the device part is the head */
    int master_is_params = fp32 && !e->params_on_host;
    if (master_is_params)
        e->master = stage == 3 ? (float *)e->params : (float *)at(e, e->params, e->lay.opt_lo);
    else
        e->master = engine_dev_alloc(e, max_sz(dev_n, 16) * sizeof(float), ZT_MEM_OPTIM);
    e->adam_m = engine_dev_alloc(e, max_sz(dev_n, 16) * sizeof(float), ZT_MEM_OPTIM);
    e->adam_v = engine_dev_alloc(e, max_sz(dev_n, 16) * sizeof(float), ZT_MEM_OPTIM);
    if (e->params_on_host && !fp32) e->dev_params_out = engine_dev_alloc(e, max_sz(dev_n, 16) * E, ZT_MEM_COMM);
    twin_buffers tb = {e->params, e->params_on_host, e->param_nvme != NULL, e->grad_shard, e->grads_on_host, e->master,
                       e->adam_m, e->adam_v, e->dev_params_out, e, engine_params_store_hook,
                       engine_params_store_from_device_hook};
    if (twin_alloc(e->twin, &tb)) goto oom;
    if ((!e->params && !e->param_nvme) || (!e->grad_shard && !e->grads_on_host) || !e->master || !e->adam_m || !e->adam_v ||
        (e->params_on_host && !fp32 && !e->dev_params_out) ||
        !zero_buffers_ok(e->zero))
        goto oom;
    if (host_n && e->off.nvme_path && twin_open_nvme(e->twin, err)) {
        zt_engine_destroy(e);
        return -1;
    }

    /* parameters and master weights from the fp32 init */
    int filled = fill_initial_values(e, init, master_is_params, err);
    if (filled > 0) goto oom;
    if (filled < 0) {
        zt_engine_destroy(e);
        return -1;
    }
    e->mem.params_peak = e->params_on_host ? 0 : stage == 3 ? e->lay.shard * E : param_n * E;
    if (e->off.enabled)
        zt_info("twin-flow: rank %d updates %zu of %zu optimizer elements on the host (ratio %.3f, the tail from %zu), "
                "the rest on the %s; CPU Adam path %s", e->lay.rank, host_n, e->lay.opt_hi - e->lay.opt_lo,
                twin_ratio_in_effect(e->twin), e->lay.opt_lo + dev_n, be->name, zt_cpu_adam_isa_name(zt_cpu_adam_best_isa()));
    return 0;
oom:
    {
        int host_failed = twin_states_missing(e->twin);
        size_t total = 0, shard = e->lay.shard;
        int world = e->lay.world;
        total = mem_sum(e->mem.device);
        zt_engine_destroy(e);
        if (host_failed) return zt_fail(err, "out of host memory for the offloaded optimizer states (%zu elements)", host_n);
        /* what the model states need on this device: the ZeRO formula minus the offloaded part */
        size_t K = fp32 ? 8 : 12;
        double need = (double)zt_zero_model_state_bytes(stage, E, K, shard, world) - (double)K * host_n;
        const char *offload = fp32 ? "" /* the CPU backend: device memory is host memory */
                                   : "offload the optimizer (zero_optimization.offload_optimizer: {device: cpu, "
                                     "ratio: auto}), ";
        char need_s[32], got_s[32];
        return zt_fail(err,
                       "out of %s memory for model states: stage %d with %zu parameters on %d rank(s) needs about "
                       "%s of them per rank (allocated %s before failing); %suse a higher stage or "
                       "more ranks (zerotrain estimate CONFIG --ranks N shows the options)",
                       be->name, stage, table->total, world, zt_format_bytes(need, need_s, sizeof need_s),
                       zt_format_bytes((double)total, got_s, sizeof got_s), offload);
    }
}

zt_engine *zt_engine_open(const zt_backend *be, zt_comm *comm, const zt_param_table *table, const zt_engine_opts *opt,
                          const zt_engine_offload *off, const zt_engine_init *init, zt_err *err) {
    zt_engine *e = zt_xcalloc(1, sizeof *e);
    if (zt_engine_create_offload(e, be, comm, table, opt, off, init, err)) {
        free(e);
        return NULL;
    }
    return e;
}

void zt_engine_close(zt_engine *e) {
    if (!e) return;
    zt_engine_destroy(e);
    free(e);
}

const zt_engine_layout *zt_engine_layout_of(const zt_engine *e) { return &e->lay; }
const zt_backend *zt_engine_backend(const zt_engine *e) { return e->be; }
zt_comm *zt_engine_comm(const zt_engine *e) { return e->comm; }
const zt_param_table *zt_engine_table(const zt_engine *e) { return e->table; }
long zt_engine_steps(const zt_engine *e) { return e->adam_t; }
void zt_engine_set_steps(zt_engine *e, long t) { e->adam_t = t; }
void *zt_engine_params(zt_engine *e) {
    twin_settle(e->twin);
    return e->params;
}
const void *zt_engine_full_grads(const zt_engine *e) { return e->grads_full; }
double zt_engine_comm_seconds(const zt_engine *e) { return zero_comm_seconds(e->zero); }
const zt_mem_account *zt_engine_memory(const zt_engine *e) { return &e->mem; }
void zt_engine_count_activations(zt_engine *e, size_t device_bytes, size_t host_bytes) {
    e->mem.device[ZT_MEM_ACTS] = device_bytes;
    e->mem.host[ZT_MEM_ACTS] = host_bytes;
    engine_trace_memory(e);
}

void zt_engine_destroy(zt_engine *e) {
    if (!e->be) return;
    twin_settle(e->twin);
    const zt_backend *be = e->be;
    int fp32 = be->compute_dtype == ZT_F32;
    int master_is_params = fp32 && !e->params_on_host;
    void *bufs[] = {e->params_on_host ? NULL : e->params, e->grads_full, e->opt.stage >= 2 ? e->grad_shard : NULL,
                    master_is_params ? NULL : e->master, e->adam_m, e->adam_v, e->dev_params_out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(bufs[i]);
    if (e->params_on_host) facts_host_free(&e->facts, e->params, e->off.param_pin_memory);
    zero_close(e->zero);
    inf_params_close(e->param_nvme);
    twin_close(e->twin);
    engine_trace_close(e);
    memset(e, 0, sizeof *e);
}

/* ---------------------------------------------------------------- step */

void zt_engine_begin_micro(zt_engine *e, int first, int last) {
    if (first) {
        if (zt_test_hook_serial_lanes()) { /* a needless wait (test_hooks.h): the device drained, then the host lanes */
            e->be->synchronize();
            twin_settle(e->twin);
        }
        twin_wait_grads_read(e->twin); /* the last update's D2H lane must have read them before they are zeroed */
        memset(&e->timing, 0, sizeof e->timing);
        engine_trace_memory(e);
        size_t n = e->opt.stage < 2 ? e->lay.padded_total : e->lay.shard;
        if (e->grads_on_host) twin_grads_begin_step(e->twin); /* the first micro-step's buckets overwrite them */
        else e->be->memset_zero(e->opt.stage < 2 ? e->grads_full : e->grad_shard, n * esz(e));
    }
    zero_begin_micro(e->zero, first, last);
}

void zt_engine_finish_reductions(zt_engine *e) { zero_finish_all(e->zero); }

double zt_engine_step(zt_engine *e, float lr, float max_norm) {
    int skipped;
    return zt_engine_step_scaled(e, lr, max_norm, 1.0, &skipped);
}

/* The AdamW step for optimizer step t (1-based) with clip coefficient clip: the same bits whether it
 * is planned before backward (the speculative step) or taken at the step */
static zt_adam_step adam_step_of(const zt_engine *e, long t, float lr, float clip, double loss_scale) {
    int bc = !e->opt.no_bias_correction; /* off: dividing by 1 uses m and v as they are */
    return (zt_adam_step){lr, e->opt.beta1, e->opt.beta2, e->opt.eps, 0.0f,
                          bc ? 1.0f - powf(e->opt.beta1, (float)t) : 1.0f,
                          bc ? 1.0f - powf(e->opt.beta2, (float)t) : 1.0f, (float)(clip / loss_scale)};
}

_Static_assert((int)ZT_UPDATE_PLAIN == (int)TWIN_MODE_PLAIN && (int)ZT_UPDATE_VALIDATED == (int)TWIN_MODE_VALIDATED &&
                   (int)ZT_UPDATE_SPECULATED == (int)TWIN_MODE_SPECULATED, "the timing's update modes are Twin-Flow's");

void zt_engine_plan_step(zt_engine *e, float lr, double loss_scale) {
    zt_adam_step st = adam_step_of(e, e->adam_t + 1, lr, 1.0f, loss_scale);
    twin_plan(e->twin, &st, e->adam_t + 1);
}

zt_engine_speculation zt_engine_speculation_counts(const zt_engine *e) {
    const twin_update_report *r = twin_last_update(e->twin);
    return (zt_engine_speculation){r->speculated_steps, r->rollbacks, r->kept_elems, r->accepted_elems};
}

/* the last update's mode into the step's timing */
static void record_update_mode(zt_engine *e) {
    const twin_update_report *r = twin_last_update(e->twin);
    e->timing.update_mode = r->mode;
    e->timing.rolled_back = r->rolled_back;
}

double zt_engine_step_scaled(zt_engine *e, float lr, float max_norm, double loss_scale, int *skipped) {
    if (e->opt.stage == 3) zero_end_micros(e->zero);
    zero_finish_all(e->zero);
    twin_before_step(e->twin); /* the last update's host lanes, if still running (delayed: released) */
    double tn0 = zt_clock_now();
    *skipped = 0;
    /* with loss scaling the step may be skipped (overflow), so the norm comes before the host
     * threads start moving gradients; without it the first transfers overlap the norm */
    int scaled = loss_scale != 1.0, norm_first = scaled || e->skip_nonfinite;
    double norm = norm_first ? zero_grad_norm(e->zero) / loss_scale : 0.0;
    if (!isfinite(norm)) {
        *skipped = 1;
        twin_settle(e->twin); /* a delayed update drains: nothing is left released but not in place; a
                                 speculation is forgotten */
        record_update_mode(e);
        zt_trace_complete(e->trace, ZT_LANE_MAIN, "grad norm (overflow, step skipped)", tn0, zt_clock_now());
        return norm;
    }
    twin_flow *tf = twin_start(e->twin); /* freed by twin_update or, later, twin_settle */
    if (!norm_first) norm = zero_grad_norm(e->zero);
    float clip = 1.0f;
    if (max_norm > 0 && norm > max_norm) clip = (float)(max_norm / (norm + 1e-6)); /* torch.nn.utils.clip_grad_norm_ */
    double tn1 = zt_clock_now();
    e->timing.grad_norm = tn1 - tn0;
    zt_trace_complete(e->trace, ZT_LANE_MAIN, "grad norm", tn0, tn1);

    e->adam_t++;
    zt_adam_step st = adam_step_of(e, e->adam_t, lr, clip, loss_scale);
    twin_update(e->twin, tf, tn0, &st, e->adam_t); /* a speculation is validated here: the same st, or rolled back */
    record_update_mode(e);
    if ((e->opt.stage == 1 || e->opt.stage == 2) && e->lay.world > 1) zero_allgather_params(e->zero);
    if (e->opt.stage == 3) zero_reset_residents(e->zero);
    if (e->param_nvme) inf_params_after_update(e->param_nvme); /* the file holds the new values: the next reads may start */
    zt_trace_complete(e->trace, ZT_LANE_MAIN, "update", tn0, zt_clock_now());
    engine_trace_memory(e);
    return norm;
}

void zt_engine_skip_step(zt_engine *e) {
    if (e->opt.stage == 3) zero_end_micros(e->zero);
    zero_finish_all(e->zero);
    twin_settle(e->twin); /* a speculation is forgotten */
    record_update_mode(e);
}

void zt_engine_set_skip_nonfinite(zt_engine *e, int on) { e->skip_nonfinite = on; }

zt_trace *zt_engine_trace(zt_engine *e) { return e->trace; }

void zt_engine_inject_overflow(zt_engine *e) {
    zero_finish_all(e->zero); /* nothing lands in host memory after it */
    twin_settle(e->twin);     /* a speculation started on the gradients before the inf is forgotten */
    if (e->grads_on_host) twin_grads_poison(e->twin);
    else e->be->scale(e->grad_shard, INFINITY, 1);
}

void zt_engine_gather_params(zt_engine *e, float *out) {
    const zt_backend *be = e->be;
    twin_settle(e->twin);
    if (e->opt.stage < 3) {
        if (be->compute_dtype == ZT_F32) {
            be->copy(out, e->params, e->lay.total * 4, ZT_D2H);
            return;
        }
    }
    /* sharded (or 16-bit): gather the fp32 master shards of every rank */
    size_t *counts = zt_xcalloc((size_t)e->lay.world, sizeof *counts);
    for (int r = 0; r < e->lay.world; r++) counts[r] = e->lay.shard;
    float *full = be->alloc(e->lay.padded_total * sizeof(float));
    size_t own = e->opt.stage == 0 ? e->lay.total : e->lay.hi - e->lay.lo;
    /* this rank's master, device part then host part (from host memory or NVMe), into full at opt_lo */
    float *mine = full + e->lay.opt_lo;
    size_t d = min_sz(twin_split(e->twin), own);
    if (d) be->copy(mine, e->master, d * 4, ZT_D2D);
    if (own > d) {
        float *tmp = zt_xmalloc((own - d) * sizeof(float));
        zt_engine_state_read(e, ZT_STATE_MASTER, d, own - d, tmp);
        be->copy(mine + d, tmp, (own - d) * 4, ZT_H2D);
        free(tmp);
    }
    if (e->opt.stage != 0) {
        e->comm->wait(e->comm, e->comm->allgather(e->comm, (char *)full + e->lay.lo * 4, full, counts, ZT_F32));
    }
    be->copy(out, full, e->lay.total * 4, ZT_D2H);
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
    return zt_zero_model_state_bytes(e->opt.stage, esz(e), K, e->lay.shard, e->lay.world);
}

/* the bytes of the same model states as allocated (excluding pools and comm buffers) */
size_t zt_engine_model_state_bytes(const zt_engine *e) {
    size_t E = esz(e);
    size_t params = (e->opt.stage == 3 ? e->lay.shard : e->lay.padded_total) * E;
    size_t grads = (e->opt.stage < 2 ? e->lay.padded_total : e->lay.shard) * E;
    size_t opt_n = e->opt.stage == 0 ? e->lay.padded_total : e->lay.shard;
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
    if (e->mem.nvme[ZT_MEM_OPTIM] + e->mem.nvme[ZT_MEM_PARAMS])
        zt_info("memory per rank (nvme): params %.1f MiB, optimizer %.1f MiB", e->mem.nvme[ZT_MEM_PARAMS] / 1048576.0,
                e->mem.nvme[ZT_MEM_OPTIM] / 1048576.0);
    /* where each state really lives: on NVMe the host holds staging buffers only */
    if (e->params_on_host)
        zt_info("offload_param: the parameter shard (%.1f MiB) is %s; the device holds gathered segments only (%d "
                "rotating buffer(s), prefetch depth %d)", (double)e->lay.shard * esz(e) / 1048576.0,
                e->param_nvme ? "on NVMe (offload_param.nvme_path), read through host staging buffers" : "in host memory",
                1 + zero_prefetch_depth(e->zero), zero_prefetch_depth(e->zero));
    if (e->off.enabled)
        zt_info("twin-flow: ratio %.3f; rank 0 keeps master, m, v of %zu of its %zu optimizer elements %s (%.1f MiB "
                "%s, %s transfer buffers)", twin_ratio_in_effect(e->twin), twin_host_elems(e->twin),
                e->lay.opt_hi - e->lay.opt_lo,
                e->off.nvme_path ? "on NVMe (offload_optimizer.nvme_path)" : "in host memory",
                (double)(e->off.nvme_path ? e->mem.nvme[ZT_MEM_OPTIM] : e->mem.host[ZT_MEM_OPTIM]) / 1048576.0,
                e->off.nvme_path ? "there, staged through host buffers" : "there",
                twin_pinned(e->twin) ? "pinned" : "pageable");
    /* the shard is total / world rounded up to ZT_SHARD_ALIGN, so it may exceed the total itself (one
     * rank, or a tensor-parallel part): say how it is made rather than "shard X of Y" */
    int tp = e->table->tp_size;
    zt_info("model states: %.1f MiB allocated, ZeRO formula %.1f MiB (stage %d; %zu elements%s over %d data-parallel "
            "rank%s: a shard of %zu each, rounded up to a multiple of %d)",
            (double)zt_engine_model_state_bytes(e) / 1048576.0, (double)zt_engine_model_state_formula(e) / 1048576.0,
            e->opt.stage, e->lay.total, tp > 1 ? " in this rank's tensor-parallel part" : "", e->lay.world,
            e->lay.world == 1 ? "" : "s", e->lay.shard, ZT_SHARD_ALIGN);
}

/* ---------------------------------------------------------------- state access, timing */

static float *state_device(zt_engine *e, zt_opt_state which) {
    return which == ZT_STATE_MASTER ? e->master : which == ZT_STATE_ADAM_M ? e->adam_m : e->adam_v;
}

void zt_engine_state_read(zt_engine *e, zt_opt_state which, size_t off, size_t n, float *host_out) {
    twin_settle(e->twin);
    size_t end = off + n, split = twin_split(e->twin);
    if (off < split) { /* device part */
        size_t k = min_sz(end, split) - off;
        e->be->copy(host_out, state_device(e, which) + off, k * sizeof(float), ZT_D2H);
        host_out += k;
        off += k;
    }
    if (end > off) twin_state_rw(e->twin, e->adam_t, which, off - split, end - off, host_out, 0);
}

void zt_engine_state_write(zt_engine *e, zt_opt_state which, size_t off, size_t n, const float *host_in) {
    twin_settle(e->twin);
    size_t end = off + n, o = off, split = twin_split(e->twin);
    const float *src = host_in;
    if (o < split) {
        size_t k = min_sz(end, split) - o;
        e->be->copy(state_device(e, which) + o, src, k * sizeof(float), ZT_H2D);
        src += k;
        o += k;
    }
    if (end > o) twin_state_rw(e->twin, e->adam_t, which, o - split, end - o, (float *)src, 1);
    /* fp32: the parameters hold the master's values; mirror them wherever they are not the same
     * buffer (the host part always; the device part when the parameters are offloaded) */
    if (which == ZT_STATE_MASTER && e->be->compute_dtype == ZT_F32) {
        size_t from = e->params_on_host ? off : max_sz(off, split);
        if (end > from) {
            if (e->params_on_host) engine_params_store(e, from, host_in + (from - off), end - from);
            else e->be->copy(params_at_opt(e, from), host_in + (from - off), (end - from) * sizeof(float), ZT_H2D);
        }
    }
}

float *zt_engine_state_span(zt_engine *e, zt_opt_state which, size_t off, size_t *n_out, int *host_memory) {
    twin_settle(e->twin);
    size_t n = e->lay.opt_hi - e->lay.opt_lo, split = twin_split(e->twin);
    if (off < split) {
        *n_out = split - off;
        *host_memory = e->be->memory_is_host;
        return state_device(e, which) + off;
    }
    *n_out = n - off;
    *host_memory = !e->off.nvme_path; /* on NVMe: no span, write through zt_engine_state_write */
    return twin_state_span(e->twin, which, off - split, n_out);
}

/* the view's functions: the engine's own, reached through the view's untyped owner */
static void view_state_read(void *e, zt_opt_state which, size_t off, size_t n, float *host_out) {
    zt_engine_state_read(e, which, off, n, host_out);
}
static void view_state_write(void *e, zt_opt_state which, size_t off, size_t n, const float *host_in) {
    zt_engine_state_write(e, which, off, n, host_in);
}
static float *view_state_span(void *e, zt_opt_state which, size_t off, size_t *n_out, int *host_memory) {
    return zt_engine_state_span(e, which, off, n_out, host_memory);
}
static void view_params_write_f32(void *e, size_t flat_off, const float *src, size_t n) {
    zt_engine_params_write_f32(e, flat_off, src, n);
}
static void view_set_steps(void *e, long steps) { zt_engine_set_steps(e, steps); }

zt_state_view *zt_engine_state_view(zt_engine *e) {
    e->view = (zt_state_view){
        .be = e->be, .table = e->table, .lay = e->lay,
        .params = zt_engine_params(e), /* after the pending update */
        .params_on_host = e->params_on_host, .steps = e->adam_t, .owner = e,
        .state_read = view_state_read, .state_write = view_state_write, .state_span = view_state_span,
        .params_write_f32 = view_params_write_f32, .set_steps = view_set_steps,
    };
    return &e->view;
}

void zt_engine_phase(zt_engine *e, const char *name, double t0, double t1) {
    if (!strcmp(name, "forward")) e->timing.forward += t1 - t0;
    else if (!strcmp(name, "backward")) e->timing.backward += t1 - t0;
    zt_trace_complete(e->trace, ZT_LANE_MAIN, name, t0, t1);
}

const zt_engine_timing *zt_engine_timing_of(const zt_engine *e) { return &e->timing; }

void zt_engine_print_timing(const zt_engine *e) {
    const zt_engine_timing *t = &e->timing;
    zt_info("      time (ms): forward %.1f | backward %.1f | reduce-scatter %.1f | grad norm %.1f | host adam %.1f | "
            "device adam %.1f | D2H %.1f | H2D %.1f | all-gather %.1f | optimizer %.1f (host idle %.1f, device idle %.1f)",
            t->forward * 1e3, t->backward * 1e3, t->reduce_scatter * 1e3, t->grad_norm * 1e3, t->host_adam * 1e3,
            t->device_adam * 1e3, t->d2h * 1e3, t->h2d * 1e3, t->allgather * 1e3, t->optimizer * 1e3,
            t->host_idle * 1e3, t->device_idle * 1e3);
}
