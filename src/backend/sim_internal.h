/* sim_internal.h — private to the simulated GPU (backend_sim.c, backend_sim_ops.c, backend_sim_llama.c,
 * sim_operands.c): the item a lane runs, what the device side offers the ops (checked device pointers,
 * the stream), the memory entries of the op table, the ops' 16-bit operands (sim_operands.c) and the
 * Llama family's entries (backend_sim_llama.c). The device is the lower: the ops (and zt_backend_sim,
 * which hands out their table) are written on it, and it calls nothing of theirs. */
#ifndef ZT_SIM_INTERNAL_H
#define ZT_SIM_INTERNAL_H

#include "backend/backend.h"

/* One unit of work on a lane: an op's closure, a copy, a wait for another lane. */
typedef struct sim_item sim_item;
typedef void (*sim_fn)(sim_item *);
struct sim_item {
    sim_fn run;
    void *p[10];             /* shadow addresses (or host pointers for copies) */
    long i[10];              /* shapes and flags */
    size_t n;                /* elements or bytes */
    float f;                 /* scale, dloss */
    zt_adam_step step;       /* adamw's step, copied: the caller's may change before the op runs */
    double result;           /* sumsq */
    int waited;              /* the submitter waits for it and frees it */
    /* the virtual clock (sim_clock.h): launched at `ready` on the queueing thread's time, waiting
     * on `dep` (set by a wait item as it runs), costing `cost` on its lane */
    double ready, dep, cost, flops;
    double operand_cost;     /* an op's widening and rounding of its 16-bit operands, work a GPU does
                              * not do (sim_cost_operands; 0 on a GPU's profile): added to cost at submit */
    double widened, rounded; /* the bytes of them widened and rounded back (ZEROTRAIN_SIM_OP_TIMES) */
    int must_run;            /* runs even when the ops are only costed (a wait between lanes) */
    const char *name;        /* for the trace of the device's lanes (util/clock.h: zt_clock_event) */
    sim_item *next;
};

/* backend_sim.c: the device (memory space, lanes, copies) */

/* ZEROTRAIN_SIM_OP_TIMES (sim_clock.h): the calling thread's CPU time, and the parts of it a lane
 * spent widening and rounding operands (the ops add them) since the last take */
double sim_thread_cpu(void);
void sim_operand_cpu_add(double widen, double round);
void sim_operand_cpu_take(double *widen, double *round);

/* The shadow address of [p, p + bytes) for op `op`'s argument `arg`, after checking that the range
 * lies inside one live allocation (else the run stops, the op and argument named); NULL stays NULL. */
void *sim_dev(const void *p, size_t bytes, const char *op, const char *arg);
/* a zeroed item that runs `run` */
sim_item *sim_item_new(sim_fn run);
/* queues it on the stream (the compute lane), which frees it after it ran */
void sim_enqueue(sim_item *it);
/* queues it on the stream and returns once it has run; it is the caller's to free */
void sim_stream_run_and_wait(sim_item *it);
/* the table's entries that are memory, copies and order (backend.h says what each does) */
void *sim_alloc(size_t bytes);
void sim_free(void *p);
void *sim_host_alloc(size_t bytes);
void sim_host_free(void *p);
void sim_memset_zero(void *p, size_t bytes);
void sim_copy(void *dst, const void *src, size_t bytes, zt_copy_kind kind);
void sim_copy_async(void *dst, const void *src, size_t bytes, zt_copy_kind kind);
void sim_copy_ahead(void *dst, const void *src, size_t bytes, zt_copy_kind kind);
void sim_wait_ahead(void);
void sim_transfer(void *dst, const void *src, size_t bytes, zt_copy_kind kind);
void sim_synchronize(void);
unsigned long long sim_mark(void);
void sim_wait_mark(unsigned long long mark);
void sim_bind_thread(void);
void sim_mem_info(size_t *free_bytes, size_t *total_bytes);
/* The device started (once: memory space, lanes) and bound to the calling thread; its index among
 * ZEROTRAIN_SIM_DEVICES and their count. NULL, or why the device cannot start (then no table is
 * handed out). zt_backend_sim (backend_sim_ops.c) hands out the op table on it. */
