/* test_ops.c — the CPU backend's ops against independent double-precision references.
 *
 * For every op: the backend's forward (fp32) is compared with a double-precision reference
 * written here from the formulas (none of the backend's code is reused), and its backward with
 * central finite differences of that reference: for the scalar L = sum(G * out) with a fixed
 * random G, dL/dx by FD equals the backward given dout = G. FD runs in double with step
 * h = 1e-5 * max(1,|x|): truncation error ~h^2 and rounding ~1e-16 |L| / h, both ~1e-10, far
 * below the fp32 errors being measured, so the FD gradient is effectively exact.
 *
 * Errors are normwise: max|got - want| / max|want|. Tolerances:
 *   forward 1e-5  — fp32 has eps 6e-8; sums of <= 32 terms and one exp/tanh/sqrt stay < 1e-6,
 *                   1e-5 leaves margin;
 *   backward 1e-4 — one more level of fp32 arithmetic (LayerNorm's dx subtracts two means and
 *                   multiplies by rstd, softmax backward subtracts a row sum), so ~10x forward.
 * Observed errors are all below 1e-6 (each check prints its error), so a real bug — a wrong
 * index, a missed term, a skipped accumulation — shows up as O(1), far above either tolerance.
 * Backward ops that accumulate get a random prefill R and are checked as (got - R) vs FD; ops
 * that overwrite get a NaN prefill, which would propagate if it were ever read.
 * The vocabulary-parallel cross-entropy (xent_partial + xent_parallel) is checked against
 * softmax_xent on the whole row, which the above checks against the reference.
 * Determinism: every op run twice gives bit-identical output, and the same with 1, 2 and 3
 * OpenMP threads (this backend never splits a reduction across threads). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "ops_ref.h" /* be, buffers, errors, finite differences */

/* ------------------------------------------------------------------ embedding */

typedef struct { int B, T, C; const int *tok; double *wte, *wpe, *G, *out; } emb_ctx;
static void ref_embedding(emb_ctx *c) {
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int k = 0; k < c->C; k++)
                c->out[((size_t)b * c->T + t) * c->C + k] = c->wte[(size_t)c->tok[b * c->T + t] * c->C + k] + c->wpe[(size_t)t * c->C + k];
}
static double emb_loss(void *p) {
    emb_ctx *c = p;
    ref_embedding(c);
    return dot(c->out, c->G, (size_t)c->B * c->T * c->C);
}
static void test_embedding(void) {
    int B = 2, T = 5, C = 19, V = 7;
    int tok[10] = {3, 1, 3, 6, 0, 3, 3, 1, 2, 6}; /* repeats, within and across rows */
    size_t N = (size_t)B * T;
    float *wte = frand((size_t)V * C, 1), *wpe = frand((size_t)T * C, 1), *out = falloc(N * C), *G = frand(N * C, 1);
    be->embedding_forward(out, tok, wte, 0, V, wpe, B, T, C);
    emb_ctx c = {B, T, C, tok, todouble(wte, (size_t)V * C), todouble(wpe, (size_t)T * C), todouble(G, N * C), dalloc(N * C)};
    ref_embedding(&c);
    CHECK_ERR(relerr(out, c.out, N * C), TOL_FWD, "embedding_forward");
    double *gte = dalloc((size_t)V * C), *gpe = dalloc((size_t)T * C);
    fd_grad(emb_loss, &c, c.wte, (size_t)V * C, gte);
    fd_grad(emb_loss, &c, c.wpe, (size_t)T * C, gpe);
    float *dwte = frand((size_t)V * C, 0.5), *dwpe = frand((size_t)T * C, 0.5);
    float *r_te = fcopy(dwte, (size_t)V * C), *r_pe = fcopy(dwpe, (size_t)T * C);
    float *bte = fcopy(dwte, (size_t)V * C), *bpe = fcopy(dwpe, (size_t)T * C);
    be->embedding_backward(dwte, 0, V, dwpe, G, tok, B, T, C);
    CHECK_ERR(relerr_acc(dwte, r_te, gte, (size_t)V * C), TOL_BWD, "embedding_backward dwte (accumulates, repeated tokens)");
    CHECK_ERR(relerr_acc(dwpe, r_pe, gpe, (size_t)T * C), TOL_BWD, "embedding_backward dwpe (accumulates)");

    /* stage 3 with a tight stage3_max_live_parameters runs the table in row blocks, wpe with the
     * last: the result must be the whole table's, bit for bit */
    const int cut[4] = {0, 3, 5, V};
    float *bout = frand(N * C, 1); /* stale contents: every token must be overwritten */
    for (int k = 0; k < 3; k++)
        be->embedding_forward(bout, tok, wte + (size_t)cut[k] * C, cut[k], cut[k + 1], k == 2 ? wpe : NULL, B, T, C);
    for (int k = 2; k >= 0; k--)
        be->embedding_backward(bte + (size_t)cut[k] * C, cut[k], cut[k + 1], k == 2 ? bpe : NULL, G, tok, B, T, C);
    CHECK(memcmp(bout, out, N * C * sizeof *out) == 0, "embedding_forward in 3 row blocks = whole table (bitwise)", "differs");
    CHECK(memcmp(bte, dwte, (size_t)V * C * sizeof *bte) == 0 && memcmp(bpe, dwpe, (size_t)T * C * sizeof *bpe) == 0,
          "embedding_backward in 3 row blocks = whole table (bitwise)", "differs");
}

/* ------------------------------------------------------------------ layernorm */

