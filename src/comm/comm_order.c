/* comm_order.c — the rule that a process's device comms run their collectives in one order
 * (zt_comm.order, comm.h). NCCL's documentation ("Using multiple NCCL communicators concurrently")
 * warns that collectives of two communicators in flight at once can hang when their kernels cannot
 * all be resident on the GPU, unless every rank issues them in one order on one stream; a process
 * with a data-parallel and a tensor-parallel device comm is exactly that case. The session checks
 * its comms here, so a comm table that queues collectives on a device queue of its own is stopped
 * on every backend, the simulated GPU included (test/t_tensor_parallel.py), not found as a hang on
 * two GPUs. */
#include "comm/comm.h"

int zt_comm_check_order(const zt_comm *a, const zt_comm *b, const char *what, zt_err *err) {
    /* a group of one rank (the local comm) has no collective in flight on any queue */
    if (!a || !b || a->order == b->order || a->world == 1 || b->world == 1) return 0;
    return zt_fail(err,
                   "the %s device comms (%s, %s) queue their collectives on different device queues, where they "
                   "could run at once and deadlock (NCCL: two communicators in flight together); every device comm "
                   "of a process must share one order",
                   what, a->name, b->name);
}
