/* trace_nvml.c — see trace_nvml.h.
 *
 * The handful of NVML entry points used are looked up by name after dlopen; their types are the
 * C ABI of nvml.h (stable since NVML's v2 entry points), declared here so that building needs no
 * NVML header either. A sample whose calls fail (a GPU lost, a call the GPU does not support) is
 * written with what did succeed; a sample of nothing is skipped. */
#include "io/trace_nvml.h"
#include "util/clock.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvml_return; /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef void *nvml_device;
typedef struct { unsigned long long total, free, used; } nvml_memory;  /* nvmlMemory_t */
typedef struct { unsigned int gpu, memory; } nvml_utilization;          /* nvmlUtilization_t */
enum { NVML_PCIE_TX_BYTES = 0, NVML_PCIE_RX_BYTES = 1 };                /* nvmlPcieUtilCounter_t */

struct zt_nvml_sampler {
    void *lib;
    nvml_device dev;
    zt_trace *trace;
    int period_ms;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    nvml_return (*shutdown)(void);
    const char *(*error_string)(nvml_return);
    nvml_return (*pcie)(nvml_device, int, unsigned int *);
    nvml_return (*memory)(nvml_device, nvml_memory *);
    nvml_return (*utilization)(nvml_device, nvml_utilization *);
};

/* one sample into the trace: PCIe KB/s to bytes/s, memory in bytes, utilization in % */
static void sample(zt_nvml_sampler *s) {
    const char *keys[5];
    double vals[5];
    int n = 0;
    unsigned int kb = 0;
    if (s->pcie(s->dev, NVML_PCIE_RX_BYTES, &kb) == 0) keys[n] = "pcie rx (H2D) bytes/s", vals[n++] = kb * 1024.0;
    if (s->pcie(s->dev, NVML_PCIE_TX_BYTES, &kb) == 0) keys[n] = "pcie tx (D2H) bytes/s", vals[n++] = kb * 1024.0;
    nvml_memory m;
    if (s->memory(s->dev, &m) == 0) keys[n] = "memory used bytes", vals[n++] = (double)m.used;
    nvml_utilization u;
    if (s->utilization(s->dev, &u) == 0) {
        keys[n] = "gpu util %", vals[n++] = u.gpu;
        keys[n] = "memory util %", vals[n++] = u.memory;
    }
    if (n) zt_trace_counters(s->trace, "nvml", zt_clock_now(), n, keys, vals);
}

static void *sampler_thread(void *arg) {
    zt_nvml_sampler *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        pthread_mutex_unlock(&s->mu);
        sample(s);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long ns = until.tv_nsec + (long)s->period_ms % 1000 * 1000000L;
        until.tv_sec += s->period_ms / 1000 + ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        pthread_mutex_lock(&s->mu);
        while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &until) != ETIMEDOUT) {}
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The NVML handle of the GPU the CUDA backend picks for this rank (the node-local rank modulo the
 * GPUs it sees): CUDA_VISIBLE_DEVICES, which NVML ignores, lists those by NVML index or by UUID. */
static nvml_return device_for(void *lib, int local_rank, nvml_device *dev) {
    nvml_return (*count)(unsigned int *) = (nvml_return(*)(unsigned int *))dlsym(lib, "nvmlDeviceGetCount_v2");
    nvml_return (*by_index)(unsigned int, nvml_device *) =
        (nvml_return(*)(unsigned int, nvml_device *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml_return (*by_uuid)(const char *, nvml_device *) =
        (nvml_return(*)(const char *, nvml_device *))dlsym(lib, "nvmlDeviceGetHandleByUUID");
    if (!count || !by_index || !by_uuid) return -1;
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible && *visible) {
        char list[1024], *save = NULL, *items[64];
        int n = 0;
        snprintf(list, sizeof list, "%s", visible);
        for (char *tok = strtok_r(list, ",", &save); tok && n < 64; tok = strtok_r(NULL, ",", &save)) items[n++] = tok;
        if (n == 0) return -1;
        const char *pick = items[local_rank % n];
        return strncmp(pick, "GPU-", 4) == 0 ? by_uuid(pick, dev) : by_index((unsigned)atoi(pick), dev);
    }
    unsigned int n = 0;
    nvml_return rc = count(&n);
    if (rc) return rc;
    if (n == 0) return -1;
    return by_index((unsigned)local_rank % n, dev);
}

zt_nvml_sampler *zt_nvml_sampler_start(zt_trace *trace, int period_ms, int local_rank, zt_err *err) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        zt_fail(err, "cannot load libnvidia-ml.so.1 (%s)", dlerror());
        return NULL;
    }
    zt_nvml_sampler *s = zt_xcalloc(1, sizeof *s);
    s->lib = lib;
    s->trace = trace;
    s->period_ms = period_ms;
    nvml_return (*init)(void) = (nvml_return(*)(void))dlsym(lib, "nvmlInit_v2");
    s->shutdown = (nvml_return(*)(void))dlsym(lib, "nvmlShutdown");
    s->error_string = (const char *(*)(nvml_return))dlsym(lib, "nvmlErrorString");
    s->pcie = (nvml_return(*)(nvml_device, int, unsigned int *))dlsym(lib, "nvmlDeviceGetPcieThroughput");
    s->memory = (nvml_return(*)(nvml_device, nvml_memory *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
    s->utilization = (nvml_return(*)(nvml_device, nvml_utilization *))dlsym(lib, "nvmlDeviceGetUtilizationRates");
    nvml_return rc = -1;
    if (!init || !s->shutdown || !s->error_string || !s->pcie || !s->memory || !s->utilization) {
        zt_fail(err, "libnvidia-ml.so.1 lacks an entry point this sampler uses (an NVML older than v2)");
    } else if ((rc = init()) != 0) {
        zt_fail(err, "nvmlInit failed: %s", s->error_string(rc));
    } else if ((rc = device_for(lib, local_rank, &s->dev)) != 0) {
        zt_fail(err, "NVML has no GPU for node-local rank %d: %s", local_rank,
                rc > 0 ? s->error_string(rc) : "CUDA_VISIBLE_DEVICES names none, or NVML counts none");
        s->shutdown();
    } else {
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        if (pthread_create(&s->thread, NULL, sampler_thread, s) == 0) return s;
        zt_fail(err, "cannot start the NVML sampler's thread");
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        s->shutdown();
    }
    dlclose(lib);
    free(s);
    return NULL;
}

void zt_nvml_sampler_stop(zt_nvml_sampler *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    s->shutdown();
    dlclose(s->lib);
    free(s);
}
