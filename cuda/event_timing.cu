/* event_timing.cu — the CUDA backend's work timed by the GPU itself, for the trace (backend.h's
 * device observer), only while one is set. Owns the CUDA events that mark each copy and each
 * kernel on its stream, the records waiting for their events, the anchor that puts GPU times on
 * the host's clock, and the hand-over of the finished records to device_observer.c's deferred
 * reports at each synchronize.
 *
 *   - Copies: an event before and one after the copy on its stream; the copy ran between them.
 *   - Kernels: one event after each launch on the compute stream (zt_cuda_after_launch). A kernel
 *     ends at its event; it started when the one before it ended, or when it was launched if the
 *     stream had run dry by then (the launch's host time: the stream cannot start it earlier). So
 *     the busy time is the GPU's own to the event's resolution (about 0.5 us), and a gap opens only
 *     where the host fell behind. Work that waits on another stream (wait_ahead) counts as busy.
 *   - Times: cudaEventElapsedTime from an anchor event, recorded on an idle stream of its own and
 *     taken at the midpoint of the host's times around it. The elapsed time is a float of ms, so
 *     the anchor is taken again at every synchronize that finds nothing in flight, keeping the
 *     offsets short (float's 24 bits are 1 us at 16 s).
 * Records are converted only once their end event has completed (cudaEventQuery), on the thread
 * that synchronizes; transfer()'s threads add theirs under the same lock. */
#include "cuda_common.cuh"

#include <pthread.h>
#include <vector>

extern "C" double zt_now(void);

namespace {
struct timed_record {
    int is_copy;
    zt_copy_kind kind;
    size_t bytes;
    int stream;
    cudaEvent_t ev0, ev1; /* ev0 is NULL for a kernel */
    double launched;      /* a kernel: the host's time right after its launch */
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
std::vector<timed_record> g_records;
std::vector<cudaEvent_t> g_free_events;
const zt_device_observer *g_for;  /* the observer the anchor was taken for */
cudaStream_t g_anchor_stream;
cudaEvent_t g_anchor;
double g_anchor_host;
double g_compute_end;             /* the end of the last kernel reported: the next one starts after it */
int g_in_flight;                  /* copies timed by transfer() not yet added to g_records */

cudaEvent_t take_event(void) { /* caller holds g_mu */
    if (!g_free_events.empty()) {
        cudaEvent_t e = g_free_events.back();
        g_free_events.pop_back();
        return e;
    }
    cudaEvent_t e;
    ZT_CUDA_CHECK(cudaEventCreate(&e)); /* timing enabled: the default */
    return e;
}

void take_anchor(void) { /* caller holds g_mu; nothing recorded against the old anchor is waiting */
    if (!g_anchor_stream) {
        ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&g_anchor_stream, cudaStreamNonBlocking));
        ZT_CUDA_CHECK(cudaEventCreate(&g_anchor));
    }
    double h0 = zt_now();
    ZT_CUDA_CHECK(cudaEventRecord(g_anchor, g_anchor_stream));
    ZT_CUDA_CHECK(cudaEventSynchronize(g_anchor));
    g_anchor_host = 0.5 * (h0 + zt_now());
}

double host_time(cudaEvent_t e) {
    float ms = 0;
    ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, g_anchor, e));
    return g_anchor_host + ms * 1e-3;
}

/* whether timing is on; takes the anchor the first time for a new observer (caller holds g_mu) */
bool timing_on(void) {
    const zt_device_observer *obs = zt_device_observer_now();
    if (!obs) return false;
    if (obs != g_for) {
        g_for = obs;
        g_compute_end = 0;
        take_anchor();
    }
    return true;
}
} // namespace

void zt_cu_timed_compute(void) {
    if (!zt_device_observer_now()) return; /* not tracing: one load per launch */
    pthread_mutex_lock(&g_mu);
    if (timing_on()) {
        timed_record r = {};
        r.ev1 = take_event();
        ZT_CUDA_CHECK(cudaEventRecord(r.ev1, g_zt.stream));
        r.launched = zt_now();
        g_records.push_back(r);
    }
    pthread_mutex_unlock(&g_mu);
}

int zt_cu_copy_begin(cudaStream_t s, cudaEvent_t *ev0) {
    *ev0 = NULL;
    if (!zt_device_observer_now()) return 0;
    pthread_mutex_lock(&g_mu);
    if (timing_on()) {
        *ev0 = take_event();
        g_in_flight++;
        ZT_CUDA_CHECK(cudaEventRecord(*ev0, s));
    }
    pthread_mutex_unlock(&g_mu);
    return *ev0 != NULL;
}

void zt_cu_copy_end(cudaStream_t s, cudaEvent_t ev0, zt_copy_kind kind, size_t bytes, int stream) {
    if (!ev0) return;
    pthread_mutex_lock(&g_mu);
    timed_record r = {};
    r.is_copy = kind != ZT_D2D; /* a D2D copy is the compute stream's work */
    r.kind = kind;
    r.bytes = bytes;
    r.stream = stream;
    r.ev0 = ev0;
    r.ev1 = take_event();
    ZT_CUDA_CHECK(cudaEventRecord(r.ev1, s));
    g_records.push_back(r);
    g_in_flight--;
    pthread_mutex_unlock(&g_mu);
}

void zt_cu_report_timed(void) {
    pthread_mutex_lock(&g_mu);
    std::vector<timed_record> waiting;
    for (const timed_record &r : g_records) {
        cudaError_t q = cudaEventQuery(r.ev1);
        if (q == cudaErrorNotReady) { /* a copy of transfer()'s threads still running */
            waiting.push_back(r);
            continue;
        }
        ZT_CUDA_CHECK(q);
        zt_device_item it = {};
        it.t1 = host_time(r.ev1);
        if (r.ev0) {
            it.t0 = host_time(r.ev0);
            it.is_copy = r.is_copy, it.kind = r.kind, it.bytes = r.bytes, it.stream = r.stream;
            g_free_events.push_back(r.ev0);
        } else { /* a kernel: from the later of the previous kernel's end and its launch */
            it.t0 = r.launched > g_compute_end ? r.launched : g_compute_end;
            if (it.t0 > it.t1) it.t0 = it.t1; /* ran dry, the launch's host time taken a little late */
            g_compute_end = it.t1;
        }
        g_free_events.push_back(r.ev1);
        if (it.t1 > it.t0 || it.is_copy) zt_device_defer(&it);
    }
    g_records.swap(waiting);
    if (g_records.empty() && !g_in_flight && g_for) take_anchor(); /* keeps the float offsets short */
    pthread_mutex_unlock(&g_mu);
    zt_device_report_deferred();
}
