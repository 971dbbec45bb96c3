/* selftest_util.c — what the selftest's files share (selftest.h): the tally of checks (one PASS or
 * FAIL line each), the norm-wise relative error, and the buffers of a test: random host values
 * rounded to the 16-bit type under test, and their copies on a backend in its compute dtype or
 * fp32. The checks themselves are selftest_ops.c's (the op table), selftest.c's (training, comms). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "selftest/selftest.h"
#include "comm/comm.h"
#include "util/util.h"

void zt_selftest_check(zt_selftest *st, const char *name, double err, double tol) {
    const char *tag = st->tag ? st->tag : "";
    if (err <= tol) {
        if (st->verbose) printf("PASS %s%s (err %.2e <= tol %.1e)\n", tag, name, err, tol);
        st->passed++;
    } else {
        /* failures are printed by every rank, with its rank when there are several */
        if (zt_mpi_world_size() > 1)
            printf("FAIL [rank %d] %s%s: err %.3e > tol %.1e\n", zt_mpi_world_rank(), tag, name, err, tol);
        else printf("FAIL %s%s: err %.3e > tol %.1e\n", tag, name, err, tol);
        st->failed++;
    }
    fflush(stdout);
}

double zt_selftest_rel_err(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (num == 0.0) return 0.0;
    return sqrt(num) / (den > 0.0 ? sqrt(den) : 1e-30);
}

/* The 16-bit type inputs are rounded to (bf16, or fp16 when that table is under test), so both
 * backends start from the same numbers; set by zt_selftest_ops. */
static zt_dtype g_input_dtype = ZT_BF16;
void st_set_input_dtype(zt_dtype dtype) { g_input_dtype = dtype; }
float st_round_input(float x) {
    if (g_input_dtype == ZT_F16) return zt_f16_bits_to_f32(zt_f32_to_f16_bits(x));
    return zt_bf16_bits_to_f32(zt_f32_to_bf16_bits(x));
}

/* n normal(0, scale) + offset values, rounded to the input dtype */
float *st_rnd(zt_rng *rng, size_t n, float scale, float offset) {
    float *h = zt_xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = st_round_input(offset + scale * zt_rng_normal(rng));
    return h;
}
float *st_zeros(size_t n) { return zt_xcalloc(n ? n : 1, sizeof(float)); }

void *st_alloc(const zt_backend *be, size_t bytes) {
    void *p = be->alloc(bytes);
    if (!p) {
        fprintf(stderr, "selftest: %s backend: alloc of %zu bytes failed\n", be->name, bytes);
        exit(1);
    }
    return p;
}
/* host fp32 -> device tensor in the backend's compute dtype */
void *st_up_c(const zt_backend *be, const float *h, size_t n) {
    void *d = st_alloc(be, n * zt_dtype_size(be->compute_dtype));
    if (be->compute_dtype == ZT_F32) {
        be->copy(d, h, n * sizeof(float), ZT_H2D);
    } else {
        float *t = st_alloc(be, n * sizeof(float));
        be->copy(t, h, n * sizeof(float), ZT_H2D);
        be->to_compute(d, t, n);
        be->synchronize();
        be->free(t);
    }
    return d;
}
void st_down_c(const zt_backend *be, float *h, const void *d, size_t n) {
    if (be->compute_dtype == ZT_F32) {
        be->copy(h, d, n * sizeof(float), ZT_D2H);
    } else {
        float *t = st_alloc(be, n * sizeof(float));
        be->to_f32(t, d, n);
        be->copy(h, t, n * sizeof(float), ZT_D2H);
        be->free(t);
    }
}
float *st_up_f(const zt_backend *be, const float *h, size_t n) {
    float *d = st_alloc(be, n * sizeof(float));
    be->copy(d, h, n * sizeof(float), ZT_H2D);
    return d;
}
void st_down_f(const zt_backend *be, float *h, const float *d, size_t n) {
    be->copy(h, d, n * sizeof(float), ZT_D2H);
}
int *st_up_i(const zt_backend *be, const int *h, size_t n) {
    int *d = st_alloc(be, n * sizeof(int));
    be->copy(d, h, n * sizeof(int), ZT_H2D);
    return d;
}
size_t st_count_diff(const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return k;
}