const char *sim_device_open(int *device, int *device_count);

/* ---- sim_operands.c: an op's operands ---- */

/* the CPU backend, which does every op's math (set once the device is opened) */
extern const zt_backend *sim_cpu_math;

/* The fp32 copies of an op's 16-bit arguments: one per distinct buffer (aliased arguments share
 * theirs, as the ops' contracts allow), written back rounded when the op may have written them:
 * rows x cols elements with row stride ld (a whole tensor is one row of n). */
typedef struct {
    struct { void *shadow; float *f; size_t n; int write; size_t rows, cols, ld; } t[8];
    int k;
    zt_dtype dt;
} wide;

/* the fp32 copy of shadow's n elements for this op (written back rounded at sim_w16_done when
 * write); NULL stays NULL; a buffer already widened for the op (an aliased argument) is shared */
float *sim_w16(wide *w, void *shadow, size_t n, int write);
/* elements a matrix of rows x cols with row stride ld spans from its first */
size_t sim_span(long rows, long cols, long ld);
/* sim_w16 for a strided matrix: only its own rows x cols elements are written back */
float *sim_w16_rows(wide *w, void *shadow, long rows, long cols, long ld, int write);
/* rounds the written copies back, frees the per-op ones */
void sim_w16_done(wide *w);
/* How an op's run uses an operand, which sets what the sim spends on it besides the math: a 16-bit
 * tensor it widens to fp32 (IN16), one it widens and rounds back because the op writes it (OUT16),
 * or one it uses as it is (AS_IS: fp32 tensors, tokens, and every operand of the conversions and
 * AdamW, which work on their buffers in place). The flag is the run's sim_w16 `write` argument, said at
 * queue time so the virtual clock can price it. */
enum { AS_IS, IN16, OUT16 };
/* it->p[slot] = the shadow of [p, p + bytes) (sim_dev's checks), its widening and rounding priced */
void sim_operand(sim_item *it, int slot, int use, const void *p, size_t bytes, const char *op, const char *arg);
/* an op's item: runs `run`, the dtype in i[8], named for the trace */
sim_item *sim_op_item(sim_fn run, zt_dtype dt, const char *name);
/* causal attention's FLOPs over B sequences of T, width C (NH heads x head size), `factor` x forward */
void sim_attention_cost(sim_item *it, zt_dtype dt, double B, double T, double C, double factor);
#define E(n) ((size_t)(n) * zt_dtype_size(dt)) /* bytes of n compute-dtype elements (dt in scope) */
#define F(n) ((size_t)(n) * sizeof(float))
/* an op's run opens with OP_BEGIN(it) (its widened operands, the dtype from i[8]) and ends with OP_END() */
#define OP_BEGIN(it) wide w_ = {.dt = (zt_dtype)(it)->i[8]}
#define OP_END() sim_w16_done(&w_)

/* ---- backend_sim_llama.c: the Llama family's entries, in dtype dt (the table's thunks pass it) ---- */
void sim_q_attention_gqa_forward(zt_dtype dt, void *out, void *att, const void *qkv, int B, int T, int NH, int NKV,
                                 int HD);
void sim_q_attention_gqa_backward(zt_dtype dt, void *dqkv, void *datt, const void *dout, const void *qkv,
                                  const void *att, int B, int T, int NH, int NKV, int HD);
void sim_q_rmsnorm_forward(zt_dtype dt, void *out, float *rstd, const void *inp, const void *w, float eps, int N,
                           int C);
void sim_q_rmsnorm_backward(zt_dtype dt, void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                            const float *rstd, int N, int C);
void sim_q_rope(zt_dtype dt, void *qkv, const float *cos_sin, int B, int T, int NH, int NKV, int HD, int inverse);
void sim_q_swiglu_forward(zt_dtype dt, void *out, const void *inp, int N, int inter);
void sim_q_swiglu_backward(zt_dtype dt, void *dinp, const void *inp, const void *dout, int N, int inter);

#endif
