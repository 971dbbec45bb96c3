/* selftest_ops.c — the op-by-op part of `zerotrain selftest [--device cuda|cpu] [--seed N] [--allow-skip]`: runs every op of
 * the backend op table on random inputs on the CPU reference backend (fp32) and on the device
 * backend, and compares them: on a GPU both CUDA tables, bf16 then fp16, each followed by 20 steps
 * of tiny training. Uses the op table only, so it builds without CUDA.
 *
 * Inputs are rounded to the 16-bit type under test before use, so both backends start from
 * identical numbers and the differences measure only the device's own rounding. The limits below
 * are derived for bf16 and applied to fp16 unchanged: fp16 keeps 11 significant bits, so its
 * roundings are 8x smaller (its range is what loss scaling is for, not precision). Errors are norm-wise relative,
 * err = ||dev - ref|| / ||ref||, against these tolerances:
 *   TOL_ROUND 4e-3  one bf16 rounding of an fp32-exact result: bf16 keeps 8 significant bits, so
 *                   round-to-nearest is off by at most 2^-9 ~ 2e-3 relative per element; 2^-8
 *                   leaves room for fp32 reordering (elementwise ops, embedding forward).
 *   TOL_BF16  1e-2  outputs built from reductions (LayerNorm, GEMMs with K-term fp32 accumulation
 *                   whose result is rounded once, softmax + cross-entropy gradients, column sums):
 *                   still one final rounding, plus fp32 summation-order noise on cancelling sums.
 *   TOL_ATTN  2e-2  attention backward compounds three bf16 roundings (P, dS = d softmax, then
 *                   dq/dk/dv from GEMMs over dS), each ~2^-9. Attention forward uses TOL_BF16: the
 *                   flash kernel rounds P to bf16 before P V (one rounding, averaged over keys).
 *   TOL_F32   1e-5  fp32 outputs from the same inputs with fp32 math (LayerNorm mean/rstd, losses,
 *                   AdamW master/m/v): only operation order and FMA contraction differ (~1e-7).
 *   sumsq     1e-6  relative, double accumulation of squares that are exact in fp32.
 * Conversions (to_compute / to_f32) must match round-to-nearest-even bit for bit, and the ops
 * documented as deterministic must give bitwise identical results when run twice. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "config/config.h"
#include "engine/session.h"
#include "selftest/selftest.h"
#include "util/util.h"

/* ---------------------------------------------------------------- helpers */
static void check_rel(zt_selftest *st, const char *name, const float *dev, const float *ref, size_t n, double tol) {
    zt_selftest_check(st, name, zt_selftest_rel_err(dev, ref, n), tol);
}

/* ---------------------------------------------------------------- conversions */
static void test_conversions(zt_selftest *st, zt_rng *rng) {
    const zt_backend *be = st->dev;
    size_t n = 4099;
    float *h = zt_xmalloc(n * sizeof(float)), *back = st_zeros(n), *want = st_zeros(n);
    for (size_t i = 0; i < n; i++) h[i] = zt_rng_normal(rng) * 3.0f;
    /* exact ties: must round to even */
    union { unsigned u; float f; } t;
    t.u = 0x3f808000u; h[0] = t.f; /* 1.00390625: tie, rounds down to even 1.0 */
    t.u = 0x3f818000u; h[1] = t.f; /* tie, rounds up to even */
    t.u = 0xbf808000u; h[2] = t.f;
    h[3] = 0.0f, h[4] = -0.0f, h[5] = 1e-40f /* subnormal */, h[6] = 3.0e38f, h[7] = -65504.0f;
    for (size_t i = 0; i < n; i++) want[i] = st_round_input(h[i]);
    void *d = st_up_c(be, h, n);
    st_down_c(be, back, d, n);
    double err = be->compute_dtype == ZT_F32 ? (double)st_count_diff(back, h, n) : (double)st_count_diff(back, want, n);
    zt_selftest_check(st, "to_compute+to_f32 (bitwise round-to-nearest-even, mismatches)", err, 0);
    be->free(d);
    free(h), free(back), free(want);
}

