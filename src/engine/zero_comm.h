/* zero_comm.h — private to src/engine/: the engine's communication part (zero_comm.c), opaque:
 * the gradient reduction, stage 3's gathers and their prefetch, the global norm and the stage 1-2
 * all-gather. It owns its buffers (the reduce-scatter landing zone, the segment gradient pools,
 * the gather buffers) and its bookkeeping; the engine hands it the shared facts and the parameter
 * and gradient buffers it reads and writes. */
#ifndef ZT_ZERO_COMM_H
#define ZT_ZERO_COMM_H

#include "engine/engine_facts.h"

typedef struct zero_comm zero_comm;

/* What the part is handed of the engine's buffers, and how it reaches what other parts own. */
typedef struct zero_buffers {
    void *params;     /* stages 0-2: the full padded vector; stage 3: this rank's shard; NULL on NVMe */
    int params_on_host; /* offload_param: the stage-3 shard is host memory or NVMe, not the device's */
    void *grads_full; /* stages 0-1: the full padded gradient vector */
    void *grad_shard; /* the gradients of [opt_lo, opt_hi); NULL when they land in host memory (below) */
    void *owner;      /* passed to the two functions below */
    /* waits until the updated parameters of flat range [a, b) are in place (Twin-Flow's overlap_step) */
    void (*wait_updated)(void *owner, size_t a, size_t b);
    /* offload_param nvme (NULL otherwise): this rank's piece of segment seg in a host staging buffer,
     * valid until the next call */
    const void *(*fetch_from_nvme)(void *owner, int seg);
    /* Stages 2-3 with the whole optimizer shard on the host (NULL otherwise): each reduced bucket's
     * piece goes down on the gradient lane (grads_lane.c), which adds it to the host's gradients at
     * shard offset off (Twin-Flow's, with the device's rounding; called on the lane's thread); the
     * norm sums their squares there. grads_ready, on the caller's thread before a piece is queued,
     * lets the host gradients be made ready for the step (zeroed at its first). */
    void (*grads_land)(void *owner, size_t off, const void *host_src, size_t n, int flags); /* GRADS_LAND_* */
    double (*grads_sumsq)(void *owner, size_t off, size_t n);
    void (*grads_ready)(void *owner);
    /* the step's final gradients of flat range [a, b) (the last micro-step's reduction of a bucket):
     * queued on the device (or handed to the gradient lane) by the calling thread; NULL: not asked
     * (Twin-Flow's speculative step brings them down and updates them during backward) */
    void (*grads_final)(void *owner, size_t a, size_t b);
} zero_buffers;

/* The landing zone (with grads_land: LANDING_SLOTS bucket-sized ones, zero_formula.h, and the
 * gradient lane with its host staging buffer) and (stages 2-3) the segment gradient pools; zero_buffers_ok says whether they
 * were all allocated. */
zero_comm *zero_open(const engine_facts *f, const zero_buffers *b);
int zero_buffers_ok(const zero_comm *z);
/* stage 3: the gather buffers, as many as prefetch and stage3_max_live_parameters allow; -1 with err
 * set when out of memory or when the bound is below the least working set */
int zero_open_gather(zero_comm *z, zt_err *err);
void zero_close(zero_comm *z);

zt_param_source zero_param_source(zero_comm *z); /* what the model runs on */
/* a micro-step starts: first zeroes the step's comm time; last (or stage >= 2): its gradients are
 * reduced; stage 3: the recorded use order */
void zero_begin_micro(zero_comm *z, int first, int last);
void zero_end_micros(zero_comm *z);        /* stage 3: the step: what runs next until begin_micro is no training */
int zero_in_micro(const zero_comm *z);     /* between begin_micro and the step, when the use order is followed */
void zero_finish_all(zero_comm *z);        /* waits for every reduction in flight */
double zero_grad_norm(zero_comm *z);       /* global L2 norm of the (reduced) gradients */
void zero_allgather_params(zero_comm *z);  /* stages 1-2 after the update: everyone's new parameters */
void zero_reset_residents(zero_comm *z);   /* stage 3 after the update: every gathered segment is stale */
double zero_comm_seconds(const zero_comm *z); /* waited on collectives this step */
int zero_prefetch_depth(const zero_comm *z);  /* stage 3: segments gathered ahead (rotating buffers: 1 + it) */

#endif
