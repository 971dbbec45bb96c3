/* comm_nccl.h — the NCCL collectives table (implemented in cuda/comm_nccl.cu; src/comm_nccl_absent.c
 * stands in when the binary is built without CUDA). It implements comm/comm.h for device buffers of
 * the CUDA backend: NCCL on a communication stream, one per process and shared by all its NCCL
 * comms (so two comms' collectives never run at once: zt_comm.order), ordered after the compute
 * stream's work through events, and bootstrapped over MPI (rank 0's ncclUniqueId is broadcast,
 * ncclCommInitRank runs watched by the hang watchdog), over all ranks or over a group of them.
 * An NCCL older than 2.10 (no bfloat16) counts as absent: callers fall back as without NCCL. */
#ifndef ZT_COMM_NCCL_H
#define ZT_COMM_NCCL_H

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Data-parallel comm over NCCL for the CUDA backend `be` (zt_backend_cuda() must have succeeded
 * on this rank: the GPU is already chosen). Returns NULL with the reason in *err when built
 * without CUDA, when be is not the CUDA backend, or when NCCL fails to initialise.
 * Collective call, like zt_comm_mpi: every rank of MPI_COMM_WORLD must call it.
 *
 * Ordering: each asynchronous call first waits (on the GPU, via an event) for everything already
 * queued on the compute stream, then runs on the comm stream; wait() makes the compute stream wait
 * for the operation (it does not block the host), so any later op or copy sees the result.
 * barrier, allreduce_host_double and agree_max are host-side and blocking (over MPI). */
zt_comm *zt_comm_nccl(const zt_backend *be, zt_err *err);

/* The same over the ranks of MPI_COMM_WORLD that pass the same color (>= 0), ordered by key, as
 * zt_comm_mpi_group: the group's rank 0 makes the ncclUniqueId and the group's MPI comm carries it
 * and the host-side calls. Collective over the world (every rank calls it, each with its color).
 * Whether NCCL works is agreed within each group only: a caller that needs every group on NCCL (or
 * every group off it) agrees over a world comm afterwards, as the engine's open_device_comm does
 * for the world comm. A rank may sit in several NCCL comms (a tensor-parallel and a data-parallel
 * one) on one GPU, whose collectives then run on the one comm stream in the order they are issued;
 * NCCL refuses two ranks of one comm on the same GPU. */
zt_comm *zt_comm_nccl_group(const zt_backend *be, int color, int key, zt_err *err);

#ifdef __cplusplus
}
#endif

#endif