/* ---------------------------------------------------------------- embedding */
/* blocks > 1: the table in that many row blocks, wpe with the last (what stage 3 does with a bound) */
static void run_embedding(const zt_backend *be, const int *tok, const float *wte, const float *wpe, const float *dout,
                          const float *dwte0, const float *dwpe0, int V, int B, int T, int C, int blocks, float *out,
                          float *dwte, float *dwpe) {
    size_t BTC = (size_t)B * T * C;
    int *dtok = st_up_i(be, tok, (size_t)B * T);
    void *dwte_w = st_up_c(be, wte, (size_t)V * C), *dwpe_w = st_up_c(be, wpe, (size_t)T * C);
    void *dout_d = st_up_c(be, dout, BTC), *o = st_alloc(be, BTC * zt_dtype_size(be->compute_dtype));
    void *gwte = st_up_c(be, dwte0, (size_t)V * C), *gwpe = st_up_c(be, dwpe0, (size_t)T * C);
    size_t E = zt_dtype_size(be->compute_dtype);
    for (int k = 0; k < blocks; k++) {
        int lo = (int)((long)V * k / blocks), hi = (int)((long)V * (k + 1) / blocks), last = k == blocks - 1;
        be->embedding_forward(o, dtok, (char *)dwte_w + (size_t)lo * C * E, lo, hi, last ? dwpe_w : NULL, B, T, C);
    }
    for (int k = blocks - 1; k >= 0; k--) {
        int lo = (int)((long)V * k / blocks), hi = (int)((long)V * (k + 1) / blocks), last = k == blocks - 1;
        be->embedding_backward((char *)gwte + (size_t)lo * C * E, lo, hi, last ? gwpe : NULL, dout_d, dtok, B, T, C);
    }
    st_down_c(be, out, o, BTC);
    st_down_c(be, dwte, gwte, (size_t)V * C);
    st_down_c(be, dwpe, gwpe, (size_t)T * C);
    be->free(dtok), be->free(dwte_w), be->free(dwpe_w), be->free(dout_d), be->free(o), be->free(gwte), be->free(gwpe);
}
static void test_embedding(zt_selftest *st, zt_rng *rng, int V, int B, int T, int C) {
    char name[128], tag[64];
    snprintf(tag, sizeof tag, "V=%d B=%d T=%d C=%d", V, B, T, C);
    size_t BTC = (size_t)B * T * C;
    int *tok = zt_xmalloc((size_t)B * T * sizeof(int));
    for (int i = 0; i < B * T; i++) tok[i] = (int)(zt_rng_u64(rng) % (uint64_t)V);
    float *wte = st_rnd(rng, (size_t)V * C, 0.5f, 0), *wpe = st_rnd(rng, (size_t)T * C, 0.5f, 0), *dout = st_rnd(rng, BTC, 1, 0);
    float *dwte0 = st_rnd(rng, (size_t)V * C, 0.2f, 0), *dwpe0 = st_rnd(rng, (size_t)T * C, 0.2f, 0);
    float *o[4], *gte[4], *gpe[4];
    for (int k = 0; k < 4; k++) o[k] = st_zeros(BTC), gte[k] = st_zeros((size_t)V * C), gpe[k] = st_zeros((size_t)T * C);
    run_embedding(st->ref, tok, wte, wpe, dout, dwte0, dwpe0, V, B, T, C, 1, o[0], gte[0], gpe[0]);
    run_embedding(st->dev, tok, wte, wpe, dout, dwte0, dwpe0, V, B, T, C, 1, o[1], gte[1], gpe[1]);
    run_embedding(st->dev, tok, wte, wpe, dout, dwte0, dwpe0, V, B, T, C, 1, o[2], gte[2], gpe[2]);
    run_embedding(st->dev, tok, wte, wpe, dout, dwte0, dwpe0, V, B, T, C, 3, o[3], gte[3], gpe[3]);
    snprintf(name, sizeof name, "embedding_forward %s", tag);
    check_rel(st, name, o[1], o[0], BTC, TOL_ROUND);
    snprintf(name, sizeof name, "embedding_backward(dwte) %s", tag);
    check_rel(st, name, gte[1], gte[0], (size_t)V * C, TOL_BF16);
    snprintf(name, sizeof name, "embedding_backward(dwpe) %s", tag);
    check_rel(st, name, gpe[1], gpe[0], (size_t)T * C, TOL_BF16);
    snprintf(name, sizeof name, "embedding_backward(deterministic, mismatches) %s", tag);
    zt_selftest_check(st, name,
                      (double)(st_count_diff(gte[1], gte[2], (size_t)V * C) + st_count_diff(gpe[1], gpe[2], (size_t)T * C)),
                      0);
    snprintf(name, sizeof name, "embedding in 3 row blocks = whole table (mismatches) %s", tag);
    zt_selftest_check(st, name,
                      (double)(st_count_diff(o[3], o[1], BTC) + st_count_diff(gte[3], gte[1], (size_t)V * C) +
                               st_count_diff(gpe[3], gpe[1], (size_t)T * C)),
                      0);
    for (int k = 0; k < 4; k++) free(o[k]), free(gte[k]), free(gpe[k]);
    free(tok), free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0);
}

/* ---------------------------------------------------------------- layernorm */
static void run_ln_fwd(const zt_backend *be, const float *x, const float *w, const float *b, int N, int C, float *out,
                       float *mean, float *rstd) {
    size_t NC = (size_t)N * C;
    void *dx = st_up_c(be, x, NC), *dw = st_up_c(be, w, C), *db = st_up_c(be, b, C);
    void *o = st_alloc(be, NC * zt_dtype_size(be->compute_dtype));
    float *m = st_alloc(be, N * sizeof(float)), *r = st_alloc(be, N * sizeof(float));
    be->layernorm_forward(o, m, r, dx, dw, db, N, C);
    st_down_c(be, out, o, NC);
    st_down_f(be, mean, m, N);
    st_down_f(be, rstd, r, N);
    be->free(dx), be->free(dw), be->free(db), be->free(o), be->free(m), be->free(r);
}
static void run_ln_bwd(const zt_backend *be, const float *x, const float *w, const float *mean, const float *rstd,
                       const float *dout, const float *dinp0, const float *dw0, const float *db0, int N, int C,
                       float *dinp, float *dw, float *db) {
    size_t NC = (size_t)N * C;
    void *dx = st_up_c(be, x, NC), *dwt = st_up_c(be, w, C), *ddout = st_up_c(be, dout, NC);
    float *m = st_up_f(be, mean, N), *r = st_up_f(be, rstd, N);
    void *gi = st_up_c(be, dinp0, NC), *gw = st_up_c(be, dw0, C), *gb = st_up_c(be, db0, C);
    be->layernorm_backward(gi, gw, gb, ddout, dx, dwt, m, r, N, C);
    st_down_c(be, dinp, gi, NC);
    st_down_c(be, dw, gw, C);
    st_down_c(be, db, gb, C);
    be->free(dx), be->free(dwt), be->free(ddout), be->free(m), be->free(r), be->free(gi), be->free(gw), be->free(gb);
}
static void test_layernorm(zt_selftest *st, zt_rng *rng, int N, int C) {
    char name[128];
    size_t NC = (size_t)N * C;
    float *x = st_rnd(rng, NC, 2.0f, 1.0f), *w = st_rnd(rng, C, 0.1f, 1.0f), *b = st_rnd(rng, C, 0.1f, 0);
    float *out[2], *mean[2], *rstd[2];
    for (int k = 0; k < 2; k++) out[k] = st_zeros(NC), mean[k] = st_zeros(N), rstd[k] = st_zeros(N);
    run_ln_fwd(st->ref, x, w, b, N, C, out[0], mean[0], rstd[0]);
    run_ln_fwd(st->dev, x, w, b, N, C, out[1], mean[1], rstd[1]);
    snprintf(name, sizeof name, "layernorm_forward(out) N=%d C=%d", N, C);
    check_rel(st, name, out[1], out[0], NC, TOL_BF16);
    snprintf(name, sizeof name, "layernorm_forward(mean) N=%d C=%d", N, C);
    check_rel(st, name, mean[1], mean[0], N, TOL_F32);
    snprintf(name, sizeof name, "layernorm_forward(rstd) N=%d C=%d", N, C);
    check_rel(st, name, rstd[1], rstd[0], N, TOL_F32);

    /* backward from the reference's mean/rstd, so both start from the same statistics */
    float *dout = st_rnd(rng, NC, 1, 0), *dinp0 = st_rnd(rng, NC, 0.5f, 0), *dw0 = st_rnd(rng, C, 0.5f, 0);
    float *db0 = st_rnd(rng, C, 0.5f, 0);
    float *gi[3], *gw[3], *gb[3];
    for (int k = 0; k < 3; k++) gi[k] = st_zeros(NC), gw[k] = st_zeros(C), gb[k] = st_zeros(C);
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
                      (double)(st_count_diff(gi[1], gi[2], NC) + st_count_diff(gw[1], gw[2], C) + st_count_diff(gb[1], gb[2], C)),
                      0);
    for (int k = 0; k < 3; k++) free(gi[k]), free(gw[k]), free(gb[k]);
    for (int k = 0; k < 2; k++) free(out[k]), free(mean[k]), free(rstd[k]);
    free(x), free(w), free(b), free(dout), free(dinp0), free(dw0), free(db0);
}

