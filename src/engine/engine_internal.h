/* engine_internal.h — private to src/engine/: the engine's own struct, which engine.c (lifecycle,
 * the step, state access, accounting), engine_trace.c and mem_report.c share (and the engine's
 * white-box tests). The engine's parts do not include it: each owns its state behind an opaque
 * pointer here and sees the engine only through engine_facts.h and what it is handed at open —
 * zero_comm.h (gradient reduction, stage-3 gathers), twin_flow.h (Twin-Flow's host part),
 * infinity.h (ZeRO-Infinity's swap files). Nothing outside src/engine/ includes it. */
#ifndef ZT_ENGINE_INTERNAL_H
#define ZT_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine/engine_facts.h"

typedef struct zero_comm zero_comm;
typedef struct twin_host twin_host;
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
    void *grad_shard;   /* gradients of [opt_lo, opt_hi) (aliases grads_full for stages 0-1); NULL with
                           grads_on_host */
    int grads_on_host;  /* stages 2-3, the whole optimizer shard on the host: backward's buckets land in
                           Twin-Flow's host gradients (zero_comm.c, twin_flow.c), no device shard */
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

    twin_host *twin;       /* Twin-Flow's host part: the split, the host states, the host lanes (twin_flow.c) */
    zt_engine_timing timing;
    zt_trace *trace;       /* owned; NULL unless zt_engine_open_trace */
    struct zt_nvml_sampler *nvml; /* owned; NULL unless zt_engine_trace_nvml found NVML */
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
                     const zt_engine_opts *opt, const float *init_f32, zt_err *err); /* a whole vector */
int zt_engine_create_offload(zt_engine *e, const zt_backend *be, zt_comm *comm, const zt_param_table *table,
                             const zt_engine_opts *opt, const zt_engine_offload *off, const zt_engine_init *init,
                             zt_err *err);
void zt_engine_destroy(zt_engine *e);

/* engine_trace.c */
void engine_trace_memory(zt_engine *e); /* the memory counters now (the engine's accounting) */
void engine_trace_close(zt_engine *e);  /* stops the device observer, closes the trace */

#endif
