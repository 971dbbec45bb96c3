/* state_view.h — what the engine shows the floor below it: this rank's place in the partition
 * (zt_engine_layout), its memory account by category, and the state view through which checkpoints
 * read and write the model states without knowing the engine. Defined here, below both, so that
 * src/io/ never includes src/engine/: the engine fills a view (zt_engine_state_view), checkpoints
 * and monitors take one. */
#ifndef ZT_STATE_VIEW_H
#define ZT_STATE_VIEW_H

#include <stddef.h>

#include "model/gpt2.h"
#include "backend/backend.h"

/* This rank's place in the partition (engine.h's opening comment): what checkpoints and exports
 * need to know of the engine, and all that other modules read of it directly. */
typedef struct zt_engine_layout {
    int stage;             /* ZeRO stage 0-3 */
    int rank, world;
    size_t total, padded_total, shard, lo, hi; /* hi = min((rank+1)*shard, total) */
    size_t opt_lo, opt_hi;                     /* the range this rank's optimizer updates */
} zt_engine_layout;

/* Bytes by category and memory: the engine counts them, monitors and reports print them. */
enum { ZT_MEM_PARAMS, ZT_MEM_GRADS, ZT_MEM_OPTIM, ZT_MEM_ACTS, ZT_MEM_COMM, ZT_MEM_NCAT };
static const char *const zt_mem_category_names[ZT_MEM_NCAT] = {"params", "grads", "optimizer", "activations",
                                                               "comm"};

typedef struct zt_mem_account {
    size_t device[ZT_MEM_NCAT];
    size_t host[ZT_MEM_NCAT];
    size_t nvme[ZT_MEM_NCAT]; /* swap files (ZeRO-Infinity) */
    size_t params_peak; /* stage 3: most parameter bytes on the device at once (shard unless offloaded,
                           + gathered segments, held or kept for reuse) */
} zt_mem_account;

/* The optimizer's fp32 vectors, in the order checkpoints save them (ZT_CKPT_MASTER ... ADAM_V). */
typedef enum { ZT_STATE_MASTER, ZT_STATE_ADAM_M, ZT_STATE_ADAM_V, ZT_STATE_COUNT } zt_opt_state;

/* One rank's model states as their owner holds them. The facts are a snapshot taken when the view
 * was made (after the owner's pending work is done); the functions reach what only the owner knows
 * the place of (device, host or NVMe), each called with `owner`. Offsets `off` count from
 * lay.opt_lo; flat offsets from the start of the local vector. */
typedef struct zt_state_view {
    const zt_backend *be;         /* whose memory "device memory" is */
    const zt_param_table *table;  /* names and offsets of the local vector's tensors */
    zt_engine_layout lay;
    void *params;       /* compute-dtype parameters: the full padded vector (stages 0-2) or the shard
                           (stage 3); NULL when they are on NVMe */
    int params_on_host; /* params is host memory although the backend's is not (offload_param) */
    long steps;         /* optimizer steps taken (Adam's t) */
    void *owner;
    /* optimizer state of [opt_lo + off, opt_lo + off + n) through an fp32 host buffer */
    void (*state_read)(void *owner, zt_opt_state which, size_t off, size_t n, float *host_out);
    void (*state_write)(void *owner, zt_opt_state which, size_t off, size_t n, const float *host_in);
    /* the buffer that holds state element off and the *n_out after it; *host_memory says whether it is
     * host memory or device memory of be (NULL when the state is on NVMe) */
    float *(*state_span)(void *owner, zt_opt_state which, size_t off, size_t *n_out, int *host_memory);
    /* compute-dtype parameters of flat elements [flat_off, flat_off + n) from fp32 host values */
    void (*params_write_f32)(void *owner, size_t flat_off, const float *src, size_t n);
    void (*set_steps)(void *owner, long steps);
} zt_state_view;

#endif