/* ---------------------------------------------------------------- matmul */
/* Forward then backward on the block of columns [lo, lo + OC) of rows ld wide (lo > 0: stage 3's LM
 * head in row blocks, out and dout pointing at column lo of the logits); outputs are the block's
 * [N,OC] and everything else. The rest of out holds a marker the op must leave as it is, the rest
 * of dout NaN it must not read (the padding columns too): *outside counts the changed markers, and
 * a NaN read shows in dinp, dw or dbias. */
static const float OUTSIDE_MARK = 3.0f; /* exact in bf16 and fp16 */
static void run_matmul(const zt_backend *be, const float *inp, const float *w, const float *bias, const float *dout,
                       const float *dw0, const float *db0, int N, int C, int OC, int wt, int ld, int lo, float *out,
                       float *dinp, float *dw, float *db, size_t *outside) {
    size_t es = zt_dtype_size(be->compute_dtype), nw = (size_t)C * OC, nrow = (size_t)N * ld;
    void *di = st_up_c(be, inp, (size_t)N * C), *dwt = st_up_c(be, w, nw), *dbias = bias ? st_up_c(be, bias, OC) : NULL;
    float *full = st_zeros(nrow);
    for (size_t i = 0; i < nrow; i++) full[i] = OUTSIDE_MARK;
    void *o = st_up_c(be, full, nrow);
    be->matmul_forward((char *)o + (size_t)lo * es, di, dwt, dbias, N, C, OC, wt, ld);
    st_down_c(be, full, o, nrow);
    *outside = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < ld; j++) {
            float x = full[(size_t)i * ld + j];
            if (j >= lo && j < lo + OC) out[(size_t)i * OC + j - lo] = x;
            else *outside += x != OUTSIDE_MARK;
        }
    for (size_t i = 0; i < nrow; i++) full[i] = NAN;
    for (int i = 0; i < N; i++) memcpy(full + (size_t)i * ld + lo, dout + (size_t)i * OC, OC * sizeof(float));
    void *dd = st_up_c(be, full, nrow);
    free(full);
    void *gi = st_alloc(be, (size_t)N * C * es), *gw = st_up_c(be, dw0, nw), *gb = bias ? st_up_c(be, db0, OC) : NULL;
    be->matmul_backward(gi, gw, gb, (char *)dd + (size_t)lo * es, di, dwt, N, C, OC, wt, ld);
    st_down_c(be, dinp, gi, (size_t)N * C);
    st_down_c(be, dw, gw, nw);
    if (bias) st_down_c(be, db, gb, OC);
    be->free(di), be->free(dwt), be->free(o), be->free(dd), be->free(gi), be->free(gw);
    if (bias) be->free(dbias), be->free(gb);
}
static void test_matmul(zt_selftest *st, zt_rng *rng, int N, int C, int OC, int wt, int ld, int lo, int with_bias) {
    char name[256], tag[112];
    snprintf(tag, sizeof tag, "N=%d C=%d OC=%d%s%s ld=%d%s", N, C, OC, wt ? " w_transposed" : "", with_bias ? " bias" : "",
             ld, lo ? " (block at column " : "");
    if (lo) snprintf(tag + strlen(tag), sizeof tag - strlen(tag), "%d)", lo);
    size_t nw = (size_t)C * OC, outside[2];
    float *inp = st_rnd(rng, (size_t)N * C, 1, 0), *w = st_rnd(rng, nw, 0.1f, 0);
    float *bias = with_bias ? st_rnd(rng, OC, 0.5f, 0) : NULL, *db0 = with_bias ? st_rnd(rng, OC, 0.5f, 0) : NULL;
    float *dout = st_rnd(rng, (size_t)N * OC, 1, 0), *dw0 = st_rnd(rng, nw, 0.5f, 0);
    float *out[2], *gi[2], *gw[2], *gb[2];
    for (int k = 0; k < 2; k++)
        out[k] = st_zeros((size_t)N * OC), gi[k] = st_zeros((size_t)N * C), gw[k] = st_zeros(nw), gb[k] = st_zeros(OC);
    run_matmul(st->ref, inp, w, bias, dout, dw0, db0, N, C, OC, wt, ld, lo, out[0], gi[0], gw[0], gb[0], &outside[0]);
    run_matmul(st->dev, inp, w, bias, dout, dw0, db0, N, C, OC, wt, ld, lo, out[1], gi[1], gw[1], gb[1], &outside[1]);
    snprintf(name, sizeof name, "matmul_forward %s", tag);
    check_rel(st, name, out[1], out[0], (size_t)N * OC, TOL_BF16);
    snprintf(name, sizeof name, "matmul_forward(columns outside the block changed) %s", tag);
    zt_selftest_check(st, name, (double)(outside[0] + outside[1]), 0);
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

/* ---------------------------------------------------------------- tiled linears */
/* Every operand of gemm / add_bias / bias_grad is a column slice: columns [lo, lo + cols) of a
 * row-major [rows, ld] device matrix with ld = lo + cols + pad. The inputs' other columns hold NaN
 * the ops must not read (it would show in their results); the outputs' hold OUTSIDE_MARK they must
 * leave as it is. */
static void *up_slice(const zt_backend *be, const float *x, int rows, int cols, int lo, int pad, float fill) {
    int ld = lo + cols + pad;
    size_t n = (size_t)rows * ld;
    float *full = st_zeros(n);
    for (size_t i = 0; i < n; i++) full[i] = fill;
    for (int i = 0; i < rows; i++) memcpy(full + (size_t)i * ld + lo, x + (size_t)i * cols, cols * sizeof(float));
    void *d = st_up_c(be, full, n);
    free(full);
    return d;
}
/* the slice back into x [rows, cols]; returns how many of the other columns no longer hold OUTSIDE_MARK */
static size_t down_slice(const zt_backend *be, float *x, const void *d, int rows, int cols, int lo, int pad) {
    int ld = lo + cols + pad;
    size_t n = (size_t)rows * ld, changed = 0;
    float *full = st_zeros(n);
    st_down_c(be, full, d, n);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < ld; j++) {
            float v = full[(size_t)i * ld + j];
            if (j >= lo && j < lo + cols) x[(size_t)i * cols + j - lo] = v;
            else changed += v != OUTSIDE_MARK;
        }
    free(full);
    return changed;
}
/* c [M,N] = op(a) op(b) + beta c0 (with beta 0, c's slice starts as NaN: it must not be read);
 * out [M,N] = out0 + bias; db [N] = db0 + the column sums of dout [M,N] */
