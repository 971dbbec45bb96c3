/* engine_facts.h — private to src/engine/: the facts the engine's parts share, which engine.c owns
 * and hands to each part when it opens it (zero_comm.c, ...): the backend, the data-parallel comm,
 * the parameter table, the options, the partition, and where the engine counts memory, times the
 * step and traces. A part sees the engine through these and through what it is handed at open,
 * never through struct zt_engine. */
#ifndef ZT_ENGINE_FACTS_H
#define ZT_ENGINE_FACTS_H

#include "engine/engine.h"
#include "util/clock.h" /* zt_clock_bulk_alloc */

typedef struct engine_facts {
    const zt_backend *be;
    zt_comm *comm;               /* the data-parallel group */
    const zt_param_table *table;
    zt_engine_opts opt;          /* copies: none of the three changes after the engine is created */
    zt_engine_offload off;
    zt_engine_layout lay;
    zt_mem_account *mem;         /* the engine's account: each part counts what it allocates */
    size_t *host_pinned_bytes;   /* of mem->host: page-locked (be->host_alloc) */
    zt_engine_timing *timing;    /* the step's timing: each part fills its own figures */
    zt_trace *const *trace;      /* the engine's trace: NULL until zt_engine_open_trace */
} engine_facts;

/* Gradients landed in host memory (stages 2-3 at ratio 1): what a landed piece is in its step, from
 * the micro-step that reduced it (zero_comm.c) to where it is added (twin_flow.c: twin_grads_land).
 * FIRST: the step's first micro-step, whose pieces cover the shard once: written as an add into zeros;
 * LAST: the last micro-step: the piece's values are final, and its chunks' squares can be summed. */
enum { GRADS_LAND_FIRST = 1, GRADS_LAND_LAST = 2 };

static inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* the bytes of one memory (an account's device, host or nvme) over all categories */
static inline size_t mem_sum(const size_t *per_category) {
    size_t t = 0;
    for (int c = 0; c < ZT_MEM_NCAT; c++) t += per_category[c];
    return t;
}

/* bytes of one element in the compute dtype, and element `elems` of a compute-dtype buffer */
static inline size_t facts_esz(const engine_facts *f) { return zt_dtype_size(f->be->compute_dtype); }
static inline void *facts_at(const engine_facts *f, const void *base, size_t elems) {
    return (char *)base + elems * facts_esz(f);
}

/* host memory counted in the engine's account: page-locked transfer memory from the backend when
 * pinned. Here with the facts, as facts_dev_alloc is, so that the parts that allocate through them
 * (twin_flow.c, grads_lane.c) need nothing of engine.c, which opens them. */
static inline void *facts_host_alloc(const engine_facts *f, size_t bytes, int pinned, int category) {
    if (bytes == 0) bytes = 64;
    void *p;
    if (pinned) p = f->be->host_alloc(bytes);
    else p = zt_clock_bulk_alloc(bytes); /* zero-filled; address space only when the clock only costs */
    if (p) f->mem->host[category] += bytes;
    if (p && pinned) *f->host_pinned_bytes += bytes;
    return p;
}
static inline void facts_host_free(const engine_facts *f, void *p, int pinned) {
    if (!p) return;
    if (pinned) f->be->host_free(p);
    else zt_clock_bulk_free(p);
}

/* host Adam over n elements from t0 to t1 on the trace's host Adam lane, named `what`, with a marker
 * for the casts fused in it (engine_trace.c); nothing without a trace */
void facts_trace_host_adam(const engine_facts *f, const char *what, double t0, double t1, size_t n);

/* device memory of the backend, counted in the engine's account under category */
static inline void *facts_dev_alloc(const engine_facts *f, size_t bytes, int category) {
    void *p = f->be->alloc(bytes);
    if (p) f->mem->device[category] += bytes;
    return p;
}

#endif
