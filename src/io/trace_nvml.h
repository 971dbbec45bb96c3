/* trace_nvml.h — the GPU's own view beside the engine's: an optional sampler (config key
 * `trace_nvml_ms`, off by default) that reads NVML every N ms on a thread of its own and writes
 * what it read into the trace as one counter event, "nvml": the PCIe throughput each way
 * (nvmlDeviceGetPcieThroughput: NVML's own 20 ms average, in bytes/s), the device memory in use as
 * the driver sees it (every context on the GPU, not only this process's allocator) and the GPU and
 * memory-controller utilization (%). NVML is loaded at run time with dlopen("libnvidia-ml.so.1"),
 * never linked, so the binary runs where there is no NVIDIA driver. */
#ifndef ZT_TRACE_NVML_H
#define ZT_TRACE_NVML_H

#include "io/trace.h"

typedef struct zt_nvml_sampler zt_nvml_sampler;

/* Starts sampling the GPU this rank uses (the node-local rank modulo the visible GPUs, as the CUDA
 * backend picks it, CUDA_VISIBLE_DEVICES honoured) every period_ms into trace. NULL with the reason
 * in err ("cannot load libnvidia-ml.so.1: ...", "nvmlInit failed: ...") when NVML is not there; the
 * caller decides what that means for the run. */
zt_nvml_sampler *zt_nvml_sampler_start(zt_trace *trace, int period_ms, int local_rank, zt_err *err);
/* Stops the thread (at once, not at the next tick) and shuts NVML down; NULL does nothing. */
void zt_nvml_sampler_stop(zt_nvml_sampler *s);

#endif
