/* twin_internal.h — Twin-Flow's private state, shared by its two files and no one else:
 * twin_flow.c (the split, the host buffers, the step's entry points: plan, update, waits, settling)
 * and twin_lanes.c (a flow's host threads: the D2H, host Adam, speculative and H2D lanes, and the
 * chunk states they hand each other). twin_flow.c's header comment says how a step runs. */
#ifndef ZT_TWIN_INTERNAL_H
#define ZT_TWIN_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "engine/infinity.h"
#include "engine/twin_flow.h"

/* Optimizer offsets [host_lo, host_lo + host_n) (from opt_lo: the tail of this rank's range) are
 * updated on the host, [0, host_lo) on the device. Arrays of the host part (host_*, chunks) are
 * indexed from host_lo. */
struct twin_host {
    engine_facts f;
    twin_buffers b;        /* the engine's (twin_alloc) */
    size_t host_n, host_lo;
    double offload_ratio;  /* the ratio in effect (auto: the chosen one) */
    float *host_master, *host_m, *host_v; /* [host_n] host memory; NULL with the states on NVMe */
    void *host_grad;       /* [host_n] gradients, compute dtype (D2H landing) */
    void *host_params16;   /* [host_n] updated params in compute dtype (H2D source), where twin_has_out_buffer */
    size_t host_chunk;     /* pipeline chunk, elements */
    size_t nchunks;        /* host_n in chunks of host_chunk */
    int host_pinned;       /* transfer buffers came from be->host_alloc */
    inf_states *nvme;      /* offload_optimizer nvme: master, m and v in a swap file (engine_infinity.c) */
    twin_flow *pending;    /* the last update's host lanes, still running (overlap_step), or NULL */
    /* grads_on_host (twin_grads_*): host_grad holds the last step's gradients until the step's first
     * landing overwrites them; the last micro-step's landings sum each ZT_SUMSQ_CHUNK chunk's squares
     * as the chunk becomes final, so the norm adds sq_part in chunk order instead of reading host_grad */
    int grads_stale;       /* the last update's CPU Adam may still read host_grad */
    size_t first_landed, last_landed; /* elements landed this step by its first / last micro-step */
    size_t sq_chunks;      /* ZT_SUMSQ_CHUNK chunks of host_grad */
    double *sq_part;       /* [sq_chunks] a final chunk's sum of squares (zt_cpu_sumsq_g's per-chunk sum) */
    uint32_t *sq_landed;   /* [sq_chunks] its elements landed by the last micro-step so far */
    /* the speculative step (super_offload; the file's header) */
    int super;             /* on: the step's lanes start during its backward, and it may speculate */
    const char *super_off; /* why it is off where it was asked for (NULL: on, or not asked) */
    size_t window_elems;   /* the window's size as twin_open found it (twin_speculation_elems) */
    size_t window_first;   /* chunks [window_first, nchunks) may be updated speculatively */
    float *spare_master, *spare_m, *spare_v; /* [(nchunks - window_first) * host_chunk] their other place */
    unsigned char *in_spare; /* [nchunks] the chunk's master, m and v are in its spare slot, not at home */
    twin_flow *current;    /* this step's lanes: started during its backward (twin_grads_final) or by
                              twin_start, until twin_update makes them the pending update's */
    pthread_mutex_t land_mu; /* current, as the gradient lane's landings read it (twin_grads_land) */
    int planned;           /* plan_st is the step about to run (twin_plan), for plan_step */
    long plan_step;
    zt_adam_step plan_st;  /* its update with clip coefficient 1 */
    int speculate_next;    /* the policy: the next planned step speculates */
    twin_update_report report; /* the last update's (twin_last_update) */
};

/* chunk states (struct twin_flow's state[c]) */
enum {
    CH_DOWN = 1, /* its gradients are in host_grad */
    CH_SPEC = 2, /* the speculative lane updated it into its other place */
    CH_DONE = 4, /* updated with the step's own update (or its speculation accepted) */
    CH_UP = 8,   /* its parameters are in place on the device */
    CH_KEPT = 16, /* speculated, and begun before the verdict: the verdict applies to it */
};
enum { LANE_ADAM, LANE_D2H, LANE_H2D, LANE_SPEC, NLANES };
/* the verdict of twin_go */
enum { VERDICT_NONE, VERDICT_ACCEPT, VERDICT_REDO, VERDICT_DISCARD };

/* one range of gradients the D2H lane brings down: final from `mark` of the compute stream on */
typedef struct d2h_item {
    size_t off, n;               /* host-part offsets */
    unsigned long long mark;
    double at;                   /* when it was queued (the run's clock) */
    int flush;                   /* every chunk not down yet; the caller synchronized */
} d2h_item;

