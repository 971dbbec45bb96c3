/* cpu_kernels.c — the CPU backend's vector math (see cpu_kernels.h): exp, GELU and its gradient,
 * the exp row sums of the softmaxes, the softmax backward of attention, LayerNorm forward and
 * backward by rows, and the sum of squares, each at the CPU's widest SIMD; for the Llama family RMSNorm's
 * rows forward and backward, the rotary embedding of a head, SwiGLU and its gradient.
 *
 * Why not libm. The binary is built for x86-64-v2 (SSE4), so glibc's vector tanhf and expf run 4
 * lanes wide, and its scalar ones one: GELU ran at ~9 GB/s and softmax + cross-entropy at ~4 GB/s
 * on an AVX-512 Xeon whose memory streams 4-10x that. Here each kernel is written once, per
 * element, as a chain of IEEE operations whose multiply-adds are explicit fmaf(); the loop is then
 * compiled three times — for AVX-512, for AVX2+FMA, and for the build's baseline (where fmaf() is
 * glibc's correctly rounded function) — and one is chosen at run time.
 *
 * Bit identity. This file is compiled with contraction off (no mul+add fused behind our back, as
 * in cpu_adam.c), and vector lanes round exactly like scalar code, so every element comes out the
 * same on every path, in a vector lane or in a loop's scalar tail, whatever the thread count.
 *
 * exp(x) (Cody & Waite's reduction): n = round(x / ln 2), r = x - n ln 2 in two fmaf steps
 * (ln 2 split in a high part exact in 8 bits and a low part), exp(r) by its degree-7 Taylor
 * polynomial on |r| <= ln2/2 (truncation error < 6e-9 relative, under an ulp), times 2^n built in
 * the exponent bits. x is clamped to [-87, 88] first so 2^n stays a normal float; below -87 the
 * result is 0 (the true value is under 1.7e-38), NaN stays NaN through the comparisons. */
#pragma GCC optimize("fp-contract=off")

#include "backend/cpu_kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu_simd.h"
#include "backend/opmath.h"

#define EXP_LO -87.0f
#define EXP_HI 88.0f
#define EXP_MAGIC 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer, kept in the low bits */
#define LN2_HI 0.693145751953125f
#define LN2_LO 1.428606820309417e-6f
#define LOG2E 1.4426950408889634f

static inline __attribute__((always_inline)) float exp_core(float x) {
    float xc = x < EXP_LO ? EXP_LO : x; /* comparisons, not fminf/fmaxf: NaN must pass through */
    xc = xc > EXP_HI ? EXP_HI : xc;
    float t = fmaf(xc, LOG2E, EXP_MAGIC);
    float n = t - EXP_MAGIC;
    int32_t tb, ni;
    memcpy(&tb, &t, sizeof tb);
    ni = tb - 0x4B400000; /* the bits of EXP_MAGIC: what is left is n, in [-126, 127] */
    float r = fmaf(n, -LN2_HI, xc);
    r = fmaf(n, -LN2_LO, r);
    float p = 1.0f / 5040;
    p = fmaf(p, r, 1.0f / 720);
    p = fmaf(p, r, 1.0f / 120);
    p = fmaf(p, r, 1.0f / 24);
    p = fmaf(p, r, 1.0f / 6);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    uint32_t sb = (uint32_t)(ni + 127) << 23; /* unsigned: a NaN's bits make ni anything (y is NaN anyway) */
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    float y = p * scale;
    return x < EXP_LO ? 0.0f : y;
}

/* GELU through e = exp(-2u): 0.5 x (1 + tanh u) = x s with s = 1 / (1 + e); the derivative
 * 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u' = s + 2 x u' e s^2 (1 - tanh^2 u = 4 e s^2). For
 * x < about -9, e is clamped at exp(88): s is then ~6e-39 and x s ~0, as they should be. */
static inline __attribute__((always_inline)) float gelu_e(float x, float x2) {
    float inner = fmaf(0.044715f * x2, x, x);
    return exp_core(-2.0f * ZT_GELU_SCALE * inner);
}
static inline __attribute__((always_inline)) float gelu_one(float x) {
    float e = gelu_e(x, x * x);
    return x * (1.0f / (1.0f + e));
}
static inline __attribute__((always_inline)) float gelu_grad_one(float x) {
    float x2 = x * x;
    float e = gelu_e(x, x2), s = 1.0f / (1.0f + e);
    float du = ZT_GELU_SCALE * fmaf(3.0f * 0.044715f, x2, 1.0f);
    return fmaf((2.0f * x * du) * (e * s), s, s);
}

