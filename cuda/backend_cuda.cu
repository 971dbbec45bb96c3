/* backend_cuda.cu — the CUDA backend's entry point: picks the GPU, creates the streams (compute,
 * device-to-host, host-to-device) and the cuBLASLt handle, implements memory (cudaMalloc + zero,
 * pinned host memory, copies, transfers) and builds the two op tables of src/backend/backend.h, bf16 and
 * fp16, whose ops come from the two compilations of kernels.cu, gemm.cu and attention.cu.
 *
 * zt_backend_cuda() is safe to call on a machine without a GPU or driver: it returns NULL with the
 * reason in *why and never aborts. The first call decides (device = the node-local rank from
 * MPI_Comm_split_type, zt_node_local_rank, modulo the visible device count); later calls return
 * the same answer. The CUDA runtime's current device is per thread: the thread that made that first
 * call uses the chosen GPU, any other thread calls bind_thread (cudaSetDevice) before the table.
 *
 * Copies: H2D and D2H are synchronous from the host's point of view (the host buffer may be reused
 * or read as soon as copy() returns, like the CPU backend's memcpy); D2D is stream-ordered.
 * transfer() uses the D2H or H2D stream instead of the compute stream, so Twin-Flow's gradient and
 * parameter traffic neither waits for nor delays the device Adam queued on the compute stream. */
#include "cuda_common.cuh"
#include <cstring>

extern "C" {
}

zt_cuda_state g_zt;

static zt_backend g_backend[2]; /* [0] bf16, [1] fp16 */
static int g_init_state = 0; /* 0 = not tried, 1 = usable, -1 = not usable */
static char g_why[512];
static int g_device_count;

/* ---------------------------------------------------------------- errors */
void zt_cuda_fatal(const char *what, const char *detail, const char *file, int line) {
    fprintf(stderr, "zerotrain: error: CUDA: %s failed: %s (%s:%d)\n", what, detail, file, line);
    fflush(stderr);
    exit(1);
}

static void launch_errors(const char *what, const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && g_zt.debug_sync) e = cudaStreamSynchronize(g_zt.stream);
    if (e != cudaSuccess) zt_cuda_fatal(what, cudaGetErrorString(e), file, line);
}

void zt_cuda_after_launch(const char *what, const char *file, int line) {
    launch_errors(what, file, line);
    zt_cu_timed_compute(); /* with a trace: the kernel's end, on the compute stream */
}

/* after a queued host<->device copy: its errors, but no kernel mark (the copy has events of its own) */
#define ZT_COPY_CHECK(what) launch_errors((what), __FILE__, __LINE__)

extern "C" void zt_backend_cuda_plan_stats(long *cached, long *built, long *evicted) {
    *cached = *built = *evicted = 0;
    zt_cu_bf16::zt_cu_gemm_plan_stats(cached, built, evicted);
    zt_cu_f16::zt_cu_gemm_plan_stats(cached, built, evicted);
}

extern "C" void *zt_cuda_compute_stream(void) { return g_init_state == 1 ? (void *)g_zt.stream : NULL; }

/* ---------------------------------------------------------------- scratch */
static void *g_scratch[ZT_SCR_COUNT];
static size_t g_scratch_size[ZT_SCR_COUNT];
static void *g_hscratch[ZT_HSCR_COUNT];
static size_t g_hscratch_size[ZT_HSCR_COUNT];

void *zt_scratch(zt_scratch_slot slot, size_t bytes) {
    if (bytes <= g_scratch_size[slot]) return g_scratch[slot];
    size_t want = bytes + bytes / 4; /* grow with some headroom */
    want = (want + 255) & ~(size_t)255;
    if (g_scratch[slot]) {
        ZT_CUDA_CHECK(cudaStreamSynchronize(g_zt.stream)); /* pending kernels may still use it */
        ZT_CUDA_CHECK(cudaFree(g_scratch[slot]));
        g_scratch[slot] = NULL;
        g_scratch_size[slot] = 0;
    }
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, want);
    if (e != cudaSuccess) {
        size_t freeb = 0, total = 0;
        (void)cudaGetLastError();
        cudaMemGetInfo(&freeb, &total);
        fprintf(stderr,
                "zerotrain: error: CUDA: out of GPU memory for %.1f MiB of backend scratch (slot %d): %s "
                "(free %.1f MiB of %.1f MiB)\n",
                want / 1048576.0, (int)slot, cudaGetErrorString(e), freeb / 1048576.0, total / 1048576.0);
        exit(1);
    }
    g_scratch[slot] = p;
    g_scratch_size[slot] = want;
    return p;
}

