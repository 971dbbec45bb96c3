/* engine_internal.h — private to src/engine/: what engine.c (lifecycle, the step, state access,
 * accounting), zero_comm.c (gradient reduction, stage-3 gathering, the global norm, the parameter
 * all-gather) and twin_flow.c (the optimizer split between host and device) share. Nothing outside
 * src/engine/ includes it. */
#ifndef ZT_ENGINE_INTERNAL_H
#define ZT_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine/engine_facts.h"

typedef struct zero_comm zero_comm;
typedef struct inf_states inf_states;
typedef struct inf_params inf_params;

struct zt_engine {
    const zt_backend *be;
    zt_comm *comm;
    const zt_param_table *table;
    zt_engine_opts opt;
    zt_engine_offload off;
    zt_engine_layout lay;  /* the partition; lay.stage == opt.stage */

    void *params;       /* stages 0-2: full padded vector; stage 3: this rank's shard (compute dtype) */
    void *grads_full;   /* stages 0-1: full padded gradient vector */
    void *grad_shard;   /* gradients of [opt_lo, opt_hi) (aliases grads_full for stages 0-1) */
    float *master;      /* fp32 master weights of [opt_lo, opt_hi) (aliases params on fp32 backends) */
    float *adam_m, *adam_v;
    long adam_t;        /* optimizer steps taken */

    engine_facts facts; /* handed to the parts (engine_facts.h) */
    zero_comm *zero;    /* gradient reduction, stage-3 gathers, the norm, the all-gather (zero_comm.c) */
    int params_on_host; /* offload_param: the stage-3 shard is not on the device: in host memory
                           (params) or, with nvme, in param_nvme (params NULL) */
    inf_params *param_nvme; /* offload_param nvme: the shard's swap file and read-ahead (infinity_params.c) */
    void *dev_params_out; /* offload_param, 16-bit: the device Adam's updated params before they go down */

    zt_mem_account mem;

    /* Twin-Flow: optimizer offsets [host_lo, host_lo + host_n) (from opt_lo: the tail of this rank's
     * range) are updated on the host, [0, host_lo) on the device. Arrays of the host part (host_*,
     * swap groups, chunks) are indexed from host_lo. */
    size_t host_n, host_lo;
    double offload_ratio;  /* the ratio in effect (auto: the chosen one) */
    float *host_master, *host_m, *host_v; /* [host_n] host memory */
    void *host_grad;       /* [host_n] gradients, compute dtype (D2H landing) */
    void *host_params16;   /* 16-bit backends: [host_n] updated params in compute dtype (H2D source) */
    size_t host_chunk;     /* pipeline chunk, elements */
    /* ZeRO-Infinity (engine_infinity.c): with offload_optimizer nvme the host part's master, m and v
     * live in a swap file, group by group, and host_master/m/v are NULL */
    inf_states *state_nvme;
    int host_pinned;       /* transfer buffers came from be->host_alloc */
    zt_engine_timing timing;
    struct twin_flow *pending; /* the last update's host lanes, still running (overlap_step), or NULL */
    zt_trace *trace;       /* owned; NULL unless zt_engine_open_trace */
    size_t host_pinned_bytes; /* of mem.host: page-locked (be->host_alloc) */
    /* engine_trace.c: the device's work as the backend reports it (only while tracing) */
    zt_device_observer observer;
    size_t link_bytes[2];  /* bytes copied H2D [0] and D2H [1] since the trace opened (atomic adds) */
    size_t dev_in_use, dev_peak, dev_capacity; /* the allocator's bytes in use, their peak since the last
                                                  zt_engine_device_peak, the device's total (0: unknown) */
    pthread_mutex_t dev_mu;  /* dev_in_use / dev_peak */
    int skip_nonfinite;    /* the norm comes before the update on every path; a non-finite one skips it */
    zt_state_view view;    /* what zt_engine_state_view hands to checkpoints */
};


/* In place, for the engine's own white-box tests (test_checkpoint.c, test_model.c); everyone else
 * uses zt_engine_open / zt_engine_close. */
int zt_engine_create(zt_engine *e, const zt_backend *be, zt_comm *comm, const zt_param_table *table,
                     const zt_engine_opts *opt, const float *init_f32, zt_err *err);
int zt_engine_create_offload(zt_engine *e, const zt_backend *be, zt_comm *comm, const zt_param_table *table,
                             const zt_engine_opts *opt, const zt_engine_offload *off, const float *init_f32,
                             zt_err *err);
void zt_engine_destroy(zt_engine *e);

static inline size_t esz(const zt_engine *e) { return zt_dtype_size(e->be->compute_dtype); }
static inline void *at(const zt_engine *e, const void *base, size_t elems) { return (char *)base + elems * esz(e); }
static inline size_t seg_lo(const zt_engine *e, int s) { return e->table->segment_lo[s]; }
static inline size_t seg_hi(const zt_engine *e, int s) { return e->table->segment_lo[s + 1]; }

static inline size_t mem_sum(const size_t *per_category) {
    size_t t = 0;
    for (int c = 0; c < ZT_MEM_NCAT; c++) t += per_category[c];
    return t;
}

