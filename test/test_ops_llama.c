/* test_ops_llama.c — the CPU backend's ops for the Llama family against independent double-precision
 * references, as test_ops.c does GPT-2's (the same helpers, ops_ref.h, and the same tolerances):
 *   - rmsnorm_forward (out, rstd) against the formula; rmsnorm_backward's dinp and dw (both accumulate:
 *     random prefill) against central finite differences of L = sum(G * out);
 *   - rope against the rotation in double from the same fp32 table; its inverse is its transpose,
 *     <rope(x), y> = <x, rope_inverse(y)>, which makes it the backward of forward; the inverse undoes
 *     the forward; the value heads are untouched, bit for bit;
 *   - swiglu_forward against the formula, swiglu_backward (overwrites: NaN prefill) against finite
 *     differences;
 *   - attention_gqa_forward and _backward against a reference whose query head h reads key/value head
 *     h / (NH / NKV), with NKV = 1 (multi-query), NH / 2 and NH, the backward by finite differences;
 *     with NKV = NH and HD = C / NH they equal attention_forward / attention_backward bit for bit;
 *   - every op bit-identical run twice and with 1, 2 and 3 OpenMP threads, at shapes that split. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "ops_ref.h" /* be, buffers, errors, finite differences */

/* ------------------------------------------------------------------ rmsnorm */

typedef struct { int N, C; float eps; double *x, *w, *G, *out, *rstd; } rms_ctx;
static void ref_rmsnorm(rms_ctx *c) {
    for (int i = 0; i < c->N; i++) {
        const double *x = c->x + (size_t)i * c->C;
        double ms = 0;
        for (int j = 0; j < c->C; j++) ms += x[j] * x[j];
        double r = 1 / sqrt(ms / c->C + c->eps);
        c->rstd[i] = r;
        for (int j = 0; j < c->C; j++) c->out[(size_t)i * c->C + j] = x[j] * r * c->w[j];
    }
}
static double rms_loss(void *p) {
    rms_ctx *c = p;
    ref_rmsnorm(c);
    return dot(c->out, c->G, (size_t)c->N * c->C);
}
static void test_rmsnorm(int N, int C, float eps) {
    char name[128];
    size_t n = (size_t)N * C;
    float *x = frand(n, 2), *w = frand(C, 1), *out = falloc(n), *rstd = falloc(N), *G = frand(n, 1);
    for (size_t i = 0; i < n; i++) x[i] += 0.5f; /* a mean away from 0: RMS is not LayerNorm */
    be->rmsnorm_forward(out, rstd, x, w, eps, N, C);
    rms_ctx c = {N, C, eps, todouble(x, n), todouble(w, C), todouble(G, n), dalloc(n), dalloc(N)};
    ref_rmsnorm(&c);
    snprintf(name, sizeof name, "rmsnorm_forward out N=%d C=%d", N, C);
    CHECK_ERR(relerr(out, c.out, n), TOL_FWD, name);
    snprintf(name, sizeof name, "rmsnorm_forward rstd N=%d C=%d", N, C);
    CHECK_ERR(relerr(rstd, c.rstd, N), TOL_FWD, name);
    double *gx = dalloc(n), *gw = dalloc(C);
    fd_grad(rms_loss, &c, c.x, n, gx);
    fd_grad(rms_loss, &c, c.w, C, gw);
    float *dx0 = frand(n, 1), *dw0 = frand(C, 1), *dx = fcopy(dx0, n), *dw = fcopy(dw0, C);
    be->rmsnorm_backward(dx, dw, G, x, w, rstd, N, C);
    snprintf(name, sizeof name, "rmsnorm_backward dinp (accumulates) N=%d C=%d", N, C);
    CHECK_ERR(relerr_acc(dx, dx0, gx, n), TOL_BWD, name);
    snprintf(name, sizeof name, "rmsnorm_backward dw (accumulates) N=%d C=%d", N, C);
    CHECK_ERR(relerr_acc(dw, dw0, gw, C), TOL_BWD, name);
}

/* ------------------------------------------------------------------ rope */

/* cos_sin [T, HD] as backend.h lays it out: row t holds cos(t f_i) at i and sin(t f_i) at HD/2 + i,
 * f_i = theta^(-2i/HD) */