/* one update's host lanes */
struct twin_flow {
    twin_host *t;
    zt_adam_step st;            /* the step's update (twin_go) */
    long step;                  /* the step being updated (the NVMe swap names it in errors) */
    size_t nchunks;             /* 0: nothing on the host, no threads */
    pthread_t lanes[NLANES];
    int started[NLANES];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;                     /* st and the verdict are set */
    int verdict;                /* VERDICT_* */
    int delayed;                /* delayed_update: the H2D lane waits until the next step releases it */
    struct twin_flow *prev;     /* the last step's delayed flow, whose H2D lane reads the buffer this
                                   one's CPU Adam writes, chunk by chunk; freed with this one */
    int h2d_held;               /* the H2D lane may not start yet */
    double release_at;          /* when it was released */
    unsigned char *state;       /* [nchunks] CH_* */
    size_t *down_elems;         /* [nchunks] elements brought down by ranges so far */
    size_t count[CH_KEPT + 1];  /* chunks with each CH_ bit (index: the bit) */
    double last_at[CH_KEPT + 1]; /* the latest time a chunk reached each bit */
    double release_clock;       /* the latest time a chunk came down (they come down in time order) */
    double adam_clock;          /* the host Adam lane's time at its last chunk: its next ends later */
    double main_clock;          /* the step's thread's time at its last range queued: the verdict is later */
    int settled;                /* the accepted speculations are marked done (settle_speculation) */
    int releases_final;         /* every chunk is down (the D2H lane has done the step's flush) */
    /* when each chunk reached a state, on the run's clock: a thread that waited for it goes on from there */
    double *down_at, *done_at, *up_at, *spec_start, *spec_end; /* [nchunks] */
    d2h_item *queue;            /* the D2H lane's ranges, in order */
    size_t queued, taken, queue_cap;
    /* the speculation */
    int speculate;              /* the speculative lane runs (twin_plan's step, the policy) */
    zt_adam_step spec_st;
    int spec_stopped;           /* the speculative lane has ended: nothing more is written */
    double kept_until;          /* the end of the last chunk it began before the verdict (CH_KEPT) */
    size_t kept;                /* how many of those */
    double start_at, go_at;     /* the lanes were started; st was set */
    double end_at[NLANES];      /* each lane's time when it finished */
    double adam_busy, spec_busy, d2h_busy, h2d_busy;
    double t_start;             /* when the update started (for the optimizer's wall time) */
};

static inline size_t esz(const twin_host *t) { return facts_esz(&t->f); }
static inline void *at(const twin_host *t, const void *base, size_t elems) { return facts_at(&t->f, base, elems); }

/* where the compute-dtype parameters of optimizer offset off live */
static inline void *params_at_opt(const twin_host *t, size_t off) {
    return t->f.opt.stage == 3 ? at(t, t->b.params, off) : at(t, t->b.params, t->f.lay.opt_lo + off);
}

static inline void *twin_host_out(twin_host *t, size_t off) {
    if (t->b.params_on_host && !t->b.params_on_nvme) return params_at_opt(t, t->host_lo + off);
    return t->host_params16 ? at(t, t->host_params16, off) : NULL;
}

static inline void twin_chunk_range(const twin_host *t, size_t c, size_t *a, size_t *b) {
    *a = c * t->host_chunk;
    *b = min_sz(t->host_n, *a + t->host_chunk);
}

/* chunk c's master, m and v in host memory: at home, or in its spare slot (the window's chunks,
 * whose speculative updates alternate between the two); `other` gives the place that does not hold
 * the state (where a speculative update writes) */
static inline void chunk_state(const twin_host *t, size_t c, int other, float **p, float **m, float **v) {
    size_t a = c * t->host_chunk;
    int spare = c >= t->window_first && (t->in_spare[c] ^ (other != 0));
    if (!spare) {
        *p = t->host_master + a, *m = t->host_m + a, *v = t->host_v + a;
        return;
    }
    size_t s = (c - t->window_first) * t->host_chunk;
    *p = t->spare_master + s, *m = t->spare_m + s, *v = t->spare_v + s;
}

static inline float decay_of(const twin_host *t, const zt_param_info *p) {
    return (p->decay || t->f.opt.decay_all_params) ? t->f.opt.weight_decay : 0.0f;
}

/* ---- a flow's life and its lanes (twin_lanes.c) */

/* a flow and its lanes, started now (speculate: with the speculative lane) */
twin_flow *twin_flow_start(twin_host *t, int speculate);
/* the D2H lane's next range */
void twin_queue_range(twin_flow *tf, d2h_item it);
/* the step's update and verdict: the waiting lanes go */
void twin_flow_go(twin_flow *tf, const zt_adam_step *st, long step, int delayed, int verdict);
/* delayed_update: the held H2D lane may send */
void twin_flow_release(twin_flow *tf);
/* the gradients of chunk c's [a, b) have landed (the gradient lane's landings) */
void twin_range_down(twin_flow *tf, size_t c, size_t a, size_t b);
/* holding tf->mu: until chunk c has `bit`; the calling thread goes on from when it got it */
void twin_wait_chunk(twin_flow *tf, size_t c, unsigned bit);
/* every lane has ended: their figures are the step's */
void twin_join_lanes(twin_host *t, twin_flow *tf);
/* after twin_join_lanes (or with no lanes) */
void twin_flow_free(twin_flow *tf);

#endif
