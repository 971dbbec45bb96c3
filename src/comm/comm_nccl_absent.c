/* comm_nccl_absent.c — linked instead of cuda/comm_nccl.cu when the binary is built with CUDA=0.
 * The definitions are weak so that a build which links both (before the Makefile filters this file
 * out of CUDA=1 builds) still gets the real one from cuda/. */
#include "comm/comm_nccl.h"

__attribute__((weak)) zt_comm *zt_comm_nccl(const zt_backend *be, zt_err *err) {
    (void)be;
    zt_fail(err, "NCCL is not available: this zerotrain was built without the CUDA backend (make CUDA=0)");
    return NULL;
}

__attribute__((weak)) zt_comm *zt_comm_nccl_group(const zt_backend *be, int color, int key, zt_err *err) {
    if (zt_comm_costed_active()) return zt_comm_costed_open(1, 1, err); /* predict --ranks: NCCL, costed */
    return zt_comm_nccl(be, err);
}