typedef struct { int N, C; double *x, *w, *b, *G, *out, *mean, *rstd; } ln_ctx;
static void ref_layernorm(ln_ctx *c) {
    for (int i = 0; i < c->N; i++) {
        const double *x = c->x + (size_t)i * c->C;
        double m = 0, v = 0;
        for (int k = 0; k < c->C; k++) m += x[k];
        m /= c->C;
        for (int k = 0; k < c->C; k++) v += (x[k] - m) * (x[k] - m);
        v /= c->C;
        double r = 1.0 / sqrt(v + 1e-5);
        for (int k = 0; k < c->C; k++) c->out[(size_t)i * c->C + k] = (x[k] - m) * r * c->w[k] + c->b[k];
        c->mean[i] = m;
        c->rstd[i] = r;
    }
}
static double ln_loss(void *p) {
    ln_ctx *c = p;
    ref_layernorm(c);
    return dot(c->out, c->G, (size_t)c->N * c->C);
}
static void test_layernorm(int N, int C) {
    char name[128];
    size_t n = (size_t)N * C;
    float *x = frand(n, 2), *w = frand(C, 1), *b = frand(C, 1), *G = frand(n, 1), *out = falloc(n);
    for (size_t i = 0; i < n; i++) x[i] += 3.0f; /* a non-zero mean */
    float *mean = falloc(N), *rstd = falloc(N);
    be->layernorm_forward(out, mean, rstd, x, w, b, N, C);
    ln_ctx c = {N, C, todouble(x, n), todouble(w, C), todouble(b, C), todouble(G, n), dalloc(n), dalloc(N), dalloc(N)};
    ref_layernorm(&c);
    snprintf(name, sizeof name, "layernorm_forward N=%d C=%d", N, C);
    CHECK_ERR(relerr(out, c.out, n), TOL_FWD, name);
    snprintf(name, sizeof name, "layernorm_forward mean,rstd N=%d C=%d", N, C);
    double e = fmax(relerr(mean, c.mean, N), relerr(rstd, c.rstd, N));
    CHECK_ERR(e, TOL_FWD, name);
    double *gx = dalloc(n), *gw = dalloc(C), *gb = dalloc(C);
    fd_grad(ln_loss, &c, c.x, n, gx);
    fd_grad(ln_loss, &c, c.w, C, gw);
    fd_grad(ln_loss, &c, c.b, C, gb);
    float *dx = frand(n, 0.5), *dw = frand(C, 0.5), *db = frand(C, 0.5);
    float *rx = fcopy(dx, n), *rw = fcopy(dw, C), *rb = fcopy(db, C);
    be->layernorm_backward(dx, dw, db, G, x, w, mean, rstd, N, C);
    snprintf(name, sizeof name, "layernorm_backward dinp (accumulates) N=%d C=%d", N, C);
    CHECK_ERR(relerr_acc(dx, rx, gx, n), TOL_BWD, name);
    snprintf(name, sizeof name, "layernorm_backward dw (accumulates) N=%d C=%d", N, C);
    CHECK_ERR(relerr_acc(dw, rw, gw, C), TOL_BWD, name);
    snprintf(name, sizeof name, "layernorm_backward db (accumulates) N=%d C=%d", N, C);
    CHECK_ERR(relerr_acc(db, rb, gb, C), TOL_BWD, name);
}

/* ------------------------------------------------------------------ matmul */

typedef struct { int N, C, OC, wt; double *x, *w, *bias, *G, *out; } mm_ctx;
static void ref_matmul(mm_ctx *c) { /* out[N,OC] = x W + bias; W [C,OC] or, if wt, [OC,C] */
    for (int i = 0; i < c->N; i++)
        for (int o = 0; o < c->OC; o++) {
            double s = c->bias ? c->bias[o] : 0;
            for (int k = 0; k < c->C; k++)
                s += c->x[(size_t)i * c->C + k] * (c->wt ? c->w[(size_t)o * c->C + k] : c->w[(size_t)k * c->OC + o]);
            c->out[(size_t)i * c->OC + o] = s;
        }
}
static double mm_loss(void *p) {
    mm_ctx *c = p;
    ref_matmul(c);
    return dot(c->out, c->G, (size_t)c->N * c->OC);
}
static void test_matmul(int N, int C, int OC, int wt, int ld, int with_bias, int with_dinp) {
    char tag[96], name[192];
    snprintf(tag, sizeof tag, "N=%d C=%d OC=%d%s ld=%d%s%s", N, C, OC, wt ? " w_transposed" : "", ld,
             with_bias ? "" : " no-bias", with_dinp ? "" : " no-dinp");
    size_t nw = (size_t)C * OC;
    float *x = frand((size_t)N * C, 1), *w = frand(nw, 1), *bias = with_bias ? frand(OC, 1) : NULL;
    float *out = falloc((size_t)N * ld), *G = falloc((size_t)N * ld);
    fill(out, (size_t)N * ld, 12345.0f);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < ld; j++) G[(size_t)i * ld + j] = j < OC ? (float)urand() : NAN; /* padding must never be read */
    be->matmul_forward(out, x, w, bias, N, C, OC, wt, ld);
    double *Gd = dalloc((size_t)N * OC);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) Gd[(size_t)i * OC + o] = G[(size_t)i * ld + o];
    mm_ctx c = {N, C, OC, wt, todouble(x, (size_t)N * C), todouble(w, nw), bias ? todouble(bias, OC) : NULL, Gd,
                dalloc((size_t)N * OC)};
    ref_matmul(&c);
    snprintf(name, sizeof name, "matmul_forward %s", tag);
    CHECK_ERR(relerr_ld(out, c.out, N, OC, ld, OC), TOL_FWD, name);
    int untouched = 1;
    for (int i = 0; i < N; i++)
        for (int j = OC; j < ld; j++) untouched &= out[(size_t)i * ld + j] == 12345.0f;
    snprintf(name, sizeof name, "matmul_forward padding columns untouched %s", tag);
    CHECK(untouched, name, "a column >= OC of out was written");

    double *gx = dalloc((size_t)N * C), *gw = dalloc(nw), *gb = dalloc(OC);
    if ((size_t)N * C * OC <= 20000) {
        fd_grad(mm_loss, &c, c.x, (size_t)N * C, gx);
        fd_grad(mm_loss, &c, c.w, nw, gw);
        if (bias) fd_grad(mm_loss, &c, c.bias, OC, gb);
    } else { /* too big for FD (~1e10 flops): the analytic double backward dinp = G W^T,
              * dW = x^T G, dbias = colsum(G) — the same gradient the small cases check by FD */
        for (int i = 0; i < N; i++)
            for (int o = 0; o < OC; o++) {
                double g = Gd[(size_t)i * OC + o];
                gb[o] += g;
                for (int k = 0; k < C; k++) {
                    size_t wi = wt ? (size_t)o * C + k : (size_t)k * OC + o;
                    gx[(size_t)i * C + k] += g * c.w[wi];
                    gw[wi] += g * c.x[(size_t)i * C + k];
                }
            }
    }
    float *dx = falloc((size_t)N * C), *dw = frand(nw, 0.5), *db = frand(OC, 0.5);
    fill(dx, (size_t)N * C, NAN); /* overwritten, so the NaN must not survive */
    float *rw = fcopy(dw, nw), *rb = fcopy(db, OC);
    be->matmul_backward(with_dinp ? dx : NULL, dw, bias ? db : NULL, G, x, w, N, C, OC, wt, ld);
    if (with_dinp) {
        snprintf(name, sizeof name, "matmul_backward dinp (overwrites) %s", tag);
        CHECK_ERR(relerr(dx, gx, (size_t)N * C), TOL_BWD, name);
    }
    snprintf(name, sizeof name, "matmul_backward dw (accumulates) %s", tag);
    CHECK_ERR(relerr_acc(dw, rw, gw, nw), TOL_BWD, name);
    if (bias) {
        snprintf(name, sizeof name, "matmul_backward dbias (accumulates) %s", tag);
        CHECK_ERR(relerr_acc(db, rb, gb, OC), TOL_BWD, name);
    }
}

