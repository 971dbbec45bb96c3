/* sim_internal.h — private to the simulated GPU (backend_sim.c, backend_sim_ops.c): the item a lane
 * runs, what the device side offers the ops (checked device pointers, the stream) and the memory
 * entries of the op table. The device is the lower of the two: the ops (and zt_backend_sim, which
 * hands out their table) are written on it, and it calls nothing of theirs. */
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


#endif
