/* ops_ref.h — what the CPU backend's op tests share (test_ops.c, test_ops_llama.c): the backend under
 * test, a seeded generator, test buffers registered and freed at the end, normwise errors against
 * double-precision references, central finite differences, and the run-twice and thread-count checks. Each test program includes it once. */
#ifndef ZT_OPS_REF_H
#define ZT_OPS_REF_H

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"

static const zt_backend *be;

/* ------------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}
/* every test buffer is registered here and freed at the end (keeps sanitizer runs clean) */
static void *owned[4096];
static int n_owned, owned_is_be[4096];
static void *own(void *p, int from_be) {
    if (p && n_owned < 4096) owned_is_be[n_owned] = from_be, owned[n_owned++] = p;
    return p;
}
static void free_all(void) {
    while (n_owned--) owned_is_be[n_owned] ? be->free(owned[n_owned]) : free(owned[n_owned]);
}
static float *falloc(size_t n) { return own(be->alloc(n * sizeof(float) + 4), 1); }
static float *frand(size_t n, double scale) {
    float *p = falloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (float)(scale * urand());
    return p;
}
static double *dalloc(size_t n) { return own(calloc(n + 1, sizeof(double)), 0); }
static double *todouble(const float *x, size_t n) {
    double *d = dalloc(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static void fill(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}
/* max|got - want| / max|want|  (strided: rows of `cols` values every `ld`) */
static double relerr_ld(const float *got, const double *want, int rows, int cols, int ld_got, int ld_want) {
    double num = 0, den = 1e-30;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double g = got[(size_t)i * ld_got + j], w = want[(size_t)i * ld_want + j];
            double e = fabs(g - w);
            if (!(e <= num)) num = e; /* NaN propagates */
            if (fabs(w) > den) den = fabs(w);
        }
    return num / den;
}
static double relerr(const float *got, const double *want, size_t n) { return relerr_ld(got, want, 1, (int)n, 0, 0); }
/* (got - base) vs want: for accumulating outputs */
static double relerr_acc(const float *got, const float *base, const double *want, size_t n) {
    double *d = calloc(n + 1, sizeof(double)); /* temporary: not registered */
    for (size_t i = 0; i < n; i++) d[i] = (double)got[i] - (double)base[i];
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(d[i] - want[i]);
        if (!(e <= num)) num = e;
        if (fabs(want[i]) > den) den = fabs(want[i]);
    }
    free(d);
    return num / den;
}
static float *fcopy(const float *x, size_t n) {
    float *p = falloc(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}
static void check_err(double err, double tol, const char *name) {
    if (err <= tol) printf("  error %.2g (tolerance %.0g)\n", err, tol);
    CHECK(err <= tol, name, "normwise error %.3g > %.1g", err, tol);
}
#define CHECK_ERR(err, tol, name) check_err((err), (tol), (name))

#define TOL_FWD 1e-5
#define TOL_BWD 1e-4

/* central finite differences of loss(ctx) with respect to x[0..n) */
typedef double (*loss_fn)(void *ctx);
static void fd_grad(loss_fn f, void *ctx, double *x, size_t n, double *g) {
    for (size_t i = 0; i < n; i++) {
        double xi = x[i], h = 1e-5 * fmax(1.0, fabs(xi));
        x[i] = xi + h;
        double lp = f(ctx);
        x[i] = xi - h;
        double lm = f(ctx);
        x[i] = xi;
        g[i] = (lp - lm) / (2 * h);
    }
}
static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The determinism checks: each op `op` < nops, run by run(ctx, op, o) writing its outputs to o (at most
 * cap floats, returning how many), gives the same bits run twice with 2 OpenMP threads, and with 1
 * and 3; the check names end with tag (may be ""). Leaves 2 threads set. */
typedef size_t (*det_run_fn)(const void *ctx, int op, float *o);
static void det_check_ops(det_run_fn run, const void *ctx, int nops, const char *const *names, size_t cap,
                          const char *tag) {
    float *ref = falloc(cap), *again = falloc(cap);
    int threads[3] = {2, 1, 3};
    const char *on = *tag ? " on " : "";
    for (int op = 0; op < nops; op++) {
        char name[160];
        omp_set_num_threads(2);
        memset(ref, 0, cap * 4);
        size_t n = run(ctx, op, ref);
        memset(again, 0, cap * 4);
        run(ctx, op, again);
        snprintf(name, sizeof name, "deterministic: %s run twice bit-identical%s%s", names[op], on, tag);
        CHECK(memcmp(ref, again, n * 4) == 0, name, "outputs differ between two identical runs");
        int same = 1;
        for (int k = 1; k < 3; k++) {
            omp_set_num_threads(threads[k]);
            memset(again, 0, cap * 4);
            run(ctx, op, again);
            same &= memcmp(ref, again, n * 4) == 0;
        }
        snprintf(name, sizeof name, "thread-count independent: %s with 1, 2, 3 OpenMP threads%s%s", names[op], on, tag);
        CHECK(same, name, "outputs depend on the number of threads");
    }
    omp_set_num_threads(2);
}

#endif
