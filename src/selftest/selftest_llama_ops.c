/* selftest_llama_ops.c — the op-by-op selftest of the Llama family's ops (zt_selftest_llama_ops,
 * which zt_selftest_ops runs last): grouped-query attention (NKV = NH/2, NH/3 and 1, the flash path
 * and the GEMM fallback, and NKV = NH against attention_forward/backward bit for bit), RMSNorm
 * forward and backward, the rotary embedding forward and inverse, SwiGLU forward and backward, each
 * on the device against the CPU reference backend with selftest_ops.c's tolerances and ways:
 *   GQA forward TOL_BF16, backward TOL_ATTN (dq, dk, dv each on its own; dk, dv are sums over the
 *       query heads sharing a kv head, accumulated in fp32 and rounded once on the device);
 *   RMSNorm out TOL_BF16 (a reduction, rounded once), rstd TOL_F32, dinp and dw TOL_BF16;
 *   rope and SwiGLU TOL_ROUND: elementwise fp32 math rounded once; inverse(forward(x)) against x
 *       is two roundings of an orthogonal map, whose norm-wise error (~1.6e-3 for bf16) TOL_ROUND bounds.
 * The ops documented as deterministic are run twice and must agree bit for bit. An entry that the
 * reference or the device backend does not have (NULL) is skipped with a SKIP line and counted
 * neither way, so the harness runs on a backend that has not grown the op yet. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "selftest/selftest.h"
#include "util/util.h"

/* both backends have the entry (given as the two pointers' presence); else a SKIP line */
static int have_op(zt_selftest *st, const char *op, int on_ref, int on_dev) {
    if (on_ref && on_dev) return 1;
    if (st->verbose)
        printf("SKIP %s%s: the %s backend has no %s entry\n", st->tag ? st->tag : "", op, on_ref ? st->dev->name : st->ref->name,
               op);
    return 0;
}
static void check_rel(zt_selftest *st, const char *name, const float *dev, const float *ref, size_t n, double tol) {
    zt_selftest_check(st, name, zt_selftest_rel_err(dev, ref, n), tol);
}
/* columns [lo, lo + n) of each of the rows of x (row width W), as a new buffer */
static float *columns(const float *x, size_t rows, int W, int lo, int n) {
    float *o = st_zeros(rows * (size_t)n);
    for (size_t r = 0; r < rows; r++) memcpy(o + r * n, x + r * W + lo, (size_t)n * sizeof(float));
    return o;
}

/* ---------------------------------------------------------------- grouped-query attention */
/* forward then backward with the backend's own att; gqa 0 runs the multi-head entries instead
 * (NKV = NH, C = NH HD) */
