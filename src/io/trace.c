/* trace.c — see trace.h.
 *
 * Robust to a killed run: every event is formatted whole into a local buffer and handed to the
 * kernel with one write(2) under the lock, so the file only ever ends after a complete event
 * (",\n{...}"). The Trace Event Format's array form allows the closing "]" to be missing, and
 * Perfetto and chrome://tracing read such a file as it is; a JSON parser reads it after appending
 * "]". Only complete ("X") and counter ("C") events are written, never begin/end pairs, so no
 * event is left open either.
 *
 * One time base for every rank: "ts" is microseconds since the Unix epoch. Event times come from
 * zt_clock_now() (the run's clock, util/clock.h: monotonic wall time, or the simulated GPU's virtual
 * time under a hardware profile); each rank converts them with the
 * offset between CLOCK_REALTIME and CLOCK_MONOTONIC taken when it opens its trace. Ranks on one
 * machine then agree to within microseconds, ranks on several machines as well as their clocks
 * do (NTP), and the per-rank files can simply be concatenated into one trace. */
#include "io/trace.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct zt_trace {
    int fd;
    char *path;
    int rank;
    double to_unix; /* zt_unix_time() - zt_clock_now() at open: adds to a zt_clock_now() time to give Unix time */
    int write_failed;
    int write_errno; /* the first failed write's reason (ENOSPC on a full disk); 0 = a cut event */
    pthread_mutex_t mu;
    unsigned dev_named; /* device lanes whose thread_name is written (zt_trace_device) */
    int nvme_named;     /* the NVMe lane's thread_name is written (zt_trace_nvme) */
    double busy0[ZT_LANE_LAST + 1], busy1[ZT_LANE_LAST + 1]; /* a busy interval held per lane; busy1 0 = none */
};

static const char *const lane_names[] = {NULL, "main / device", "host adam", "D2H (gradients down)", "comm",
                                         "H2D (parameters up)", "steps", "device compute busy",
                                         "copies: compute stream", "copies: H2D stream", "copies: D2H stream",
                                         "copies: ahead stream"};
_Static_assert(sizeof lane_names / sizeof lane_names[0] == ZT_LANE_ADAM_THREAD, "a name per lane below the threads'");

/* Appends one formatted event to the file in a single write (caller holds the lock or is alone). */
static void emit(zt_trace *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(zt_trace *t, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (t->write_failed) return; /* the run stops on the first failure (zt_trace_check): nothing after it */
    if (n < 0 || (size_t)n >= sizeof buf) { t->write_failed = 1; return; } /* names are short constants */
    for (size_t done = 0; done < (size_t)n;) {
        ssize_t k = write(t->fd, buf + done, (size_t)n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            t->write_failed = 1;
            t->write_errno = k < 0 ? errno : ENOSPC; /* a write of 0 bytes: the file system is full */
            return;
        }
        done += (size_t)k;
    }
}

static double ts_us(const zt_trace *t, double now) { return (now + t->to_unix) * 1e6; }

zt_trace *zt_trace_open(const char *path, int rank, zt_err *err) {
    size_t n = strlen(path);
    size_t cap = n + 32;
    char *full = zt_xmalloc(cap);
    if (n > 5 && !strcmp(path + n - 5, ".json")) snprintf(full, cap, "%.*s.rank%d.json", (int)(n - 5), path, rank);
    else snprintf(full, cap, "%s.rank%d.json", path, rank);
    if (zt_mkdir_parent(full, err)) {
        free(full);
        return NULL;
    }
    int fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        zt_fail(err, "%s: cannot open trace file for writing: %s", full, strerror(errno));
        free(full);
        return NULL;
    }
    zt_trace *t = zt_xcalloc(1, sizeof *t);
    t->fd = fd;
    t->path = full;
    t->rank = rank;
    t->to_unix = zt_unix_time() - zt_clock_now();
    pthread_mutex_init(&t->mu, NULL);
    emit(t, "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}", rank, rank);
    emit(t, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}", rank,
         rank);
    for (int l = ZT_LANE_MAIN; l <= ZT_LANE_LAST; l++) {
        char name[48];
        if (l < ZT_LANE_ADAM_THREAD) snprintf(name, sizeof name, "%s", lane_names[l]);
        else snprintf(name, sizeof name, "host adam thread %d%s", l - ZT_LANE_ADAM_THREAD, l == ZT_LANE_LAST ? "+" : "");
        emit(t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", rank, l,
             name);
    }
    /* what a reader needs to know of this trace's resolution */
    emit(t, ",\n{\"name\":\"zerotrain\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"busy_merge_us\":%.1f}}",
         rank, ZT_TRACE_BUSY_MERGE_S * 1e6);
    return t;
}

void zt_trace_complete_args(zt_trace *t, int lane, const char *name, double t0, double t1, const char *args) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    emit(t, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{%s}}", name,
         t->rank, lane, ts_us(t, t0), (t1 - t0) * 1e6, args);
    pthread_mutex_unlock(&t->mu);
}

