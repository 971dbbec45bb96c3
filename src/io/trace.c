/* trace.c — see trace.h. Events are written as they arrive (stdio-buffered), one per line, so a
 * run that dies still leaves a readable prefix (Perfetto accepts a missing closing bracket). */
#include "io/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct zt_trace {
    FILE *f;
    char *path;
    int rank;
    double t0; /* zt_now() at open: trace time 0 */
    pthread_mutex_t mu;
};

static const char *const lane_names[] = {NULL, "main / device", "host adam", "D2H (gradients down)", "comm",
                                              "H2D (parameters up)"};

zt_trace *zt_trace_open(const char *path, int rank, zt_err *err) {
    size_t n = strlen(path);
    size_t cap = n + 32;
    char *full = zt_xmalloc(cap);
    if (n > 5 && !strcmp(path + n - 5, ".json")) snprintf(full, cap, "%.*s.rank%d.json", (int)(n - 5), path, rank);
    else snprintf(full, cap, "%s.rank%d.json", path, rank);
    FILE *f = fopen(full, "w");
    if (!f) {
        zt_fail(err, "%s: cannot open trace file for writing: %s", full, strerror(errno));
        free(full);
        return NULL;
    }
    zt_trace *t = zt_xcalloc(1, sizeof *t);
    t->f = f;
    t->path = full;
    t->rank = rank;
    t->t0 = zt_now();
    pthread_mutex_init(&t->mu, NULL);
    fprintf(f, "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}", rank, rank);
    for (int l = ZT_LANE_MAIN; l <= ZT_LANE_LAST; l++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", rank, l,
                lane_names[l]);
    return t;
}

void zt_trace_complete(zt_trace *t, int lane, const char *name, double t0, double t1) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    fprintf(t->f, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}", name, t->rank, lane,
            (t0 - t->t0) * 1e6, (t1 - t0) * 1e6);
    pthread_mutex_unlock(&t->mu);
}

void zt_trace_counter(zt_trace *t, const char *name, double ts, const char *k1, double v1, const char *k2, double v2) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    fprintf(t->f, ",\n{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{\"%s\":%.6g,\"%s\":%.6g}}",
            name, t->rank, (ts - t->t0) * 1e6, k1, v1, k2, v2);
    pthread_mutex_unlock(&t->mu);
}

int zt_trace_close(zt_trace *t, zt_err *err) {
    if (!t) return 0;
    fprintf(t->f, "\n]\n");
    int bad = ferror(t->f) | (fclose(t->f) != 0);
    int rc = bad ? zt_fail(err, "%s: error writing the trace", t->path) : 0;
    pthread_mutex_destroy(&t->mu);
    free(t->path);
    free(t);
    return rc;
}
