/* test_cpu_kernels.c — the CPU backend's vector math (src/backend/cpu_kernels.c):
 *   - exp against double-precision exp: within 2 ulp on [-87, 88] (a dense sweep), exactly 0 below
 *     -87, exp(88) above 88, NaN for NaN;
 *   - GELU and its derivative against the formula in double over [-12, 12] and at +-1e4: relative
 *     error within 2^-21 max(1, |2u|) (4 ulp, more where exp(-2u) is large: 2u is rounded to
 *     fp32 first), the derivative within 2^-21 (max(1, |2u|) |g| + s) (its two terms cancel near
 *     x = -0.75), and within 1e-24 absolute where the value is ~0 (exp(-2u) is clamped at exp(88),
 *     so far below -10 the derivative is ~1e-27 rather than ~0);
 *   - the exp row sum and the sum of squares against double sums;
 *   - every path this CPU runs (scalar, AVX2, AVX-512) gives the same bits for every kernel, on
 *     lengths that are not multiples of any vector width, with NaN, infinities and denormals in;
 *   - LayerNorm's row forward, its backward's dx and dw/db, and attention's softmax backward
 *     against the formulas in double, and the same bits on every path;
 *   - the Llama family's kernels (RMSNorm's row forward, dx and dw; a head's rotary embedding and its
 *     inverse; SwiGLU and its gradient, with NaN, infinities and large gates in): the same bits on
 *     every path, and near the formulas in double (SwiGLU within 2^-20 relative of silu's own value);
 *   - the exp row sum depends on the row's values alone: the same row at every float offset of a
 *     64-byte line, in place or not, gives the bits of the documented order (element i into
 *     accumulator i mod 16, then halving), on every path. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backend/cpu_kernels.h"

/* The tanh form 0.5 x (1 + tanh u) in double, written as x sigmoid(2u) (the same function) so that
 * it keeps its digits where tanh u rounds to -1 (x below about -9); the derivative likewise:
 * 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u' = s + 2 x u' s (1 - s), s = sigmoid(2u). */
static double ref_sigmoid2u(double x) { return 1 / (1 + exp(-2 * sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
static double ref_gelu(double x) { return x * ref_sigmoid2u(x); }
static double ref_gelu_grad(double x) {
    double s = ref_sigmoid2u(x), du = sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
    return s + 2 * x * du * s * (1 - s);
}

/* error in units of the float ulp at the true value */
/* e[i] = exp(x[i] - shift): the exps zt_vec_exp_sum keeps */
static void vec_exp(float *e, const float *x, float shift, size_t n) { (void)zt_vec_exp_sum(e, x, shift, n); }

static double ulps(float got, double want) {
    double ulp = ldexp(1.0, ilogb(want == 0 ? 1e-38 : want) - 23);
    return fabs(got - want) / ulp;
}

static void test_exp(void) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof(float)), *e = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) x[i] = -87.0f + 175.0f * i / (N - 1);
    vec_exp(e, x, 0.0f, N);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double u = ulps(e[i], exp((double)x[i]));
        if (u > worst) worst = u;
    }
    char name[96];
    snprintf(name, sizeof name, "exp within 2 ulp on [-87, 88] (%s)", zt_vec_name(zt_vec_best()));
    CHECK(worst <= 2.0, name, "worst %.2f ulp", worst);
    float sp[6] = {-87.5f, -1000.0f, -INFINITY, 89.0f, INFINITY, NAN}, out[6];
    vec_exp(out, sp, 0.0f, 6);
    CHECK(out[0] == 0 && out[1] == 0 && out[2] == 0 && isfinite(out[3]) &&
              out[3] == out[4] && fabs(out[3] / exp(88.0) - 1) < 1e-6 && isnan(out[5]),
          "exp: 0 below -87, exp(88) above 88, NaN for NaN", "got %g %g %g %g %g %g", out[0], out[1], out[2], out[3], out[4],
          out[5]);
    free(x), free(e);
}