void zt_trace_transfer(zt_trace *t, int kind, size_t bytes, int stream, double t0, double t1) {
    if (!t || stream < 0 || ZT_LANE_STREAM + stream > ZT_LANE_LAST) return;
    pthread_mutex_lock(&t->mu);
    emit(t, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"bytes\":%zu}}",
         kind == 0 ? "H2D" : "D2H", t->rank, ZT_LANE_STREAM + stream, ts_us(t, t0), (t1 - t0) * 1e6, bytes);
    pthread_mutex_unlock(&t->mu);
}

void zt_trace_nvme(zt_trace *t, int write, size_t bytes, double t0, double t1) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    if (!t->nvme_named) { /* only runs with a swap file get the lane */
        t->nvme_named = 1;
        emit(t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"NVMe swap I/O\"}}",
             t->rank, ZT_LANE_NVME);
    }
    emit(t, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"bytes\":%zu}}",
         write ? "nvme write" : "nvme read", t->rank, ZT_LANE_NVME, ts_us(t, t0), (t1 - t0) * 1e6, bytes);
    pthread_mutex_unlock(&t->mu);
}

/* writes lane's held busy interval (caller holds the lock) */
static void emit_busy(zt_trace *t, int lane) {
    if (t->busy1[lane] <= 0) return;
    emit(t, ",\n{\"name\":\"busy\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}", t->rank, lane,
         ts_us(t, t->busy0[lane]), (t->busy1[lane] - t->busy0[lane]) * 1e6);
    t->busy1[lane] = 0;
}

void zt_trace_busy(zt_trace *t, int lane, double t0, double t1) {
    if (!t || lane < 1 || lane > ZT_LANE_LAST) return;
    pthread_mutex_lock(&t->mu);
    if (t->busy1[lane] > 0 && t0 - t->busy1[lane] < ZT_TRACE_BUSY_MERGE_S) {
        if (t1 > t->busy1[lane]) t->busy1[lane] = t1;
    } else {
        emit_busy(t, lane);
        t->busy0[lane] = t0;
        t->busy1[lane] = t1;
    }
    pthread_mutex_unlock(&t->mu);
}

void zt_trace_flush(zt_trace *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    for (int l = 1; l <= ZT_LANE_LAST; l++) emit_busy(t, l);
    pthread_mutex_unlock(&t->mu);
}

void zt_trace_counters(zt_trace *t, const char *name, double ts, int n, const char *const *keys, const double *vals) {
    if (!t || n < 1 || n > 8) return;
    char args[512];
    size_t k = 0;
    for (int i = 0; i < n && k < sizeof args; i++)
        k += (size_t)snprintf(args + k, sizeof args - k, "%s\"%s\":%.15g", i ? "," : "", keys[i], vals[i]);
    pthread_mutex_lock(&t->mu);
    emit(t, ",\n{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{%s}}", name, t->rank,
         ts_us(t, ts), args);
    pthread_mutex_unlock(&t->mu);
}

void zt_trace_complete(zt_trace *t, int lane, const char *name, double t0, double t1) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    emit(t, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}", name, t->rank, lane,
         ts_us(t, t0), (t1 - t0) * 1e6);
    pthread_mutex_unlock(&t->mu);
}

void zt_trace_device(zt_trace *t, int dev_lane, const char *lane_name, const char *name, double t0, double t1) {
    if (!t || dev_lane < 0 || dev_lane >= 8) return;
    int tid = ZT_LANE_LAST + 1 + dev_lane;
    pthread_mutex_lock(&t->mu);
    if (!(t->dev_named & (1u << dev_lane))) {
        t->dev_named |= 1u << dev_lane;
        emit(t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"GPU %s\"}}", t->rank,
             tid, lane_name);
    }
    emit(t, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}", name, t->rank, tid,
         ts_us(t, t0), (t1 - t0) * 1e6);
    pthread_mutex_unlock(&t->mu);
}

void zt_trace_counter(zt_trace *t, const char *name, double ts, const char *k1, double v1, const char *k2, double v2) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    emit(t, ",\n{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{\"%s\":%.6g,\"%s\":%.6g}}", name,
         t->rank, ts_us(t, ts), k1, v1, k2, v2);
    pthread_mutex_unlock(&t->mu);
}

int zt_trace_check(zt_trace *t, zt_err *err) {
    if (!t) return 0;
    pthread_mutex_lock(&t->mu);
    int failed = t->write_failed, e = t->write_errno;
    pthread_mutex_unlock(&t->mu);
    if (!failed) return 0;
    return zt_fail(err, "%s: cannot write the trace: %s", t->path, e ? strerror(e) : "event too long");
}

int zt_trace_close(zt_trace *t, zt_err *err) {
    if (!t) return 0;
    zt_trace_flush(t);
    emit(t, "\n]\n");
    int bad = t->write_failed | (close(t->fd) != 0);
    int rc = bad ? zt_fail(err, "%s: error writing the trace", t->path) : 0;
    pthread_mutex_destroy(&t->mu);
    free(t->path);
    free(t);
    return rc;
}