static void run_tiled(const zt_backend *be, const float *a, const float *b, const float *c0, const float *out0,
                      const float *bias, const float *dout, const float *db0, int M, int N, int K, int ta, int tb,
                      float beta, int lo, int pad, float *c, float *out, float *db, size_t *outside) {
    size_t es = zt_dtype_size(be->compute_dtype);
    int ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    void *da = up_slice(be, a, ra, ca, lo, pad, NAN), *dbm = up_slice(be, b, rb, cb, lo, pad, NAN);
    float *nan_c = NULL;
    if (beta == 0.0f) {
        nan_c = st_zeros((size_t)M * N);
        for (size_t i = 0; i < (size_t)M * N; i++) nan_c[i] = NAN;
    }
    void *dc = up_slice(be, beta == 0.0f ? nan_c : c0, M, N, lo, pad, OUTSIDE_MARK);
    be->gemm((char *)dc + lo * es, (char *)da + lo * es, (char *)dbm + lo * es, M, N, K, lo + ca + pad, lo + cb + pad,
             lo + N + pad, ta, tb, beta);
    *outside = down_slice(be, c, dc, M, N, lo, pad);
    void *dout_ = up_slice(be, out0, M, N, lo, pad, OUTSIDE_MARK), *dbias = st_up_c(be, bias, N);
    be->add_bias((char *)dout_ + lo * es, dbias, M, N, lo + N + pad);
    *outside += down_slice(be, out, dout_, M, N, lo, pad);
    void *dd = up_slice(be, dout, M, N, lo, pad, NAN), *ddb = st_up_c(be, db0, N);
    be->bias_grad(ddb, (char *)dd + lo * es, M, N, lo + N + pad);
    st_down_c(be, db, ddb, N);
    be->free(da), be->free(dbm), be->free(dc), be->free(dout_), be->free(dbias), be->free(dd), be->free(ddb);
    free(nan_c);
}
static void test_tiled(zt_selftest *st, zt_rng *rng, int M, int N, int K, int ta, int tb, float beta, int lo, int pad) {
    char name[256], tag[128];
    snprintf(tag, sizeof tag, "M=%d N=%d K=%d%s%s beta=%g (slices at column %d, %d columns after)", M, N, K,
             ta ? " trans_a" : "", tb ? " trans_b" : "", beta, lo, pad);
    size_t mn = (size_t)M * N, outside[2];
    float *a = st_rnd(rng, (size_t)M * K, 1, 0), *b = st_rnd(rng, (size_t)K * N, 0.1f, 0), *c0 = st_rnd(rng, mn, 1, 0);
    float *out0 = st_rnd(rng, mn, 1, 0), *bias = st_rnd(rng, N, 0.5f, 0), *dout = st_rnd(rng, mn, 1, 0);
    float *db0 = st_rnd(rng, N, 0.5f, 0), *c[2], *out[2], *db[2];
    for (int k = 0; k < 2; k++) c[k] = st_zeros(mn), out[k] = st_zeros(mn), db[k] = st_zeros(N);
    run_tiled(st->ref, a, b, c0, out0, bias, dout, db0, M, N, K, ta, tb, beta, lo, pad, c[0], out[0], db[0], &outside[0]);
    run_tiled(st->dev, a, b, c0, out0, bias, dout, db0, M, N, K, ta, tb, beta, lo, pad, c[1], out[1], db[1], &outside[1]);
    snprintf(name, sizeof name, "gemm %s", tag);
    check_rel(st, name, c[1], c[0], mn, TOL_BF16);
    snprintf(name, sizeof name, "add_bias (with the gemm's) %s", tag);
    check_rel(st, name, out[1], out[0], mn, TOL_ROUND);
    snprintf(name, sizeof name, "bias_grad (with the gemm's) %s", tag);
    check_rel(st, name, db[1], db[0], N, TOL_BF16);
    snprintf(name, sizeof name, "gemm, add_bias(columns outside the slice changed) %s", tag);
    zt_selftest_check(st, name, (double)(outside[0] + outside[1]), 0);
    for (int k = 0; k < 2; k++) free(c[k]), free(out[k]), free(db[k]);
    free(a), free(b), free(c0), free(out0), free(bias), free(dout), free(db0);
}

/* ---------------------------------------------------------------- the MLP's fused GELU GEMMs */
/* up = matmul_forward_gelu (x [N,C] W1 [C,H] + b1 -> pre, act), then the down-projection's
 * matmul_backward_dgelu (dout [N,C] through W2 [H,C] and the GELU at pre) */
static void run_mlp(const zt_backend *be, const float *x, const float *w1, const float *b1, const float *w2,
                    const float *dout, int N, int C, int H, float *pre, float *act, float *dinp, float *dw2, float *db2) {
    size_t es = zt_dtype_size(be->compute_dtype), nh = (size_t)N * H;
    void *dx = st_up_c(be, x, (size_t)N * C), *dw1 = st_up_c(be, w1, (size_t)C * H), *db1 = st_up_c(be, b1, H);
    void *dw2d = st_up_c(be, w2, (size_t)H * C), *dd = st_up_c(be, dout, (size_t)N * C);
    void *dpre = st_alloc(be, nh * es), *dact = st_alloc(be, nh * es), *gi = st_alloc(be, nh * es);
    void *gw = st_alloc(be, (size_t)H * C * es), *gb = st_alloc(be, C * es);
    be->matmul_forward_gelu(dact, dpre, dx, dw1, db1, N, C, H);
    be->matmul_backward_dgelu(gi, gw, gb, dd, dact, dw2d, dpre, N, H, C);
    st_down_c(be, pre, dpre, nh), st_down_c(be, act, dact, nh), st_down_c(be, dinp, gi, nh);
    st_down_c(be, dw2, gw, (size_t)H * C), st_down_c(be, db2, gb, C);
    void *bufs[] = {dx, dw1, db1, dw2d, dd, dpre, dact, gi, gw, gb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->free(bufs[i]);
}
static void test_mlp_gelu(zt_selftest *st, zt_rng *rng, int N, int C, int H) {
    char name[160];
    size_t nh = (size_t)N * H;
    float *x = st_rnd(rng, (size_t)N * C, 1, 0), *w1 = st_rnd(rng, (size_t)C * H, 0.1f, 0), *b1 = st_rnd(rng, H, 0.5f, 0);
    float *w2 = st_rnd(rng, (size_t)H * C, 0.1f, 0), *dout = st_rnd(rng, (size_t)N * C, 1, 0);
    float *pre[2], *act[2], *gi[2], *gw[2], *gb[2];
    for (int k = 0; k < 2; k++)
        pre[k] = st_zeros(nh), act[k] = st_zeros(nh), gi[k] = st_zeros(nh), gw[k] = st_zeros((size_t)H * C), gb[k] = st_zeros(C);
    run_mlp(st->ref, x, w1, b1, w2, dout, N, C, H, pre[0], act[0], gi[0], gw[0], gb[0]);
    run_mlp(st->dev, x, w1, b1, w2, dout, N, C, H, pre[1], act[1], gi[1], gw[1], gb[1]);
    const char *what[] = {"pre-activation", "gelu", "dinp through gelu", "dw", "dbias"};
    float **got[] = {pre, act, gi, gw, gb};
    size_t n[] = {nh, nh, nh, (size_t)H * C, (size_t)C};
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "%s(%s) N=%d C=%d H=%d", i < 2 ? "matmul_forward_gelu" : "matmul_backward_dgelu", what[i], N,
                 C, H);
        check_rel(st, name, got[i][1], got[i][0], n[i], TOL_BF16);
    }
    for (int k = 0; k < 2; k++) free(pre[k]), free(act[k]), free(gi[k]), free(gw[k]), free(gb[k]);
    free(x), free(w1), free(b1), free(w2), free(dout);
}

