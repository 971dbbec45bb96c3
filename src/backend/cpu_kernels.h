/* cpu_kernels.h — the CPU backend's vector math at the CPU's widest SIMD: the exp row sums
 * (the softmaxes), attention's softmax backward, LayerNorm's rows forward and backward, GELU and
 * its gradient, the sum of squares; the Llama family's RMSNorm rows, rotary embedding and SwiGLU.
 *
 * Each kernel has three paths, chosen once at run time from cpuid (zt_cpu_simd): AVX-512 (16
 * lanes), AVX2+FMA (8 lanes), and plain C whose fused multiply-adds are fmaf() calls. The paths
 * compute the same IEEE operations in the same order, so they agree bit for bit: a result does not
 * depend on which one the CPU takes (test_ops checks every path this CPU runs). The kernels are
 * serial over their range; the backend splits a large array among its OpenMP threads.
 *
 * Accuracy (measured by test_ops against double-precision math over the ranges the ops see):
 *   exp        within 2 ulp for x in [-87, 88]; 0 below -87 (where exp underflows to subnormals),
 *              exp(88) above 88, NaN for NaN;
 *   GELU       GPT-2's tanh form computed as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
 *              (the same function: 0.5 (1 + tanh(u)) = sigmoid(2u)), within a few ulp, and its
 *              derivative s + 2 x u' e s^2 with s = sigmoid(2u), e = exp(-2u), likewise. */
#ifndef ZT_CPU_KERNELS_H
#define ZT_CPU_KERNELS_H

#include <stddef.h>

/* The paths, ordered; ZT_VEC_BEST = the widest this CPU runs (an unsupported one falls back to it). */
enum { ZT_VEC_SCALAR = 0, ZT_VEC_AVX2 = 1, ZT_VEC_AVX512 = 2, ZT_VEC_BEST = -1 };
int zt_vec_best(void);
const char *zt_vec_name(int path); /* "scalar", "avx2", "avx512" */
/* Test hook: every later call takes `path` (ZT_VEC_BEST restores the default). */
void zt_vec_force(int path);

/* out[i] = gelu(inp[i]) (out may be inp) */
void zt_vec_gelu(float *out, const float *inp, size_t n);
/* dinp[i] = gelu'(inp[i]) * dout[i] (dinp may be dout) */
void zt_vec_gelu_grad(float *dinp, const float *inp, const float *dout, size_t n);
/* sum_i exp(x[i] - shift) in double, the fp32 exps also kept in e when e is not NULL (e may be x).
 * The sum's order is fixed (16 interleaved accumulators, element i into i mod 16, then combined by
 * halving): the result depends on x and n only. */
double zt_vec_exp_sum(float *e, const float *x, float shift, size_t n);
/* sum_i x[i]^2 in double, in the same order */
double zt_vec_sumsq(const float *x, size_t n);

/* The row kernels below sum in fp32 in the same fixed order (element i into accumulator i mod 16,
 * combined by halving): a result depends on the row's values and length only. */
/* LayerNorm of one row of n: mean, rstd = 1/sqrt(var + eps) (two-pass variance), and
 * y[i] = (x[i] - mean) * rstd * w[i] + b[i] */
void zt_vec_layernorm(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b, size_t n);
/* LayerNorm backward of one row: dx[i] += rstd (dnorm_i - mean(dnorm) - xhat_i mean(dnorm xhat)),
 * dnorm = dy w, xhat = (x - mean) rstd (zt_layernorm_dx) */
void zt_vec_layernorm_dx(float *dx, const float *dy, const float *x, const float *w, float mean, float rstd, size_t n);
/* one row's share of LayerNorm's parameter gradients: dw[i] += dy[i] xhat_i, db[i] += dy[i] */
void zt_vec_layernorm_dwdb(float *dw, float *db, const float *dy, const float *x, float mean, float rstd, size_t n);
/* softmax backward of one row of n: s = sum_j a[j] d[j], then d[j] = a[j] (d[j] - s) scale */
void zt_vec_softmax_backward(float *d, const float *a, float scale, size_t n);
/* RMSNorm of one row of n (opmath.h's formulas): rstd = 1/sqrt(mean(x^2) + eps), y[i] = x[i] rstd w[i] */
void zt_vec_rmsnorm(float *y, float *rstd, const float *x, const float *w, float eps, size_t n);
/* its backward of one row: dx[i] += rstd (dxhat_i - xhat_i mean(dxhat xhat)), dxhat = dy w, xhat = x rstd */
void zt_vec_rmsnorm_dx(float *dx, const float *dy, const float *x, const float *w, float rstd, size_t n);
/* one row's share of RMSNorm's dw: dw[i] += dy[i] xhat_i */
void zt_vec_rmsnorm_dw(float *dw, const float *dy, const float *x, float rstd, size_t n);

/* Element-wise (no sums: any split of a range gives the same bits). */
/* one head's rotary embedding in place (zt_rope_pair): the pairs (x[i], x[half + i]), i < half, rotated
 * by cos[i], sin[i], or by the inverse angle when inverse */
void zt_vec_rope(float *x, const float *cos, const float *sin, int inverse, size_t half);
/* out[i] = silu(gate[i]) up[i] (zt_silu_e with this file's exp) */
void zt_vec_swiglu(float *out, const float *gate, const float *up, size_t n);
/* dgate[i] = dout[i] up[i] silu'(gate[i]), dup[i] = dout[i] silu(gate[i]) (dgate may be gate, dup up) */
void zt_vec_swiglu_grad(float *dgate, float *dup, const float *gate, const float *up, const float *dout, size_t n);

#endif
