/* comm_nccl_loader.c — ./zerotrain's way to the NCCL comm of cuda/ (comm_nccl.h): cuda/ is a library
 * that ./zerotrain loads when a command first asks for the GPU (backend/backend_cuda_loader.c); this
 * file defines zt_comm_nccl and zt_comm_nccl_group by looking them up in it. Where the library is
 * not loaded, NCCL is not available, with the loader's reason. Test programs link cuda/ directly
 * and never use this file. */
#include "comm/comm_nccl.h"

typedef zt_comm *(*nccl_fn)(const zt_backend *, zt_err *);
typedef zt_comm *(*nccl_group_fn)(const zt_backend *, int, int, zt_err *);

zt_comm *zt_comm_nccl(const zt_backend *be, zt_err *err) {
    const char *why = NULL;
    nccl_fn nccl;
    *(void **)&nccl = zt_cuda_library_symbol("zt_comm_nccl", &why);
    if (!nccl) {
        zt_fail(err, "NCCL is not available: %s", why);
        return NULL;
    }
    return nccl(be, err);
}

zt_comm *zt_comm_nccl_group(const zt_backend *be, int color, int key, zt_err *err) {
    if (zt_comm_costed_active()) return zt_comm_costed_open(1, 1, err); /* predict --ranks: NCCL, costed */
    const char *why = NULL;
    nccl_group_fn nccl_group;
    *(void **)&nccl_group = zt_cuda_library_symbol("zt_comm_nccl_group", &why);
    if (!nccl_group) {
        zt_fail(err, "NCCL is not available: %s", why);
        return NULL;
    }
    return nccl_group(be, color, key, err);
}