/* ---------------------------------------------------------------- attention */
/* att is backend-private scratch (the CUDA flash path keeps row statistics there, not
 * probabilities), so each backend runs forward then backward with its own att; out and dqkv are
 * compared. Shapes cover the flash path (head size 32 and 64, T a multiple of the 64-row tile
 * and not, several tiles) and the GEMM fallback (T too small for the flash scratch). */
static void run_attn(const zt_backend *be, const float *qkv, const float *dout, int B, int T, int C, int NH, float *out,
                     float *dqkv) {
    size_t es = zt_dtype_size(be->compute_dtype), natt = (size_t)B * NH * T * T, n3 = (size_t)B * T * 3 * C;
    void *dq = st_up_c(be, qkv, n3), *dd = st_up_c(be, dout, (size_t)B * T * C);
    void *o = st_alloc(be, (size_t)B * T * C * es), *a = st_alloc(be, natt * es), *datt = st_alloc(be, natt * es);
    void *g = st_alloc(be, n3 * es);
    be->attention_forward(o, a, dq, B, T, C, NH);
    be->attention_backward(g, datt, dd, dq, a, B, T, C, NH);
    st_down_c(be, out, o, (size_t)B * T * C);
    st_down_c(be, dqkv, g, n3);
    be->free(dq), be->free(dd), be->free(o), be->free(a), be->free(datt), be->free(g);
}
static void test_attention(zt_selftest *st, zt_rng *rng, int B, int T, int C, int NH, float qk_scale) {
    char name[128], tag[64];
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d NH=%d hs=%d", B, T, C, NH, C / NH);
    size_t n3 = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    float *qkv = st_rnd(rng, n3, 1, 0), *dout = st_rnd(rng, nout, 1, 0);
    /* larger q, k give peaked softmax rows (exercises the online max rescaling) */
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int c = 0; c < 2 * C; c++) qkv[r * 3 * C + c] = st_round_input(qkv[r * 3 * C + c] * qk_scale);
    float *out[3], *g[3];
    for (int k = 0; k < 3; k++) out[k] = st_zeros(nout), g[k] = st_zeros(n3);
    run_attn(st->ref, qkv, dout, B, T, C, NH, out[0], g[0]);
    run_attn(st->dev, qkv, dout, B, T, C, NH, out[1], g[1]);
    run_attn(st->dev, qkv, dout, B, T, C, NH, out[2], g[2]);
    snprintf(name, sizeof name, "attention_forward(out) %s", tag);
    check_rel(st, name, out[1], out[0], nout, TOL_BF16);
    snprintf(name, sizeof name, "attention_backward(dqkv) %s", tag);
    check_rel(st, name, g[1], g[0], n3, TOL_ATTN);
    /* each third of dqkv (dq, dk, dv) on its own, so that one small part cannot hide in the norm */
    static const char *part[3] = {"dq", "dk", "dv"};
    for (int p = 0; p < 3; p++) {
        float *a = st_zeros(nout), *b = st_zeros(nout);
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int c = 0; c < C; c++)
                a[r * C + c] = g[1][r * 3 * C + p * C + c], b[r * C + c] = g[0][r * 3 * C + p * C + c];
        snprintf(name, sizeof name, "attention_backward(%s) %s", part[p], tag);
        check_rel(st, name, a, b, nout, TOL_ATTN);
        free(a), free(b);
    }
    snprintf(name, sizeof name, "attention(deterministic, mismatches) %s", tag);
    zt_selftest_check(st, name, (double)(st_count_diff(out[1], out[2], nout) + st_count_diff(g[1], g[2], n3)), 0);
    for (int k = 0; k < 3; k++) free(out[k]), free(g[k]);
    free(qkv), free(dout);
}

