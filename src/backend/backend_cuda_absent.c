/* backend_cuda_absent.c — linked instead of cuda/ when the binary is built with CUDA=0. */
#include "backend/backend.h"

const zt_backend *zt_backend_cuda(zt_dtype dtype, const char **why) {
    (void)dtype;
    if (why) *why = "this zerotrain was built without the CUDA backend (make CUDA=0)";
    return 0;
}

void zt_backend_cuda_plan_stats(long *cached, long *built, long *evicted) { *cached = *built = *evicted = 0; }
