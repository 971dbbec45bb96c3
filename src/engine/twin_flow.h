/* twin_flow.h — private to src/engine/: Twin-Flow's host part (twin_flow.c; ratio auto in
 * twin_ratio.c), opaque. It owns the split of the optimizer range, the host part's master, m and v
 * (host memory, or on NVMe through engine_infinity.c), its transfer buffers, and the host lanes of an
 * update that may still be running (overlap_step). The engine hands it the shared facts, and, once
 * the device part exists, the device part's buffers and how to store offloaded parameters. */
#ifndef ZT_TWIN_FLOW_H
#define ZT_TWIN_FLOW_H

#include "backend/cpu_adam.h"
#include "engine/engine_facts.h"
#include "engine/twin_ratio.h" /* twin_choose_ratio, twin_has_out_buffer */

typedef struct twin_host twin_host;
typedef struct twin_flow twin_flow; /* one update's host lanes */

/* Decides the split: the ratio in effect (auto: calibrated, collective) and the host part's size.
 * NULL with err set when no ratio fits. Without offload the host part is empty. */
twin_host *twin_open(const engine_facts *f, zt_err *err);
void twin_close(twin_host *t); /* after twin_settle; NULL does nothing */
size_t twin_split(const twin_host *t);      /* host_lo: [0, split) of the optimizer range is the device part */
size_t twin_host_elems(const twin_host *t); /* host_n: [split, split + host_n) is the host part */
double twin_ratio_in_effect(const twin_host *t);
int twin_pinned(const twin_host *t);        /* transfer buffers are page-locked */

/* What the engine hands the host part: the device part's buffers, and how offloaded parameters
 * (offload_param) are stored from host or device memory. */
typedef struct twin_buffers {
    void *params;        /* as zero_buffers.params */
    int params_on_host, params_on_nvme;
    void *grad_shard;    /* NULL with grads_on_host */
    int grads_on_host;   /* stages 2-3 at ratio 1: backward's buckets land in host_grad (twin_grads_land) */
    float *master, *adam_m, *adam_v; /* the device part's states */
    void *dev_params_out; /* offload_param, 16-bit: the device Adam's updated params before they go down */
    void *owner;
    void (*params_store)(void *owner, size_t off, const void *src, size_t n);
    void (*params_store_from_device)(void *owner, size_t off, const void *dev_src, size_t n);
} twin_buffers;
/* takes the engine's buffers, and allocates the host part's (if any); -1 when out of host memory
 * (twin_states_missing: the states themselves) */
int twin_alloc(twin_host *t, const twin_buffers *b);
int twin_states_missing(const twin_host *t);
/* offload_optimizer nvme: the host part's swap file; -1 with err set */
int twin_open_nvme(twin_host *t, zt_err *err);
/* the host part's master elements [off, off + n) from fp32 init values (host memory or NVMe) */
int twin_init_master(twin_host *t, size_t off, size_t n, const float *init, zt_err *err);
/* the pieces those values are best given in (NVMe: whole groups of the swap file), elements */
size_t twin_init_piece(const twin_host *t);

/* The host part's state of `which`, elements [off, off + n) from the split, through an fp32 host
 * buffer (from host memory or NVMe, as of step `step`); the span in host memory that holds element
 * off and the *n_out elements after it there (the speculation window's chunks may be in their spare
 * places), or NULL on NVMe. */
void twin_state_rw(twin_host *t, long step, zt_opt_state which, size_t off, size_t n, float *buf, int write);
float *twin_state_span(twin_host *t, zt_opt_state which, size_t off, size_t *n_out);
void twin_nvme_stats(const twin_host *t, zt_engine_nvme *out);

/* The speculative step (offload_optimizer.super_offload, twin_flow.c's header): the update of step
 * `step` as it will be if the norm needs no clipping (clip coefficient 1), planned before its
 * backward; without a plan the step validates first. */
void twin_plan(twin_host *t, const zt_adam_step *st, long step);
/* Optimizer offsets [off, off + n) hold the step's final gradients (the last micro-step's reduction
 * queued on the device, or handed to the gradient lane with grads_on_host): the host part's go down
 * now, and may be updated speculatively. */
void twin_grads_final(twin_host *t, size_t off, size_t n);
/* Starts the D2H lane (and the others, which wait) as soon as the gradients are final, or, where
 * they started during backward, brings down what is left. */
twin_flow *twin_start(twin_host *t);
/* The update of step `step`: CPU Adam on the host part and device Adam on the rest at once; fills
 * the step's timing. With offload_optimizer.overlap_step the host lanes may still be running when it
 * returns: the next step's uses of the host part's parameters wait for exactly what they need. */
void twin_update(twin_host *t, twin_flow *tf, double t0, const zt_adam_step *st, long step);
/* What the last update did (mode TWIN_MODE_*), and the speculation's counts since the start. */
enum { TWIN_MODE_PLAIN, TWIN_MODE_VALIDATED, TWIN_MODE_SPECULATED };
typedef struct twin_update_report {
    int mode;            /* PLAIN: no speculative step (off, or no host part); VALIDATED: validated first;
                            SPECULATED: the host part was updated during backward, then validated */
    int rolled_back;     /* SPECULATED, and the speculation was forgotten (clipped, or the step skipped) */
    long rollbacks, speculated_steps;
    double kept_elems, accepted_elems; /* since the start: elements updated speculatively before the verdict, and
                                          of them those the verdict accepted (counted as each update's lanes end) */
} twin_update_report;
const twin_update_report *twin_last_update(const twin_host *t);
/* Waits until the host lanes of the last update are done (nothing pending after it; a delayed update
 * is drained: its parameters go up now), and forgets the lanes this step started during its backward
 * (no update has used them yet). Everything that reads or writes optimizer state or the host part's
 * buffers calls it first. NULL does nothing. */
void twin_settle(twin_host *t);
/* Before a step's update: settles the last update's host lanes, or with a delayed update
 * (delayed_update) waits for its CPU Adam and lets its parameters go up during this update. */
void twin_before_step(twin_host *t);
/* Waits until the updated parameters of optimizer offsets [a, b) are in place (at once when
 * nothing is pending, or when the pending update is delayed: the last step's values are used). */
void twin_wait_params(twin_host *t, size_t a, size_t b);
/* Waits until the D2H lane has read all gradients (before the next step overwrites them). */
void twin_wait_grads_read(twin_host *t);

/* Gradients in host memory (twin_buffers.grads_on_host): twin_grads_begin_step at a step's first
 * micro-step; twin_grads_ready, before its first landing, waits until the last update's CPU Adam has
 * read host_grad; twin_grads_land (from the gradient lane's thread) adds n values from a host buffer at
 * host-part offset off as the device's accumulate would (widened, fp32 add, rounded to nearest even;
 * flags GRADS_LAND_*, engine_facts.h: the first micro-step's into zeros, the last one's chunk squares
 * summed as they become final); twin_grads_sumsq is the device's sumsq of [off, off + n), bit for bit;
 * twin_grads_poison makes the first gradient non-finite (the overflow test hook). */
void twin_grads_begin_step(twin_host *t);
void twin_grads_ready(twin_host *t);
void twin_grads_land(twin_host *t, size_t off, const void *src, size_t n, int flags);
double twin_grads_sumsq(twin_host *t, size_t off, size_t n);
void twin_grads_poison(twin_host *t);


#endif