/* ---------------------------------------------------------------- elementwise */
enum { EW_GELU, EW_GELU_BWD, EW_RESIDUAL, EW_ACCUMULATE, EW_SCALE };
static void run_ew(const zt_backend *be, int op, const float *a, const float *b, size_t n, size_t off, float *out) {
    /* off shifts every tensor by `off` elements inside its allocation (unaligned-access path) */
    size_t es = zt_dtype_size(be->compute_dtype);
    float *pa = st_zeros(n + off), *pb = st_zeros(n + off);
    memcpy(pa + off, a, n * sizeof(float));
    memcpy(pb + off, b, n * sizeof(float));
    char *da = st_up_c(be, pa, n + off), *db = st_up_c(be, pb, n + off);
    char *o = st_alloc(be, (n + off) * es);
    void *A = da + off * es, *Bp = db + off * es, *O = o + off * es;
    switch (op) {
    case EW_GELU: be->gelu_forward(O, A, n); break;
    case EW_GELU_BWD: be->gelu_backward(O, A, Bp, n); break;
    case EW_RESIDUAL: be->residual_forward(O, A, Bp, n); break;
    case EW_ACCUMULATE: be->accumulate(A, Bp, n); O = A; break;
    case EW_SCALE: be->scale(A, 0.37f, n); O = A; break;
    }
    float *full = st_zeros(n + off);
    st_down_c(be, full, O == A ? (void *)da : (void *)o, n + off);
    memcpy(out, full + off, n * sizeof(float));
    free(full), free(pa), free(pb);
    be->free(da), be->free(db), be->free(o);
}
static void test_elementwise(zt_selftest *st, zt_rng *rng) {
    static const char *names[] = {"gelu_forward", "gelu_backward", "residual_forward", "accumulate", "scale"};
    size_t n = 4096 + 5; /* vector body + scalar tail */
    float *a = st_rnd(rng, n, 2, 0), *b = st_rnd(rng, n, 1, 0), *r = st_zeros(n), *d = st_zeros(n);
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
    void *dl = st_up_c(be, logits, n);
    int *dt = st_up_i(be, tgt, N);
    float *dloss_d = st_alloc(be, N * sizeof(float));
    be->softmax_xent(dloss_d, NULL, dl, dt, N, V, Vp, dloss);
    st_down_f(be, loss_only, dloss_d, N);
    be->softmax_xent(dloss_d, dl, dl, dt, N, V, Vp, dloss); /* in place, as the engine does */
    st_down_f(be, loss, dloss_d, N);
    st_down_c(be, dlogits, dl, n);
    be->free(dl), be->free(dt), be->free(dloss_d);
}
static void test_xent(zt_selftest *st, zt_rng *rng, int N, int V, int Vp) {
    char name[128], tag[64];
    snprintf(tag, sizeof tag, "N=%d V=%d Vp=%d", N, V, Vp);
    size_t n = (size_t)N * Vp;
    float *logits = st_rnd(rng, n, 3, 0);
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 1e4f; /* padding must never be read */
    int *tgt = zt_xmalloc(N * sizeof(int));
    for (int i = 0; i < N; i++) tgt[i] = (int)(zt_rng_u64(rng) % (uint64_t)V);
    /* fp16 training scales the loss (loss_scale), which keeps dlogits ~ 1/(N V) out of fp16's
     * subnormals; the test does the same */
    float dloss = (st->dev->compute_dtype == ZT_F16 ? 1024.0f : 1.0f) / N;
    float *l0[2], *l[2], *g[2];
    for (int k = 0; k < 2; k++) l0[k] = st_zeros(N), l[k] = st_zeros(N), g[k] = st_zeros(n);
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

/* The vocabulary-parallel pair on the device, as tp ranks run it: the V columns in tp contiguous parts,
 * each in rows of its own stride (a multiple of 8 with vec, for the 16-byte path; else not) whose
 * padding holds 1e4 (never read); every part's stats into one [tp][3N] buffer (the all-gather), then
 * xent_parallel in place per part. Against the reference backend's softmax_xent on the whole rows. */
static void test_xent_tp(zt_selftest *st, zt_rng *rng, int N, int V, int tp, int vec) {
    enum { MAX_TP = 8 };
    const zt_backend *be = st->dev;
    char name[128], tag[64];
    snprintf(tag, sizeof tag, "N=%d V=%d tp=%d%s", N, V, tp, vec ? "" : " (scalar path)");
    float *logits = st_rnd(rng, (size_t)N * V, 3, 0);
    int *tgt = zt_xmalloc(N * sizeof(int));
    for (int i = 0; i < N; i++) tgt[i] = (int)(zt_rng_u64(rng) % (uint64_t)V);
    float dloss = (be->compute_dtype == ZT_F16 ? 1024.0f : 1.0f) / N; /* as test_xent */
    float *l0 = st_zeros(N), *want_l = st_zeros(N), *want_g = st_zeros((size_t)N * V);
    run_xent(st->ref, logits, tgt, N, V, V, dloss, l0, want_l, want_g);
    int *dt = st_up_i(be, tgt, N);
    float *stats = st_alloc(be, 3 * (size_t)tp * N * sizeof(float)), *dloss_d = st_alloc(be, N * sizeof(float));
    int lo[MAX_TP], Vl[MAX_TP], Vpr[MAX_TP];
    void *part[MAX_TP];
    for (int r = 0, next = 0; r < tp; r++) {
        lo[r] = next, Vl[r] = V / tp + (r < V % tp), next += Vl[r];
        Vpr[r] = vec ? (Vl[r] + 15) / 8 * 8 : Vl[r] + ((Vl[r] + 1) % 8 ? 1 : 2);
        float *h = st_zeros((size_t)N * Vpr[r]);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Vpr[r]; j++) h[(size_t)i * Vpr[r] + j] = j < Vl[r] ? logits[(size_t)i * V + lo[r] + j] : 1e4f;
        part[r] = st_up_c(be, h, (size_t)N * Vpr[r]);
        be->xent_partial(stats + 3 * (size_t)r * N, part[r], dt, N, Vl[r], Vpr[r], lo[r]);
        free(h);
    }
    float *l = st_zeros(N), *lr = st_zeros(N), *g = st_zeros((size_t)N * V);
    size_t rank_diff = 0;
    double pad = 0;
    for (int r = 0; r < tp; r++) {
        be->xent_parallel(dloss_d, part[r], part[r], dt, stats, tp, N, Vl[r], Vpr[r], lo[r], dloss);
        st_down_f(be, r ? lr : l, dloss_d, N);
        if (r) rank_diff += st_count_diff(lr, l, N);
        float *h = st_zeros((size_t)N * Vpr[r]);
        st_down_c(be, h, part[r], (size_t)N * Vpr[r]);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Vpr[r]; j++) {
                float v = h[(size_t)i * Vpr[r] + j];
                if (j < Vl[r]) g[(size_t)i * V + lo[r] + j] = v;
                else pad = fmax(pad, fabs(v));
            }
        free(h);
        be->free(part[r]);
    }
    snprintf(name, sizeof name, "xent_partial+xent_parallel(losses) vs softmax_xent %s", tag);
    check_rel(st, name, l, want_l, N, TOL_F32);
    snprintf(name, sizeof name, "xent_partial+xent_parallel(dlogits in place) vs softmax_xent %s", tag);
    check_rel(st, name, g, want_g, (size_t)N * V, TOL_BF16);
    snprintf(name, sizeof name, "xent_parallel(dlogits padding zero, max abs) %s", tag);
    zt_selftest_check(st, name, pad, 0);
    snprintf(name, sizeof name, "xent_parallel(losses differing between ranks) %s", tag);
    zt_selftest_check(st, name, (double)rank_diff, 0);
    be->free(dt), be->free(stats), be->free(dloss_d);
    free(logits), free(tgt), free(l0), free(want_l), free(want_g), free(l), free(lr), free(g);
}