static void test_gelu(void) {
    enum { N = 200003 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    float *one = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) x[i] = -12.0f + 24.0f * i / (N - 1), one[i] = 1.0f;
    x[0] = -1e4f, x[1] = 1e4f, x[2] = 0.0f, x[3] = -0.0f;
    zt_vec_gelu(y, x, N);
    zt_vec_gelu_grad(g, x, one, N);
    double wf = 0, wg = 0;
    for (int i = 0; i < N; i++) {
        /* the float kernel rounds 2u before exp(-2u): a relative error of ~|2u| ulp in e, and so in
         * the result where e is large; the derivative's two terms cancel near x = -0.75 */
        double rf = ref_gelu(x[i]), rg = ref_gelu_grad(x[i]), sg = ref_sigmoid2u(x[i]);
        double amp = fmax(1.0, 2 * sqrt(2 / M_PI) * fabs(x[i] + 0.044715 * x[i] * x[i] * x[i]));
        double tf = 0x1p-21 * fabs(rf) * amp, tg = 0x1p-21 * (fabs(rg) * amp + sg);
        double ef = fabs(y[i] - rf) / fmax(tf, 1e-24), eg = fabs(g[i] - rg) / fmax(tg, 1e-24);
        if (ef > wf) wf = ef;
        if (eg > wg) wg = eg;
    }
    CHECK(wf <= 1, "gelu within 2^-21 max(1, |2u|) relative on [-12, 12] and at +-1e4", "worst %.2f x the tolerance", wf);
    CHECK(wg <= 1, "gelu derivative within 2^-21 (max(1, |2u|) |g| + s) on [-12, 12] and at +-1e4",
          "worst %.2f x the tolerance", wg);
    free(x), free(y), free(g), free(one);
}

static void test_sums(void) {
    enum { N = 50257 };
    float *x = malloc(N * sizeof(float)), *e = malloc(N * sizeof(float));
    double want = 0, want2 = 0;
    for (int i = 0; i < N; i++) {
        x[i] = (float)(8.0 * sin(i * 0.37));
        want += exp((double)x[i] - 8.0);
        want2 += (double)x[i] * x[i];
    }
    double s = zt_vec_exp_sum(e, x, 8.0f, N), s0 = zt_vec_exp_sum(NULL, x, 8.0f, N);
    int kept = 1;
    for (int i = 0; i < N; i++) kept &= ulps(e[i], exp((double)(x[i] - 8.0f))) <= 2; /* x - shift rounds in fp32 */
    CHECK(fabs(s / want - 1) < 1e-6 && s == s0 && kept, "exp_sum: the sum within 1e-6, the exps kept, NULL e the same sum",
          "sum %.9g want %.9g (NULL e: %.9g)", s, want, s0);
    double q = zt_vec_sumsq(x, N);
    CHECK(fabs(q / want2 - 1) < 1e-12, "sumsq within 1e-12 of the double sum", "%.15g want %.15g", q, want2);
    free(x), free(e);
}