static float *rope_table(int T, int HD, double theta) {
    float *cs = falloc((size_t)T * HD);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < HD / 2; i++) {
            double a = t * pow(theta, -2.0 * i / HD);
            cs[(size_t)t * HD + i] = (float)cos(a), cs[(size_t)t * HD + HD / 2 + i] = (float)sin(a);
        }
    return cs;
}
static void test_rope(int B, int T, int NH, int NKV, int HD) {
    char tag[64], name[160];
    snprintf(tag, sizeof tag, "B=%d T=%d NH=%d NKV=%d HD=%d", B, T, NH, NKV, HD);
    int W = (NH + 2 * NKV) * HD, half = HD / 2;
    size_t n = (size_t)B * T * W;
    float *cs = rope_table(T, HD, 10000.0), *x = frand(n, 2), *y = frand(n, 2);
    float *rx = fcopy(x, n), *iy = fcopy(y, n);
    be->rope(rx, cs, B, T, NH, NKV, HD, 0);
    be->rope(iy, cs, B, T, NH, NKV, HD, 1);
    /* the rotation in double from the same fp32 table, and the value heads as they were */
    double *want = todouble(x, n);
    int v_same = 1;
    for (int bt = 0; bt < B * T; bt++) {
        const float *c = cs + (size_t)(bt % T) * HD, *s = c + half;
        for (int h = 0; h < NH + NKV; h++) {
            size_t o = (size_t)bt * W + (size_t)h * HD;
            for (int i = 0; i < half; i++) {
                double x0 = x[o + i], x1 = x[o + half + i];
                want[o + i] = x0 * c[i] - x1 * s[i], want[o + half + i] = x1 * c[i] + x0 * s[i];
            }
        }
        size_t v0 = (size_t)bt * W + (size_t)(NH + NKV) * HD;
        v_same &= !memcmp(rx + v0, x + v0, (size_t)NKV * HD * 4) && !memcmp(iy + v0, y + v0, (size_t)NKV * HD * 4);
    }
    snprintf(name, sizeof name, "rope forward = the rotation in double %s", tag);
    CHECK_ERR(relerr(rx, want, n), TOL_FWD, name);
    snprintf(name, sizeof name, "rope leaves the value heads bit for bit %s", tag);
    CHECK(v_same, name, "a value head changed");
    /* the inverse is the transpose: <rope(x), y> = <x, rope_inverse(y)> */
    double lhs = 0, rhs = 0, scale = 0;
    for (size_t i = 0; i < n; i++) lhs += (double)rx[i] * y[i], rhs += (double)x[i] * iy[i], scale += fabs((double)x[i] * y[i]);
    snprintf(name, sizeof name, "rope inverse is the transpose: <rope(x), y> = <x, rope_inverse(y)> %s", tag);
    CHECK_ERR(fabs(lhs - rhs) / scale, TOL_FWD, name);
    /* and undoes the forward */
    be->rope(rx, cs, B, T, NH, NKV, HD, 1);
    snprintf(name, sizeof name, "rope inverse undoes rope %s", tag);
    CHECK_ERR(relerr(rx, todouble(x, n), n), TOL_FWD, name);
}

/* ------------------------------------------------------------------ swiglu */

typedef struct { int N, I; double *inp, *G, *out; } sw_ctx;
static double ref_silu(double x) { return x / (1 + exp(-x)); }
static void ref_swiglu(sw_ctx *c) {
    for (int i = 0; i < c->N; i++)
        for (int j = 0; j < c->I; j++) {
            const double *row = c->inp + (size_t)i * 2 * c->I;
            c->out[(size_t)i * c->I + j] = ref_silu(row[j]) * row[c->I + j];
        }
}
static double sw_loss(void *p) {
    sw_ctx *c = p;
    ref_swiglu(c);
    return dot(c->out, c->G, (size_t)c->N * c->I);
}
static void test_swiglu(int N, int I, double scale) {
    char name[128];
    size_t n = (size_t)N * I;
    float *inp = frand(2 * n, scale), *out = falloc(n), *G = frand(n, 1), *dinp = falloc(2 * n);
    be->swiglu_forward(out, inp, N, I);
    sw_ctx c = {N, I, todouble(inp, 2 * n), todouble(G, n), dalloc(n)};
    ref_swiglu(&c);
    snprintf(name, sizeof name, "swiglu_forward N=%d I=%d gates in +-%g", N, I, scale);
    CHECK_ERR(relerr(out, c.out, n), TOL_FWD, name);
    double *g = dalloc(2 * n);
    fd_grad(sw_loss, &c, c.inp, 2 * n, g);
    fill(dinp, 2 * n, NAN);
    be->swiglu_backward(dinp, inp, G, N, I);
    snprintf(name, sizeof name, "swiglu_backward dgate|dup (overwrites) N=%d I=%d gates in +-%g", N, I, scale);
    CHECK_ERR(relerr(dinp, g, 2 * n), TOL_BWD, name);
}

