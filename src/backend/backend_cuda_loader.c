/* backend_cuda_loader.c — ./zerotrain's way to the CUDA backend: cuda/ is built into a library of its
 * own, libzerotrain-cuda.so beside the binary, loaded the first time a command asks for the GPU.
 * Why not link it: the CUDA runtime, cuBLAS and cuBLASLt mapped into every process cost each
 * command ~60 MiB and their start-up whether it used a GPU or not (`config`, `estimate`,
 * `tokenize`, every CPU run), and a binary linked with them did not start at all on a node without
 * CUDA's libraries. Now a CPU run never loads them, and a missing or unloadable library is the same
 * "no GPU, because ..." as a missing driver (device: auto goes on on the CPU).
 *
 * It defines the backend's entry points of cuda/ (backend.h) by looking them up in the library, and
 * hands comm_nccl_loader.c the library's NCCL entry points (zt_cuda_library_symbol), so that the
 * backend's floor includes nothing of comm's. The library is linked -Bsymbolic, so its own calls of these names stay
 * inside it, and the binary -rdynamic, so the library finds the rest of zerotrain (errors, the
 * watchdog, MPI) in the binary. Found at $ZEROTRAIN_CUDA_BACKEND when set, else beside the
 * executable (/proc/self/exe's folder). Test programs link cuda/ directly (Makefile) and never use
 * this file. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "util/util.h"

#define CUDA_LIB_NAME "libzerotrain-cuda.so"

typedef const zt_backend *(*backend_fn)(zt_dtype, const char **);
typedef void (*plan_stats_fn)(long *, long *, long *);

static struct {
    pthread_once_t once;
    backend_fn backend;
    void *handle;
    plan_stats_fn plan_stats;
    char why[PATH_MAX + 256]; /* why it is not loaded: the path and dlerror() */
} cuda_lib = {.once = PTHREAD_ONCE_INIT};

/* where the library is: $ZEROTRAIN_CUDA_BACKEND, or beside the executable */
static void library_path(char *path, size_t cap) {
    const char *env = getenv("ZEROTRAIN_CUDA_BACKEND");
    if (env && *env) {
        snprintf(path, cap, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    if (zt_exe_dir(exe, sizeof exe)) snprintf(path, cap, "%s", CUDA_LIB_NAME); /* the loader's search path */
    else snprintf(path, cap, "%s/%s", exe, CUDA_LIB_NAME);
}

static void load(void) {
    char path[PATH_MAX + sizeof CUDA_LIB_NAME];
    library_path(path, sizeof path);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(cuda_lib.why, sizeof cuda_lib.why, "the CUDA backend could not be loaded: %s", e ? e : path);
        return;
    }
    *(void **)&cuda_lib.backend = dlsym(lib, "zt_backend_cuda");
    *(void **)&cuda_lib.plan_stats = dlsym(lib, "zt_backend_cuda_plan_stats");
    /* comm_nccl_loader.c's two are looked up when asked for, but must be there all the same */
    if (!cuda_lib.backend || !dlsym(lib, "zt_comm_nccl") || !dlsym(lib, "zt_comm_nccl_group") || !cuda_lib.plan_stats) {
        snprintf(cuda_lib.why, sizeof cuda_lib.why, "%s is not zerotrain's CUDA backend (a symbol is missing)", path);
        cuda_lib.backend = NULL, cuda_lib.plan_stats = NULL;
        return;
    }
    cuda_lib.handle = lib;
}

static int loaded(void) {
    pthread_once(&cuda_lib.once, load);
    return cuda_lib.backend != NULL;
}

const zt_backend *zt_backend_cuda(zt_dtype dtype, const char **why) {
    if (!loaded()) {
        if (why) *why = cuda_lib.why;
        return NULL;
    }
    return cuda_lib.backend(dtype, why);
}

void zt_backend_cuda_plan_stats(long *cached, long *built, long *evicted) {
    if (!loaded()) {
        *cached = *built = *evicted = 0;
        return;
    }
    cuda_lib.plan_stats(cached, built, evicted);
}

void *zt_cuda_library_symbol(const char *name, const char **why) {
    if (!loaded()) {
        *why = cuda_lib.why;
        return NULL;
    }
    return dlsym(cuda_lib.handle, name);
}