/* every kernel on every path this CPU runs: the same bits as the scalar path */
static void test_paths_agree(void) {
    enum { N = 4099 }; /* a multiple of no vector width */
    float *x = malloc(N * sizeof(float)), *d = malloc(N * sizeof(float));
    uint32_t s = 7;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = 20.0f * ((float)(s >> 8) / 16777216.0f - 0.5f);
        d[i] = (float)(s % 1000) / 999.0f - 0.5f;
    }
    float special[] = {NAN, INFINITY, -INFINITY, 1e-40f, -1e-40f, 0.0f, -0.0f, 1e30f, -1e30f, 88.5f, -87.2f};
    memcpy(x, special, sizeof special);
    float *out[3][4];
    double sums[3][2];
    int best = zt_vec_best();
    for (int p = ZT_VEC_SCALAR; p <= best; p++) {
        zt_vec_force(p);
        for (int k = 0; k < 4; k++) out[p][k] = malloc(N * sizeof(float));
        vec_exp(out[p][0], x, 0.5f, N);
        zt_vec_gelu(out[p][1], x, N);
        zt_vec_gelu_grad(out[p][2], x, d, N);
        sums[p][0] = zt_vec_exp_sum(out[p][3], x + 11, 9.5f, N - 11);
        sums[p][1] = zt_vec_sumsq(x + 11, N - 11);
    }
    zt_vec_force(ZT_VEC_BEST);
    static const char *kernel[] = {"exp", "gelu", "gelu_grad", "exp_sum's exps"};
    for (int p = ZT_VEC_SCALAR + 1; p <= best; p++) {
        char name[96];
        for (int k = 0; k < 4; k++) {
            snprintf(name, sizeof name, "%s: %s path = scalar path, bit for bit", kernel[k], zt_vec_name(p));
            CHECK(memcmp(out[p][k], out[0][k], (k == 3 ? N - 11 : N) * sizeof(float)) == 0, name, "differs");
        }
        snprintf(name, sizeof name, "exp_sum and sumsq: %s path = scalar path, bit for bit", zt_vec_name(p));
        CHECK(sums[p][0] == sums[0][0] && sums[p][1] == sums[0][1], name, "%.17g %.17g vs %.17g %.17g", sums[p][0],
              sums[p][1], sums[0][0], sums[0][1]);
    }
    for (int p = ZT_VEC_SCALAR; p <= best; p++)
        for (int k = 0; k < 4; k++) free(out[p][k]);
    free(x), free(d);
}

/* LayerNorm's rows and the softmax backward: near the formula in double, and the same bits on
 * every path, at lengths below, at and past whole 16-lane blocks */
static void test_row_kernels(void) {
    static const int lens[] = {1, 7, 16, 33, 768, 4099};
    enum { MAXN = 4099 };
    float *x = malloc(MAXN * sizeof(float)), *w = malloc(MAXN * sizeof(float)), *b = malloc(MAXN * sizeof(float));
    float *dy = malloc(MAXN * sizeof(float)), *a = malloc(MAXN * sizeof(float));
    float *out[3][5];
    float stats[3][2];
    uint32_t s = 5;
    for (int i = 0; i < MAXN; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = 3.0f + 4.0f * ((float)(s >> 8) / 16777216.0f - 0.5f); /* a mean away from 0 */
        w[i] = 1.0f + (float)(s % 977) / 977.0f, b[i] = (float)(s % 613) / 613.0f - 0.5f;
        dy[i] = (float)((s >> 4) % 1009) / 1009.0f - 0.5f, a[i] = (float)(s % 499 + 1) / 499.0f / MAXN;
    }
    int best = zt_vec_best(), same = 1, near = 1;
    char why[200] = "";
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int n = lens[li];
        for (int p = ZT_VEC_SCALAR; p <= best; p++) {
            zt_vec_force(p);
            for (int k = 0; k < 5; k++) out[p][k] = calloc(n, sizeof(float));
            zt_vec_layernorm(out[p][0], &stats[p][0], &stats[p][1], x, w, b, n);
            zt_vec_layernorm_dx(out[p][1], dy, x, w, stats[p][0], stats[p][1], n);
            zt_vec_layernorm_dwdb(out[p][2], out[p][3], dy, x, stats[p][0], stats[p][1], n);
            memcpy(out[p][4], dy, n * sizeof(float));
            zt_vec_softmax_backward(out[p][4], a, 0.125f, n);
        }
        zt_vec_force(ZT_VEC_BEST);
        for (int p = ZT_VEC_SCALAR + 1; p <= best; p++)
            for (int k = 0; k < 5; k++)
                if (memcmp(out[p][k], out[0][k], n * sizeof(float)) || memcmp(stats[p], stats[0], sizeof stats[0])) {
                    if (same) snprintf(why, sizeof why, "n %d: output %d of the %s path differs", n, k, zt_vec_name(p));
                    same = 0;
                }
        /* the formulas in double */
        double m = 0, v = 0, sd = 0, sdx = 0, sa = 0;
        for (int i = 0; i < n; i++) m += x[i];
        m /= n;
        for (int i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
        double r = 1 / sqrt(v / n + 1e-5);
        for (int i = 0; i < n; i++) sd += dy[i] * w[i], sdx += dy[i] * w[i] * (x[i] - m) * r, sa += a[i] * dy[i];
        sd /= n, sdx /= n;
        double err = fabs(stats[0][0] - m) + fabs(stats[0][1] / r - 1);
        for (int i = 0; i < n; i++) {
            double xh = (x[i] - m) * r;
            err = fmax(err, fabs(out[0][0][i] - (xh * w[i] + b[i])));
            err = fmax(err, fabs(out[0][1][i] - r * (dy[i] * w[i] - sd - xh * sdx)) / r);
            err = fmax(err, fabs(out[0][2][i] - dy[i] * xh) + fabs(out[0][3][i] - dy[i]));
            err = fmax(err, fabs(out[0][4][i] - a[i] * (dy[i] - sa) * 0.125) * MAXN);
        }
        if (near && err > 1e-4) {
            near = 0;
            snprintf(why + strlen(why), sizeof why - strlen(why), " n %d: off the double formulas by %.3g", n, err);
        }
        for (int p = ZT_VEC_SCALAR; p <= best; p++)
            for (int k = 0; k < 5; k++) free(out[p][k]);
    }
    CHECK(same, "layernorm, its dx and dw/db, softmax backward: every path = scalar path, bit for bit", "%s", why);
    CHECK(near, "layernorm, its dx and dw/db, softmax backward: within 1e-4 of the formulas in double", "%s", why);
    free(x), free(w), free(b), free(dy), free(a);
}

