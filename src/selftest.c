/* selftest.c — `zerotrain selftest [--device cuda|cpu] [--seed N] [--allow-skip]`: runs every op of
 * the backend op table on random inputs on the CPU reference backend (fp32) and on the device
 * backend (bf16 on GPUs), and compares them. Uses the op table only, so it builds without CUDA.
 *
 * Inputs are rounded to bf16 before use, so both backends start from identical numbers and the
 * differences measure only the device's own rounding. Errors are norm-wise relative,
 * err = ||dev - ref|| / ||ref||, against these tolerances:
 *   TOL_ROUND 4e-3  one bf16 rounding of an fp32-exact result: bf16 keeps 8 significant bits, so
 *                   round-to-nearest is off by at most 2^-9 ~ 2e-3 relative per element; 2^-8
 *                   leaves room for fp32 reordering (elementwise ops, embedding forward).
 *   TOL_BF16  1e-2  outputs built from reductions (LayerNorm, GEMMs with K-term fp32 accumulation
 *                   whose result is rounded once, softmax + cross-entropy gradients, column sums):
 *                   still one final rounding, plus fp32 summation-order noise on cancelling sums.
 *   TOL_ATTN  2e-2  attention backward compounds three bf16 roundings (att, dS = d softmax, then
 *                   dq/dk/dv from GEMMs over dS), each ~2^-9.
 *   TOL_F32   1e-5  fp32 outputs from the same inputs with fp32 math (LayerNorm mean/rstd, losses,
 *                   AdamW master/m/v): only operation order and FMA contraction differ (~1e-7).
 *   sumsq     1e-6  relative, double accumulation of squares that are exact in fp32.
 * Conversions (to_compute / to_f32) must match round-to-nearest-even bit for bit, and the ops
 * documented as deterministic must give bitwise identical results when run twice. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "commands.h"
#include "selftest.h"
#include "util.h"

#define TOL_ROUND 4e-3
#define TOL_BF16 1e-2
#define TOL_ATTN 2e-2
#define TOL_F32 1e-5

/* ---------------------------------------------------------------- helpers */
void zt_selftest_check(zt_selftest *st, const char *name, double err, double tol) {
    if (err <= tol) {
        printf("PASS %s (err %.2e <= tol %.1e)\n", name, err, tol);
        st->passed++;
    } else {
        printf("FAIL %s: err %.3e > tol %.1e\n", name, err, tol);
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

static float bf16r(float x) { return zt_bf16_bits_to_f32(zt_f32_to_bf16_bits(x)); }

/* n normal(0, scale) + offset values, rounded to bf16 */
static float *rnd(zt_rng *rng, size_t n, float scale, float offset) {
    float *h = zt_xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = bf16r(offset + scale * zt_rng_normal(rng));
    return h;
}
static float *zeros(size_t n) { return zt_xcalloc(n ? n : 1, sizeof(float)); }

static void *st_alloc(const zt_backend *be, size_t bytes) {
    void *p = be->alloc(bytes);
    if (!p) {
        fprintf(stderr, "selftest: %s backend: alloc of %zu bytes failed\n", be->name, bytes);
        exit(1);
    }
    return p;
}
/* host fp32 -> device tensor in the backend's compute dtype */
static void *up_c(const zt_backend *be, const float *h, size_t n) {
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
static void down_c(const zt_backend *be, float *h, const void *d, size_t n) {
    if (be->compute_dtype == ZT_F32) {
        be->copy(h, d, n * sizeof(float), ZT_D2H);
    } else {
        float *t = st_alloc(be, n * sizeof(float));
        be->to_f32(t, d, n);
        be->copy(h, t, n * sizeof(float), ZT_D2H);
        be->free(t);
    }
}
static float *up_f(const zt_backend *be, const float *h, size_t n) {
    float *d = st_alloc(be, n * sizeof(float));
    be->copy(d, h, n * sizeof(float), ZT_H2D);
    return d;
}
static void down_f(const zt_backend *be, float *h, const float *d, size_t n) {
    be->copy(h, d, n * sizeof(float), ZT_D2H);
}
static int *up_i(const zt_backend *be, const int *h, size_t n) {
    int *d = st_alloc(be, n * sizeof(int));
    be->copy(d, h, n * sizeof(int), ZT_H2D);
    return d;
}
static size_t count_diff(const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return k;
}
static void check_rel(zt_selftest *st, const char *name, const float *dev, const float *ref, size_t n, double tol) {
    zt_selftest_check(st, name, zt_selftest_rel_err(dev, ref, n), tol);
}

/* ---------------------------------------------------------------- conversions */
static void test_conversions(zt_selftest *st, zt_rng *rng) {
    const zt_backend *be = st->dev;
    size_t n = 4099;
    float *h = zt_xmalloc(n * sizeof(float)), *back = zeros(n), *want = zeros(n);
    for (size_t i = 0; i < n; i++) h[i] = zt_rng_normal(rng) * 3.0f;
    /* exact ties: must round to even */
    union { unsigned u; float f; } t;
    t.u = 0x3f808000u; h[0] = t.f; /* 1.00390625: tie, rounds down to even 1.0 */
    t.u = 0x3f818000u; h[1] = t.f; /* tie, rounds up to even */
    t.u = 0xbf808000u; h[2] = t.f;
    h[3] = 0.0f, h[4] = -0.0f, h[5] = 1e-40f /* subnormal */, h[6] = 3.0e38f, h[7] = -65504.0f;
    for (size_t i = 0; i < n; i++) want[i] = bf16r(h[i]);
    void *d = up_c(be, h, n);
    down_c(be, back, d, n);
    double err = be->compute_dtype == ZT_F32 ? (double)count_diff(back, h, n) : (double)count_diff(back, want, n);
    zt_selftest_check(st, "to_compute+to_f32 (bitwise round-to-nearest-even, mismatches)", err, 0);
    be->free(d);
    free(h), free(back), free(want);
}

/* ---------------------------------------------------------------- embedding */
static void run_embedding(const zt_backend *be, const int *tok, const float *wte, const float *wpe, const float *dout,
                          const float *dwte0, const float *dwpe0, int V, int B, int T, int C, float *out, float *dwte,
                          float *dwpe) {
    size_t BTC = (size_t)B * T * C;
    int *dtok = up_i(be, tok, (size_t)B * T);
    void *dwte_w = up_c(be, wte, (size_t)V * C), *dwpe_w = up_c(be, wpe, (size_t)T * C);
    void *dout_d = up_c(be, dout, BTC), *o = st_alloc(be, BTC * zt_dtype_size(be->compute_dtype));
    void *gwte = up_c(be, dwte0, (size_t)V * C), *gwpe = up_c(be, dwpe0, (size_t)T * C);
    be->embedding_forward(o, dtok, dwte_w, dwpe_w, B, T, C);
    be->embedding_backward(gwte, gwpe, dout_d, dtok, B, T, C);
    down_c(be, out, o, BTC);
    down_c(be, dwte, gwte, (size_t)V * C);
    down_c(be, dwpe, gwpe, (size_t)T * C);
    be->free(dtok), be->free(dwte_w), be->free(dwpe_w), be->free(dout_d), be->free(o), be->free(gwte), be->free(gwpe);
}
static void test_embedding(zt_selftest *st, zt_rng *rng) {
    int V = 50, B = 3, T = 40, C = 300; /* few tokens: many repeats; C > 256 spans two blocks */
    size_t BTC = (size_t)B * T * C;
    int *tok = zt_xmalloc((size_t)B * T * sizeof(int));
    for (int i = 0; i < B * T; i++) tok[i] = (int)(zt_rng_u64(rng) % (uint64_t)V);
    float *wte = rnd(rng, (size_t)V * C, 0.5f, 0), *wpe = rnd(rng, (size_t)T * C, 0.5f, 0), *dout = rnd(rng, BTC, 1, 0);
    float *dwte0 = rnd(rng, (size_t)V * C, 0.2f, 0), *dwpe0 = rnd(rng, (size_t)T * C, 0.2f, 0);
    float *o[3], *gte[3], *gpe[3];
    for (int k = 0; k < 3; k++) o[k] = zeros(BTC), gte[k] = zeros((size_t)V * C), gpe[k] = zeros((size_t)T * C);
    run_embedding(st->ref, tok, wte, wpe, dout, dwte0, dwpe0, V, B, T, C, o[0], gte[0], gpe[0]);
    run_embedding(st->dev, tok, wte, wpe, dout, dwte0, dwpe0, V, B, T, C, o[1], gte[1], gpe[1]);
    run_embedding(st->dev, tok, wte, wpe, dout, dwte0, dwpe0, V, B, T, C, o[2], gte[2], gpe[2]);
    check_rel(st, "embedding_forward", o[1], o[0], BTC, TOL_ROUND);
    check_rel(st, "embedding_backward(dwte)", gte[1], gte[0], (size_t)V * C, TOL_BF16);
    check_rel(st, "embedding_backward(dwpe)", gpe[1], gpe[0], (size_t)T * C, TOL_BF16);
    zt_selftest_check(st, "embedding_backward(deterministic, mismatches)",
                      (double)(count_diff(gte[1], gte[2], (size_t)V * C) + count_diff(gpe[1], gpe[2], (size_t)T * C)),
                      0);
    for (int k = 0; k < 3; k++) free(o[k]), free(gte[k]), free(gpe[k]);
    free(tok), free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0);
}

/* ---------------------------------------------------------------- layernorm */
static void run_ln_fwd(const zt_backend *be, const float *x, const float *w, const float *b, int N, int C, float *out,
                       float *mean, float *rstd) {
    size_t NC = (size_t)N * C;
    void *dx = up_c(be, x, NC), *dw = up_c(be, w, C), *db = up_c(be, b, C);
    void *o = st_alloc(be, NC * zt_dtype_size(be->compute_dtype));
    float *m = st_alloc(be, N * sizeof(float)), *r = st_alloc(be, N * sizeof(float));
    be->layernorm_forward(o, m, r, dx, dw, db, N, C);
    down_c(be, out, o, NC);
    down_f(be, mean, m, N);
    down_f(be, rstd, r, N);
    be->free(dx), be->free(dw), be->free(db), be->free(o), be->free(m), be->free(r);
}
static void run_ln_bwd(const zt_backend *be, const float *x, const float *w, const float *mean, const float *rstd,
                       const float *dout, const float *dinp0, const float *dw0, const float *db0, int N, int C,
                       float *dinp, float *dw, float *db) {
    size_t NC = (size_t)N * C;
    void *dx = up_c(be, x, NC), *dwt = up_c(be, w, C), *ddout = up_c(be, dout, NC);
    float *m = up_f(be, mean, N), *r = up_f(be, rstd, N);
    void *gi = up_c(be, dinp0, NC), *gw = up_c(be, dw0, C), *gb = up_c(be, db0, C);
    be->layernorm_backward(gi, gw, gb, ddout, dx, dwt, m, r, N, C);
    down_c(be, dinp, gi, NC);
    down_c(be, dw, gw, C);
    down_c(be, db, gb, C);
    be->free(dx), be->free(dwt), be->free(ddout), be->free(m), be->free(r), be->free(gi), be->free(gw), be->free(gb);
}
static void test_layernorm(zt_selftest *st, zt_rng *rng, int N, int C) {
    char name[128];
    size_t NC = (size_t)N * C;
    float *x = rnd(rng, NC, 2.0f, 1.0f), *w = rnd(rng, C, 0.1f, 1.0f), *b = rnd(rng, C, 0.1f, 0);
    float *out[2], *mean[2], *rstd[2];
    for (int k = 0; k < 2; k++) out[k] = zeros(NC), mean[k] = zeros(N), rstd[k] = zeros(N);
    run_ln_fwd(st->ref, x, w, b, N, C, out[0], mean[0], rstd[0]);
    run_ln_fwd(st->dev, x, w, b, N, C, out[1], mean[1], rstd[1]);
    snprintf(name, sizeof name, "layernorm_forward(out) N=%d C=%d", N, C);
    check_rel(st, name, out[1], out[0], NC, TOL_BF16);
    snprintf(name, sizeof name, "layernorm_forward(mean) N=%d C=%d", N, C);
    check_rel(st, name, mean[1], mean[0], N, TOL_F32);
    snprintf(name, sizeof name, "layernorm_forward(rstd) N=%d C=%d", N, C);
    check_rel(st, name, rstd[1], rstd[0], N, TOL_F32);

    /* backward from the reference's mean/rstd, so both start from the same statistics */
    float *dout = rnd(rng, NC, 1, 0), *dinp0 = rnd(rng, NC, 0.5f, 0), *dw0 = rnd(rng, C, 0.5f, 0);
    float *db0 = rnd(rng, C, 0.5f, 0);
    float *gi[3], *gw[3], *gb[3];
    for (int k = 0; k < 3; k++) gi[k] = zeros(NC), gw[k] = zeros(C), gb[k] = zeros(C);
    run_ln_bwd(st->ref, x, w, mean[0], rstd[0], dout, dinp0, dw0, db0, N, C, gi[0], gw[0], gb[0]);
    run_ln_bwd(st->dev, x, w, mean[0], rstd[0], dout, dinp0, dw0, db0, N, C, gi[1], gw[1], gb[1]);
    run_ln_bwd(st->dev, x, w, mean[0], rstd[0], dout, dinp0, dw0, db0, N, C, gi[2], gw[2], gb[2]);
    snprintf(name, sizeof name, "layernorm_backward(dinp) N=%d C=%d", N, C);
    check_rel(st, name, gi[1], gi[0], NC, TOL_BF16);
    snprintf(name, sizeof name, "layernorm_backward(dw) N=%d C=%d", N, C);
    check_rel(st, name, gw[1], gw[0], C, TOL_BF16);
    snprintf(name, sizeof name, "layernorm_backward(db) N=%d C=%d", N, C);
    check_rel(st, name, gb[1], gb[0], C, TOL_BF16);
    snprintf(name, sizeof name, "layernorm_backward(deterministic, mismatches) N=%d C=%d", N, C);
    zt_selftest_check(st, name,
                      (double)(count_diff(gi[1], gi[2], NC) + count_diff(gw[1], gw[2], C) + count_diff(gb[1], gb[2], C)),
                      0);
    for (int k = 0; k < 3; k++) free(gi[k]), free(gw[k]), free(gb[k]);
    for (int k = 0; k < 2; k++) free(out[k]), free(mean[k]), free(rstd[k]);
    free(x), free(w), free(b), free(dout), free(dinp0), free(dw0), free(db0);
}

/* ---------------------------------------------------------------- matmul */
/* forward then backward; outputs are the valid [N,OC] part of out and of everything else */
static void run_matmul(const zt_backend *be, const float *inp, const float *w, const float *bias, const float *dout,
                       const float *dw0, const float *db0, int N, int C, int OC, int wt, int ld, float *out,
                       float *dinp, float *dw, float *db) {
    size_t es = zt_dtype_size(be->compute_dtype), nw = (size_t)C * OC;
    void *di = up_c(be, inp, (size_t)N * C), *dwt = up_c(be, w, nw), *dbias = bias ? up_c(be, bias, OC) : NULL;
    void *o = st_alloc(be, (size_t)N * ld * es);
    be->matmul_forward(o, di, dwt, dbias, N, C, OC, wt, ld);
    float *full = zeros((size_t)N * ld);
    down_c(be, full, o, (size_t)N * ld);
    for (int i = 0; i < N; i++) memcpy(out + (size_t)i * OC, full + (size_t)i * ld, OC * sizeof(float));
    free(full);
    /* dout with row stride ld, padding columns zero (as softmax_xent leaves them) */
    float *dpad = zeros((size_t)N * ld);
    for (int i = 0; i < N; i++) memcpy(dpad + (size_t)i * ld, dout + (size_t)i * OC, OC * sizeof(float));
    void *dd = up_c(be, dpad, (size_t)N * ld);
    free(dpad);
    void *gi = st_alloc(be, (size_t)N * C * es), *gw = up_c(be, dw0, nw), *gb = bias ? up_c(be, db0, OC) : NULL;
    be->matmul_backward(gi, gw, gb, dd, di, dwt, N, C, OC, wt, ld);
    down_c(be, dinp, gi, (size_t)N * C);
    down_c(be, dw, gw, nw);
    if (bias) down_c(be, db, gb, OC);
    be->free(di), be->free(dwt), be->free(o), be->free(dd), be->free(gi), be->free(gw);
    if (bias) be->free(dbias), be->free(gb);
}
static void test_matmul(zt_selftest *st, zt_rng *rng, int N, int C, int OC, int wt, int ld, int with_bias) {
    char name[160], tag[96];
    snprintf(tag, sizeof tag, "N=%d C=%d OC=%d%s%s ld=%d", N, C, OC, wt ? " w_transposed" : "",
             with_bias ? " bias" : "", ld);
    size_t nw = (size_t)C * OC;
    float *inp = rnd(rng, (size_t)N * C, 1, 0), *w = rnd(rng, nw, 0.1f, 0);
    float *bias = with_bias ? rnd(rng, OC, 0.5f, 0) : NULL, *db0 = with_bias ? rnd(rng, OC, 0.5f, 0) : NULL;
    float *dout = rnd(rng, (size_t)N * OC, 1, 0), *dw0 = rnd(rng, nw, 0.5f, 0);
    float *out[2], *gi[2], *gw[2], *gb[2];
    for (int k = 0; k < 2; k++)
        out[k] = zeros((size_t)N * OC), gi[k] = zeros((size_t)N * C), gw[k] = zeros(nw), gb[k] = zeros(OC);
    run_matmul(st->ref, inp, w, bias, dout, dw0, db0, N, C, OC, wt, ld, out[0], gi[0], gw[0], gb[0]);
    run_matmul(st->dev, inp, w, bias, dout, dw0, db0, N, C, OC, wt, ld, out[1], gi[1], gw[1], gb[1]);
    snprintf(name, sizeof name, "matmul_forward %s", tag);
    check_rel(st, name, out[1], out[0], (size_t)N * OC, TOL_BF16);
    snprintf(name, sizeof name, "matmul_backward(dinp) %s", tag);
    check_rel(st, name, gi[1], gi[0], (size_t)N * C, TOL_BF16);
    snprintf(name, sizeof name, "matmul_backward(dw) %s", tag);
    check_rel(st, name, gw[1], gw[0], nw, TOL_BF16);
    if (with_bias) {
        snprintf(name, sizeof name, "matmul_backward(dbias) %s", tag);
        check_rel(st, name, gb[1], gb[0], OC, TOL_BF16);
    }
    for (int k = 0; k < 2; k++) free(out[k]), free(gi[k]), free(gw[k]), free(gb[k]);
    free(inp), free(w), free(bias), free(db0), free(dout), free(dw0);
}

/* ---------------------------------------------------------------- attention */
static void mask_upper(float *att, int B, int NH, int T) {
    for (size_t bh = 0; bh < (size_t)B * NH; bh++)
        for (int t = 0; t < T; t++)
            for (int j = t + 1; j < T; j++) att[(bh * T + t) * T + j] = 0.0f;
}
static void run_attn_fwd(const zt_backend *be, const float *qkv, int B, int T, int C, int NH, float *out, float *att) {
    size_t es = zt_dtype_size(be->compute_dtype), natt = (size_t)B * NH * T * T;
    void *dq = up_c(be, qkv, (size_t)B * T * 3 * C);
    void *o = st_alloc(be, (size_t)B * T * C * es), *a = st_alloc(be, natt * es);
    be->attention_forward(o, a, dq, B, T, C, NH);
    down_c(be, out, o, (size_t)B * T * C);
    down_c(be, att, a, natt);
    be->free(dq), be->free(o), be->free(a);
}
static void run_attn_bwd(const zt_backend *be, const float *qkv, const float *att, const float *dout, int B, int T,
                         int C, int NH, float *dqkv) {
    size_t es = zt_dtype_size(be->compute_dtype), natt = (size_t)B * NH * T * T, n3 = (size_t)B * T * 3 * C;
    void *dq = up_c(be, qkv, n3), *a = up_c(be, att, natt), *dd = up_c(be, dout, (size_t)B * T * C);
    void *g = st_alloc(be, n3 * es), *datt = st_alloc(be, natt * es);
    be->attention_backward(g, datt, dd, dq, a, B, T, C, NH);
    down_c(be, dqkv, g, n3);
    be->free(dq), be->free(a), be->free(dd), be->free(g), be->free(datt);
}
static void test_attention(zt_selftest *st, zt_rng *rng, int B, int T, int C, int NH) {
    char name[128], tag[64];
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    size_t n3 = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = rnd(rng, n3, 1, 0), *dout = rnd(rng, nout, 1, 0);
    float *out[2], *att[2], *g[2];
    for (int k = 0; k < 2; k++) out[k] = zeros(nout), att[k] = zeros(natt), g[k] = zeros(n3);
    run_attn_fwd(st->ref, qkv, B, T, C, NH, out[0], att[0]);
    run_attn_fwd(st->dev, qkv, B, T, C, NH, out[1], att[1]);
    mask_upper(att[0], B, NH, T); /* the reference need not write above the diagonal */
    float upper = 0.0f;           /* the device must: its backward uses full T x T GEMMs */
    for (size_t bh = 0; bh < (size_t)B * NH; bh++)
        for (int t = 0; t < T; t++)
            for (int j = t + 1; j < T; j++) upper = fmaxf(upper, fabsf(att[1][(bh * T + t) * T + j]));
    snprintf(name, sizeof name, "attention_forward(out) %s", tag);
    check_rel(st, name, out[1], out[0], nout, TOL_BF16);
    snprintf(name, sizeof name, "attention_forward(att) %s", tag);
    check_rel(st, name, att[1], att[0], natt, TOL_BF16);
    snprintf(name, sizeof name, "attention_forward(att zero above diagonal, max abs) %s", tag);
    zt_selftest_check(st, name, upper, 0);
    /* backward from the reference's probabilities rounded to bf16, identical for both */
    for (size_t i = 0; i < natt; i++) att[0][i] = bf16r(att[0][i]);
    run_attn_bwd(st->ref, qkv, att[0], dout, B, T, C, NH, g[0]);
    run_attn_bwd(st->dev, qkv, att[0], dout, B, T, C, NH, g[1]);
    snprintf(name, sizeof name, "attention_backward(dqkv) %s", tag);
    check_rel(st, name, g[1], g[0], n3, TOL_ATTN);
    for (int k = 0; k < 2; k++) free(out[k]), free(att[k]), free(g[k]);
    free(qkv), free(dout);
}

/* ---------------------------------------------------------------- elementwise */
enum { EW_GELU, EW_GELU_BWD, EW_RESIDUAL, EW_ACCUMULATE, EW_SCALE };
static void run_ew(const zt_backend *be, int op, const float *a, const float *b, size_t n, size_t off, float *out) {
    /* off shifts every tensor by `off` elements inside its allocation (unaligned-access path) */
    size_t es = zt_dtype_size(be->compute_dtype);
    float *pa = zeros(n + off), *pb = zeros(n + off);
    memcpy(pa + off, a, n * sizeof(float));
    memcpy(pb + off, b, n * sizeof(float));
    char *da = up_c(be, pa, n + off), *db = up_c(be, pb, n + off);
    char *o = st_alloc(be, (n + off) * es);
    void *A = da + off * es, *Bp = db + off * es, *O = o + off * es;
    switch (op) {
    case EW_GELU: be->gelu_forward(O, A, n); break;
    case EW_GELU_BWD: be->gelu_backward(O, A, Bp, n); break;
    case EW_RESIDUAL: be->residual_forward(O, A, Bp, n); break;
    case EW_ACCUMULATE: be->accumulate(A, Bp, n); O = A; break;
    case EW_SCALE: be->scale(A, 0.37f, n); O = A; break;
    }
    float *full = zeros(n + off);
    down_c(be, full, O == A ? (void *)da : (void *)o, n + off);
    memcpy(out, full + off, n * sizeof(float));
    free(full), free(pa), free(pb);
    be->free(da), be->free(db), be->free(o);
}
static void test_elementwise(zt_selftest *st, zt_rng *rng) {
    static const char *names[] = {"gelu_forward", "gelu_backward", "residual_forward", "accumulate", "scale"};
    size_t n = 4096 + 5; /* vector body + scalar tail */
    float *a = rnd(rng, n, 2, 0), *b = rnd(rng, n, 1, 0), *r = zeros(n), *d = zeros(n);
    for (int op = EW_GELU; op <= EW_SCALE; op++)
        for (size_t off = 0; off <= 1; off++) {
            char name[96];
            run_ew(st->ref, op, a, b, n, off, r);
            run_ew(st->dev, op, a, b, n, off, d);
            snprintf(name, sizeof name, "%s%s", names[op], off ? " (unaligned)" : "");
            check_rel(st, name, d, r, n, TOL_ROUND);
        }
    free(a), free(b), free(r), free(d);
}

/* ---------------------------------------------------------------- softmax + cross-entropy */
static void run_xent(const zt_backend *be, const float *logits, const int *tgt, int N, int V, int Vp, float dloss,
                     float *loss_only, float *loss, float *dlogits) {
    size_t n = (size_t)N * Vp;
    void *dl = up_c(be, logits, n);
    int *dt = up_i(be, tgt, N);
    float *dloss_d = st_alloc(be, N * sizeof(float));
    be->softmax_xent(dloss_d, NULL, dl, dt, N, V, Vp, dloss);
    down_f(be, loss_only, dloss_d, N);
    be->softmax_xent(dloss_d, dl, dl, dt, N, V, Vp, dloss); /* in place, as the engine does */
    down_f(be, loss, dloss_d, N);
    down_c(be, dlogits, dl, n);
    be->free(dl), be->free(dt), be->free(dloss_d);
}
static void test_xent(zt_selftest *st, zt_rng *rng, int N, int V, int Vp) {
    char name[128], tag[64];
    snprintf(tag, sizeof tag, "N=%d V=%d Vp=%d", N, V, Vp);
    size_t n = (size_t)N * Vp;
    float *logits = rnd(rng, n, 3, 0);
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 1e4f; /* padding must never be read */
    int *tgt = zt_xmalloc(N * sizeof(int));
    for (int i = 0; i < N; i++) tgt[i] = (int)(zt_rng_u64(rng) % (uint64_t)V);
    float dloss = 1.0f / N;
    float *l0[2], *l[2], *g[2];
    for (int k = 0; k < 2; k++) l0[k] = zeros(N), l[k] = zeros(N), g[k] = zeros(n);
    run_xent(st->ref, logits, tgt, N, V, Vp, dloss, l0[0], l[0], g[0]);
    run_xent(st->dev, logits, tgt, N, V, Vp, dloss, l0[1], l[1], g[1]);
    snprintf(name, sizeof name, "softmax_xent(losses, no dlogits) %s", tag);
    check_rel(st, name, l0[1], l0[0], N, TOL_F32);
    snprintf(name, sizeof name, "softmax_xent(losses) %s", tag);
    check_rel(st, name, l[1], l[0], N, TOL_F32);
    snprintf(name, sizeof name, "softmax_xent(dlogits in place) %s", tag);
    check_rel(st, name, g[1], g[0], n, TOL_BF16);
    double pad = 0;
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) pad = fmax(pad, fabs(g[1][(size_t)i * Vp + j]));
    snprintf(name, sizeof name, "softmax_xent(dlogits padding zero, max abs) %s", tag);
    zt_selftest_check(st, name, pad, 0);
    for (int k = 0; k < 2; k++) free(l0[k]), free(l[k]), free(g[k]);
    free(logits), free(tgt);
}

/* ---------------------------------------------------------------- adamw, sumsq */
static void run_adamw(const zt_backend *be, const float *p, const float *m, const float *v, const float *g, size_t n,
                      const zt_adam_step *s, float *po, float *mo, float *vo, float *out) {
    float *dp = up_f(be, p, n), *dm = up_f(be, m, n), *dv = up_f(be, v, n);
    void *dg = up_c(be, g, n);
    void *o = be->compute_dtype == ZT_F32 ? NULL : st_alloc(be, n * zt_dtype_size(be->compute_dtype));
    be->adamw(dp, dm, dv, dg, o, n, s);
    down_f(be, po, dp, n);
    down_f(be, mo, dm, n);
    down_f(be, vo, dv, n);
    if (o) down_c(be, out, o, n);
    else
        for (size_t i = 0; i < n; i++) out[i] = bf16r(po[i]);
    be->free(dp), be->free(dm), be->free(dv), be->free(dg);
    if (o) be->free(o);
}
static void test_adamw(zt_selftest *st, zt_rng *rng) {
    size_t n = 10007;
    float *p = rnd(rng, n, 0.1f, 0), *m = rnd(rng, n, 0.01f, 0), *v = rnd(rng, n, 0.01f, 0), *g = rnd(rng, n, 1, 0);
    for (size_t i = 0; i < n; i++) v[i] *= v[i];
    zt_adam_step s;
    s.lr = 1e-2f, s.beta1 = 0.9f, s.beta2 = 0.95f, s.eps = 1e-8f, s.weight_decay = 0.1f;
    s.bias_correction1 = 1.0f - powf(0.9f, 3), s.bias_correction2 = 1.0f - powf(0.95f, 3), s.grad_scale = 0.5f;
    float *r[4], *d[4];
    for (int k = 0; k < 4; k++) r[k] = zeros(n), d[k] = zeros(n);
    run_adamw(st->ref, p, m, v, g, n, &s, r[0], r[1], r[2], r[3]);
    run_adamw(st->dev, p, m, v, g, n, &s, d[0], d[1], d[2], d[3]);
    check_rel(st, "adamw(master)", d[0], r[0], n, TOL_F32);
    check_rel(st, "adamw(m)", d[1], r[1], n, TOL_F32);
    check_rel(st, "adamw(v)", d[2], r[2], n, TOL_F32);
    check_rel(st, "adamw(params_out)", d[3], r[3], n, TOL_ROUND);
    for (int k = 0; k < 4; k++) free(r[k]), free(d[k]);
    free(p), free(m), free(v), free(g);
}
static void test_sumsq(zt_selftest *st, zt_rng *rng) {
    size_t n = 100003;
    float *x = rnd(rng, n, 1.5f, 0);
    double want = 0;
    for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
    void *dr = up_c(st->ref, x, n), *dd = up_c(st->dev, x, n);
    double r = st->ref->sumsq(dr, n), d1 = st->dev->sumsq(dd, n), d2 = st->dev->sumsq(dd, n);
    zt_selftest_check(st, "sumsq(reference backend vs double)", fabs(r - want) / want, 1e-6);
    zt_selftest_check(st, "sumsq", fabs(d1 - want) / want, 1e-6);
    zt_selftest_check(st, "sumsq(deterministic, abs diff)", fabs(d1 - d2), 0);
    st->ref->free(dr), st->dev->free(dd);
    free(x);
}

void zt_selftest_ops(zt_selftest *st) {
    zt_rng rng;
    zt_rng_seed(&rng, st->seed);
    test_conversions(st, &rng);
    test_embedding(st, &rng);
    test_layernorm(st, &rng, 64, 128);
    test_layernorm(st, &rng, 50, 100);
    test_matmul(st, &rng, 128, 128, 384, 0, 384, 1);   /* Conv1D with bias (qkv-like) */
    test_matmul(st, &rng, 96, 128, 250, 1, 256, 0);    /* tied LM head: wte [V,C], padded rows */
    test_matmul(st, &rng, 37, 40, 52, 0, 52, 1);       /* odd shapes */
    test_matmul(st, &rng, 33, 24, 19, 1, 21, 1);       /* odd shapes, transposed, odd ld */
    test_attention(st, &rng, 2, 64, 128, 4);
    test_attention(st, &rng, 1, 33, 96, 3);
    test_elementwise(st, &rng);
    test_xent(st, &rng, 64, 250, 256);
    test_xent(st, &rng, 4, 50257, 50304);
    test_adamw(st, &rng);
    test_sumsq(st, &rng);
}

/* ---------------------------------------------------------------- command */
int zt_cmd_selftest(int argc, char **argv) {
    const char *device = "cuda";
    unsigned long long seed = 1234;
    int allow_skip = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--allow-skip")) allow_skip = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: zerotrain selftest [--device cuda|cpu] [--seed N] [--allow-skip]\n"
                   "  compares every backend op with the CPU reference backend on random inputs;\n"
                   "  --device cpu checks the CPU backend against itself (exercises the harness);\n"
                   "  --allow-skip exits 0 when no GPU is usable.\n");
            return 0;
        } else {
            fprintf(stderr, "zerotrain: error: selftest: unknown argument '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    zt_selftest st;
    memset(&st, 0, sizeof st);
    st.seed = seed;
    st.ref = zt_backend_cpu();
    if (!strcmp(device, "cuda")) {
        const char *why = NULL;
        st.dev = zt_backend_cuda(&why);
        if (!st.dev) {
            printf("selftest: SKIPPED: %s\n", why ? why : "the CUDA backend is not available");
            return allow_skip ? 0 : 1;
        }
    } else if (!strcmp(device, "cpu")) {
        st.dev = zt_backend_cpu();
    } else {
        fprintf(stderr, "zerotrain: error: selftest: --device must be cuda or cpu, not '%s'\n", device);
        return 2;
    }
    printf("selftest: %s backend (%s) vs cpu reference, seed %llu\n", st.dev->name,
           st.dev->compute_dtype == ZT_BF16 ? "bf16" : st.dev->compute_dtype == ZT_F16 ? "fp16" : "fp32", seed);
    zt_selftest_ops(&st);
    printf("selftest: %d passed, %d failed\n", st.passed, st.failed);
    return st.failed ? 1 : 0;
}