void *zt_host_scratch(zt_host_slot slot, size_t bytes) {
    if (bytes <= g_hscratch_size[slot]) return g_hscratch[slot];
    size_t want = bytes + bytes / 4 + 64;
    if (g_hscratch[slot]) {
        ZT_CUDA_CHECK(cudaStreamSynchronize(g_zt.stream));
        ZT_CUDA_CHECK(cudaFreeHost(g_hscratch[slot]));
    }
    void *p = NULL;
    ZT_CUDA_CHECK(cudaHostAlloc(&p, want, cudaHostAllocDefault));
    g_hscratch[slot] = p;
    g_hscratch_size[slot] = want;
    return p;
}

/* ---------------------------------------------------------------- the trace's view (backend.h's observer)
 * Only while a trace is open. Every host<->device copy and every kernel is timed by CUDA events on
 * its stream (event_timing.cu) and reported after the fact, at synchronize(). Device memory in use
 * is what cudaMemGetInfo sees (the context included), reported at each alloc and free. */
extern "C" double zt_now(void);

static void observe_memory(void) {
    const zt_device_observer *obs = zt_device_observer_now();
    if (!obs || !obs->memory) return;
    size_t freeb = 0, total = 0;
    if (cudaMemGetInfo(&freeb, &total) == cudaSuccess) obs->memory(obs->ctx, total - freeb, zt_now());
}


/* ---------------------------------------------------------------- memory */
static void *cu_alloc(size_t bytes) {
    if (bytes == 0) bytes = 1; /* a valid, distinct pointer even for empty tensors */
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t freeb = 0, total = 0;
        (void)cudaGetLastError(); /* out-of-memory is not sticky: clear it */
        cudaMemGetInfo(&freeb, &total);
        fprintf(stderr, "zerotrain: cuda: cudaMalloc of %.1f MiB failed on GPU %d: %s (free %.1f MiB of %.1f MiB)\n",
                bytes / 1048576.0, g_zt.device, cudaGetErrorString(e), freeb / 1048576.0, total / 1048576.0);
        return NULL;
    }
    ZT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, g_zt.stream));
    ZT_CUDA_CHECK(cudaStreamSynchronize(g_zt.stream));
    observe_memory();
    return p;
}

static void cu_free(void *p) {
    if (!p) return;
    ZT_CUDA_CHECK(cudaStreamSynchronize(g_zt.stream)); /* it may still be in use by queued kernels */
    ZT_CUDA_CHECK(cudaFree(p));
    observe_memory();
}

static void *cu_host_alloc(size_t bytes) {
    if (bytes == 0) bytes = 1;
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr, "zerotrain: cuda: cudaHostAlloc (pinned) of %.1f MiB failed: %s\n", bytes / 1048576.0,
                cudaGetErrorString(e));
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void cu_host_free(void *p) {
    if (!p) return;
    ZT_CUDA_CHECK(cudaStreamSynchronize(g_zt.stream));
    ZT_CUDA_CHECK(cudaFreeHost(p));
}

static void cu_memset_zero(void *p, size_t bytes) {
    if (!bytes) return;
    ZT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, g_zt.stream));
    ZT_LAUNCH_CHECK("memset_zero");
}

static cudaMemcpyKind memcpy_kind(zt_copy_kind kind) {
    return kind == ZT_H2D ? cudaMemcpyHostToDevice : kind == ZT_D2H ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
}

/* a copy on stream s, bracketed by events when a trace is open (a D2D copy is the compute stream's
 * work: the kernel mark after it times it) */
static void timed_copy(void *dst, const void *src, size_t bytes, zt_copy_kind kind, cudaStream_t s, int stream) {
    cudaEvent_t ev0 = NULL;
    if (kind != ZT_D2D) zt_cu_copy_begin(s, &ev0);
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, memcpy_kind(kind), s));
    zt_cu_copy_end(s, ev0, kind, bytes, stream);
}

static void cu_copy(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (!bytes) return;
    timed_copy(dst, src, bytes, kind, g_zt.stream, ZT_STREAM_COMPUTE);
    if (kind != ZT_D2D) ZT_CUDA_CHECK(cudaStreamSynchronize(g_zt.stream));
    else ZT_LAUNCH_CHECK("copy D2D");
}

static void cu_copy_async(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (!bytes) return;
    timed_copy(dst, src, bytes, kind, g_zt.stream, ZT_STREAM_COMPUTE);
    if (kind != ZT_D2D) ZT_COPY_CHECK("copy async");
    else ZT_LAUNCH_CHECK("copy async D2D");
}