/* where the compute-dtype parameters of optimizer offset off live */
static inline void *params_at_opt(const zt_engine *e, size_t off) {
    return e->opt.stage == 3 ? at(e, e->params, off) : at(e, e->params, e->lay.opt_lo + off);
}

/* engine.c */
void *engine_dev_alloc(zt_engine *e, size_t bytes, int category); /* counted in e->mem.device */
void *engine_host_alloc(zt_engine *e, size_t bytes, int pinned, int category); /* counted in e->mem.host */
void engine_host_free(zt_engine *e, void *p, int pinned);
/* offload_param: compute-dtype values of shard elements [off, off + n) into the host shard or the
 * parameter swap file, from host memory or from device memory */
void engine_params_store(zt_engine *e, size_t off, const void *src, size_t n);
void engine_params_store_from_device(zt_engine *e, size_t off, const void *dev_src, size_t n);

/* engine_trace.c */
void engine_trace_memory(zt_engine *e); /* the memory counters now (the engine's accounting) */
void engine_trace_close(zt_engine *e);  /* stops the device observer, closes the trace */

/* twin_flow.c: one step's host lanes */
typedef struct twin_flow {
    zt_engine *e;
    zt_adam_step st;
    size_t nchunks;            /* 0: nothing on the host, no threads */
    pthread_t lanes[3];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;                     /* st is set: the CPU Adam may start */
    size_t d2h_done, adam_done, h2d_done; /* chunks */
    /* when each chunk was published on the run's clock (util/clock.h), per counter: a thread that
     * waited for chunk c of a counter continues from that time (the virtual clock's handoff) */
    double *d2h_at, *adam_at, *h2d_at; /* [nchunks] */
    double start_at, go_at;     /* the lanes were started; st was set */
    double end_at[3];           /* each lane's time when it finished */
    double adam_busy, d2h_busy, h2d_busy;
    double t_start;             /* when the update started (for the optimizer's wall time) */
} twin_flow;
/* the ratio in effect (auto: calibrated, collective) and host_n; -1 with err set when no ratio fits */
int twin_plan(zt_engine *e, zt_err *err);
void twin_chunk_range(const twin_flow *tf, size_t c, size_t *a, size_t *b); /* chunk c's host-part elements */
void twin_publish(twin_flow *tf, size_t *counter, size_t chunks); /* a lane finished `chunks` chunks */
/* waits (tf->mu held) until *counter reaches target, then takes the time chunk target was published at */
void twin_wait_count(twin_flow *tf, const size_t *counter, size_t target);
/* waits (tf->mu held) for twin_go, then takes its time */
void twin_wait_go(twin_flow *tf);
/* whether the host part has a buffer for its updated compute-dtype parameters (twin_alloc) */
int twin_has_out_buffer(const zt_engine *e);
/* the host part's master from fp32 init values (host memory or NVMe) */
int twin_init_master(zt_engine *e, const float *init, zt_err *err);
/* where the CPU Adam writes the updated compute-dtype parameters of host-part element off (from
 * host_lo), or NULL when the fp32 host master itself is what goes up */
void *twin_host_out(zt_engine *e, size_t off);
/* AdamW of host-part elements [off, off + n) (from host_lo) split per tensor (weight decay differs); p, m, v, g and
 * out point at element off of their arrays; g and out are in the compute dtype, out may be NULL */
void twin_adam_span(const zt_engine *e, const zt_adam_step *st, size_t off, size_t n, float *p, float *m, float *v,
                    const void *g, void *out);
int twin_alloc(zt_engine *e);  /* the host part's buffers; -1 when out of memory */
void twin_free(zt_engine *e);
/* starts the D2H lane (and the others, which wait) as soon as the gradients are final; tf is
 * heap memory that the engine owns from here on */
void twin_start(zt_engine *e, twin_flow *tf);
/* the update: CPU Adam on the host part and device Adam on the rest at once; fills e->timing. With
 * offload_optimizer.overlap_step the host lanes may still be running when it returns (e->pending):
 * the next step's uses of the host part's parameters wait for exactly what they need. */
void twin_update(zt_engine *e, twin_flow *tf, double t0, const zt_adam_step *st);
/* Waits until the host lanes of the last update are done (nothing pending after it). Everything
 * that reads or writes optimizer state or the host part's buffers calls it first. */
void twin_settle(zt_engine *e);
/* Waits until the updated parameters of optimizer offsets [a, b) are in place (at once when
 * nothing is pending). */
void twin_wait_params(zt_engine *e, size_t a, size_t b);
/* Waits until the D2H lane has read all gradients (before the next step overwrites them). */
void twin_wait_grads_read(zt_engine *e);

/* twin_ratio.c: ratio auto (collective): *ratio in [0, 1] and which bound decided it; -1 with err set,
 * on every rank, when no ratio fits both the device and the host memory */
enum { TWIN_BOUND_SPEED, TWIN_BOUND_DEVICE, TWIN_BOUND_HOST };
int twin_choose_ratio(zt_engine *e, double *ratio, int *bound, zt_err *err);

#endif
