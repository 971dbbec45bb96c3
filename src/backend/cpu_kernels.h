/* cpu_kernels.h — the CPU backend's vector math at the CPU's widest SIMD: exp and its row sums
 * (the softmaxes), GELU and its gradient, the sum of squares.
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

/* e[i] = exp(x[i] - shift) for i < n (e may be x) */
void zt_vec_exp(float *e, const float *x, float shift, size_t n);
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

#endif
