/* opmath.h — the per-element and per-row math of every op, written once.
 * Both the CPU backend (C11) and the CUDA backend (CUDA C++) include this header, so the
 * CPU unit tests check the exact formulas the GPU kernels run. Everything here is
 * `static inline`, branch-light and free of I/O. */
#ifndef ZT_OPMATH_H
#define ZT_OPMATH_H

#include <math.h>

#ifdef __CUDACC__
#define ZT_HD __host__ __device__ __forceinline__
#else
#define ZT_HD static inline
#endif

/* GELU, tanh approximation (Hendrycks & Gimpel 2016; GPT-2's "gelu_new"):
 *   gelu(x) = 0.5 x (1 + tanh(s (x + 0.044715 x^3))),  s = sqrt(2/pi)
 * (the CUDA kernels' form; the CPU backend computes the same function as x sigmoid(2 s (x + ...))
 * in its own vector code, backend/cpu_kernels.c)                                               */
#define ZT_GELU_SCALE 0.7978845608028654f
ZT_HD float zt_gelu(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(ZT_GELU_SCALE * (x + cube)));
}
/* d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) s (1 + 3 * 0.044715 x^2),  t = tanh(s (x + 0.044715 x^3)) */
ZT_HD float zt_gelu_grad(float x) {
    float cube = 0.044715f * x * x * x;
    float t = tanhf(ZT_GELU_SCALE * (x + cube));
    float sech2 = 1.0f - t * t;
    return 0.5f * (1.0f + t) + 0.5f * x * sech2 * ZT_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

/* LayerNorm (Ba et al. 2016) with eps = 1e-5 as in GPT-2:
 *   y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps),  var is the biased variance. */
#define ZT_LN_EPS 1e-5f
ZT_HD float zt_rstd(float var) { return 1.0f / sqrtf(var + ZT_LN_EPS); }

/* LayerNorm backward for one row, given xhat_i = (x_i - mean) * rstd and dnorm_i = dy_i * w_i:
 *   dx_i = rstd * (dnorm_i - mean(dnorm) - xhat_i * mean(dnorm * xhat))                        */
ZT_HD float zt_layernorm_dx(float dnorm, float xhat, float rstd, float dnorm_mean, float dnorm_xhat_mean) {
    return rstd * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
}

/* RMSNorm (Zhang & Sennrich 2019), eps from the model (rms_norm_eps):
 *   rstd = 1 / sqrt(mean(x^2) + eps),  xhat = x rstd,  y = xhat w   (the product in that order)
 * backward for one row, dxhat_i = dy_i w_i:  dx_i = rstd (dxhat_i - xhat_i mean(dxhat xhat)) */
ZT_HD float zt_rmsnorm_rstd(float mean_sq, float eps) { return 1.0f / sqrtf(mean_sq + eps); }
ZT_HD float zt_rmsnorm_dx(float dxhat, float xhat, float rstd, float dxhat_xhat_mean) {
    return rstd * (dxhat - xhat * dxhat_xhat_mean);
}

/* Rotary embedding of one pair (x0, x1) = (x_i, x_{i+HD/2}) by the angle whose cosine and sine are c, s:
 *   (x0 c - x1 s,  x1 c + x0 s), each a fused multiply-add of the other product, so the CPU's vector
 *   paths and the GPU compute the same bits. The inverse rotation is this one with -s (exact). */
ZT_HD void zt_rope_pair(float *y0, float *y1, float x0, float x1, float c, float s) {
    *y0 = fmaf(x0, c, -(x1 * s));
    *y1 = fmaf(x1, c, x0 * s);
}

/* SiLU (Elfwing et al. 2018; SwiGLU's gate), from e = exp(-x):
 *   sigmoid(x) = 1 / (1 + e),  silu(x) = x sigmoid(x),  silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x)))
 * The _e forms take the exp from the caller (the CPU's own vector exp, backend/cpu_kernels.c); zt_silu and
 * zt_silu_grad use expf. Very negative x: e is inf or huge, sigmoid 0 or tiny, silu -0 or tiny. */
ZT_HD float zt_silu_e(float x, float e) { return x * (1.0f / (1.0f + e)); }
ZT_HD float zt_silu_grad_e(float x, float e) {
    float s = 1.0f / (1.0f + e);
    return s * (1.0f + x * (1.0f - s));
}
ZT_HD float zt_silu(float x) { return zt_silu_e(x, expf(-x)); }
ZT_HD float zt_silu_grad(float x) { return zt_silu_grad_e(x, expf(-x)); }

/* AdamW (Loshchilov & Hutter 2019, decoupled weight decay), one element, bias-corrected:
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p = p - lr * ( (m / bc1) / (sqrt(v / bc2) + eps) + wd * p ),  bc_k = 1 - b_k^t
 * g arrives already multiplied by the grad scale (clip coefficient / loss-scale inverse).
 * Without bias correction (optimizer.params.bias_correction false) the caller passes bc_k = 1.
 * This is PyTorch's torch.optim.AdamW update, term for term. */
typedef struct zt_adam_step {
    float lr, beta1, beta2, eps, weight_decay;
    float bias_correction1, bias_correction2; /* 1 - beta^t */
    float grad_scale;                         /* multiplies every gradient before use */
} zt_adam_step;

ZT_HD void zt_adamw_element(float *p, float *m, float *v, float g, const zt_adam_step *s) {
    g *= s->grad_scale;
    float mi = s->beta1 * *m + (1.0f - s->beta1) * g;
    float vi = s->beta2 * *v + (1.0f - s->beta2) * g * g;
    float mhat = mi / s->bias_correction1;
    float vhat = vi / s->bias_correction2;
    *m = mi;
    *v = vi;
    *p -= s->lr * (mhat / (sqrtf(vhat) + s->eps) + s->weight_decay * *p);
}

/* bf16 <-> fp32 with round-to-nearest-even (what cuBLAS and PyTorch do). */
ZT_HD unsigned short zt_f32_to_bf16_bits(float f) {
    union { float f; unsigned int u; } x;
    x.f = f;
    if ((x.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x.u >> 16) | 0x40u); /* NaN stays NaN */
    unsigned int rounding = 0x7fffu + ((x.u >> 16) & 1u);
    return (unsigned short)((x.u + rounding) >> 16);
}
ZT_HD float zt_bf16_bits_to_f32(unsigned short h) {
    union { float f; unsigned int u; } x;
    x.u = ((unsigned int)h) << 16;
    return x.f;
}

/* IEEE binary16 <-> fp32 with round-to-nearest-even (F16C's vcvtps2ph, CUDA's __float2half_rn). */
ZT_HD unsigned short zt_f32_to_f16_bits(float f) {
    union { float f; unsigned int u; } x;
    x.f = f;
    unsigned int sign = (x.u >> 16) & 0x8000u, a = x.u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN stays (quiet) NaN */
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* >= 65520 (the tie above 65504) -> inf */
    if (a >= 0x38800000u) {                                         /* normal half: >= 2^-14 */
        unsigned int h = ((a >> 23) - 127 + 15) << 10 | ((a & 0x7fffffu) >> 13);
        unsigned int rem = a & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is correct */
        return (unsigned short)(sign | h);
    }
    if (a <= 0x33000000u) return (unsigned short)sign; /* <= 2^-25: the tie at 2^-25 rounds to even (zero) */
    /* subnormal half: value / 2^-24 = mant * 2^(e - 126), e = biased fp32 exponent (102..112) */
    unsigned int e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
    unsigned int shift = 126 - e; /* 14..24 */
    unsigned int h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) h++; /* 0x3ff + 1 = 0x400 is the smallest normal */
    return (unsigned short)(sign | h);
}
ZT_HD float zt_f16_bits_to_f32(unsigned short h) {
    unsigned int sign = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        u = sign | ((e - 15 + 127) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else { /* subnormal: normalise */
        int shift = 0;
        while (!(m & 0x400u)) { m <<= 1; shift++; }
        u = sign | ((unsigned int)(127 - 15 + 1 - shift) << 23) | ((m & 0x3ffu) << 13);
    }
    union { unsigned int u; float f; } x;
    x.u = u;
    return x.f;
}

#endif