/* ------------------------------------------------------------------ tiled linears */
/* gemm, add_bias and bias_grad on column slices: each operand is columns [lo, lo + cols) of a
 * row-major [rows, ld] matrix, ld = lo + cols + pad. The inputs' other columns hold NaN (reading
 * them would show in the result), the output's other columns a marker that must stay bit for bit. */
static const float TILE_MARK = 12345.0f;
static float *slice_matrix(int rows, int cols, int lo, int pad, float outside, double scale) {
    int ld = lo + cols + pad;
    float *m = falloc((size_t)rows * ld);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < ld; j++) m[(size_t)i * ld + j] = j >= lo && j < lo + cols ? (float)(scale * urand()) : outside;
    return m;
}
static int outside_kept(const float *m, int rows, int cols, int lo, int pad) {
    int ld = lo + cols + pad, kept = 1;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < ld; j++)
            if (j < lo || j >= lo + cols) kept &= memcmp(&m[(size_t)i * ld + j], &TILE_MARK, sizeof(float)) == 0;
    return kept;
}
static void test_gemm(int M, int N, int K, int ta, int tb, float beta, int lo, int pad) {
    char tag[128], name[192];
    snprintf(tag, sizeof tag, "M=%d N=%d K=%d%s%s beta=%g (slices at column %d)", M, N, K, ta ? " trans_a" : "",
             tb ? " trans_b" : "", beta, lo);
    int ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    int lda = lo + ca + pad, ldb = lo + cb + pad, ldc = lo + N + pad;
    float *a = slice_matrix(ra, ca, lo, pad, NAN, 1), *b = slice_matrix(rb, cb, lo, pad, NAN, 1);
    float *c = slice_matrix(M, N, lo, pad, TILE_MARK, 1);
    if (beta == 0.0f) /* C is only written: a NaN there must not survive */
        for (int i = 0; i < M; i++) fill(c + (size_t)i * ldc + lo, N, NAN);
    double *want = dalloc((size_t)M * N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double sum = beta == 0.0f ? 0.0 : beta * (double)c[(size_t)i * ldc + lo + j];
            for (int k = 0; k < K; k++) {
                double av = ta ? a[(size_t)k * lda + lo + i] : a[(size_t)i * lda + lo + k];
                double bv = tb ? b[(size_t)j * ldb + lo + k] : b[(size_t)k * ldb + lo + j];
                sum += av * bv;
            }
            want[(size_t)i * N + j] = sum;
        }
    be->gemm(c + lo, a + lo, b + lo, M, N, K, lda, ldb, ldc, ta, tb, beta);
    snprintf(name, sizeof name, "gemm %s", tag);
    CHECK_ERR(relerr_ld(c + lo, want, M, N, ldc, N), TOL_FWD, name);
    snprintf(name, sizeof name, "gemm columns outside C's slice untouched %s", tag);
    CHECK(outside_kept(c, M, N, lo, pad), name, "an element outside the written region of C changed");
}
static void test_bias_ops(int N, int OC, int lo, int pad) {
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "N=%d OC=%d ld=%d (slice at column %d)", N, OC, lo + OC + pad, lo);
    int ld = lo + OC + pad;
    float *out = slice_matrix(N, OC, lo, pad, TILE_MARK, 1), *bias = frand(OC, 1);
    double *want = dalloc((size_t)N * OC);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) want[(size_t)i * OC + o] = (double)out[(size_t)i * ld + lo + o] + bias[o];
    be->add_bias(out + lo, bias, N, OC, ld);
    snprintf(name, sizeof name, "add_bias %s", tag);
    CHECK_ERR(relerr_ld(out + lo, want, N, OC, ld, OC), TOL_FWD, name);
    snprintf(name, sizeof name, "add_bias columns outside the slice untouched %s", tag);
    CHECK(outside_kept(out, N, OC, lo, pad), name, "an element outside the slice changed");
    float *dout = slice_matrix(N, OC, lo, pad, NAN, 1), *db = frand(OC, 0.5), *rb = fcopy(db, OC);
    double *gb = dalloc(OC);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) gb[o] += dout[(size_t)i * ld + lo + o];
    be->bias_grad(db, dout + lo, N, OC, ld);
    snprintf(name, sizeof name, "bias_grad (accumulates) %s", tag);
    CHECK_ERR(relerr_acc(db, rb, gb, OC), TOL_FWD, name);
}
/* The tiled linear itself: y = x W + b with W [C, OC] cut into row tiles [c0, c1), each multiplied
 * by x's columns [c0, c1) (gemm, beta 0 for the first tile and 1 after), then add_bias; and its
 * backward, dW's tiles (gemm trans_a), dx's column slices (gemm trans_b) and bias_grad, against
 * matmul_forward / matmul_backward on the whole W. Only the summation order differs. */
static void test_tiled_linear(int N, int C, int OC, int ld, const int *tile_lo, int ntiles) {
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "N=%d C=%d OC=%d ld=%d, %d row tiles", N, C, OC, ld, ntiles);
    size_t nw = (size_t)C * OC;
    float *x = frand((size_t)N * C, 1), *w = frand(nw, 1), *bias = frand(OC, 1), *G = frand((size_t)N * ld, 1);
    float *y_whole = falloc((size_t)N * ld), *y_tiled = falloc((size_t)N * ld);
    be->matmul_forward(y_whole, x, w, bias, N, C, OC, 0, ld);
    for (int t = 0; t < ntiles; t++) {
        int c0 = tile_lo[t], c1 = t + 1 < ntiles ? tile_lo[t + 1] : C;
        be->gemm(y_tiled, x + c0, w + (size_t)c0 * OC, N, OC, c1 - c0, C, OC, ld, 0, 0, t ? 1.0f : 0.0f);
    }
    be->add_bias(y_tiled, bias, N, OC, ld);
    double *want = dalloc((size_t)N * OC);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) want[(size_t)i * OC + o] = y_whole[(size_t)i * ld + o];
    snprintf(name, sizeof name, "tiled linear forward = matmul_forward %s", tag);
    CHECK_ERR(relerr_ld(y_tiled, want, N, OC, ld, OC), TOL_FWD, name);

    float *dx_whole = falloc((size_t)N * C), *dx_tiled = falloc((size_t)N * C);
    float *dw_whole = frand(nw, 0.5), *dw_tiled = fcopy(dw_whole, nw), *db_whole = frand(OC, 0.5),
          *db_tiled = fcopy(db_whole, OC);
    be->matmul_backward(dx_whole, dw_whole, db_whole, G, x, w, N, C, OC, 0, ld);
    for (int t = 0; t < ntiles; t++) {
        int c0 = tile_lo[t], c1 = t + 1 < ntiles ? tile_lo[t + 1] : C;
        /* dW[c0:c1, :] += x[:, c0:c1]^T G;  dx[:, c0:c1] = G W[c0:c1, :]^T */
        be->gemm(dw_tiled + (size_t)c0 * OC, x + c0, G, c1 - c0, OC, N, C, ld, OC, 1, 0, 1.0f);
        be->gemm(dx_tiled + c0, G, w + (size_t)c0 * OC, N, c1 - c0, OC, ld, OC, C, 0, 1, 0.0f);
    }
    be->bias_grad(db_tiled, G, N, OC, ld);
    const float *whole[3] = {dx_whole, dw_whole, db_whole}, *tiled[3] = {dx_tiled, dw_tiled, db_tiled};
    const size_t n[3] = {(size_t)N * C, nw, OC};
    const char *what[3] = {"dinp", "dw", "dbias"};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "tiled linear backward %s = matmul_backward's %s", what[k], tag);
        CHECK_ERR(relerr(tiled[k], todouble(whole[k], n[k]), n[k]), TOL_FWD, name);
    }
}