/* NaN logits give a NaN loss, plain and vocabulary-parallel (tp = 2, both parts in rows of their own):
 * row 0 holds one NaN, row 1 is all NaN, row 2's second half (all of part 1, every thread's share of
 * it on a GPU) is NaN, row 3 has none. A max that drops NaN (fmaxf) lets a NaN group look empty and
 * vanish from the loss while the gradients carry it. err: rows whose loss is NaN when it should not
 * be or finite when it should not be, over both checks. */
static void test_xent_nan(zt_selftest *st, int V, int vec) {
    const zt_backend *be = st->dev;
    enum { N = 4 };
    char name[128];
    int Vh = V / 2, Vp = vec ? (V + 7) / 8 * 8 : V, Vph = vec ? (Vh + 7) / 8 * 8 : Vh;
    float *h = st_zeros((size_t)N * Vp);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < V; j++) h[(size_t)i * Vp + j] = (float)((i * 7 + j * 3) % 11) * 0.25f;
    h[0 * Vp + 3] = NAN;
    for (int j = 0; j < V; j++) h[(size_t)1 * Vp + j] = NAN;
    for (int j = Vh; j < V; j++) h[(size_t)2 * Vp + j] = NAN;
    int tgt[N] = {1, 2, 0, V - 1}, *dt = st_up_i(be, tgt, N);
    float *dloss_d = st_alloc(be, N * sizeof(float)), l[N];
    void *d = st_up_c(be, h, (size_t)N * Vp);
    be->softmax_xent(dloss_d, NULL, d, dt, N, V, Vp, 1.0f);
    st_down_f(be, l, dloss_d, N);
    size_t wrong = 0;
    for (int i = 0; i < N; i++) wrong += (i < 3) != (l[i] != l[i]);
    snprintf(name, sizeof name, "softmax_xent(NaN logits give a NaN loss, rows wrong) V=%d%s", V,
             vec ? "" : " (scalar path)");
    zt_selftest_check(st, name, (double)wrong, 0);
    /* the same rows in two parts [0, Vh) and [Vh, V) */
    float *stats = st_alloc(be, 6 * N * sizeof(float));
    void *part[2];
    for (int r = 0; r < 2; r++) {
        int lo = r * Vh, Vl = r ? V - Vh : Vh, Vpr = r ? (vec ? (Vl + 7) / 8 * 8 : Vl) : Vph;
        float *hp = st_zeros((size_t)N * Vpr);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Vl; j++) hp[(size_t)i * Vpr + j] = h[(size_t)i * Vp + lo + j];
        part[r] = st_up_c(be, hp, (size_t)N * Vpr);
        be->xent_partial(stats + 3 * (size_t)r * N, part[r], dt, N, Vl, Vpr, lo);
        free(hp);
    }
    wrong = 0;
    for (int r = 0; r < 2; r++) {
        int lo = r * Vh, Vl = r ? V - Vh : Vh, Vpr = r ? (vec ? (Vl + 7) / 8 * 8 : Vl) : Vph;
        be->xent_parallel(dloss_d, NULL, part[r], dt, stats, 2, N, Vl, Vpr, lo, 1.0f);
        st_down_f(be, l, dloss_d, N);
        for (int i = 0; i < N; i++) wrong += (i < 3) != (l[i] != l[i]);
        be->free(part[r]);
    }
    snprintf(name, sizeof name, "xent_partial+xent_parallel(NaN logits give a NaN loss, rows wrong) V=%d tp=2%s", V,
             vec ? "" : " (scalar path)");
    zt_selftest_check(st, name, (double)wrong, 0);
    be->free(d), be->free(dt), be->free(dloss_d), be->free(stats);
    free(h);
}

/* The tiled forward as the model runs it (row tiles into gemm_f32's fp32 accumulator, round_bias once)
 * against the untiled matmul_forward, both on the device: within one 16-bit rounding element by
 * element, as only the order of fp32 additions differs. The unit is the 16-bit step (ulp) at the
 * element's magnitude, or at the output's RMS for elements below it (a sum that cancels to near zero
 * keeps the fp32 rounding of its terms, many steps of its own tiny ulp). Rounding each tile's partial
 * sum into the 16-bit output instead errs by several steps at the RMS. err: the largest, in steps. */
static void test_tiled_forward(zt_selftest *st, zt_rng *rng, int N, int IN, int OC, int tiles) {
    const zt_backend *be = st->dev;
    char name[128];
    int rows = IN / tiles;
    size_t n = (size_t)N * OC, es = zt_dtype_size(be->compute_dtype);
    float *x = st_rnd(rng, (size_t)N * IN, 1, 0), *w = st_rnd(rng, (size_t)IN * OC, 1, 0), *b = st_rnd(rng, OC, 1, 0);
    void *dx = st_up_c(be, x, (size_t)N * IN), *dw = st_up_c(be, w, (size_t)IN * OC), *db = st_up_c(be, b, OC);
    void *untiled = st_alloc(be, n * es), *tiled = st_alloc(be, n * es);
    float *acc = st_alloc(be, n * sizeof(float));
    be->matmul_forward(untiled, dx, dw, db, N, IN, OC, 0, OC);
    for (int k = 0; k < tiles; k++)
        be->gemm_f32(acc, (const char *)dx + (size_t)k * rows * es, (const char *)dw + (size_t)k * rows * OC * es, N, OC,
                     rows, IN, OC, OC, 0, 0, k ? 1.0f : 0.0f);
    be->round_bias(tiled, acc, db, N, OC, OC);
    float *u = st_zeros(n), *t = st_zeros(n);
    st_down_c(be, u, untiled, n);
    st_down_c(be, t, tiled, n);
    double rms = 0, worst = 0;
    for (size_t i = 0; i < n; i++) rms += (double)u[i] * u[i];
    rms = sqrt(rms / (double)n);
    int mantissa = be->compute_dtype == ZT_F16 ? 10 : 7; /* fp32 (the CPU harness): judged as bf16 */
    for (size_t i = 0; i < n; i++) {
        double step = ldexp(1.0, ilogb(fmax(fabs(u[i]), rms)) - mantissa);
        worst = fmax(worst, fabs((double)t[i] - u[i]) / step);
    }
    snprintf(name, sizeof name, "tiled forward (%d tiles: gemm_f32, round_bias) vs matmul_forward, 16-bit steps N=%d "
             "IN=%d OC=%d", tiles, N, IN, OC);
    zt_selftest_check(st, name, worst, 1.0);
    be->free(dx), be->free(dw), be->free(db), be->free(untiled), be->free(tiled), be->free(acc);
    free(x), free(w), free(b), free(u), free(t);
}