static void run_gqa(const zt_backend *be, int gqa, const float *qkv, const float *dout, int B, int T, int NH, int NKV,
                    int HD, float *out, float *dqkv) {
    size_t es = zt_dtype_size(be->compute_dtype), natt = (size_t)B * NH * T * T;
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HD, nout = (size_t)B * T * NH * HD;
    void *dq = st_up_c(be, qkv, nq), *dd = st_up_c(be, dout, nout);
    void *o = st_alloc(be, nout * es), *a = st_alloc(be, natt * es), *datt = st_alloc(be, natt * es);
    void *g = st_alloc(be, nq * es);
    if (gqa) {
        be->attention_gqa_forward(o, a, dq, B, T, NH, NKV, HD);
        be->attention_gqa_backward(g, datt, dd, dq, a, B, T, NH, NKV, HD);
    } else {
        be->attention_forward(o, a, dq, B, T, NH * HD, NH);
        be->attention_backward(g, datt, dd, dq, a, B, T, NH * HD, NH);
    }
    st_down_c(be, out, o, nout);
    st_down_c(be, dqkv, g, nq);
    be->free(dq), be->free(dd), be->free(o), be->free(a), be->free(datt), be->free(g);
}
static void test_gqa(zt_selftest *st, zt_rng *rng, int B, int T, int NH, int NKV, int HD, float qk_scale) {
    if (!have_op(st, "attention_gqa_forward/backward", st->ref->attention_gqa_forward && st->ref->attention_gqa_backward,
                 st->dev->attention_gqa_forward && st->dev->attention_gqa_backward))
        return;
    char name[160], tag[80];
    snprintf(tag, sizeof tag, "B=%d T=%d NH=%d NKV=%d HD=%d", B, T, NH, NKV, HD);
    int W = (NH + 2 * NKV) * HD;
    size_t rows = (size_t)B * T, nq = rows * W, nout = rows * NH * HD;
    float *qkv = st_rnd(rng, nq, 1, 0), *dout = st_rnd(rng, nout, 1, 0);
    /* larger q, k give peaked softmax rows (the online max rescaling) */
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < (NH + NKV) * HD; c++) qkv[r * W + c] = st_round_input(qkv[r * W + c] * qk_scale);
    float *out[3], *g[3];
    for (int k = 0; k < 3; k++) out[k] = st_zeros(nout), g[k] = st_zeros(nq);
    run_gqa(st->ref, 1, qkv, dout, B, T, NH, NKV, HD, out[0], g[0]);
    run_gqa(st->dev, 1, qkv, dout, B, T, NH, NKV, HD, out[1], g[1]);
    run_gqa(st->dev, 1, qkv, dout, B, T, NH, NKV, HD, out[2], g[2]);
    snprintf(name, sizeof name, "attention_gqa_forward(out) %s", tag);
    check_rel(st, name, out[1], out[0], nout, TOL_BF16);
    static const char *part[3] = {"dq", "dk", "dv"};
    int lo[3] = {0, NH * HD, (NH + NKV) * HD}, width[3] = {NH * HD, NKV * HD, NKV * HD};
    for (int p = 0; p < 3; p++) {
        float *a = columns(g[1], rows, W, lo[p], width[p]), *b = columns(g[0], rows, W, lo[p], width[p]);
        snprintf(name, sizeof name, "attention_gqa_backward(%s) %s", part[p], tag);
        check_rel(st, name, a, b, rows * width[p], TOL_ATTN);
        free(a), free(b);
    }
    snprintf(name, sizeof name, "attention_gqa(deterministic, mismatches) %s", tag);
    zt_selftest_check(st, name, (double)(st_count_diff(out[1], out[2], nout) + st_count_diff(g[1], g[2], nq)), 0);

    if (NKV == NH) { /* backend.h: the multi-head entries, bit for bit */
        run_gqa(st->dev, 0, qkv, dout, B, T, NH, NKV, HD, out[2], g[2]);
        snprintf(name, sizeof name, "attention_gqa = attention_forward/backward at NKV = NH (mismatches) %s", tag);
        zt_selftest_check(st, name, (double)(st_count_diff(out[1], out[2], nout) + st_count_diff(g[1], g[2], nq)), 0);
    } else { /* the same as multi-head attention on K/V repeated for each query head */
        int G = NH / NKV, W3 = 3 * NH * HD;
        float *rep = st_zeros(rows * W3), *ro = st_zeros(nout), *rg = st_zeros(rows * W3);
        for (size_t r = 0; r < rows; r++) {
            memcpy(rep + r * W3, qkv + r * W, (size_t)NH * HD * sizeof(float));
            for (int h = 0; h < NH; h++)
                for (int kv = 0; kv < 2; kv++)
                    memcpy(rep + r * W3 + (size_t)(kv + 1) * NH * HD + (size_t)h * HD,
                           qkv + r * W + (size_t)(NH + kv * NKV + h / G) * HD, (size_t)HD * sizeof(float));
        }
        run_gqa(st->dev, 0, rep, dout, B, T, NH, NH, HD, ro, rg);
        snprintf(name, sizeof name, "attention_gqa_forward = attention_forward on repeated K/V %s", tag);
        check_rel(st, name, out[1], ro, nout, TOL_F32);
        free(rep), free(ro), free(rg);
    }
    for (int k = 0; k < 3; k++) free(out[k]), free(g[k]);
    free(qkv), free(dout);
}

