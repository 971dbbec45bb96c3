/* infinity.h — private to src/engine/: ZeRO-Infinity's NVMe tier, opaque: the Twin-Flow host part's
 * optimizer states in a swap file (inf_states, engine_infinity.c) and the stage-3 parameter shard in
 * another (inf_params, infinity_params.c). Each owns its swap file and staging buffers; the engine
 * hands it the shared facts, and the step whose data moves (for the swap's errors). */
#ifndef ZT_INFINITY_H
#define ZT_INFINITY_H

#include "engine/engine_facts.h"

struct zt_swap;
/* names the step in the swap's errors from here on ("(step 12)") */
void inf_swap_at_step(struct zt_swap *s, long step);
/* the one-line error of a failed swap request, then every rank ends */
void inf_swap_failed(const zt_err *err);
/* adds a swap file's traffic since the start to out */
void inf_swap_stats(const struct zt_swap *swap, zt_engine_nvme *out);

/* ---- engine_infinity.c: master, m and v of the host part's n elements ---- */
typedef struct inf_states inf_states;
inf_states *inf_states_open(const engine_facts *f, size_t n, zt_err *err); /* NULL with err set */
void inf_states_close(inf_states *s); /* removes the swap file */
/* [off, off + n) of `which` from or to the swap file (synchronous), for step `step` */
void inf_states_rw(inf_states *s, long step, zt_opt_state which, size_t off, size_t n, float *buf, int write);
/* elements a group holds: writes of whole groups need no read first */
size_t inf_states_group(const inf_states *s);

/* What the update pipeline asks of its caller (the Twin-Flow host Adam lane). */
typedef struct inf_update_hooks {
    void *ctx;
    long (*wait_go)(void *ctx); /* until the step's Adam may start; returns the step being updated */
    /* AdamW of host-part elements [lo, hi), once their gradients are down; master, m and v point at
     * element lo */
    void (*update)(void *ctx, size_t lo, size_t hi, float *master, float *m, float *v);
    /* elements [0, hi) are updated (last: all of them), the group took [t0, t1] */
    void (*group_done)(void *ctx, size_t hi, int last, double t0, double t1);
} inf_update_hooks;
/* The step's update group by group, the next reads and the previous write in flight while one is
 * updated (ZeRO-Infinity's pipeline); on the calling thread. */
void inf_states_update(inf_states *s, const inf_update_hooks *h);

/* ---- infinity_params.c: offload_param nvme, this rank's shard ---- */
typedef struct inf_params inf_params;
inf_params *inf_params_open(const engine_facts *f, zt_err *err); /* NULL with err set */
void inf_params_close(inf_params *p); /* the buffers, then the swap file */
/* shard elements [off, off + n) from or to the file, synchronously (reads ahead are dropped first) */
void inf_params_rw(inf_params *p, long step, size_t off, size_t n, void *buf, int write);
/* this rank's piece of segment seg (NULL if none) in a staging buffer, valid until the next call:
 * read ahead or read now; the predicted next pieces' reads are issued before it returns */
const void *inf_params_fetch(inf_params *p, long step, int seg);
/* after the update has written the file: the next step's first pieces are read ahead */
void inf_params_after_update(inf_params *p);

/* adds each swap's traffic (and the parameter reader's counters) to out; NULL does nothing */
void inf_states_stats(const inf_states *s, zt_engine_nvme *out);
void inf_params_stats(const inf_params *p, zt_engine_nvme *out);

#endif