/* ---------------------------------------------------------------- adamw, sumsq */
static void run_adamw(const zt_backend *be, const float *p, const float *m, const float *v, const float *g, size_t n,
                      const zt_adam_step *s, float *po, float *mo, float *vo, float *out) {
    float *dp = st_up_f(be, p, n), *dm = st_up_f(be, m, n), *dv = st_up_f(be, v, n);
    void *dg = st_up_c(be, g, n);
    void *o = be->compute_dtype == ZT_F32 ? NULL : st_alloc(be, n * zt_dtype_size(be->compute_dtype));
    be->adamw(dp, dm, dv, dg, o, n, s);
    st_down_f(be, po, dp, n);
    st_down_f(be, mo, dm, n);
    st_down_f(be, vo, dv, n);
    if (o) st_down_c(be, out, o, n);
    else
        for (size_t i = 0; i < n; i++) out[i] = st_round_input(po[i]);
    be->free(dp), be->free(dm), be->free(dv), be->free(dg);
    if (o) be->free(o);
}
static void test_adamw(zt_selftest *st, zt_rng *rng) {
    size_t n = 10007;
    float *p = st_rnd(rng, n, 0.1f, 0), *m = st_rnd(rng, n, 0.01f, 0), *v = st_rnd(rng, n, 0.01f, 0), *g = st_rnd(rng, n, 1, 0);
    for (size_t i = 0; i < n; i++) v[i] *= v[i];
    zt_adam_step s;
    s.lr = 1e-2f, s.beta1 = 0.9f, s.beta2 = 0.95f, s.eps = 1e-8f, s.weight_decay = 0.1f;
    s.bias_correction1 = 1.0f - powf(0.9f, 3), s.bias_correction2 = 1.0f - powf(0.95f, 3), s.grad_scale = 0.5f;
    float *r[4], *d[4];
    for (int k = 0; k < 4; k++) r[k] = st_zeros(n), d[k] = st_zeros(n);
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
    float *x = st_rnd(rng, n, 1.5f, 0);
    double want = 0;
    for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
    void *dr = st_up_c(st->ref, x, n), *dd = st_up_c(st->dev, x, n);
    double r = st->ref->sumsq(dr, n), d1 = st->dev->sumsq(dd, n), d2 = st->dev->sumsq(dd, n);
    zt_selftest_check(st, "sumsq(reference backend vs double)", fabs(r - want) / want, 1e-6);
    zt_selftest_check(st, "sumsq", fabs(d1 - want) / want, 1e-6);
    zt_selftest_check(st, "sumsq(deterministic, abs diff)", fabs(d1 - d2), 0);
    st->ref->free(dr), st->dev->free(dd);
    free(x);
}

void zt_selftest_ops(zt_selftest *st) {
    st_set_input_dtype(st->dev->compute_dtype == ZT_F16 ? ZT_F16 : ZT_BF16);
    zt_rng rng;
    zt_rng_seed(&rng, st->seed);
    test_conversions(st, &rng);
    test_embedding(st, &rng, 50, 3, 40, 300);  /* few tokens: many repeats; C % 8 != 0: scalar path */
    test_embedding(st, &rng, 100, 4, 64, 256); /* 16-byte path */
    test_layernorm(st, &rng, 64, 128);
    test_layernorm(st, &rng, 50, 100);  /* C % 8 != 0: scalar path */
    test_layernorm(st, &rng, 33, 768);  /* GPT-2 width, 16-byte path */
    test_matmul(st, &rng, 128, 128, 384, 0, 384, 0, 1); /* Conv1D with bias (qkv-like) */
    test_matmul(st, &rng, 96, 128, 250, 1, 256, 0, 0);  /* tied LM head: wte [V,C], V % 8 != 0, padded ld */
    /* stage 3's head in row blocks: the last block at column lo = 128, 2 padding columns after it;
     * its 250 rows rounded up to 64 (256) fit ld = 380 but not the 252 columns left after lo */
    test_matmul(st, &rng, 96, 128, 250, 1, 380, 128, 0);
    test_matmul(st, &rng, 37, 40, 52, 0, 52, 0, 1);     /* odd shapes */
    test_matmul(st, &rng, 33, 24, 19, 1, 21, 0, 1);     /* odd shapes, transposed, odd ld */
    for (int t = 0; t < 4; t++) { /* tiled linears: every (trans_a, trans_b), accumulating and not */
        test_tiled(st, &rng, 64, 96, 48, t & 1, t >> 1, 1.0f, 32, 8); /* 16-byte aligned slices */
        test_tiled(st, &rng, 37, 19, 23, t & 1, t >> 1, 0.0f, 3, 5);  /* odd shapes and offsets */
    }
    test_tiled_forward(st, &rng, 64, 768, 96, 4);
    test_tiled_forward(st, &rng, 37, 96, 40, 3);
    test_mlp_gelu(st, &rng, 128, 64, 256);             /* the MLP's GELU epilogues */
    test_mlp_gelu(st, &rng, 30, 20, 44);               /* odd shapes */
    test_attention(st, &rng, 2, 64, 128, 4, 1.0f);   /* hs 32, one tile */
    test_attention(st, &rng, 1, 33, 96, 3, 1.0f);    /* T too small for flash scratch: GEMM path */
    test_attention(st, &rng, 2, 100, 256, 4, 1.0f);  /* hs 64, partial second tile */
    test_attention(st, &rng, 1, 200, 64, 2, 2.0f);   /* hs 32, four tiles, peaked softmax */
    test_attention(st, &rng, 1, 1024, 128, 2, 1.0f); /* hs 64 at GPT-2's T: 16 tiles */
    test_elementwise(st, &rng);
    test_xent(st, &rng, 64, 250, 256);
    test_xent(st, &rng, 4, 50257, 50304);
    test_xent(st, &rng, 5, 100, 101); /* Vp % 8 != 0: scalar path */
    test_xent_tp(st, &rng, 64, 250, 2, 1);
    test_xent_tp(st, &rng, 4, 50257, 4, 1); /* GPT-2's vocabulary, uneven parts */
    test_xent_tp(st, &rng, 5, 100, 3, 0);
    test_xent_nan(st, 256, 1);
    test_xent_nan(st, 101, 0);
    test_adamw(st, &rng);
    test_sumsq(st, &rng);
    zt_selftest_llama_ops(st, &rng);
}