/* ---------------------------------------------------------------- RMSNorm */
static void run_rms_fwd(const zt_backend *be, const float *x, const float *w, float eps, int N, int C, float *out,
                        float *rstd) {
    size_t NC = (size_t)N * C;
    void *dx = st_up_c(be, x, NC), *dw = st_up_c(be, w, C), *o = st_alloc(be, NC * zt_dtype_size(be->compute_dtype));
    float *r = st_alloc(be, N * sizeof(float));
    be->rmsnorm_forward(o, r, dx, dw, eps, N, C);
    st_down_c(be, out, o, NC);
    st_down_f(be, rstd, r, N);
    be->free(dx), be->free(dw), be->free(o), be->free(r);
}
static void run_rms_bwd(const zt_backend *be, const float *x, const float *w, const float *rstd, const float *dout,
                        const float *dinp0, const float *dw0, int N, int C, float *dinp, float *dw) {
    size_t NC = (size_t)N * C;
    void *dx = st_up_c(be, x, NC), *dwt = st_up_c(be, w, C), *ddout = st_up_c(be, dout, NC);
    float *r = st_up_f(be, rstd, N);
    void *gi = st_up_c(be, dinp0, NC), *gw = st_up_c(be, dw0, C);
    be->rmsnorm_backward(gi, gw, ddout, dx, dwt, r, N, C);
    st_down_c(be, dinp, gi, NC);
    st_down_c(be, dw, gw, C);
    be->free(dx), be->free(dwt), be->free(ddout), be->free(r), be->free(gi), be->free(gw);
}
static void test_rmsnorm(zt_selftest *st, zt_rng *rng, int N, int C) {
    if (!have_op(st, "rmsnorm_forward/backward", st->ref->rmsnorm_forward && st->ref->rmsnorm_backward,
                 st->dev->rmsnorm_forward && st->dev->rmsnorm_backward))
        return;
    char name[128];
    const float eps = 1e-5f;
    size_t NC = (size_t)N * C;
    float *x = st_rnd(rng, NC, 2.0f, 0.5f), *w = st_rnd(rng, C, 0.1f, 1.0f);
    float *out[2], *rstd[2];
    for (int k = 0; k < 2; k++) out[k] = st_zeros(NC), rstd[k] = st_zeros(N);
    run_rms_fwd(st->ref, x, w, eps, N, C, out[0], rstd[0]);
    run_rms_fwd(st->dev, x, w, eps, N, C, out[1], rstd[1]);
    snprintf(name, sizeof name, "rmsnorm_forward(out) N=%d C=%d", N, C);
    check_rel(st, name, out[1], out[0], NC, TOL_BF16);
    snprintf(name, sizeof name, "rmsnorm_forward(rstd) N=%d C=%d", N, C);
    check_rel(st, name, rstd[1], rstd[0], N, TOL_F32);

    /* backward from the reference's rstd, so both start from the same statistics */
    float *dout = st_rnd(rng, NC, 1, 0), *dinp0 = st_rnd(rng, NC, 0.5f, 0), *dw0 = st_rnd(rng, C, 0.5f, 0);
    float *gi[3], *gw[3];
    for (int k = 0; k < 3; k++) gi[k] = st_zeros(NC), gw[k] = st_zeros(C);
    for (int k = 0; k < 3; k++)
        run_rms_bwd(k ? st->dev : st->ref, x, w, rstd[0], dout, dinp0, dw0, N, C, gi[k], gw[k]);
    snprintf(name, sizeof name, "rmsnorm_backward(dinp) N=%d C=%d", N, C);
    check_rel(st, name, gi[1], gi[0], NC, TOL_BF16);
    snprintf(name, sizeof name, "rmsnorm_backward(dw) N=%d C=%d", N, C);
    check_rel(st, name, gw[1], gw[0], C, TOL_BF16);
    snprintf(name, sizeof name, "rmsnorm_backward(deterministic, mismatches) N=%d C=%d", N, C);
    zt_selftest_check(st, name, (double)(st_count_diff(gi[1], gi[2], NC) + st_count_diff(gw[1], gw[2], C)), 0);
    for (int k = 0; k < 3; k++) free(gi[k]), free(gw[k]);
    for (int k = 0; k < 2; k++) free(out[k]), free(rstd[k]);
    free(x), free(w), free(dout), free(dinp0), free(dw0);
}

/* ---------------------------------------------------------------- rotary embedding */
/* qkv after rope(inverse) on be (in place), back in x */
static void run_rope(const zt_backend *be, float *x, const float *cos_sin, int B, int T, int NH, int NKV, int HD,
                     int inverse) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HD;
    void *d = st_up_c(be, x, n);
    float *cs = st_up_f(be, cos_sin, (size_t)T * HD);
    be->rope(d, cs, B, T, NH, NKV, HD, inverse);
    st_down_c(be, x, d, n);
    be->free(d), be->free(cs);
}
static void test_rope(zt_selftest *st, zt_rng *rng, int B, int T, int NH, int NKV, int HD) {
    if (!have_op(st, "rope", st->ref->rope != NULL, st->dev->rope != NULL)) return;
    char name[160], tag[80];
    snprintf(tag, sizeof tag, "B=%d T=%d NH=%d NKV=%d HD=%d", B, T, NH, NKV, HD);
    int W = (NH + 2 * NKV) * HD, half = HD / 2;
    size_t rows = (size_t)B * T, n = rows * W;
    /* cos_sin [T, HD]: cos(t f_i) at i, sin(t f_i) at HD/2 + i, f_i = 10000^(-2i/HD) (Llama's theta) */
    float *cs = st_zeros((size_t)T * HD);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double a = t * pow(10000.0, -2.0 * i / HD);
            cs[(size_t)t * HD + i] = (float)cos(a), cs[(size_t)t * HD + half + i] = (float)sin(a);
        }
    float *x = st_rnd(rng, n, 1, 0), *y[3];
    for (int k = 0; k < 3; k++) y[k] = st_zeros(n), memcpy(y[k], x, n * sizeof(float));
    for (int inverse = 0; inverse <= 1; inverse++) {
        for (int k = 0; k < 2; k++) memcpy(y[k], x, n * sizeof(float));
        run_rope(st->ref, y[0], cs, B, T, NH, NKV, HD, inverse);
        run_rope(st->dev, y[1], cs, B, T, NH, NKV, HD, inverse);
        snprintf(name, sizeof name, "rope%s %s", inverse ? "(inverse)" : "", tag);
        check_rel(st, name, y[1], y[0], n, TOL_ROUND);
        float *v = columns(y[1], rows, W, (NH + NKV) * HD, NKV * HD), *v0 = columns(x, rows, W, (NH + NKV) * HD, NKV * HD);
        snprintf(name, sizeof name, "rope%s(v untouched, mismatches) %s", inverse ? "(inverse)" : "", tag);
        zt_selftest_check(st, name, (double)st_count_diff(v, v0, rows * NKV * HD), 0);
        free(v), free(v0);
    }
    /* the inverse undoes the forward (it is its transpose, the rotation orthogonal) */
    run_rope(st->dev, y[2], cs, B, T, NH, NKV, HD, 0);
    run_rope(st->dev, y[2], cs, B, T, NH, NKV, HD, 1);
    snprintf(name, sizeof name, "rope inverse(forward(x)) = x %s", tag);
    check_rel(st, name, y[2], x, n, TOL_ROUND);
    for (int k = 0; k < 3; k++) free(y[k]);
    free(x), free(cs);
}