/* The loops, written once; each path below is the same code compiled for its instructions. */
static inline __attribute__((always_inline)) void gelu_loop(float *out, const float *inp, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = gelu_one(inp[i]);
}
static inline __attribute__((always_inline)) void gelu_grad_loop(float *dinp, const float *inp, const float *dout,
                                                                 size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) dinp[i] = gelu_grad_one(inp[i]) * dout[i];
}
/* sum_i exp(x_i - shift) in double: 16 interleaved accumulators (element i adds to i mod 16),
 * combined by halving; e (may be NULL or x) keeps the fp32 exps */
static inline __attribute__((always_inline)) double exp_sum_loop(float *e, const float *x, float shift, size_t n) {
    double acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        float blk[16];
#pragma omp simd
        for (int j = 0; j < 16; j++) blk[j] = exp_core(x[i + j] - shift);
        if (e) memcpy(e + i, blk, sizeof blk);
#pragma omp simd
        for (int j = 0; j < 16; j++) acc[j] += blk[j];
    }
    for (int j = 0; i < n; i++, j++) {
        float v = exp_core(x[i] - shift);
        if (e) e[i] = v;
        acc[j] += v;
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}
/* sum_i x_i^2 in double, accumulated as exp_sum_loop's (x_i^2 is exact in double: no rounding
 * for a fused multiply-add to skip) */