/* ------------------------------------------------------------------ attention */

typedef struct { int B, T, C, NH; double *qkv, *G, *out, *att; } att_ctx;
static void ref_attention(att_ctx *c) {
    int B = c->B, T = c->T, C = c->C, NH = c->NH, hs = C / NH;
    double sc = 1.0 / sqrt((double)hs), *s = calloc(T, sizeof(double)); /* temporary */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = c->qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = c->qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    s[j] = 0;
                    for (int d = 0; d < hs; d++) s[j] += q[d] * k[d];
                    s[j] *= sc;
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - mx));
                double *a = c->att + (((size_t)b * NH + h) * T + t) * T;
                for (int j = 0; j < T; j++) a[j] = j <= t ? s[j] / sum : 0;
                double *o = c->out + ((size_t)b * T + t) * C + h * hs;
                for (int d = 0; d < hs; d++) {
                    o[d] = 0;
                    for (int j = 0; j <= t; j++) o[d] += a[j] * c->qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + d];
                }
            }
    free(s);
}
static double att_loss(void *p) {
    att_ctx *c = p;
    ref_attention(c);
    return dot(c->out, c->G, (size_t)c->B * c->T * c->C);
}
static void test_attention(int B, int T, int C, int NH, int do_backward) {
    char tag[64], name[160];
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = frand(nq, 1.5), *out = falloc(no), *att = falloc(na), *G = frand(no, 1);
    fill(att, na, NAN);
    be->attention_forward(out, att, qkv, B, T, C, NH);
    att_ctx c = {B, T, C, NH, todouble(qkv, nq), todouble(G, no), dalloc(no), dalloc(na)};
    ref_attention(&c);
    snprintf(name, sizeof name, "attention_forward out %s", tag);
    CHECK_ERR(relerr(out, c.out, no), TOL_FWD, name);
    snprintf(name, sizeof name, "attention_forward att (causal, zeros above diagonal) %s", tag);
    double e = relerr(att, c.att, na);
    int zeros = 1;
    for (size_t bh = 0; bh < (size_t)B * NH; bh++)
        for (int t = 0; t < T; t++)
            for (int j = t + 1; j < T; j++) zeros &= att[(bh * T + t) * T + j] == 0.0f;
    CHECK(e <= TOL_FWD && zeros, name, "normwise error %.3g, zeros above diagonal %d", e, zeros);
    if (!do_backward) return;
    double *g = dalloc(nq);
    fd_grad(att_loss, &c, c.qkv, nq, g);
    float *dqkv = falloc(nq), *datt = falloc(na);
    fill(dqkv, nq, NAN);
    fill(datt, na, NAN);
    be->attention_backward(dqkv, datt, G, qkv, att, B, T, C, NH);
    snprintf(name, sizeof name, "attention_backward dqkv (overwrites) %s", tag);
    CHECK_ERR(relerr(dqkv, g, nq), TOL_BWD, name);
}

/* ------------------------------------------------------------------ gelu, residual, accumulate, scale */