/* The exp row sum depends on the row's values only, not on where the row starts (a row of a
 * padded logits matrix, a vocab shard's part of it) nor on e aliasing x: the same values at each
 * of the 16 float offsets of a 64-byte line, on every path, give the bits of the documented order
 * summed here from the kernel's own exps. */
static void test_exp_sum_values_only(void) {
    static const int lens[] = {1, 15, 16, 17, 33, 100, 25129, 50257};
    enum { MAXN = 50257, PAD = 16 };
    float *vals = malloc(MAXN * sizeof(float)), *ex = malloc(MAXN * sizeof(float));
    float *buf = aligned_alloc(64, (MAXN + PAD) * sizeof(float)), *e = aligned_alloc(64, (MAXN + PAD) * sizeof(float));
    uint32_t s = 11;
    for (int i = 0; i < MAXN; i++) {
        s = s * 1664525u + 1013904223u;
        vals[i] = 12.0f * ((float)(s >> 8) / 16777216.0f) - 10.0f;
    }
    int bad = 0;
    char why[160] = "";
    for (int p = ZT_VEC_SCALAR; p <= zt_vec_best(); p++) {
        zt_vec_force(p);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int n = lens[li];
            zt_vec_force(ZT_VEC_SCALAR); /* the exps, from the plain C path */
            vec_exp(ex, vals, 1.5f, (size_t)n);
            zt_vec_force(p);
            double acc[16] = {0};
            for (int i = 0; i < n; i++) acc[i % 16] += ex[i];
            for (int w = 8; w >= 1; w /= 2)
                for (int j = 0; j < w; j++) acc[j] += acc[j + w];
            for (int off = 0; off < PAD; off++) {
                memcpy(buf + off, vals, (size_t)n * sizeof(float));
                double apart = zt_vec_exp_sum(e + off, buf + off, 1.5f, (size_t)n);
                int same_exps = memcmp(e + off, ex, (size_t)n * sizeof(float)) == 0;
                double inplace = zt_vec_exp_sum(buf + off, buf + off, 1.5f, (size_t)n);
                same_exps &= memcmp(buf + off, ex, (size_t)n * sizeof(float)) == 0;
                if (!bad && (apart != acc[0] || inplace != acc[0] || !same_exps)) {
                    bad = 1;
                    snprintf(why, sizeof why, "%s path, n %d, offset %d: %.17g, in place %.17g, want %.17g, exps %s",
                             zt_vec_name(p), n, off, apart, inplace, acc[0], same_exps ? "same" : "differ");
                }
            }
        }
    }
    zt_vec_force(ZT_VEC_BEST);
    CHECK(!bad, "exp_sum: the bits of the documented order at every offset, in place or not, on every path", "%s", why);
    free(vals), free(ex), free(buf), free(e);
}

