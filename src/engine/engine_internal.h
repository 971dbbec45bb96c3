/* engine_internal.h — private to src/engine/: what engine.c (lifecycle, the step, state access,
 * accounting), zero_comm.c (gradient reduction, stage-3 gathering, the global norm, the parameter
 * all-gather) and twin_flow.c (the optimizer split between host and device) share. Nothing outside
 * src/engine/ includes it. */
#ifndef ZT_ENGINE_INTERNAL_H
#define ZT_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine/engine.h"

/* where a finished reduction's piece of recv_tmp goes */
typedef enum {
    ZT_LAND_NOTHING, /* stage 0: the all-reduce wrote the result in place */
    ZT_LAND_ADD,     /* stages 2-3: added to the grad shard (one reduction per micro-step) */
    ZT_LAND_COPY,    /* stage 1: copied into the grad shard (one reduction per step) */
} zt_landing;

/* one reduction in flight: when it completes, its piece of recv_tmp goes into the grad shard */
struct zt_inflight {
    zt_comm_req *req;
    size_t shard_off, count; /* the piece of this rank's shard it delivers */
    zt_landing landing;      /* what happens to its piece of recv_tmp */
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

static inline size_t esz(const zt_engine *e) { return zt_dtype_size(e->be->compute_dtype); }
static inline void *at(const zt_engine *e, const void *base, size_t elems) { return (char *)base + elems * esz(e); }
static inline size_t seg_lo(const zt_engine *e, int s) { return e->table->segment_lo[s]; }
static inline size_t seg_hi(const zt_engine *e, int s) { return e->table->segment_lo[s + 1]; }
static inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static inline size_t mem_sum(const size_t *per_category) {
    size_t t = 0;
    for (int c = 0; c < ZT_MEM_NCAT; c++) t += per_category[c];
    return t;
}

/* where the compute-dtype parameters of optimizer offset off live */
static inline void *params_at_opt(const zt_engine *e, size_t off) {
    return e->opt.stage == 3 ? at(e, e->params, off) : at(e, e->params, e->opt_lo + off);
}

/* engine.c */
void *engine_dev_alloc(zt_engine *e, size_t bytes, int category); /* counted in e->mem.device */

/* zero_comm.c */
int zero_alloc_gather(zt_engine *e);       /* stage 3: the gather buffers; -1 when out of memory */
void zero_free_gather(zt_engine *e);
void zero_finish_all(zt_engine *e);        /* waits for every reduction in flight */
double zero_grad_norm(zt_engine *e);       /* global L2 norm of the (reduced) gradients */
void zero_allgather_params(zt_engine *e);  /* stages 1-2 after the update: everyone's new parameters */
void zero_reset_residents(zt_engine *e);   /* stage 3 after the update: resident segments are stale */

/* twin_flow.c: one step's host lanes */
typedef struct twin_flow {
    zt_engine *e;
    zt_adam_step st;
    size_t nchunks;            /* 0: nothing on the host, no threads */
    pthread_t lanes[3];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;                     /* st is set: the CPU Adam may start */
    size_t d2h_done, adam_done; /* chunks */
    double adam_busy, d2h_busy, h2d_busy;
} twin_flow;
void twin_plan(zt_engine *e);  /* the ratio in effect (auto: calibrated, collective) and host_n */
int twin_alloc(zt_engine *e);  /* the host part's buffers; -1 when out of memory */
void twin_free(zt_engine *e);
/* starts the D2H lane (and the others, which wait) as soon as the gradients are final */
void twin_start(zt_engine *e, twin_flow *tf);
/* the update: CPU Adam on the host part and device Adam on the rest at once; fills e->timing */
void twin_update(zt_engine *e, twin_flow *tf, double t0, const zt_adam_step *st);

#endif