/* ---------------------------------------------------------------- SwiGLU */
static void run_swiglu(const zt_backend *be, const float *inp, const float *dout, int N, int inter, float *out,
                       float *dinp) {
    size_t es = zt_dtype_size(be->compute_dtype), n2 = (size_t)N * 2 * inter, n1 = (size_t)N * inter;
    void *di = st_up_c(be, inp, n2), *dd = st_up_c(be, dout, n1), *o = st_alloc(be, n1 * es), *g = st_alloc(be, n2 * es);
    be->swiglu_forward(o, di, N, inter);
    be->swiglu_backward(g, di, dd, N, inter);
    st_down_c(be, out, o, n1);
    st_down_c(be, dinp, g, n2);
    be->free(di), be->free(dd), be->free(o), be->free(g);
}
static void test_swiglu(zt_selftest *st, zt_rng *rng, int N, int inter) {
    if (!have_op(st, "swiglu_forward/backward", st->ref->swiglu_forward && st->ref->swiglu_backward,
                 st->dev->swiglu_forward && st->dev->swiglu_backward))
        return;
    char name[128];
    size_t n2 = (size_t)N * 2 * inter, n1 = (size_t)N * inter;
    float *inp = st_rnd(rng, n2, 3, 0), *dout = st_rnd(rng, n1, 1, 0);
    float *out[2], *g[2];
    for (int k = 0; k < 2; k++) out[k] = st_zeros(n1), g[k] = st_zeros(n2);
    run_swiglu(st->ref, inp, dout, N, inter, out[0], g[0]);
    run_swiglu(st->dev, inp, dout, N, inter, out[1], g[1]);
    snprintf(name, sizeof name, "swiglu_forward N=%d I=%d", N, inter);
    check_rel(st, name, out[1], out[0], n1, TOL_ROUND);
    snprintf(name, sizeof name, "swiglu_backward(dinp) N=%d I=%d", N, inter);
    check_rel(st, name, g[1], g[0], n2, TOL_ROUND);
    for (int k = 0; k < 2; k++) free(out[k]), free(g[k]);
    free(inp), free(dout);
}

void zt_selftest_llama_ops(zt_selftest *st, zt_rng *rng) {
    test_gqa(st, rng, 2, 64, 4, 2, 32, 1.0f);   /* NKV = NH/2, flash, one tile */
    test_gqa(st, rng, 2, 100, 6, 2, 64, 1.0f);  /* three query heads per kv head, partial second tile */
    test_gqa(st, rng, 1, 200, 4, 1, 64, 2.0f);  /* multi-query, four tiles, peaked softmax */
    test_gqa(st, rng, 2, 100, 4, 4, 64, 1.0f);  /* NKV = NH: the multi-head entries bit for bit */
    test_gqa(st, rng, 1, 33, 4, 2, 32, 1.0f);   /* T too small for the flash scratch: GEMM path */
    test_gqa(st, rng, 1, 64, 4, 1, 48, 1.0f);   /* HD 48: GEMM path, multi-query */
    test_rmsnorm(st, rng, 64, 128);
    test_rmsnorm(st, rng, 50, 100);             /* C % 8 != 0: scalar path */
    test_rmsnorm(st, rng, 9, 4096);             /* Llama-7B's width, 16-byte path */
    test_rope(st, rng, 2, 40, 4, 2, 64);        /* 16-byte path */
    test_rope(st, rng, 1, 17, 3, 1, 12);        /* HD/2 % 8 != 0: scalar path */
    test_swiglu(st, rng, 64, 256);              /* 16-byte path */
    test_swiglu(st, rng, 13, 37);               /* scalar path */
}