/* the Llama family's kernels: the same bits on every path, near the formulas in double */
static double ref_silu(double x) { return x / (1 + exp(-x)); }
static double ref_silu_grad(double x) {
    double sg = 1 / (1 + exp(-x));
    return sg * (1 + x * (1 - sg));
}
static void test_llama_kernels(void) {
    static const int lens[] = {1, 7, 16, 33, 768, 4099};
    enum { MAXN = 4099, K = 8 };
    float *x = malloc(MAXN * sizeof(float)), *w = malloc(MAXN * sizeof(float)), *dy = malloc(MAXN * sizeof(float));
    float *cs = malloc(MAXN * sizeof(float)), *sn = malloc(MAXN * sizeof(float)), *out[3][K], rstd[3];
    uint32_t s = 11;
    for (int i = 0; i < MAXN; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = 24.0f * ((float)(s >> 8) / 16777216.0f - 0.5f);
        w[i] = 1.0f + (float)(s % 977) / 977.0f, dy[i] = (float)((s >> 4) % 1009) / 1009.0f - 0.5f;
        cs[i] = cosf(0.37f * i), sn[i] = sinf(0.37f * i);
    }
    int best = zt_vec_best(), same = 1, near = 1;
    char why[200] = "";
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int n = lens[li], half = n / 2;
        for (int p = ZT_VEC_SCALAR; p <= best; p++) {
            zt_vec_force(p);
            for (int k = 0; k < K; k++) out[p][k] = calloc(n + 1, sizeof(float));
            zt_vec_rmsnorm(out[p][0], &rstd[p], x, w, 1e-6f, n);
            zt_vec_rmsnorm_dx(out[p][1], dy, x, w, rstd[p], n);
            zt_vec_rmsnorm_dw(out[p][2], dy, x, rstd[p], n);
            memcpy(out[p][3], x, n * sizeof(float));
            zt_vec_rope(out[p][3], cs, sn, 0, half);
            memcpy(out[p][4], out[p][3], n * sizeof(float));
            zt_vec_rope(out[p][4], cs, sn, 1, half);
            zt_vec_swiglu(out[p][5], x, dy, n);
            zt_vec_swiglu_grad(out[p][6], out[p][7], x, dy, w, n);
        }
        zt_vec_force(ZT_VEC_BEST);
        for (int p = ZT_VEC_SCALAR + 1; p <= best; p++)
            for (int k = 0; k < K; k++)
                if (memcmp(out[p][k], out[0][k], n * sizeof(float)) || rstd[p] != rstd[0]) {
                    if (same) snprintf(why, sizeof why, "n %d: output %d of the %s path differs", n, k, zt_vec_name(p));
                    same = 0;
                }
        double ms = 0, sdx = 0;
        for (int i = 0; i < n; i++) ms += (double)x[i] * x[i];
        double r = 1 / sqrt(ms / n + 1e-6);
        for (int i = 0; i < n; i++) sdx += dy[i] * w[i] * x[i] * r;
        sdx /= n;
        double err = fabs(rstd[0] / r - 1);
        for (int i = 0; i < n; i++) {
            double xh = x[i] * r, g = x[i];
            err = fmax(err, fabs(out[0][0][i] - xh * w[i]) / 4);
            err = fmax(err, fabs(out[0][1][i] - r * (dy[i] * w[i] - xh * sdx)) / r);
            err = fmax(err, fabs(out[0][2][i] - dy[i] * xh));
            err = fmax(err, fabs(out[0][4][i] - x[i]) / 16); /* the inverse undoes the rotation */
            err = fmax(err, fabs(out[0][5][i] - ref_silu(g) * dy[i]) / fmax(1, fabs(ref_silu(g) * dy[i])) * 16);
            err = fmax(err, fabs(out[0][6][i] - w[i] * dy[i] * ref_silu_grad(g)) * 16);
            err = fmax(err, fabs(out[0][7][i] - w[i] * ref_silu(g)) / fmax(1, fabs(w[i] * ref_silu(g))) * 16);
        }
        for (int i = 0; i < half; i++) {
            double y0 = (double)x[i] * cs[i] - (double)x[half + i] * sn[i], y1 = (double)x[half + i] * cs[i] + (double)x[i] * sn[i];
            err = fmax(err, (fabs(out[0][3][i] - y0) + fabs(out[0][3][half + i] - y1)) / 16);
        }
        if (n % 2) err = fmax(err, out[0][3][n - 1] == x[n - 1] ? 0 : 1); /* past the pairs: untouched */
        if (near && err > 1e-5) {
            near = 0;
            snprintf(why + strlen(why), sizeof why - strlen(why), " n %d: off the double formulas by %.3g", n, err);
        }
        for (int p = ZT_VEC_SCALAR; p <= best; p++)
            for (int k = 0; k < K; k++) free(out[p][k]);
    }
    CHECK(same, "rmsnorm, its dx and dw, rope and its inverse, swiglu and its gradient: every path = scalar, bit for bit",
          "%s", why);
    CHECK(near, "rmsnorm, rope, swiglu: within 1e-5 of the formulas in double (relative to the values' scale)", "%s", why);
    /* SwiGLU's edges: a gate past exp's range either way, infinities, NaN (a gate of +inf has a NaN gradient:
     * inf (1 - sigmoid) is inf 0) */
    float g[] = {-200.0f, -90.0f, 90.0f, 200.0f, INFINITY, -INFINITY, NAN, 0.0f}, u[8], o[3][8], dg[3][8], du[3][8];
    for (int i = 0; i < 8; i++) u[i] = 1.5f;
    int edges_same = 1;
    for (int p = ZT_VEC_SCALAR; p <= best; p++) { /* a NaN's sign may differ between paths: NaN = NaN here */
        zt_vec_force(p);
        zt_vec_swiglu(o[p], g, u, 8);
        zt_vec_swiglu_grad(dg[p], du[p], g, u, u, 8);
        for (int i = 0; i < 8; i++)
            edges_same &= (isnan(o[p][i]) ? isnan(o[0][i]) : !memcmp(&o[p][i], &o[0][i], 4)) &&
                          (isnan(dg[p][i]) ? isnan(dg[0][i]) : !memcmp(&dg[p][i], &dg[0][i], 4)) &&
                          (isnan(du[p][i]) ? isnan(du[0][i]) : !memcmp(&du[p][i], &du[0][i], 4));
    }
    zt_vec_force(ZT_VEC_BEST);
    int edges_ok = fabsf(o[0][0]) < 1e-30f && fabsf(o[0][1]) < 1e-30f && o[0][2] == 90.0f * 1.5f &&
                   o[0][3] == 200.0f * 1.5f && o[0][4] == INFINITY && isnan(o[0][6]) && o[0][7] == 0.0f &&
                   fabsf(dg[0][0]) < 1e-30f && dg[0][3] == 1.5f * 1.5f && isnan(dg[0][6]);
    CHECK(edges_same && edges_ok, "swiglu at gates past exp's range, infinite and NaN: finite limits, NaN kept, every path",
          "same %d; out %g %g %g %g %g %g; dgate %g %g", edges_same, o[0][0], o[0][1], o[0][2], o[0][3], o[0][4],
          o[0][6], dg[0][0], dg[0][3]);
    free(x), free(w), free(dy), free(cs), free(sn);
}

int main(void) {
    test_exp();
    test_gelu();
    test_sums();
    test_paths_agree();
    test_exp_sum_values_only();
    test_row_kernels();
    test_llama_kernels();
    return zt_check_exit();
}