static double ref_gelu(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
typedef struct { size_t n; double *x, *G; } gelu_ctx;
static double gelu_loss(void *p) {
    gelu_ctx *c = p;
    double s = 0;
    for (size_t i = 0; i < c->n; i++) s += c->G[i] * ref_gelu(c->x[i]);
    return s;
}
static void test_gelu(void) {
    size_t n = 1000;
    float *x = frand(n, 5), *out = falloc(n), *G = frand(n, 1), *dx = falloc(n);
    x[0] = 0, x[1] = 1e-30f, x[2] = -20, x[3] = 20;
    be->gelu_forward(out, x, n);
    double *want = dalloc(n);
    for (size_t i = 0; i < n; i++) want[i] = ref_gelu(x[i]);
    CHECK_ERR(relerr(out, want, n), TOL_FWD, "gelu_forward");
    gelu_ctx c = {n, todouble(x, n), todouble(G, n)};
    double *g = dalloc(n);
    fd_grad(gelu_loss, &c, c.x, n, g);
    fill(dx, n, NAN);
    be->gelu_backward(dx, x, G, n);
    CHECK_ERR(relerr(dx, g, n), TOL_BWD, "gelu_backward (overwrites)");
    float *alias = fcopy(G, n);
    be->gelu_backward(alias, x, alias, n);
    CHECK(memcmp(alias, dx, n * sizeof(float)) == 0, "gelu_backward dinp aliasing dout", "differs from the unaliased run");
}

static void test_pointwise(void) {
    size_t n = 1037;
    float *a = frand(n, 1), *b = frand(n, 1), *out = falloc(n);
    double *want = dalloc(n);
    be->residual_forward(out, a, b, n);
    for (size_t i = 0; i < n; i++) want[i] = (double)a[i] + b[i];
    CHECK_ERR(relerr(out, want, n), 1e-7, "residual_forward"); /* one rounding: <= eps/2 */
    float *dst = fcopy(a, n);
    be->accumulate(dst, b, n);
    CHECK_ERR(relerr(dst, want, n), 1e-7, "accumulate (dst += src)");
    float *s = fcopy(a, n);
    be->scale(s, 0.37f, n);
    for (size_t i = 0; i < n; i++) want[i] = (double)a[i] * 0.37f;
    CHECK_ERR(relerr(s, want, n), 1e-7, "scale");
    float *t = falloc(n), *u = falloc(n);
    be->to_compute(t, a, n);
    be->to_f32(u, t, n);
    CHECK(memcmp(u, a, n * sizeof(float)) == 0, "to_compute/to_f32 round trip (fp32 identity)", "not identical");
    float *z = frand(n, 1);
    be->memset_zero(z, n * sizeof(float));
    int allz = 1;
    for (size_t i = 0; i < n; i++) allz &= z[i] == 0.0f;
    float *cp = falloc(n);
    be->copy(cp, a, n * sizeof(float), ZT_D2D);
    CHECK(allz && memcmp(cp, a, n * sizeof(float)) == 0, "memset_zero, copy", "wrong contents");
    unsigned char *big = be->alloc(1 << 20);
    int zero_alloc = big && ((uintptr_t)big & 63) == 0;
    for (size_t i = 0; zero_alloc && i < (1 << 20); i++) zero_alloc &= big[i] == 0;
    unsigned char *odd = be->host_alloc(37);
    zero_alloc &= odd && ((uintptr_t)odd & 63) == 0;
    for (int i = 0; zero_alloc && i < 37; i++) zero_alloc &= odd[i] == 0;
    CHECK(zero_alloc, "alloc/host_alloc zero-filled and 64-byte aligned", "not zeroed or misaligned");
    be->free(big);
    be->host_free(odd);
    be->synchronize();
}

/* ------------------------------------------------------------------ softmax + cross-entropy */

typedef struct { int N, V; const int *tgt; double dloss, *x, *loss; } sx_ctx;
static double sx_loss(void *p) { /* dloss * sum_i loss_i, whose gradient is dlogits */
    sx_ctx *c = p;
    double L = 0;
    for (int i = 0; i < c->N; i++) {
        const double *x = c->x + (size_t)i * c->V;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < c->V; j++) mx = fmax(mx, x[j]);
        for (int j = 0; j < c->V; j++) s += exp(x[j] - mx);
        c->loss[i] = log(s) + mx - x[c->tgt[i]];
        L += c->dloss * c->loss[i];
    }
    return L;
}
static void test_softmax_xent(double offset) {
    char name[160];
    int N = 5, V = 11, Vp = 16;
    int tgt[5] = {0, 10, 3, 3, 7};
    float dloss = 1.0f / N;
    float *logits = falloc((size_t)N * Vp), *losses = falloc(N), *dl = falloc((size_t)N * Vp);
    double *xd = dalloc((size_t)N * V);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < Vp; j++) {
            float v = j < V ? (float)(offset + 4 * urand()) : NAN; /* padding must never be read */
            logits[(size_t)i * Vp + j] = v;
            if (j < V) xd[(size_t)i * V + j] = v;
        }
    fill(dl, (size_t)N * Vp, NAN);
    be->softmax_xent(losses, dl, logits, tgt, N, V, Vp, dloss);
    sx_ctx c = {N, V, tgt, dloss, xd, dalloc(N)};
    sx_loss(&c);
    snprintf(name, sizeof name, "softmax_xent losses (logits around %+g, NaN padding)", offset);
    CHECK_ERR(relerr(losses, c.loss, N), TOL_FWD, name);
    double *g = dalloc((size_t)N * V);
    fd_grad(sx_loss, &c, c.x, (size_t)N * V, g);
    snprintf(name, sizeof name, "softmax_xent dlogits (logits around %+g)", offset);
    CHECK_ERR(relerr_ld(dl, g, N, V, Vp, V), TOL_BWD, name);
    int padz = 1;
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) padz &= dl[(size_t)i * Vp + j] == 0.0f;
    snprintf(name, sizeof name, "softmax_xent dlogits padding zeroed (logits around %+g)", offset);
    CHECK(padz, name, "a padding column of dlogits is not 0");
    /* dlogits aliasing logits gives the same values; dlogits NULL gives the same losses */
    float *al = fcopy(logits, (size_t)N * Vp), *l2 = falloc(N), *l3 = falloc(N);
    be->softmax_xent(l2, al, al, tgt, N, V, Vp, dloss);
    be->softmax_xent(l3, NULL, logits, tgt, N, V, Vp, dloss);
    snprintf(name, sizeof name, "softmax_xent aliased dlogits and NULL dlogits (logits around %+g)", offset);
    CHECK(memcmp(al, dl, (size_t)N * Vp * 4) == 0 && memcmp(l2, losses, N * 4) == 0 && memcmp(l3, losses, N * 4) == 0, name,
          "results differ from the separate-buffer run");
}

/* ------------------------------------------------------------------ vocabulary-parallel cross-entropy */

/* The V logit columns split into tp contiguous parts (the first V % tp parts one column wider), each
 * copied into its own [N, Vl + 3] buffer whose padding holds NaN; xent_partial per part, the stats
 * concatenated in rank order, xent_parallel per part. Against softmax_xent on the whole: losses and
 * each part's dlogits within TOL_FWD (only the fp32 rounding of each part's row sum and the
 * rescaling of the sums differ, ~1e-7); every part's losses bit-identical (the same arithmetic on
 * every rank); padding columns of dlogits zeroed; dlogits aliasing logits and NULL dlogits give the
 * same results. The stats themselves: max and target logit exact, sum within TOL_FWD of double. */