/* the side stream waits for the compute stream's work so far, then copies while compute goes on */
static void cu_copy_ahead(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (!bytes) return;
    ZT_CUDA_CHECK(cudaEventRecord(g_zt.ahead_from, g_zt.stream));
    ZT_CUDA_CHECK(cudaStreamWaitEvent(g_zt.ahead, g_zt.ahead_from, 0));
    timed_copy(dst, src, bytes, kind, g_zt.ahead, ZT_STREAM_AHEAD);
    ZT_COPY_CHECK("copy ahead");
}

/* the compute stream's later work waits for every copy ahead so far */
static void cu_wait_ahead(void) {
    ZT_CUDA_CHECK(cudaEventRecord(g_zt.ahead_done, g_zt.ahead));
    ZT_CUDA_CHECK(cudaStreamWaitEvent(g_zt.stream, g_zt.ahead_done, 0));
}

/* a thread's current device is GPU 0 until it sets one: without this, a rank on GPU 1 would make a
 * second context on GPU 0 from each of its Twin-Flow and calibration lanes */
static void cu_bind_thread(void) { ZT_CUDA_CHECK(cudaSetDevice(g_zt.device)); }

static void cu_transfer(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (!bytes) return;
    cu_bind_thread(); /* the entry other threads call: right even where a lane forgot bind_thread */
    cudaStream_t s = kind == ZT_H2D ? g_zt.h2d : kind == ZT_D2H ? g_zt.d2h : g_zt.stream;
    timed_copy(dst, src, bytes, kind, s, kind == ZT_H2D ? ZT_STREAM_H2D : ZT_STREAM_D2H);
    ZT_CUDA_CHECK(cudaStreamSynchronize(s));
}

/* mark k records event k % ZT_CU_MARKS on the compute stream. A wait on a mark whose event was recorded
 * again since (ZT_CU_MARKS marks later) waits for that later point: later than needed, never too early.
 * The events block the waiting thread instead of spinning on a core the CPU Adam could use. */
static unsigned long long cu_mark(void) {
    unsigned long long k = ++g_zt.marks_made;
    ZT_CUDA_CHECK(cudaEventRecord(g_zt.marks[k % ZT_CU_MARKS], g_zt.stream));
    return k;
}

static void cu_wait_mark(unsigned long long mark) {
    if (mark == 0) return;
    cu_bind_thread();
    ZT_CUDA_CHECK(cudaEventSynchronize(g_zt.marks[mark % ZT_CU_MARKS]));
}

/* the compute stream and copy_ahead's side stream (backend.h): wait_ahead orders device work only, so
 * the host may reuse a copy_ahead's host buffer only after this */
static void cu_synchronize(void) {
    ZT_CUDA_CHECK(cudaStreamSynchronize(g_zt.stream));
    ZT_CUDA_CHECK(cudaStreamSynchronize(g_zt.ahead));
    zt_cu_report_timed(); /* with a trace: the work timed by events since the last one */
}