static inline __attribute__((always_inline)) double sumsq_loop(const float *x, size_t n) {
    double acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
#pragma omp simd
        for (int j = 0; j < 16; j++) acc[j] += (double)x[i + j] * x[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += (double)x[i] * x[i];
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* Row sums in a fixed order: element i of the row into accumulator i mod 16, then the 16 combined
 * by halving (fp32 here, where exp_sum_loop's are double). Products are rounded before the add
 * (contraction is off), as in the scalar path. */
static inline __attribute__((always_inline)) float combine16(float *acc) {
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}
/* LayerNorm of one row: the mean, the two-pass variance (no cancellation for rows with a large
 * mean), y = (x - mean) * rstd * w + b */
static inline __attribute__((always_inline)) void layernorm_loop(float *y, float *mean, float *rstd, const float *x,
                                                                 const float *w, const float *b, size_t n) {
    float acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
#pragma omp simd
        for (int j = 0; j < 16; j++) acc[j] += x[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += x[i];
    float m = combine16(acc) / (float)n;
    float vacc[16] = {0};
    for (i = 0; i + 16 <= n; i += 16)
#pragma omp simd
        for (int j = 0; j < 16; j++) vacc[j] += (x[i + j] - m) * (x[i + j] - m);
    for (int j = 0; i < n; i++, j++) vacc[j] += (x[i] - m) * (x[i] - m);
    float r = zt_rstd(combine16(vacc) / (float)n);
#pragma omp simd
    for (i = 0; i < n; i++) y[i] = (x[i] - m) * r * w[i] + b[i];
    *mean = m;
    *rstd = r;
}
/* LayerNorm backward of one row: with dnorm = dy w and xhat = (x - mean) rstd, the row means of
 * dnorm and dnorm xhat, then dx += zt_layernorm_dx(...) */
static inline __attribute__((always_inline)) void layernorm_dx_loop(float *dx, const float *dy, const float *x,
                                                                    const float *w, float m, float r, size_t n) {
    float sd[16] = {0}, sdx[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
#pragma omp simd
        for (int j = 0; j < 16; j++) {
            float dn = dy[i + j] * w[i + j];
            sd[j] += dn;
            sdx[j] += dn * (x[i + j] - m) * r;
        }
    for (int j = 0; i < n; i++, j++) {
        float dn = dy[i] * w[i];
        sd[j] += dn;
        sdx[j] += dn * (x[i] - m) * r;
    }
    float dmean = combine16(sd) / (float)n, dxmean = combine16(sdx) / (float)n;
#pragma omp simd
    for (i = 0; i < n; i++) dx[i] += zt_layernorm_dx(dy[i] * w[i], (x[i] - m) * r, r, dmean, dxmean);
}
/* one row's share of LayerNorm's dw and db (element-wise: the rows' order is the caller's) */
static inline __attribute__((always_inline)) void layernorm_dwdb_loop(float *dw, float *db, const float *dy,
                                                                      const float *x, float m, float r, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        dw[i] += dy[i] * ((x[i] - m) * r);
        db[i] += dy[i];
    }
}
/* softmax backward of one row: s = sum_j a_j d_j, then d_j = a_j (d_j - s) scale */
static inline __attribute__((always_inline)) void softmax_backward_loop(float *d, const float *a, float scale, size_t n) {
    float acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
#pragma omp simd
        for (int j = 0; j < 16; j++) acc[j] += a[i + j] * d[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += a[i] * d[i];
    float s = combine16(acc);
#pragma omp simd
    for (i = 0; i < n; i++) d[i] = a[i] * (d[i] - s) * scale;
}

/* RMSNorm of one row: the mean of squares in the fixed order, rstd, y = (x rstd) w */
static inline __attribute__((always_inline)) void rmsnorm_loop(float *y, float *rstd, const float *x, const float *w,
                                                               float eps, size_t n) {
    float acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
#pragma omp simd
        for (int j = 0; j < 16; j++) acc[j] += x[i + j] * x[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += x[i] * x[i];
    float r = zt_rmsnorm_rstd(combine16(acc) / (float)n, eps);
#pragma omp simd
    for (i = 0; i < n; i++) y[i] = x[i] * r * w[i];
    *rstd = r;
}
/* RMSNorm backward of one row: with dxhat = dy w and xhat = x rstd, the row mean of dxhat xhat, then
 * dx += zt_rmsnorm_dx(...) */
static inline __attribute__((always_inline)) void rmsnorm_dx_loop(float *dx, const float *dy, const float *x,
                                                                  const float *w, float r, size_t n) {
    float acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
#pragma omp simd
        for (int j = 0; j < 16; j++) acc[j] += dy[i + j] * w[i + j] * (x[i + j] * r);
    for (int j = 0; i < n; i++, j++) acc[j] += dy[i] * w[i] * (x[i] * r);
    float m = combine16(acc) / (float)n;
#pragma omp simd
    for (i = 0; i < n; i++) dx[i] += zt_rmsnorm_dx(dy[i] * w[i], x[i] * r, r, m);
}
/* one row's share of RMSNorm's dw (element-wise: the rows' order is the caller's) */
static inline __attribute__((always_inline)) void rmsnorm_dw_loop(float *dw, const float *dy, const float *x, float r,
                                                                  size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) dw[i] += dy[i] * (x[i] * r);
}
/* one head's rotary embedding in place: pairs (x[i], x[half + i]) rotated by (cos[i], sign sin[i]) */
static inline __attribute__((always_inline)) void rope_loop(float *x, const float *cos, const float *sin, float sign,
                                                            size_t half) {
#pragma omp simd
    for (size_t i = 0; i < half; i++) {
        float y0, y1;
        zt_rope_pair(&y0, &y1, x[i], x[half + i], cos[i], sign * sin[i]);
        x[i] = y0;
        x[half + i] = y1;
    }
}
/* SwiGLU of n elements: out = silu(gate) up */
static inline __attribute__((always_inline)) void swiglu_loop(float *out, const float *gate, const float *up,
                                                              size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = zt_silu_e(gate[i], exp_core(-gate[i])) * up[i];
}
/* its gradient: dgate = dout up silu'(gate), dup = dout silu(gate) (gate and up read before either is written) */
static inline __attribute__((always_inline)) void swiglu_grad_loop(float *dgate, float *dup, const float *gate,
                                                                   const float *up, const float *dout, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i], d = dout[i], e = exp_core(-g);
        dgate[i] = d * u * zt_silu_grad_e(g, e);
        dup[i] = d * zt_silu_e(g, e);
    }
}

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,prefer-vector-width=512")))
#define AVX2 __attribute__((target("avx2,fma")))
#define PATHS(ret, name, params, args, loop)                      \
    AVX512 static ret name##_avx512 params { return loop args; } \
    AVX2 static ret name##_avx2 params { return loop args; }     \
    static ret name##_scalar params { return loop args; }
PATHS(void, vgelu, (float *out, const float *inp, size_t n), (out, inp, n), gelu_loop)
PATHS(void, vgelu_grad, (float *dinp, const float *inp, const float *dout, size_t n), (dinp, inp, dout, n), gelu_grad_loop)
PATHS(double, vexp_sum, (float *e, const float *x, float shift, size_t n), (e, x, shift, n), exp_sum_loop)
PATHS(double, vsumsq, (const float *x, size_t n), (x, n), sumsq_loop)
PATHS(void, vlayernorm, (float *y, float *mean, float *rstd, const float *x, const float *w, const float *b, size_t n),
      (y, mean, rstd, x, w, b, n), layernorm_loop)
PATHS(void, vlayernorm_dx, (float *dx, const float *dy, const float *x, const float *w, float m, float r, size_t n),
      (dx, dy, x, w, m, r, n), layernorm_dx_loop)
PATHS(void, vlayernorm_dwdb, (float *dw, float *db, const float *dy, const float *x, float m, float r, size_t n),
      (dw, db, dy, x, m, r, n), layernorm_dwdb_loop)
PATHS(void, vsoftmax_backward, (float *d, const float *a, float scale, size_t n), (d, a, scale, n), softmax_backward_loop)
PATHS(void, vrmsnorm, (float *y, float *rstd, const float *x, const float *w, float eps, size_t n),
      (y, rstd, x, w, eps, n), rmsnorm_loop)
PATHS(void, vrmsnorm_dx, (float *dx, const float *dy, const float *x, const float *w, float r, size_t n),
      (dx, dy, x, w, r, n), rmsnorm_dx_loop)
PATHS(void, vrmsnorm_dw, (float *dw, const float *dy, const float *x, float r, size_t n), (dw, dy, x, r, n),
      rmsnorm_dw_loop)
PATHS(void, vrope, (float *x, const float *cos, const float *sin, float sign, size_t half), (x, cos, sin, sign, half),
      rope_loop)
PATHS(void, vswiglu, (float *out, const float *gate, const float *up, size_t n), (out, gate, up, n), swiglu_loop)
PATHS(void, vswiglu_grad, (float *dgate, float *dup, const float *gate, const float *up, const float *dout, size_t n),
      (dgate, dup, gate, up, dout, n), swiglu_grad_loop)

/* ------------------------------------------------------------------ which path */

static int forced_path = ZT_VEC_BEST;

int zt_vec_best(void) {
    zt_simd simd = zt_cpu_simd(NULL);
    return simd == ZT_SIMD_AVX512 ? ZT_VEC_AVX512 : simd == ZT_SIMD_AVX2 ? ZT_VEC_AVX2 : ZT_VEC_SCALAR;
}
const char *zt_vec_name(int path) { return path == ZT_VEC_AVX512 ? "avx512" : path == ZT_VEC_AVX2 ? "avx2" : "scalar"; }
void zt_vec_force(int path) { forced_path = path; }

static int path_now(void) {
    static int best_cached = -2; /* cpuid once; threads that race here all store the same value */
    int best = __atomic_load_n(&best_cached, __ATOMIC_RELAXED);
    if (best == -2) __atomic_store_n(&best_cached, best = zt_vec_best(), __ATOMIC_RELAXED);
    return forced_path < 0 || forced_path > best ? best : forced_path;
}
#define DISPATCH(name, args)                                                                   \
    (path_now() == ZT_VEC_AVX512 ? name##_avx512 args : path_now() == ZT_VEC_AVX2 ? name##_avx2 args \
                                                                                  : name##_scalar args)

void zt_vec_gelu(float *out, const float *inp, size_t n) { DISPATCH(vgelu, (out, inp, n)); }
void zt_vec_gelu_grad(float *dinp, const float *inp, const float *dout, size_t n) {
    DISPATCH(vgelu_grad, (dinp, inp, dout, n));
}
double zt_vec_exp_sum(float *e, const float *x, float shift, size_t n) { return DISPATCH(vexp_sum, (e, x, shift, n)); }
double zt_vec_sumsq(const float *x, size_t n) { return DISPATCH(vsumsq, (x, n)); }
void zt_vec_layernorm(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b, size_t n) {
    DISPATCH(vlayernorm, (y, mean, rstd, x, w, b, n));
}
void zt_vec_layernorm_dx(float *dx, const float *dy, const float *x, const float *w, float mean, float rstd, size_t n) {
    DISPATCH(vlayernorm_dx, (dx, dy, x, w, mean, rstd, n));
}
void zt_vec_layernorm_dwdb(float *dw, float *db, const float *dy, const float *x, float mean, float rstd, size_t n) {
    DISPATCH(vlayernorm_dwdb, (dw, db, dy, x, mean, rstd, n));
}
void zt_vec_softmax_backward(float *d, const float *a, float scale, size_t n) {
    DISPATCH(vsoftmax_backward, (d, a, scale, n));
}
void zt_vec_rmsnorm(float *y, float *rstd, const float *x, const float *w, float eps, size_t n) {
    DISPATCH(vrmsnorm, (y, rstd, x, w, eps, n));
}
void zt_vec_rmsnorm_dx(float *dx, const float *dy, const float *x, const float *w, float rstd, size_t n) {
    DISPATCH(vrmsnorm_dx, (dx, dy, x, w, rstd, n));
}
void zt_vec_rmsnorm_dw(float *dw, const float *dy, const float *x, float rstd, size_t n) {
    DISPATCH(vrmsnorm_dw, (dw, dy, x, rstd, n));
}
void zt_vec_rope(float *x, const float *cos, const float *sin, int inverse, size_t half) {
    DISPATCH(vrope, (x, cos, sin, inverse ? -1.0f : 1.0f, half));
}
void zt_vec_swiglu(float *out, const float *gate, const float *up, size_t n) { DISPATCH(vswiglu, (out, gate, up, n)); }
void zt_vec_swiglu_grad(float *dgate, float *dup, const float *gate, const float *up, const float *dout, size_t n) {
    DISPATCH(vswiglu_grad, (dgate, dup, gate, up, dout, n));
}
