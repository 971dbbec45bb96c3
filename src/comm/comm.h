/* comm.h — the collectives table the engine uses for data parallelism and ZeRO (MPI in
 * src/comm_mpi.c; NCCL in cuda/). Buffers are device buffers of the backend the comm was made for.
 * Asynchronous calls return a request that wait() completes; the MPI table uses non-blocking
 * collectives so that reduction overlaps with backward when overlap_comm is on. */
#ifndef ZT_COMM_H
#define ZT_COMM_H

#include <stddef.h>
#include "backend/backend.h"
#include "util/util.h"

typedef struct zt_comm_req zt_comm_req; /* opaque in-flight operation */

typedef struct zt_comm {
    const char *name;
    int rank, world;
    void *impl;
    /* sum-reductions over dtype elements (ZT_F32 or the backend compute dtype) */
    zt_comm_req *(*allreduce_sum)(struct zt_comm *c, void *buf, size_t count, zt_dtype t);
    /* Variable-count reduce-scatter: send is the concatenation of per-rank pieces of counts[r]
     * elements; recv (counts[rank] elements) = sum over ranks of their piece for this rank. */
    zt_comm_req *(*reduce_scatter_sum)(struct zt_comm *c, const void *send, void *recv, const size_t *counts,
                                       zt_dtype t);
    /* Variable-count all-gather: recv is the concatenation over ranks r of counts[r] elements, each
     * rank's piece coming from its send (send may be its own piece inside recv: in place). */
    zt_comm_req *(*allgather)(struct zt_comm *c, const void *send, void *recv, const size_t *counts, zt_dtype t);
    zt_comm_req *(*broadcast)(struct zt_comm *c, void *buf, size_t bytes, int root);
    void (*wait)(struct zt_comm *c, zt_comm_req *req);
    void (*barrier)(struct zt_comm *c);
    /* host-side small reductions for scalars (loss sums, norms), always blocking, in double */
    void (*allreduce_host_double)(struct zt_comm *c, double *vals, int n);
    /* every rank agrees: returns the max over ranks of status (used to fail together) */
    int (*agree_max)(struct zt_comm *c, int status);
    void (*destroy)(struct zt_comm *c);
} zt_comm;

/* Process-wide MPI setup: MPI_Init_thread once, error handler that makes every rank exit non-zero
 * when one fails, and a duplicate of MPI_COMM_WORLD reserved for data parallelism / ZeRO. */
int zt_mpi_init(int *argc, char ***argv, zt_err *err);
void zt_mpi_finalize(void);
/* Ends the whole job with status (MPI_Abort when world > 1, exit otherwise). */
void zt_mpi_abort(int status);
int zt_mpi_world_rank(void);
int zt_mpi_world_size(void);

/* Data-parallel comm over MPI for the given backend (device buffers are host memory on the CPU
 * backend; a CUDA backend uses the NCCL table instead). */
zt_comm *zt_comm_mpi(const zt_backend *be, zt_err *err);

#endif