static void cu_mem_info(size_t *free_bytes, size_t *total_bytes) {
    ZT_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

/* ---------------------------------------------------------------- device selection */
__global__ void zt_probe_kernel(int *p) {
    if (p) *p = 1;
}


static const char *count_error_text(cudaError_t e) {
    int drv = 0;
    cudaDriverGetVersion(&drv);
    (void)cudaGetLastError();
    switch (e) {
    case cudaErrorNoDevice:
        snprintf(g_why, sizeof g_why, "no CUDA-capable GPU is visible (CUDA_VISIBLE_DEVICES=%s)",
                 getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "<unset>");
        break;
    case cudaErrorInsufficientDriver:
        if (drv == 0)
            snprintf(g_why, sizeof g_why, "no NVIDIA driver found (libcuda.so could not be loaded)");
        else
            snprintf(g_why, sizeof g_why,
                     "the NVIDIA driver supports CUDA %d.%d but this binary was built with CUDA %d.%d: "
                     "update the driver",
                     drv / 1000, (drv % 1000) / 10, CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
        break;
    case cudaErrorSystemDriverMismatch:
        snprintf(g_why, sizeof g_why,
                 "the NVIDIA kernel module and user-space driver versions do not match (reboot or reinstall the driver)");
        break;
    case cudaErrorCompatNotSupportedOnDevice:
        snprintf(g_why, sizeof g_why, "the CUDA forward-compatibility driver does not support this GPU");
        break;
    default:
        snprintf(g_why, sizeof g_why, "cudaGetDeviceCount failed: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    }
    return g_why;
}

static cudaError_t create_mark_events(void) {
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < ZT_CU_MARKS && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&g_zt.marks[i], cudaEventDisableTiming | cudaEventBlockingSync);
    return e;
}

/* returns NULL on success or the reason */
static const char *init_device(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return count_error_text(e);
    if (count <= 0) {
        snprintf(g_why, sizeof g_why, "no CUDA-capable GPU found");
        return g_why;
    }
    int dev = zt_node_local_rank() % count; /* MPI's numbering of this machine's ranks (backend.h) */
    g_device_count = count;
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
        snprintf(g_why, sizeof g_why, "cudaGetDeviceProperties(%d) failed: %s", dev, cudaGetErrorString(e));
        return g_why;
    }
    if (prop.major < 8) {
        snprintf(g_why, sizeof g_why, "GPU %d (%s) has compute capability %d.%d; bf16 training needs 8.0 or newer",
                 dev, prop.name, prop.major, prop.minor);
        return g_why;
    }
    if ((e = cudaSetDevice(dev)) != cudaSuccess) {
        snprintf(g_why, sizeof g_why, "cudaSetDevice(%d) failed: %s", dev, cudaGetErrorString(e));
        return g_why;
    }
    g_zt.device = dev;
    g_zt.sm_count = prop.multiProcessorCount;
    if ((e = cudaStreamCreate(&g_zt.stream)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&g_zt.d2h, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&g_zt.h2d, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&g_zt.ahead, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&g_zt.ahead_from, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&g_zt.ahead_done, cudaEventDisableTiming)) != cudaSuccess ||
        (e = create_mark_events()) != cudaSuccess) {
        snprintf(g_why, sizeof g_why, "cannot create a CUDA stream or event on GPU %d (%s): %s", dev, prop.name,
                 cudaGetErrorString(e));
        return g_why;
    }
    /* the binary carries sm_80 and sm_90 code only: check a kernel actually loads on this GPU */
    zt_probe_kernel<<<1, 1, 0, g_zt.stream>>>(NULL);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaStreamSynchronize(g_zt.stream);
    if (e != cudaSuccess) {
        snprintf(g_why, sizeof g_why,
                 "cannot run kernels on GPU %d (%s, compute capability %d.%d): %s (this binary has code for sm_80 "
                 "and sm_90 only)",
                 dev, prop.name, prop.major, prop.minor, cudaGetErrorString(e));
        return g_why;
    }
    cublasStatus_t s = cublasLtCreate(&g_zt.lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(g_why, sizeof g_why, "cublasLtCreate failed: %s", cublasGetStatusString(s));
        return g_why;
    }
    g_zt.lt_workspace_size = (size_t)32 << 20;
    if ((e = cudaMalloc(&g_zt.lt_workspace, g_zt.lt_workspace_size)) != cudaSuccess) {
        snprintf(g_why, sizeof g_why, "cannot allocate the 32 MiB cuBLASLt workspace on GPU %d: %s", dev,
                 cudaGetErrorString(e));
        return g_why;
    }
    const char *dbg = getenv("ZT_CUDA_SYNC");
    g_zt.debug_sync = dbg && *dbg && strcmp(dbg, "0") != 0;
    return NULL;
}

static void fill_table(zt_backend *b, void (*fill_ops)(zt_backend *)) {
    memset(b, 0, sizeof *b);
    b->name = "cuda";
    b->device = g_zt.device;
    b->device_count = g_device_count;
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->host_alloc = cu_host_alloc;
    b->host_free = cu_host_free;
    b->memset_zero = cu_memset_zero;
    b->copy = cu_copy;
    b->copy_async = cu_copy_async;
    b->copy_ahead = cu_copy_ahead;
    b->wait_ahead = cu_wait_ahead;
    b->transfer = cu_transfer;
    b->mark = cu_mark;
    b->wait_mark = cu_wait_mark;
    b->synchronize = cu_synchronize;
    b->bind_thread = cu_bind_thread;
    b->mem_info = cu_mem_info;
    fill_ops(b);
}

extern "C" const zt_backend *zt_backend_cuda(zt_dtype dtype, const char **why) {
    if (g_init_state == 0) {
        const char *reason = init_device();
        if (reason) {
            (void)cudaGetLastError();
            g_init_state = -1;
        } else {
            fill_table(&g_backend[0], zt_cu_bf16::fill_ops);
            fill_table(&g_backend[1], zt_cu_f16::fill_ops);
            g_init_state = 1;
        }
    }
    if (g_init_state == 1) {
        if (why) *why = NULL;
        return &g_backend[dtype == ZT_F16 ? 1 : 0];
    }
    if (why) *why = g_why;
    return NULL;
}