static void test_xent_parallel(int tp, double offset) {
    char name[160], tag[64];
    snprintf(tag, sizeof tag, "tp=%d, logits around %+g", tp, offset);
    int N = 5, V = 11, Vp = 16;
    int tgt[5] = {0, 10, 3, 4, 7};
    float dloss = 1.0f / N;
    float *logits = falloc((size_t)N * Vp), *losses = falloc(N), *dl = falloc((size_t)N * Vp);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < Vp; j++) logits[(size_t)i * Vp + j] = j < V ? (float)(offset + 4 * urand()) : NAN;
    be->softmax_xent(losses, dl, logits, tgt, N, V, Vp, dloss);
    double *want_loss = todouble(losses, N);
    float *stats_all = falloc(3 * (size_t)tp * N), *part[4], *l[4];
    int lo[4], Vl[4];
    double stats_err = 0;
    int stats_exact = 1;
    for (int r = 0, next = 0; r < tp; r++) {
        lo[r] = next, Vl[r] = V / tp + (r < V % tp), next += Vl[r];
        int Vpr = Vl[r] + 3;
        part[r] = falloc((size_t)N * Vpr);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Vpr; j++) part[r][(size_t)i * Vpr + j] = j < Vl[r] ? logits[(size_t)i * Vp + lo[r] + j] : NAN;
        float *st = stats_all + 3 * (size_t)r * N;
        be->xent_partial(st, part[r], tgt, N, Vl[r], Vpr, lo[r]);
        for (int i = 0; i < N; i++) {
            const float *x = part[r] + (size_t)i * Vpr;
            float mx = -INFINITY;
            for (int j = 0; j < Vl[r]; j++) mx = fmaxf(mx, x[j]);
            double s = 0;
            for (int j = 0; j < Vl[r]; j++) s += exp((double)x[j] - mx);
            int t = tgt[i] - lo[r];
            stats_exact &= st[3 * i] == mx && st[3 * i + 2] == (t >= 0 && t < Vl[r] ? x[t] : 0.0f);
            stats_err = fmax(stats_err, fabs(st[3 * i + 1] - s) / s);
        }
    }
    snprintf(name, sizeof name, "xent_partial stats: max and target logit exact (%s)", tag);
    CHECK(stats_exact, name, "a row max or target logit differs");
    snprintf(name, sizeof name, "xent_partial stats: row sums vs double (%s)", tag);
    CHECK_ERR(stats_err, TOL_FWD, name);
    double loss_err = 0, dl_err = 0;
    int padz = 1, same_losses = 1, alias_null_same = 1;
    for (int r = 0; r < tp; r++) {
        int Vpr = Vl[r] + 3;
        size_t n = (size_t)N * Vpr;
        float *d = falloc(n), *al = fcopy(part[r], n), *l2 = falloc(N), *l3 = falloc(N);
        l[r] = falloc(N);
        fill(d, n, NAN);
        be->xent_parallel(l[r], d, part[r], tgt, stats_all, tp, N, Vl[r], Vpr, lo[r], dloss);
        loss_err = fmax(loss_err, relerr(l[r], want_loss, N));
        double *want_dl = dalloc((size_t)N * Vl[r]);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Vl[r]; j++) want_dl[(size_t)i * Vl[r] + j] = dl[(size_t)i * Vp + lo[r] + j];
        dl_err = fmax(dl_err, relerr_ld(d, want_dl, N, Vl[r], Vpr, Vl[r]));
        for (int i = 0; i < N; i++)
            for (int j = Vl[r]; j < Vpr; j++) padz &= d[(size_t)i * Vpr + j] == 0.0f;
        same_losses &= memcmp(l[r], l[0], (size_t)N * 4) == 0;
        be->xent_parallel(l2, al, al, tgt, stats_all, tp, N, Vl[r], Vpr, lo[r], dloss);
        be->xent_parallel(l3, NULL, part[r], tgt, stats_all, tp, N, Vl[r], Vpr, lo[r], dloss);
        alias_null_same &= memcmp(al, d, n * 4) == 0 && memcmp(l2, l[r], (size_t)N * 4) == 0 &&
                           memcmp(l3, l[r], (size_t)N * 4) == 0;
    }
    snprintf(name, sizeof name, "xent_parallel losses vs softmax_xent (%s)", tag);
    CHECK_ERR(loss_err, TOL_FWD, name);
    snprintf(name, sizeof name, "xent_parallel dlogits vs softmax_xent (%s)", tag);
    CHECK_ERR(dl_err, TOL_FWD, name);
    snprintf(name, sizeof name, "xent_parallel losses bit-identical on every rank (%s)", tag);
    CHECK(same_losses, name, "ranks' losses differ");
    snprintf(name, sizeof name, "xent_parallel dlogits padding zeroed (%s)", tag);
    CHECK(padz, name, "a padding column of dlogits is not 0");
    snprintf(name, sizeof name, "xent_parallel aliased dlogits and NULL dlogits (%s)", tag);
    CHECK(alias_null_same, name, "results differ from the separate-buffer run");
}

/* NaN logits give a NaN loss, plain and vocabulary-parallel (tp = 2): a row with one NaN, a row all
 * NaN, and a row whose second part alone is all NaN — that part's max must not look like an empty
 * part's -inf, or its NaN would vanish from the loss while the gradients carry it. Rows without NaN
 * stay finite. */
static void test_xent_nan(void) {
    int N = 4, V = 10, Vp = 16, tgt[4] = {1, 2, 3, 8};
    float *logits = falloc((size_t)N * Vp), *losses = falloc(N), *dl = falloc((size_t)N * Vp);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < Vp; j++) logits[(size_t)i * Vp + j] = j < V ? (float)urand() : 0.0f;
    logits[0 * Vp + 4] = NAN;
    for (int j = 0; j < V; j++) logits[1 * Vp + j] = NAN;
    for (int j = V / 2; j < V; j++) logits[2 * Vp + j] = NAN; /* row 3: no NaN */
    be->softmax_xent(losses, dl, logits, tgt, N, V, Vp, 1.0f);
    int ok = isnan(losses[0]) && isnan(losses[1]) && isnan(losses[2]) && isfinite(losses[3]);
    CHECK(ok, "softmax_xent: NaN logits give a NaN loss", "losses %g %g %g %g", losses[0], losses[1], losses[2],
          losses[3]);
    int Vl = V / 2, Vpr = Vl;
    float *part[2], *stats_all = falloc(6 * (size_t)N), *pl = falloc(N);
    for (int r = 0; r < 2; r++) {
        part[r] = falloc((size_t)N * Vpr);
        for (int i = 0; i < N; i++) memcpy(part[r] + (size_t)i * Vpr, logits + (size_t)i * Vp + r * Vl, Vl * sizeof(float));
        be->xent_partial(stats_all + 3 * (size_t)r * N, part[r], tgt, N, Vl, Vpr, r * Vl);
    }
    ok = 1;
    for (int r = 0; r < 2; r++) {
        be->xent_parallel(pl, NULL, part[r], tgt, stats_all, 2, N, Vl, Vpr, r * Vl, 1.0f);
        ok &= isnan(pl[0]) && isnan(pl[1]) && isnan(pl[2]) && isfinite(pl[3]);
    }
    CHECK(ok, "xent_parallel (tp=2): NaN logits give a NaN loss, also when one part is all NaN", "losses %g %g %g %g",
          pl[0], pl[1], pl[2], pl[3]);
}

/* ------------------------------------------------------------------ adamw */