/* ------------------------------------------------------------------ grouped-query attention */

typedef struct { int B, T, NH, NKV, HD; double *qkv, *G, *out; } gqa_ctx;
static void ref_gqa(gqa_ctx *c) {
    int B = c->B, T = c->T, NH = c->NH, HD = c->HD, W = (NH + 2 * c->NKV) * HD, G = NH / c->NKV;
    double sc = 1.0 / sqrt((double)HD), *s = calloc(T, sizeof(double)); /* temporary */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = c->qkv + ((size_t)b * T + t) * W + h * HD;
                size_t ko = (size_t)NH * HD + (size_t)(h / G) * HD, vo = ko + (size_t)c->NKV * HD;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = c->qkv + ((size_t)b * T + j) * W + ko;
                    s[j] = 0;
                    for (int d = 0; d < HD; d++) s[j] += q[d] * k[d];
                    s[j] *= sc;
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - mx));
                double *o = c->out + ((size_t)b * T + t) * NH * HD + h * HD;
                for (int d = 0; d < HD; d++) {
                    o[d] = 0;
                    for (int j = 0; j <= t; j++) o[d] += s[j] / sum * c->qkv[((size_t)b * T + j) * W + vo + d];
                }
            }
    free(s);
}
static double gqa_loss(void *p) {
    gqa_ctx *c = p;
    ref_gqa(c);
    return dot(c->out, c->G, (size_t)c->B * c->T * c->NH * c->HD);
}
static void test_gqa(int B, int T, int NH, int NKV, int HD, int do_backward) {
    char tag[64], name[160];
    snprintf(tag, sizeof tag, "B=%d T=%d NH=%d NKV=%d HD=%d", B, T, NH, NKV, HD);
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HD, no = (size_t)B * T * NH * HD, na = (size_t)B * NH * T * T;
    float *qkv = frand(nq, 1.5), *out = falloc(no), *att = falloc(na), *G = frand(no, 1);
    fill(att, na, NAN);
    be->attention_gqa_forward(out, att, qkv, B, T, NH, NKV, HD);
    gqa_ctx c = {B, T, NH, NKV, HD, todouble(qkv, nq), todouble(G, no), dalloc(no)};
    ref_gqa(&c);
    snprintf(name, sizeof name, "attention_gqa_forward out %s", tag);
    CHECK_ERR(relerr(out, c.out, no), TOL_FWD, name);
    if (!do_backward) return;
    double *g = dalloc(nq);
    fd_grad(gqa_loss, &c, c.qkv, nq, g);
    float *dqkv = falloc(nq), *datt = falloc(na);
    fill(dqkv, nq, NAN);
    fill(datt, na, NAN);
    be->attention_gqa_backward(dqkv, datt, G, qkv, att, B, T, NH, NKV, HD);
    snprintf(name, sizeof name, "attention_gqa_backward dqkv (overwrites; dk, dv summed over their heads) %s", tag);
    CHECK_ERR(relerr(dqkv, g, nq), TOL_BWD, name);
}

/* with a key/value head per query head it is GPT-2's attention, bit for bit */
static void test_gqa_is_mha(int B, int T, int C, int NH) {
    char name[128];
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = frand(nq, 1.5), *G = frand(no, 1);
    float *o1 = falloc(no), *o2 = falloc(no), *a1 = falloc(na), *a2 = falloc(na), *da = falloc(na);
    float *d1 = falloc(nq), *d2 = falloc(nq);
    be->attention_forward(o1, a1, qkv, B, T, C, NH);
    be->attention_gqa_forward(o2, a2, qkv, B, T, NH, NH, C / NH);
    be->attention_backward(d1, da, G, qkv, a1, B, T, C, NH);
    be->attention_gqa_backward(d2, da, G, qkv, a2, B, T, NH, NH, C / NH);
    snprintf(name, sizeof name, "attention_gqa with NKV = NH is attention_forward/backward bit for bit B=%d T=%d C=%d NH=%d",
             B, T, C, NH);
    CHECK(!memcmp(o1, o2, no * 4) && !memcmp(a1, a2, na * 4) && !memcmp(d1, d2, nq * 4), name, "outputs differ");
}

/* ------------------------------------------------------------------ determinism */