static void test_adamw(float wd) {
    char name[160];
    size_t n = 257;
    float *p = frand(n, 1), *m = falloc(n), *v = falloc(n), *g = frand(n, 0.1), *out = falloc(n);
    for (size_t i = 0; i < n; i += 7) g[i] = 0.0f;    /* zero gradients */
    for (size_t i = 3; i < n; i += 11) g[i] = 1e-40f; /* denormal gradients */
    for (size_t i = 5; i < n; i += 13) p[i] = 3e-39f; /* denormal parameters */
    p[1] = 0.0f;
    double *pd = todouble(p, n), *md = dalloc(n), *vd = dalloc(n);
    float b1 = 0.9f, b2 = 0.95f;
    double errp = 0, errm = 0, errv = 0;
    int copied = 1;
    for (int t = 1; t <= 3; t++) {
        zt_adam_step s = {.lr = 1e-3f, .beta1 = b1, .beta2 = b2, .eps = 1e-8f, .weight_decay = wd,
                          .bias_correction1 = (float)(1 - pow(b1, t)), .bias_correction2 = (float)(1 - pow(b2, t)),
                          .grad_scale = 0.5f};
        be->adamw(p, m, v, g, out, n, &s);
        for (size_t i = 0; i < n; i++) { /* PyTorch AdamW, in double, from the same fp32 hyper-parameters */
            double gi = (double)g[i] * s.grad_scale;
            md[i] = (double)s.beta1 * md[i] + (1 - (double)s.beta1) * gi;
            vd[i] = (double)s.beta2 * vd[i] + (1 - (double)s.beta2) * gi * gi;
            double mh = md[i] / s.bias_correction1, vh = vd[i] / s.bias_correction2;
            pd[i] -= (double)s.lr * (mh / (sqrt(vh) + s.eps) + (double)s.weight_decay * pd[i]);
            copied &= out[i] == p[i];
        }
    }
    /* per-element relative error, floored at 1e-30 (denormal moments): fp32 arithmetic, ~10 roundings */
    for (size_t i = 0; i < n; i++) {
        errp = fmax(errp, fabs(p[i] - pd[i]) / fmax(fabs(pd[i]), 1e-3 * 1e-3)); /* floor: lr * 1e-3 */
        errm = fmax(errm, fabs(m[i] - md[i]) / fmax(fabs(md[i]), 1e-30));
        errv = fmax(errv, fabs(v[i] - vd[i]) / fmax(fabs(vd[i]), 1e-30));
    }
    snprintf(name, sizeof name, "adamw 3 steps wd=%g params (zero and denormal grads)", wd);
    CHECK(errp <= 1e-5, name, "relative error %.3g", errp);
    snprintf(name, sizeof name, "adamw 3 steps wd=%g moments", wd);
    CHECK(errm <= 1e-5 && errv <= 1e-5, name, "relative error m %.3g v %.3g", errm, errv);
    snprintf(name, sizeof name, "adamw wd=%g params_out mirrors master", wd);
    CHECK(copied, name, "params_out differs from master");
    /* params_out NULL and aliasing master give the same master */
    float *p2 = fcopy(p, n), *m2 = fcopy(m, n), *v2 = fcopy(v, n), *p3 = fcopy(p, n), *m3 = fcopy(m, n), *v3 = fcopy(v, n);
    zt_adam_step s = {1e-3f, b1, b2, 1e-8f, wd, 0.5f, 0.3f, 1.0f};
    be->adamw(p2, m2, v2, g, NULL, n, &s);
    be->adamw(p3, m3, v3, g, p3, n, &s);
    snprintf(name, sizeof name, "adamw wd=%g params_out NULL and aliasing master", wd);
    CHECK(memcmp(p2, p3, n * 4) == 0 && memcmp(m2, m3, n * 4) == 0 && memcmp(v2, v3, n * 4) == 0, name, "differ");
}

/* ------------------------------------------------------------------ sumsq */

static void test_sumsq(size_t n) {
    char name[96];
    float *x = frand(n, 3);
    double want = 0;
    for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
    double got = be->sumsq(x, n);
    /* fp32 squares are exact in double; only ~n double roundings of relative 1e-16 remain */
    double e = fabs(got - want) / fmax(want, 1e-300);
    snprintf(name, sizeof name, "sumsq n=%zu vs double sum", n);
    CHECK(e <= 1e-12 || (n == 0 && got == 0), name, "got %.17g want %.17g", got, want);
}

/* ------------------------------------------------------------------ determinism */

/* Runs every op once on fixed inputs at shapes that make the backend split work across
 * threads (every GEMM of op 4-6 big enough to be cut into 2-4 panels by backend_cpu.c's
 * gemm_plan, several column blocks), writing every output into one buffer; returns its length. */
typedef struct { int B, T, C, NH, V, Vp; int *tok, *tgt; float *in[12]; } det_inputs;
enum { DET_OPS = 13 };
static const char *det_names[DET_OPS] = {"embedding_forward", "embedding_backward", "layernorm_forward",
                                         "layernorm_backward", "matmul_forward", "matmul_backward",
                                         "matmul w_transposed fwd+bwd", "attention_forward", "attention_backward",
                                         "gelu_forward+backward", "softmax_xent", "adamw", "sumsq"};
static size_t det_run(const void *ctx, int op, float *o) {
    const det_inputs *d = ctx;
    int B = d->B, T = d->T, C = d->C, NH = d->NH, V = d->V, Vp = d->Vp, N = B * T;
    size_t nc = (size_t)N * C;
    float *const *in = d->in; /* 0 wte[V,C] 1 wpe 2 x[N,C] 3 dout[N,4C] 4 w[C,4C] 5 bias[4C] 6 qkv[N,3C] 7 dy[N,3C] 8 logits[N,Vp] 9 g[N,4C] */
    switch (op) {
    case 0: be->embedding_forward(o, d->tok, in[0], 0, V, in[1], B, T, C); return nc;
    case 1: memset(o, 0, ((size_t)V + T) * C * 4); be->embedding_backward(o, 0, V, o + (size_t)V * C, in[2], d->tok, B, T, C); return ((size_t)V + T) * C;
    case 2: be->layernorm_forward(o, o + nc, o + nc + N, in[2], in[1], in[1] + C, N, C); return nc + 2 * N;
    case 3: {
        float *mean = o + nc + 2 * C, *rstd = mean + N;
        be->layernorm_forward(o, mean, rstd, in[2], in[1], in[1] + C, N, C);
        memset(o, 0, (nc + 2 * C) * 4);
        be->layernorm_backward(o, o + nc, o + nc + C, in[3], in[2], in[1], mean, rstd, N, C);
        return nc + 2 * C + 2 * N;
    }
    case 4: be->matmul_forward(o, in[2], in[4], in[5], N, C, 4 * C, 0, 4 * C); return nc * 4;
    case 5: memset(o, 0, (4 * (size_t)C * C + 4 * C) * 4);
        be->matmul_backward(o + 4 * (size_t)C * C + 4 * C, o, o + 4 * (size_t)C * C, in[3], in[2], in[4], N, C, 4 * C, 0, 4 * C);
        return 4 * (size_t)C * C + 4 * C + nc;
    case 6: be->matmul_forward(o, in[2], in[0], NULL, N, C, V, 1, Vp);
        memset(o + (size_t)N * Vp, 0, (size_t)V * C * 4);
        be->matmul_backward(o + (size_t)N * Vp + (size_t)V * C, o + (size_t)N * Vp, NULL, in[8], in[2], in[0], N, C, V, 1, Vp);
        return (size_t)N * Vp + (size_t)V * C + nc;
    case 7: be->attention_forward(o, o + nc, in[6], B, T, C, NH); return nc + (size_t)B * NH * T * T;
    case 8: {
        float *att = o + 3 * nc, *datt = att + (size_t)B * NH * T * T;
        be->attention_forward(o, att, in[6], B, T, C, NH);
        be->attention_backward(o, datt, in[7], in[6], att, B, T, C, NH);
        return 3 * nc + 2 * (size_t)B * NH * T * T;
    }
    case 9: be->gelu_forward(o, in[3], 4 * nc); be->gelu_backward(o + 4 * nc, in[3], in[9], 4 * nc); return 8 * nc;
    case 10: memcpy(o + N, in[8], (size_t)N * Vp * 4); be->softmax_xent(o, o + N, o + N, d->tgt, N, V, Vp, 0.25f);
        return N + (size_t)N * Vp;
    case 11: {
        size_t n = 4 * (size_t)C * C;
        memcpy(o, in[4], n * 4); memset(o + n, 0, 2 * n * 4);
        zt_adam_step s = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 0.7f};
        for (int k = 0; k < 2; k++) be->adamw(o, o + n, o + 2 * n, in[9], o + 3 * n, n, &s);
        return 4 * n;
    }
    case 12: { double s = be->sumsq(in[9], 4 * nc); memcpy(o, &s, 8); return 2; }
    }
    return 0;
}
static const char *det_tag = ""; /* appended to the check names: the OpenBLAS core type under test */
static void test_determinism(void) {
    det_inputs d = {.B = 2, .T = 128, .C = 512, .NH = 4, .V = 1000, .Vp = 1024};
    int N = d.B * d.T, C = d.C;
    size_t sizes[10] = {(size_t)d.V * C, (size_t)d.T * C + 2 * C, (size_t)N * C, (size_t)N * 4 * C, 4 * (size_t)C * C,
                        4 * (size_t)C, (size_t)N * 3 * C, (size_t)N * 3 * C, (size_t)N * d.Vp, (size_t)N * 4 * C};
    for (int i = 0; i < 10; i++) d.in[i] = frand(sizes[i], 1);
    d.tok = own(malloc(N * sizeof(int)), 0);
    d.tgt = own(malloc(N * sizeof(int)), 0);
    for (int i = 0; i < N; i++) d.tok[i] = (int)((urand() + 1) * 0.5 * 50) % 50; /* many repeats */
    for (int i = 0; i < N; i++) d.tgt[i] = (int)((urand() + 1) * 0.5 * d.V) % d.V;
    size_t cap = 8 * (size_t)N * C + 4 * (size_t)d.V * C + 16 * (size_t)C * C; /* op 11: 4 vectors of 4C^2 */
    det_check_ops(det_run, &d, DET_OPS, det_names, cap, det_tag);
}

/* `test_ops --determinism`: only the run-twice and thread-count checks, their names tagged with
 * the OpenBLAS core type in use, for test/t_gemm_coretypes.sh, which runs them under every
 * OPENBLAS_CORETYPE this CPU can execute. */
char *openblas_get_corename(void);

int main(int argc, char **argv) {
    be = zt_backend_cpu();
    if (argc > 1 && strcmp(argv[1], "--determinism") == 0) {
        det_tag = openblas_get_corename();
        test_determinism();
        free_all();
        return zt_check_exit();
    }
    CHECK(be && be->compute_dtype == ZT_F32 && strcmp(be->name, "cpu") == 0, "cpu backend table", "bad table");
    /* every entry filled */
    const void *const *slot = (const void *const *)&be->alloc;
    int n_entries = (int)((sizeof(zt_backend) - offsetof(zt_backend, alloc)) / sizeof(void *)), filled = 1;
    for (int i = 0; i < n_entries; i++) filled &= slot[i] != NULL;
    CHECK(filled, "cpu backend: every op entry non-NULL", "a NULL entry");

    test_embedding();
    test_layernorm(6, 16);
    test_layernorm(3, 37);
    test_matmul(5, 7, 19, 0, 19, 1, 1);
    test_matmul(5, 7, 19, 0, 24, 1, 1);  /* padded output stride */
    test_matmul(6, 9, 11, 1, 16, 0, 1);  /* tied LM head: W [V,C], V=11 of Vp=16 */
    test_matmul(6, 9, 11, 1, 16, 0, 0);  /* ... without dinp */
    test_matmul(4, 5, 70, 0, 70, 1, 1);      /* more than one 64-column dbias block, with a tail */
    test_matmul(40, 64, 413, 0, 413, 1, 1);  /* big enough for the backend to split the GEMMs across threads */
    test_matmul(40, 64, 413, 1, 432, 0, 1);  /* ... and transposed with a padded stride */
    for (int t = 0; t < 4; t++) { /* every (trans_a, trans_b), accumulating and not */
        test_gemm(5, 7, 9, t & 1, t >> 1, 0.0f, 3, 4);
        test_gemm(5, 7, 9, t & 1, t >> 1, 1.0f, 2, 5);
        test_gemm(37, 70, 50, t & 1, t >> 1, 1.0f, 6, 3); /* big enough for the backend's panels */
    }
    test_bias_ops(5, 19, 3, 2);
    test_bias_ops(9, 70, 5, 0); /* more than one 64-column block; the slice ends its rows */
    const int tiles3[3] = {0, 10, 17}, tiles_even[3] = {0, 32, 64};
    test_tiled_linear(6, 24, 19, 19, tiles3, 3);      /* uneven tiles */
    test_tiled_linear(40, 96, 70, 72, tiles_even, 3); /* padded output stride */
    test_attention(2, 5, 8, 2, 1);
    test_attention(1, 9, 12, 3, 1);
    test_attention(2, 64, 64, 4, 0);      /* longer rows, forward only (FD would be slow) */
    test_gelu();
    test_pointwise();
    test_softmax_xent(0.0);
    test_softmax_xent(80.0); /* exp(80+) overflows fp32 without max subtraction */
    test_softmax_xent(-80.0);
    for (int tp = 1; tp <= 4; tp++) {
        test_xent_parallel(tp, 0.0);
        test_xent_parallel(tp, 80.0);
    }
    test_xent_nan();
    test_adamw(0.0f);
    test_adamw(0.1f);
    test_sumsq(0);
    test_sumsq(1);
    test_sumsq(3 * 4096 + 123);
    test_sumsq((size_t)4096 * 1024 + 5000); /* crosses the backend's 1024-chunk batches */
    test_determinism();
    free_all();
    return zt_check_exit();
}