enum { DET_OPS = 6 };
static const char *det_names[DET_OPS] = {"rmsnorm_forward", "rmsnorm_backward", "rope forward+inverse",
                                         "swiglu_forward+backward", "attention_gqa_forward",
                                         "attention_gqa_backward"};
typedef struct { int B, T, C, NH, NKV, HD, I; float *x, *w, *dy, *qkv, *cs, *inp, *g; } det_inputs;
static size_t det_run(const void *ctx, int op, float *o) {
    const det_inputs *d = ctx;
    int N = d->B * d->T, C = d->C, W = (d->NH + 2 * d->NKV) * d->HD;
    size_t nc = (size_t)N * C, nq = (size_t)N * W, no = (size_t)N * d->NH * d->HD, na = (size_t)d->B * d->NH * d->T * d->T;
    switch (op) {
    case 0: be->rmsnorm_forward(o, o + nc, d->x, d->w, 1e-5f, N, C); return nc + N;
    case 1:
        be->rmsnorm_forward(o, o + nc + C, d->x, d->w, 1e-5f, N, C);
        memset(o, 0, (nc + C) * 4);
        be->rmsnorm_backward(o, o + nc, d->dy, d->x, d->w, o + nc + C, N, C);
        return nc + C + N;
    case 2:
        memcpy(o, d->qkv, nq * 4);
        be->rope(o, d->cs, d->B, d->T, d->NH, d->NKV, d->HD, 0);
        memcpy(o + nq, o, nq * 4);
        be->rope(o + nq, d->cs, d->B, d->T, d->NH, d->NKV, d->HD, 1);
        return 2 * nq;
    case 3:
        be->swiglu_forward(o, d->inp, N, d->I);
        be->swiglu_backward(o + (size_t)N * d->I, d->inp, d->g, N, d->I);
        return (size_t)N * 3 * d->I;
    case 4: be->attention_gqa_forward(o, o + no, d->qkv, d->B, d->T, d->NH, d->NKV, d->HD); return no + na;
    case 5: {
        float *att = o + nq, *datt = att + na;
        be->attention_gqa_forward(datt, att, d->qkv, d->B, d->T, d->NH, d->NKV, d->HD);
        be->attention_gqa_backward(o, datt, d->g, d->qkv, att, d->B, d->T, d->NH, d->NKV, d->HD);
        return nq + na;
    }
    }
    return 0;
}
static void test_determinism(void) {
    det_inputs d = {.B = 2, .T = 96, .C = 320, .NH = 8, .NKV = 2, .HD = 32, .I = 4100}; /* I: two pieces a row */
    int N = d.B * d.T, W = (d.NH + 2 * d.NKV) * d.HD;
    d.x = frand((size_t)N * d.C, 2), d.w = frand(d.C, 1), d.dy = frand((size_t)N * d.C, 1);
    d.qkv = frand((size_t)N * W, 1.5), d.cs = rope_table(d.T, d.HD, 10000.0);
    d.inp = frand((size_t)N * 2 * d.I, 4), d.g = frand((size_t)N * d.I, 1);
    size_t cap = (size_t)N * 3 * d.I + 4 * (size_t)d.B * d.NH * d.T * d.T + 2 * (size_t)N * W;
    det_check_ops(det_run, &d, DET_OPS, det_names, cap, "");
}

int main(void) {
    be = zt_backend_cpu();
    test_rmsnorm(6, 16, 1e-6f);
    test_rmsnorm(3, 37, 1e-5f);  /* a tail past the 16-lane blocks */
    test_rmsnorm(2, 150, 1e-5f); /* more than one 64-column block of dw */
    test_rope(2, 5, 4, 2, 8);
    test_rope(1, 7, 3, 1, 16);
    test_rope(2, 33, 8, 8, 64);
    test_swiglu(4, 9, 3);
    test_swiglu(3, 17, 12); /* gates far out on both sides */
    test_gqa(2, 5, 4, 1, 4, 1);  /* multi-query */
    test_gqa(2, 5, 4, 2, 4, 1);  /* NKV = NH / 2 */
    test_gqa(1, 6, 4, 4, 3, 1);  /* multi-head */
    test_gqa(1, 9, 6, 2, 5, 1);  /* groups of 3 */
    test_gqa(2, 64, 8, 2, 16, 0); /* longer rows, forward only (FD would be slow) */
    test_gqa_is_mha(2, 5, 8, 2);
    test_gqa_is_mha(2, 64, 256, 4);
    test_determinism();
    free_all();
    return zt_check_exit();
}
